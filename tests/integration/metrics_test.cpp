// Session.stats (`tensorctl stat`) and the Prometheus endpoint through a real
// daemon: their counters move with the calls made, /metrics parses with the
// reference parser (python3-prometheus-client, in metrics_scrape.py), and the
// endpoint can be turned off or refused a remote address.

#include <nlohmann/json.hpp>

#include "tests/integration/policy_daemon_test.h"

namespace tensord::testing {
namespace {

namespace fs = std::filesystem;

const OpStats* findOp(const DaemonStats& s, const std::string& op) {
  for (const auto& o : s.ops) {
    if (o.op == op) return &o;
  }
  return nullptr;
}

const PrincipalStats* findPrincipal(const DaemonStats& s, const std::string& name) {
  for (const auto& p : s.principals) {
    if (p.principal == name) return &p;
  }
  return nullptr;
}

// The samples of one scrape, parsed by the reference parser.
struct Scrape {
  nlohmann::json doc;
  double value(const std::string& sample) const {
    auto it = doc["samples"].find(sample);
    return it == doc["samples"].end() ? -1 : it->get<double>();
  }
};

Scrape scrape(const std::string& address) {
  const fs::path script = fs::path(TENSORD_SOURCE_DIR) / "tests" / "integration" / "metrics_scrape.py";
  auto r = runCommand({"/usr/bin/python3", script.string(), address});
  if (r.exitCode != 0)
    throw std::runtime_error("metrics_scrape.py failed (" + std::to_string(r.exitCode) + "): " + r.err);
  return {nlohmann::json::parse(r.out)};
}

// A daemon whose metrics time at most one batch of device work per
// `IntervalMs` (metrics.device_time_interval_ms).
template <int IntervalMs>
class MetricsDaemon : public DaemonTest {
  DaemonOptions daemonOptions() override {
    DaemonOptions options;
    options.extra = {{"metrics", {{"listen", "127.0.0.1:0"}, {"device_time_interval_ms", IntervalMs}}}};
    return options;
  }
};

// Device time of every op, so that the counts below are exact.
using IntegrationMetrics = MetricsDaemon<0>;

TEST_F(IntegrationMetrics, StatMovesWithTheCallsMade) {
  auto client = connect();
  const DaemonStats before = client->daemonStats();
  EXPECT_FALSE(before.version.empty());
  EXPECT_FALSE(before.device.name.empty());
  EXPECT_GT(before.memory.limitBytes, 0u);
  EXPECT_EQ(before.metricsAddress, daemon().metricsAddress());
  EXPECT_GE(before.connections, 1u);
  EXPECT_GE(before.sessions, 1u);

  const std::vector<float> data(4096, 0.5f);  // 16 KiB
  auto x = client->upload({64, 64}, data);
  auto y = x + x;
  y = y + x;
  y = y + x;
  EXPECT_EQ(y.toHost(), std::vector<float>(4096, 2.0f));  // downloads 16 KiB
  // A call refused by validation counts as a failed matmul.
  auto bad = client->upload({3}, std::vector<float>{1, 2, 3});
  EXPECT_THROW(matmul(x, bad).wait(), Error);

  const DaemonStats after = client->daemonStats();
  EXPECT_GE(after.uptimeSeconds, before.uptimeSeconds);
  EXPECT_EQ(after.bytesIn - before.bytesIn, 16384u + 12u);
  EXPECT_EQ(after.bytesOut - before.bytesOut, 16384u);
  EXPECT_GE(after.opsExecuted - before.opsExecuted, 3u);
  EXPECT_GE(after.memory.liveBytes, 2 * 16384u);
  EXPECT_GE(after.memory.tensorCount, 3u);

  const OpStats* add = findOp(after, "add");
  ASSERT_NE(add, nullptr);
  EXPECT_EQ(add->completed, 3u);
  EXPECT_EQ(add->failed, 0u);
  EXPECT_GT(add->latencyP50, 0.0);
  EXPECT_LE(add->latencyP50, add->latencyP90);
  EXPECT_LE(add->latencyP90, add->latencyP99);
  EXPECT_LE(add->latencyP99, add->latencyMax);
  if (after.deviceTimestamps) {
    EXPECT_GT(add->deviceSeconds, 0.0);
    EXPECT_GT(add->deviceP50, 0.0);
    EXPECT_LE(add->deviceP50, add->deviceSeconds);
  }
  const OpStats* matmulStats = findOp(after, "matmul");
  ASSERT_NE(matmulStats, nullptr);
  EXPECT_EQ(matmulStats->completed, 0u);
  EXPECT_EQ(matmulStats->failed, 1u);

  const PrincipalStats* me = findPrincipal(after, daemon().principal());
  const PrincipalStats* meBefore = findPrincipal(before, daemon().principal());
  ASSERT_NE(me, nullptr);
  ASSERT_NE(meBefore, nullptr);
  EXPECT_EQ(me->ops - meBefore->ops, 4u);
  EXPECT_EQ(me->bytesIn - meBefore->bytesIn, 16384u + 12u);
  EXPECT_EQ(me->bytesOut - meBefore->bytesOut, 16384u);
  EXPECT_GT(me->calls, meBefore->calls + 4);
  EXPECT_GE(me->tensors, 3u);
  EXPECT_GE(me->deviceBytes, 2 * 16384u);
  EXPECT_EQ(me->sessions, 1u);
}

TEST_F(IntegrationMetrics, TensorctlStatPrintsTheLoad) {
  const std::string tensorctl = (buildDir() / "client" / "tensorctl").string();
  const std::vector<std::string> common = {tensorctl, "--connect", daemon().address(), "--token", daemon().token()};
  auto client = connect();
  auto x = client->upload({8}, std::vector<float>(8, 1.0f));
  relu(x).toHost();  // the op's work has completed once its result is read

  auto args = common;
  args.insert(args.end(), {"stat", "--json"});
  auto json = runCommand(args);
  ASSERT_EQ(json.exitCode, 0) << json.err;
  auto doc = nlohmann::json::parse(json.out);
  EXPECT_GT(doc["uptime_seconds"].get<double>(), 0.0);
  EXPECT_FALSE(doc["device"]["name"].get<std::string>().empty());
  EXPECT_GE(doc["connections"].get<uint64_t>(), 2u);  // this client and tensorctl
  EXPECT_EQ(doc["bytes_in"].get<uint64_t>(), 32u);
  EXPECT_EQ(doc["bytes_out"].get<uint64_t>(), 32u);
  EXPECT_EQ(doc["metrics_address"].get<std::string>(), daemon().metricsAddress());
  bool sawRelu = false;
  for (const auto& op : doc["ops"]) {
    if (op["op"] == "relu") {
      sawRelu = true;
      EXPECT_EQ(op["completed"].get<uint64_t>(), 1u);
      EXPECT_GT(op["latency_seconds"]["p50"].get<double>(), 0.0);
    }
  }
  EXPECT_TRUE(sawRelu) << json.out;
  bool sawMe = false;
  for (const auto& p : doc["principals"]) sawMe = sawMe || p["principal"] == daemon().principal();
  EXPECT_TRUE(sawMe) << json.out;

  args = common;
  args.push_back("stat");
  auto text = runCommand(args);
  ASSERT_EQ(text.exitCode, 0) << text.err;
  for (const char* part : {"device:", "memory:", "connections:", "transferred:", "PRINCIPAL", "relu", "P99"}) {
    EXPECT_TRUE(contains(text.out, part)) << part << " missing in:\n" << text.out;
  }
}

TEST_F(IntegrationMetrics, PrometheusEndpointParsesAndMovesWithCalls) {
  ASSERT_FALSE(daemon().metricsAddress().empty()) << daemon().log();
  const Scrape before = scrape(daemon().metricsAddress());
  EXPECT_EQ(before.doc["status"]["get_metrics"], 200);
  EXPECT_EQ(before.doc["status"]["get_other"], 404);
  EXPECT_EQ(before.doc["status"]["post_metrics"], 405);
  EXPECT_TRUE(contains(before.doc["content_type"].get<std::string>(), "version=0.0.4"));
  const auto& types = before.doc["types"];
  EXPECT_EQ(types["tensord_op_duration_seconds"], "histogram");
  EXPECT_EQ(types["tensord_ops"], "counter");  // the parser names counter families without _total
  EXPECT_EQ(types["tensord_bytes_transferred"], "counter");
  EXPECT_EQ(types["tensord_device_memory_bytes"], "gauge");
  EXPECT_EQ(types["tensord_connections"], "gauge");
  EXPECT_EQ(types["tensord_queue_depth"], "gauge");
  EXPECT_GT(before.value("tensord_device_memory_total_bytes"), 0);

  auto client = connect();
  auto x = client->upload({1024}, std::vector<float>(1024, 1.0f));  // 4 KiB in
  auto y = relu(x * x);
  y.toHost();  // 4 KiB out
  const std::string me = "principal=\"" + daemon().principal() + "\"";

  const Scrape after = scrape(daemon().metricsAddress());
  auto delta = [&](const std::string& sample) { return after.value(sample) - std::max(0.0, before.value(sample)); };
  EXPECT_EQ(delta("tensord_bytes_transferred_total{direction=\"in\"}"), 4096);
  EXPECT_EQ(delta("tensord_bytes_transferred_total{direction=\"out\"}"), 4096);
  EXPECT_EQ(after.value("tensord_ops_total{op=\"mul\",result=\"ok\"}"), 1);
  EXPECT_EQ(after.value("tensord_ops_total{op=\"relu\",result=\"ok\"}"), 1);
  EXPECT_EQ(after.value("tensord_ops_total{op=\"relu\",result=\"error\"}"), 0);
  EXPECT_EQ(after.value("tensord_op_duration_seconds_count{op=\"relu\"}"), 1);
  EXPECT_GT(after.value("tensord_op_duration_seconds_sum{op=\"relu\"}"), 0);
  EXPECT_EQ(after.value("tensord_op_duration_seconds_bucket{le=\"+Inf\",op=\"relu\"}"), 1);
  EXPECT_GE(after.value("tensord_connections"), 1);
  EXPECT_GE(delta("tensord_connections_accepted_total"), 1);
  EXPECT_GE(after.value("tensord_sessions"), 1);
  EXPECT_GE(after.value("tensord_tensors"), 2);
  EXPECT_GE(after.value("tensord_device_memory_bytes{state=\"live\"}"), 8192);
  EXPECT_EQ(after.value("tensord_principal_ops_total{" + me + "}"), 2);
  EXPECT_EQ(after.value("tensord_principal_bytes_transferred_total{direction=\"in\"," + me + "}"), 4096);
  EXPECT_GE(after.value("tensord_principal_tensors{" + me + "}"), 2);
  EXPECT_GE(after.value("tensord_principal_device_bytes{" + me + "}"), 8192);
  EXPECT_EQ(after.value("tensord_principal_sessions{" + me + "}"), 1);
  // Which kernels the calls took: relu's once, mul's once.
  EXPECT_EQ(after.doc["types"]["tensord_kernel_dispatches"], "counter");
  auto kernelDispatches = [&](const std::string& family) {
    double n = 0;
    for (const auto& [sample, v] : after.doc["samples"].items()) {
      if (sample.starts_with("tensord_kernel_dispatches_total{kernel=\"" + family + "|")) n += v.get<double>();
    }
    return n;
  };
  EXPECT_EQ(kernelDispatches("relu"), 1);
  EXPECT_EQ(kernelDispatches("mul"), 1);
  if (client->daemonStats().deviceTimestamps) {
    EXPECT_EQ(after.doc["types"]["tensord_op_device_seconds"], "histogram");
    EXPECT_EQ(after.value("tensord_op_device_seconds_count{op=\"relu\"}"), 1);
    EXPECT_GE(after.value("tensord_op_device_seconds_count{op=\"upload\"}"), 1);
  }
}

// Device time sampled at most once a minute: the daemon's first batch of
// device work is timed, later ones not.
using IntegrationMetricsSampled = MetricsDaemon<60000>;

TEST_F(IntegrationMetricsSampled, DeviceTimeIsSampled) {
  auto client = connect();
  if (!client->daemonStats().deviceTimestamps) GTEST_SKIP() << "the device has no timestamps";
  auto x = client->upload({1024}, std::vector<float>(1024, 1.0f));
  x.toHost();  // the upload and the download are done before the ops below start
  auto y = relu(x * x);
  y.toHost();
  const Scrape after = scrape(daemon().metricsAddress());
  EXPECT_EQ(after.value("tensord_ops_total{op=\"relu\",result=\"ok\"}"), 1);
  EXPECT_EQ(after.value("tensord_op_duration_seconds_count{op=\"relu\"}"), 1) << "wall time is not sampled";
  EXPECT_LE(after.value("tensord_op_device_seconds_count{op=\"relu\"}"), 0) << "relu ran after the timed batch";
  EXPECT_EQ(after.value("tensord_op_device_seconds_count{op=\"upload\"}"), 1) << "the first batch is timed";
}

class IntegrationMetricsOff : public DaemonTest {
  DaemonOptions daemonOptions() override {
    DaemonOptions options;
    options.extra = {{"metrics", {{"enabled", false}}}};
    return options;
  }
};

TEST_F(IntegrationMetricsOff, NoEndpointWhenDisabled) {
  EXPECT_TRUE(daemon().metricsAddress().empty()) << daemon().log();
  EXPECT_FALSE(contains(daemon().log(), "metrics on")) << daemon().log();
  EXPECT_EQ(connect()->daemonStats().metricsAddress, "");
}

TEST(IntegrationMetricsConfig, RemoteEndpointNeedsAllowRemote) {
  std::string tmpl = (fs::temp_directory_path() / "tensord-metrics-XXXXXX").string();
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
  const fs::path path = fs::path(tmpl) / "tensord.json";
  nlohmann::json config = {{"auth", {{"tokens", {{{"principal", "p"}, {"token_sha256", sha256Hex("t")}}}}}},
                           {"metrics", {{"listen", "0.0.0.0:9450"}}}};
  auto check = [&] {
    std::ofstream(path) << config.dump();
    return runCommand({(buildDir() / "server" / "tensord").string(), "--config", path.string(), "--check-config"});
  };
  auto refused = check();
  EXPECT_EQ(refused.exitCode, 1);
  EXPECT_TRUE(contains(refused.err, "metrics.listen: the non-loopback address 0.0.0.0:9450 is refused")) << refused.err;
  config["metrics"]["allow_remote"] = true;
  EXPECT_EQ(check().exitCode, 0);
  config["metrics"] = {{"enabled", false}, {"listen", "0.0.0.0:9450"}};  // off: the address does not matter
  EXPECT_EQ(check().exitCode, 0);
  config["metrics"] = {{"port", 1}};
  auto unknown = check();
  EXPECT_EQ(unknown.exitCode, 1);
  EXPECT_TRUE(contains(unknown.err, "metrics.port: unknown key")) << unknown.err;
  fs::remove_all(tmpl);
}

const char* kStatPolicy = R"({
  "principals": {
    "ops": {"rules": ["+@all", "&admin:usage"]},
    "user": {"rules": ["+@all"]}
  }
})";

class IntegrationStatPolicy : public PolicyDaemonTest {
 protected:
  IntegrationStatPolicy() : PolicyDaemonTest({"ops", "user"}, kStatPolicy) {}
};

TEST_F(IntegrationStatPolicy, StatNeedsAdminUsage) {
  EXPECT_EQ(errorOf([&] { as("ops")->daemonStats(); }), "");
  const std::string denied = errorOf([&] { as("user")->daemonStats(); });
  EXPECT_TRUE(contains(denied, "permission denied")) << denied;
  EXPECT_TRUE(contains(denied, "admin:usage")) << denied;
}

}  // namespace
}  // namespace tensord::testing
