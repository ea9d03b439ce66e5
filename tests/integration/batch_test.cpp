// Calls that travel together. Batches: calls held by a tensord::Batch go as
// one Session.callBatch and behave exactly as the same calls made one by one
// (results, errors, order with other requests, autograd), while the daemon
// sees one request. Graphs: calls captured once (Client::capture) and run
// many times, each run one request.

#include <cmath>
#include <functional>
#include <optional>
#include <thread>

#include "tests/integration/daemon_test.h"

namespace tensord::testing {
namespace {

class IntegrationBatch : public DaemonTest {};

// Live unnamed tensors of this client's session (they list with an empty name).
size_t liveUnnamed(Client& client) {
  size_t n = 0;
  for (const auto& t : client.list()) n += t.name.empty() ? 1 : 0;
  return n;
}

const PrincipalStats& statsOf(const DaemonStats& stats, const std::string& principal) {
  for (const auto& p : stats.principals) {
    if (p.principal == principal) return p;
  }
  throw std::runtime_error("no stats for principal " + principal);
}

TEST_F(IntegrationBatch, AChainInOneBatchIsOneRequestAndKeepsOnlyTheOutputsStillHeld) {
  constexpr int kLength = 50;
  constexpr int64_t kElements = 300;
  auto client = connect();
  auto x0 = randomFloats(kElements, 7, -2, 2);
  std::vector<float> half(kElements, 0.5f);
  Tensor x = client->upload(Shape{kElements}, x0);
  Tensor h = client->upload(Shape{kElements}, half);
  x.wait();
  h.wait();
  const size_t liveBefore = liveUnnamed(*client);
  const PrincipalStats before = statsOf(client->daemonStats(), daemon().principal());
  const uint64_t callsBefore = client->stats().calls;

  Tensor y = x;
  Tensor third;
  {
    Batch batch(*client);
    for (int i = 0; i < kLength; ++i) {
      y = (i % 2 == 0) ? y + h : y * h;
      if (i == 3) third = y;  // an intermediate the program keeps
    }
  }
  const std::vector<float> got = y.toHost();
  const std::vector<float> gotThird = third.toHost();

  std::vector<float> want = x0, wantThird;
  for (int i = 0; i < kLength; ++i) {
    for (auto& v : want) v = (i % 2 == 0) ? v + 0.5f : v * 0.5f;
    if (i == 3) wantThird = want;
  }
  ASSERT_EQ(got, want);
  ASSERT_EQ(gotThird, wantThird);
  EXPECT_EQ(client->stats().calls, callsBefore + kLength);

  const PrincipalStats after = statsOf(client->daemonStats(), daemon().principal());
  EXPECT_EQ(after.ops, before.ops + kLength);
  // callBatch, two downloads and their info requests, the stats request:
  // far fewer requests than calls.
  EXPECT_LE(after.calls - before.calls, 8u) << "the batch's calls reached the daemon as separate requests";
  // Only the two outputs still held live on; the other 48 were freed.
  EXPECT_TRUE(waitUntil([&] { return liveUnnamed(*client) == liveBefore + 2; }, std::chrono::seconds(10)))
      << liveUnnamed(*client) << " unnamed tensors live, expected " << liveBefore + 2;
}

TEST_F(IntegrationBatch, EachCallOfABatchFailsAloneWithTheErrorItWouldHaveHadOnItsOwn) {
  auto client = connect();
  Tensor a = client->upload(Shape{3}, std::vector<float>{1, 2, 3});
  Tensor b = client->upload(Shape{2}, std::vector<float>{1, 2});
  Tensor good, mismatched, unknown, dependent, after;
  {
    Batch batch(*client);
    good = a + a;
    mismatched = a + b;  // shapes [3] and [2] do not broadcast
    unknown = client->call1("no_such_op", {a});
    dependent = relu(mismatched);  // fails with its input's error
    after = good * a;             // runs: nothing it needs failed
  }
  EXPECT_EQ(good.toHost(), (std::vector<float>{2, 4, 6}));
  EXPECT_EQ(after.toHost(), (std::vector<float>{2, 8, 18}));

  auto waitError = [](const Tensor& t) { return errorOf([&] { t.wait(); }); };
  auto e1 = waitError(mismatched);
  ASSERT_TRUE(e1.has_value());
  EXPECT_EQ(e1->kind(), Error::Kind::kFailed);
  EXPECT_TRUE(contains(e1->what(), "add")) << e1->what();
  EXPECT_TRUE(contains(e1->what(), "[3]") && contains(e1->what(), "[2]")) << e1->what();

  // The same mistake made outside a batch reads the same.
  auto e1Alone = waitError(a + b);
  ASSERT_TRUE(e1Alone.has_value());
  EXPECT_EQ(std::string(e1->what()), std::string(e1Alone->what()));

  auto e2 = waitError(unknown);
  ASSERT_TRUE(e2.has_value());
  EXPECT_EQ(e2->kind(), Error::Kind::kUnimplemented);
  EXPECT_TRUE(contains(e2->what(), "unknown op 'no_such_op'")) << e2->what();

  auto e3 = waitError(dependent);
  ASSERT_TRUE(e3.has_value());
  EXPECT_EQ(std::string(e3->what()), std::string(e1->what()));

  // The connection and the daemon go on serving.
  EXPECT_EQ((a * a).toHost(), (std::vector<float>{1, 4, 9}));
}

TEST_F(IntegrationBatch, RequestsMadeDuringABatchSeeTheHeldCallsFirst) {
  auto client = connect();
  Tensor one = client->upload(Shape{2}, std::vector<float>{1, 1});
  Tensor x = client->upload(Shape{2}, std::vector<float>{5, 7});
  Tensor y, z;
  {
    Batch batch(*client);
    y = x + one;  // held
    // A call without outputs is sent at once, so what is held goes first:
    // y reads x before zero_ clears it.
    client->call("zero_", {x});
    z = x + one;  // held again, after zero_
    // A read inside the batch sends what is held and waits for it.
    EXPECT_EQ(y.toHost(), (std::vector<float>{6, 8}));
  }
  EXPECT_EQ(z.toHost(), (std::vector<float>{1, 1}));
  EXPECT_EQ(x.toHost(), (std::vector<float>{0, 0}));
}

TEST_F(IntegrationBatch, ABatchLongerThanOneMessageIsSentInPiecesThatStillChain) {
  constexpr int kLength = 700;  // past the 256 calls a batch sends at once
  auto client = connect();
  Tensor one = client->upload(Shape{1}, std::vector<float>{1});
  Tensor x = one;
  std::vector<Tensor> kept;
  {
    Batch batch(*client);
    for (int i = 0; i < kLength; ++i) {
      x = x + one;
      if (i % 100 == 0) kept.push_back(x);
    }
    batch.send();
    x = x * one;  // the batch stays open after send()
  }
  EXPECT_EQ(x.toHost(), std::vector<float>{float(kLength + 1)});
  for (size_t k = 0; k < kept.size(); ++k) {
    EXPECT_EQ(kept[k].toHost(), std::vector<float>{float(k * 100 + 2)}) << "kept output " << k;
  }
}

TEST_F(IntegrationBatch, BackwardInABatchGivesTheSameGradients) {
  auto client = connect();
  auto wv = randomFloats(12, 3);
  auto xv = randomFloats(8, 4);
  auto gradients = [&](bool batched) {
    Tensor w = client->upload(Shape{4, 3}, wv);
    Tensor xin = client->upload(Shape{2, 4}, xv);
    w.setRequiresGrad();
    std::optional<Batch> batch;
    if (batched) batch.emplace(*client);
    Tensor loss = sum(relu(matmul(xin, w)) * relu(matmul(xin, w)), 0, false);
    loss = sum(loss, 0, false);
    loss.backward();
    batch.reset();
    return w.grad().toHost();
  };
  EXPECT_EQ(gradients(true), gradients(false));
}

// ---------------------------------------------------------------- graphs

class IntegrationGraph : public DaemonTest {};

TEST_F(IntegrationGraph, ACapturedChainRunsManyTimesAsOneRequestAndKeepsOnlyItsOutputs) {
  constexpr int kLength = 40;
  constexpr int64_t kElements = 200;
  auto client = connect();
  std::vector<float> half(kElements, 0.5f);
  Tensor h = client->upload(Shape{kElements}, half);  // made before: the graph holds it

  Graph graph = client->capture({{DType::F32, Shape{kElements}}}, [&](const std::vector<Tensor>& in) {
    Tensor y = in[0];
    Tensor third;
    for (int i = 0; i < kLength; ++i) {
      y = (i % 2 == 0) ? y + h : y * h;
      if (i == 2) third = y;
    }
    return std::vector<Tensor>{y, third};
  });
  EXPECT_EQ(graph.inputs(), 1u);
  EXPECT_EQ(graph.outputs(), 2u);
  EXPECT_EQ(graph.calls(), size_t(kLength));
  EXPECT_EQ(graph.kernels(), 1u) << "the chain of adds and muls is one fused kernel, reading h once";

  auto reference = [&](std::vector<float> v, int steps) {
    for (int i = 0; i < steps; ++i) {
      for (auto& e : v) e = (i % 2 == 0) ? e + 0.5f : e * 0.5f;
    }
    return v;
  };
  for (uint32_t seed = 1; seed <= 3; ++seed) {
    auto x0 = randomFloats(kElements, seed, -3, 3);
    Tensor x = client->upload(Shape{kElements}, x0);
    x.wait();
    const size_t liveBefore = liveUnnamed(*client);
    const PrincipalStats before = statsOf(client->daemonStats(), daemon().principal());
    std::vector<Tensor> out = graph.run({x});
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[0].toHost(), reference(x0, kLength)) << "run " << seed;
    EXPECT_EQ(out[1].toHost(), reference(x0, 3)) << "run " << seed;
    const PrincipalStats after = statsOf(client->daemonStats(), daemon().principal());
    EXPECT_EQ(after.ops, before.ops + kLength);
    EXPECT_LE(after.calls - before.calls, 8u) << "a run reached the daemon as more than one request per call";
    EXPECT_EQ(liveUnnamed(*client), liveBefore + 2);
  }
}

TEST_F(IntegrationGraph, GraphsTakeViewsMultiOutputOpsAndSeveralInputs) {
  auto client = connect();
  Graph graph = client->capture({{DType::F32, Shape{2, 3}}, {DType::F32, Shape{3}}},
                                [&](const std::vector<Tensor>& in) {
                                  Tensor flat = client->call1("reshape", {in[0]}, {{"shape", std::vector<int64_t>{6}}});
                                  Tensor row = sum(in[0] + in[1], 0);  // broadcast over rows, then down the columns
                                  std::vector<Tensor> mm = client->call("max", {in[1]}, {{"dim", int64_t(0)}});
                                  return std::vector<Tensor>{relu(flat), row, mm.at(0), mm.at(1)};
                                });
  Tensor a = client->upload(Shape{2, 3}, std::vector<float>{1, -2, 3, -4, 5, -6});
  Tensor b = client->upload(Shape{3}, std::vector<float>{10, 30, 20});
  auto out = graph.run({a, b});
  ASSERT_EQ(out.size(), 4u);
  EXPECT_EQ(out[0].toHost(), (std::vector<float>{1, 0, 3, 0, 5, 0}));
  EXPECT_EQ(out[1].toHost(), (std::vector<float>{17, 63, 37}));
  EXPECT_EQ(out[2].toHost(), std::vector<float>{30});
  EXPECT_EQ(out[3].dtype(), DType::I64);
}

TEST_F(IntegrationGraph, CaptureErrorsNameTheCallAndTheDaemonGoesOn) {
  auto client = connect();
  const std::vector<GraphInput> one = {{DType::F32, Shape{3}}};
  Tensor two = client->upload(Shape{2}, std::vector<float>{1, 2});

  auto unknown = errorOf([&] {
    client->capture(one, [&](const std::vector<Tensor>& in) {
      Tensor y = in[0] + in[0];
      return std::vector<Tensor>{client->call1("no_such_op", {y})};
    });
  });
  ASSERT_TRUE(unknown.has_value());
  EXPECT_EQ(unknown->kind(), Error::Kind::kUnimplemented);
  EXPECT_TRUE(contains(unknown->what(), "graphCreate: call 1 (no_such_op): unknown op 'no_such_op'")) << unknown->what();

  auto shapes = errorOf([&] {
    client->capture(one, [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] + two}; });
  });
  ASSERT_TRUE(shapes.has_value());
  EXPECT_TRUE(contains(shapes->what(), "graphCreate: call 0 (add): ")) << shapes->what();
  EXPECT_TRUE(contains(shapes->what(), "[3]") && contains(shapes->what(), "[2]")) << shapes->what();

  auto dataDependent = errorOf([&] {
    client->capture(one, [&](const std::vector<Tensor>& in) {
      Tensor mask = client->call1("gt", {in[0], in[0]});
      return std::vector<Tensor>{client->call1("masked_select", {in[0], mask})};
    });
  });
  ASSERT_TRUE(dataDependent.has_value());
  EXPECT_TRUE(contains(dataDependent->what(), "graphCreate: call 1 (masked_select): its output shapes depend on the "
                                               "input values, so it cannot be captured"))
      << dataDependent->what();

  Tensor leaked;
  auto read = errorOf([&] {
    client->capture(one, [&](const std::vector<Tensor>& in) {
      leaked = in[0] * in[0];
      leaked.toHost();  // nothing has run: there is nothing to read
      return std::vector<Tensor>{leaked};
    });
  });
  ASSERT_TRUE(read.has_value());
  EXPECT_TRUE(contains(read->what(), "capture: a tensor made inside a capture")) << read->what();
  auto afterwards = errorOf([&] { leaked.toHost(); });
  ASSERT_TRUE(afterwards.has_value());
  EXPECT_TRUE(contains(afterwards->what(), "made while capturing a graph")) << afterwards->what();

  auto notAResult = errorOf([&] {
    client->capture(one, [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] + in[0], in[0]}; });
  });
  ASSERT_TRUE(notAResult.has_value());
  EXPECT_TRUE(contains(notAResult->what(), "capture: output 1 is not the result of a call made in the capture"))
      << notAResult->what();

  // The client and the daemon go on; a good capture still works.
  Graph good = client->capture(one, [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] * in[0]}; });
  EXPECT_EQ(good.run({client->upload(Shape{3}, std::vector<float>{1, 2, 3})})[0].toHost(), (std::vector<float>{1, 4, 9}));
}

