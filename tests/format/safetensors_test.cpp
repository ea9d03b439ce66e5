// safetensors headers: what the writer produces, and what the reader refuses.

#include "format/safetensors.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>

namespace tensord::safetensors {
namespace {

// The message of the FormatError `f` throws ("" if none).
template <typename F>
std::string errorOf(F&& f) {
  try {
    f();
  } catch (const FormatError& e) {
    return e.what();
  }
  return "";
}

std::string withPrefix(const std::string& json) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char((uint64_t(json.size()) >> (8 * i)) & 0xff);
  return out + json;
}

class TempFile {
 public:
  explicit TempFile(const std::string& bytes) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "tensord-st-XXXXXX").string();
    fd_ = ::mkstemp(tmpl.data());
    path_ = tmpl;
    EXPECT_EQ(::write(fd_, bytes.data(), bytes.size()), ssize_t(bytes.size()));
  }
  ~TempFile() {
    ::close(fd_);
    std::filesystem::remove(path_);
  }
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
  std::filesystem::path path_;
};

TEST(Safetensors, WriterOutputParsesBackWithAlignedData) {
  std::vector<TensorEntry> tensors = {
      {"mask", DType::Bool, {3}}, {"w", DType::F32, {2, 3}},     {"ids", DType::I64, {2}},
      {"h", DType::BF16, {5}},    {"empty", DType::F16, {0, 4}}, {"scalar", DType::I32, {}},
  };
  sortForWriting(tensors);
  const std::string prefix = encodeHeader(tensors, {{"format", "pt"}});
  EXPECT_EQ(prefix.size() % 8, 0u);
  for (const auto& t : tensors) EXPECT_EQ(t.begin % dtypeSize(t.dtype), 0u) << t.name;
  EXPECT_EQ(tensors.front().name, "ids");  // 8-byte elements first

  const uint64_t dataBytes = tensors.back().end;
  const Header header = parseHeader(std::string_view(prefix).substr(8), dataBytes, "x.safetensors");
  ASSERT_EQ(header.tensors.size(), 6u);
  EXPECT_EQ(header.metadata.at("format"), "pt");
  const TensorEntry* w = header.find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, DType::F32);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(w->bytes(), 24u);
  EXPECT_EQ(header.find("scalar")->bytes(), 4u);
  EXPECT_EQ(header.find("empty")->bytes(), 0u);

  TempFile file(prefix + std::string(dataBytes, 'x'));
  const Header read = readHeader(file.fd(), "x.safetensors");
  EXPECT_EQ(read.dataOffset, prefix.size());
  EXPECT_EQ(read.dataBytes, dataBytes);
  EXPECT_EQ(read.tensors.size(), 6u);
}

TEST(Safetensors, ReadsTheSpecExample) {
  // The format's own example, byte for byte as its reference writer pads it.
  const std::string json =
      R"({"test":{"dtype":"I32","shape":[2,2],"data_offsets":[0,16]},"__metadata__":{"foo":"bar"}})";
  const Header header = parseHeader(json + "   ", 16, "spec.safetensors");
  ASSERT_EQ(header.tensors.size(), 1u);
  EXPECT_EQ(header.tensors[0].name, "test");
  EXPECT_EQ(header.metadata.at("foo"), "bar");
}

struct Hostile {
  const char* what;
  std::string json;
  uint64_t dataBytes;
  std::string expected;  // part of the message
};

class HostileHeader : public ::testing::TestWithParam<Hostile> {};

TEST_P(HostileHeader, IsRefusedWithTheFileTensorAndProblem) {
  const Hostile& h = GetParam();
  const std::string message = errorOf([&] { parseHeader(h.json, h.dataBytes, "bad.safetensors"); });
  EXPECT_TRUE(message.starts_with("bad.safetensors: ")) << message;
  EXPECT_NE(message.find(h.expected), std::string::npos) << h.what << ": " << message;
}

