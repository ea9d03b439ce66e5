// Histogram, the Prometheus text rendering and the `metrics` config keys,
// without a daemon.

#include "server/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <sstream>

#include "server/config.h"

namespace tensord::server {
namespace {

TEST(Histogram, BoundsFollowTheR10SeriesFromOneMicrosecondToAHundredSeconds) {
  const auto& b = Histogram::bounds();
  EXPECT_DOUBLE_EQ(b.front(), 1e-6);
  EXPECT_DOUBLE_EQ(b.back(), 100.0);
  for (size_t i = 1; i < b.size(); ++i) {
    ASSERT_LT(b[i - 1], b[i]) << i;
    // Neighbours are 10^0.1 ~ 1.26 apart, within the rounding of R10.
    EXPECT_NEAR(b[i] / b[i - 1], std::pow(10.0, 0.1), 0.03) << i;
  }
  const auto& exported = exportedBounds();
  ASSERT_EQ(exported.size(), 25u);  // 1, 2.5, 5 per decade for 8 decades, then 100
  EXPECT_DOUBLE_EQ(exported[0], 1e-6);
  EXPECT_DOUBLE_EQ(exported[1], 2.5e-6);
  EXPECT_DOUBLE_EQ(exported[2], 5e-6);
  EXPECT_DOUBLE_EQ(exported[3], 1e-5);
  EXPECT_DOUBLE_EQ(exported.back(), 100.0);
}

TEST(Histogram, BucketsIncludeTheirUpperBound) {
  Histogram h;
  h.observe(1e-6);    // exactly the first bound
  h.observe(1.1e-6);  // the next bucket, (1e-6, 1.25e-6]
  h.observe(1e3);     // above the last bound
  h.observe(-1);      // a clock step back counts as 0
  EXPECT_EQ(h.count(), 4u);
  EXPECT_EQ(h.bucket(0), 2u);
  EXPECT_EQ(h.bucket(1), 1u);
  EXPECT_EQ(h.bucket(Histogram::kBounds), 1u);
  EXPECT_EQ(h.cumulative(1e-6), 2u);
  EXPECT_EQ(h.cumulative(2.5e-6), 3u);
  EXPECT_EQ(h.cumulative(100.0), 3u);
  EXPECT_DOUBLE_EQ(h.max(), 1e3);
  EXPECT_DOUBLE_EQ(h.quantile(1.0), 1e3);  // the overflow bucket answers with the largest seen
}

TEST(Histogram, QuantilesAreWithinABucketOfTheTruth) {
  Histogram h;
  EXPECT_EQ(h.quantile(0.5), 0.0);  // empty
  for (int us = 1; us <= 1000; ++us) h.observe(us * 1e-6);
  EXPECT_NEAR(h.sum(), 500500e-6, 1e-9);
  for (double q : {0.1, 0.5, 0.9, 0.99}) {
    const double truth = q * 1000e-6;
    EXPECT_NEAR(h.quantile(q), truth, truth * 0.26) << q;  // one bucket is a factor 1.26
  }
  EXPECT_LE(h.quantile(0.5), h.quantile(0.9));
  EXPECT_LE(h.quantile(0.9), h.quantile(0.99));
  EXPECT_LE(h.quantile(0.99), h.max());
}

TEST(Histogram, MergeAddsUp) {
  Histogram a, b;
  a.observe(1e-3);
  b.observe(2e-3);
  b.observe(4);
  a.merge(b);
  EXPECT_EQ(a.count(), 3u);
  EXPECT_DOUBLE_EQ(a.max(), 4);
  EXPECT_EQ(a.cumulative(2.5e-3), 2u);
}

TEST(DeviceTimes, RecordsPerOpFromNanoseconds) {
  DeviceTimes times;
  const compute::DeviceTime batch[] = {{"add", 2000}, {"add", 3000}, {"upload", 1000000}};
  times.record(batch);
  auto snapshot = times.snapshot();
  ASSERT_EQ(snapshot.size(), 2u);
  EXPECT_EQ(snapshot["add"].count(), 2u);
  EXPECT_NEAR(snapshot["add"].sum(), 5e-6, 1e-12);
  EXPECT_NEAR(snapshot["upload"].max(), 1e-3, 1e-12);
}

TEST(OpMeter, CountsFailedUnlessSucceeded) {
  OpMetrics op;
  { OpMeter refused(op); }
  {
    OpMeter done(op);
    OpMeter moved(std::move(done));  // the moved-from meter counts nothing
    moved.succeed();
  }
  EXPECT_EQ(op.failed, 1u);
  EXPECT_EQ(op.completed, 1u);
  EXPECT_EQ(op.latency.count(), 1u);
}

StatsSnapshot sampleSnapshot() {
  StatsSnapshot s;
  s.deviceInfo.name = "GPU \"one\"";
  s.deviceInfo.kind = "discrete";
  s.memory.liveBytes = 1024;
  s.deviceTimestamps = true;
  StatsSnapshot::Op add{.name = "add", .completed = 2, .failed = 1};
  add.latency.observe(3e-6);
  add.latency.observe(0.2);
  s.ops.push_back(add);
  s.device["add"].observe(1e-6);
  s.device["upload"].observe(5e-3);
  s.principals.push_back({.name = "we\\ird\"name\n", .deviceBytes = 7});
  s.kernels["conv_gemm|f32|64x128x8|v4|inside"] = 3;
  return s;
}

TEST(Prometheus, RendersFamiliesHistogramsAndEscapedLabels) {
  const std::string text = renderPrometheus(sampleSnapshot());
  auto has = [&](const std::string& line) { return text.find(line + "\n") != std::string::npos; };
  EXPECT_TRUE(has("# TYPE tensord_ops_total counter")) << text;
  EXPECT_TRUE(has("tensord_ops_total{op=\"add\",result=\"ok\"} 2")) << text;
  EXPECT_TRUE(has("tensord_ops_total{op=\"add\",result=\"error\"} 1")) << text;
  EXPECT_TRUE(has("# TYPE tensord_op_duration_seconds histogram")) << text;
  EXPECT_TRUE(has("tensord_op_duration_seconds_bucket{op=\"add\",le=\"1e-06\"} 0")) << text;
  EXPECT_TRUE(has("tensord_op_duration_seconds_bucket{op=\"add\",le=\"5e-06\"} 1")) << text;
  EXPECT_TRUE(has("tensord_op_duration_seconds_bucket{op=\"add\",le=\"0.25\"} 2")) << text;
  EXPECT_TRUE(has("tensord_op_duration_seconds_bucket{op=\"add\",le=\"+Inf\"} 2")) << text;
  EXPECT_TRUE(has("tensord_op_duration_seconds_count{op=\"add\"} 2")) << text;
  EXPECT_TRUE(has("tensord_op_device_seconds_count{op=\"upload\"} 1")) << text;
  EXPECT_TRUE(has("tensord_device_memory_bytes{state=\"live\"} 1024")) << text;
  EXPECT_TRUE(has("# TYPE tensord_kernel_dispatches_total counter")) << text;
  EXPECT_TRUE(has("tensord_kernel_dispatches_total{kernel=\"conv_gemm|f32|64x128x8|v4|inside\"} 3")) << text;
  // Backslash, double quote and newline are escaped in label values.
  EXPECT_TRUE(has("tensord_principal_device_bytes{principal=\"we\\\\ird\\\"name\\n\"} 7")) << text;
  EXPECT_NE(text.find("name=\"GPU \\\"one\\\"\""), std::string::npos) << text;
  // Every family is announced once, before its samples.
  std::istringstream lines(text);
  std::set<std::string> types;
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with("# TYPE ")) EXPECT_TRUE(types.insert(line.substr(7, line.find(' ', 7) - 7)).second) << line;
  }
}

