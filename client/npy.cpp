// .npy reading and writing.

#include "client/npy.h"

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>

namespace tensord::npy {

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;
constexpr size_t kAlignment = 64;

struct DescrEntry {
  std::string_view descr;
  DType dtype;
};
constexpr DescrEntry kDescrs[] = {
    {"<f4", DType::F32}, {"<f2", DType::F16}, {"<i4", DType::I32},
    {"<i8", DType::I64}, {"|u1", DType::U8},  {"|b1", DType::Bool},
};

[[noreturn]] void fail(std::string_view name, const std::string& problem) {
  throw NpyError(std::string(name) + ": " + problem);
}

std::string shapeTuple(const Shape& shape) {
  std::string out = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(shape[i]);
  }
  if (shape.size() == 1) out += ",";
  return out + ")";
}

// The header dict, a Python literal like
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// parsed strictly enough to reject anything NumPy would not have written.
class DictParser {
 public:
  DictParser(std::string_view text, std::string_view name) : text_(text), name_(name) {}

  struct Result {
    std::string descr;
    bool fortranOrder = false;
    Shape shape;
  };

  Result parse() {
    std::optional<std::string> descr;
    std::optional<bool> fortran;
    std::optional<Shape> shape;
    skipSpace();
    expect('{');
    for (;;) {
      skipSpace();
      if (peek() == '}') break;
      std::string key = parseString("a key");
      skipSpace();
      expect(':');
      skipSpace();
      if (key == "descr") {
        if (peek() == '[') bad("structured dtypes (a list as 'descr') are not supported");
        descr = parseString("the 'descr' string");
      } else if (key == "fortran_order") {
        fortran = parseBool();
      } else if (key == "shape") {
        shape = parseShape();
      } else {
        bad("unexpected key '" + key + "'");
      }
      skipSpace();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() != '}') bad("expected ',' or '}'");
    }
    ++pos_;
    skipSpace();
    if (pos_ != text_.size()) bad("unexpected text after '}'");
    if (!descr) bad("no 'descr' key");
    if (!fortran) bad("no 'fortran_order' key");
    if (!shape) bad("no 'shape' key");
    return {*descr, *fortran, *shape};
  }

 private:
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }

  void skipSpace() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }

  void expect(char c) {
    if (peek() != c) bad(std::string("expected '") + c + "'");
    ++pos_;
  }

  std::string parseString(std::string_view what) {
    char quote = peek();
    if (quote != '\'' && quote != '"') bad("expected " + std::string(what));
    size_t end = text_.find(quote, pos_ + 1);
    if (end == std::string_view::npos) bad("unterminated string");
    std::string out(text_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return out;
  }

  bool parseBool() {
    if (text_.substr(pos_, 4) == "True") {
      pos_ += 4;
      return true;
    }
    if (text_.substr(pos_, 5) == "False") {
      pos_ += 5;
      return false;
    }
    bad("expected True or False for 'fortran_order'");
  }

  Shape parseShape() {
    expect('(');
    Shape shape;
    for (;;) {
      skipSpace();
      if (peek() == ')') break;
      if (!std::isdigit(static_cast<unsigned char>(peek()))) bad("expected a non-negative integer in 'shape'");
      int64_t value = 0;
      while (std::isdigit(static_cast<unsigned char>(peek()))) {
        int digit = peek() - '0';
        if (value > (std::numeric_limits<int64_t>::max() - digit) / 10) bad("a dim in 'shape' is too large");
        value = value * 10 + digit;
        ++pos_;
      }
      if (peek() == 'L') ++pos_;  // Python 2 longs
      shape.push_back(value);
      skipSpace();
      if (peek() == ',') {
        ++pos_;
        continue;
      }
      if (peek() != ')') bad("expected ',' or ')' in 'shape'");
    }
    ++pos_;
    return shape;
  }

  [[noreturn]] void bad(const std::string& problem) const {
    std::string shown(text_.substr(0, 160));
    while (!shown.empty() && std::isspace(static_cast<unsigned char>(shown.back()))) shown.pop_back();
    fail(name_, "malformed header: " + problem + " at offset " + std::to_string(pos_) + " of \"" + shown + "\"");
  }

  std::string_view text_;
  std::string_view name_;
  size_t pos_ = 0;
};

