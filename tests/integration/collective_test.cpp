// Collectives between daemons: 2, 3 and 4 real tensord processes on
// ephemeral loopback ports form groups at run time (groupCreate on every
// member at once, each from a thread of its own) and run allreduce (sum,
// mean, max, min), broadcast, allgather, reduce_scatter and barrier on f32
// and f16 tensors of 1, 7 and 1M+3 elements, checked against a CPU
// reference; a header mismatch is reported on every member; a member killed
// mid-allreduce fails it on every survivor within the timeout, with their
// inputs intact and their memory back to where it was, and the group
// re-forms; node links run over TLS; a node whose principal lacks
// @collective cannot join.

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <thread>

#include "tests/integration/daemon_cluster.h"
#include "tests/integration/daemon_test.h"
#include "tests/integration/process.h"

namespace tensord::testing {
namespace {
namespace fs = std::filesystem;

constexpr uint32_t kTimeoutMs = 8000;
// Small chunks: the sizes tested here cross many of them, so the ring's
// pipelining and its merging of chunks for the device are exercised.
constexpr uint64_t kChunkBytes = 64u << 10;

// The cluster's config additions: a log level from TENSORD_TEST_LOG_LEVEL
// (debugging), plus `extra`.
ClusterOptions clusterOptions(nlohmann::json extra = nlohmann::json::object()) {
  ClusterOptions options;
  options.timeoutMs = kTimeoutMs;
  options.chunkBytes = kChunkBytes;
  if (const char* level = std::getenv("TENSORD_TEST_LOG_LEVEL")) extra["log_level"] = level;
  options.extra = std::move(extra);
  return options;
}

// The "auth" and "groups" objects DaemonCluster writes, for tests that add to them.
nlohmann::json clusterAuth(const ClusterOptions& options) {
  DaemonOptions d;
  return {{"tokens",
           {{{"principal", d.principal}, {"token_sha256", sha256Hex(d.token)}},
            {{"principal", "node"}, {"token_sha256", sha256Hex(options.nodeToken)}}}}};
}
nlohmann::json clusterGroups(const ClusterOptions& options) {
  nlohmann::json groups = {{"timeout_ms", options.timeoutMs}, {"node_credentials", {{"token", options.nodeToken}}}};
  if (options.chunkBytes != 0) groups["chunk_bytes"] = options.chunkBytes;
  return groups;
}

// DaemonCluster plus running one thread per member, and TLS clients.
class Cluster : public DaemonCluster {
 public:
  explicit Cluster(size_t n, ClusterOptions options = clusterOptions()) : DaemonCluster(n, std::move(options)) {}
  ~Cluster() { stopAll(); }

  std::vector<std::string> members(const std::string& scheme = "") const {
    std::vector<std::string> out;
    for (const auto& m : DaemonCluster::members()) out.push_back(scheme + m);
    return out;
  }
  ConnectOptions connect(size_t i) const {
    ConnectOptions options = DaemonCluster::connect(i);
    options.address = scheme_ + options.address;
    options.caFile = caFile_;
    return options;
  }
  // Clients use tls://, trusting `caFile`.
  void useTls(const std::string& caFile) {
    scheme_ = "tls://";
    caFile_ = caFile;
  }

  // Runs body(rank) for every rank in `ranks` at once, each in a thread of
  // its own (a Client belongs to the thread that made it). Returns each
  // rank's error message ("" when it returned normally).
  std::vector<std::string> onEach(const std::function<void(uint32_t)>& body, std::vector<uint32_t> ranks = {}) {
    if (ranks.empty()) {
      for (uint32_t r = 0; r < size(); ++r) ranks.push_back(r);
    }
    std::vector<std::string> errors(size());
    std::vector<std::thread> threads;
    for (uint32_t r : ranks) {
      threads.emplace_back([&, r] {
        try {
          body(r);
        } catch (const std::exception& e) {
          errors[r] = e.what();
          if (errors[r].empty()) errors[r] = "(an error without a message)";
        }
      });
    }
    for (auto& t : threads) t.join();
    return errors;
  }

  // Every member still running must exit with 0 after SIGTERM.
  void expectCleanStop() { EXPECT_EQ(stopAll(), ""); }