TEST_F(IntegrationGraph, ARunWithTheWrongInputFailsNamingBothShapes) {
  auto client = connect();
  Graph graph = client->capture({{DType::F32, Shape{2}}},
                                [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] + in[0]}; });
  Tensor three = client->upload(Shape{3}, std::vector<float>{1, 2, 3});
  auto wrong = errorOf([&] { graph.run({three})[0].toHost(); });
  ASSERT_TRUE(wrong.has_value());
  EXPECT_TRUE(contains(wrong->what(), "graph.run: input 0 is f32[3]; the graph was captured for f32[2]"))
      << wrong->what();
  auto count = errorOf([&] { graph.run({three, three}); });
  ASSERT_TRUE(count.has_value());
  EXPECT_TRUE(contains(count->what(), "Graph::run: 2 input(s); the graph takes 1")) << count->what();
  EXPECT_EQ(graph.run({client->upload(Shape{2}, std::vector<float>{4, 5})})[0].toHost(), (std::vector<float>{8, 10}));
}

// Runs of elementwise calls on one shape become one kernel each (the daemon
// says how many a run records), results used later or returned are still
// written, and a run computes what the same calls made one by one compute.
TEST_F(IntegrationGraph, ElementwiseRunsFuseIntoOneKernelEachAndComputeWhatTheCallsDo) {
  auto client = connect();
  Tensor w = client->upload(Shape{4, 4}, randomFloats(16, 11));
  Tensor bias = client->upload(Shape{4}, randomFloats(4, 12));
  auto body = [&](const std::vector<Tensor>& in) {
    Tensor a = exp(in[0] * in[0] - in[0]);  // mul, sub, exp: one kernel
    Tensor h = relu(matmul(a, w) + bias);    // matmul; add (bias broadcast) and relu: one kernel
    Tensor flat = client->call1("reshape", {h}, {{"shape", std::vector<int64_t>{16}}});  // a view: none
    Tensor y = log(client->call1("add", {flat}, {{"other", 1.0}}));  // add and log on [16]: one kernel
    return std::vector<Tensor>{a, y, sum(h, 0)};                     // sum: one kernel
  };
  Graph graph = client->capture({{DType::F32, Shape{4, 4}}}, body);
  EXPECT_EQ(graph.calls(), 10u);
  EXPECT_EQ(graph.kernels(), 5u);

  for (uint32_t seed = 1; seed <= 2; ++seed) {
    Tensor x = client->upload(Shape{4, 4}, randomFloats(16, seed));
    std::vector<Tensor> fused = graph.run({x});
    std::vector<Tensor> alone = body({x});  // the same calls, one by one
    ASSERT_EQ(fused.size(), 3u);
    for (size_t k = 0; k < fused.size(); ++k) {
      std::vector<float> got = fused[k].toHost(), want = alone[k].toHost();
      ASSERT_EQ(got.size(), want.size()) << "output " << k;
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_NEAR(got[i], want[i], 1e-5 * (1 + std::abs(want[i]))) << "output " << k << " element " << i;
      }
    }
  }
}

