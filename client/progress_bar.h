#pragma once
// A one-line transfer progress bar on stderr. Internal to tensorctl.

#include <chrono>
#include <cstdint>
#include <string>

namespace tensord::cli {

// Draws only when stderr is a terminal and the transfer is at least
// kMinBytes; otherwise every call is a no-op. Thread: the caller's only.
class ProgressBar {
 public:
  static constexpr uint64_t kMinBytes = uint64_t(64) << 20;

  explicit ProgressBar(std::string label);
  ~ProgressBar();  // ends the line if one was drawn
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  // Redraws at most ~10 times a second (and always at the end).
  void update(uint64_t done, uint64_t total);

 private:
  void draw(uint64_t done, uint64_t total);

  std::string label_;
  bool terminal_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point lastDraw_;
};

// "1.5 GiB"
std::string humanBytes(uint64_t bytes);

}  // namespace tensord::cli
