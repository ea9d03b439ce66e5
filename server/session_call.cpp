// Session.call: validate, resolve the input capabilities (waiting for
// pipelined ones), allocate the outputs, enqueue the op and return at once.
// The device queue is in order, so later ops and downloads see the results;
// not waiting for the device is what makes a pipelined chain cheap.

#include <spdlog/spdlog.h>

#include <algorithm>

#include "compute/op_table.h"
#include "server/loop_completion.h"
#include "server/op_call.h"
#include "server/op_results_impl.h"
#include "server/session_impl.h"
#include "server/tensor_impl.h"
#include "server/wire.h"

namespace tensord::server {
namespace {

// An input once resolved: its entry and the name access checks use.
struct CallInput {
  std::shared_ptr<TensorEntry> entry;
  std::string resource;
};

// One op from the moment its inputs are resolved to its enqueued outputs.
// Everything a call checks happens here, in the order a call checks it.
class OpRun {
 public:
  OpRun(std::shared_ptr<SessionState> session, FoundOp op, compute::Attrs attrs, OpMeter meter)
      : session_(std::move(session)), op_(std::move(op)), attrs_(std::move(attrs)), meter_(std::move(meter)) {}

  const compute::OpSpec& spec() const { return *op_.spec; }

  // Authorizes the inputs and infers the outputs.
  void prepare(std::vector<CallInput> inputs);
  // For an op whose output shapes depend on the input values
  // (masked_select): asks the device for them, in queue order. `finish`
  // may only be called once that resolved.
  bool needsDeviceShapes() const { return op_.spec->shapeFromDevice(); }
  kj::Promise<void> askDeviceShapes();
  // Allocates the outputs (or makes the view), enqueues the op and returns
  // the outputs' entries.
  std::vector<std::shared_ptr<TensorEntry>> finish();

