// A real daemon under abuse, through raw sockets and raw Cap'n Proto:
// truncated frames, frame headers announcing oversized messages, garbage,
// well-formed messages that are no valid RPC, connections that never
// authenticate, more connections than limits.max_connections, calls past
// limits.max_inflight_calls_per_connection, messages past
// limits.max_message_bytes, and policy reloads (Session.adminReload and
// SIGHUP) under load. Each offending connection is closed by the daemon (or
// only its call fails), clients connected throughout keep succeeding, and the
// daemon's memory, file descriptors and tensors return to their baseline.

#include <capnp/message.h>
#include <capnp/rpc-twoparty.h>
#include <capnp/rpc.capnp.h>
#include <capnp/serialize.h>
#include <kj/async-io.h>
#include <signal.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <mutex>

#include "protocol/tensord.capnp.h"
#include "tests/integration/policy_daemon_test.h"
#include "tests/integration/raw_socket.h"

namespace tensord::testing {
namespace {

namespace fs = std::filesystem;

constexpr uint64_t kMaxMessageBytes = 2u << 20;  // the smallest the daemon accepts
constexpr auto kGenerous = std::chrono::seconds(30);


size_t occurrences(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + part.size())) ++n;
  return n;
}

// Resident set size of process `pid` in bytes (/proc/PID/statm).
uint64_t residentBytes(pid_t pid) {
  std::ifstream statm("/proc/" + std::to_string(pid) + "/statm");
  uint64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * uint64_t(sysconf(_SC_PAGESIZE));
}

// Open file descriptors of process `pid` (/proc/PID/fd).
size_t openFds(pid_t pid) {
  size_t n = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator("/proc/" + std::to_string(pid) + "/fd")) ++n;
  return n;
}

// A client on a thread of its own, running `step` in a loop until stopped;
// counts the steps that succeeded and keeps the first failure (any failure
// ends the loop).
class Worker {
 public:
  Worker(ConnectOptions options, std::function<void(Client&)> step)
      : thread_([this, options = std::move(options), step = std::move(step)] { run(options, step); }) {}
  ~Worker() { stop(); }

  void stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  uint64_t successes() const { return successes_; }
  std::string failure() const {
    std::lock_guard lock(mu_);
    return failure_;
  }
  // Waits until `n` more steps than now have succeeded; false on a failure.
  bool advances(uint64_t n = 2) {
    const uint64_t target = successes_ + n;
    return waitUntil([&] { return successes_ >= target || !failure().empty(); }, kGenerous) && failure().empty();
  }

