#include "server/op_call.h"

#include <spdlog/spdlog.h>

#include <signal.h>
#include <unistd.h>

#include "compute/op_table.h"
#include "server/tensor_impl.h"
#include "server/wire.h"

namespace tensord::server {

std::string inputName(const compute::OpSpec& spec, size_t i) {
  return spec.inputs.empty() ? "#" + std::to_string(i) : "'" + spec.inputName(i) + "'";
}

void holdSubmitsForThisPass(ServerState& server) {
  thread_local compute::Engine* held = nullptr;
  if (held != nullptr) return;
  held = &server.engine;
  server.engine.holdSubmits();
  // Released when the pass ends, or when the task set goes first.
  server.addTask(kj::evalLast([] {}).attach(kj::defer([&engine = server.engine] {
    engine.releaseSubmits();
    held = nullptr;
  })));
}

std::string outputName(const compute::OpSpec& spec, size_t i) {
  return i < spec.outputs.size() ? spec.outputs[i] : std::to_string(i);
}

kj::Promise<TensorImpl*> resolveInput(ServerState& server, const std::string& what, proto::Tensor::Client& cap) {
  return server.tensorCaps.getLocalServer(cap).then(
      [what](kj::Maybe<proto::Tensor::Server&> local) -> TensorImpl* {
        KJ_IF_MAYBE (server, local) {
          return &kj::downcast<TensorImpl>(*server);
        }
        kj::throwFatalException(failed(what + " is not a tensor of this daemon"));
      },
      [what](kj::Exception&& e) -> TensorImpl* {
        if (std::string_view(e.getDescription().cStr()).find("null capability") != std::string_view::npos) {
          kj::throwFatalException(failed(what + " is missing (a null capability)"));
        }
        kj::throwFatalException(kj::mv(e));
      });
}

FoundOp findOp(ServerState& server, const std::string& op) {
  if (const compute::OpSpec* spec = server.engine.ops().find(op)) return {spec, nullptr};
  if (const RegisteredKernel* user = server.kernels.find(op)) return {&user->kernel->spec(), user->kernel};
  kj::throwFatalException(unimplemented("unknown op '" + op + "'"));
}

void failedOnDevice(ServerState& server, const std::string& op, const std::vector<std::weak_ptr<TensorEntry>>& produced,
                    const kj::Exception& error) {
  spdlog::logger& log = server.log;
  log.error("{} failed on the device: {}", op, error.getDescription().cStr());
  if (!server.deviceLost &&
      std::string_view(error.getDescription().cStr()).find("ErrorDeviceLost") != std::string_view::npos) {
    // Nothing the device holds can be trusted any more.
    server.deviceLost = true;
    log.critical("the Vulkan device was lost; stopping so that the service manager restarts the daemon");
    ::kill(::getpid(), SIGTERM);
  }
  for (const auto& weak : produced) {
    if (auto entry = weak.lock()) markFailed(*entry, error);
  }
}

}  // namespace tensord::server
