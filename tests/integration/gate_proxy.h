#pragma once
// GateProxy: a TCP proxy on 127.0.0.1:0 in front of one upstream address, run
// on its own thread with plain sockets and poll(). Bytes from clients go
// upstream at once; bytes coming back are forwarded too, unless the gate is
// held: then they are kept (the upstream is still read, so it never stalls)
// until release(). Used to prove that pipelined calls reach the daemon and run
// without any reply reaching the client.
//
// Threads: every public method may be called from any thread.

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>

namespace tensord::testing {

class GateProxy {
 public:
  explicit GateProxy(const std::string& upstream);  // "HOST:PORT"
  ~GateProxy();                                     // stops the thread, closes every connection
  GateProxy(const GateProxy&) = delete;
  GateProxy& operator=(const GateProxy&) = delete;

  std::string address() const;  // "127.0.0.1:PORT" for clients

  // From now on, keep upstream->client bytes. Returns once the pump has seen
  // the hold: a send it began before is then finished and counted in
  // bytesToClient(), and no byte reaches a client until release().
  void hold();
  void release();  // forward what was kept, and everything after it

  uint64_t bytesHeld() const { return held_.load(); }          // kept now, not yet forwarded
  uint64_t bytesToClient() const { return toClient_.load(); }  // forwarded to clients so far
  uint64_t bytesToUpstream() const { return toUpstream_.load(); }

 private:
  void run();
  void wake();

  std::string upstreamHost_;
  uint16_t upstreamPort_ = 0;
  int listenFd_ = -1;
  uint16_t port_ = 0;
  int wakePipe_[2] = {-1, -1};
  std::atomic<bool> holding_{false};
  std::atomic<uint64_t> holdsAsked_{0};  // hold() calls
  std::atomic<uint64_t> holdsSeen_{0};   // of those, seen by the pump at the top of a pass
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> held_{0};
  std::atomic<uint64_t> toClient_{0};
  std::atomic<uint64_t> toUpstream_{0};
  std::thread thread_;
};

// Splits "HOST:PORT"; throws std::invalid_argument when malformed.
std::pair<std::string, uint16_t> splitHostPort(const std::string& address);

}  // namespace tensord::testing
