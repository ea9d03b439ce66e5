#pragma once
// A small in-process tensord for client tests: the real wire protocol over
// loopback TCP (port 0) on its own thread, with CPU ops on f32 data:
//   add(a, b)            same shapes
//   neg(x)
//   scale(x; factor:float=1, bias:float=0, tag:text="", axes:ints=[], flip:bool=false)
//   split2(x) -> (x, -x) two outputs
//   oom(x)               always fails OVERLOADED
// It checks the token "secret" and counts the calls it receives.

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

namespace tensord::testing {

class FakeDaemon {
 public:
  FakeDaemon();   // listening when it returns
  ~FakeDaemon();  // stops the thread; clients see a disconnect

  const std::string& address() const { return address_; }
  static constexpr const char* kToken = "secret";

  // Session.call requests received, all connections.
  uint64_t calls() const { return calls_->load(); }
  // Largest number of bytes one ByteSink.write / TensorWriter.write carried.
  uint64_t largestChunk() const { return largestChunk_->load(); }

  void stop();  // idempotent

 private:
  struct Shared;
  std::shared_ptr<std::atomic<uint64_t>> calls_ = std::make_shared<std::atomic<uint64_t>>(0);
  std::shared_ptr<std::atomic<uint64_t>> largestChunk_ = std::make_shared<std::atomic<uint64_t>>(0);
  std::shared_ptr<Shared> shared_;
  std::string address_;
  std::thread thread_;
};

}  // namespace tensord::testing