DType dtypeOfDescr(const std::string& descr, std::string_view name) {
  for (const auto& entry : kDescrs) {
    if (entry.descr == descr) return entry.dtype;
  }
  if (!descr.empty() && descr[0] == '>') {
    fail(name, "dtype '" + descr + "' is big-endian, which is not supported; supported: " + supportedDescrs() +
                   " (convert with arr.astype(arr.dtype.newbyteorder('<')))");
  }
  fail(name, "dtype '" + descr + "' is not supported; supported: " + supportedDescrs());
}

struct Header {
  DType dtype = DType::F32;
  Shape shape;
  size_t dataOffset = 0;
  uint64_t dataBytes = 0;
};

// Length of the preamble (magic, version, header length) of `file`'s version,
// after checking magic and version. `file` holds at least the first 8 bytes.
size_t preambleSize(std::span<const std::byte> file, std::string_view name) {
  if (file.size() < kMagicSize + 2 || std::memcmp(file.data(), kMagic, kMagicSize) != 0) {
    fail(name, "not a .npy file (bad magic: expected \\x93NUMPY at the start)");
  }
  int major = int(file[6]);
  int minor = int(file[7]);
  if (minor != 0 || major < 1 || major > 3) {
    fail(name, "unsupported .npy format version " + std::to_string(major) + "." + std::to_string(minor) +
                   " (supported: 1.0, 2.0, 3.0)");
  }
  return major == 1 ? 10 : 12;
}

// Total header size (preamble + dict) from a file prefix of preambleSize bytes.
size_t headerEnd(std::span<const std::byte> file, std::string_view name) {
  size_t preamble = preambleSize(file, name);
  if (file.size() < preamble) fail(name, "truncated: the file ends inside the .npy preamble");
  auto byteAt = [&](size_t i) { return size_t(std::to_integer<uint8_t>(file[i])); };
  size_t length = byteAt(8) | (byteAt(9) << 8);
  if (preamble == 12) length |= (byteAt(10) << 16) | (byteAt(11) << 24);
  return preamble + length;
}

// Parses magic, version and dict. `file` holds at least headerEnd bytes;
// `fileSize` is the size of the whole file.
Header parseHeader(std::span<const std::byte> file, uint64_t fileSize, std::string_view name) {
  size_t preamble = preambleSize(file, name);
  size_t end = headerEnd(file, name);
  if (end > fileSize || end > file.size()) {
    fail(name, "truncated: the header length says " + std::to_string(end - preamble) + " bytes but the file has " +
                   std::to_string(fileSize - std::min<uint64_t>(fileSize, preamble)) + " after the preamble");
  }
  std::string_view text(reinterpret_cast<const char*>(file.data()) + preamble, end - preamble);
  auto dict = DictParser(text, name).parse();
  if (dict.fortranOrder) fail(name, "Fortran-order arrays are not supported; save with np.ascontiguousarray");
  Header header;
  header.dtype = dtypeOfDescr(dict.descr, name);
  header.shape = dict.shape;
  header.dataOffset = end;
  uint64_t numel = 1;
  for (int64_t d : header.shape) {
    if (d != 0 && numel > std::numeric_limits<uint64_t>::max() / 16 / uint64_t(d)) {
      fail(name, "shape " + shapeTuple(header.shape) + " is too large");
    }
    numel *= uint64_t(d);
  }
  header.dataBytes = numel * dtypeSize(header.dtype);
  uint64_t present = fileSize - end;
  if (present != header.dataBytes) {
    fail(name, std::string("data is ") + (present < header.dataBytes ? "shorter" : "longer") +
                   " than the shape says: shape " + shapeTuple(header.shape) + " of '" + dict.descr + "' needs " +
                   std::to_string(header.dataBytes) + " bytes; the file has " + std::to_string(present));
  }
  return header;
}