TEST(Prometheus, NoDeviceHistogramWithoutTimestamps) {
  StatsSnapshot s = sampleSnapshot();
  s.deviceTimestamps = false;
  EXPECT_EQ(renderPrometheus(s).find("tensord_op_device_seconds"), std::string::npos);
}

constexpr const char* kAuth =
    R"("auth": {"tokens": [{"principal": "p", "token_sha256": "05c7f384ae29eb8715abed67c17e96ea63cd933e52ce70eab851f641384d17e9"}]})";

std::string configError(const std::string& json) {
  try {
    parseConfig(json);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(MetricsConfig, DefaultsToLoopbackAndCanBeTurnedOff) {
  Config c = parseConfig(std::string("{") + kAuth + "}");
  EXPECT_TRUE(c.metrics.enabled);
  EXPECT_EQ(c.metrics.listen.str(), "127.0.0.1:9450");
  c = parseConfig(std::string("{") + kAuth + R"(, "metrics": {"enabled": false}})");
  EXPECT_FALSE(c.metrics.enabled);
  c = parseConfig(std::string("{") + kAuth + R"(, "metrics": {"listen": "[::1]:0"}})");
  EXPECT_EQ(c.metrics.listen.str(), "[::1]:0");
  c = parseConfig(std::string("{") + kAuth + R"(, "metrics": {"listen": "0.0.0.0:9100", "allow_remote": true}})");
  EXPECT_TRUE(c.metrics.allowRemote);
}

TEST(MetricsConfig, ErrorsNameTheKey) {
  EXPECT_EQ(configError(std::string("{") + kAuth + R"(, "metrics": {"listen": "0.0.0.0:9100"}})")
                .rfind("metrics.listen: the non-loopback address 0.0.0.0:9100 is refused", 0),
            0u);
  EXPECT_EQ(configError(std::string("{") + kAuth + R"(, "metrics": {"enabled": "yes"}})"),
            "metrics.enabled: expected true or false, got \"yes\"");
  EXPECT_EQ(
      configError(std::string("{") + kAuth + R"(, "metrics": {"listen": "nohost"}})").rfind("metrics.listen: ", 0), 0u);
  EXPECT_EQ(
      configError(std::string("{") + kAuth + R"(, "metrics": {"path": "/m"}})").rfind("metrics.path: unknown key", 0),
      0u);
  EXPECT_EQ(configError(std::string("{") + kAuth + R"(, "metrics": true})"), "metrics: expected an object, got true");
}

TEST(MetricsConfig, LogLevelOverride) {
  Config c = parseConfig(std::string("{") + kAuth + R"(, "log_level": "warn"})");
  applyLogLevelOverride(c, "debug");
  EXPECT_EQ(c.logLevel, "debug");
  try {
    applyLogLevelOverride(c, "verbose");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "--log-level: expected one of trace, debug, info, warn, error, got \"verbose\"");
  }
  EXPECT_EQ(c.logLevel, "debug");
}

}  // namespace
}  // namespace tensord::server
