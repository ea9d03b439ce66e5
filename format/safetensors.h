#pragma once
// safetensors, the checkpoint format of the Hugging Face ecosystem, read as
// hostile input and written the way its reference writer does.
//
// A file is an 8-byte little-endian header length N, N bytes of JSON, and a
// data section. The JSON maps each tensor name to
// {"dtype": "F32", "shape": [2, 3], "data_offsets": [BEGIN, END]}, offsets
// relative to the data section; the optional key "__metadata__" maps strings
// to strings. Tensor data is little-endian and row-major. The tensors must
// cover the data section exactly: no overlaps, no gaps, nothing after the
// last one.
//
// This part knows nothing of devices or RPC: the daemon (server state and
// checkpoints) and tensorctl (put/get) both use it. Its dtype is the file's
// and is converted at each user's edge.
//
// Threads: plain functions over plain data, callable from any thread.

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace tensord::safetensors {

// The file's dtypes that tensord can hold. Others ("F64", "I8" ...) are
// refused by name.
enum class DType : uint8_t { F32, F16, BF16, I32, I64, U8, Bool };

std::string_view dtypeName(DType dtype);  // "F32", "F16", "BF16", "I32", "I64", "U8", "BOOL"
std::optional<DType> parseDType(std::string_view name);
uint32_t dtypeSize(DType dtype);  // bytes per element

// Largest header accepted (the reference implementation's limit): a bigger
// length prefix is a broken or hostile file, not a model.
inline constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// Bytes of the length prefix before the JSON header.
inline constexpr uint64_t kPrefixBytes = 8;

// A file that does not follow the format. The message names the file, the
// tensor where there is one, and the problem:
// "model.safetensors: tensor 'w': shape [2, 3] of F32 needs 24 bytes; data_offsets [0, 20] hold 20".
class FormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct TensorEntry {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // data_offsets, relative to the data section
  uint64_t end = 0;

  uint64_t bytes() const { return end - begin; }
};

struct Header {
  std::vector<TensorEntry> tensors;             // in data order (by begin offset)
  std::map<std::string, std::string> metadata;  // "__metadata__"
  uint64_t dataOffset = 0;                      // where the data section starts in the file
  uint64_t dataBytes = 0;                       // its length

  const TensorEntry* find(std::string_view name) const;
};

// numel * element size, or nullopt when a dim is negative or the product
// does not fit in 64 bits.
std::optional<uint64_t> byteSize(DType dtype, const std::vector<int64_t>& shape);

// Parses and validates header JSON (trailing spaces allowed) for a data
// section of `dataBytes`: every entry's dtype known, shape and byte count
// agreeing, offsets in range and the tensors covering the data section
// exactly; names unique; metadata strings only. Throws FormatError
// prefixed with `file`.
Header parseHeader(std::string_view json, uint64_t dataBytes, std::string_view file);

// Reads the length prefix and the header of the open file `fd` (positioned
// reads; the file offset is left alone) and validates them against the
// file's size. Throws FormatError naming `file`, also for read errors.
Header readHeader(int fd, std::string_view file);

// The bytes a writer puts before the data section: the length prefix and
// the JSON header, padded with spaces so that the data section starts at a
// multiple of 8. Assigns each tensor's begin/end in the order given; with
// sortForWriting's order every tensor is aligned to its element size.
// Throws FormatError (a duplicate or reserved name, a shape whose size
// overflows).
std::string encodeHeader(std::vector<TensorEntry>& tensors, const std::map<std::string, std::string>& metadata);

// The reference writer's order: larger elements first, then by name.
void sortForWriting(std::vector<TensorEntry>& tensors);

}  // namespace tensord::safetensors
