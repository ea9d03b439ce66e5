#pragma once
// Optimizers over parameters held by the daemon, as torch.optim's: each
// step() is one pipelined call (the daemon's fused multi-tensor op) that
// updates every parameter with a gradient, and the optimizer state, in
// place on the device. Nothing comes back to the client.
//
//   std::vector<tensord::Tensor> params = {w1, b1, w2, b2};  // setRequiresGrad() leaves
//   tensord::optim::AdamW opt(params, {.lr = 1e-3});
//   for (...) {
//     opt.zeroGrad();
//     loss(...).backward();
//     opt.step();
//   }

#include <cstdint>
#include <vector>

#include "tensord/client.h"

namespace tensord::optim {

// Shared by the optimizers: the parameters and the step count of each.
class Optimizer {
 public:
  explicit Optimizer(std::vector<Tensor> params);
  virtual ~Optimizer() = default;
  // Clears every parameter's gradient (PyTorch's zero_grad(set_to_none=True)):
  // the next backward() starts from none.
  void zeroGrad();
  // Updates the parameters that have a gradient, as one call.
  virtual void step() = 0;
  const std::vector<Tensor>& params() const { return params_; }

 protected:
  // Runs `op` (a *_multi op) over groups [param, grad, states...] of the
  // parameters with a gradient; `states(i)` names parameter i's state tensors,
  // created as zeros the first time it steps. One call per distinct step count.
  void stepAll(const char* op, size_t stateCount, Attrs attrs);
  std::vector<Tensor> params_;
  std::vector<std::vector<Tensor>> states_;  // per parameter
  std::vector<int64_t> steps_;               // per parameter: steps taken
};

struct SGDOptions {
  double lr = 1e-3, momentum = 0, dampening = 0, weightDecay = 0;
  bool nesterov = false, maximize = false;
};

class SGD final : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, SGDOptions options = {});
  void step() override;

 private:
  SGDOptions o_;
};

struct AdamOptions {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weightDecay = 0;
  bool amsgrad = false, maximize = false;
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, AdamOptions options = {});
  void step() override;

 protected:
  Adam(std::vector<Tensor> params, AdamOptions options, const char* op);
  AdamOptions o_;
  const char* op_;
};

// Adam with decoupled weight decay (torch.optim.AdamW; its default weight_decay 0.01).
struct AdamWOptions {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weightDecay = 1e-2;
  bool amsgrad = false, maximize = false;
};

class AdamW final : public Adam {
 public:
  AdamW(std::vector<Tensor> params, AdamWOptions options = {});
};

// torch.nn.utils.clip_grad_norm_: scales the gradients of `params` in place
// so their global norm is at most maxNorm; returns that norm before scaling
// (a 0-d f32 tensor, pipelined). Parameters without a gradient are skipped.
Tensor clipGradNorm(const std::vector<Tensor>& params, double maxNorm, double normType = 2.0);

}  // namespace tensord::optim
