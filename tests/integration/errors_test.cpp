// Bad requests get an Error whose message names what was wrong, and the
// daemon keeps serving: after each error a new client is served and a named
// tensor saved before the error is intact.

#include <algorithm>
#include <optional>

#include "tests/integration/daemon_test.h"

namespace tensord::testing {
namespace {

constexpr uint64_t kMaxTensorBytes = 16u << 20;
constexpr uint64_t kMemoryLimitBytes = 64u << 20;

class IntegrationErrors : public DaemonTest {
 protected:
  DaemonOptions daemonOptions() override {
    DaemonOptions options;
    options.limits = {{"memory_limit_bytes", kMemoryLimitBytes}, {"max_tensor_bytes", kMaxTensorBytes}};
    return options;
  }

  void SetUp() override {
    DaemonTest::SetUp();
    client_ = connect();
    client_->upload(Shape{4, 4}, kept_).save("kept");
  }

  void TearDown() override {
    client_.reset();
    DaemonTest::TearDown();
  }

  Client& client() { return *client_; }

  // The daemon still serves a fresh client, computes, and kept the named tensor.
  void expectStillServing() {
    SCOPED_TRACE("after the error");
    auto other = connect();
    EXPECT_EQ(other->info().protocolVersion, 9u);
    EXPECT_EQ(other->restore("kept").toHost(), kept_);
    Tensor one = other->upload(Shape{2}, std::vector<float>{1, 2});
    EXPECT_EQ((one + one).toHost(), (std::vector<float>{2, 4}));
  }

  Tensor f32(Shape shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return client().upload(shape, std::vector<float>(size_t(n), 1.0f));
  }

