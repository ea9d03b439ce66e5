#include "tests/integration/npy.h"

#include <cstring>
#include <fstream>
#include <iterator>
#include <regex>
#include <stdexcept>

namespace tensord::testing {

void writeNpyF32(const std::filesystem::path& path, const std::vector<int64_t>& shape, const std::vector<float>& data) {
  std::string dims;
  for (size_t i = 0; i < shape.size(); ++i) dims += (i > 0 ? ", " : "") + std::to_string(shape[i]);
  if (shape.size() == 1) dims += ",";
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  // magic(6) + version(2) + header length(2) + header + '\n' is a multiple of 64.
  size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::ofstream out(path, std::ios::binary);
  out.write("\x93NUMPY\x01\x00", 8);
  uint16_t len = uint16_t(header.size());
  char lenBytes[2] = {char(len & 0xff), char(len >> 8)};
  out.write(lenBytes, 2);
  out << header;
  out.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size() * sizeof(float)));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

NpyF32 readNpyF32(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0)
    throw std::runtime_error(path.string() + ": not .npy");
  size_t headerLen, headerStart;
  if (bytes[6] == 1) {
    headerLen = uint8_t(bytes[8]) | (size_t(uint8_t(bytes[9])) << 8);
    headerStart = 10;
  } else {
    if (bytes.size() < 12) throw std::runtime_error(path.string() + ": truncated header");
    headerLen = 0;
    for (int i = 3; i >= 0; --i) headerLen = (headerLen << 8) | uint8_t(bytes[8 + i]);
    headerStart = 12;
  }
  if (bytes.size() < headerStart + headerLen) throw std::runtime_error(path.string() + ": truncated header");
  std::string header = bytes.substr(headerStart, headerLen);
  if (header.find("'<f4'") == std::string::npos) throw std::runtime_error(path.string() + ": not <f4: " + header);
  if (header.find("'fortran_order': False") == std::string::npos) {
    throw std::runtime_error(path.string() + ": not C order: " + header);
  }
  std::smatch m;
  if (!std::regex_search(header, m, std::regex("'shape': \\(([^)]*)\\)"))) {
    throw std::runtime_error(path.string() + ": no shape: " + header);
  }
  NpyF32 result;
  std::string dims = m[1];
  std::regex num("[0-9]+");
  int64_t count = 1;
  for (auto it = std::sregex_iterator(dims.begin(), dims.end(), num); it != std::sregex_iterator(); ++it) {
    result.shape.push_back(std::stoll(it->str()));
    count *= result.shape.back();
  }
  size_t dataStart = headerStart + headerLen;
  if (bytes.size() - dataStart != size_t(count) * sizeof(float)) {
    throw std::runtime_error(path.string() + ": data size " + std::to_string(bytes.size() - dataStart) +
                             " does not match shape");
  }
  result.data.resize(size_t(count));
  std::memcpy(result.data.data(), bytes.data() + dataStart, size_t(count) * sizeof(float));
  return result;
}

}  // namespace tensord::testing
