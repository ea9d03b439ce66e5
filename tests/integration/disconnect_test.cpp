// A client's ephemeral tensors are freed when it goes away, orderly or not;
// its named tensors stay. Accounting is read over another connection from
// DaemonInfo.memory.

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include "tests/integration/daemon_test.h"

namespace tensord::testing {
namespace {

class IntegrationDisconnect : public DaemonTest {};

constexpr uint64_t kNamedBytes = 1024 * sizeof(float);

// Waits until the daemon holds exactly `base` plus one named tensor of kNamedBytes.
void expectBackToBaselinePlusNamed(Client& observer, const MemoryStats& base) {
  MemoryStats now;
  bool settled = waitUntil(
      [&] {
        now = observer.info().memory;
        return now.tensorCount == base.tensorCount + 1 && now.liveBytes == base.liveBytes + kNamedBytes &&
               now.namedCount == base.namedCount + 1;
      },
      std::chrono::seconds(30));
  EXPECT_TRUE(settled) << "after the client left: tensorCount " << now.tensorCount << " (want " << base.tensorCount + 1
                       << "), liveBytes " << now.liveBytes << " (want " << base.liveBytes + kNamedBytes
                       << "), namedCount " << now.namedCount << " (want " << base.namedCount + 1 << ")";
}

void expectNamedIntact(Client& client, const std::string& name) {
  Tensor kept = client.restore(name);
  EXPECT_EQ(kept.toHost(), std::vector<float>(1024, 2.5f));
}

TEST_F(IntegrationDisconnect, DestroyedClientFreesItsEphemeralTensors) {
  auto observer = connect();
  MemoryStats base = observer->info().memory;
  {
    auto client = connect();
    std::vector<float> data(256 * 1024, 1.5f);
    Tensor a = client->upload(Shape{256, 1024}, data);
    Tensor b = client->upload(Shape{256, 1024}, data);
    Tensor c = matmul(a, relu(client->upload(Shape{1024, 8}, std::vector<float>(8192, 0.25f))));
    Tensor named = client->upload(Shape{1024}, std::vector<float>(1024, 2.5f));
    named.save("kept");
    c.wait();
    MemoryStats during = observer->info().memory;
    // a, b, c and the named one; the temporaries behind c were dropped already.
    EXPECT_GE(during.tensorCount, base.tensorCount + 4);
    EXPECT_GE(during.liveBytes, base.liveBytes + 2 * data.size() * sizeof(float) + kNamedBytes);
    // Leaving the scope drops the handles, then the client disconnects.
  }
  expectBackToBaselinePlusNamed(*observer, base);
  expectNamedIntact(*observer, "kept");
}

TEST_F(IntegrationDisconnect, KilledClientFreesItsEphemeralTensors) {
  auto observer = connect();
  MemoryStats base = observer->info().memory;

  Subprocess holder({(buildDir() / "tests" / "integration" / "tensord_client_holder").string(), daemon().address(),
                     daemon().token(), "kept"});
  std::string output;
  bool ready = waitUntil(
      [&] {
        pollfd pfd{holder.outputFd(), POLLIN, 0};
        if (poll(&pfd, 1, 100) <= 0) return false;
        char buf[256];
        ssize_t n = read(holder.outputFd(), buf, sizeof buf);
        if (n > 0) output.append(buf, size_t(n));
        return output.find("ready") != std::string::npos || n == 0;
      },
      std::chrono::seconds(60));
  ASSERT_TRUE(ready && output.find("ready") != std::string::npos) << "client holder did not get ready: " << output;

  MemoryStats during = observer->info().memory;
  EXPECT_GE(during.tensorCount, base.tensorCount + 4);
  EXPECT_GE(during.liveBytes, base.liveBytes + 3 * (1u << 20) + kNamedBytes);

  holder.signal(SIGKILL);
  ASSERT_TRUE(holder.wait(std::chrono::seconds(10)).has_value());
  expectBackToBaselinePlusNamed(*observer, base);
  expectNamedIntact(*observer, "kept");
}

}  // namespace
}  // namespace tensord::testing
