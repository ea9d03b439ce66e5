// The client's data-parallel layer against real daemons: the autograd
// gradient-ready hook, formGroup and ProcessGroup (pipelined collectives),
// collectiveOnAll, and DistributedDataParallel's bucketed gradient averaging
// with and without overlap, checked against gradients computed rank by rank.

#include <algorithm>
#include <cmath>

#include "tensord/distributed.h"
#include "tensord/optim.h"
#include "tests/integration/daemon_cluster.h"
#include "tests/integration/daemon_test.h"

namespace tensord::testing {
namespace {

void expectNear(const std::vector<float>& got, const std::vector<float>& want, float tol = 1e-5f,
                const std::string& what = "") {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << what << " element " << i;
}

// A small net whose first layer is used twice, so its gradient accumulates
// over two backward calls: y = linear(relu(linear(x1, w1, b1) + linear(x2, w1, b1)), w2, b2).
struct Net {
  Tensor w1, b1, w2, b2;
  std::vector<Tensor> params() const { return {w1, b1, w2, b2}; }

  static Net make(Client& c, uint32_t seed) {
    auto leaf = [&](Shape shape, size_t n, uint32_t s) {
      Tensor t = c.upload(std::move(shape), randomFloats(n, s));
      t.setRequiresGrad();
      return t;
    };
    return {leaf({5, 3}, 15, seed), leaf({5}, 5, seed + 1), leaf({2, 5}, 10, seed + 2), leaf({2}, 2, seed + 3)};
  }
  Tensor forward(Client& c, const Tensor& x1, const Tensor& x2) const {
    Tensor h = c.call1("relu", {c.call1("linear", {x1, w1, b1}) + c.call1("linear", {x2, w1, b1})});
    return c.call1("linear", {h, w2, b2});
  }
};

class GradHookTest : public DaemonTest {};

TEST_F(GradHookTest, FiresOncePerLeafWhenItsGradientIsCompleteLastLayerFirst) {
  auto client = connect();
  Client& c = *client;
  Net net = Net::make(c, 10);
  Tensor unused = c.upload({3}, std::vector<float>{1, 2, 3});
  unused.setRequiresGrad();
  Tensor x1 = c.upload({4, 3}, randomFloats(12, 1)), x2 = c.upload({4, 3}, randomFloats(12, 2));

  std::vector<std::string> fired;
  std::vector<Tensor> atHook;  // each leaf's gradient as the hook saw it
  const std::vector<std::string> names = {"w1", "b1", "w2", "b2"};
  for (size_t i = 0; i < 4; ++i) {
    Tensor p = net.params()[i];
    p.setGradReadyHook([&, i](Tensor& leaf) {
      fired.push_back(names[i]);
      EXPECT_FALSE(gradEnabled()) << "hooks run under NoGrad";
      atHook.push_back(leaf.grad());
    });
  }
  unused.setGradReadyHook([&](Tensor&) { fired.push_back("unused"); });

  CallStats before = c.stats();
  net.forward(c, x1, x2).backward();
  EXPECT_EQ(c.stats().roundTrips, before.roundTrips) << "hooks must not make backward() wait";
  ASSERT_EQ(fired.size(), 4u);
  // The last layer's gradients are ready before the first layer's.
  auto pos = [&](const std::string& n) { return std::find(fired.begin(), fired.end(), n) - fired.begin(); };
  EXPECT_LT(std::max(pos("w2"), pos("b2")), std::min(pos("w1"), pos("b1")));
  // What a hook saw is the whole gradient: w1 and b1 were fed by two calls.
  for (size_t k = 0; k < fired.size(); ++k) {
    size_t i = size_t(std::find(names.begin(), names.end(), fired[k]) - names.begin());
    ASSERT_TRUE(atHook[k]) << fired[k] << " had no gradient when its hook ran";
    expectNear(atHook[k].toHost(), net.params()[i].grad().toHost(), 0, fired[k]);
  }

  // Once per pass; a cleared hook no longer fires.
  net.w2.setGradReadyHook({});
  fired.clear();
  net.forward(c, x1, x2).backward();
  EXPECT_EQ(fired.size(), 3u);
  EXPECT_EQ(std::count(fired.begin(), fired.end(), "w2"), 0);

  // Only leaves take a hook.
  Tensor notLeaf = c.call1("relu", {net.w1});
  try {
    notLeaf.setGradReadyHook([](Tensor&) {});
    FAIL() << "a hook on a non-leaf was accepted";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "not a leaf")) << e.what();
  }
}