 private:
  std::string scheme_, caFile_;
};

std::string joined(const std::vector<std::string>& errors) {
  std::string out;
  for (size_t r = 0; r < errors.size(); ++r) {
    if (!errors[r].empty()) out += "rank " + std::to_string(r) + ": " + errors[r] + "\n";
  }
  return out;
}

// f16 through the compiler's _Float16 (round to nearest even, like the device).
std::vector<std::byte> toF16(const std::vector<float>& v) {
  std::vector<std::byte> out(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) {
    _Float16 h = static_cast<_Float16>(v[i]);
    std::memcpy(out.data() + 2 * i, &h, 2);
  }
  return out;
}
std::vector<float> fromF16(const std::vector<std::byte>& bytes) {
  std::vector<float> out(bytes.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    _Float16 h;
    std::memcpy(&h, bytes.data() + 2 * i, 2);
    out[i] = float(h);
  }
  return out;
}

// bf16: the upper half of an f32, rounded to nearest even (as the device does).
std::vector<std::byte> toBf16(const std::vector<float>& v) {
  std::vector<std::byte> out(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &v[i], 4);
    const auto h = uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    std::memcpy(out.data() + 2 * i, &h, 2);
  }
  return out;
}
std::vector<float> fromBf16(const std::vector<std::byte>& bytes) {
  std::vector<float> out(bytes.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, bytes.data() + 2 * i, 2);
    const uint32_t u = uint32_t(h) << 16;
    std::memcpy(&out[i], &u, 4);
  }
  return out;
}

// Rank r's values for a test tensor (f16 inputs are these rounded to f16).
std::vector<float> valuesOf(uint32_t rank, size_t n, uint32_t salt, DType dtype) {
  auto v = randomFloats(n, 1000 * salt + rank, -2.0f, 2.0f);
  if (dtype == DType::F16) v = fromF16(toF16(v));
  if (dtype == DType::BF16) v = fromBf16(toBf16(v));
  return v;
}

Tensor uploadAs(Client& c, DType dtype, const Shape& shape, const std::vector<float>& v) {
  if (dtype == DType::F32) return c.upload(DType::F32, shape, asBytes(v));
  auto bytes = dtype == DType::F16 ? toF16(v) : toBf16(v);
  return c.upload(dtype, shape, bytes);
}

std::vector<float> readAs(const Tensor& t, DType dtype) {
  return dtype == DType::F32   ? floatsFromBytes(t.bytes())
         : dtype == DType::F16 ? fromF16(t.bytes())
                               : fromBf16(t.bytes());
}

// The reduction of every rank's values, in double.
std::vector<double> reference(const std::string& op, uint32_t size, size_t n, uint32_t salt, DType dtype) {
  std::vector<double> out(n, op == "max" ? -1e300 : op == "min" ? 1e300 : 0.0);
  for (uint32_t r = 0; r < size; ++r) {
    auto v = valuesOf(r, n, salt, dtype);
    for (size_t i = 0; i < n; ++i) {
      if (op == "max")
        out[i] = std::max(out[i], double(v[i]));
      else if (op == "min")
        out[i] = std::min(out[i], double(v[i]));
      else
        out[i] += v[i];
    }
  }
  if (op == "mean") {
    for (auto& x : out) x /= size;
  }
  return out;
}

// Within rounding of the output dtype (sums of a few values in [-2, 2]).
void expectClose(const std::vector<float>& got, const std::vector<double>& want, DType dtype, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const double tolerance = dtype == DType::F32 ? 1e-5 : dtype == DType::F16 ? 5e-3 : 4e-2;
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::abs(got[i] - want[i]) > tolerance * (1.0 + std::abs(want[i]))) {
      if (++bad <= 3) ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", expected " << want[i];
    }
  }
  EXPECT_EQ(bad, 0u) << what;
}

// Forms group `name` on every member at once (groupCreate blocks until all are linked).
void formGroup(Cluster& cluster, const std::string& name, const std::vector<std::string>& members,
               std::vector<uint32_t> ranks = {}) {
  auto errors = cluster.onEach(
      [&](uint32_t r) {
        Client c(cluster.connect(r));
        GroupInfo info = c.groupCreate(name, members, r);
        if (info.state != "ready" || info.rank != r || info.size != members.size()) {
          throw std::runtime_error("groupCreate returned state '" + info.state + "', rank " +
                                   std::to_string(info.rank));
        }
      },
      ranks);
  ASSERT_EQ(joined(errors), "") << cluster.logs();
}

