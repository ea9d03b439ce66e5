// Session.graphCreate and Graph: calls captured once, checked once, and run
// many times as one piece of device work. What a run still does per call is
// what cannot be decided at capture: authorization (only when the policy
// changed since the last check), quotas and allocation. Runs of elementwise
// calls are fused at capture into one kernel each (compute/template_fused.h).

#include <algorithm>

#include "compute/op_table.h"
#include "compute/template_fused.h"
#include "server/loop_completion.h"
#include "server/op_call.h"
#include "server/op_results_impl.h"
#include "server/session_impl.h"
#include "server/tensor_impl.h"
#include "server/wire.h"

namespace tensord::server {
namespace {

constexpr size_t kMaxGraphCalls = 4096;

struct GraphInput {
  enum class Kind { kParam, kEarlier, kConstant } kind = Kind::kParam;
  uint32_t index = 0;   // the param, the earlier call, or the constant
  uint32_t output = 0;  // kEarlier: that call's output
};

struct GraphStep {
  FoundOp op;
  compute::Attrs attrs;
  std::vector<GraphInput> inputs;
  std::vector<compute::TensorDesc> inputDescs;  // as captured
  std::vector<compute::TensorDesc> outputs;     // inferred at capture
  bool mutatesInput(size_t i) const {
    const compute::OpSpec& spec = *op.spec;
    return !spec.inputs.empty() &&
           std::find(spec.mutates.begin(), spec.mutates.end(), spec.inputName(i)) != spec.mutates.end();
  }
};

struct Constant {
  std::shared_ptr<TensorEntry> entry;
  std::string resource;
};

// One piece of device work of a run: a captured call, or several
// elementwise calls fused into one kernel.
struct RunStep {
  const compute::OpSpec* spec = nullptr;
  const compute::Attrs* attrs = nullptr;
  std::vector<GraphInput> inputs;
  std::vector<std::pair<uint32_t, uint32_t>> outputs;  // the (call, output) results it writes
  std::shared_ptr<const compute::OpSpec> fused;        // owns `spec` when fused
  compute::Attrs noAttrs;                              // `attrs` of a fused step
};

// What a capture produced; immutable but for the policy it was last
// authorized under. Shared by the graph and its runs' device work (which
// reads the specs and attributes while it records).
struct GraphPlan {
  std::vector<compute::TensorDesc> params;
  std::vector<GraphStep> steps;
  std::vector<Constant> constants;
  std::vector<std::pair<uint32_t, uint32_t>> outputs;  // (call, output)
  std::vector<bool> paramsWritten;                     // a step writes that param in place
  bool writesInPlace = false;                          // a step writes a param or a held tensor in place
  std::vector<RunStep> run;                            // what a run executes, in order
  std::vector<uint32_t> firstValue;                    // per call: its outputs' first index in a run's values
  uint32_t values = 0;                                 // every call's outputs
  std::vector<std::pair<OpMetrics*, uint64_t>> ops;    // each op's metrics, and how many calls of it
  std::shared_ptr<const acl::Policy> authorizedUnder;  // the ops and constants are allowed under it
};

// "graphCreate: call 3 (add): " before an error's description, keeping its type.
kj::Exception locate(kj::Exception&& e, const std::string& where) {
  kj::Exception out(e.getType(), e.getFile(), e.getLine(), kj::str(where, e.getDescription()));
  return out;
}

// Splits the calls into what a run executes: each run of consecutive
// elementwise calls with results of one shape becomes one fused kernel that
// writes only the results used after it or returned; every other call runs
// as captured. A fused kernel takes at most kMaxFusedInputs tensors and
// writes at most kMaxFusedOutputs; a longer run is cut in pieces.
void planRun(GraphPlan& plan, Metrics& metrics) {
  const size_t n = plan.steps.size();
  for (const GraphStep& step : plan.steps) {
    OpMetrics* op = &metrics.op(step.op.spec->name);
    auto at = std::find_if(plan.ops.begin(), plan.ops.end(), [&](const auto& m) { return m.first == op; });
    if (at == plan.ops.end()) plan.ops.emplace_back(op, 1);
    else ++at->second;
  }
  plan.firstValue.resize(n);
  for (size_t i = 0; i < n; ++i) {
    plan.firstValue[i] = plan.values;
    plan.values += uint32_t(plan.steps[i].outputs.size());
  }
  // Per result: the last call that reads it, or `n` if the graph returns it.
  std::vector<size_t> lastUse(plan.values, 0);
  for (size_t i = 0; i < n; ++i) {
    for (const GraphInput& in : plan.steps[i].inputs) {
      if (in.kind == GraphInput::Kind::kEarlier) lastUse[plan.firstValue[in.index] + in.output] = i;
    }
  }
  for (const auto& [call, output] : plan.outputs) lastUse[plan.firstValue[call] + output] = n;

  auto asCaptured = [&](size_t i) {
    RunStep r{.spec = plan.steps[i].op.spec, .attrs = &plan.steps[i].attrs, .inputs = plan.steps[i].inputs};
    for (uint32_t o = 0; o < plan.steps[i].outputs.size(); ++o) r.outputs.emplace_back(uint32_t(i), o);
    plan.run.push_back(std::move(r));
  };
  // The same tensor: each use of a tensor the graph holds is a constant of
  // its own, so constants compare by what they hold.
  auto sameInput = [&](const GraphInput& a, const GraphInput& b) {
    if (a.kind != b.kind) return false;
    if (a.kind == GraphInput::Kind::kConstant) return plan.constants[a.index].entry == plan.constants[b.index].entry;
    return a.index == b.index && a.output == b.output;
  };
  // Calls [first, end) with the results read after `end` or returned.
  auto escaping = [&](size_t first, size_t end) {
    std::vector<size_t> out;
    for (size_t c = first; c < end; ++c) {
      if (lastUse[plan.firstValue[c]] >= end) out.push_back(c);
    }
    return out;
  };
  auto fuse = [&](size_t first, size_t end, const std::vector<GraphInput>& inputs) {
    if (end - first == 1) return asCaptured(first);
    std::vector<compute::FusedCall> calls;
    for (size_t c = first; c < end; ++c) {
      const GraphStep& step = plan.steps[c];
      compute::FusedCall call{.spec = step.op.spec, .attrs = &step.attrs, .inputDescs = step.inputDescs};
      for (const GraphInput& in : step.inputs) {
        if (in.kind == GraphInput::Kind::kEarlier && in.index >= first) {
          call.inputs.push_back(-1 - int(in.index - first));
        } else {
          auto at = std::find_if(inputs.begin(), inputs.end(), [&](const GraphInput& x) { return sameInput(x, in); });
          call.inputs.push_back(int(at - inputs.begin()));
        }
      }
      calls.push_back(std::move(call));
    }
    std::vector<size_t> written = escaping(first, end);
    if (written.empty()) written.push_back(end - 1);  // nothing reads them; keep the kernel well-formed
    RunStep r{.inputs = inputs};
    std::vector<size_t> outputs;
    for (size_t c : written) {
      outputs.push_back(c - first);
      r.outputs.emplace_back(uint32_t(c), 0);
    }
    std::vector<compute::TensorDesc> inputDescs;
    for (const GraphInput& in : inputs) {
      switch (in.kind) {
        case GraphInput::Kind::kParam: inputDescs.push_back(plan.params[in.index]); break;
        case GraphInput::Kind::kConstant: inputDescs.push_back(plan.constants[in.index].entry->desc); break;
        case GraphInput::Kind::kEarlier: inputDescs.push_back(plan.steps[in.index].outputs[in.output]); break;
      }
    }
    r.fused = compute::fuseElementwise(std::move(calls), std::move(inputDescs), std::move(outputs),
                                       plan.steps[first].outputs[0].shape);
    r.spec = r.fused.get();
    plan.run.push_back(std::move(r));
  };

  size_t first = 0;                   // the open run of fusable calls is [first, i)
  std::vector<GraphInput> inputs;     // its tensors from outside it
  for (size_t i = 0; i <= n; ++i) {
    const GraphStep* step = i < n ? &plan.steps[i] : nullptr;
    bool can = step && compute::fusable(*step->op.spec, step->inputDescs, step->attrs);
    if (can && i > first && step->outputs[0].shape == plan.steps[first].outputs[0].shape) {
      std::vector<GraphInput> grown = inputs;
      for (const GraphInput& in : step->inputs) {
        if (in.kind == GraphInput::Kind::kEarlier && in.index >= first) continue;
        if (std::none_of(grown.begin(), grown.end(), [&](const GraphInput& x) { return sameInput(x, in); })) {
          grown.push_back(in);
        }
      }
      if (grown.size() <= compute::kMaxFusedInputs && escaping(first, i + 1).size() <= compute::kMaxFusedOutputs) {
        inputs = std::move(grown);
        continue;
      }
    }
    if (i > first) fuse(first, i, inputs);
    first = i;
    inputs.clear();
    if (!step) break;
    if (!can) {
      asCaptured(i);
      first = i + 1;
      continue;
    }
    for (const GraphInput& in : step->inputs) {
      if (std::none_of(inputs.begin(), inputs.end(), [&](const GraphInput& x) { return sameInput(x, in); })) {
        inputs.push_back(in);
      }
    }
  }
}

// Authorizes what a run needs beyond its inputs: each op, and the
// constants (read, and write where a step writes one in place).
void authorizePlan(SessionState& session, GraphPlan& plan, const std::string& request) {
  for (size_t i = 0; i < plan.steps.size(); ++i) {
    const GraphStep& step = plan.steps[i];
    KJ_IF_MAYBE (e, kj::runCatchingExceptions([&] {
      session.authorize(acl::Action::kCallOp, step.op.spec->name, step.op.spec->category);
      for (size_t j = 0; j < step.inputs.size(); ++j) {
        if (step.inputs[j].kind != GraphInput::Kind::kConstant) continue;
        const Constant& c = plan.constants[step.inputs[j].index];
        session.authorize(acl::Action::kReadTensor, c.resource);
        if (step.mutatesInput(j)) session.authorize(acl::Action::kWriteTensor, c.resource);
      }
    })) {
      kj::throwFatalException(locate(kj::mv(*e), request + ": call " + std::to_string(i) + " (" + step.op.spec->name + "): "));
    }
  }
  plan.authorizedUnder = session.server().authorizer.current();
}

// The op metrics of a run's calls: they arrive with the run and complete
// with its device work; until succeed(), they count as failed (as OpMeter).
class RunMeter {
 public:
  explicit RunMeter(std::shared_ptr<const GraphPlan> plan)
      : plan_(std::move(plan)), start_(std::chrono::steady_clock::now()) {}
  RunMeter(RunMeter&&) noexcept = default;
  RunMeter& operator=(RunMeter&&) = delete;
  ~RunMeter() {
    if (!plan_) return;
    for (const auto& [op, calls] : plan_->ops) op->failed += calls;
  }
  void succeed() {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    for (const auto& [op, calls] : plan_->ops) {
      op->completed += calls;
      op->latency.observe(seconds, calls);
    }
    plan_.reset();
  }

