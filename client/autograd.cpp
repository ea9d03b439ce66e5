// Autograd: calls on tensors that need a gradient are recorded as nodes of
// a graph hanging off their outputs (as PyTorch's grad_fn); backward() walks
// it in reverse call order and issues each op's backward op, by the naming
// convention the daemon's op table follows:
//   backward inputs   "grad" = the gradient of output 0 (variadic: of every
//                     output), "grad_<output>" = of that output, a forward
//                     input's name = that input, a forward output's name =
//                     that output;
//   backward attrs    the forward call's, as given;
//   backward outputs  "grad_<input>", one per such forward input the call
//                     was given, in order.
// Every call is pipelined: a whole training step is issued without waiting.

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "client/connection.h"

namespace tensord {
namespace detail {

struct GradNode {
  uint64_t seq = 0;  // call order: later calls are differentiated first
  std::string op;
  Attrs attrs;
  std::vector<Tensor> inputs;   // as given to the call
  std::vector<Tensor> outputs;  // the call's outputs, without history (no cycle)
  bool released = false;        // a backward() went through it and freed it
};

namespace {

thread_local bool gGradEnabled = true;
uint64_t gNextSeq = 0;  // ordering only; nodes of different threads never meet

bool needsGrad(const Tensor& t) {
  const auto& impl = Client::Impl::unwrap(t);
  return impl && (impl->requiresGrad || impl->gradFn);
}

Tensor detached(Tensor::Impl& impl) { return Client::Impl::wrap(shareHandle(impl)); }

// The name of the forward call's i-th input (a variadic input repeats).
std::string inputName(const OpInfo& op, size_t i) {
  if (!op.inputSpecs.empty()) {
    const InputInfo& spec = op.inputSpecs[std::min(i, op.inputSpecs.size() - 1)];
    if (i < op.inputSpecs.size() || spec.variadic) return spec.name;
    return "";
  }
  return i < op.inputs.size() ? op.inputs[i] : "";
}

Tensor call1(const std::shared_ptr<Connection>& conn, std::string_view op, std::vector<Tensor> inputs,
             const Attrs& attrs = {}) {
  return callOp(conn, op, inputs, attrs, 1).front();
}

void accumulate(const std::shared_ptr<Connection>& conn, Tensor& slot, const Tensor& g) {
  slot = slot ? call1(conn, "add", {slot, g}) : g;
}

}  // namespace

void recordCall(const std::shared_ptr<Connection>& conn, std::string_view op, const std::vector<Tensor>& inputs,
                const Attrs& attrs, const std::vector<Tensor>& outputs) {
  if (!gGradEnabled || outputs.empty() || std::none_of(inputs.begin(), inputs.end(), needsGrad)) return;
  const OpInfo* info = conn->opInfo(op);
  if (info == nullptr || !info->differentiable) return;  // its outputs need no gradient
  auto node = std::make_shared<GradNode>();
  node->seq = ++gNextSeq;
  node->op = std::string(op);
  node->attrs = attrs;
  node->inputs = inputs;
  for (size_t k = 0; k < outputs.size(); ++k) {
    auto& impl = *Client::Impl::unwrap(outputs[k]);
    node->outputs.push_back(detached(impl));
    impl.gradFn = node;
    impl.outputIndex = k;
  }
}

}  // namespace detail

NoGrad::NoGrad() : previous_(detail::gGradEnabled) { detail::gGradEnabled = false; }
NoGrad::~NoGrad() { detail::gGradEnabled = previous_; }
bool gradEnabled() { return detail::gGradEnabled; }

Tensor& Tensor::setRequiresGrad(bool on) {
  auto& impl = detail::implOf(*this, "Tensor::setRequiresGrad");
  if (impl.gradFn) {
    throw Error(Error::Kind::kFailed, "setRequiresGrad: the tensor is the result of a recorded '" + impl.gradFn->op +
                                          "' call, not a leaf (use detach() for a leaf on the same data)");
  }
  impl.requiresGrad = on;
  return *this;
}

bool Tensor::requiresGrad() const {
  const auto& impl = Client::Impl::unwrap(*this);
  return impl && (impl->requiresGrad || impl->gradFn);
}

Tensor Tensor::grad() const { return detail::implOf(*this, "Tensor::grad").grad; }

void Tensor::setGrad(Tensor grad) { detail::implOf(*this, "Tensor::setGrad").grad = std::move(grad); }

Tensor Tensor::detach() const { return detail::detached(detail::implOf(*this, "Tensor::detach")); }

void Tensor::setGradReadyHook(std::function<void(Tensor& leaf)> hook) {
  auto& impl = detail::implOf(*this, "Tensor::setGradReadyHook");
  if (hook && !impl.requiresGrad) {
    throw Error(Error::Kind::kFailed, "setGradReadyHook: the tensor is not a leaf marked setRequiresGrad()");
  }
  impl.gradReady = std::move(hook);
}

namespace detail {
namespace {

// Calls a leaf's gradient-ready hook (on a copy: the hook may replace itself).
void fireGradReady(const std::shared_ptr<Tensor::Impl>& impl) {
  std::function<void(Tensor&)> hook = impl->gradReady;
  Tensor leaf = Client::Impl::wrap(impl);
  if (hook) hook(leaf);
}

}  // namespace
}  // namespace detail

void Tensor::backward(const Tensor& gradient) const {
  using detail::GradNode;
  auto& root = detail::implOf(*this, "backward");
  const auto& conn = root.conn;
  if (!root.requiresGrad && !root.gradFn) {
    throw Error(Error::Kind::kFailed,
                "backward: the tensor does not require grad (no input of the calls that made it was marked "
                "setRequiresGrad(), or they ran under NoGrad)");
  }
  NoGrad noGrad;  // the backward calls themselves are not recorded
  // They travel together (as in a Batch): one message, not one per call.
  detail::HeldCalls held(conn);
  Tensor seed = gradient ? gradient : detail::call1(conn, "ones_like", {*this});
  if (!root.gradFn) {
    detail::accumulate(conn, root.grad, seed);
    if (root.gradReady) detail::fireGradReady(Client::Impl::unwrap(*this));
    return;
  }

  // The nodes behind this tensor, latest call first.
  std::vector<GradNode*> order;
  std::unordered_set<GradNode*> seen;
  std::vector<GradNode*> stack = {root.gradFn.get()};
  while (!stack.empty()) {
    GradNode* node = stack.back();
    stack.pop_back();
    if (!seen.insert(node).second) continue;
    if (node->released) {
      throw Error(Error::Kind::kFailed, "backward: the graph through '" + node->op +
                                            "' was freed by an earlier backward(); record the calls again");
    }
    order.push_back(node);
    for (const Tensor& in : node->inputs) {
      if (const auto& impl = Client::Impl::unwrap(in); impl && impl->gradFn) stack.push_back(impl->gradFn.get());
    }
  }
  std::sort(order.begin(), order.end(), [](const GradNode* a, const GradNode* b) { return a->seq > b->seq; });

  std::unordered_map<GradNode*, std::vector<Tensor>> pending;  // gradients of each node's outputs
  auto slots = [&](GradNode* node) -> std::vector<Tensor>& {
    auto& v = pending[node];
    v.resize(node->outputs.size());
    return v;
  };
  slots(root.gradFn.get())[root.outputIndex] = seed;

  // Leaves with a gradient-ready hook, under the last node (in backward
  // order) that feeds them: once that node is done, their gradient is.
  std::unordered_map<GradNode*, std::vector<std::shared_ptr<Tensor::Impl>>> readyAfter;
  {
    std::unordered_map<Tensor::Impl*, GradNode*> last;
    std::vector<std::shared_ptr<Tensor::Impl>> hooked;  // first-seen order
    for (GradNode* node : order) {
      for (const Tensor& in : node->inputs) {
        const auto& impl = Client::Impl::unwrap(in);
        if (!impl || impl->gradFn || !impl->requiresGrad || !impl->gradReady) continue;
        if (last.emplace(impl.get(), node).second) hooked.push_back(impl);
        last[impl.get()] = node;
      }
    }
    for (const auto& impl : hooked) readyAfter[last[impl.get()]].push_back(impl);
  }
  auto gradsReady = [&](GradNode* node) {
    if (auto it = readyAfter.find(node); it != readyAfter.end()) {
      for (const auto& impl : it->second) detail::fireGradReady(impl);
    }
  };

  for (GradNode* node : order) {
    std::vector<Tensor>& grads = slots(node);
    if (std::none_of(grads.begin(), grads.end(), [](const Tensor& t) { return bool(t); })) {
      gradsReady(node);
      continue;
    }
    const OpInfo* fwd = conn->opInfo(node->op);
    const OpInfo* bwd = fwd && !fwd->backward.empty() ? conn->opInfo(fwd->backward) : nullptr;
    if (bwd == nullptr) {
      throw Error(Error::Kind::kUnimplemented, "backward: op '" + node->op + "' has no backward op on this daemon");
    }
    // An output nothing depended on gets a zero gradient, where the backward op asks for it.
    auto gradOf = [&](size_t k) {
      if (!grads[k]) grads[k] = detail::call1(conn, "zeros_like", {node->outputs[k]});
      return grads[k];
    };
    std::vector<Tensor> args;
    for (const InputInfo& spec : bwd->inputSpecs) {
      std::vector<Tensor> got;
      if (spec.name == "grad") {
        for (size_t k = 0; k < (spec.variadic ? grads.size() : 1); ++k) got.push_back(gradOf(k));
      } else if (spec.name.starts_with("grad_")) {
        for (size_t k = 0; k < fwd->outputs.size() && k < grads.size(); ++k) {
          if (fwd->outputs[k] == spec.name.substr(5)) got.push_back(gradOf(k));
        }
      } else {
        for (size_t i = 0; i < node->inputs.size(); ++i) {
          if (detail::inputName(*fwd, i) == spec.name) got.push_back(node->inputs[i]);
        }
        for (size_t k = 0; k < fwd->outputs.size() && k < node->outputs.size(); ++k) {
          if (fwd->outputs[k] == spec.name) got.push_back(node->outputs[k]);
        }
      }
      if (got.empty()) break;  // an optional input the forward call left off: so are the rest
      args.insert(args.end(), got.begin(), got.end());
    }
    std::vector<size_t> target;  // forward input of each backward output
    for (const std::string& out : bwd->outputs) {
      for (size_t i = 0; i < node->inputs.size(); ++i) {
        if ("grad_" + detail::inputName(*fwd, i) == out) target.push_back(i);
      }
    }
    std::vector<Tensor> inputGrads = detail::callOp(conn, bwd->name, args, node->attrs, target.size());
    for (size_t j = 0; j < target.size(); ++j) {
      const auto& impl = Client::Impl::unwrap(node->inputs[target[j]]);
      if (!impl) continue;
      if (impl->gradFn) {
        detail::accumulate(conn, slots(impl->gradFn.get())[impl->outputIndex], inputGrads[j]);
      } else if (impl->requiresGrad) {
        detail::accumulate(conn, impl->grad, inputGrads[j]);
      }
    }
    grads.clear();
    gradsReady(node);
  }
  // Free what the graph held on the daemon (saved inputs and outputs). Each
  // node stays alive until the loop is done: clearing one node's inputs may
  // drop the last reference to another.
  std::vector<std::shared_ptr<GradNode>> alive;
  for (GradNode* node : order) {
    for (const Tensor& in : node->inputs) {
      if (const auto& impl = Client::Impl::unwrap(in); impl && impl->gradFn) alive.push_back(impl->gradFn);
    }
  }
  for (GradNode* node : order) {
    node->inputs.clear();
    node->outputs.clear();
    node->released = true;
  }
}

}  // namespace tensord
