#pragma once
// The bare Cap'n Proto figures tensord's are compared with: a trivial call,
// a chain of pipelined calls each taking the one before's result, and
// `-> stream` transfers in fixed chunks over loopback TCP (or over TLS
// through protocol::TlsStream, as tensord's connections), server and client
// each on their own thread with their own KJ event loop, streaming with the
// same window as tensord's connections.

#include <cstddef>
#include <cstdint>
#include <string>
#include <span>
#include <vector>

namespace tensord::bench {

struct FloorPlan {
  int pingWarmup = 50;
  int pings = 2000;
  int chains = 0;  // chains of `chainLength` pipelined calls, each waited for at its end
  int chainLength = 100;
  std::vector<uint64_t> transferBytes;  // one entry per size
  std::vector<int> transferRepeats;     // repeats per size
  uint32_t chunkBytes = 1u << 20;
  std::span<const std::byte> source;  // at least max(transferBytes) bytes
  // Stream with tensord's window (protocol/stream_window.h), so the floor
  // differs from tensord only in what tensord does; false: Cap'n Proto's
  // default, the socket's send buffer.
  bool tensordWindow = true;
  // Both set (PEM text): the connection is TLS, the server presenting this
  // certificate and the client trusting it; both empty: plain TCP.
  std::string tlsCertPem, tlsKeyPem;
};

struct FloorResults {
  std::vector<double> pingSeconds;                   // one per ping
  std::vector<double> chainSeconds;                  // one per chain
  std::vector<std::vector<double>> uploadSeconds;    // [size][repeat]
  std::vector<std::vector<double>> downloadSeconds;  // [size][repeat]
};

// Runs the whole plan; must be called on a thread with no KJ event loop.
FloorResults measureFloor(const FloorPlan& plan);

}  // namespace tensord::bench
