#include "format/safetensors.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

namespace tensord::safetensors {
namespace {

using nlohmann::json;

constexpr std::string_view kMetadataKey = "__metadata__";

struct DTypeRow {
  DType dtype;
  std::string_view name;
  uint32_t size;
};
constexpr std::array<DTypeRow, 7> kDTypes = {{
    {DType::F32, "F32", 4},
    {DType::F16, "F16", 2},
    {DType::BF16, "BF16", 2},
    {DType::I32, "I32", 4},
    {DType::I64, "I64", 8},
    {DType::U8, "U8", 1},
    {DType::Bool, "BOOL", 1},
}};

std::string knownDTypes() {
  std::string list;
  for (const auto& row : kDTypes) list += (list.empty() ? "" : ", ") + std::string(row.name);
  return list;
}

// The value as JSON text, shortened so a huge value does not drown the message.
std::string shown(const json& value) {
  std::string text = value.dump(-1, ' ', false, json::error_handler_t::replace);
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

std::string shapeText(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

std::string offsetsText(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + "]";
}

// Names are shown quoted and shortened; a hostile file may hold anything.
std::string nameText(std::string_view name) {
  std::string out = "'";
  for (size_t i = 0; i < name.size() && i < 80; ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    out += c < 0x20 || c == 0x7f ? '?' : char(c);
  }
  return out + (name.size() > 80 ? "...'" : "'");
}

class Problems {
 public:
  explicit Problems(std::string_view file) : file_(file) {}
  [[noreturn]] void fail(const std::string& problem) const { throw FormatError(file_ + ": " + problem); }
  [[noreturn]] void fail(std::string_view tensor, const std::string& problem) const {
    throw FormatError(file_ + ": tensor " + nameText(tensor) + ": " + problem);
  }

 private:
  std::string file_;
};

TensorEntry parseEntry(const std::string& name, const json& value, uint64_t dataBytes, const Problems& problems) {
  if (!value.is_object()) {
    problems.fail(name, "expected {\"dtype\", \"shape\", \"data_offsets\"}, got " + shown(value));
  }
  for (const auto& [key, item] : value.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets") {
      problems.fail(name, "unknown key " + nameText(key) + " (expected dtype, shape, data_offsets)");
    }
  }
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!value.contains(key)) problems.fail(name, std::string("has no ") + key);
  }
  TensorEntry entry;
  entry.name = name;

  const json& dtype = value["dtype"];
  if (!dtype.is_string()) problems.fail(name, "dtype: expected a string such as \"F32\", got " + shown(dtype));
  const auto parsed = parseDType(dtype.get<std::string>());
  if (!parsed) {
    problems.fail(name, "dtype " + shown(dtype) + " is not one tensord can hold (" + knownDTypes() + ")");
  }
  entry.dtype = *parsed;

  const json& shape = value["shape"];
  if (!shape.is_array()) problems.fail(name, "shape: expected a list of dims, got " + shown(shape));
  for (size_t i = 0; i < shape.size(); ++i) {
    const json& dim = shape[i];
    // nlohmann keeps every non-negative integer literal as unsigned.
    if (!dim.is_number_unsigned() || dim.get<uint64_t>() > uint64_t(INT64_MAX)) {
      problems.fail(name, "shape " + shown(shape) + ": dim " + std::to_string(i) +
                              " is not a non-negative integer: " + shown(dim));
    }
    entry.shape.push_back(int64_t(dim.get<uint64_t>()));
  }