TEST_F(GradHookTest, FiresForALeafThatIsTheRootOfBackward) {
  auto client = connect();
  Tensor x = client->upload({2}, std::vector<float>{1, 2});
  x.setRequiresGrad();
  int fired = 0;
  x.setGradReadyHook([&](Tensor& leaf) {
    ++fired;
    EXPECT_TRUE(leaf.grad());
  });
  x.backward();
  EXPECT_EQ(fired, 1);
  expectNear(x.grad().toHost(), {1, 1});
}

// Three daemons, a client of each on this thread, group "g" formed.
class DistributedTest : public ::testing::Test {
 protected:
  static constexpr size_t kRanks = 3;
  void SetUp() override {
    cluster_ = std::make_unique<DaemonCluster>(kRanks);
    for (size_t r = 0; r < kRanks; ++r) clients_.push_back(std::make_unique<Client>(cluster_->connect(r)));
    std::vector<GroupInfo> formed = formGroup(clientPtrs(), "g", cluster_->members());
    ASSERT_EQ(formed.size(), kRanks);
    for (uint32_t r = 0; r < kRanks; ++r) {
      EXPECT_EQ(formed[r].name, "g");
      EXPECT_EQ(formed[r].rank, r);
      EXPECT_EQ(formed[r].size, kRanks);
      EXPECT_EQ(formed[r].members, cluster_->members());
      EXPECT_EQ(formed[r].state, "ready");
    }
    for (size_t r = 0; r < kRanks; ++r) groups_.push_back(std::make_unique<ProcessGroup>(*clients_[r], "g"));
  }
  void TearDown() override {
    groups_.clear();
    clients_.clear();
    std::string problems = cluster_->stopAll();
    EXPECT_EQ(problems, "");
    if (HasFailure()) std::cerr << cluster_->logs();
  }
  std::vector<Client*> clientPtrs() {
    std::vector<Client*> out;
    for (auto& c : clients_) out.push_back(c.get());
    return out;
  }
  Client& client(size_t r) { return *clients_[r]; }
  ProcessGroup& group(size_t r) { return *groups_[r]; }

  std::unique_ptr<DaemonCluster> cluster_;
  std::vector<std::unique_ptr<Client>> clients_;
  std::vector<std::unique_ptr<ProcessGroup>> groups_;
};

TEST_F(DistributedTest, CollectivesArePipelinedAndMatchACpuReference) {
  std::vector<std::vector<float>> data;
  std::vector<float> sum(7, 0), maxv(7, -1e30f);
  for (size_t r = 0; r < kRanks; ++r) {
    data.push_back(randomFloats(7, uint32_t(100 + r)));
    for (size_t i = 0; i < 7; ++i) {
      sum[i] += data[r][i];
      maxv[i] = std::max(maxv[i], data[r][i]);
    }
  }
  std::vector<Tensor> in;
  for (size_t r = 0; r < kRanks; ++r) in.push_back(client(r).upload({7}, data[r]));

  // Issued on every rank without waiting; the result feeds a further call
  // before the collective finished; one round trip reads it.
  std::vector<Tensor> doubled, maxed;
  std::vector<CallStats> before;
  for (size_t r = 0; r < kRanks; ++r) {
    before.push_back(client(r).stats());
    Tensor s = group(r).allreduce(in[r]);
    doubled.push_back(s + s);
    maxed.push_back(group(r).allreduce(in[r], "max"));
    EXPECT_EQ(client(r).stats().roundTrips, before[r].roundTrips) << "rank " << r;
  }
  std::vector<float> twice(7);
  for (size_t i = 0; i < 7; ++i) twice[i] = 2 * sum[i];
  for (size_t r = 0; r < kRanks; ++r) {
    expectNear(doubled[r].toHost(), twice, 1e-5f, "2*allreduce(sum) rank " + std::to_string(r));
    expectNear(maxed[r].toHost(), maxv, 0, "allreduce(max) rank " + std::to_string(r));
    expectNear(in[r].toHost(), data[r], 0, "input untouched, rank " + std::to_string(r));
  }

  // broadcast from rank 1, allgather, reduce_scatter (mean), in place.
  std::vector<Tensor> bc, gathered, scattered;
  std::vector<Tensor> rows;
  for (size_t r = 0; r < kRanks; ++r) {
    bc.push_back(group(r).broadcast({in[r]}, 1).front());
    gathered.push_back(group(r).allgather(in[r]));
    rows.push_back(client(r).upload({3, 2}, std::vector<float>{float(r), 1, 2, 3, 4, float(10 * r)}));
    scattered.push_back(group(r).reduceScatter(rows[r], "mean"));
  }
  std::vector<float> all;
  for (const auto& d : data) all.insert(all.end(), d.begin(), d.end());
  for (size_t r = 0; r < kRanks; ++r) {
    expectNear(bc[r].toHost(), data[1], 0, "broadcast rank " + std::to_string(r));
    EXPECT_EQ(gathered[r].shape(), (Shape{3, 7}));
    expectNear(gathered[r].toHost(), all, 0, "allgather rank " + std::to_string(r));
    EXPECT_EQ(scattered[r].shape(), (Shape{1, 2}));
    // mean over ranks of row r: row 0 = (0+1+2)/3, 1; row 1 = 2, 3; row 2 = 4, (0+10+20)/3
    const std::vector<std::vector<float>> want = {{1, 1}, {2, 3}, {4, 10}};
    expectNear(scattered[r].toHost(), want[r], 1e-6f, "reduce_scatter rank " + std::to_string(r));
  }

  // In place: the outputs are the inputs, written once it succeeded.
  std::vector<std::vector<Tensor>> inputs;
  for (size_t r = 0; r < kRanks; ++r) inputs.push_back({in[r]});
  auto runs = collectiveOnAll(clientPtrs(), "g", "allreduce", inputs, {{"op", "sum"}, {"in_place", true}});
  for (size_t r = 0; r < kRanks; ++r) {
    EXPECT_EQ(runs[r].error, "") << "rank " << r;
    expectNear(in[r].toHost(), sum, 1e-5f, "in-place allreduce rank " + std::to_string(r));
  }
  // A barrier on every member at once; then the group counts its collectives.
  auto barrier = collectiveOnAll(clientPtrs(), "g", "barrier", {{}, {}, {}});
  for (size_t r = 0; r < kRanks; ++r) EXPECT_EQ(barrier[r].error, "") << "rank " << r;
  EXPECT_GE(client(0).groupList().at(0).collectives, 7u);
}

