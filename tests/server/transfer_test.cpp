// Upload and download through the bounded staging pool (2 slots of 64 KiB;
// 2 of 4 MiB for the pieces that grow past a chunk).

#include <algorithm>

#include "server/download.h"
#include "tests/server/server_fixture.h"

namespace tensord::server::testing {
namespace {

bool contains(const kj::Exception& e, const std::string& text) {
  return std::string(e.getDescription().cStr()).find(text) != std::string::npos;
}

class TransferTest : public ServerFixture {
 protected:
  void SetUp() override { start(); }

  // A u8 upload in `chunk`-byte writes, without waiting.
  kj::Promise<proto::Tensor::Client> uploadAsync(proto::Session::Client& session, const std::vector<std::byte>& data,
                                                 size_t chunk) {
    auto request = session.uploadRequest();
    request.initDesc().setDtype(proto::DType::U8);
    request.getDesc().initShape(1).set(0, int64_t(data.size()));
    auto writer = request.send().getWriter();
    kj::Promise<void> writes = kj::READY_NOW;
    for (size_t pos = 0; pos < data.size(); pos += chunk) {
      auto bytes =
          kj::arrayPtr(reinterpret_cast<const kj::byte*>(data.data() + pos), std::min(chunk, data.size() - pos));
      writes = writes.then([writer, bytes]() mutable {
        auto write = writer.writeRequest();
        write.setData(bytes);
        return write.send();
      });
    }
    return writes.then([writer]() mutable { return writer.commitRequest().send(); })
        .then([](capnp::Response<proto::TensorWriter::CommitResults>&& response) { return response.getTensor(); });
  }
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

// A receiver that stops accepting after its first chunk until `gate` opens.
class GatedSink final : public proto::ByteSink::Server {
 public:
  GatedSink(std::vector<std::byte>& out, bool& done, kj::ForkedPromise<void>& gate)
      : out_(out), done_(done), gate_(gate) {}

 protected:
  kj::Promise<void> write(WriteContext context) override {
    auto data = context.getParams().getData();
    const auto* begin = reinterpret_cast<const std::byte*>(data.begin());
    out_.insert(out_.end(), begin, begin + data.size());
    return gate_.addBranch();
  }
  kj::Promise<void> done(DoneContext context) override {
    done_ = true;
    return kj::READY_NOW;
  }

