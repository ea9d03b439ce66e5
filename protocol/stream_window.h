#pragma once
// The stream window both ends of a tensord connection send with.
//
// Cap'n Proto paces `-> stream` calls (ByteSink.write, TensorWriter.write,
// GroupPeer.data) by a window: a sender may have that many bytes of calls
// unanswered before the next call waits. Its two-party network takes the
// socket's send buffer as the window, and on Linux that starts at 16 KiB
// and grows only to a few MiB; with 1 MiB chunks a transfer then keeps one
// or two chunks in flight and every chunk waits for the answer to one
// before it: the receiver's copy of each chunk, and the way back, come
// between the sender's writes. A fixed window of a few chunks keeps the
// socket busy while the receiver lands what it got.
//
// The bytes a window lets out are already in the sender's memory (built
// into their messages), so it bounds how far ahead a sender runs, not what
// it holds.

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
