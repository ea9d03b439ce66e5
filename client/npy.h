#pragma once
// NumPy .npy files (format versions 1.0, 2.0 and 3.0), C order, little-endian.
// Supported dtypes: '<f4' (f32), '<f2' (f16), '<i4' (i32), '<i8' (i64),
// '|u1' (u8), '|b1' (bool). Internal to tensorctl and the tests.

#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "tensord/client.h"

namespace tensord::npy {

// A problem with a .npy file; the message names the file and the problem.
class NpyError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Array {
  DType dtype = DType::F32;
  Shape shape;
  std::vector<std::byte> data;  // C order, little-endian
};

// The .npy descr of `dtype` ("<f4", ...); throws NpyError for dtypes .npy
// cannot hold (bf16).
std::string_view descrOf(DType dtype);

// The descrs readNpy accepts, for messages: "'<f4', '<f2', ...".
std::string supportedDescrs();

// Parses a whole .npy image; `name` is used in error messages.
Array parse(std::span<const std::byte> file, std::string_view name);

// Reads and parses `path`; a missing or unreadable file is an NpyError too.
Array read(const std::string& path);

// The magic, version, header length and header dict, padded with spaces and
// a final '\n' so that the data starts at a multiple of 64 bytes. Uses
// version 1.0 unless the header needs 2.0's 4-byte length.
std::string header(DType dtype, const Shape& shape);

// Writes `data` (which must match dtype and shape) to `path`.
void write(const std::string& path, DType dtype, const Shape& shape, std::span<const std::byte> data);

}  // namespace tensord::npy