TEST_F(DistributedTest, ErrorsSurfaceAtTheFirstBlockingReadAndNameTheMember) {
  // A group this daemon does not know: pipelined, so the error comes at toHost().
  Tensor x = client(0).upload({2}, std::vector<float>{1, 2});
  Tensor y = client(0).collective("nope", "allreduce", {x}).front();
  try {
    y.toHost();
    FAIL() << "an allreduce on an unknown group succeeded";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "nope")) << e.what();
  }
  try {
    ProcessGroup missing(client(1), "nope");
    FAIL() << "a ProcessGroup on an unknown group was made";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "no group 'nope'")) << e.what();
    EXPECT_TRUE(contains(e.what(), "its groups: g")) << e.what();
  }
  // Shapes that differ across members: every member fails, naming the problem.
  std::vector<std::vector<Tensor>> inputs;
  for (size_t r = 0; r < kRanks; ++r) inputs.push_back({client(r).upload({int64_t(2 + (r == 2))}, randomFloats(2 + (r == 2), 1))});
  auto runs = collectiveOnAll(clientPtrs(), "g", "allreduce", inputs);
  for (size_t r = 0; r < kRanks; ++r) EXPECT_NE(runs[r].error, "") << "rank " << r << " did not fail";
  // groupDelete, and the group is gone from groupList.
  for (size_t r = 0; r < kRanks; ++r) client(r).groupDelete("g");
  EXPECT_TRUE(client(0).groupList().empty());
}

// Local gradients of each rank, downloaded, then averaged on the CPU.
std::vector<std::vector<float>> meanGradients(const std::vector<std::vector<std::vector<float>>>& perRank) {
  std::vector<std::vector<float>> mean = perRank[0];
  for (size_t p = 0; p < mean.size(); ++p) {
    for (size_t i = 0; i < mean[p].size(); ++i) {
      double s = 0;
      for (const auto& rank : perRank) s += rank[p][i];
      mean[p][i] = float(s / double(perRank.size()));
    }
  }
  return mean;
}

