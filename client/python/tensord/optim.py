"""tensord.optim: SGD, Adam and AdamW, as torch.optim's.

These are the C++ client's optimizers: each step() is one pipelined call of
the daemon's fused multi-tensor op (sgd_multi, adam_multi, adamw_multi) that
updates every parameter with a gradient, and the optimizer state, in place on
the device. zero_grad() clears the gradients (set_to_none, PyTorch's
default). The optimizer belongs to its parameters' client's thread.
"""

from . import _core
from ._tensor import Tensor


def _handles(params, who):
    params = [params] if isinstance(params, Tensor) else list(params)
    if not params:
        raise ValueError(f"{who}: got an empty parameter list")
    for i, p in enumerate(params):
        if not isinstance(p, Tensor):
            raise TypeError(f"{who}: parameter {i} is {type(p).__name__}; expected a tensord.Tensor")
    return params, [p._h for p in params]


def _check(who, condition, message):
    if not condition:
        raise ValueError(f"{who}: {message}")


class Optimizer:
    """Shared by the optimizers: the parameters and the C++ optimizer."""

    def __init__(self, params, make, who):
        self.params, handles = _handles(params, who)
        self._core = make(handles)

    def step(self):
        """Updates every parameter that has a gradient (one call, pipelined)."""
        self._core.step()

    def zero_grad(self, set_to_none=True):
        """Clears every parameter's gradient; the next backward() starts from none."""
        if not set_to_none:
            raise ValueError("zero_grad(set_to_none=False) is not supported: gradients are cleared, not zeroed")
        self._core.zero_grad()


class SGD(Optimizer):
    """torch.optim.SGD: param -= lr * g, with momentum, dampening, Nesterov,
    weight decay (L2, added to the gradient) and maximize as PyTorch's."""

    def __init__(self, params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False, *,
                 maximize=False):
        _check("SGD", lr >= 0, f"lr must be >= 0; got {lr}")
        _check("SGD", momentum >= 0, f"momentum must be >= 0; got {momentum}")
        _check("SGD", weight_decay >= 0, f"weight_decay must be >= 0; got {weight_decay}")
        _check("SGD", not nesterov or (momentum > 0 and dampening == 0),
               "nesterov needs momentum > 0 and dampening 0")
        super().__init__(params, lambda h: _core.sgd(h, float(lr), float(momentum), float(dampening),
                                                     float(weight_decay), bool(nesterov), bool(maximize)), "SGD")


def _adam_checks(who, lr, betas, eps, weight_decay):
    _check(who, lr >= 0, f"lr must be >= 0; got {lr}")
    _check(who, eps >= 0, f"eps must be >= 0; got {eps}")
    _check(who, len(betas) == 2 and all(0 <= b < 1 for b in betas), f"betas must be two values in [0, 1); got {betas}")
    _check(who, weight_decay >= 0, f"weight_decay must be >= 0; got {weight_decay}")


class Adam(Optimizer):
    """torch.optim.Adam (weight decay as L2 added to the gradient; amsgrad,
    maximize)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False, *,
                 maximize=False):
        _adam_checks("Adam", lr, betas, eps, weight_decay)
        super().__init__(params, lambda h: _core.adam(h, float(lr), float(betas[0]), float(betas[1]), float(eps),
                                                      float(weight_decay), bool(amsgrad), bool(maximize)), "Adam")


class AdamW(Optimizer):
    """torch.optim.AdamW: Adam with decoupled weight decay (default 0.01)."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False, *,
                 maximize=False):
        _adam_checks("AdamW", lr, betas, eps, weight_decay)
        super().__init__(params, lambda h: _core.adamw(h, float(lr), float(betas[0]), float(betas[1]), float(eps),
                                                       float(weight_decay), bool(amsgrad), bool(maximize)), "AdamW")