 private:
  void run(const ConnectOptions& options, const std::function<void(Client&)>& step) {
    try {
      Client client(options);
      while (!stop_) {
        step(client);
        ++successes_;
        // Leaves the shared cores to the daemon and the test.
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    } catch (const std::exception& e) {
      std::lock_guard lock(mu_);
      failure_ = e.what();
    }
  }

  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> successes_{0};
  mutable std::mutex mu_;
  std::string failure_;  // GUARDED_BY(mu_)
  std::thread thread_;   // last: starts once the rest exists
};

// One tiny op with a known answer.
void tinyOp(Client& client) {
  auto x = client.upload(Shape{3}, std::vector<float>{-1.0f, 0.0f, 2.0f});
  if (relu(x).toHost() != std::vector<float>{0.0f, 0.0f, 2.0f}) throw std::runtime_error("relu gave a wrong answer");
}

// ---------------------------------------------------------------- raw frames

// The segment table of a Cap'n Proto frame: the count minus one, then each
// segment's size in words, padded to a whole word.
std::string frameHeader(const std::vector<uint32_t>& segmentWords) {
  std::vector<uint32_t> table;
  table.push_back(uint32_t(segmentWords.size() - 1));
  table.insert(table.end(), segmentWords.begin(), segmentWords.end());
  if (table.size() % 2 != 0) table.push_back(0);
  return std::string(reinterpret_cast<const char*>(table.data()), table.size() * sizeof(uint32_t));
}

std::string frameOf(capnp::MessageBuilder& message) {
  auto words = capnp::messageToFlatArray(message);
  auto bytes = words.asBytes();
  return std::string(reinterpret_cast<const char*>(bytes.begin()), bytes.size());
}

enum class Abuse {
  kTruncated,        // a frame cut short, then the client hangs up
  kHugeSegment,      // a header announcing one segment past max_message_bytes
  kTooManySegments,  // a header announcing 1000 segments
  kGarbage,          // random bytes
  kBadTarget,        // a well-formed RPC call to a capability that does not exist
  kUnknownMessage,   // a well-formed message of a kind RPC does not know
  kSilent,           // connects and sends nothing
};
constexpr Abuse kAllAbuses[] = {Abuse::kTruncated, Abuse::kHugeSegment,    Abuse::kTooManySegments, Abuse::kGarbage,
                                Abuse::kBadTarget, Abuse::kUnknownMessage, Abuse::kSilent};

// Opens a connection and misbehaves on it; returns the fd (the daemon is
// expected to close its side).
int abuse(const std::string& address, Abuse kind, uint32_t seed) {
  int fd = rawConnect(address);
  if (fd < 0) throw std::runtime_error("cannot connect to " + address);
  switch (kind) {
    case Abuse::kTruncated:
      sendAll(fd, frameHeader({64}) + std::string(10 * 8, '\0'));
      shutdown(fd, SHUT_WR);
      break;
    case Abuse::kHugeSegment:
      sendAll(fd, frameHeader({uint32_t(kMaxMessageBytes / 8 + 1)}));
      break;
    case Abuse::kTooManySegments:
      sendAll(fd, frameHeader(std::vector<uint32_t>(1000, 1)));
      break;
    case Abuse::kGarbage: {
      std::mt19937 rng(seed);
      std::string bytes(4096, '\0');
      for (char& c : bytes) c = char(rng());
      sendAll(fd, bytes);
      break;
    }
    case Abuse::kBadTarget: {
      capnp::MallocMessageBuilder message;
      auto call = message.initRoot<capnp::rpc::Message>().initCall();
      call.setQuestionId(1);
      call.initTarget().setImportedCap(7777);
      call.setInterfaceId(0x1234);
      call.setMethodId(0);
      call.initParams();
      sendAll(fd, frameOf(message));
      break;
    }
    case Abuse::kUnknownMessage: {
      // A struct whose union tag (the first 16 bits) names no RPC message kind.
      const uint64_t words[2] = {uint64_t(1) << 32, 0x7777};
      sendAll(fd, frameHeader({2}) + std::string(reinterpret_cast<const char*>(words), sizeof words));
      break;
    }
    case Abuse::kSilent:
      break;
  }
  return fd;
}

// Opens `perKind` connections of every kind at once; returns their fds.
std::vector<int> abuseAll(const std::string& address, int perKind, uint32_t seed) {
  std::vector<int> fds;
  for (int i = 0; i < perKind; ++i) {
    for (Abuse kind : kAllAbuses) fds.push_back(abuse(address, kind, seed + uint32_t(fds.size())));
  }
  return fds;
}

// Every fd is closed by the daemon (generously bounded); closes ours.
void expectAllClosed(std::vector<int>& fds) {
  size_t open = 0;
  for (int fd : fds) {
    if (!closedWithin(fd, kGenerous)) ++open;
    close(fd);
  }
  fds.clear();
  EXPECT_EQ(open, 0u) << open << " abusive connection(s) were not closed by the daemon";
}

class RobustnessTest : public DaemonTest {
 protected:
  DaemonOptions daemonOptions() override {
    DaemonOptions options;
    options.limits = {{"max_message_bytes", kMaxMessageBytes}};
    options.extra = {{"auth_timeout_ms", 1000}};  // closes silent and unknown-message connections soon
    return options;
  }
};

TEST_F(RobustnessTest, AbusiveConnectionsAreClosedAndEverythingReturnsToBaseline) {
  auto observer = connect();
  const MemoryStats before = observer->info().memory;

  Worker prober(connectOptions(), tinyOp);
  ASSERT_TRUE(prober.advances()) << prober.failure();

  // Warm-up: one of each kind, so lazily made buffers exist before the baseline.
  auto warmup = abuseAll(daemon().address(), 1, 1);
  expectAllClosed(warmup);
  ASSERT_TRUE(prober.advances()) << prober.failure();
  const pid_t pid = daemon().pid();
  const size_t baseFds = openFds(pid);
  const uint64_t baseRss = residentBytes(pid);

  for (int round = 0; round < 3; ++round) {
    auto fds = abuseAll(daemon().address(), 10, 1000 * uint32_t(round + 1));  // 70 connections
    // While they are open, the prober and a fresh client keep working.
    EXPECT_TRUE(prober.advances()) << prober.failure();
    tinyOp(*connect());
    expectAllClosed(fds);
  }
  EXPECT_TRUE(prober.advances()) << prober.failure();
  tinyOp(*observer);

  EXPECT_TRUE(waitUntil([&] { return openFds(pid) <= baseFds; }, kGenerous))
      << "the daemon has " << openFds(pid) << " fds open, " << baseFds << " before the abuse";
  const uint64_t rss = residentBytes(pid);
  EXPECT_LE(rss, baseRss + (16u << 20)) << "resident memory grew from " << baseRss << " to " << rss << " bytes";

  prober.stop();
  EXPECT_EQ(prober.failure(), "");
  EXPECT_TRUE(waitUntil(
      [&] {
        const MemoryStats now = observer->info().memory;
        return now.tensorCount == before.tensorCount && now.liveBytes == before.liveBytes;
      },
      kGenerous))
      << "tensors " << observer->info().memory.tensorCount << " (" << before.tensorCount << " before), live bytes "
      << observer->info().memory.liveBytes << " (" << before.liveBytes << " before)";
  EXPECT_TRUE(contains(daemon().log(), "not authenticated within auth_timeout_ms")) << daemon().log();
}

// The daemon runs on the allocator it was built with, for the whole process
// (a library linked but not in use would leave glibc's malloc in charge),
// and says which at startup.
TEST_F(RobustnessTest, TheDaemonRunsOnTheAllocatorItWasBuiltWith) {
  tinyOp(*connect());
  std::ifstream maps("/proc/" + std::to_string(daemon().pid()) + "/maps");
  std::stringstream mapped;
  mapped << maps.rdbuf();
#ifdef TENSORD_HAVE_MIMALLOC
  EXPECT_TRUE(contains(mapped.str(), "libmimalloc")) << "libmimalloc is not mapped into the daemon";
  EXPECT_TRUE(contains(daemon().log(), "allocator mimalloc 2.")) << daemon().log();
#else
  EXPECT_FALSE(contains(mapped.str(), "libmimalloc"));
  EXPECT_TRUE(contains(daemon().log(), "allocator the system's malloc")) << daemon().log();
#endif
}

// ---------------------------------------------------------------- raw RPC

// Runs `body` on a thread of its own: a raw Cap'n Proto client needs an event
// loop, and this thread's may belong to the client library.
void onOwnThread(const std::function<void()>& body) { std::thread(body).join(); }

// A raw Cap'n Proto connection to the daemon's bootstrap capability.
struct RawRpc {
  RawRpc(kj::AsyncIoContext& io, const std::string& address)
      : stream(io.provider->getNetwork().parseAddress(address).wait(io.waitScope)->connect().wait(io.waitScope)),
        client(*stream),
        daemon(client.bootstrap().castAs<proto::Daemon>()) {}

