#pragma once
// Streams a tensor's bytes from the device to a client's ByteSink through the
// bounded staging pool: one slot-sized piece at a time (the next piece's
// device copy overlaps sending the current one when a slot is free), sent in
// 1 MiB `-> stream` writes so Cap'n Proto's flow control paces it, then
// sink.done().
//
// Threads: the event-loop thread only.

#include <kj/async.h>

#include <cstdint>
#include <memory>

#include "protocol/tensord.capnp.h"
#include "server/registry.h"
#include "server/server_state.h"

namespace tensord::server {

// Seconds a receiver may take to accept more data before the transfer fails.
inline constexpr int kStallTimeoutSeconds = 60;

kj::Promise<void> streamToSink(ServerState& server, std::shared_ptr<TensorEntry> entry, proto::ByteSink::Client sink,
                               uint64_t offset, uint64_t length);

}  // namespace tensord::server
