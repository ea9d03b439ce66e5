// Upload and download through the bounded staging pool (2 slots of 64 KiB).

#include "tests/server/server_fixture.h"

namespace tensord::server::testing {
namespace {

bool contains(const kj::Exception& e, const std::string& text) {
  return std::string(e.getDescription().cStr()).find(text) != std::string::npos;
}

class TransferTest : public ServerFixture {
 protected:
  void SetUp() override { start(); }
};

TEST_F(TransferTest, RoundTripSpansManySlotsBitExact) {
  auto s = session();
  // Odd sizes: chunks straddle slot boundaries, the last slot is partial.
  const auto data = pattern(1'000'003, 1);
  auto t = upload(s, compute::DType::U8, {1'000'003}, data, 100'001);
  EXPECT_EQ(download(t), data);
}

TEST_F(TransferTest, PartialDownloadsReturnTheRange) {
  auto s = session();
  const auto data = pattern(300'000, 2);
  auto t = upload(s, compute::DType::U8, {300'000}, data);
  auto middle = download(t, 12'345, 140'000);
  EXPECT_EQ(middle, std::vector<std::byte>(data.begin() + 12'345, data.begin() + 152'345));
  auto tail = download(t, 299'990, 0);
  EXPECT_EQ(tail, std::vector<std::byte>(data.end() - 10, data.end()));
  EXPECT_TRUE(download(t, 300'000, 0).empty());
  std::vector<std::byte> unused;
  bool unusedDone = false;
  auto past = t.downloadRequest();
  past.setSink(kj::heap<CollectingSink>(unused, unusedDone));
  past.setOffset(300'001);
  auto e = errorOf(past.send());
  EXPECT_TRUE(contains(e, "download: offset 300001 is past the end")) << e.getDescription().cStr();
}

TEST_F(TransferTest, ConcurrentTransfersShareTwoSlotsWithoutDeadlock) {
  auto s = session();
  const auto a = pattern(500'000, 3);
  const auto b = pattern(400'000, 4);
  auto ta = upload(s, compute::DType::U8, {500'000}, a, 65'536);
  auto tb = upload(s, compute::DType::U8, {400'000}, b, 65'536);
  // Four downloads at once, each wanting two slots.
  std::vector<std::vector<std::byte>> out(4);
  bool done[4] = {};
  kj::Vector<kj::Promise<void>> all;
  for (int i = 0; i < 4; ++i) {
    auto request = (i % 2 ? tb : ta).downloadRequest();
    request.setSink(kj::heap<CollectingSink>(out[i], done[i]));
    all.add(request.send().ignoreResult());
  }
  kj::joinPromises(all.releaseAsArray()).wait(waitScope());
  EXPECT_EQ(out[0], a);
  EXPECT_EQ(out[1], b);
  EXPECT_EQ(out[2], a);
  EXPECT_EQ(out[3], b);
}

TEST_F(TransferTest, InterleavedUploadsWithOddChunksStayBitExact) {
  auto s = session();
  // Three uploads compete for two slots: writers holding a half-filled slot
  // hand it to the device early, at odd offsets, when others wait.
  constexpr size_t kSize = 300'007;
  constexpr size_t kChunk = 50'001;
  std::vector<std::vector<std::byte>> data;
  std::vector<proto::TensorWriter::Client> writers;
  for (uint32_t i = 0; i < 3; ++i) {
    data.push_back(pattern(kSize, 10 + i));
    auto request = s.uploadRequest();
    request.initDesc().setDtype(proto::DType::U8);
    request.getDesc().initShape(1).set(0, int64_t(kSize));
    writers.push_back(request.send().getWriter());
  }
  for (size_t pos = 0; pos < kSize; pos += kChunk) {
    kj::Vector<kj::Promise<void>> writes;
    for (size_t i = 0; i < writers.size(); ++i) {
      auto write = writers[i].writeRequest();
      write.setData(
          kj::arrayPtr(reinterpret_cast<const kj::byte*>(data[i].data() + pos), std::min(kChunk, kSize - pos)));
      writes.add(write.send());
    }
    kj::joinPromises(writes.releaseAsArray()).wait(waitScope());
  }
  for (size_t i = 0; i < writers.size(); ++i) {
    auto tensor = writers[i].commitRequest().send().wait(waitScope()).getTensor();
    EXPECT_EQ(download(tensor), data[i]) << "upload " << i;
  }
}

TEST_F(TransferTest, StalledUploadsDoNotStarveOthers) {
  auto s = session();
  // Two uploads take both slots with one small write each, then go quiet.
  std::vector<proto::TensorWriter::Client> stalled;
  for (uint32_t i = 0; i < 2; ++i) {
    auto request = s.uploadRequest();
    request.initDesc().setDtype(proto::DType::U8);
    request.getDesc().initShape(1).set(0, 1000);
    stalled.push_back(request.send().getWriter());
    auto write = stalled.back().writeRequest();
    write.initData(10);
    write.send().wait(waitScope());
  }
  // A third upload and a download must still complete.
  auto data = pattern(200'003, 7);
  auto t = upload(s, compute::DType::U8, {int64_t(data.size())}, data);
  EXPECT_EQ(download(t), data);
}

TEST_F(TransferTest, EmptyTensorRoundTrips) {
  auto s = session();
  auto t = upload(s, compute::DType::F32, {0, 3}, {});
  EXPECT_TRUE(download(t).empty());
}

TEST_F(TransferTest, WritePastTheDeclaredSizeNamesBothSizes) {
  auto s = session();
  auto request = s.uploadRequest();
  request.initDesc().initShape(1).set(0, 4);  // f32[4] = 16 bytes
  auto writer = request.send().getWriter();
  auto write = writer.writeRequest();
  write.initData(20);
  // A stream write's failure reaches the client with its next call.
  write.send().then([]() {}, [](kj::Exception&&) {}).wait(waitScope());
  auto e = errorOf(writer.commitRequest().send());
  EXPECT_TRUE(contains(e, "upload: f32[4] holds 16 bytes; got 20 (a write of 20 bytes at offset 0)"))
      << e.getDescription().cStr();
}

TEST_F(TransferTest, ShortCommitNamesBothSizes) {
  auto s = session();
  auto request = s.uploadRequest();
  request.initDesc().initShape(1).set(0, 4);
  auto writer = request.send().getWriter();
  auto write = writer.writeRequest();
  write.initData(12);
  write.send().wait(waitScope());
  auto e = errorOf(writer.commitRequest().send());
  EXPECT_TRUE(contains(e, "upload: f32[4] holds 16 bytes; got 12 before commit")) << e.getDescription().cStr();
}

TEST_F(TransferTest, BadDescriptorsAreRefusedBeforeAllocating) {
  auto s = session();
  auto tooBig = s.uploadRequest();
  tooBig.initDesc().initShape(1).set(0, int64_t(64 << 20));  // f32: 256 MiB > 64 MiB limit
  auto e = errorOf(tooBig.send());
  EXPECT_TRUE(contains(e,
                       "upload: f32[67108864] is 268435456 bytes; expected at most 67108864 bytes "
                       "(limits.max_tensor_bytes)"))
      << e.getDescription().cStr();

  auto rank9 = s.uploadRequest();
  rank9.initDesc().initShape(9);
  auto e2 = errorOf(rank9.send());
  EXPECT_TRUE(contains(e2, "has rank 9; expected rank <= 8")) << e2.getDescription().cStr();

  auto negative = s.uploadRequest();
  auto shape = negative.initDesc().initShape(2);
  shape.set(0, 2);
  shape.set(1, -3);
  auto e3 = errorOf(negative.send());
  EXPECT_TRUE(contains(e3, "has dim 1 = -3; expected dims >= 0")) << e3.getDescription().cStr();

  auto overflow = s.uploadRequest();
  auto huge = overflow.initDesc().initShape(2);
  huge.set(0, int64_t(1) << 40);
  huge.set(1, int64_t(1) << 40);
  auto e4 = errorOf(overflow.send());
  EXPECT_TRUE(contains(e4, "does not fit in 64 bits")) << e4.getDescription().cStr();
}

TEST_F(TransferTest, UnnamedTensorsDieWithTheirLastCapability) {
  auto s = session();
  auto t = upload(s, compute::DType::U8, {1000}, pattern(1000, 5));
  EXPECT_EQ(info(s).tensorCount, 1u);
  t = nullptr;
  EXPECT_TRUE(waitFor([&] { return info(s).tensorCount == 0; }));
}

TEST_F(TransferTest, DisconnectFreesUnnamedButKeepsNamedTensors) {
  {
    auto daemon = connect();
    auto s = authenticate(daemon);
    auto kept = upload(s, compute::DType::U8, {100}, pattern(100, 6));
    auto dropped = upload(s, compute::DType::U8, {100}, pattern(100, 7));
    auto save = kept.saveRequest();
    save.setName("kept");
    save.send().wait(waitScope());
  }
  clients_.clear();  // closes the connection
  auto s = session();
  EXPECT_TRUE(waitFor([&] { return info(s).tensorCount == 1; }));
  EXPECT_EQ(info(s).namedCount, 1u);
  auto request = s.restoreRequest();
  request.setName("kept");
  auto kept = request.send().getTensor();
  EXPECT_EQ(download(kept), pattern(100, 6));
}

}  // namespace
}  // namespace tensord::server::testing