// Every kind and reduction on one cluster: allreduce (each op, f32 and f16,
// 1 and 7 elements, direct; 1M+3 elements, ring), broadcast, allgather,
// reduce_scatter and barrier, each member checking its own results against
// the reference, and allreduce results bit-identical across members.
void checkEveryKind(Cluster& cluster, bool large) {
  const uint32_t n = uint32_t(cluster.size());
  formGroup(cluster, "g", cluster.members());
  std::vector<std::vector<std::byte>> sums(n);
  auto errors = cluster.onEach([&](uint32_t r) {
    Client c(cluster.connect(r));
    uint32_t salt = 1;
    for (DType dtype : {DType::F32, DType::F16}) {
      for (size_t size : {size_t(1), size_t(7)}) {
        for (const std::string op : {"sum", "mean", "max", "min"}) {
          ++salt;
          auto x = uploadAs(c, dtype, Shape{int64_t(size)}, valuesOf(r, size, salt, dtype));
          auto y = c.collective("g", "allreduce", {x}, {{"op", op}});
          expectClose(readAs(y.at(0), dtype), reference(op, n, size, salt, dtype), dtype,
                      "rank " + std::to_string(r) + " allreduce " + op + " " + std::string(dtypeName(dtype)) + "[" +
                          std::to_string(size) + "]");
          // The input is left as it was.
          EXPECT_EQ(readAs(x, dtype), valuesOf(r, size, salt, dtype)) << "input after allreduce " << op;
        }
      }
    }
    // Past the direct algorithm's 256 KiB: the ring, also with 4 members.
    const size_t medium = 100003;
    for (DType dtype : {DType::F32, DType::F16}) {
      const std::string op = dtype == DType::F32 ? "sum" : "max";
      auto x = uploadAs(c, dtype, Shape{int64_t(medium)}, valuesOf(r, medium, 90, dtype));
      auto y = c.collective("g", "allreduce", {x}, {{"op", op}});
      expectClose(readAs(y.at(0), dtype), reference(op, n, medium, 90, dtype), dtype, "ring allreduce " + op);
    }
    // bf16 with f32 partial sums, direct and ring.
    for (size_t size : {size_t(7), medium}) {
      auto x = uploadAs(c, DType::BF16, Shape{int64_t(size)}, valuesOf(r, size, 95, DType::BF16));
      auto y = c.collective("g", "allreduce", {x}, {{"op", std::string("mean")}});
      expectClose(readAs(y.at(0), DType::BF16), reference("mean", n, size, 95, DType::BF16), DType::BF16,
                  "bf16 allreduce mean");
    }
    if (large) {
      // The ring, with several chunks per segment.
      const size_t big = (size_t(1) << 20) + 3;
      auto x = c.upload(DType::F32, Shape{int64_t(big)}, asBytes(valuesOf(r, big, 99, DType::F32)));
      auto y = c.collective("g", "allreduce", {x});
      sums[r] = y.at(0).bytes();
      expectClose(floatsFromBytes(sums[r]), reference("sum", n, big, 99, DType::F32), DType::F32, "large allreduce");
      // f16 mean over the ring: partial sums stay f32.
      auto h = uploadAs(c, DType::F16, Shape{int64_t(big)}, valuesOf(r, big, 98, DType::F16));
      auto hm = c.collective("g", "allreduce", {h}, {{"op", std::string("mean")}});
      expectClose(readAs(hm.at(0), DType::F16), reference("mean", n, big, 98, DType::F16), DType::F16,
                  "large f16 mean");
      // reduce_scatter over several chunks per segment.
      const int64_t rows = 1001 * n, cols = 67;
      const size_t count = size_t(rows * cols), slice = count / n;
      auto rs = c.upload(DType::F32, Shape{rows, cols}, asBytes(valuesOf(r, count, 97, DType::F32)));
      auto part = c.collective("g", "reduce_scatter", {rs}).at(0);
      EXPECT_EQ(part.shape(), (Shape{rows / n, cols}));
      auto full = reference("sum", n, count, 97, DType::F32);
      expectClose(floatsFromBytes(part.bytes()),
                  std::vector<double>(full.begin() + r * slice, full.begin() + (r + 1) * slice), DType::F32,
                  "large reduce_scatter");
    }
    // A bucket of two tensors of different dtypes, in place.
    auto a = c.upload(DType::F32, Shape{3}, asBytes(valuesOf(r, 3, 50, DType::F32)));
    auto b = uploadAs(c, DType::F16, Shape{2, 2}, valuesOf(r, 4, 51, DType::F16));
    auto inPlace = c.collective("g", "allreduce", {a, b}, {{"in_place", true}});
    expectClose(floatsFromBytes(a.bytes()), reference("sum", n, 3, 50, DType::F32), DType::F32, "in-place bucket f32");
    expectClose(readAs(b, DType::F16), reference("sum", n, 4, 51, DType::F16), DType::F16, "in-place bucket f16");

    // broadcast from the last rank: every member ends with its tensor.
    const uint32_t root = n - 1;
    auto s = c.upload(DType::F32, Shape{7}, asBytes(valuesOf(r, 7, 60, DType::F32)));
    auto bs = c.collective("g", "broadcast", {s}, {{"root", int64_t(root)}});
    auto want = valuesOf(root, 7, 60, DType::F32);
    EXPECT_EQ(floatsFromBytes(bs.at(0).bytes()), want) << "broadcast on rank " << r;

    // allgather stacks along a new leading dim.
    auto g = c.upload(DType::F32, Shape{2, 3}, asBytes(valuesOf(r, 6, 70, DType::F32)));
    auto gathered = c.collective("g", "allgather", {g}).at(0);
    EXPECT_EQ(gathered.shape(), (Shape{int64_t(n), 2, 3}));
    std::vector<float> all;
    for (uint32_t k = 0; k < n; ++k) {
      auto v = valuesOf(k, 6, 70, DType::F32);
      all.insert(all.end(), v.begin(), v.end());
    }
    EXPECT_EQ(floatsFromBytes(gathered.bytes()), all) << "allgather on rank " << r;

    // reduce_scatter: this rank's slice of the sum.
    const int64_t rows = 2 * n;
    auto rs = c.upload(DType::F32, Shape{rows, 3}, asBytes(valuesOf(r, size_t(rows * 3), 80, DType::F32)));
    auto part = c.collective("g", "reduce_scatter", {rs}, {{"op", std::string("max")}}).at(0);
    EXPECT_EQ(part.shape(), (Shape{2, 3}));
    auto full = reference("max", n, size_t(rows * 3), 80, DType::F32);
    expectClose(floatsFromBytes(part.bytes()), std::vector<double>(full.begin() + r * 6, full.begin() + r * 6 + 6),
                DType::F32, "reduce_scatter");

    c.collective("g", "barrier", {});
    auto after = c.collective("g", "allreduce", {c.upload(Shape{1}, std::vector<float>{1.0f})});
    EXPECT_EQ(after.at(0).toHost(), std::vector<float>{float(n)});
    auto groups = c.groupList();
    ASSERT_EQ(groups.size(), 1u);
    EXPECT_EQ(groups[0].state, "ready");
    EXPECT_GE(groups[0].collectives, 10u);
  });
  ASSERT_EQ(joined(errors), "") << cluster.logs();
  if (large) {
    for (uint32_t r = 1; r < n; ++r)
      EXPECT_TRUE(sums[r] == sums[0]) << "rank " << r << "'s allreduce differs from rank 0's";
  }
}