 private:
  std::vector<std::byte>& out_;
  bool& done_;
  kj::ForkedPromise<void>& gate_;
};

TEST_F(TransferTest, StalledReceiversAndSendersHoldNoStagingSlot) {
  auto s = session();
  // A download into a receiver that stops accepting: far more pieces than
  // Cap'n Proto's flow-control window lets through, so it stays mid-transfer.
  const auto big = pattern(40 << 20, 8);
  auto source = upload(s, compute::DType::U8, {int64_t(big.size())}, big);
  auto gate = kj::newPromiseAndFulfiller<void>();
  auto gateOpen = gate.promise.fork();
  std::vector<std::byte> received;
  bool receivedAll = false;
  auto stalledDownload = source.downloadRequest();
  stalledDownload.setSink(kj::heap<GatedSink>(received, receivedAll, gateOpen));
  auto stalled = stalledDownload.send().ignoreResult().eagerlyEvaluate(nullptr);
  ASSERT_TRUE(waitFor([&] { return !received.empty(); }));
  // An upload that sends part of a slot and goes quiet.
  auto request = s.uploadRequest();
  request.initDesc().setDtype(proto::DType::U8);
  request.getDesc().initShape(1).set(0, 1 << 20);
  auto quiet = request.send().getWriter();
  auto write = quiet.writeRequest();
  write.initData(1000);
  write.send().wait(waitScope());

  // Meanwhile another client's uploads and downloads complete, well before
  // the stalled download would time out and give anything back. They span
  // hundreds of slots, so the stalled download, competing for slots until
  // its flow-control window is full, is stuck long before they end.
  auto other = session();
  const auto a = pattern(12'000'007, 9);
  const auto b = pattern(10'000'003, 10);
  std::vector<std::byte> outA, outB;
  bool doneA = false, doneB = false;
  auto roundTrip = [&](const std::vector<std::byte>& data, size_t chunk, std::vector<std::byte>& out, bool& done) {
    return uploadAsync(other, data, chunk).then([out = &out, done = &done](proto::Tensor::Client tensor) {
      auto download = tensor.downloadRequest();
      download.setSink(kj::heap<CollectingSink>(*out, *done));
      return download.send().ignoreResult();
    });
  };
  kj::Vector<kj::Promise<void>> both;
  both.add(roundTrip(a, 500'001, outA, doneA));
  both.add(roundTrip(b, 1 << 20, outB, doneB));
  kj::Maybe<kj::Exception> error;
  io_.provider->getTimer()
      .timeoutAfter(kStallTimeoutSeconds / 2 * kj::SECONDS, kj::joinPromises(both.releaseAsArray()))
      .catch_([&](kj::Exception&& e) { error = kj::mv(e); })
      .wait(waitScope());
  KJ_IF_MAYBE (e, error) {
    ADD_FAILURE() << "transfers beside the stalled ones did not complete: " << e->getDescription().cStr();
  } else {
    EXPECT_TRUE(outA == a);
    EXPECT_TRUE(outB == b);
    EXPECT_TRUE(doneA && doneB);
  }
  EXPECT_LT(received.size(), big.size()) << "the gated download was never held up";

  // Once its receiver accepts again, the stalled download completes intact.
  gate.fulfiller->fulfill();
  stalled.wait(waitScope());
  EXPECT_TRUE(receivedAll);
  EXPECT_TRUE(received == big);
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

// A download whose receiver disconnects part-way gives back every staging
// slot, and the next download of the same tensor, over pieces that do not
// divide its size, is bit-exact.
TEST_F(TransferTest, DownloadCutOffMidwayReturnsEverySlot) {
  const auto big = pattern((4 << 20) + 13, 12);
  std::vector<std::byte> received;
  bool receivedAll = false;
  auto gate = kj::newPromiseAndFulfiller<void>();
  auto gateOpen = gate.promise.fork();
  std::string outcome;
  {
    auto daemon = connect();
    auto s = authenticate(daemon);
    auto t = upload(s, compute::DType::U8, {int64_t(big.size())}, big);
    auto request = t.downloadRequest();
    request.setSink(kj::heap<GatedSink>(received, receivedAll, gateOpen));
    auto pending = request.send()
                       .then([&](auto&&) { outcome = "completed"; },
                             [&](kj::Exception&& e) { outcome = e.getDescription().cStr(); })
                       .eagerlyEvaluate(nullptr);
    ASSERT_TRUE(waitFor([&] { return !received.empty(); }));
    clients_.pop_back();  // closes this connection mid-download
    ASSERT_TRUE(waitFor([&] { return !outcome.empty(); }));
  }
  EXPECT_NE(outcome, "completed");
  EXPECT_LT(received.size(), big.size());
  EXPECT_FALSE(receivedAll);
  // Both slots of the pool are free again.
  EXPECT_TRUE(waitFor([&] {
    auto first = state_->staging.tryAcquire();
    auto second = state_->staging.tryAcquire();
    return first && second;
  }));

  auto s = session();
  auto t = upload(s, compute::DType::U8, {int64_t(big.size())}, big, 100'003);
  EXPECT_TRUE(download(t) == big);
  EXPECT_TRUE(download(t, 65'537, 3 * 65'536 + 5) ==
              std::vector<std::byte>(big.begin() + 65'537, big.begin() + 65'537 + 3 * 65'536 + 5));
}

// Slots larger than a chunk: a download's pieces grow from one chunk to a
// slot (1, 2, 4, 4 ... MiB here), and every range lands bit-exact whatever
// piece boundary it starts or ends on.
class LargeSlotTransferTest : public ServerFixture {
 protected:
  void SetUp() override {
    Config config = testConfig();
    config.staging.slotBytes = 4 << 20;
    config.staging.slots = 2;
    start(config);
  }
};

TEST_F(LargeSlotTransferTest, GrowingPiecesAreBitExact) {
  auto s = session();
  const auto data = pattern((11 << 20) + 7, 13);
  auto t = upload(s, compute::DType::U8, {int64_t(data.size())}, data);
  EXPECT_TRUE(download(t) == data);
  const uint64_t offset = (3 << 20) + 1, length = (5 << 20) + 3;
  EXPECT_TRUE(download(t, offset, length) ==
              std::vector<std::byte>(data.begin() + int64_t(offset), data.begin() + int64_t(offset + length)));
  EXPECT_TRUE(download(t, data.size() - 5, 0) == std::vector<std::byte>(data.end() - 5, data.end()));
}

}  // namespace
}  // namespace tensord::server::testing