INSTANTIATE_TEST_SUITE_P(
    Matrix, HostileHeader,
    ::testing::Values(
        Hostile{"garbage", "{not json", 0, "the header is not valid JSON"},
        Hostile{"not an object", "[1, 2]", 0, "not a JSON object"},
        Hostile{"unknown dtype", R"({"a":{"dtype":"F99","shape":[1],"data_offsets":[0,4]}})", 4,
                "tensor 'a': dtype \"F99\" is not one tensord can hold"},
        Hostile{"dtype not held", R"({"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", 8, "\"F64\""},
        Hostile{"lying shape", R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", 20,
                "tensor 'w': shape [2, 3] of F32 needs 24 bytes; data_offsets [0, 20] hold 20"},
        Hostile{
            "overlap",
            R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},"b":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}})",
            12, "tensor 'b': data_offsets [4, 12] overlap tensor 'a' at [0, 8]"},
        Hostile{
            "gap",
            R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[8,12]}})",
            12, "data bytes [4, 8) belong to no tensor"},
        Hostile{"trailing bytes", R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", 9,
                "the tensors cover only the first 4"},
        Hostile{"past the end", R"({"a":{"dtype":"U8","shape":[16],"data_offsets":[0,16]}})", 8,
                "reach past the data section, which has 8 bytes"},
        Hostile{"reversed offsets", R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[4,0]}})", 4,
                "end before they begin"},
        Hostile{"negative dim", R"({"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}})", 0, "dim 0"},
        Hostile{"overflowing shape", R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})", 0,
                "too large"},
        Hostile{
            "duplicate name",
            R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
            2, "tensor 'a': appears twice"},
        Hostile{"missing key", R"({"a":{"dtype":"U8","shape":[1]}})", 1, "tensor 'a': has no data_offsets"},
        Hostile{"unknown key", R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":1}})", 1, "unknown key 'x'"},
        Hostile{"three offsets", R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}})", 1,
                "expected [BEGIN, END]"},
        Hostile{"metadata not strings", R"({"__metadata__":{"k":1}})", 0, "__metadata__: 'k': expected a string"},
        Hostile{"deep nesting", R"({"a":{"dtype":"U8","shape":[[[1]]],"data_offsets":[0,1]}})", 1, "nests deeper"}));

TEST(Safetensors, FileLevelProblemsAreRefused) {
  {
    TempFile file("abc");
    EXPECT_NE(errorOf([&] { readHeader(file.fd(), "short.safetensors"); }).find("8-byte header length"),
              std::string::npos);
  }
  {
    std::string huge(8, '\0');
    huge[4] = 1;  // 2^32 bytes of header
    TempFile file(huge + "{}");
    EXPECT_NE(errorOf([&] { readHeader(file.fd(), "huge.safetensors"); }).find("exceeds the limit of 100000000"),
              std::string::npos);
  }
  {
    const std::string json = R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})";
    TempFile file(withPrefix(json + "   ").substr(0, 20));  // cut inside the header
    EXPECT_NE(errorOf([&] { readHeader(file.fd(), "cut.safetensors"); }).find("reaches past the end of the file"),
              std::string::npos);
  }
  {
    const std::string json = R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})";
    TempFile file(withPrefix(json) + "ab");  // data cut short
    EXPECT_NE(errorOf([&] { readHeader(file.fd(), "cut.safetensors"); }).find("reach past the data section"),
              std::string::npos);
  }
}

TEST(Safetensors, WriterRefusesNamesTheFormatCannotHold) {
  std::vector<TensorEntry> dup = {{"a", DType::U8, {1}}, {"a", DType::U8, {1}}};
  EXPECT_NE(errorOf([&] { encodeHeader(dup, {}); }).find("appears twice"), std::string::npos);
  std::vector<TensorEntry> reserved = {{"__metadata__", DType::U8, {1}}};
  EXPECT_NE(errorOf([&] { encodeHeader(reserved, {}); }).find("reserved"), std::string::npos);
}

}  // namespace
}  // namespace tensord::safetensors