TEST(IntegrationCollective, ThreeMembersEveryKindAndReduction) {
  Cluster cluster(3);
  checkEveryKind(cluster, /*large=*/true);
  cluster.expectCleanStop();
}

TEST(IntegrationCollective, TwoMembers) {
  Cluster cluster(2);
  checkEveryKind(cluster, /*large=*/true);
  cluster.expectCleanStop();
}

TEST(IntegrationCollective, FourMembers) {
  Cluster cluster(4);
  checkEveryKind(cluster, /*large=*/false);
  cluster.expectCleanStop();
}

// groupCreate returns on a member only once every member has all its links
// up: one that deletes the group at once no longer pulls the links out from
// under members still forming it (they used to wait for the timeout). Rank
// 1 is stopped while rank 2 joins, so ranks 0 and 2 have every link to each
// other, and rank 0 every link, long before rank 1 has its link to rank 2.
TEST(IntegrationCollective, AMemberDeletingTheGroupAtOnceLeavesTheOthersFormed) {
  Cluster cluster(3);
  std::vector<double> seconds(3);
  std::vector<std::string> states(3);
  std::atomic<bool> stopped{false};
  std::thread conductor([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // ranks 0 and 1 linked
    cluster.at(1).signal(SIGSTOP);
    stopped = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(800));
    cluster.at(1).signal(SIGCONT);
  });
  auto errors = cluster.onEach([&](uint32_t r) {
    Client c(cluster.connect(r));
    while (r == 2 && !stopped) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const auto start = std::chrono::steady_clock::now();
    states[r] = c.groupCreate("g", cluster.members(), r).state;
    seconds[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (r == 0) c.groupDelete("g");
  });
  conductor.join();
  ASSERT_EQ(joined(errors), "") << cluster.logs();
  for (uint32_t r = 0; r < 3; ++r) {
    EXPECT_EQ(states[r], "ready") << "rank " << r;
    EXPECT_LT(seconds[r], kTimeoutMs / 2000.0) << "rank " << r << " waited for the formation timeout";
  }
  // The others learn that rank 0 left: their group breaks, naming it.
  for (uint32_t r = 1; r < 3; ++r) {
    Client c(cluster.connect(r));
    EXPECT_TRUE(waitUntil([&] { return c.groupList().at(0).state.rfind("broken: ", 0) == 0; },
                          std::chrono::seconds(5)))
        << "rank " << r << ": " << c.groupList().at(0).state;
  }
  cluster.expectCleanStop();
}

