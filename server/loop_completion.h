#pragma once
// Bridges compute::Engine completions, which run on the engine's thread, back
// to the KJ event loop.

#include <kj/async.h>

#include "compute/engine.h"

namespace tensord::server {

struct LoopCompletion {
  compute::Completion completion;  // hand to the engine; callable from any thread, once
  kj::Promise<void> promise;       // on the calling loop: resolves (or rejects) when it ran
};

// Must be called on the event-loop thread. If the engine destroys the
// completion without calling it, the promise rejects.
LoopCompletion makeLoopCompletion();

}  // namespace tensord::server
