#pragma once
// What Session.call, callBatch and captured graphs share: finding an op,
// resolving input capabilities, naming inputs and outputs in errors,
// batching submits, and what happens when device work fails.
//
// Threads: the event-loop thread only.

#include <memory>
#include <string>
#include <vector>

#include "compute/op_spec.h"
#include "protocol/tensord.capnp.h"
#include "server/registry.h"
#include "server/server_state.h"

namespace tensord::server {

class TensorImpl;

// "'input'" (or "#0" for an op with unnamed inputs), for errors.
std::string inputName(const compute::OpSpec& spec, size_t i);
// The i-th output's name, for errors.
std::string outputName(const compute::OpSpec& spec, size_t i);

// Holds the engine's submits until the end of this pass of the event loop, so
// that the small ops of a pipelined burst go to the device in one batch
// (Engine::holdSubmits) instead of one submit each.
void holdSubmitsForThisPass(ServerState& server);

// Resolves an input capability to the TensorImpl behind it; `what` names it
// in errors ("add: input 'other'"). Errors of the call that produces a
// pipelined input pass through unchanged. `cap` must stay where it is until
// the promise resolved (Cap'n Proto keeps a reference to it).
kj::Promise<TensorImpl*> resolveInput(ServerState& server, const std::string& what, proto::Tensor::Client& cap);

// An op found by name: a built-in, else a user kernel, which `keep` holds
// until the device finished the call.
struct FoundOp {
  const compute::OpSpec* spec = nullptr;
  std::shared_ptr<const void> keep;
};
// Throws "unknown op '...'" (unimplemented).
FoundOp findOp(ServerState& server, const std::string& op);

// Device work named `op` failed: logs it, stops the daemon when the device
// was lost, and marks the outputs it produced (those still alive) failed.
void failedOnDevice(ServerState& server, const std::string& op, const std::vector<std::weak_ptr<TensorEntry>>& produced,
                    const kj::Exception& error);

}  // namespace tensord::server
