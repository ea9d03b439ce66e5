// .npy reading and writing: round trips, layout, and every malformed case.

#include "client/npy.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

namespace tensord::npy {
namespace {

namespace fs = std::filesystem;

class NpyTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tensord_npy_test_" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  std::string writeRaw(const std::string& name, const std::string& bytes) const {
    std::ofstream out(path(name), std::ios::binary);
    out.write(bytes.data(), std::streamsize(bytes.size()));
    return path(name);
  }

  // The message of the NpyError that reading `bytes` as a file gives.
  std::string errorOf(const std::string& bytes) const {
    std::string file = writeRaw("bad.npy", bytes);
    try {
      read(file);
    } catch (const NpyError& e) {
      std::string message = e.what();
      EXPECT_NE(message.find(file), std::string::npos) << "the message should name the file: " << message;
      return message;
    }
    ADD_FAILURE() << "no error";
    return "";
  }

  fs::path dir_;
};

// A v1.0 file with `dict` as its header, padded like NumPy does, then `data`.
std::string v1File(const std::string& dict, const std::string& data) {
  std::string header = dict;
  size_t total = (10 + header.size() + 1 + 63) / 64 * 64;
  header.append(total - 10 - header.size() - 1, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += char(1);
  out += char(0);
  out += char(header.size() & 0xff);
  out += char(header.size() >> 8);
  return out + header + data;
}

std::vector<std::byte> pattern(size_t n) {
  std::vector<std::byte> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = std::byte((i * 37 + 11) & 0xff);
  return out;
}

TEST_F(NpyTest, RoundTripsEverySupportedDtype) {
  struct Case {
    DType dtype;
    std::string descr;
  };
  for (const Case& c : {Case{DType::F32, "<f4"}, Case{DType::F16, "<f2"}, Case{DType::I32, "<i4"},
                        Case{DType::I64, "<i8"}, Case{DType::U8, "|u1"}, Case{DType::Bool, "|b1"}}) {
    SCOPED_TRACE(c.descr);
    Shape shape{3, 5, 2};
    auto data = pattern(30 * dtypeSize(c.dtype));
    if (c.dtype == DType::Bool) {
      for (auto& b : data) b = std::byte(std::to_integer<int>(b) & 1);
    }
    write(path("x.npy"), c.dtype, shape, data);
    Array back = read(path("x.npy"));
    EXPECT_EQ(back.dtype, c.dtype);
    EXPECT_EQ(back.shape, shape);
    EXPECT_EQ(back.data, data);
    EXPECT_EQ(descrOf(c.dtype), c.descr);
    EXPECT_NE(header(c.dtype, shape).find("'descr': '" + c.descr + "'"), std::string::npos);
  }
}

TEST_F(NpyTest, RoundTripsScalarsEmptyAndOneDim) {
  for (const Shape& shape : {Shape{}, Shape{0}, Shape{7}, Shape{2, 0, 3}, Shape{1, 1, 1, 1}}) {
    uint64_t numel = 1;
    for (int64_t d : shape) numel *= uint64_t(d);
    auto data = pattern(numel * 4);
    write(path("s.npy"), DType::F32, shape, data);
    Array back = read(path("s.npy"));
    EXPECT_EQ(back.shape, shape);
    EXPECT_EQ(back.data, data);
  }
}

TEST_F(NpyTest, HeaderIsNumpyShapedAndPaddedTo64Bytes) {
  EXPECT_EQ(header(DType::F32, {2, 3}).substr(10),
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }" + std::string(58, ' ') + "\n");
  EXPECT_NE(header(DType::F32, {7}).find("'shape': (7,)"), std::string::npos);
  EXPECT_NE(header(DType::F32, {}).find("'shape': ()"), std::string::npos);
  for (size_t rank = 0; rank <= 8; ++rank) {
    Shape shape(rank, 123456789);
    std::string h = header(DType::I64, shape);
    EXPECT_EQ(h.size() % 64, 0u) << "rank " << rank;
    EXPECT_EQ(h.back(), '\n');
    EXPECT_EQ(h.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
    size_t length = size_t(uint8_t(h[8])) | (size_t(uint8_t(h[9])) << 8);
    EXPECT_EQ(length + 10, h.size());
  }
}

TEST_F(NpyTest, LargeHeaderUsesVersion2) {
  // A header longer than 65535 bytes needs the 4-byte length of version 2.0.
  Shape shape(30000, 1);
  std::string h = header(DType::F32, shape);
  EXPECT_EQ(h[6], '\x02');
  EXPECT_EQ(h.size() % 64, 0u);
  size_t length = size_t(uint8_t(h[8])) | (size_t(uint8_t(h[9])) << 8) | (size_t(uint8_t(h[10])) << 16) |
                  (size_t(uint8_t(h[11])) << 24);
  EXPECT_EQ(length + 12, h.size());
  write(path("big.npy"), DType::F32, shape, pattern(4));
  EXPECT_EQ(read(path("big.npy")).shape, shape);
}

TEST_F(NpyTest, ReadsVersion2And3Files) {
  for (char version : {'\x02', '\x03'}) {
    std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
    std::string header = dict + std::string(64 - 12 - dict.size() - 1 + 64, ' ') + "\n";
    std::string file = "\x93NUMPY";
    file += version;
    file += '\0';
    file += char(header.size() & 0xff);
    file += char(header.size() >> 8);
    file += '\0';
    file += '\0';
    file += header;
    float values[2] = {1.5f, -2.0f};
    file.append(reinterpret_cast<const char*>(values), sizeof values);
    Array array = read(writeRaw("v.npy", file));
    EXPECT_EQ(array.shape, Shape{2});
    float back[2];
    std::memcpy(back, array.data.data(), sizeof back);
    EXPECT_EQ(back[0], 1.5f);
    EXPECT_EQ(back[1], -2.0f);
  }
}

TEST_F(NpyTest, AcceptsNumpyHeaderVariants) {
  // Keys in any order, double quotes, no trailing comma, Python 2 longs.
  Array array = read(writeRaw(
      "ok.npy", v1File("{\"shape\": (2L, 1L), \"fortran_order\": False, \"descr\": \"<i4\"}", std::string(8, '\1'))));
  EXPECT_EQ(array.dtype, DType::I32);
  EXPECT_EQ(array.shape, (Shape{2, 1}));
}

TEST_F(NpyTest, ParseWorksOnMemory) {
  std::string file = v1File("{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }", "abc");
  Array array = parse(std::as_bytes(std::span(file.data(), file.size())), "mem");
  EXPECT_EQ(array.dtype, DType::U8);
  EXPECT_EQ(array.data.size(), 3u);
  EXPECT_THROW(parse(std::as_bytes(std::span(file.data(), 5)), "mem"), NpyError);
}

TEST_F(NpyTest, BadMagic) {
  EXPECT_NE(errorOf("PK\x03\x04 this is a zip file").find("not a .npy file (bad magic"), std::string::npos);
  EXPECT_NE(errorOf("").find("bad magic"), std::string::npos);
}

TEST_F(NpyTest, UnsupportedVersion) {
  std::string file = v1File("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", "abcd");
  file[6] = '\x04';
  EXPECT_NE(errorOf(file).find("unsupported .npy format version 4.0 (supported: 1.0, 2.0, 3.0)"), std::string::npos);
  file[6] = '\x01';
  file[7] = '\x01';
  EXPECT_NE(errorOf(file).find("version 1.1"), std::string::npos);
}

TEST_F(NpyTest, MalformedHeaderDict) {
  std::string data(4, '\0');
  for (const std::string& dict : {
           std::string("not a dict"),
           std::string("{'descr': '<f4', 'fortran_order': False}"),                          // no shape
           std::string("{'descr': '<f4', 'shape': (1,)}"),                                   // no fortran_order
           std::string("{'fortran_order': False, 'shape': (1,)}"),                           // no descr
           std::string("{'descr': '<f4', 'fortran_order': Nope, 'shape': (1,)}"),            // bad bool
           std::string("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,)}"),          // negative dim
           std::string("{'descr': '<f4', 'fortran_order': False, 'shape': (1,}"),            // unclosed tuple
           std::string("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}"),   // extra key
           std::string("{'descr': '<f4' 'fortran_order': False, 'shape': (1,)}"),            // missing comma
           std::string("{'descr': '<f4, 'fortran_order': False, 'shape': (1,)}"),            // bad quoting
           std::string("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,)}"),  // structured
       }) {
    SCOPED_TRACE(dict);
    EXPECT_NE(errorOf(v1File(dict, data)).find("malformed header: "), std::string::npos);
  }
}

TEST_F(NpyTest, HeaderLongerThanFile) {
  std::string file = v1File("{'descr': '<f4', 'fortran_order': False, 'shape': (), }", "");
  file.resize(40);
  EXPECT_NE(errorOf(file).find("truncated"), std::string::npos);
}

TEST_F(NpyTest, FortranOrder) {
  std::string message =
      errorOf(v1File("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", std::string(16, '\0')));
  EXPECT_NE(message.find("Fortran-order arrays are not supported; save with np.ascontiguousarray"), std::string::npos);
}

TEST_F(NpyTest, UnsupportedDtypeIsNamed) {
  std::string message =
      errorOf(v1File("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", std::string(8, '\0')));
  EXPECT_NE(message.find("dtype '<c8' is not supported; supported: '<f4', '<f2', '<i4', '<i8', '|u1', '|b1'"),
            std::string::npos)
      << message;
  message = errorOf(v1File("{'descr': '<f8', 'fortran_order': False, 'shape': (1,), }", std::string(8, '\0')));
  EXPECT_NE(message.find("dtype '<f8' is not supported"), std::string::npos);
}

TEST_F(NpyTest, BigEndianIsRejected) {
  std::string message =
      errorOf(v1File("{'descr': '>f4', 'fortran_order': False, 'shape': (1,), }", std::string(4, '\0')));
  EXPECT_NE(message.find("dtype '>f4' is big-endian, which is not supported"), std::string::npos) << message;
}

TEST_F(NpyTest, DataShorterOrLongerThanShape) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  std::string shorter = errorOf(v1File(dict, std::string(20, '\0')));
  EXPECT_NE(shorter.find("data is shorter than the shape says: shape (2, 3) of '<f4' needs 24 bytes; the file has 20"),
            std::string::npos)
      << shorter;
  std::string longer = errorOf(v1File(dict, std::string(28, '\0')));
  EXPECT_NE(longer.find("data is longer than the shape says"), std::string::npos) << longer;
}

TEST_F(NpyTest, MissingFile) {
  try {
    read(path("missing.npy"));
    FAIL() << "no error";
  } catch (const NpyError& e) {
    EXPECT_NE(std::string(e.what()).find("missing.npy: cannot open"), std::string::npos) << e.what();
  }
}

TEST_F(NpyTest, Bf16CannotBeWritten) {
  EXPECT_THROW(descrOf(DType::BF16), NpyError);
  EXPECT_THROW(write(path("b.npy"), DType::BF16, {1}, pattern(2)), NpyError);
}

TEST_F(NpyTest, WriteChecksSize) { EXPECT_THROW(write(path("w.npy"), DType::F32, {2}, pattern(4)), NpyError); }

TEST_F(NpyTest, ReadsWhatNumpyWrites) {
  // The exact bytes NumPy 1.24 writes for np.save(f, np.arange(6, dtype='<f4').reshape(2, 3) / 4):
  // its header is padded to 128 bytes (room for growing the shape in place).
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
  std::string file = std::string("\x93NUMPY\x01\x00\x76\x00", 10) + dict + std::string(58, ' ') + "\n";
  ASSERT_EQ(file.size(), 128u);
  const uint8_t data[] = {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, 0x3e, 0x00, 0x00, 0x00, 0x3f,
                          0x00, 0x00, 0x40, 0x3f, 0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0xa0, 0x3f};
  file.append(reinterpret_cast<const char*>(data), sizeof data);
  Array array = read(writeRaw("numpy.npy", file));
  EXPECT_EQ(array.dtype, DType::F32);
  EXPECT_EQ(array.shape, (Shape{2, 3}));
  float values[6];
  std::memcpy(values, array.data.data(), sizeof values);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(values[i], float(i) / 4);
}

}  // namespace
}  // namespace tensord::npy