 private:
  std::shared_ptr<const GraphPlan> plan_;
  std::chrono::steady_clock::time_point start_;
};

class GraphImpl final : public proto::Graph::Server {
 public:
  GraphImpl(std::shared_ptr<SessionState> session, std::shared_ptr<GraphPlan> plan)
      : session_(std::move(session)), plan_(std::move(plan)) {}

 protected:
  kj::Promise<void> run(RunContext context) override;
  kj::Promise<void> info(InfoContext context) override;

 private:
  void runResolved(RunContext& context, kj::ArrayPtr<TensorImpl*> inputs);

  std::shared_ptr<SessionState> session_;
  std::shared_ptr<GraphPlan> plan_;
};

kj::Promise<void> GraphImpl::info(InfoContext context) {
  auto guard = session_->enterCall("graph.info");
  auto results = context.getResults();
  results.setCalls(uint32_t(plan_->steps.size()));
  results.setKernels(uint32_t(std::count_if(plan_->run.begin(), plan_->run.end(),
                                            [](const RunStep& s) { return !s.spec->view; })));
  auto params = results.initParams(uint32_t(plan_->params.size()));
  for (size_t i = 0; i < plan_->params.size(); ++i) fillDesc(params[uint32_t(i)], plan_->params[i]);
  auto outputs = results.initOutputs(uint32_t(plan_->outputs.size()));
  for (size_t k = 0; k < plan_->outputs.size(); ++k) {
    const auto [call, output] = plan_->outputs[k];
    fillDesc(outputs[uint32_t(k)], plan_->steps[call].outputs[output]);
  }
  return kj::READY_NOW;
}

kj::Promise<void> GraphImpl::run(RunContext context) {
  auto guard = session_->enterCall("graph.run");
  ServerState& server = session_->server();
  GraphPlan& plan = *plan_;
  // Each captured call counts as a call for the rate quota and the usage.
  server.quotas.chargeCalls(session_->principal.name, "call", plan.steps.size());
  session_->usage.ops += plan.steps.size();
  if (server.authorizer.current() != plan.authorizedUnder) authorizePlan(*session_, plan, "graph");

  auto inputs = context.getParams().getInputs();
  if (inputs.size() != plan.params.size()) {
    kj::throwFatalException(failed("graph.run: " + std::to_string(inputs.size()) + " input(s); the graph takes " +
                                   std::to_string(plan.params.size())));
  }
  auto capsBuilder = kj::heapArrayBuilder<proto::Tensor::Client>(inputs.size());
  for (auto cap : inputs) capsBuilder.add(cap);
  auto caps = capsBuilder.finish();
  auto resolving = kj::heapArrayBuilder<kj::Promise<TensorImpl*>>(caps.size());
  for (size_t i = 0; i < caps.size(); ++i) {
    resolving.add(resolveInput(server, "graph.run: input " + std::to_string(i), caps[i]));
  }
  auto enqueued = session_->afterInPlaceCalls()
                      .then([resolving = resolving.finish()]() mutable { return kj::joinPromises(kj::mv(resolving)); })
                      .then([this, self = thisCap(), context](kj::Array<TensorImpl*> impls) mutable {
                        runResolved(context, impls);  // `self` keeps this graph while a run waits
                      })
                      .attach(kj::mv(caps), kj::mv(guard));
  // A run that writes its inputs or held tensors in place orders the
  // session's later requests after it, as an in-place call does.
  if (!plan.writesInPlace) return enqueued;
  return session_->inPlace(kj::mv(enqueued));
}

void GraphImpl::runResolved(RunContext& context, kj::ArrayPtr<TensorImpl*> impls) {
  ServerState& server = session_->server();
  const GraphPlan& plan = *plan_;
  const std::string& principal = session_->principal.name;
  std::vector<compute::TensorView> params;
  for (size_t i = 0; i < impls.size(); ++i) {
    const TensorEntry& entry = *impls[i]->entry();
    if (entry.desc != plan.params[i]) {
      kj::throwFatalException(failed("graph.run: input " + std::to_string(i) + " is " + entry.desc.str() +
                                     "; the graph was captured for " + plan.params[i].str()));
    }
    session_->authorize(acl::Action::kReadTensor, impls[i]->resource());
    if (plan.paramsWritten[i]) session_->authorize(acl::Action::kWriteTensor, impls[i]->resource());
    checkNotFailed(entry);
    params.push_back({entry.desc, entry.buffer});
  }
  for (const Constant& c : plan.constants) checkNotFailed(*c.entry);

  std::vector<uint64_t> outBytes;
  for (const RunStep& step : plan.run) {
    if (step.spec->view) continue;
    for (const auto& [call, output] : step.outputs) outBytes.push_back(plan.steps[call].outputs[output].bytes());
  }
  server.quotas.checkAllocation(principal, "graph", outBytes);
  server.quotas.checkInflightOp(principal, "graph");

  // The results the run writes, allocated now (views share their input's
  // memory); results a fused kernel keeps in registers have none.
  std::vector<compute::TensorView> values(plan.values);
  std::vector<compute::Engine::OpStep> steps;
  steps.reserve(plan.run.size());
  for (const RunStep& step : plan.run) {
    compute::Engine::OpStep out;
    out.spec = step.spec;
    out.attrs = step.fused ? &step.noAttrs : step.attrs;
    out.inputs.reserve(step.inputs.size());
    out.outputs.reserve(step.outputs.size());
    for (const GraphInput& in : step.inputs) {
      switch (in.kind) {
        case GraphInput::Kind::kParam:
          out.inputs.push_back(params[in.index]);
          break;
        case GraphInput::Kind::kConstant: {
          const TensorEntry& entry = *plan.constants[in.index].entry;
          out.inputs.push_back({entry.desc, entry.buffer});
          break;
        }
        case GraphInput::Kind::kEarlier:
          out.inputs.push_back(values[plan.firstValue[in.index] + in.output]);
          break;
      }
    }
    for (const auto& [call, o] : step.outputs) {
      const compute::TensorDesc& desc = plan.steps[call].outputs[o];
      compute::TensorView& value = values[plan.firstValue[call] + o];
      if (step.spec->view) {
        value = {desc, out.inputs[0].buffer};
        continue;
      }
      try {
        value = {desc, server.engine.allocate(desc.bytes(), principal)};
      } catch (const compute::ComputeError&) {
        // The message is built only when it is needed.
        const std::string what = "graph: call " + std::to_string(call) + " (" + plan.steps[call].op.spec->name +
                                 "): output '" + outputName(*plan.steps[call].op.spec, o) + "' (" + desc.str() + ")";
        mapComputeErrors(what, [] { throw; });
      }
      out.outputs.push_back(value);
    }
    // A view enqueues nothing of its own.
    if (!step.spec->view) steps.push_back(std::move(out));
  }

  // The graph's outputs become tensors; the other results live only as long
  // as the device work that uses them.
  std::vector<std::shared_ptr<TensorEntry>> entries;
  std::vector<std::weak_ptr<TensorEntry>> produced;
  for (const auto& [call, output] : plan.outputs) {
    const compute::TensorView& view = values[plan.firstValue[call] + output];
    entries.push_back(server.registry.add(principal, session_->id, view.desc, view.buffer));
    produced.push_back(entries.back());
  }

  auto meter = kj::heap<RunMeter>(plan_);
  auto done = makeLoopCompletion();
  holdSubmitsForThisPass(server);
  mapComputeErrors("graph", [&] {
    server.engine.enqueueOps(principal, "graph", std::move(steps), plan_, std::move(done.completion));
  });
  server.opsExecuted += plan.steps.size();
  QuotaSlot inflight = server.quotas.enterOp(principal);
  RunMeter& completing = *meter;
  server.addTask(done.promise
                     .then(
                         [&completing]() {
                           completing.succeed();
                         },
                         [produced = std::move(produced), &server](kj::Exception&& e) {
                           failedOnDevice(server, "graph", produced, e);
                         })
                     .attach(kj::mv(inflight), kj::mv(meter)));

  auto outputs = kj::heapArrayBuilder<proto::Tensor::Client>(entries.size());
  for (auto& entry : entries) outputs.add(TensorImpl::makeCap(session_, std::move(entry)));
  auto results = context.getResults(capnp::MessageSize{16, 2});
  if (outputs.size() > 0) results.setOutput(outputs[0]);
  results.setResults(kj::heap<OpResultsImpl>("graph.run", outputs.finish()));
}

}  // namespace

kj::Promise<void> SessionImpl::graphCreate(GraphCreateContext context) {
  auto guard = session_->enterCall("graphCreate");
  ServerState& server = session_->server();
  auto params = context.getParams();
  auto calls = params.getCalls();
  if (calls.size() > kMaxGraphCalls) {
    kj::throwFatalException(failed("graphCreate: " + std::to_string(calls.size()) + " calls; expected at most " +
                                   std::to_string(kMaxGraphCalls)));
  }
  if (calls.size() == 0) kj::throwFatalException(failed("graphCreate: no calls to capture"));
  auto plan = std::make_shared<GraphPlan>();
  for (auto desc : params.getParams()) {
    plan->params.push_back(descFromWire(desc, "graphCreate: param " + std::to_string(plan->params.size())));
  }
  plan->paramsWritten.assign(plan->params.size(), false);

  // The tensors the calls read, resolved first (see callBatch).
  size_t constantCount = 0;
  for (auto call : calls) {
    for (auto input : call.getInputs()) constantCount += input.isTensor() ? 1 : 0;
  }
  auto capsBuilder = kj::heapArrayBuilder<proto::Tensor::Client>(constantCount);
  for (auto call : calls) {
    for (auto input : call.getInputs()) {
      if (input.isTensor()) capsBuilder.add(input.getTensor());
    }
  }
  auto caps = capsBuilder.finish();
  auto resolving = kj::heapArrayBuilder<kj::Promise<TensorImpl*>>(constantCount);
  for (size_t c = 0; c < caps.size(); ++c) {
    resolving.add(resolveInput(server, "graphCreate: tensor input " + std::to_string(c), caps[c]));
  }

  return kj::joinPromises(resolving.finish())
      .then([session = session_, plan, context](kj::Array<TensorImpl*> constants) mutable {
        for (TensorImpl* impl : constants) plan->constants.push_back({impl->entry(), impl->resource()});
        auto calls = context.getParams().getCalls();
        size_t nextConstant = 0;
        for (size_t i = 0; i < calls.size(); ++i) {
          const std::string op = calls[i].getOp();
          std::string where = "graphCreate: call " + std::to_string(i) + " (" + op + "): ";
          KJ_IF_MAYBE (e, kj::runCatchingExceptions([&] {
            GraphStep step;
            step.op = findOp(session->server(), op);
            const compute::OpSpec& spec = *step.op.spec;
            if (spec.shapeFromDevice()) {
              kj::throwFatalException(failed("its output shapes depend on the input values, so it cannot be "
                                             "captured; call it on its own"));
            }
            step.attrs = mapComputeErrors(
                [&] { return compute::validateAttrs(spec, attrsFromWire(calls[i].getAttrs(), op)); });
            std::vector<compute::TensorDesc> descs;
            auto inputs = calls[i].getInputs();
            for (size_t j = 0; j < inputs.size(); ++j) {
              const std::string what = spec.name + ": input " + inputName(spec, j);
              GraphInput in;
              switch (inputs[j].which()) {
                case proto::BatchInput::TENSOR: {
                  in.kind = GraphInput::Kind::kConstant;
                  in.index = uint32_t(nextConstant++);
                  if (step.mutatesInput(j)) plan->writesInPlace = true;
                  const TensorEntry& entry = *plan->constants[in.index].entry;
                  checkNotFailed(entry);
                  descs.push_back(entry.desc);
                  break;
                }
                case proto::BatchInput::PARAM: {
                  in.kind = GraphInput::Kind::kParam;
                  in.index = inputs[j].getParam();
                  if (in.index >= plan->params.size()) {
                    kj::throwFatalException(failed(what + " names param " + std::to_string(in.index) +
                                                   "; the graph has " + std::to_string(plan->params.size())));
                  }
                  if (step.mutatesInput(j)) plan->paramsWritten[in.index] = plan->writesInPlace = true;
                  descs.push_back(plan->params[in.index]);
                  break;
                }
                case proto::BatchInput::EARLIER: {
                  in.kind = GraphInput::Kind::kEarlier;
                  in.index = inputs[j].getEarlier().getCall();
                  in.output = inputs[j].getEarlier().getOutput();
                  if (in.index >= i) {
                    kj::throwFatalException(failed(what + " names call " + std::to_string(in.index) +
                                                   "; expected an earlier call (below " + std::to_string(i) + ")"));
                  }
                  const auto& produced = plan->steps[in.index].outputs;
                  if (in.output >= produced.size()) {
                    kj::throwFatalException(failed(what + " names output " + std::to_string(in.output) + " of call " +
                                                   std::to_string(in.index) + ", which has " +
                                                   std::to_string(produced.size()) + " output(s)"));
                  }
                  if (step.mutatesInput(j)) {
                    kj::throwFatalException(failed(what + " is written in place, but it is the result of call " +
                                                   std::to_string(in.index) + "; only inputs and tensors may be"));
                  }
                  descs.push_back(produced[in.output]);
                  break;
                }
              }
              step.inputs.push_back(in);
            }
            step.outputs = mapComputeErrors([&] { return compute::inferOutputs(spec, descs, step.attrs); });
            step.inputDescs = std::move(descs);
            const uint64_t limit = session->server().config.limits.maxTensorBytes;
            for (size_t o = 0; o < step.outputs.size(); ++o) {
              if (step.outputs[o].bytes() > limit) {
                kj::throwFatalException(failed(spec.name + ": output '" + outputName(spec, o) + "' would be " +
                                               step.outputs[o].str() + "; expected at most " +
                                               std::to_string(limit) + " bytes (limits.max_tensor_bytes)"));
              }
            }
            plan->steps.push_back(std::move(step));
          })) {
            kj::throwFatalException(locate(kj::mv(*e), where));
          }
        }
        auto outputs = context.getParams().getOutputs();
        for (size_t k = 0; k < outputs.size(); ++k) {
          const uint32_t call = outputs[k].getCall(), output = outputs[k].getOutput();
          if (call >= plan->steps.size() || output >= plan->steps[call].outputs.size()) {
            kj::throwFatalException(failed("graphCreate: outputs[" + std::to_string(k) + "] names output " +
                                           std::to_string(output) + " of call " + std::to_string(call) +
                                           ", which the graph does not have"));
          }
          plan->outputs.emplace_back(call, output);
        }
        planRun(*plan, session->server().metrics);
        authorizePlan(*session, *plan, "graphCreate");
        auto results = context.getResults(capnp::MessageSize{8, 1});
        results.setGraph(kj::heap<GraphImpl>(session, plan));
        results.setRunReturnsOutput(true);
      })
      .attach(kj::mv(caps), kj::mv(guard));
}

}  // namespace tensord::server