  const json& offsets = value["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned()) {
    problems.fail(name, "data_offsets: expected [BEGIN, END] (non-negative integers), got " + shown(offsets));
  }
  entry.begin = offsets[0].get<uint64_t>();
  entry.end = offsets[1].get<uint64_t>();
  if (entry.end < entry.begin) {
    problems.fail(name, "data_offsets " + offsetsText(entry.begin, entry.end) + " end before they begin");
  }
  if (entry.end > dataBytes) {
    problems.fail(name, "data_offsets " + offsetsText(entry.begin, entry.end) +
                            " reach past the data section, which has " + std::to_string(dataBytes) + " bytes");
  }
  const auto bytes = byteSize(entry.dtype, entry.shape);
  if (!bytes)
    problems.fail(name, "shape " + shapeText(entry.shape) + " is too large: its byte size does not fit in 64 bits");
  if (*bytes != entry.bytes()) {
    problems.fail(name, "shape " + shapeText(entry.shape) + " of " + std::string(dtypeName(entry.dtype)) + " needs " +
                            std::to_string(*bytes) + " bytes; data_offsets " + offsetsText(entry.begin, entry.end) +
                            " hold " + std::to_string(entry.bytes()));
  }
  return entry;
}

// The spec asks for a data section that the tensors index entirely: with the
// entries in offset order, each must begin where the previous one ended.
void checkCoverage(const std::vector<TensorEntry>& tensors, uint64_t dataBytes, const Problems& problems) {
  uint64_t covered = 0;
  const TensorEntry* previous = nullptr;
  for (const TensorEntry& t : tensors) {
    if (t.begin < covered) {
      problems.fail(t.name, "data_offsets " + offsetsText(t.begin, t.end) + " overlap tensor " +
                                nameText(previous->name) + " at " + offsetsText(previous->begin, previous->end));
    }
    if (t.begin > covered) {
      problems.fail("data bytes [" + std::to_string(covered) + ", " + std::to_string(t.begin) +
                    ") belong to no tensor (a gap " +
                    (previous ? "between tensor " + nameText(previous->name) + " and " : "before ") + "tensor " +
                    nameText(t.name) + ")");
    }
    covered = t.end;
    if (t.end > t.begin || previous == nullptr) previous = &t;
  }
  if (covered != dataBytes) {
    problems.fail("the data section has " + std::to_string(dataBytes) + " bytes; the tensors cover only the first " +
                  std::to_string(covered) + " (trailing bytes belong to no tensor)");
  }
}

// Positioned read of exactly `n` bytes; false at end of file.
bool readAt(int fd, void* out, uint64_t n, uint64_t offset, const Problems& problems) {
  auto* p = static_cast<char*>(out);
  while (n > 0) {
    const ssize_t got = ::pread(fd, p, n, off_t(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      problems.fail(std::string("cannot read: ") + std::strerror(errno));
    }
    if (got == 0) return false;
    p += got;
    n -= uint64_t(got);
    offset += uint64_t(got);
  }
  return true;
}

}  // namespace

std::string_view dtypeName(DType dtype) {
  for (const auto& row : kDTypes) {
    if (row.dtype == dtype) return row.name;
  }
  return "?";
}

std::optional<DType> parseDType(std::string_view name) {
  for (const auto& row : kDTypes) {
    if (row.name == name) return row.dtype;
  }
  return std::nullopt;
}

uint32_t dtypeSize(DType dtype) {
  for (const auto& row : kDTypes) {
    if (row.dtype == dtype) return row.size;
  }
  return 0;
}

std::optional<uint64_t> byteSize(DType dtype, const std::vector<int64_t>& shape) {
  uint64_t bytes = dtypeSize(dtype);
  bool empty = false;
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
    empty = empty || d == 0;
  }
  if (empty) return 0;
  for (int64_t d : shape) {
    if (__builtin_mul_overflow(bytes, uint64_t(d), &bytes)) return std::nullopt;
  }
  return bytes;
}

