// A pipelined chain of 50 ops costs one round trip.
//
// A client talks to the daemon through a GateProxy. Once the inputs are
// uploaded the gate is held: bytes still flow client -> daemon, but nothing
// the daemon sends comes back. The client then issues 50 chained calls and
// asks for the last result. Over a second, direct connection the test watches
// DaemonInfo.opsExecuted grow by 50: every call reached the daemon and was
// accepted while no reply could have reached the client, so none of the calls
// waited for an earlier one's answer. Then the gate opens and the result is
// checked against a CPU reference.

#include <atomic>
#include <future>

#include "tests/integration/daemon_test.h"
#include "tests/integration/gate_proxy.h"

namespace tensord::testing {
namespace {

class IntegrationPipeline : public DaemonTest {};

constexpr int kChainLength = 50;
constexpr int64_t kElements = 1000;

// Step i of the chain, on the daemon (tensors) and on the CPU (floats). Each
// step is one elementwise op, exact in IEEE f32, so CPU and device agree.
Tensor step(int i, const Tensor& x, const Tensor& b, const Tensor& half) {
  switch (i % 4) {
    case 0:
      return x + b;
    case 1:
      return x * half;
    case 2:
      return x - half;
    default:
      return relu(x);
  }
}
float step(int i, float x, float b, float half) {
  switch (i % 4) {
    case 0:
      return x + b;
    case 1:
      return x * half;
    case 2:
      return x - half;
    default:
      return std::max(x, 0.0f);
  }
}

TEST_F(IntegrationPipeline, FiftyChainedCallsNeedOneRoundTrip) {
  GateProxy proxy(daemon().address());
  auto direct = connect();

  auto x0 = randomFloats(kElements, 31, -4, 4);
  auto b = randomFloats(kElements, 32, -1, 1);
  std::vector<float> half(kElements, 0.5f);

  std::promise<void> uploaded, gateHeld;
  std::shared_future<void> gateHeldFuture = gateHeld.get_future().share();
  std::atomic<bool> resultArrived{false};
  std::vector<float> result;
  std::string clientError;

  // The gated client lives on its own thread: its reads block until the gate opens.
  std::thread gated([&] {
    try {
      Client client({.address = proxy.address(), .token = daemon().token()});
      Tensor tx = client.upload(Shape{kElements}, x0);
      Tensor tb = client.upload(Shape{kElements}, b);
      Tensor th = client.upload(Shape{kElements}, half);
      tx.wait(), tb.wait(), th.wait();
      uploaded.set_value();
      gateHeldFuture.wait();
      Tensor x = tx;
      for (int i = 0; i < kChainLength; ++i) x = step(i, x, tb, th);
      result = x.toHost();  // the download request, sent without waiting for any call
      resultArrived = true;
    } catch (const std::exception& e) {
      clientError = e.what();
      resultArrived = true;
      try {
        uploaded.set_value();
      } catch (const std::future_error&) {
      }
    }
  });

  uploaded.get_future().wait();
  ASSERT_TRUE(clientError.empty()) << clientError;
  uint64_t before = direct->info().opsExecuted;
  proxy.hold();
  uint64_t deliveredBefore = proxy.bytesToClient();
  gateHeld.set_value();

  uint64_t executed = before;
  bool allRan = waitUntil(
      [&] {
        executed = direct->info().opsExecuted;
        return executed >= before + kChainLength;
      },
      std::chrono::seconds(60));
  // Accepted is not yet answered: replies follow when the device finishes.
  // Wait for some to pile up at the gate, so holding them is what kept the
  // client waiting.
  bool repliesHeld = waitUntil([&] { return proxy.bytesHeld() > 0; }, std::chrono::seconds(30));
  bool arrivedWhileHeld = resultArrived.load();
  uint64_t deliveredWhileHeld = proxy.bytesToClient() - deliveredBefore;
  proxy.release();
  gated.join();

  ASSERT_TRUE(clientError.empty()) << clientError;
  EXPECT_TRUE(allRan) << "with replies held back, the daemon accepted only " << (executed - before) << " of "
                      << kChainLength << " chained calls within 60 s: some call waited for an earlier reply";
  if (allRan) {
    EXPECT_EQ(executed, before + kChainLength) << "opsExecuted grew by more than the chain";
  }
  EXPECT_EQ(deliveredWhileHeld, 0u);
  EXPECT_FALSE(arrivedWhileHeld) << "the result reached the client while the gate was held";
  EXPECT_TRUE(repliesHeld) << "the daemon sent no replies within 30 s while the gate was held";

  ASSERT_EQ(result.size(), size_t(kElements));
  for (int64_t e = 0; e < kElements; ++e) {
    float want = x0[size_t(e)];
    for (int i = 0; i < kChainLength; ++i) want = step(i, want, b[size_t(e)], 0.5f);
    ASSERT_FLOAT_EQ(result[size_t(e)], want) << "element " << e;
  }
}

}  // namespace
}  // namespace tensord::testing