TEST_F(DistributedTest, DdpAveragesGradientsWithAndWithoutOverlap) {
  std::vector<Net> nets;
  std::vector<Tensor> x1, x2;
  for (size_t r = 0; r < kRanks; ++r) {
    nets.push_back(Net::make(client(r), uint32_t(10 + 7 * r)));  // different values: DDP broadcasts rank 0's
    x1.push_back(client(r).upload({4, 3}, randomFloats(12, uint32_t(200 + r))));
    x2.push_back(client(r).upload({4, 3}, randomFloats(12, uint32_t(300 + r))));
  }
  // One bucket per parameter (1-byte buckets), so backward() starts them one by one.
  std::vector<std::unique_ptr<DistributedDataParallel>> ddp;
  for (size_t r = 0; r < kRanks; ++r) {
    ddp.push_back(std::make_unique<DistributedDataParallel>(group(r), nets[r].params(),
                                                            DdpOptions{.bucketBytes = 1, .overlap = true}));
  }
  // Buckets in reverse parameter order.
  EXPECT_EQ(ddp[0]->buckets(), (std::vector<std::vector<size_t>>{{3}, {2}, {1}, {0}}));
  // The parameters start as rank 0's.
  for (size_t r = 1; r < kRanks; ++r) {
    for (size_t p = 0; p < 4; ++p) {
      expectNear(nets[r].params()[p].toHost(), nets[0].params()[p].toHost(), 0, "param after broadcast");
    }
  }
  // The reference: each rank's own gradients, without DDP.
  std::vector<std::vector<std::vector<float>>> local(kRanks);
  for (size_t r = 0; r < kRanks; ++r) {
    ddp[r]->setOverlap(false);
    nets[r].forward(client(r), x1[r], x2[r]).backward();
    for (const Tensor& p : nets[r].params()) local[r].push_back(p.grad().toHost());
    for (Tensor p : nets[r].params()) p.setGrad({});
    ddp[r]->setOverlap(true);
  }
  const auto want = meanGradients(local);

  // Overlap: backward() alone has started every bucket (all four are ready
  // by the time it returns), so the gradients are averaged already.
  for (size_t r = 0; r < kRanks; ++r) nets[r].forward(client(r), x1[r], x2[r]).backward();
  for (size_t r = 0; r < kRanks; ++r) {
    for (size_t p = 0; p < 4; ++p) expectNear(nets[r].params()[p].grad().toHost(), want[p], 1e-5f, "overlap");
    ddp[r]->finishGradients();  // nothing left to issue
    for (Tensor p : nets[r].params()) p.setGrad({});
  }
  // Without overlap: local after backward(), averaged by syncGradients().
  for (size_t r = 0; r < kRanks; ++r) {
    ddp[r]->setOverlap(false);
    nets[r].forward(client(r), x1[r], x2[r]).backward();
  }
  expectNear(nets[1].w2.grad().toHost(), local[1][2], 1e-6f, "before syncGradients");
  for (size_t r = 0; r < kRanks; ++r) ddp[r]->syncGradients();
  for (size_t r = 0; r < kRanks; ++r) {
    for (size_t p = 0; p < 4; ++p) expectNear(nets[r].params()[p].grad().toHost(), want[p], 1e-5f, "sync");
  }
}

TEST_F(DistributedTest, DdpTrainingKeepsReplicasBitIdentical) {
  std::vector<Net> nets;
  std::vector<std::unique_ptr<DistributedDataParallel>> ddp;
  std::vector<std::unique_ptr<optim::AdamW>> opts;
  for (size_t r = 0; r < kRanks; ++r) {
    nets.push_back(Net::make(client(r), uint32_t(40 + r)));
    ddp.push_back(std::make_unique<DistributedDataParallel>(group(r), nets[r].params()));  // one 25 MiB bucket
    opts.push_back(std::make_unique<optim::AdamW>(nets[r].params(), optim::AdamWOptions{.lr = 0.05}));
  }
  EXPECT_EQ(ddp[0]->buckets(), (std::vector<std::vector<size_t>>{{3, 2, 1, 0}}));
  for (int step = 0; step < 3; ++step) {
    for (size_t r = 0; r < kRanks; ++r) {
      Tensor x = client(r).upload({4, 3}, randomFloats(12, uint32_t(1000 + 10 * step + r)));
      opts[r]->zeroGrad();
      nets[r].forward(client(r), x, x).backward();
      ddp[r]->finishGradients();
      opts[r]->step();
    }
  }
  for (size_t p = 0; p < 4; ++p) {
    std::vector<std::byte> first = nets[0].params()[p].bytes();
    for (size_t r = 1; r < kRanks; ++r) {
      EXPECT_TRUE(nets[r].params()[p].bytes() == first) << "parameter " << p << " differs on rank " << r;
    }
  }
}

}  // namespace
}  // namespace tensord::testing