TEST(IntegrationCollective, ShapeMismatchIsReportedOnEveryMember) {
  Cluster cluster(2);
  formGroup(cluster, "g", cluster.members());
  auto errors = cluster.onEach([&](uint32_t r) {
    Client c(cluster.connect(r));
    auto x = c.upload(DType::F32, Shape{4, r == 0 ? 4 : 3}, asBytes(std::vector<float>(r == 0 ? 16 : 12, 1.0f)));
    auto y = c.collective("g", "allreduce", {x});
    y.at(0).wait();
  });
  for (uint32_t r = 0; r < 2; ++r) {
    EXPECT_NE(errors[r].find("allreduce on group g: rank 1 has f32[4, 3], rank 0 has f32[4, 4]"), std::string::npos)
        << "rank " << r << ": " << errors[r];
  }
  // Nothing moved: the group is still ready and the next collective works.
  errors = cluster.onEach([&](uint32_t r) {
    Client c(cluster.connect(r));
    auto y = c.collective("g", "allreduce", {c.upload(Shape{2}, std::vector<float>{1.0f, float(r)})});
    if (y.at(0).toHost() != std::vector<float>{2.0f, 1.0f}) throw std::runtime_error("wrong sum after a mismatch");
    if (c.groupList().at(0).state != "ready") throw std::runtime_error("group not ready after a mismatch");
    c.groupDelete("g");
    if (!c.groupList().empty()) throw std::runtime_error("groupDelete left the group listed");
  });
  EXPECT_EQ(joined(errors), "") << cluster.logs();
  cluster.expectCleanStop();
}

