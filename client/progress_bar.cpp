// The transfer progress bar.

#include "client/progress_bar.h"

#include <unistd.h>

#include <cstdio>

namespace tensord::cli {

std::string humanBytes(uint64_t bytes) {
  static const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = double(bytes);
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(units)) {
    value /= 1024;
    ++unit;
  }
  char buf[32];
  if (unit == 0) {
    std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  } else {
    std::snprintf(buf, sizeof buf, "%.1f %s", value, units[unit]);
  }
  return buf;
}

ProgressBar::ProgressBar(std::string label)
    : label_(std::move(label)), terminal_(isatty(STDERR_FILENO) == 1), start_(std::chrono::steady_clock::now()) {}

ProgressBar::~ProgressBar() {
  if (drawn_) std::fputc('\n', stderr);
}

void ProgressBar::update(uint64_t done, uint64_t total) {
  if (!terminal_ || total < kMinBytes) return;
  auto now = std::chrono::steady_clock::now();
  if (drawn_ && done < total && now - lastDraw_ < std::chrono::milliseconds(100)) return;
  lastDraw_ = now;
  draw(done, total);
}

void ProgressBar::draw(uint64_t done, uint64_t total) {
  constexpr int kWidth = 30;
  double fraction = total ? double(done) / double(total) : 1.0;
  int filled = int(fraction * kWidth);
  std::string bar(size_t(filled), '#');
  bar.append(size_t(kWidth - filled), '.');
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::string rate = seconds > 0 ? humanBytes(uint64_t(double(done) / seconds)) + "/s" : "";
  std::fprintf(stderr, "\r%s [%s] %3d%% %s / %s %s\033[K", label_.c_str(), bar.c_str(), int(fraction * 100),
               humanBytes(done).c_str(), humanBytes(total).c_str(), rate.c_str());
  std::fflush(stderr);
  drawn_ = true;
}

}  // namespace tensord::cli
