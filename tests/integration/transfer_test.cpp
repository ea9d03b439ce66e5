// Upload/download through the client library: bit-exact round trips for
// several dtypes and sizes (0 elements, sizes that are not a multiple of the
// daemon's chunk), large downloads over every piece size, downloads into the
// caller's memory (bytesInto, toHostInto) and their size checks, an
// abandoned download, no call left in flight once a download returned, a
// 1 GiB f32 tensor, and named tensors across clients.

#include <sys/wait.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <random>
#include <stdexcept>

#include "client/connection.h"
#include "tests/integration/daemon_process.h"
#include "tests/integration/daemon_test.h"

namespace tensord::testing {
namespace {

class IntegrationTransfer : public DaemonTest {};

// Random bytes that are valid elements of `dtype`; float types keep the top
// exponent bit clear so no value is NaN or infinite.
std::vector<std::byte> randomElements(DType dtype, size_t count, uint32_t seed) {
  std::mt19937_64 rng(seed);
  size_t width = dtypeSize(dtype);
  std::vector<std::byte> out(count * width);
  for (size_t i = 0; i < count; ++i) {
    uint64_t bits = rng();
    switch (dtype) {
      case DType::F32:
        bits &= 0xBFFFFFFFu;
        break;
      case DType::F16:
      case DType::BF16:
        bits &= 0xBFFFu;
        break;
      case DType::Bool:
        bits &= 1u;
        break;
      default:
        break;
    }
    std::memcpy(out.data() + i * width, &bits, width);
  }
  return out;
}

int64_t product(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

TEST_F(IntegrationTransfer, RoundTripIsBitExactForDtypesAndSizes) {
  auto client = connect();
  uint64_t chunk = client->info().chunkBytes;
  ASSERT_GT(chunk, 0u) << "DaemonInfo.chunkBytes must name the preferred chunk size";

  struct Case {
    DType dtype;
    Shape shape;
  };
  std::vector<Case> cases = {
      {DType::F32, {0}},
      {DType::F32, {3, 0, 5}},
      {DType::F32, {}},  // a scalar
      {DType::F32, {7, 13}},
      {DType::F32, {int64_t(chunk / 4) + 1}},      // one element past a chunk
      {DType::I32, {int64_t(chunk / 4) * 2 + 3}},  // two chunks and a bit
      {DType::U8, {int64_t(chunk) * 3 + 7}},       // bytes not a multiple of anything
      {DType::U8, {int64_t(chunk)}},               // exactly one chunk
      {DType::I64, {1000, 3}},
      {DType::F16, {4097}},
      {DType::BF16, {33, 2}},
      {DType::Bool, {129}},
  };
  uint32_t seed = 1;
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(dtypeName(c.dtype)) + " with " + std::to_string(product(c.shape)) + " elements");
    auto data = randomElements(c.dtype, size_t(product(c.shape)), seed++);
    Tensor t = client->upload(c.dtype, c.shape, data);
    TensorInfo info = t.info();
    EXPECT_EQ(info.dtype, c.dtype);
    EXPECT_EQ(info.shape, c.shape);
    EXPECT_EQ(info.bytes, data.size());
    std::vector<std::byte> back = t.bytes();
    ASSERT_EQ(back.size(), data.size());
    EXPECT_TRUE(back == data) << "downloaded bytes differ from the uploaded ones";
  }
}

// Element i of the 1 GiB pattern: a finite f32 bit pattern that differs
// between neighbours and repeats with no short period.
uint32_t patternBits(uint64_t i) {
  uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull;
  x ^= x >> 29;
  return uint32_t(x) & 0xBFFFFFFFu;
}

TEST_F(IntegrationTransfer, OneGibF32TensorRoundTripsBitExact) {
  constexpr int64_t kElements = int64_t(1) << 28;  // 1 GiB of f32
  auto client = connect();
  Tensor t;
  {
    // The source lives only for the upload; the download is compared against
    // the generator, so at most two copies exist at any time.
    std::vector<uint32_t> source(kElements);
    for (int64_t i = 0; i < kElements; ++i) source[size_t(i)] = patternBits(uint64_t(i));
    t = client->upload(DType::F32, Shape{int64_t(1) << 14, int64_t(1) << 14}, std::as_bytes(std::span(source)));
    t.wait();
  }
  EXPECT_EQ(t.info().bytes, uint64_t(kElements) * 4);
  std::vector<std::byte> back = t.bytes();
  ASSERT_EQ(back.size(), uint64_t(kElements) * 4);
  int64_t mismatches = 0, first = -1;
  for (int64_t i = 0; i < kElements; ++i) {
    uint32_t got;
    std::memcpy(&got, back.data() + i * 4, 4);
    if (got != patternBits(uint64_t(i))) {
      if (first < 0) first = i;
      ++mismatches;
    }
  }
  EXPECT_EQ(mismatches, 0) << "first mismatch at element " << first;
}

// Large downloads: the daemon sends them in pieces that grow from a quarter
// chunk to a staging slot, and the client lands those of 32 MiB and more
// through its receive worker. Sizes below and at the worker's threshold,
// and ones no piece or chunk size divides.
TEST_F(IntegrationTransfer, LargeDownloadsAreBitExactAcrossPieceSizes) {
  auto client = connect();
  const int64_t mib = int64_t(1) << 20;
  uint32_t seed = 40;
  for (int64_t bytes : {4 * mib, 9 * mib + 13, 32 * mib, 40 * mib + 5}) {
    SCOPED_TRACE(std::to_string(bytes) + " bytes");
    auto data = randomElements(DType::U8, size_t(bytes), seed++);
    Tensor t = client->upload(DType::U8, Shape{bytes}, data);
    uint64_t lastDone = 0, calls = 0;
    std::vector<std::byte> back = t.bytes([&](uint64_t done, uint64_t total) {
      EXPECT_EQ(total, uint64_t(bytes));
      EXPECT_GE(done, lastDone) << "progress went backwards";
      lastDone = done;
      ++calls;
    });
    ASSERT_EQ(back.size(), data.size());
    EXPECT_TRUE(back == data) << "downloaded bytes differ from the uploaded ones";
    EXPECT_EQ(lastDone, uint64_t(bytes));
    EXPECT_GT(calls, 1u);
  }
  // toHost() lands in its float vector the same way.
  const auto f32Bytes = randomElements(DType::F32, size_t(9 * mib + 12) / 4, seed++);
  Tensor f = client->upload(DType::F32, Shape{int64_t(f32Bytes.size() / 4)}, f32Bytes);
  std::vector<float> host = f.toHost();
  ASSERT_EQ(host.size() * 4, f32Bytes.size());
  EXPECT_EQ(std::memcmp(host.data(), f32Bytes.data(), f32Bytes.size()), 0) << "toHost() differs from the uploaded floats";
}

// Downloads into memory the caller owns: every size class (empty, below and
// above one chunk, at and past the receive worker's threshold, sizes no
// chunk divides), and one buffer reused for different tensors.
TEST_F(IntegrationTransfer, BytesIntoLandsEveryByteInTheCallersBuffer) {
  auto client = connect();
  const int64_t chunk = int64_t(client->info().chunkBytes);
  const int64_t mib = int64_t(1) << 20;
  uint32_t seed = 60;
  for (int64_t bytes :
       {int64_t(0), int64_t(1), int64_t(91), chunk - 1, chunk + 1, 3 * chunk + 7, 4 * mib, 9 * mib + 13, 32 * mib + 3}) {
    SCOPED_TRACE(std::to_string(bytes) + " bytes");
    auto data = randomElements(DType::U8, size_t(bytes), seed++);
    Tensor t = client->upload(DType::U8, Shape{bytes}, data);
    std::vector<std::byte> out(size_t(bytes), std::byte{0xA5});
    uint64_t lastDone = 0;
    t.bytesInto(out, [&](uint64_t done, uint64_t total) {
      EXPECT_EQ(total, uint64_t(bytes));
      EXPECT_GE(done, lastDone) << "progress went backwards";
      lastDone = done;
    });
    EXPECT_TRUE(out == data) << "bytesInto landed bytes that differ from the uploaded ones";
    EXPECT_EQ(lastDone, uint64_t(bytes));
  }

  // One buffer, reused: each download overwrites all of it.
  std::vector<std::byte> reused(size_t(5 * mib + 3));
  for (uint32_t round = 0; round < 3; ++round) {
    auto data = randomElements(DType::U8, reused.size(), 70 + round);
    Tensor t = client->upload(DType::U8, Shape{int64_t(reused.size())}, data);
    t.bytesInto(reused);
    EXPECT_TRUE(reused == data) << "round " << round << ": the reused buffer differs from the tensor";
  }

  // The f32 view: toHostInto, and a zero-element tensor into an empty span.
  auto floats = randomFloats(3001, 80);
  std::vector<float> host(floats.size(), -1.0f);
  Tensor f = client->upload(Shape{int64_t(floats.size())}, floats);
  f.toHostInto(host);
  EXPECT_EQ(host, floats);
  client->upload(Shape{0, 4}, std::vector<float>{}).toHostInto(std::span<float>());
}

// A destination of the wrong size is an error naming the call and both sizes;
// the connection and the tensor stay usable.
TEST_F(IntegrationTransfer, BytesIntoRejectsAWrongSizedBuffer) {
  auto client = connect();
  const int64_t mib = int64_t(1) << 20;
  auto small = randomElements(DType::F32, 1000, 90);
  Tensor t = client->upload(DType::F32, Shape{10, 100}, small);
  auto large = randomElements(DType::U8, size_t(6 * mib + 1), 91);
  Tensor big = client->upload(DType::U8, Shape{6 * mib + 1}, large);

  // The message of the Error `read` throws; a failure when it throws none.
  auto errorOf = [](const std::function<void()>& read, const std::string& accepted) -> std::string {
    try {
      read();
    } catch (const Error& e) {
      return e.what();
    }
    ADD_FAILURE() << accepted;
    return "";
  };
  auto expectSizeError = [&](const Tensor& tensor, size_t outBytes, uint64_t tensorBytes) {
    SCOPED_TRACE("a buffer of " + std::to_string(outBytes) + " bytes for " + std::to_string(tensorBytes));
    std::vector<std::byte> out(outBytes);
    const std::string what = errorOf([&] { tensor.bytesInto(out); }, "bytesInto accepted a buffer of the wrong size");
    EXPECT_NE(what.find("Tensor::bytesInto"), std::string::npos) << what;
    EXPECT_NE(what.find("holds " + std::to_string(outBytes) + " bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("expected " + std::to_string(tensorBytes)), std::string::npos) << what;
  };
  expectSizeError(t, 3999, 4000);
  expectSizeError(t, 4001, 4000);
  expectSizeError(t, 0, 4000);
  expectSizeError(big, size_t(6 * mib), uint64_t(6 * mib + 1));
  expectSizeError(big, size_t(7 * mib), uint64_t(6 * mib + 1));

  // toHostInto: the element count and the dtype.
  std::vector<float> wrongCount(999);
  std::string what = errorOf([&] { t.toHostInto(wrongCount); }, "toHostInto accepted 999 floats for 1000");
  EXPECT_NE(what.find("Tensor::toHostInto"), std::string::npos) << what;
  EXPECT_NE(what.find("holds 999 floats (expected 1000)"), std::string::npos) << what;
  std::vector<float> bytesAsFloats(size_t(6 * mib + 1) / 4);
  what = errorOf([&] { big.toHostInto(bytesAsFloats); }, "toHostInto read a u8 tensor");
  EXPECT_NE(what.find("Tensor::toHostInto"), std::string::npos) << what;
  EXPECT_NE(what.find("f32 tensors only"), std::string::npos) << what;
  EXPECT_NE(what.find("u8"), std::string::npos) << what;

  // Everything still works: the same tensors, right sized, and a new call.
  std::vector<std::byte> out(small.size());
  t.bytesInto(out);
  EXPECT_TRUE(out == small);
  std::vector<std::byte> bigOut(large.size());
  big.bytesInto(bigOut);
  EXPECT_TRUE(bigOut == large);
  EXPECT_EQ(client->upload(Shape{2}, std::vector<float>{1, 2}).toHost(), (std::vector<float>{1, 2}));
  EXPECT_THROW(Tensor().bytesInto(out), Error);
}

// A download returns once done() arrived, before the daemon's download call
// ends, which needs done()'s answer. A client that then sits idle must still
// have sent it: a daemon told to stop finds no call in flight and exits at
// once, rather than draining for its timeout.
TEST(IntegrationTransferDrain, ADownloadLeavesNoCallInFlightWhileTheClientIdles) {
  DaemonProcess daemon;
  Client client({.address = daemon.address(), .token = daemon.token()});
  std::vector<float> values(1000, 2.5f);
  Tensor t = client.upload(Shape{1000}, values);
  EXPECT_EQ(t.toHost(), values);
  std::vector<std::byte> small(4);
  client.upload(DType::U8, Shape{4}, small).bytesInto(small);
  auto status = daemon.stop();  // the client is still connected, and idle
  ASSERT_TRUE(status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << daemon.log();
  EXPECT_EQ(daemon.log().find("still in flight"), std::string::npos) << daemon.log();
}

// A download abandoned part-way (what the Python binding does on Ctrl-C):
// its remaining chunks are refused, the connection goes on, and the same
// tensor downloads intact right after.
TEST_F(IntegrationTransfer, AbandonedLargeDownloadLeavesTheConnectionUsable) {
  auto client = connect();
  auto data = randomElements(DType::U8, (16u << 20) + 3, 50);
  Tensor t = client->upload(DType::U8, Shape{int64_t(data.size())}, data);
  t.wait();
  bool started = false, abandoned = false;
  {
    detail::WaitCheckScope scope(
        [&] {
          if (started) throw std::runtime_error("abandoned by the test");
        },
        std::chrono::milliseconds(1));
    try {
      (void)t.bytes([&](uint64_t done, uint64_t total) { started = started || (done > 0 && done < total); });
    } catch (const std::runtime_error& e) {
      abandoned = std::string(e.what()) == "abandoned by the test";
    }
  }
  EXPECT_TRUE(abandoned) << "the download finished before the check could abandon it";
  std::vector<std::byte> back = t.bytes();
  EXPECT_TRUE(back == data) << "the download after an abandoned one differs";
  EXPECT_EQ(client->upload(Shape{2}, std::vector<float>{1, 2}).toHost(), (std::vector<float>{1, 2}));
}

TEST_F(IntegrationTransfer, NamedTensorOutlivesItsClient) {
  auto data = randomFloats(1000, 7);
  {
    auto a = connect();
    Tensor t = a->upload(Shape{10, 100}, data);
    t.save("weights");
  }
  auto b = connect();
  Tensor restored = b->restore("weights");
  TensorInfo info = restored.info();
  EXPECT_EQ(info.name, "weights");
  EXPECT_EQ(info.owner, daemon().principal());
  EXPECT_EQ(info.shape, (Shape{10, 100}));
  EXPECT_EQ(restored.toHost(), data);

  bool listed = false;
  for (const auto& entry : b->list()) listed |= entry.name == "weights";
  EXPECT_TRUE(listed) << "list() does not show the named tensor";

  b->remove("weights");
  for (const auto& entry : b->list()) EXPECT_NE(entry.name, "weights") << "remove() left the name listed";
  EXPECT_THROW(b->restore("weights").wait(), Error);
}

}  // namespace
}  // namespace tensord::testing
