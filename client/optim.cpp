// Optimizers: bookkeeping on the client, arithmetic on the daemon.

#include "tensord/optim.h"

#include <map>

#include "client/connection.h"

namespace tensord::optim {

Optimizer::Optimizer(std::vector<Tensor> params)
    : params_(std::move(params)), states_(params_.size()), steps_(params_.size(), 0) {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!params_[i]) throw Error(Error::Kind::kFailed, "optimizer: parameter " + std::to_string(i) + " is a null Tensor");
  }
}

void Optimizer::zeroGrad() {
  for (auto& p : params_) p.setGrad({});
}

void Optimizer::stepAll(const char* op, size_t stateCount, Attrs attrs) {
  NoGrad noGrad;
  std::map<int64_t, std::vector<Tensor>> groups;  // by the step each parameter is about to take
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor g = params_[i].grad();
    if (!g) continue;
    Client& client = params_[i].client();
    while (states_[i].size() < stateCount) states_[i].push_back(client.call1("zeros_like", {params_[i]}));
    auto& group = groups[++steps_[i]];
    group.push_back(params_[i]);
    group.push_back(g);
    group.insert(group.end(), states_[i].begin(), states_[i].end());
  }
  for (auto& [step, tensors] : groups) {
    Attrs a = attrs;
    a.emplace_back("step", step);
    tensors.front().client().call(op, tensors, a);
  }
}

SGD::SGD(std::vector<Tensor> params, SGDOptions options) : Optimizer(std::move(params)), o_(options) {}

void SGD::step() {
  stepAll("sgd_multi", o_.momentum != 0 ? 1 : 0,
          {{"lr", o_.lr},
           {"momentum", o_.momentum},
           {"dampening", o_.dampening},
           {"weight_decay", o_.weightDecay},
           {"nesterov", o_.nesterov},
           {"maximize", o_.maximize}});
}

Adam::Adam(std::vector<Tensor> params, AdamOptions options) : Adam(std::move(params), options, "adam_multi") {}

Adam::Adam(std::vector<Tensor> params, AdamOptions options, const char* op)
    : Optimizer(std::move(params)), o_(options), op_(op) {}

void Adam::step() {
  stepAll(op_, o_.amsgrad ? 3 : 2,
          {{"lr", o_.lr},
           {"beta1", o_.beta1},
           {"beta2", o_.beta2},
           {"eps", o_.eps},
           {"weight_decay", o_.weightDecay},
           {"amsgrad", o_.amsgrad},
           {"maximize", o_.maximize}});
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions o)
    : Adam(std::move(params),
           {.lr = o.lr, .beta1 = o.beta1, .beta2 = o.beta2, .eps = o.eps, .weightDecay = o.weightDecay,
            .amsgrad = o.amsgrad, .maximize = o.maximize},
           "adamw_multi") {}

Tensor clipGradNorm(const std::vector<Tensor>& params, double maxNorm, double normType) {
  NoGrad noGrad;
  std::vector<Tensor> grads;
  for (const auto& p : params) {
    if (Tensor g = p.grad()) grads.push_back(g);
  }
  if (grads.empty()) throw Error(Error::Kind::kFailed, "clipGradNorm: no parameter has a gradient");
  return grads.front().client().call1("clip_grad_norm_", grads, {{"max_norm", maxNorm}, {"norm_type", normType}});
}

}  // namespace tensord::optim
