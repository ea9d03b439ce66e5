// Per-principal quotas (policy "quotas") through a real daemon: each quota
// fails only the offender's call with OVERLOADED and a message naming the
// quota, its limit and the use; other principals are untouched; the offender
// recovers after freeing (dropping tensors, waiting, closing sessions).

#include <signal.h>
#include <stdlib.h>

#include <fstream>
#include <optional>

#include "tests/integration/policy_daemon_test.h"

namespace tensord::testing {
namespace {

namespace fs = std::filesystem;

// Every principal's token is "<name>-token"; "free" has no quotas.
const std::vector<std::string> kPrincipals = {"free", "count", "bytes", "big", "rate", "conn", "ops"};

constexpr const char* kPolicy = R"({
  "principals": {
    "free":  {"roles": ["all"]},
    "count": {"roles": ["all"], "quotas": {"tensor_count": 2}},
    "bytes": {"roles": ["all"], "quotas": {"device_bytes": 40}},
    "big":   {"roles": ["all"], "quotas": {"largest_tensor": 16}},
    "rate":  {"roles": ["all"], "quotas": {"calls_per_second": 5}},
    "conn":  {"roles": ["all"], "quotas": {"connections": 1}},
    "ops":   {"roles": ["all"], "quotas": {"inflight_ops": 1}}
  },
  "roles": {"all": {"rules": ["+@all", "~*:rwd"]}}
})";

class QuotaTest : public PolicyDaemonTest {
 protected:
  QuotaTest() : PolicyDaemonTest(kPrincipals, kPolicy) {}

  // The tensord::Error `f` throws, if any.
  static std::optional<Error> errorOf(const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return e;
    }
    return std::nullopt;
  }

  // `f` fails with OVERLOADED and a message containing `part`.
  static void expectQuota(const std::function<void()>& f, const std::string& part) {
    auto error = errorOf(f);
    ASSERT_TRUE(error.has_value()) << "expected a quota error containing: " << part;
    EXPECT_EQ(error->kind(), Error::Kind::kOverloaded) << error->what();
    EXPECT_NE(std::string(error->what()).find(part), std::string::npos) << error->what();
  }

  // The "free" principal works as usual: uploads, an op, a download.
  void expectFreeUntouched(Client& free) {
    std::vector<Tensor> held;
    for (int i = 0; i < 4; ++i) held.push_back(free.upload(Shape{3, 3}, std::vector<float>(9, 1.0f)));
    EXPECT_EQ(free.call1("add", {held[0], held[1]}).toHost(), std::vector<float>(9, 2.0f));
  }

  std::vector<float> data_{1, 2, 3, 4};  // 16 bytes
};

