#pragma once
// Named tensors across restarts: written to <state_dir>/tensors.safetensors
// on a clean stop and loaded back on start, names, owners and all. Unnamed
// tensors are not kept.
//
// The file is plain safetensors (any reader loads it): each tensor once,
// under its first name, and in "__metadata__" "format": "tensord-state-1",
// "owner:<name>": the principal owning it, "alias:<name>": the stored name
// of a tensor that has further names. It is written as
// tensors.safetensors.tmp, fsynced, renamed over the previous file and the
// directory fsynced, so at every moment the state directory holds one
// complete set, the old or the new; a temporary file left by an interrupted
// save is ignored and written over.
//
// Migration: a state directory of the earlier format (tensors/manifest.json
// plus one raw file per tensor, or tensors.old/ from a stop cut off between
// its renames) is loaded when no tensors.safetensors exists; the next save
// writes safetensors and removes the old directories.
//
// Threads: the event-loop thread, while no client is connected (before
// listening, after draining); both block on the loop's WaitScope while the
// disk work runs on the FileWorker. Transfers go through the same bounded
// staging pool as client transfers.

#include <kj/async.h>

#include <filesystem>

#include "server/server_state.h"

namespace tensord::server {

// The state file's name in the state directory.
inline constexpr const char* kStateFile = "tensors.safetensors";

// Replaces <stateDir>/tensors.safetensors with the current named tensors.
// Throws on I/O errors (the previous file is then left in place).
void saveNamedTensors(ServerState& state, const std::filesystem::path& stateDir, kj::WaitScope& waitScope);

// Loads what saveNamedTensors wrote, or the earlier format, if anything. A
// tensor that cannot be loaded (no memory, a dtype the device lacks) is
// skipped with a warning. A state file that does not parse is renamed to
// tensors.safetensors.corrupt (kept for inspection, not overwritten by the
// next save) and nothing is loaded.
void loadNamedTensors(ServerState& state, const std::filesystem::path& stateDir, kj::WaitScope& waitScope);

}  // namespace tensord::server