TEST(IntegrationCollective, KilledMemberFailsEverySurvivorAndTheGroupReforms) {
  Cluster cluster(3);
  formGroup(cluster, "g", cluster.members());
  // A stalled member (stopped, its links still open): the others give up
  // after the collective's timeout, naming it.
  cluster.at(2).signal(SIGSTOP);
  auto stalled = cluster.onEach(
      [&](uint32_t r) {
        Client c(cluster.connect(r));
        auto y = c.collective("g", "allreduce", {c.upload(Shape{2}, std::vector<float>{1.0f, 2.0f})},
                              {{"timeout_ms", int64_t(1500)}});
        y.at(0).wait();
      },
      {0, 1});
  cluster.at(2).signal(SIGCONT);
  for (uint32_t r = 0; r < 2; ++r) {
    EXPECT_NE(stalled[r].find("allreduce on group g: timed out after 1500 ms waiting for rank 2"), std::string::npos)
        << "rank " << r << ": " << stalled[r];
  }
  formGroup(cluster, "g", cluster.members());

  const size_t big = size_t(8) << 20;  // 32 MiB per member: long enough to be killed in the middle
  const uint32_t timeoutMs = 6000;
  std::atomic<int> issued{0};
  std::vector<double> seconds(3);
  auto errors = cluster.onEach([&](uint32_t r) {
    Client c(cluster.connect(r));
    auto values = valuesOf(r, big, 7, DType::F32);
    auto x = c.upload(DType::F32, Shape{int64_t(big)}, asBytes(values));
    x.wait();
    const uint64_t baseline = c.info().memory.liveBytes;
    const auto start = std::chrono::steady_clock::now();
    auto y = c.collective("g", "allreduce", {x}, {{"in_place", true}, {"timeout_ms", int64_t(timeoutMs)}});
    ++issued;
    if (r == 2) {
      while (issued < 3) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      std::this_thread::sleep_for(std::chrono::milliseconds(150));
      cluster.at(2).signal(SIGKILL);
      throw std::runtime_error("killed");
    }
    std::string error;
    try {
      y.at(0).wait();
    } catch (const Error& e) {
      error = e.what();
    }
    seconds[r] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (error.empty()) throw std::runtime_error("the allreduce succeeded although rank 2 was killed");
    // The input was in place: it must hold what was uploaded.
    if (floatsFromBytes(x.bytes()) != values) throw std::runtime_error("the input changed: " + error);
    if (!waitUntil([&] { return c.info().memory.liveBytes == baseline; }, std::chrono::seconds(10))) {
      throw std::runtime_error("device memory did not return to " + std::to_string(baseline) +
                               " bytes: " + std::to_string(c.info().memory.liveBytes) + "; error was: " + error);
    }
    if (c.groupList().at(0).state.rfind("broken: ", 0) != 0) throw std::runtime_error("group not broken: " + error);
    throw std::runtime_error(error);  // reported below
  });
  // A survivor whose ring neighbour gave up first may see that neighbour's
  // link drop before it learns of rank 2; at least one names rank 2.
  int namingRank2 = 0;
  for (uint32_t r = 0; r < 2; ++r) {
    EXPECT_NE(errors[r].find("allreduce on group g"), std::string::npos) << "rank " << r << ": " << errors[r];
    EXPECT_NE(errors[r].find("rank "), std::string::npos) << "rank " << r << ": " << errors[r];
    namingRank2 += errors[r].find("rank 2") != std::string::npos;
    EXPECT_LT(seconds[r], timeoutMs / 1000.0 + 3.0) << "rank " << r << ": " << errors[r];
  }
  EXPECT_GE(namingRank2, 1) << errors[0] << " / " << errors[1];
  cluster.at(2).stop();  // reaps the killed member
  // The survivors re-form the group between themselves, and it works.
  const auto members = cluster.members();
  formGroup(cluster, "g", {members[0], members[1]}, {0, 1});
  errors = cluster.onEach(
      [&](uint32_t r) {
        Client c(cluster.connect(r));
        auto y = c.collective("g", "allreduce", {c.upload(Shape{3}, std::vector<float>{1.0f, 2.0f, float(r)})});
        if (y.at(0).toHost() != std::vector<float>{2.0f, 4.0f, 1.0f}) throw std::runtime_error("wrong sum");
      },
      {0, 1});
  EXPECT_EQ(joined(errors), "") << cluster.logs();
  cluster.expectCleanStop();
}

