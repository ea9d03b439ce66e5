// Session.call: validate, resolve the input capabilities (waiting for
// pipelined ones), allocate the outputs, enqueue the op and return at once.
// The device queue is in order, so later ops and downloads see the results;
// not waiting for the device is what makes a pipelined chain cheap.

#include <spdlog/spdlog.h>

#include <signal.h>
#include <unistd.h>

#include <algorithm>

#include "compute/op_table.h"
#include "server/loop_completion.h"
#include "server/op_results_impl.h"
#include "server/session_impl.h"
#include "server/tensor_impl.h"
#include "server/wire.h"

namespace tensord::server {
namespace {

std::string inputName(const compute::OpSpec& spec, size_t i) {
  return spec.inputs.empty() ? "#" + std::to_string(i) : "'" + spec.inputName(i) + "'";
}

// Holds the engine's submits until the end of this pass of the event loop, so
// that the ops of a pipelined burst go to the device in one batch
// (Engine::holdSubmits) instead of one submit each.
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

// Resolves the i-th input capability to the TensorImpl behind it. Errors of
// the call that produces a pipelined input pass through unchanged.
kj::Promise<TensorImpl*> resolveInput(ServerState& server, const compute::OpSpec& spec, size_t i,
                                      proto::Tensor::Client& cap) {
  std::string what = spec.name + ": input " + inputName(spec, i);
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

void finishCall(const std::shared_ptr<SessionState>& session,
                capnp::CallContext<proto::Session::CallParams, proto::Session::CallResults> context,
                const compute::OpSpec& op, kj::Array<TensorImpl*> impls,
                const std::vector<compute::TensorView>& inputViews, const std::vector<compute::TensorDesc>& outDescs,
                const compute::Attrs& attrs, OpMeter meter, std::shared_ptr<const void> keep);

}  // namespace

kj::Promise<void> SessionImpl::call(CallContext context) {
  auto guard = session_->enterCall("call");
  ServerState& server = session_->server();
  server.quotas.chargeCall(session_->principal.name, "call");
  ++session_->usage.ops;
  auto params = context.getParams();
  const std::string op = params.getOp();
  const compute::OpSpec* spec = server.engine.ops().find(op);
  // After the built-ins, the user kernels. The call holds its kernel until
  // the device finished it, so removing the kernel meanwhile is safe.
  std::shared_ptr<const void> keep;
  if (spec == nullptr) {
    if (const RegisteredKernel* user = server.kernels.find(op)) {
      keep = user->kernel;
      spec = &user->kernel->spec();
    }
  }
  if (spec == nullptr) kj::throwFatalException(unimplemented("unknown op '" + op + "'"));
  // From here on the call counts for its op: completed, or failed however it ends.
  OpMeter meter(server.metrics.op(spec->name));
  session_->authorize(acl::Action::kCallOp, op, spec->category);
  compute::Attrs attrs =
      mapComputeErrors([&] { return compute::validateAttrs(*spec, attrsFromWire(params.getAttrs(), op)); });

  auto inputs = params.getInputs();
  auto caps = kj::heapArrayBuilder<proto::Tensor::Client>(inputs.size());
  for (auto cap : inputs) caps.add(cap);
  auto capArray = caps.finish();
  auto resolving = kj::heapArrayBuilder<kj::Promise<TensorImpl*>>(capArray.size());
  for (size_t i = 0; i < capArray.size(); ++i) resolving.add(resolveInput(server, *spec, i, capArray[i]));

  auto enqueue = [session = session_, context, spec, attrs = std::move(attrs), meter = std::move(meter),
                  keep](kj::Array<TensorImpl*> impls) mutable -> kj::Promise<void> {
    ServerState& server = session->server();
    std::vector<compute::TensorDesc> descs;
    std::vector<compute::TensorView> inputViews;
    for (size_t i = 0; i < impls.size(); ++i) {
      const TensorEntry& entry = *impls[i]->entry();
      const std::string resource = impls[i]->resource();
      session->authorize(acl::Action::kReadTensor, resource);
      // An op that writes an input in place needs write access to it as well.
      if (!spec->inputs.empty() && std::find(spec->mutates.begin(), spec->mutates.end(), spec->inputName(i)) !=
                                       spec->mutates.end()) {
        session->authorize(acl::Action::kWriteTensor, resource);
      }
      checkNotFailed(entry);
      descs.push_back(entry.desc);
      inputViews.push_back({entry.desc, entry.buffer});
    }
    std::vector<compute::TensorDesc> inferred =
        mapComputeErrors([&] { return compute::inferOutputs(*spec, descs, attrs); });
    if (!spec->shapeFromDevice()) {
      finishCall(session, context, *spec, kj::mv(impls), inputViews, inferred, attrs, std::move(meter), keep);
      return kj::READY_NOW;
    }
    // The output shapes depend on the input values (masked_select): ask the
    // device first, in queue order, then allocate and enqueue as usual.
    auto shapes = std::make_shared<std::vector<compute::TensorDesc>>();
    auto done = makeLoopCompletion();
    mapComputeErrors(spec->name, [&] {
      server.engine.enqueueShapeQuery(session->principal.name, *spec, inputViews, attrs, shapes, std::move(done.completion));
    });
    return done.promise.then([session, context, spec, impls = kj::mv(impls), inputViews = std::move(inputViews), shapes,
                              attrs = std::move(attrs), meter = std::move(meter), keep]() mutable {
      finishCall(session, context, *spec, kj::mv(impls), inputViews, *shapes, attrs, std::move(meter), keep);
    });
  };

  // Wait for the session's earlier in-place calls (see SessionState::addInPlaceCall).
  kj::Promise<void> before = session_->afterInPlaceCalls();
  auto resolved =
      before.then([resolving = resolving.finish()]() mutable { return kj::joinPromises(kj::mv(resolving)); });
  if (spec->mutates.empty()) {
    return resolved.then(kj::mv(enqueue)).attach(kj::mv(capArray), kj::mv(guard));
  }
  auto paf = kj::newPromiseAndFulfiller<void>();
  session_->addInPlaceCall(kj::mv(paf.promise));
  auto done = std::make_shared<kj::Own<kj::PromiseFulfiller<void>>>(kj::mv(paf.fulfiller));
  return resolved.then(kj::mv(enqueue))
      .then([done]() { (*done)->fulfill(); },
            [done](kj::Exception&& e) {
              (*done)->fulfill();
              kj::throwFatalException(kj::mv(e));
            })
      .attach(kj::mv(capArray), kj::mv(guard));
}

namespace {

// Allocates the outputs (or makes the view), enqueues the op and fills in the
// call's results.
void finishCall(const std::shared_ptr<SessionState>& session,
                capnp::CallContext<proto::Session::CallParams, proto::Session::CallResults> context,
                const compute::OpSpec& op, kj::Array<TensorImpl*> impls,
                const std::vector<compute::TensorView>& inputViews, const std::vector<compute::TensorDesc>& outDescs,
                const compute::Attrs& attrs, OpMeter meter, std::shared_ptr<const void> keep) {
  ServerState& server = session->server();
  const compute::OpSpec* spec = &op;
  {
    const uint64_t limit = server.config.limits.maxTensorBytes;
    for (size_t i = 0; i < outDescs.size(); ++i) {
      if (outDescs[i].bytes() > limit) {
        kj::throwFatalException(failed(spec->name + ": output '" + outputName(*spec, i) + "' would be " +
                                       outDescs[i].str() + " (" + std::to_string(outDescs[i].bytes()) +
                                       " bytes); expected at most " + std::to_string(limit) +
                                       " bytes (limits.max_tensor_bytes)"));
      }
    }

    // Sized for the reply: without a hint the RPC system zero-fills a whole
    // default first segment (8 KiB) for every call.
    const uint64_t replyWords = 32 + 4 * outDescs.size();
    auto results = context.getResults(capnp::MessageSize{replyWords, capnp::uint(outDescs.size() + 1)});
    auto reply = [&](kj::Array<proto::Tensor::Client> outputs) {
      if (outputs.size() > 0) results.setOutput(outputs[0]);
      auto list = results.initOutputs(capnp::uint(outputs.size()));
      for (size_t i = 0; i < outputs.size(); ++i) list.set(capnp::uint(i), outputs[i]);
      results.setResults(kj::heap<OpResultsImpl>(spec->name, kj::mv(outputs)));
    };

    if (spec->view) {
      // The output is input 0's buffer under a new descriptor: nothing is
      // allocated (the allocator counts the buffer once) and nothing is
      // enqueued. Input 0 may still be in flight; work on one buffer runs in the
      // order it was queued, so later readers see its data, and a failure of
      // its work reaches the view through markFailed.
      if (impls.size() == 0 || outDescs.size() != 1 || outDescs[0].bytes() > impls[0]->entry()->buffer->bytes()) {
        kj::throwFatalException(failed(spec->name + ": internal error: a view op must have one output no larger "
                                                    "than its first input"));
      }
      const uint64_t viewBytes[] = {outDescs[0].bytes()};
      server.quotas.checkAllocation(session->principal.name, spec->name, viewBytes, /*views=*/true);
      const std::shared_ptr<TensorEntry>& base = impls[0]->entry();
      auto entry = server.registry.add(session->principal.name, session->id, outDescs[0], base->buffer);
      base->views.push_back(entry);
      ++server.opsExecuted;
      auto outCaps = kj::heapArrayBuilder<proto::Tensor::Client>(1);
      outCaps.add(TensorImpl::makeCap(session, std::move(entry)));
      reply(outCaps.finish());
      meter.succeed();
      return;
    }

    {
      std::vector<uint64_t> outBytes;
      for (const auto& desc : outDescs) outBytes.push_back(desc.bytes());
      server.quotas.checkAllocation(session->principal.name, spec->name, outBytes);
      server.quotas.checkInflightOp(session->principal.name, spec->name);
    }
    std::vector<compute::TensorView> outputViews;
    for (size_t i = 0; i < outDescs.size(); ++i) {
      const compute::TensorDesc& desc = outDescs[i];
      const std::string what = spec->name + ": output '" + outputName(*spec, i) + "' (" + desc.str() + ")";
      auto buffer =
          mapComputeErrors(what, [&] { return server.engine.allocate(desc.bytes(), session->principal.name); });
      outputViews.push_back({desc, std::move(buffer)});
    }

    auto done = makeLoopCompletion();
    compute::Completion onDone = std::move(done.completion);
    if (keep) {
      // The job refers to the spec; its completion holds the user kernel behind it.
      onDone = [keep, inner = std::move(onDone)](std::exception_ptr error) { inner(error); };
    }
    holdSubmitsForThisPass(server);
    mapComputeErrors(spec->name, [&] {
      server.engine.enqueueOp(session->principal.name, *spec, inputViews, outputViews, attrs, std::move(onDone));
    });
    ++server.opsExecuted;
    QuotaSlot inflight = server.quotas.enterOp(session->principal.name);  // until the device completes it
    if (keep) {
      // A user kernel still unfinished kernels.max_dispatch_ms after it was
      // queued is reported while it runs (a dispatch cannot be preempted).
      auto finished = std::make_shared<bool>(false);
      done.promise = done.promise.then([finished]() { *finished = true; },
                                       [finished](kj::Exception&& e) {
                                         *finished = true;
                                         kj::throwFatalException(kj::mv(e));
                                       });
      const uint32_t limitMs = server.config.kernelMaxDispatchMs;
      server.addTask(server.timer.afterDelay(limitMs * kj::MILLISECONDS)
                         .then([finished, op = spec->name, limitMs, &log = server.log]() {
                           if (!*finished) {
                             log.warn("kernel {} has not finished {} ms after it was queued "
                                      "(kernels.max_dispatch_ms)", op, limitMs);
                           }
                         }));
    }

    // Register the outputs and hand out their capabilities.
    std::vector<std::weak_ptr<TensorEntry>> produced;
    auto outCaps = kj::heapArrayBuilder<proto::Tensor::Client>(outputViews.size());
    for (auto& view : outputViews) {
      auto entry = server.registry.add(session->principal.name, session->id, view.desc, std::move(view.buffer));
      produced.push_back(entry);
      outCaps.add(TensorImpl::makeCap(session, std::move(entry)));
    }
    auto completion = kj::heap<OpMeter>(std::move(meter));  // counts the op done when the device is
    OpMeter& completing = *completion;
    server.addTask(done.promise
                       .then([&completing]() { completing.succeed(); },
                             [produced = std::move(produced), op = spec->name, &server](kj::Exception&& e) {
                               spdlog::logger& log = server.log;
                               log.error("{} failed on the device: {}", op, e.getDescription().cStr());
                               if (!server.deviceLost &&
                                   std::string_view(e.getDescription().cStr()).find("ErrorDeviceLost") !=
                                       std::string_view::npos) {
                                 // Nothing the device holds can be trusted any more.
                                 server.deviceLost = true;
                                 log.critical("the Vulkan device was lost; stopping so that the service manager "
                                              "restarts the daemon");
                                 ::kill(::getpid(), SIGTERM);
                               }
                               for (const auto& weak : produced) {
                                 if (auto entry = weak.lock()) markFailed(*entry, e);
                               }
                             })
                       .attach(kj::mv(inflight), kj::mv(completion)));
    reply(outCaps.finish());
  }
}

}  // namespace

}  // namespace tensord::server
