#pragma once
// The stream window both ends of a tensord connection send with.
//
// Cap'n Proto paces `-> stream` calls (ByteSink.write, TensorWriter.write)
// by a window (GroupPeer.data calls keep one of the same size themselves,
// server/group_link.h): a sender may have that many bytes of calls
// unanswered before the next call waits. Its two-party network takes the
// socket's send buffer as the window (on Linux 16 KiB at first, growing to
// a few MiB; a fixed 64 KiB over TLS, where the stream has no socket
// options); with 1 MiB chunks a transfer then keeps one or two chunks in
// flight and every chunk waits for the answer to one before it: the
// receiver's copy of each chunk, and the way back, come between the
// sender's writes. A fixed window of a few chunks keeps the socket busy
// while the receiver lands what it got.
//
// The price is memory: a stream's calls let out by the window wait in the
// connection's queue until the socket takes them, so a stalled receiver
// holds up to one window plus one chunk of messages per stream on the
// sending side (a download's two pieces come on top; docs/design.md).

#include <capnp/rpc-twoparty.h>

#include <cstddef>

namespace tensord::protocol {

// Bytes of one stream's calls that may be unanswered: 16 chunks of 1 MiB.
inline constexpr size_t kStreamWindowBytes = size_t(16) << 20;

// A two-party network whose streams use a window of kStreamWindowBytes.
class WindowedVatNetwork final : public capnp::TwoPartyVatNetwork {
 public:
  using TwoPartyVatNetwork::TwoPartyVatNetwork;

 private:
  size_t getWindow() override { return kStreamWindowBytes; }
};

}  // namespace tensord::protocol
