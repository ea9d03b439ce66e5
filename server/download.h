#pragma once
// Streams a tensor's bytes from the device to a client's ByteSink through the
// bounded staging pool, one piece at a time (a quarter chunk first, each
// piece twice the last up to a slot): the device copies a
// piece into a slot, the piece is copied out into its 1 MiB `-> stream`
// write requests and the slot goes back to the pool at once, before any of
// it is sent. So a slow or stalled receiver holds host memory (at most two
// pieces: the one being sent while the next one is fetched), never a slot
// other transfers need. Cap'n Proto's flow control paces the writes; then
// sink.done().
//
// Threads: the event-loop thread; a piece larger than a chunk is copied out
// of its slot on a ServerState::hostCopies worker, which the device copy's
// completion starts on the engine's completion thread.

#include <kj/async.h>

#include <cstdint>
#include <memory>
#include <string>

#include "protocol/tensord.capnp.h"
#include "server/registry.h"
#include "server/server_state.h"

namespace tensord::server {

// Seconds a receiver may take to accept more data before the transfer fails.
inline constexpr int kStallTimeoutSeconds = 60;

// `requester`: the principal asking, whose device queue the copies join.
kj::Promise<void> streamToSink(ServerState& server, std::string requester, std::shared_ptr<TensorEntry> entry,
                               proto::ByteSink::Client sink, uint64_t offset, uint64_t length);

}  // namespace tensord::server
