// Named tensors written on stop and read back on start: the safetensors
// state file, its metadata, crash leftovers and the earlier format.

#include "server/persistence.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "format/safetensors.h"
#include "tests/server/server_fixture.h"

namespace tensord::server::testing {
namespace {

std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void saveAs(proto::Tensor::Client& tensor, const char* name, kj::WaitScope& waitScope) {
  auto request = tensor.saveRequest();
  request.setName(name);
  request.send().wait(waitScope);
}

// The state file's header, read with the format's own reader.
safetensors::Header stateHeader(const std::filesystem::path& stateDir) {
  const std::string bytes = slurp(stateDir / kStateFile);
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | static_cast<unsigned char>(bytes[size_t(i)]);
  auto header = safetensors::parseHeader(std::string_view(bytes).substr(8, length), bytes.size() - 8 - length, "state");
  header.dataOffset = 8 + length;
  return header;
}

class PersistenceTest : public ServerFixture {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("tensord-persist-test-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    start();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path dir_;
};

TEST_F(PersistenceTest, NamedTensorsRoundTripThroughTheStateFile) {
  auto s = session();
  const auto data = pattern(200'001, 9);  // spans several 64 KiB slots
  auto big = upload(s, compute::DType::U8, {200'001}, data);
  auto small = uploadFloats(s, {2, 2}, {1, 2, 3, 4});
  auto unnamed = uploadFloats(s, {1}, {5});
  saveAs(big, "big", waitScope());
  saveAs(big, "alias", waitScope());
  saveAs(small, "small", waitScope());

  std::filesystem::create_directories(dir_ / "one");
  saveNamedTensors(*state_, dir_ / "one", waitScope());
  const auto header = stateHeader(dir_ / "one");
  ASSERT_EQ(header.tensors.size(), 2u);  // two tensors; the unnamed one is not kept
  // Stored once under its first name; the other name and the owners are metadata.
  const auto* stored = header.find("alias");
  ASSERT_NE(stored, nullptr);
  EXPECT_EQ(header.metadata.at("format"), "tensord-state-1");
  EXPECT_EQ(header.metadata.at("alias:big"), "alias");
  EXPECT_EQ(header.metadata.at("owner:alias"), "tester");
  EXPECT_EQ(header.metadata.at("owner:small"), "tester");
  const std::string file = slurp(dir_ / "one" / kStateFile);
  EXPECT_EQ(0, std::memcmp(file.data() + header.dataOffset + stored->begin, data.data(), data.size()));

  // A fresh daemon state on the same device loads them back...
  ServerState second(config_, *log_, *engine_, io_.provider->getTimer());
  loadNamedTensors(second, dir_ / "one", waitScope());
  EXPECT_EQ(second.registry.namedCount(), 3u);
  EXPECT_EQ(second.registry.liveCount(), 2u);
  auto restored = second.registry.findNamed("alias");
  ASSERT_NE(restored, nullptr);
  EXPECT_EQ(restored, second.registry.findNamed("big"));
  EXPECT_EQ(restored->owner, "tester");
  EXPECT_EQ(restored->desc.shape, (compute::Shape{200'001}));

  // ...and saving them again writes the same file.
  std::filesystem::create_directories(dir_ / "two");
  saveNamedTensors(second, dir_ / "two", waitScope());
  EXPECT_EQ(slurp(dir_ / "two" / kStateFile), file);
}

TEST_F(PersistenceTest, ALeftoverTemporaryFileIsIgnoredAndReplaced) {
  auto s = session();
  auto t = uploadFloats(s, {3}, {1, 2, 3});
  saveAs(t, "kept", waitScope());
  saveNamedTensors(*state_, dir_, waitScope());
  // What a save cut off by a crash leaves next to the previous set.
  std::ofstream(dir_ / "tensors.safetensors.tmp") << "half a file";

  ServerState second(config_, *log_, *engine_, io_.provider->getTimer());
  loadNamedTensors(second, dir_, waitScope());
  EXPECT_NE(second.registry.findNamed("kept"), nullptr);
  saveNamedTensors(second, dir_, waitScope());
  EXPECT_FALSE(std::filesystem::exists(dir_ / "tensors.safetensors.tmp"));
  EXPECT_NE(stateHeader(dir_).find("kept"), nullptr);
}

TEST_F(PersistenceTest, NoNamedTensorsWritesAnEmptySet) {
  auto s = session();
  auto t = uploadFloats(s, {1}, {1});
  saveAs(t, "gone", waitScope());
  saveNamedTensors(*state_, dir_, waitScope());
  auto request = s.deleteTensorRequest();
  request.setName("gone");
  request.send().wait(waitScope());
  saveNamedTensors(*state_, dir_, waitScope());
  EXPECT_TRUE(stateHeader(dir_).tensors.empty());
}

TEST_F(PersistenceTest, AStateFileThatDoesNotParseIsKeptAside) {
  std::ofstream(dir_ / kStateFile) << "not a safetensors file";
  loadNamedTensors(*state_, dir_, waitScope());
  EXPECT_EQ(state_->registry.liveCount(), 0u);
  EXPECT_FALSE(std::filesystem::exists(dir_ / kStateFile));
  EXPECT_EQ(slurp(dir_ / "tensors.safetensors.corrupt"), "not a safetensors file");
}

TEST_F(PersistenceTest, TensorsWithoutAnOwnerAreSkipped) {
  // A safetensors file tensord did not write: no owners in its metadata.
  std::vector<safetensors::TensorEntry> tensors = {{"x", safetensors::DType::U8, {2}}};
  const std::string prefix = safetensors::encodeHeader(tensors, {});
  std::ofstream(dir_ / kStateFile, std::ios::binary) << prefix << "ab";
  loadNamedTensors(*state_, dir_, waitScope());
  EXPECT_EQ(state_->registry.findNamed("x"), nullptr);
}

TEST_F(PersistenceTest, TheEarlierFormatIsReadAndReplaced) {
  const auto legacy = dir_ / "tensors";
  std::filesystem::create_directories(legacy);
  std::ofstream(legacy / "1.bin") << "1234";  // 4 bytes, manifest says 8
  std::ofstream(legacy / "2.bin") << "abcd";
  std::ofstream(legacy / "manifest.json") << R"([
    {"names": ["short"], "owner": "o", "dtype": "f32", "shape": [2], "bytes": 8, "file": "1.bin"},
    {"names": ["ok", "ok2"], "owner": "o", "dtype": "u8", "shape": [4], "bytes": 4, "file": "2.bin"},
    {"names": ["odd"], "owner": "o", "dtype": "f99", "shape": [1], "bytes": 4, "file": "2.bin"},
    {"names": ["escape"], "owner": "o", "dtype": "u8", "shape": [4], "bytes": 4, "file": "../2.bin"}
  ])";
  loadNamedTensors(*state_, dir_, waitScope());
  EXPECT_EQ(state_->registry.findNamed("short"), nullptr);
  EXPECT_EQ(state_->registry.findNamed("odd"), nullptr);
  EXPECT_EQ(state_->registry.findNamed("escape"), nullptr);
  auto ok = state_->registry.findNamed("ok");
  ASSERT_NE(ok, nullptr);
  EXPECT_EQ(ok, state_->registry.findNamed("ok2"));
  EXPECT_EQ(ok->owner, "o");
  EXPECT_EQ(state_->registry.liveCount(), 1u);

  // The next save writes safetensors and drops the old directory.
  saveNamedTensors(*state_, dir_, waitScope());
  EXPECT_FALSE(std::filesystem::exists(legacy));
  const auto header = stateHeader(dir_);
  ASSERT_NE(header.find("ok"), nullptr);
  EXPECT_EQ(header.metadata.at("owner:ok"), "o");
  EXPECT_EQ(header.metadata.at("alias:ok2"), "ok");
}

TEST_F(PersistenceTest, AStopCutOffBetweenTheEarlierFormatsRenamesKeepsThePreviousSet) {
  const auto old = dir_ / "tensors.old";
  std::filesystem::create_directories(old);
  std::ofstream(old / "1.bin") << "abcd";
  std::ofstream(old / "manifest.json")
      << R"([{"names": ["kept"], "owner": "o", "dtype": "u8", "shape": [4], "bytes": 4, "file": "1.bin"}])";
  loadNamedTensors(*state_, dir_, waitScope());
  EXPECT_NE(state_->registry.findNamed("kept"), nullptr);
}

TEST_F(PersistenceTest, ATensorNamedLikeTheFormatsReservedKeyIsKept) {
  auto s = session();
  auto t = uploadFloats(s, {1}, {7});
  saveAs(t, "__metadata__", waitScope());
  saveNamedTensors(*state_, dir_, waitScope());
  ServerState second(config_, *log_, *engine_, io_.provider->getTimer());
  loadNamedTensors(second, dir_, waitScope());
  EXPECT_NE(second.registry.findNamed("__metadata__"), nullptr);
}

}  // namespace
}  // namespace tensord::server::testing