TEST_F(QuotaTest, TensorCountDeviceBytesAndLargestTensor) {
  auto free = as("free");
  auto freeHeld = free->upload(Shape{2, 2}, data_);

  // tensor_count 2: uploads and op outputs count; views count as tensors.
  auto count = as("count");
  auto a = count->upload(Shape{2, 2}, data_);
  auto b = count->upload(Shape{2, 2}, data_);
  a.wait();
  b.wait();
  expectQuota([&] { count->upload(Shape{2, 2}, data_).wait(); },
              "quota exceeded: principal 'count' would hold 3 tensors; tensor_count is 2 (policy.quotas)");
  expectQuota([&] { count->call1("add", {a, b}).wait(); }, "tensor_count is 2");
  expectQuota([&] { count->call1("reshape", {a}, {{"shape", std::vector<int64_t>{4}}}).wait(); }, "tensor_count is 2");

  // device_bytes 40: two 16-byte tensors fit, a third does not.
  auto bytes = as("bytes");
  auto c = bytes->upload(Shape{2, 2}, data_);
  auto d = bytes->upload(Shape{2, 2}, data_);
  c.wait();
  d.wait();
  expectQuota([&] { bytes->upload(Shape{2, 2}, data_).wait(); },
              "quota exceeded: principal 'bytes' would hold 48 bytes of device memory; device_bytes is 40 "
              "(policy.quotas)");
  expectQuota([&] { bytes->call1("add", {c, d}).wait(); }, "device_bytes is 40");

  // largest_tensor 16: a 2x2 f32 is fine, a 3x3 (36 bytes) is not, upload or output.
  auto big = as("big");
  auto e = big->upload(Shape{2, 2}, data_);
  EXPECT_EQ(big->call1("add", {e, e}).toHost(), (std::vector<float>{2, 4, 6, 8}));
  expectQuota([&] { big->upload(Shape{3, 3}, std::vector<float>(9, 1.0f)).wait(); },
              "quota exceeded: principal 'big' asked for a tensor of 36 bytes; largest_tensor is 16 (policy.quotas)");
  auto row = big->upload(Shape{1, 4}, data_);
  auto col = big->upload(Shape{4, 1}, data_);
  expectQuota([&] { big->call1("matmul", {col, row}).wait(); }, "asked for a tensor of 64 bytes");

  // Nobody else is affected.
  expectFreeUntouched(*free);
  EXPECT_EQ(freeHeld.toHost(), data_);

  // Freeing recovers: drop a handle and the next upload fits again.
  b = Tensor();
  ASSERT_TRUE(waitUntil([&] { return !errorOf([&] { count->upload(Shape{2, 2}, data_).wait(); }); },
                        std::chrono::seconds(10)));
  d = Tensor();
  ASSERT_TRUE(waitUntil([&] { return !errorOf([&] { bytes->upload(Shape{2, 2}, data_).wait(); }); },
                        std::chrono::seconds(10)));
  EXPECT_EQ(a.toHost(), data_);
  EXPECT_EQ(c.toHost(), data_);
}

TEST_F(QuotaTest, CallsPerSecondAndConnections) {
  auto free = as("free");
  // calls_per_second 5 (burst 5): the 6th quick call fails; waiting recovers.
  auto rate = as("rate");
  std::optional<Error> error;
  int ok = 0;
  for (int i = 0; i < 12 && !error; ++i) {
    error = errorOf([&] { rate->list(); });
    if (!error) ++ok;
  }
  ASSERT_TRUE(error.has_value());
  EXPECT_LE(ok, 6);
  EXPECT_EQ(error->kind(), Error::Kind::kOverloaded) << error->what();
  EXPECT_NE(std::string(error->what()).find("quota exceeded: principal 'rate' has used its burst of 5 calls"),
            std::string::npos)
      << error->what();
  EXPECT_NE(std::string(error->what()).find("calls_per_second is 5 (policy.quotas)"), std::string::npos)
      << error->what();
  for (int i = 0; i < 12; ++i) free->list();  // no rate for "free"
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  EXPECT_EQ(rate->upload(Shape{2, 2}, data_).toHost(), data_);

  // A graph run charges all its calls at once; one of more calls than the
  // burst can never run, and says so.
  auto chain = [&](int calls) {
    return rate->capture({{DType::F32, Shape{2, 2}}}, [&](const std::vector<Tensor>& in) {
      Tensor y = in[0];
      for (int i = 0; i < calls; ++i) y = y + in[0];
      return std::vector<Tensor>{y};
    });
  };
  Graph six = chain(6), three = chain(3);
  Tensor x = rate->upload(Shape{2, 2}, data_);
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  auto tooMany = errorOf([&] { six.run({x})[0].toHost(); });
  ASSERT_TRUE(tooMany.has_value());
  EXPECT_NE(std::string(tooMany->what()).find("principal 'rate' would make 6 calls at once, more than its burst of 5"),
            std::string::npos)
      << tooMany->what();
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  EXPECT_EQ(three.run({x})[0].toHost(), (std::vector<float>{4, 8, 12, 16}));

  // connections 1: a second session of "conn" is refused until the first closes.
  auto conn = std::make_unique<Client>(ConnectOptions{.address = daemon().address(), .token = "conn-token"});
  expectQuota([&] { Client second(ConnectOptions{.address = daemon().address(), .token = "conn-token"}); },
              "quota exceeded: principal 'conn' would have 2 sessions open; connections is 1 (policy.quotas)");
  auto free2 = as("free");  // others may open as many as they like
  expectFreeUntouched(*free2);
  EXPECT_EQ(conn->upload(Shape{2, 2}, data_).toHost(), data_);
  conn.reset();
  std::unique_ptr<Client> again;
  ASSERT_TRUE(waitUntil(
      [&] {
        return !errorOf([&] {
          again = std::make_unique<Client>(ConnectOptions{.address = daemon().address(), .token = "conn-token"});
        });
      },
      std::chrono::seconds(10)));
  EXPECT_EQ(again->upload(Shape{2, 2}, data_).toHost(), data_);
}