  // Authenticates with `token` and returns the session.
  proto::Session::Client session(const std::string& token, kj::WaitScope& waitScope) {
    auto auth = daemon.authenticateRequest();
    auth.setToken(token);
    return auth.send().wait(waitScope).getSession();
  }

  kj::Own<kj::AsyncIoStream> stream;
  capnp::TwoPartyClient client;
  proto::Daemon::Client daemon;
};

// The exception `promise` rejects with (a KJ exception of type FAILED saying
// so if it resolves).
template <typename T>
kj::Exception rejectionOf(kj::Promise<T>&& promise, kj::WaitScope& waitScope) {
  return promise
      .then([](auto&&) { return KJ_EXCEPTION(FAILED, "the call succeeded"); },
            [](kj::Exception&& e) { return kj::mv(e); })
      .wait(waitScope);
}

TEST(IntegrationLimits, MessagesPastMaxMessageBytesEndTheirConnectionOnly) {
  DaemonOptions options;
  options.limits = {{"max_message_bytes", kMaxMessageBytes}};
  DaemonProcess daemon(options);
  onOwnThread([&] {
    auto io = kj::setupAsyncIo();
    RawRpc raw(io, daemon.address());
    // Just under the limit: read and answered (a wrong token), the connection stays.
    auto under = raw.daemon.authenticateRequest();
    under.setToken(std::string(kMaxMessageBytes * 3 / 4, 'x'));
    auto e = rejectionOf(under.send(), io.waitScope);
    EXPECT_EQ(e.getType(), kj::Exception::Type::FAILED);
    EXPECT_TRUE(contains(e.getDescription().cStr(), "authentication failed: unknown token"))
        << e.getDescription().cStr();
    auto ok = raw.daemon.authenticateRequest();
    ok.setToken(daemon.token());
    EXPECT_EQ(std::string(ok.send().wait(io.waitScope).getPrincipal().cStr()), daemon.principal());

    // Past the limit: the daemon refuses to read it and drops the connection.
    RawRpc other(io, daemon.address());
    auto over = other.daemon.authenticateRequest();
    over.setToken(std::string(kMaxMessageBytes + 4096, 'x'));
    auto dropped = rejectionOf(over.send(), io.waitScope);
    EXPECT_EQ(dropped.getType(), kj::Exception::Type::DISCONNECTED) << dropped.getDescription().cStr();
    // The first connection is unaffected.
    auto again = raw.daemon.authenticateRequest();
    again.setToken(daemon.token());
    EXPECT_EQ(std::string(again.send().wait(io.waitScope).getPrincipal().cStr()), daemon.principal());
  });
  Client client({.address = daemon.address(), .token = daemon.token()});
  tinyOp(client);
  auto status = daemon.stop();
  EXPECT_TRUE(status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << daemon.log();
}

TEST(IntegrationLimits, CallsPastMaxInflightAreOverloadedAndTheConnectionSurvives) {
  DaemonOptions options;
  options.limits = {{"max_inflight_calls_per_connection", 2}};
  DaemonProcess daemon(options);
  onOwnThread([&] {
    auto io = kj::setupAsyncIo();
    RawRpc raw(io, daemon.address());
    proto::Session::Client session = raw.session(daemon.token(), io.waitScope);

    // Inputs the client has not resolved keep calls in flight on the daemon.
    auto input = kj::newPromiseAndFulfiller<proto::Tensor::Client>();
    proto::Tensor::Client pending = kj::mv(input.promise);
    auto held = [&] {
      auto call = session.callRequest();
      call.setOp("add");
      auto inputs = call.initInputs(2);
      inputs.set(0, pending);
      inputs.set(1, pending);
      return call.send();
    };
    auto first = held();
    auto second = held();
    // Calls are taken in order, so both are in flight before this one arrives.
    auto e = rejectionOf(session.whoamiRequest().send(), io.waitScope);
    EXPECT_EQ(e.getType(), kj::Exception::Type::OVERLOADED);
    EXPECT_TRUE(contains(e.getDescription().cStr(),
                         "whoami: too many calls in flight on this connection (limit 2, "
                         "limits.max_inflight_calls_per_connection)"))
        << e.getDescription().cStr();

    // Another connection is not limited by this one's calls.
    RawRpc other(io, daemon.address());
    auto otherSession = other.session(daemon.token(), io.waitScope);
    EXPECT_EQ(std::string(otherSession.whoamiRequest().send().wait(io.waitScope).getPrincipal().cStr()),
              daemon.principal());

    // Once the held calls end, the connection takes calls again.
    input.fulfiller->reject(KJ_EXCEPTION(FAILED, "input withdrawn by the test"));
    EXPECT_TRUE(contains(rejectionOf(kj::mv(first), io.waitScope).getDescription().cStr(), "input withdrawn"));
    EXPECT_TRUE(contains(rejectionOf(kj::mv(second), io.waitScope).getDescription().cStr(), "input withdrawn"));
    EXPECT_EQ(std::string(session.whoamiRequest().send().wait(io.waitScope).getPrincipal().cStr()), daemon.principal());
  });
  auto status = daemon.stop();
  EXPECT_TRUE(status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << daemon.log();
}

// Batches a client library would never send: each mistake is named, and
// the connection keeps serving.
TEST(IntegrationLimits, MalformedBatchesAreRefusedWithWhatIsWrong) {
  DaemonProcess daemon(DaemonOptions{});
  onOwnThread([&] {
    auto io = kj::setupAsyncIo();
    RawRpc raw(io, daemon.address());
    proto::Session::Client session = raw.session(daemon.token(), io.waitScope);

    auto upload = session.uploadRequest();
    upload.initDesc().setDtype(proto::DType::F32);
    upload.getDesc().initShape(1).set(0, 1);
    auto writer = upload.send().wait(io.waitScope).getWriter();
    auto write = writer.writeRequest();
    const float one = 1.0f;
    write.setData(kj::arrayPtr(reinterpret_cast<const capnp::byte*>(&one), sizeof one));
    write.send().wait(io.waitScope);
    proto::Tensor::Client x = writer.commitRequest().send().wait(io.waitScope).getTensor();

    // A call that names a later call's output fails; the batch's others run.
    {
      auto batch = session.callBatchRequest();
      auto calls = batch.initCalls(2);
      calls[0].setOp("add");
      auto in0 = calls[0].initInputs(2);
      auto forward = in0[0].initEarlier();
      forward.setCall(1);
      forward.setOutput(0);
      in0[1].setTensor(x);
      calls[1].setOp("add");
      auto in1 = calls[1].initInputs(2);
      in1[0].setTensor(x);
      in1[1].setTensor(x);
      auto keep = batch.initKeep(3);
      keep[0].setCall(0);
      keep[1].setCall(1);
      keep[2].setCall(1);
      keep[2].setOutput(5);
      auto results = batch.send().wait(io.waitScope).getResults();
      auto get = [&](uint32_t i) {
        auto request = results.getRequest();
        request.setIndex(i);
        return request.send().wait(io.waitScope).getTensor();
      };
      auto e0 = rejectionOf(get(0).infoRequest().send(), io.waitScope);
      EXPECT_TRUE(contains(e0.getDescription().cStr(),
                           "add: input 'input' names call 1 of the batch; expected an earlier call (below 0)"))
          << e0.getDescription().cStr();
      auto info = get(1).infoRequest().send().wait(io.waitScope);
      EXPECT_EQ(info.getInfo().getDesc().getShape().size(), 1u);
      auto e2 = rejectionOf(get(2).infoRequest().send(), io.waitScope);
      EXPECT_TRUE(contains(e2.getDescription().cStr(), "callBatch: keep[2] names output 5 of call 1, which has 1 output(s)"))
          << e2.getDescription().cStr();
    }
    // A kept output of a call the batch does not have refuses the batch.
    {
      auto batch = session.callBatchRequest();
      batch.initCalls(1)[0].setOp("add");
      batch.initKeep(1)[0].setCall(3);
      auto e = rejectionOf(batch.send(), io.waitScope);
      EXPECT_TRUE(contains(e.getDescription().cStr(), "callBatch: keep[0] names call 3; the batch has 1 call(s)"))
          << e.getDescription().cStr();
    }
    // Too many calls for one batch.
    {
      auto batch = session.callBatchRequest();
      batch.initCalls(5000);
      auto e = rejectionOf(batch.send(), io.waitScope);
      EXPECT_TRUE(contains(e.getDescription().cStr(), "callBatch: 5000 calls; expected at most 4096 per batch"))
          << e.getDescription().cStr();
    }
    EXPECT_EQ(std::string(session.whoamiRequest().send().wait(io.waitScope).getPrincipal().cStr()), daemon.principal());
  });
  auto status = daemon.stop();
  EXPECT_TRUE(status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << daemon.log();
}

TEST(IntegrationLimits, ConnectionsPastMaxConnectionsAreClosedAtOnce) {
  DaemonOptions options;
  options.limits = {{"max_connections", 3}};
  DaemonProcess daemon(options);
  const ConnectOptions connectOptions{.address = daemon.address(), .token = daemon.token()};
  auto a = std::make_unique<Client>(connectOptions);
  auto b = std::make_unique<Client>(connectOptions);
  // Unauthenticated sockets count too. The daemon accepts in arrival order,
  // so this one is in before the next.
  int idle = rawConnect(daemon.address());
  ASSERT_GE(idle, 0);

  int refused = rawConnect(daemon.address());
  ASSERT_GE(refused, 0);
  EXPECT_TRUE(closedWithin(refused, kGenerous));
  close(refused);
  EXPECT_THROW(Client{connectOptions}, Error);
  ASSERT_TRUE(waitUntil([&] { return contains(daemon.log(), "(limits.max_connections 3)"); }, kGenerous))
      << daemon.log();
  EXPECT_TRUE(contains(daemon.log(), "closing the connection from 127.0.0.1:")) << daemon.log();
  EXPECT_TRUE(contains(daemon.log(), "action=connect")) << daemon.log();

  // The open connections keep working.
  tinyOp(*a);
  tinyOp(*b);
  // Once one closes, a new connection is taken.
  close(idle);
  std::unique_ptr<Client> c;
  ASSERT_TRUE(waitUntil(
      [&] {
        try {
          c = std::make_unique<Client>(connectOptions);
          return true;
        } catch (const Error&) {
          return false;
        }
      },
      kGenerous));
  tinyOp(*c);
  a.reset();
  b.reset();
  c.reset();
  auto status = daemon.stop();
  EXPECT_TRUE(status && WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << daemon.log();
}

// ---------------------------------------------------------------- reload under load

// Both allow "worker" everything; they differ in the worker's role, which
// shows which one is in force.
std::string policyWithRole(const std::string& role) {
  return R"({
  "principals": {
    "admin":  {"rules": ["+@all", "~*:rwd", "&admin:reload"]},
    "worker": {"roles": [")" +
         role + R"("]}
  },
  "roles": {"a": {"rules": ["+@all", "~*:rwd"]}, "b": {"rules": ["+@all", "~*:rwd"]}}
})";
}

class ReloadUnderLoadTest : public PolicyDaemonTest {
 protected:
  ReloadUnderLoadTest() : PolicyDaemonTest({"admin", "worker"}, policyWithRole("a")) {}
};

TEST_F(ReloadUnderLoadTest, HundredReloadsWhileClientsCall) {
  const ConnectOptions worker{.address = daemon().address(), .token = "worker-token"};
  // A pipelined chain read back in one round trip, and simple calls.
  Worker chains(worker, [](Client& c) {
    auto x = c.upload(Shape{4}, std::vector<float>{-2.0f, -1.0f, 1.0f, 2.0f});
    auto y = relu(-x) + x * x;  // three calls, one round trip
    if (y.toHost() != std::vector<float>{6.0f, 2.0f, 1.0f, 4.0f}) throw std::runtime_error("chain gave a wrong answer");
  });
  Worker simple(worker, [](Client& c) {
    c.whoami();
    c.list();
    c.info();
  });
  ASSERT_TRUE(chains.advances()) << chains.failure();
  ASSERT_TRUE(simple.advances()) << simple.failure();

  auto admin = as("admin");
  auto probe = as("worker");
  const std::string reloaded = "reloaded " + daemon().configPath().string();
  for (int i = 0; i < 100; ++i) {
    const std::string role = i % 2 == 0 ? "b" : "a";
    writePolicy(policyWithRole(role));
    if ((i / 2) % 2 == 0) {
      admin->adminReload();
    } else {
      const size_t seen = occurrences(daemon().log(), reloaded);
      daemon().signal(SIGHUP);
      ASSERT_TRUE(waitUntil([&] { return occurrences(daemon().log(), reloaded) > seen; }, kGenerous))
          << "reload " << i << " by SIGHUP was not logged";
    }
    ASSERT_EQ(probe->status().roles, std::vector<std::string>{role}) << "after reload " << i;

    if (i == 50) {
      // A broken file halfway: refused both ways, the policy in force stays.
      writePolicy(R"({"principals": {"worker": {"roles": ["nosuchrole"]}}})");
      try {
        admin->adminReload();
        ADD_FAILURE() << "a broken policy was reloaded";
      } catch (const Error& e) {
        EXPECT_TRUE(contains(e.what(), "unknown role 'nosuchrole'")) << e.what();
      }
      const std::string failed = "reload of " + daemon().configPath().string() + " failed";
      const size_t seen = occurrences(daemon().log(), failed);
      daemon().signal(SIGHUP);
      ASSERT_TRUE(waitUntil([&] { return occurrences(daemon().log(), failed) > seen; }, kGenerous)) << daemon().log();
      EXPECT_EQ(probe->status().roles, std::vector<std::string>{role});
      EXPECT_TRUE(chains.advances()) << chains.failure();
      EXPECT_TRUE(simple.advances()) << simple.failure();
    }
  }
  EXPECT_TRUE(chains.advances()) << chains.failure();
  EXPECT_TRUE(simple.advances()) << simple.failure();
  chains.stop();
  simple.stop();
  EXPECT_EQ(chains.failure(), "");
  EXPECT_EQ(simple.failure(), "");
}

}  // namespace
}  // namespace tensord::testing