const TensorEntry* Header::find(std::string_view name) const {
  for (const auto& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

Header parseHeader(std::string_view text, uint64_t dataBytes, std::string_view file) {
  const Problems problems(file);
  if (text.empty() || text.front() != '{') {
    problems.fail("the header is not a JSON object (it must start with '{')");
  }
  // JSON objects may repeat a key; nlohmann keeps the last. Two tensors of one
  // name would make the file mean two things, so repeats are refused here,
  // and nesting is bounded (object, entry, shape) before anything is built.
  std::set<std::string> seen;
  auto callback = [&](int depth, json::parse_event_t event, json& parsed) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) && depth > 2) {
      problems.fail("the header nests deeper than a safetensors header can");
    }
    if (event == json::parse_event_t::key && depth == 1 && !seen.insert(parsed.get<std::string>()).second) {
      problems.fail(parsed.get<std::string>(), "appears twice in the header");
    }
    return true;
  };
  json root;
  try {
    root = json::parse(text.begin(), text.end(), callback);
  } catch (const json::exception& e) {
    // "[json.exception.parse_error.101] parse error at ..." -> "parse error at ...".
    std::string message = e.what();
    if (const size_t start = message.find("] "); start != std::string::npos) message.erase(0, start + 2);
    problems.fail("the header is not valid JSON: " + message);
  }
  if (!root.is_object()) problems.fail("the header is not a JSON object");

  Header header;
  header.dataBytes = dataBytes;
  for (const auto& [name, value] : root.items()) {
    if (name == kMetadataKey) {
      if (!value.is_object()) problems.fail("__metadata__: expected an object of strings, got " + shown(value));
      for (const auto& [key, item] : value.items()) {
        if (!item.is_string()) {
          problems.fail("__metadata__: " + nameText(key) + ": expected a string, got " + shown(item));
        }
        header.metadata[key] = item.get<std::string>();
      }
      continue;
    }
    header.tensors.push_back(parseEntry(name, value, dataBytes, problems));
  }
  std::sort(header.tensors.begin(), header.tensors.end(), [](const TensorEntry& a, const TensorEntry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  checkCoverage(header.tensors, dataBytes, problems);
  return header;
}

Header readHeader(int fd, std::string_view file) {
  const Problems problems(file);
  struct stat st {};
  if (::fstat(fd, &st) != 0) problems.fail(std::string("cannot stat: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) problems.fail("not a regular file");
  const uint64_t size = uint64_t(st.st_size);
  unsigned char prefix[kPrefixBytes];
  if (size < kPrefixBytes || !readAt(fd, prefix, kPrefixBytes, 0, problems)) {
    problems.fail("the file has " + std::to_string(size) +
                  " bytes; a safetensors file starts with an 8-byte header length");
  }
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | prefix[i];
  if (length > kMaxHeaderBytes) {
    problems.fail("the header length " + std::to_string(length) + " exceeds the limit of " +
                  std::to_string(kMaxHeaderBytes) + " bytes");
  }
  if (length > size - kPrefixBytes) {
    problems.fail("the header length " + std::to_string(length) + " reaches past the end of the file (" +
                  std::to_string(size) + " bytes): truncated?");
  }
  std::string text(length, '\0');
  if (!readAt(fd, text.data(), length, kPrefixBytes, problems))
    problems.fail("the file shrank while its header was read");
  Header header = parseHeader(text, size - kPrefixBytes - length, file);
  header.dataOffset = kPrefixBytes + length;
  return header;
}

std::string encodeHeader(std::vector<TensorEntry>& tensors, const std::map<std::string, std::string>& metadata) {
  json root = json::object();
  if (!metadata.empty()) root[std::string(kMetadataKey)] = metadata;
  uint64_t offset = 0;
  for (TensorEntry& t : tensors) {
    if (t.name == kMetadataKey) throw FormatError("tensor name '__metadata__' is reserved by the format");
    if (root.contains(t.name)) throw FormatError("tensor " + nameText(t.name) + " appears twice");
    const auto bytes = byteSize(t.dtype, t.shape);
    if (!bytes) throw FormatError("tensor " + nameText(t.name) + ": shape " + shapeText(t.shape) + " is too large");
    t.begin = offset;
    t.end = offset + *bytes;
    offset = t.end;
    root[t.name] = {{"dtype", std::string(dtypeName(t.dtype))}, {"shape", t.shape}, {"data_offsets", {t.begin, t.end}}};
  }
  std::string text = root.dump();
  text.append((8 - (kPrefixBytes + text.size()) % 8) % 8, ' ');
  std::string out(kPrefixBytes, '\0');
  for (size_t i = 0; i < kPrefixBytes; ++i) out[i] = char((uint64_t(text.size()) >> (8 * i)) & 0xff);
  return out + text;
}

void sortForWriting(std::vector<TensorEntry>& tensors) {
  std::stable_sort(tensors.begin(), tensors.end(), [](const TensorEntry& a, const TensorEntry& b) {
    const uint32_t sa = dtypeSize(a.dtype), sb = dtypeSize(b.dtype);
    return sa != sb ? sa > sb : a.name < b.name;
  });
}

}  // namespace tensord::safetensors