TEST_F(QuotaTest, InflightOpsAndReload) {
  // inflight_ops 1: pipelined matmuls queue up on the device; those issued
  // while one is still running fail.
  auto ops = as("ops");
  auto free = as("free");
  const int64_t n = 384;
  auto values = randomFloats(size_t(n * n), 7);
  auto x = ops->upload(Shape{n, n}, values);
  x.wait();
  std::vector<Tensor> outs;
  for (int i = 0; i < 24; ++i) outs.push_back(ops->call1("matmul", {x, x}));
  int refused = 0, succeeded = 0;
  for (auto& t : outs) {
    auto error = errorOf([&] { t.wait(); });
    if (!error) {
      ++succeeded;
      continue;
    }
    ++refused;
    EXPECT_EQ(error->kind(), Error::Kind::kOverloaded) << error->what();
    EXPECT_NE(std::string(error->what()).find("quota exceeded: principal 'ops' would have 2 ops in flight; "
                                              "inflight_ops is 1 (policy.quotas)"),
              std::string::npos)
        << error->what();
  }
  EXPECT_GE(succeeded, 1);
  EXPECT_GE(refused, 1) << "all 24 pipelined matmuls ran one at a time";
  // Another principal's pipelined calls all run.
  auto y = free->upload(Shape{n, n}, values);
  std::vector<Tensor> freeOuts;
  for (int i = 0; i < 8; ++i) freeOuts.push_back(free->call1("matmul", {y, y}));
  for (auto& t : freeOuts) EXPECT_FALSE(errorOf([&] { t.wait(); }).has_value());
  // Once the device is done (wait() only waits for the call), calls run again.
  outs.clear();
  EXPECT_TRUE(waitUntil([&] { return !errorOf([&] { ops->call1("matmul", {x, x}).toHost(); }); },
                        std::chrono::seconds(10)));

  // A reload applies to the next call: raise count's tensor_count to 3.
  auto count = as("count");
  auto a = count->upload(Shape{2, 2}, data_);
  auto b = count->upload(Shape{2, 2}, data_);
  b.wait();
  expectQuota([&] { count->upload(Shape{2, 2}, data_).wait(); }, "tensor_count is 2");
  std::string policy = kPolicy;
  policy.replace(policy.find(R"("tensor_count": 2)"), 17, R"("tensor_count": 3)");
  writePolicy(policy);
  const auto before = daemon().log().size();
  daemon().signal(SIGHUP);
  ASSERT_TRUE(waitUntil([&] { return daemon().log().find("reloaded ", before) != std::string::npos; },
                        std::chrono::seconds(20)));
  auto c = count->upload(Shape{2, 2}, data_);
  c.wait();
  expectQuota([&] { count->upload(Shape{2, 2}, data_).wait(); }, "would hold 4 tensors; tensor_count is 3");
}

}  // namespace
}  // namespace tensord::testing