std::string errnoText() { return std::strerror(errno); }

}  // namespace

std::string_view descrOf(DType dtype) {
  for (const auto& entry : kDescrs) {
    if (entry.dtype == dtype) return entry.descr;
  }
  throw NpyError("dtype " + std::string(dtypeName(dtype)) + " cannot be stored in .npy (NumPy has no such dtype)");
}

std::string supportedDescrs() {
  std::string out;
  for (const auto& entry : kDescrs) {
    if (!out.empty()) out += ", ";
    out += "'" + std::string(entry.descr) + "'";
  }
  return out;
}

Array parse(std::span<const std::byte> file, std::string_view name) {
  Header header = parseHeader(file, file.size(), name);
  Array out;
  out.dtype = header.dtype;
  out.shape = std::move(header.shape);
  auto data = file.subspan(header.dataOffset);
  out.data.assign(data.begin(), data.end());
  return out;
}

Array read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open: " + errnoText());
  in.seekg(0, std::ios::end);
  auto size = in.tellg();
  if (size < 0) fail(path, "cannot read: " + errnoText());
  uint64_t fileSize = uint64_t(size);
  in.seekg(0);

  // Preamble, then the dict, then the data straight into the array.
  std::vector<std::byte> head(std::min<uint64_t>(fileSize, 12));
  in.read(reinterpret_cast<char*>(head.data()), std::streamsize(head.size()));
  if (!in) fail(path, "cannot read: " + errnoText());
  size_t end = headerEnd(head, path);
  if (end > fileSize) parseHeader(head, fileSize, path);  // reports the truncation
  size_t have = head.size();
  head.resize(end);
  if (end > have) {
    in.read(reinterpret_cast<char*>(head.data() + have), std::streamsize(end - have));
    if (!in) fail(path, "cannot read: " + errnoText());
  }
  if (end < have) in.seekg(std::streamoff(end));
  Header header = parseHeader(head, fileSize, path);

  Array out;
  out.dtype = header.dtype;
  out.shape = std::move(header.shape);
  out.data.resize(header.dataBytes);
  in.read(reinterpret_cast<char*>(out.data.data()), std::streamsize(out.data.size()));
  if (!in) fail(path, "cannot read the data: " + errnoText());
  return out;
}

std::string header(DType dtype, const Shape& shape) {
  std::string dict =
      "{'descr': '" + std::string(descrOf(dtype)) + "', 'fortran_order': False, 'shape': " + shapeTuple(shape) + ", }";
  size_t preamble = 10;
  size_t total = (preamble + dict.size() + 1 + kAlignment - 1) / kAlignment * kAlignment;
  if (total - preamble > 0xffff) {
    preamble = 12;
    total = (preamble + dict.size() + 1 + kAlignment - 1) / kAlignment * kAlignment;
  }
  size_t length = total - preamble;
  dict.append(length - dict.size() - 1, ' ');
  dict += '\n';

  std::string out(kMagic, kMagicSize);
  out += char(preamble == 10 ? 1 : 2);
  out += char(0);
  out += char(length & 0xff);
  out += char((length >> 8) & 0xff);
  if (preamble == 12) {
    out += char((length >> 16) & 0xff);
    out += char((length >> 24) & 0xff);
  }
  return out + dict;
}

void write(const std::string& path, DType dtype, const Shape& shape, std::span<const std::byte> data) {
  uint64_t numel = 1;
  for (int64_t d : shape) numel *= uint64_t(d);
  std::string head = header(dtype, shape);
  if (numel * dtypeSize(dtype) != data.size()) {
    fail(path, "cannot write: shape " + shapeTuple(shape) + " of " + std::string(dtypeName(dtype)) + " needs " +
                   std::to_string(numel * dtypeSize(dtype)) + " bytes; got " + std::to_string(data.size()));
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail(path, "cannot create: " + errnoText());
  out.write(head.data(), std::streamsize(head.size()));
  out.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size()));
  out.close();
  if (!out) fail(path, "cannot write: " + errnoText());
}

}  // namespace tensord::npy