// Calls without outputs are captured too: a run writes in place, and the
// session's later requests see the write without waiting for the run.
TEST_F(IntegrationGraph, InPlaceCallsAreCapturedAndLaterRequestsSeeTheirWrites) {
  auto client = connect();
  Tensor w = client->upload(Shape{2}, std::vector<float>{1, 2});  // held by the graph
  Graph step = client->capture({{DType::F32, Shape{2}}}, [&](const std::vector<Tensor>& in) {
    Tensor y = in[0] + w;  // reads w before the graph clears it
    client->call("zero_", {w});
    return std::vector<Tensor>{y};
  });
  EXPECT_EQ(step.calls(), 2u);
  Tensor x = client->upload(Shape{2}, std::vector<float>{10, 20});
  EXPECT_EQ(step.run({x})[0].toHost(), (std::vector<float>{11, 22}));
  EXPECT_EQ(w.toHost(), (std::vector<float>{0, 0}));
  EXPECT_EQ(step.run({x})[0].toHost(), (std::vector<float>{10, 20}));

  // A graph of in-place calls only returns nothing; a read right after a
  // run sees what it wrote, and a run's error surfaces at the next request.
  Graph clear = client->capture({{DType::F32, Shape{2}}}, [&](const std::vector<Tensor>& in) {
    client->call("zero_", {in[0]});
    return std::vector<Tensor>{};
  });
  EXPECT_TRUE(clear.run({x}).empty());
  EXPECT_EQ(x.toHost(), (std::vector<float>{0, 0}));
  Tensor three = client->upload(Shape{3}, std::vector<float>{1, 2, 3});
  three.wait();
  auto wrong = errorOf([&] {
    clear.run({three});
    client->list();
  });
  ASSERT_TRUE(wrong.has_value());
  EXPECT_TRUE(contains(wrong->what(), "graph.run: input 0 is f32[3]; the graph was captured for f32[2]"))
      << wrong->what();
  EXPECT_EQ(three.toHost(), (std::vector<float>{1, 2, 3}));
}

TEST_F(IntegrationGraph, RunsKeepTheirOrderWithBatchesAndOtherCalls) {
  auto client = connect();
  Tensor one = client->upload(Shape{2}, std::vector<float>{1, 1});
  Graph addOne = client->capture({{DType::F32, Shape{2}}},
                                 [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{in[0] + one}; });
  Tensor x = client->upload(Shape{2}, std::vector<float>{5, 7});
  Tensor y, z;
  {
    Batch batch(*client);
    Tensor doubled = x + x;                // held
    y = addOne.run({doubled})[0];          // sends the held call first
    client->call("zero_", {x});            // then clears x
    z = addOne.run({x})[0];
  }
  EXPECT_EQ(y.toHost(), (std::vector<float>{11, 15}));
  EXPECT_EQ(z.toHost(), (std::vector<float>{1, 1}));
}

}  // namespace
}  // namespace tensord::testing