 private:
  std::vector<float> kept_ = randomFloats(16, 99);
  std::unique_ptr<Client> client_;
};

// Every word must appear in the message.
::testing::AssertionResult mentions(const std::optional<Error>& error, std::initializer_list<std::string> words) {
  if (!error) return ::testing::AssertionFailure() << "no tensord::Error was thrown";
  std::string message = error->what();
  for (const auto& w : words) {
    if (message.find(w) == std::string::npos) {
      return ::testing::AssertionFailure() << "message does not mention '" << w << "': " << message;
    }
  }
  return ::testing::AssertionSuccess();
}

// At least one of the words must appear in the (lowercased) message.
::testing::AssertionResult mentionsAny(const std::optional<Error>& error, std::initializer_list<std::string> words) {
  if (!error) return ::testing::AssertionFailure() << "no tensord::Error was thrown";
  std::string message = error->what();
  std::transform(message.begin(), message.end(), message.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const auto& w : words) {
    if (message.find(w) != std::string::npos) return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "message mentions none of the expected words: " << error->what();
}

TEST_F(IntegrationErrors, UnknownOp) {
  auto error = errorOf([&] { client().call1("no_such_op", {f32({2})}).wait(); });
  EXPECT_TRUE(mentions(error, {"no_such_op"}));
  if (error) {
    EXPECT_EQ(error->kind(), Error::Kind::kUnimplemented);
  }
  expectStillServing();
}

TEST_F(IntegrationErrors, WrongArity) {
  auto error = errorOf([&] { client().call1("matmul", {f32({2, 2})}).wait(); });
  EXPECT_TRUE(mentions(error, {"matmul", "2"}));
  EXPECT_TRUE(mentionsAny(error, {"input"}));
  expectStillServing();
}

TEST_F(IntegrationErrors, IncompatibleShapesForAdd) {
  auto error = errorOf([&] { (f32({2, 3}) + f32({4, 5})).wait(); });
  EXPECT_TRUE(mentions(error, {"add"}));
  EXPECT_TRUE(mentionsAny(error, {"[2, 3]", "[4, 5]"}));
  expectStillServing();
}

TEST_F(IntegrationErrors, IncompatibleShapesForMatmul) {
  auto error = errorOf([&] { matmul(f32({2, 3}), f32({4, 5})).wait(); });
  EXPECT_TRUE(mentions(error, {"matmul"}));
  EXPECT_TRUE(mentionsAny(error, {"[2, 3]", "[4, 5]"}));
  expectStillServing();
}

TEST_F(IntegrationErrors, ErrorInsidePipelinedChainReachesTheEnd) {
  // The bad call is in the middle; the error surfaces at the final read.
  Tensor x = f32({2, 3});
  Tensor bad = matmul(x, x);
  auto error = errorOf([&] { relu(bad + x).wait(); });
  EXPECT_TRUE(mentions(error, {"matmul"}));
  expectStillServing();
}

TEST_F(IntegrationErrors, UnknownAttribute) {
  auto error = errorOf([&] {
    client().call1("sum", {f32({2, 3})}, {{"dim", int64_t(0)}, {"bogus", int64_t(1)}}).wait();
  });
  EXPECT_TRUE(mentions(error, {"sum", "bogus"}));
  expectStillServing();
}

TEST_F(IntegrationErrors, WrongAttributeType) {
  auto error = errorOf([&] { client().call1("sum", {f32({2, 3})}, {{"dim", std::string("zero")}}).wait(); });
  EXPECT_TRUE(mentions(error, {"sum", "dim"}));
  EXPECT_TRUE(mentionsAny(error, {"int"}));
  expectStillServing();
}

TEST_F(IntegrationErrors, UnsupportedDtype) {
  // bitwise ops take integers and bool only.
  std::vector<float> floats = {1, -2, 3};
  Tensor t = client().upload(DType::F32, Shape{3}, std::as_bytes(std::span(floats)));
  auto error = errorOf([&] { client().call1("bitwise_not", {t}).wait(); });
  EXPECT_TRUE(mentions(error, {"bitwise_not", "f32"}));
  if (error) {
    EXPECT_EQ(error->kind(), Error::Kind::kUnimplemented);
  }
  expectStillServing();
}

TEST_F(IntegrationErrors, UnknownTensorName) {
  auto error = errorOf([&] { client().restore("no_such_tensor").wait(); });
  EXPECT_TRUE(mentions(error, {"no_such_tensor"}));
  auto removeError = errorOf([&] { client().remove("no_such_tensor"); });
  EXPECT_TRUE(mentions(removeError, {"no_such_tensor"}));
  expectStillServing();
}

TEST_F(IntegrationErrors, UploadLargerThanMaxTensorBytes) {
  std::vector<float> big(kMaxTensorBytes / sizeof(float) + 1, 1.0f);
  auto error = errorOf([&] { client().upload(Shape{int64_t(big.size())}, big).wait(); });
  EXPECT_TRUE(mentionsAny(error, {"max_tensor_bytes", std::to_string(kMaxTensorBytes), "16 mib"}));
  EXPECT_TRUE(mentionsAny(error, {std::to_string(big.size() * sizeof(float)), "larger", "exceeds", "too large"}));
  expectStillServing();
}

TEST_F(IntegrationErrors, DeviceMemoryExhaustedIsOverloaded) {
  // 12 MiB tensors until the 64 MiB limit is hit; each fits max_tensor_bytes.
  std::vector<float> chunk(3u << 20, 1.0f);
  std::vector<Tensor> held;
  std::optional<Error> error;
  for (int i = 0; i < 12 && !error; ++i) {
    error = errorOf([&] {
      Tensor t = client().upload(Shape{int64_t(chunk.size())}, chunk);
      t.wait();
      held.push_back(t);
    });
  }
  ASSERT_TRUE(error.has_value()) << "uploaded " << held.size() * 12 << " MiB under a 64 MiB limit";
  EXPECT_EQ(error->kind(), Error::Kind::kOverloaded) << error->what();
  EXPECT_TRUE(mentionsAny(error, {"memory"}));

  // An op whose output does not fit fails the same way.
  auto opError = errorOf([&] { (held.front() + held.back()).wait(); });
  ASSERT_TRUE(opError.has_value());
  EXPECT_EQ(opError->kind(), Error::Kind::kOverloaded) << opError->what();
  EXPECT_TRUE(mentions(opError, {"add"}));

  // Dropping the handles gives the memory back.
  held.clear();
  expectStillServing();
  EXPECT_EQ(client().upload(Shape{int64_t(chunk.size())}, chunk).toHost(), chunk);
}

TEST_F(IntegrationErrors, WrongToken) {
  auto error = errorOf([&] { Client bad({.address = daemon().address(), .token = "not-the-token"}); });
  EXPECT_TRUE(mentionsAny(error, {"token", "authenticat"}));
  expectStillServing();
}

}  // namespace
}  // namespace tensord::testing
