// Named tensors written on stop and read back on start.

#include "server/persistence.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/server/server_fixture.h"

namespace tensord::server::testing {
namespace {

std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

class PersistenceTest : public ServerFixture {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("tensord-persist-test-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    start();
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path dir_;
};

TEST_F(PersistenceTest, NamedTensorsRoundTripThroughTheStateDirectory) {
  auto s = session();
  const auto data = pattern(200'001, 9);  // spans several 64 KiB slots
  auto big = upload(s, compute::DType::U8, {200'001}, data);
  auto small = uploadFloats(s, {2, 2}, {1, 2, 3, 4});
  auto unnamed = uploadFloats(s, {1}, {5});
  for (const char* name : {"big", "alias"}) {
    auto request = big.saveRequest();
    request.setName(name);
    request.send().wait(waitScope());
  }
  auto request = small.saveRequest();
  request.setName("small");
  request.send().wait(waitScope());

  saveNamedTensors(*state_, dir_ / "one", waitScope());
  const auto manifest = nlohmann::json::parse(slurp(dir_ / "one" / "tensors" / "manifest.json"));
  ASSERT_EQ(manifest.size(), 2u);  // two tensors; the unnamed one is not kept

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

  // ...and saving them again gives the same bytes.
  saveNamedTensors(second, dir_ / "two", waitScope());
  for (const auto& item : manifest) {
    const std::string file = item["file"];
    const auto again = nlohmann::json::parse(slurp(dir_ / "two" / "tensors" / "manifest.json"));
    bool found = false;
    for (const auto& other : again) {
      if (other["names"] != item["names"]) continue;
      found = true;
      EXPECT_EQ(slurp(dir_ / "one" / "tensors" / file), slurp(dir_ / "two" / "tensors" / std::string(other["file"])));
    }
    EXPECT_TRUE(found) << item.dump();
  }
  const std::string bigFile = slurp(dir_ / "one" / "tensors" / std::string(manifest[0]["file"]));
  EXPECT_EQ(bigFile.size(), data.size());
  EXPECT_EQ(0, std::memcmp(bigFile.data(), data.data(), data.size()));
}

TEST_F(PersistenceTest, AStopCutOffBetweenTheRenamesKeepsThePreviousSet) {
  auto s = session();
  auto t = uploadFloats(s, {3}, {1, 2, 3});
  auto request = t.saveRequest();
  request.setName("kept");
  request.send().wait(waitScope());
  saveNamedTensors(*state_, dir_, waitScope());
  // The state a crash after the first rename leaves: only "tensors.old".
  std::filesystem::rename(dir_ / "tensors", dir_ / "tensors.old");

  ServerState second(config_, *log_, *engine_, io_.provider->getTimer());
  loadNamedTensors(second, dir_, waitScope());
  EXPECT_NE(second.registry.findNamed("kept"), nullptr);

  // The next clean save replaces it with a complete "tensors".
  saveNamedTensors(second, dir_, waitScope());
  EXPECT_TRUE(std::filesystem::exists(dir_ / "tensors" / "manifest.json"));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "tensors.old"));
}

TEST_F(PersistenceTest, NoNamedTensorsLeavesNothingBehind) {
  std::filesystem::create_directories(dir_ / "tensors");
  std::ofstream(dir_ / "tensors" / "manifest.json") << "[]";
  saveNamedTensors(*state_, dir_, waitScope());
  EXPECT_FALSE(std::filesystem::exists(dir_ / "tensors"));
}

TEST_F(PersistenceTest, BrokenSavedTensorsAreSkipped) {
  std::filesystem::create_directories(dir_ / "tensors");
  std::ofstream(dir_ / "tensors" / "1.bin") << "1234";  // 4 bytes, manifest says 8
  std::ofstream(dir_ / "tensors" / "2.bin") << "abcd";
  std::ofstream(dir_ / "tensors" / "manifest.json") << R"([
    {"names": ["short"], "owner": "o", "dtype": "f32", "shape": [2], "bytes": 8, "file": "1.bin"},
    {"names": ["ok"], "owner": "o", "dtype": "u8", "shape": [4], "bytes": 4, "file": "2.bin"},
    {"names": ["odd"], "owner": "o", "dtype": "f99", "shape": [1], "bytes": 4, "file": "2.bin"}
  ])";
  loadNamedTensors(*state_, dir_, waitScope());
  EXPECT_EQ(state_->registry.findNamed("short"), nullptr);
  EXPECT_EQ(state_->registry.findNamed("odd"), nullptr);
  ASSERT_NE(state_->registry.findNamed("ok"), nullptr);
  EXPECT_EQ(state_->registry.liveCount(), 1u);
}

}  // namespace
}  // namespace tensord::server::testing