// A CA and a server certificate for 127.0.0.1, made with the openssl tool.
class Certificates {
 public:
  Certificates() {
    std::string tmpl = (fs::temp_directory_path() / "tensord-coll-tls-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = tmpl;
    run({"req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key("ca"), "-out",
         pem("ca"), "-days", "30", "-subj", "/CN=tensord collective test CA"});
    const std::string csr = (dir_ / "server.csr").string(), ext = (dir_ / "server.ext").string();
    run({"req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key("server"), "-out", csr,
         "-subj", "/CN=localhost"});
    std::ofstream(ext) << "subjectAltName=IP:127.0.0.1,DNS:localhost\n";
    run({"x509", "-req", "-in", csr, "-CA", pem("ca"), "-CAkey", key("ca"), "-CAcreateserial", "-out", pem("server"),
         "-days", "30", "-extfile", ext});
  }
  ~Certificates() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string pem(const std::string& name) const { return (dir_ / (name + ".pem")).string(); }
  std::string key(const std::string& name) const { return (dir_ / (name + ".key")).string(); }

 private:
  void run(std::vector<std::string> argv) {
    argv.insert(argv.begin(), "/usr/bin/openssl");
    auto r = runCommand(argv, {}, std::chrono::seconds(60));
    if (r.exitCode != 0) throw std::runtime_error("openssl failed: " + r.err);
  }
  fs::path dir_;
};

TEST(IntegrationCollective, NodeLinksOverTls) {
  Certificates certs;
  ClusterOptions options = clusterOptions();
  nlohmann::json groups = clusterGroups(options);
  groups["node_credentials"]["ca_file"] = certs.pem("ca");
  options.extra["tls"] = {{"cert_file", certs.pem("server")}, {"key_file", certs.key("server")}};
  options.extra["groups"] = groups;
  Cluster cluster(2, options);
  cluster.useTls(certs.pem("ca"));
  formGroup(cluster, "secure", cluster.members("tls://"));
  auto errors = cluster.onEach([&](uint32_t r) {
    Client c(cluster.connect(r));
    const size_t n = 300000;  // the ring, several chunks
    auto x = c.upload(DType::F32, Shape{int64_t(n)}, asBytes(valuesOf(r, n, 5, DType::F32)));
    auto y = c.collective("secure", "allreduce", {x}, {{"op", std::string("mean")}});
    expectClose(floatsFromBytes(y.at(0).bytes()), reference("mean", 2, n, 5, DType::F32), DType::F32, "over TLS");
    auto info = c.groupList().at(0);
    if (info.members.at(0).rfind("tls://", 0) != 0) throw std::runtime_error("members are not tls://");
  });
  EXPECT_EQ(joined(errors), "") << cluster.logs();
  // Plain members are refused off loopback only; a tls:// listener refuses a plain link.
  errors = cluster.onEach([&](uint32_t r) {
    Client c(cluster.connect(r));
    c.groupCreate("plain", cluster.members(), r, 1500);
  });
  // Under load the failure can surface before the 1500 ms deadline's own
  // message is composed; either way it names the missing link.
  for (uint32_t r = 0; r < 2; ++r) {
    EXPECT_NE(errors[r].find("has not linked to this daemon"), std::string::npos) << errors[r];
  }
  cluster.expectCleanStop();
}

TEST(IntegrationCollective, NodeWithoutCollectiveCannotJoin) {
  std::string tmpl = (fs::temp_directory_path() / "tensord-coll-policy-XXXXXX").string();
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
  const fs::path dir = tmpl;
  const fs::path policy = dir / "policy.json";
  // "node" (how the members dial each other) may compute but not take part
  // in collectives; "viewer" may not form groups.
  std::ofstream(policy) << R"({"principals": {
      "tester": {"rules": ["+@all", "~*:rw", "&group:create"]},
      "node":   {"rules": ["+@elementwise"]},
      "viewer": {"rules": ["+@all", "~*:rw"]}}})";
  ClusterOptions options = clusterOptions();
  nlohmann::json auth = clusterAuth(options);
  auth["tokens"].push_back({{"principal", "viewer"}, {"token_sha256", sha256Hex("viewer-token")}});
  options.extra["auth"] = auth;
  options.extra["policy_file"] = policy.string();
  options.extra["audit_log"] = "audit.log";
  Cluster cluster(2, options);
  auto errors = cluster.onEach([&](uint32_t r) {
    Client c(cluster.connect(r));
    c.groupCreate("g", cluster.members(), r, 2000);
  });
  for (uint32_t r = 0; r < 2; ++r) {
    EXPECT_NE(errors[r].find("groupCreate g: timed out after 2000 ms"), std::string::npos) << errors[r];
    EXPECT_NE(
        errors[r].find("permission denied: principal 'node' may not call op 'groupConnect' (category @collective)"),
        std::string::npos)
        << errors[r];
    std::ifstream in(cluster.at(r).dir() / "audit.log");
    const std::string audit((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(audit.find("principal=node"), std::string::npos) << audit;
    EXPECT_NE(audit.find("resource=groupConnect"), std::string::npos) << audit;
  }
  // Without &group:create a principal cannot form a group at all.
  Client viewer({.address = cluster.at(0).address(), .token = "viewer-token"});
  try {
    viewer.groupCreate("g", cluster.members(), 0, 1000);
    ADD_FAILURE() << "viewer formed a group";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no rule grants &group:create"), std::string::npos) << e.what();
  }
  // The daemons serve everyone else throughout.
  Client c(cluster.connect(0));
  EXPECT_EQ(c.upload(Shape{2}, std::vector<float>{1.0f, 2.0f}).toHost(), (std::vector<float>{1.0f, 2.0f}));
  cluster.expectCleanStop();
  std::error_code ec;
  fs::remove_all(dir, ec);
}

// A loopback port free right now (a static group needs its members' ports
// before they start; the small window before the daemon binds it is the price).
uint16_t freeLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof addr;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) != 0) {
    throw std::runtime_error("cannot find a free port");
  }
  close(fd);
  return ntohs(addr.sin_port);
}

