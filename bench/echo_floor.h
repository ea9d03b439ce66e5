#pragma once
// The bare Cap'n Proto figures tensord's are compared with: a trivial call,
// a chain of pipelined calls each taking the one before's result, and
// `-> stream` transfers in fixed chunks over loopback TCP (or over TLS
// through protocol::TlsStream, as tensord's connections), server and client
// each on their own thread with their own KJ event loop, streaming with the
// same window as tensord's connections.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace tensord::bench {

// The floor's server and one client connection to it, each on a thread of
// its own with its own KJ event loop. Each call below runs on the client's
// thread and returns when done, so a caller can take the floor's samples
// alternately with its own, both under the same conditions of the host.
class Floor {
 public:
  struct Options {
    // Stream with tensord's window (protocol/stream_window.h), so the floor
    // differs from tensord only in what tensord does; false: Cap'n Proto's
    // default, the socket's send buffer.
    bool tensordWindow = true;
    // Both set (PEM text): the connection is TLS, the server presenting this
    // certificate and the client trusting it; both empty: plain TCP.
    std::string tlsCertPem, tlsKeyPem;
    uint32_t chunkBytes = 1u << 20;  // transfers move in chunks of this many bytes
  };

  explicit Floor(const Options& options);
  ~Floor();
  Floor(const Floor&) = delete;
  Floor& operator=(const Floor&) = delete;

  // The round trip of each of `count` trivial calls, one after another.
  std::vector<double> pings(int count);
  // `length` calls, each taking the result of the one before (promise
  // pipelining), only the last waited for: the time of the whole chain.
  double chain(int length);
  // `bytes` streamed to the server (`-> stream` in chunks, then a call that
  // returns the count) or from it into a sink here: the time of each.
  double upload(std::span<const std::byte> bytes);
  double download(uint64_t bytes);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tensord::bench
