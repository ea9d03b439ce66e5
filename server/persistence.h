#pragma once
// Named tensors across restarts: written to <state_dir>/tensors on a clean
// stop (a manifest.json plus one raw file per tensor) and loaded back on
// start, names, owners and all. Unnamed tensors are not kept.
//
// Threads: the event-loop thread, while no client is connected (before
// listening, after draining); both block on the loop's WaitScope. Transfers
// go through the same bounded staging pool as client transfers.

#include <kj/async.h>

#include <filesystem>

#include "server/server_state.h"

namespace tensord::server {

// Replaces <stateDir>/tensors with the current named tensors. Throws on I/O
// errors (the previous copy is then left in place).
void saveNamedTensors(ServerState& state, const std::filesystem::path& stateDir, kj::WaitScope& waitScope);

// Loads what saveNamedTensors wrote, if anything. A tensor that cannot be
// loaded (bad file, no memory) is skipped with a warning.
void loadNamedTensors(ServerState& state, const std::filesystem::path& stateDir, kj::WaitScope& waitScope);

}  // namespace tensord::server
