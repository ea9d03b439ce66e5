#pragma once
// Small helpers shared by the benchmarks: figures, tables, the daemon binary.

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

namespace tensord::bench {

// The daemon built next to this benchmark: BUILD/server/tensord.
inline std::filesystem::path defaultDaemonBinary() {
  return std::filesystem::canonical("/proc/self/exe").parent_path().parent_path() / "server" / "tensord";
}

// The p-th percentile (0..100) by nearest rank; 0 for no samples.
inline double percentile(std::vector<double> samples, double p) {
  if (samples.empty()) return 0;
  std::sort(samples.begin(), samples.end());
  size_t rank = size_t(p / 100.0 * double(samples.size() - 1) + 0.5);
  return samples[std::min(rank, samples.size() - 1)];
}

inline double median(const std::vector<double>& samples) { return percentile(samples, 50); }

inline std::string format(const char* fmt, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, value);
  return buf;
}

inline std::string micros(double seconds) { return format("%.1f us", seconds * 1e6); }
inline std::string millis(double seconds) { return format("%.2f ms", seconds * 1e3); }
inline std::string gbps(uint64_t bytes, double seconds) { return format("%.2f GB/s", double(bytes) / seconds / 1e9); }
inline std::string ratio(double value) { return format("%.2fx", value); }

inline std::string sizeName(uint64_t bytes) {
  if (bytes >= (1ull << 30) && bytes % (1ull << 30) == 0) return std::to_string(bytes >> 30) + " GiB";
  if (bytes >= (1ull << 20) && bytes % (1ull << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  if (bytes >= (1ull << 10) && bytes % (1ull << 10) == 0) return std::to_string(bytes >> 10) + " KiB";
  return std::to_string(bytes) + " B";
}

// One table row: a label and right-aligned cells.
inline void row(const std::string& label, const std::vector<std::string>& cells) {
  std::printf("  %-34s", label.c_str());
  for (const auto& c : cells) std::printf("%14s", c.c_str());
  std::printf("\n");
}

}  // namespace tensord::bench