TEST(IntegrationCollective, StaticGroupFormsOnceItsMembersAreUp) {
  const std::vector<std::string> members = {"127.0.0.1:" + std::to_string(freeLoopbackPort()),
                                            "127.0.0.1:" + std::to_string(freeLoopbackPort())};
  auto options = [&](uint32_t rank) {
    const ClusterOptions cluster = clusterOptions();
    DaemonOptions o;
    o.listen = members[rank];
    o.extra = cluster.extra;
    o.extra["auth"] = clusterAuth(cluster);
    o.extra["groups"] = clusterGroups(cluster);
    o.extra["groups"]["static"] = {{{"name", "cfg"}, {"members", members}, {"rank", rank}}};
    return o;
  };
  // Each member waits until the group is ready, then runs an allreduce on it.
  auto useGroup = [](std::vector<DaemonProcess*> daemons) {
    std::vector<std::string> errors(2);
    std::vector<std::thread> threads;
    for (uint32_t r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        try {
          Client c({.address = daemons[r]->address(), .token = daemons[r]->token()});
          GroupInfo info;
          if (!waitUntil(
                  [&] {
                    info = c.groupList().at(0);
                    return info.state == "ready";
                  },
                  std::chrono::seconds(20))) {
            throw std::runtime_error("static group not ready: " + info.state);
          }
          if (info.origin != "config" || info.name != "cfg" || info.rank != r)
            throw std::runtime_error("wrong group info");
          auto y = c.collective("cfg", "allreduce", {c.upload(Shape{1}, std::vector<float>{float(r + 1)})});
          if (y.at(0).toHost() != std::vector<float>{3.0f}) throw std::runtime_error("wrong sum");
        } catch (const std::exception& e) {
          errors[r] = e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    return joined(errors);
  };
  // Member 0 starts alone and keeps dialing; member 1 comes up a moment later.
  DaemonProcess first(options(0));
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  auto second = std::make_unique<DaemonProcess>(options(1));
  EXPECT_EQ(useGroup({&first, second.get()}), "") << first.log() << second->log();

  // Member 1 stops: member 0's group breaks. Started again, member 1 forms
  // the group at its start, and member 0 forms it again on its own.
  EXPECT_EQ(second->stop(), std::optional<int>(0));
  {
    Client c({.address = first.address(), .token = first.token()});
    EXPECT_TRUE(waitUntil([&] { return c.groupList().at(0).state != "ready"; }, std::chrono::seconds(10)))
        << first.log();
  }
  second = std::make_unique<DaemonProcess>(options(1));
  EXPECT_EQ(useGroup({&first, second.get()}), "") << first.log() << second->log();
  EXPECT_EQ(second->stop(), std::optional<int>(0));
  EXPECT_EQ(first.stop(), std::optional<int>(0));
}

}  // namespace
}  // namespace tensord::testing
