// The client library against the in-process fake daemon: connecting,
// transfers, pipelined calls, multi-output calls, errors and lifetimes.

#include "tensord/client.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "fake_daemon.h"

namespace tensord {
namespace {

using testing::FakeDaemon;

ConnectOptions optionsFor(const FakeDaemon& daemon) { return {daemon.address(), FakeDaemon::kToken}; }

std::vector<float> iota(size_t n, float start = 0) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

// The Error `body` throws.
template <typename F>
Error errorOf(F&& body) {
  try {
    body();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no tensord::Error";
  return Error(Error::Kind::kFailed, "");
}

TEST(Client, ConnectionRefusedIsDisconnectedAndNamesTheAddress) {
  std::string address;
  {
    FakeDaemon daemon;
    address = daemon.address();
  }
  Error e = errorOf([&] { Client client({address, "x"}); });
  EXPECT_EQ(e.kind(), Error::Kind::kDisconnected);
  EXPECT_NE(std::string(e.what()).find("cannot connect to tensord at " + address), std::string::npos) << e.what();
}

TEST(Client, BadAddressIsAnError) {
  Error e = errorOf([&] { Client client({"127.0.0.1:notaport", "x"}); });
  EXPECT_EQ(e.kind(), Error::Kind::kDisconnected);
  EXPECT_NE(std::string(e.what()).find("cannot connect to tensord at 127.0.0.1:notaport"), std::string::npos)
      << e.what();
}

TEST(Client, WrongTokenFailsInTheConstructor) {
  FakeDaemon daemon;
  Error e = errorOf([&] { Client client({daemon.address(), "wrong"}); });
  EXPECT_EQ(e.kind(), Error::Kind::kFailed);
  EXPECT_NE(std::string(e.what()).find("authentication with tensord at " + daemon.address() + " failed: invalid token"),
            std::string::npos)
      << e.what();
}

TEST(Client, InfoWhoamiOps) {
  FakeDaemon daemon;
  Client client(optionsFor(daemon));
  EXPECT_EQ(client.info().version, "fake-1");
  EXPECT_EQ(client.info().protocolVersion, 9u);
  EXPECT_EQ(client.whoami(), "tester");
  for (int round = 0; round < 2; ++round) {  // prefetched, then asked again
    auto ops = client.ops();
    ASSERT_EQ(ops.size(), 5u);
    const OpInfo& split = ops[3];
    EXPECT_EQ(split.name, "split2");
    EXPECT_EQ(split.outputs, (std::vector<std::string>{"same", "negated"}));
    const OpInfo& scale = ops[2];
    ASSERT_EQ(scale.attrs.size(), 5u);
    EXPECT_EQ(scale.attrs[0].name, "factor");
    EXPECT_EQ(scale.attrs[0].type, "float");
    EXPECT_EQ(scale.attrs[0].defaultValue, AttrValue(1.0));
    EXPECT_EQ(scale.attrs[3].type, "ints");
    EXPECT_EQ(scale.dtypes, std::vector<DType>{DType::F32});
  }
}

TEST(Client, UploadDownloadInChunks) {
  FakeDaemon daemon;
  Client client(optionsFor(daemon));
  // 3 MiB + 12 bytes: several chunks and a ragged last one.
  auto values = iota((3 << 18) + 3, -5);
  std::vector<std::pair<uint64_t, uint64_t>> up, down;
  Tensor t = client.upload(DType::F32, {int64_t(values.size())}, std::as_bytes(std::span(values)),
                           [&](uint64_t done, uint64_t total) { up.emplace_back(done, total); });
  auto bytes = t.bytes([&](uint64_t done, uint64_t total) { down.emplace_back(done, total); });
  ASSERT_EQ(bytes.size(), values.size() * 4);
  EXPECT_EQ(std::memcmp(bytes.data(), values.data(), bytes.size()), 0);
  EXPECT_EQ(t.toHost(), values);
  EXPECT_LE(daemon.largestChunk(), uint64_t(1) << 20);
  ASSERT_GE(up.size(), 4u);
  EXPECT_EQ(up.back(), std::make_pair(uint64_t(bytes.size()), uint64_t(bytes.size())));
  ASSERT_FALSE(down.empty());
  EXPECT_EQ(down.back(), std::make_pair(uint64_t(bytes.size()), uint64_t(bytes.size())));
  for (size_t i = 1; i < down.size(); ++i) EXPECT_LE(down[i - 1].first, down[i].first);

  TensorInfo info = t.info();
  EXPECT_EQ(info.dtype, DType::F32);
  EXPECT_EQ(info.shape, Shape{int64_t(values.size())});
  EXPECT_EQ(info.bytes, bytes.size());
  EXPECT_EQ(info.owner, "tester");

  // The first MiB goes in quarter chunks: sizes that end inside it, or just
  // past one of its writes, arrive whole too.
  for (size_t floats : {size_t(1) << 16, (size_t(1) << 16) + 1, (size_t(3) << 16) + 5, (size_t(1) << 18) + 1}) {
    auto some = iota(floats, 7);
    Tensor u = client.upload(DType::F32, {int64_t(floats)}, std::as_bytes(std::span(some)));
    EXPECT_EQ(u.toHost(), some) << floats << " floats";
  }
}

TEST(Client, OtherDtypesAndEmptyTensors) {
  FakeDaemon daemon;
  Client client(optionsFor(daemon));
  std::vector<std::byte> raw = {std::byte{1}, std::byte{200}, std::byte{3}};
  Tensor u8 = client.upload(DType::U8, {3}, raw);
  EXPECT_EQ(u8.bytes(), raw);
  EXPECT_EQ(u8.dtype(), DType::U8);
  Error e = errorOf([&] { u8.toHost(); });
  EXPECT_STREQ(e.what(), "toHost: the tensor is u8; toHost() reads f32 tensors only (use bytes())");

  Tensor empty = client.upload({0, 3}, std::span<const float>());
  EXPECT_TRUE(empty.toHost().empty());
  EXPECT_EQ(empty.shape(), (Shape{0, 3}));
}

TEST(Client, UploadChecksTheSize) {
  FakeDaemon daemon;
  Client client(optionsFor(daemon));
  auto values = iota(5);
  Error e = errorOf([&] { client.upload({2, 3}, values); });
  EXPECT_STREQ(e.what(), "upload: shape [2, 3] of f32 needs 24 bytes; got 20");
  e = errorOf([&] { client.upload({-1}, values); });
  EXPECT_STREQ(e.what(), "upload: shape [-1] has a negative dim");
}

TEST(Client, PipelinedChainComputesTheRightThing) {
  FakeDaemon daemon;
  Client client(optionsFor(daemon));
  auto values = iota(1000);
  Tensor x = client.upload({10, 100}, values);
  Tensor y = x;
  for (int i = 0; i < 50; ++i) y = y + x;  // each returns at once, before any answer
  auto out = y.toHost();
  ASSERT_EQ(out.size(), values.size());
  for (size_t i = 0; i < out.size(); ++i) ASSERT_EQ(out[i], 51 * values[i]);
  EXPECT_EQ(daemon.calls(), 50u);
  EXPECT_EQ((-x).toHost()[7], -7.0f);
}

TEST(Client, ErrorsSurfaceAtTheFirstBlockingRead) {
  FakeDaemon daemon;
  Client client(optionsFor(daemon));
  Tensor a = client.upload({2}, iota(2));
  Tensor b = client.upload({3}, iota(3));
  Tensor bad = a + b;   // no throw yet
  Tensor worse = -bad;  // depends on the failed call
  Error e = errorOf([&] { bad.toHost(); });
  EXPECT_EQ(e.kind(), Error::Kind::kFailed);
  EXPECT_STREQ(e.what(), "add: input 'b' has shape [3]; expected [2] (a's shape)");
  EXPECT_STREQ(errorOf([&] { worse.wait(); }).what(), "add: input 'b' has shape [3]; expected [2] (a's shape)");
  EXPECT_STREQ(errorOf([&] { bad.info(); }).what(), "add: input 'b' has shape [3]; expected [2] (a's shape)");

  Error unknown = errorOf([&] { client.call1("nosuch", {a}).wait(); });
  EXPECT_EQ(unknown.kind(), Error::Kind::kUnimplemented);
  EXPECT_STREQ(unknown.what(), "unknown op 'nosuch'");

  Error oom = errorOf([&] { client.call1("oom", {a}).toHost(); });
  EXPECT_EQ(oom.kind(), Error::Kind::kOverloaded);
  EXPECT_STREQ(oom.what(), "oom: out of device memory (needs 1 GiB, 0 B free)");

  // The connection is still good.
  EXPECT_EQ((a + a).toHost(), (std::vector<float>{0, 2}));
}

TEST(Client, MultiOutputCallsPipelineEveryOutput) {
  FakeDaemon daemon;
  Client client(optionsFor(daemon));
  Tensor x = client.upload({4}, iota(4, 1));
  auto outs = client.call("split2", {x});
  ASSERT_EQ(outs.size(), 2u);
  Tensor zero = outs[0] + outs[1];  // both used before the call answered
  EXPECT_EQ(outs[1].toHost(), (std::vector<float>{-1, -2, -3, -4}));
  EXPECT_EQ(zero.toHost(), (std::vector<float>{0, 0, 0, 0}));
  EXPECT_EQ(client.call("neg", {x}).size(), 1u);
}

TEST(Client, AttrsReachTheDaemon) {
  FakeDaemon daemon;
  Client client(optionsFor(daemon));
  Tensor x = client.upload({3}, iota(3));
  Tensor y = client.call1("scale", {x}, {{"factor", 2.0}, {"bias", 1.0}});
  EXPECT_EQ(y.toHost(), (std::vector<float>{1, 3, 5}));
  Error e = errorOf([&] { client.call1("scale", {x}, {{"factor", int64_t(2)}}).wait(); });
  EXPECT_STREQ(e.what(), "scale: attr 'factor' must be a float");
}

TEST(Client, NamedTensors) {
  FakeDaemon daemon;
  Client client(optionsFor(daemon));
  Tensor x = client.upload({2, 2}, iota(4));
  x.save("weights");
  EXPECT_STREQ(errorOf([&] { x.save("weights"); }).what(), "save: a tensor named 'weights' already exists");
  x.save("weights", /*overwrite=*/true);
  {
    Client other(optionsFor(daemon));
    EXPECT_EQ(other.restore("weights").toHost(), iota(4));
  }
  auto list = client.list();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].name, "weights");
  EXPECT_EQ(list[0].shape, (Shape{2, 2}));
  EXPECT_EQ(list[0].bytes, 16u);
  client.remove("weights");
  EXPECT_TRUE(client.list().empty());
  Tensor gone = client.restore("weights");  // pipelined: no error yet
  EXPECT_STREQ(errorOf([&] { gone.wait(); }).what(), "restore: no tensor named 'weights'");
  EXPECT_STREQ(errorOf([&] { client.remove("weights"); }).what(), "delete: no tensor named 'weights'");
}

TEST(Client, DisconnectIsReportedWithTheAddress) {
  FakeDaemon daemon;
  Client client(optionsFor(daemon));
  Tensor x = client.upload({1}, iota(1));
  x.wait();
  daemon.stop();
  Error e = errorOf([&] { x.info(); });
  EXPECT_EQ(e.kind(), Error::Kind::kDisconnected);
  EXPECT_NE(std::string(e.what()).find("connection to tensord at " + daemon.address() + " lost"), std::string::npos)
      << e.what();
  EXPECT_EQ(errorOf([&] { client.whoami(); }).kind(), Error::Kind::kDisconnected);
}

TEST(Client, TensorsMayOutliveTheirClient) {
  FakeDaemon daemon;
  Tensor x;
  {
    Client client(optionsFor(daemon));
    x = client.upload({2}, iota(2, 3));
    EXPECT_EQ(&x.client(), &client);
  }
  EXPECT_EQ(x.toHost(), (std::vector<float>{3, 4}));
  EXPECT_NE(std::string(errorOf([&] { x.client(); }).what()).find("was destroyed"), std::string::npos);
}

TEST(Client, SeveralClientsOnOneThread) {
  FakeDaemon one, two;
  Client a(optionsFor(one));
  Client b(optionsFor(two));
  Tensor x = a.upload({1}, iota(1, 5));
  Tensor y = b.upload({1}, iota(1, 7));
  EXPECT_EQ((x + x).toHost()[0], 10.0f);
  EXPECT_EQ((y + y).toHost()[0], 14.0f);
}

TEST(Client, NullTensorsAreErrors) {
  FakeDaemon daemon;
  Client client(optionsFor(daemon));
  Tensor null;
  EXPECT_FALSE(null);
  EXPECT_NE(std::string(errorOf([&] { null.info(); }).what()).find("null"), std::string::npos);
  Error e = errorOf([&] { client.call1("add", {client.upload({1}, iota(1)), null}); });
  EXPECT_STREQ(e.what(), "add: input 1: the Tensor is null (default-constructed)");
}

TEST(Client, DtypeNamesAndSizes) {
  EXPECT_EQ(dtypeName(DType::F32), "f32");
  EXPECT_EQ(dtypeName(DType::Bool), "bool");
  EXPECT_EQ(dtypeSize(DType::I64), 8u);
  EXPECT_EQ(dtypeSize(DType::BF16), 2u);
}

}  // namespace
}  // namespace tensord