 private:
  std::shared_ptr<SessionState> session_;
  FoundOp op_;
  compute::Attrs attrs_;
  OpMeter meter_;
  std::vector<CallInput> inputs_;
  std::vector<compute::TensorView> inputViews_;
  std::shared_ptr<std::vector<compute::TensorDesc>> outDescs_ = std::make_shared<std::vector<compute::TensorDesc>>();
};

void OpRun::prepare(std::vector<CallInput> inputs) {
  inputs_ = std::move(inputs);
  const compute::OpSpec* spec = op_.spec;
  std::vector<compute::TensorDesc> descs;
  for (size_t i = 0; i < inputs_.size(); ++i) {
    const TensorEntry& entry = *inputs_[i].entry;
    session_->authorize(acl::Action::kReadTensor, inputs_[i].resource);
    // An op that writes an input in place needs write access to it as well.
    if (!spec->inputs.empty() &&
        std::find(spec->mutates.begin(), spec->mutates.end(), spec->inputName(i)) != spec->mutates.end()) {
      session_->authorize(acl::Action::kWriteTensor, inputs_[i].resource);
    }
    checkNotFailed(entry);
    descs.push_back(entry.desc);
    inputViews_.push_back({entry.desc, entry.buffer});
  }
  *outDescs_ = mapComputeErrors([&] { return compute::inferOutputs(*spec, descs, attrs_); });
}

kj::Promise<void> OpRun::askDeviceShapes() {
  ServerState& server = session_->server();
  auto done = makeLoopCompletion();
  mapComputeErrors(op_.spec->name, [&] {
    server.engine.enqueueShapeQuery(session_->principal.name, *op_.spec, inputViews_, attrs_, outDescs_,
                                    std::move(done.completion));
  });
  return kj::mv(done.promise);
}

std::vector<std::shared_ptr<TensorEntry>> OpRun::finish() {
  ServerState& server = session_->server();
  const compute::OpSpec* spec = op_.spec;
  const std::vector<compute::TensorDesc>& outDescs = *outDescs_;
  const uint64_t limit = server.config.limits.maxTensorBytes;
  for (size_t i = 0; i < outDescs.size(); ++i) {
    if (outDescs[i].bytes() > limit) {
      kj::throwFatalException(failed(spec->name + ": output '" + outputName(*spec, i) + "' would be " +
                                     outDescs[i].str() + " (" + std::to_string(outDescs[i].bytes()) +
                                     " bytes); expected at most " + std::to_string(limit) +
                                     " bytes (limits.max_tensor_bytes)"));
    }
  }

  if (spec->view) {
    // The output is input 0's buffer under a new descriptor: nothing is
    // allocated (the allocator counts the buffer once) and nothing is
    // enqueued. Input 0 may still be in flight; work on one buffer runs in the
    // order it was queued, so later readers see its data, and a failure of
    // its work reaches the view through markFailed.
    if (inputs_.empty() || outDescs.size() != 1 || outDescs[0].bytes() > inputs_[0].entry->buffer->bytes()) {
      kj::throwFatalException(failed(spec->name + ": internal error: a view op must have one output no larger "
                                                  "than its first input"));
    }
    const uint64_t viewBytes[] = {outDescs[0].bytes()};
    server.quotas.checkAllocation(session_->principal.name, spec->name, viewBytes, /*views=*/true);
    const std::shared_ptr<TensorEntry>& base = inputs_[0].entry;
    auto entry = server.registry.add(session_->principal.name, session_->id, outDescs[0], base->buffer);
    base->views.push_back(entry);
    ++server.opsExecuted;
    meter_.succeed();
    return {std::move(entry)};
  }

  {
    std::vector<uint64_t> outBytes;
    for (const auto& desc : outDescs) outBytes.push_back(desc.bytes());
    server.quotas.checkAllocation(session_->principal.name, spec->name, outBytes);
    server.quotas.checkInflightOp(session_->principal.name, spec->name);
  }
  std::vector<compute::TensorView> outputViews;
  for (size_t i = 0; i < outDescs.size(); ++i) {
    const compute::TensorDesc& desc = outDescs[i];
    try {
      outputViews.push_back({desc, server.engine.allocate(desc.bytes(), session_->principal.name)});
    } catch (const compute::ComputeError&) {
      // The message is built only when it is needed.
      const std::string what = spec->name + ": output '" + outputName(*spec, i) + "' (" + desc.str() + ")";
      mapComputeErrors(what, [] { throw; });
    }
  }

  auto done = makeLoopCompletion();
  compute::Completion onDone = std::move(done.completion);
  if (op_.keep) {
    // The job refers to the spec; its completion holds the user kernel behind it.
    onDone = [keep = op_.keep, inner = std::move(onDone)](std::exception_ptr error) { inner(error); };
  }
  holdSubmitsForThisPass(server);
  mapComputeErrors(spec->name, [&] {
    server.engine.enqueueOp(session_->principal.name, *spec, inputViews_, outputViews, attrs_, std::move(onDone));
  });
  ++server.opsExecuted;
  QuotaSlot inflight = server.quotas.enterOp(session_->principal.name);  // until the device completes it
  if (op_.keep) {
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

  // Register the outputs.
  std::vector<std::shared_ptr<TensorEntry>> entries;
  std::vector<std::weak_ptr<TensorEntry>> produced;
  for (auto& view : outputViews) {
    entries.push_back(server.registry.add(session_->principal.name, session_->id, view.desc, std::move(view.buffer)));
    produced.push_back(entries.back());
  }
  auto completion = kj::heap<OpMeter>(std::move(meter_));  // counts the op done when the device is
  OpMeter& completing = *completion;
  server.addTask(done.promise
                     .then([&completing]() { completing.succeed(); },
                           [produced = std::move(produced), op = spec->name, &server](kj::Exception&& e) {
                             failedOnDevice(server, op, produced, e);
                           })
                     .attach(kj::mv(inflight), kj::mv(completion)));
  return entries;
}

// Fills a call's results with capabilities for `entries`.
void reply(capnp::CallContext<proto::Session::CallParams, proto::Session::CallResults>& context,
           const std::shared_ptr<SessionState>& session, const std::string& op,
           std::vector<std::shared_ptr<TensorEntry>> entries) {
  // Sized for the reply: without a hint the RPC system zero-fills a whole
  // default first segment (8 KiB) for every call.
  const uint64_t replyWords = 32 + 4 * entries.size();
  auto results = context.getResults(capnp::MessageSize{replyWords, capnp::uint(entries.size() + 1)});
  auto outputs = kj::heapArrayBuilder<proto::Tensor::Client>(entries.size());
  for (auto& entry : entries) outputs.add(TensorImpl::makeCap(session, std::move(entry)));
  if (outputs.size() > 0) results.setOutput(outputs[0]);
  auto list = results.initOutputs(capnp::uint(outputs.size()));
  for (size_t i = 0; i < outputs.size(); ++i) list.set(capnp::uint(i), outputs[i]);
  results.setResults(kj::heap<OpResultsImpl>(op, outputs.finish()));
}

}  // namespace

kj::Promise<void> SessionImpl::call(CallContext context) {
  auto guard = session_->enterCall("call");
  ServerState& server = session_->server();
  server.quotas.chargeCall(session_->principal.name, "call");
  ++session_->usage.ops;
  auto params = context.getParams();
  const std::string op = params.getOp();
  FoundOp found = findOp(server, op);
  const compute::OpSpec* spec = found.spec;
  // From here on the call counts for its op: completed, or failed however it ends.
  OpMeter meter(server.metrics.op(spec->name));
  session_->authorize(acl::Action::kCallOp, op, spec->category);
  compute::Attrs attrs =
      mapComputeErrors([&] { return compute::validateAttrs(*spec, attrsFromWire(params.getAttrs(), op)); });
  auto run = std::make_shared<OpRun>(session_, std::move(found), std::move(attrs), std::move(meter));

  auto inputs = params.getInputs();
  auto caps = kj::heapArrayBuilder<proto::Tensor::Client>(inputs.size());
  for (auto cap : inputs) caps.add(cap);
  auto capArray = caps.finish();
  auto resolving = kj::heapArrayBuilder<kj::Promise<TensorImpl*>>(capArray.size());
  for (size_t i = 0; i < capArray.size(); ++i) {
    resolving.add(resolveInput(server, spec->name + ": input " + inputName(*spec, i), capArray[i]));
  }

  auto enqueue = [session = session_, context, run](kj::Array<TensorImpl*> impls) mutable -> kj::Promise<void> {
    std::vector<CallInput> in;
    for (TensorImpl* impl : impls) in.push_back({impl->entry(), impl->resource()});
    run->prepare(std::move(in));
    if (!run->needsDeviceShapes()) {
      reply(context, session, run->spec().name, run->finish());
      return kj::READY_NOW;
    }
    return run->askDeviceShapes().then([session, context, run]() mutable {
      reply(context, session, run->spec().name, run->finish());
    });
  };

  // Wait for the session's earlier in-place calls (see SessionState::addInPlaceCall).
  kj::Promise<void> before = session_->afterInPlaceCalls();
  auto resolved =
      before.then([resolving = resolving.finish()]() mutable { return kj::joinPromises(kj::mv(resolving)); });
  if (spec->mutates.empty()) {
    return resolved.then(kj::mv(enqueue)).attach(kj::mv(capArray), kj::mv(guard));
  }
  return session_->inPlace(resolved.then(kj::mv(enqueue)).attach(kj::mv(capArray), kj::mv(guard)));
}


namespace {

constexpr size_t kMaxBatchCalls = 4096;

// Session.callBatch's state while its calls run.
struct BatchRun {
  std::shared_ptr<SessionState> session;
  // Per call: its outputs once enqueued, or the error it failed with.
  std::vector<std::vector<std::shared_ptr<TensorEntry>>> outputs;
  std::vector<kj::Maybe<kj::Exception>> failures;
  // The held tensors among the inputs, resolved (or their error), in the
  // order the calls name them.
  kj::Array<kj::Maybe<CallInput>> held;
  kj::Array<kj::Maybe<kj::Exception>> heldErrors;
};


// Runs one call of a batch up to its prepared OpRun; inputs come from held
// tensors (`nextHeld` walks BatchRun::held) or earlier calls' outputs.
std::shared_ptr<OpRun> startBatchCall(BatchRun& batch, size_t i, proto::BatchCall::Reader call, size_t& nextHeld) {
  ServerState& server = batch.session->server();
  const std::string op = call.getOp();
  // Held inputs are consumed whatever happens to the call, so that the
  // next call finds its own.
  std::vector<kj::Maybe<CallInput>> held;
  std::vector<kj::Maybe<kj::Exception>> heldErrors;
  for (auto input : call.getInputs()) {
    if (input.isTensor()) {
      held.push_back(kj::mv(batch.held[nextHeld]));
      heldErrors.push_back(kj::mv(batch.heldErrors[nextHeld]));
      ++nextHeld;
    } else {
      held.emplace_back(nullptr);
      heldErrors.emplace_back(nullptr);
    }
  }

  server.quotas.chargeCall(batch.session->principal.name, "call");
  ++batch.session->usage.ops;
  FoundOp found = findOp(server, op);
  const compute::OpSpec* spec = found.spec;
  OpMeter meter(server.metrics.op(spec->name));
  batch.session->authorize(acl::Action::kCallOp, op, spec->category);
  compute::Attrs attrs =
      mapComputeErrors([&] { return compute::validateAttrs(*spec, attrsFromWire(call.getAttrs(), op)); });
  auto run = std::make_shared<OpRun>(batch.session, std::move(found), std::move(attrs), std::move(meter));

  std::vector<CallInput> in;
  auto inputs = call.getInputs();
  for (size_t j = 0; j < inputs.size(); ++j) {
    auto what = [&] { return spec->name + ": input " + inputName(*spec, j); };  // for errors only
    KJ_IF_MAYBE (error, heldErrors[j]) {
      kj::throwFatalException(kj::mv(*error));
    }
    KJ_IF_MAYBE (resolved, held[j]) {
      in.push_back(kj::mv(*resolved));
      continue;
    }
    if (!inputs[j].isEarlier()) {
      kj::throwFatalException(failed(what() + " names a graph param; a batch has none (params are for graphCreate)"));
    }
    auto ref = inputs[j].getEarlier();
    const size_t from = ref.getCall();
    const size_t output = ref.getOutput();
    if (from >= i) {
      kj::throwFatalException(failed(what() + " names call " + std::to_string(from) + " of the batch; expected an "
                                     "earlier call (below " + std::to_string(i) + ")"));
    }
    KJ_IF_MAYBE (error, batch.failures[from]) {
      kj::throwFatalException(kj::cp(*error));  // the producer's error, unchanged
    }
    const auto& produced = batch.outputs[from];
    if (output >= produced.size()) {
      kj::throwFatalException(failed(what() + " names output " + std::to_string(output) + " of call " +
                                     std::to_string(from) + ", which has " + std::to_string(produced.size()) +
                                     " output(s)"));
    }
    in.push_back({produced[output], "#" + std::to_string(produced[output]->id)});
  }
  run->prepare(std::move(in));
  return run;
}

// Runs the batch's calls from `first` on; returns once all are enqueued.
// Synchronous but for calls that need their output shapes from the device.
kj::Promise<void> runBatch(std::shared_ptr<BatchRun> batch, capnp::List<proto::BatchCall>::Reader calls,
                           size_t first, size_t nextHeld) {
  for (size_t i = first; i < calls.size(); ++i) {
    std::shared_ptr<OpRun> run;
    KJ_IF_MAYBE (error, kj::runCatchingExceptions([&] { run = startBatchCall(*batch, i, calls[i], nextHeld); })) {
      batch->failures[i] = kj::mv(*error);
      continue;
    }
    if (run->needsDeviceShapes()) {
      auto after = [batch, calls, i, nextHeld, run]() {
        KJ_IF_MAYBE (error, kj::runCatchingExceptions([&] { batch->outputs[i] = run->finish(); })) {
          batch->failures[i] = kj::mv(*error);
        }
        return runBatch(batch, calls, i + 1, nextHeld);
      };
      return run->askDeviceShapes().then(after, [batch, calls, i, nextHeld](kj::Exception&& e) {
        batch->failures[i] = kj::mv(e);
        return runBatch(batch, calls, i + 1, nextHeld);
      });
    }
    KJ_IF_MAYBE (error, kj::runCatchingExceptions([&] { batch->outputs[i] = run->finish(); })) {
      batch->failures[i] = kj::mv(*error);
    }
  }
  return kj::READY_NOW;
}

}  // namespace

kj::Promise<void> SessionImpl::callBatch(CallBatchContext context) {
  auto guard = session_->enterCall("callBatch");
  ServerState& server = session_->server();
  auto params = context.getParams();
  auto calls = params.getCalls();
  auto keep = params.getKeep();
  if (calls.size() > kMaxBatchCalls) {
    kj::throwFatalException(failed("callBatch: " + std::to_string(calls.size()) + " calls; expected at most " +
                                   std::to_string(kMaxBatchCalls) + " per batch"));
  }
  for (size_t k = 0; k < keep.size(); ++k) {
    if (keep[k].getCall() >= calls.size()) {
      kj::throwFatalException(failed("callBatch: keep[" + std::to_string(k) + "] names call " +
                                     std::to_string(keep[k].getCall()) + "; the batch has " +
                                     std::to_string(calls.size()) + " call(s)"));
    }
  }

  // Every held tensor among the inputs, resolved in parallel; each call
  // then meets its own inputs' errors. A batch with an op that writes in
  // place orders like an in-place call.
  // (getLocalServer keeps a reference to its capability: `caps` is sized
  // before the first one is resolved and never moves.)
  bool inPlace = false;
  size_t heldCount = 0;
  for (auto call : calls) {
    for (auto input : call.getInputs()) heldCount += input.isTensor() ? 1 : 0;
  }
  auto capsBuilder = kj::heapArrayBuilder<proto::Tensor::Client>(heldCount);
  for (size_t h = 0; h < heldCount; ++h) capsBuilder.add(nullptr);
  auto caps = capsBuilder.finish();
  auto resolving = kj::heapArrayBuilder<kj::Promise<kj::Maybe<CallInput>>>(heldCount);
  for (size_t i = 0, h = 0; i < calls.size(); ++i) {
    const std::string op = calls[i].getOp();
    const compute::OpSpec* spec = server.engine.ops().find(op);
    if (spec == nullptr) {
      if (const RegisteredKernel* user = server.kernels.find(op)) spec = &user->kernel->spec();
    }
    if (spec != nullptr && !spec->mutates.empty()) inPlace = true;
    auto inputs = calls[i].getInputs();
    for (size_t j = 0; j < inputs.size(); ++j) {
      if (!inputs[j].isTensor()) continue;
      caps[h] = inputs[j].getTensor();
      const std::string what = (spec != nullptr ? spec->name + ": input " + inputName(*spec, j)
                                                : op + ": input #" + std::to_string(j));
      resolving.add(resolveInput(server, what, caps[h]).then([](TensorImpl* impl) -> kj::Maybe<CallInput> {
        return CallInput{impl->entry(), impl->resource()};
      }));
      ++h;
    }
  }

  auto batch = std::make_shared<BatchRun>();
  batch->session = session_;
  batch->outputs.resize(calls.size());
  batch->failures.resize(calls.size());
  batch->heldErrors = kj::heapArray<kj::Maybe<kj::Exception>>(heldCount);
  // Each resolution records its own error instead of failing the batch.
  auto pending = resolving.finish();
  auto settled = kj::heapArrayBuilder<kj::Promise<kj::Maybe<CallInput>>>(heldCount);
  for (size_t h = 0; h < heldCount; ++h) {
    settled.add(pending[h].catch_([batch, h](kj::Exception&& e) -> kj::Maybe<CallInput> {
      batch->heldErrors[h] = kj::mv(e);
      return nullptr;
    }));
  }

  auto run = session_->afterInPlaceCalls()
                 .then([settled = settled.finish()]() mutable { return kj::joinPromises(kj::mv(settled)); })
                 .then([batch, calls](kj::Array<kj::Maybe<CallInput>> held) {
                   batch->held = kj::mv(held);
                   return runBatch(batch, calls, 0, 0);
                 })
                 .then([batch, context, keep]() mutable {
                   // The kept outputs, by index; a failed call's are broken with its error.
                   auto caps = kj::heapArrayBuilder<proto::Tensor::Client>(keep.size());
                   for (size_t k = 0; k < keep.size(); ++k) {
                     const size_t call = keep[k].getCall();
                     const size_t output = keep[k].getOutput();
                     KJ_IF_MAYBE (error, batch->failures[call]) {
                       caps.add(proto::Tensor::Client(capnp::newBrokenCap(kj::cp(*error))));
                       continue;
                     }
                     auto& produced = batch->outputs[call];
                     if (output >= produced.size()) {
                       caps.add(proto::Tensor::Client(capnp::newBrokenCap(failed("callBatch: keep[" + std::to_string(k) + "] names output " +
                                                           std::to_string(output) + " of call " + std::to_string(call) +
                                                           ", which has " + std::to_string(produced.size()) +
                                                           " output(s)"))));
                       continue;
                     }
                     caps.add(TensorImpl::makeCap(batch->session, produced[output]));
                   }
                   context.getResults(capnp::MessageSize{16, 1})
                       .setResults(kj::heap<OpResultsImpl>("callBatch", caps.finish()));
                 })
                 .attach(kj::mv(caps), kj::mv(guard));
  if (!inPlace) return run;
  return session_->inPlace(kj::mv(run));
}

}  // namespace tensord::server
