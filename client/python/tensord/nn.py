"""tensord.nn: a minimal torch.nn over the daemon's ops.

Module (parameters(), named_parameters(), state_dict(), load_state_dict(),
train()/eval(), zero_grad()), Parameter, Linear, Conv2d, LayerNorm,
Embedding, Sequential, and utils.clip_grad_norm_. Parameters live on the
daemon; they are initialised as PyTorch's (uniform in +-1/sqrt(fan_in) for
Linear and Conv2d, N(0, 1) for Embedding, ones and zeros for LayerNorm) from
a NumPy generator that tensord.manual_seed() seeds. A module's parameters
are made on `client` (default: the thread's default client, the last
tensord.connect()).
"""

import collections
import math
import types

import numpy as np

from . import _core, _dtypes
from ._ops import default_client
from ._tensor import Tensor, _is_int

_rng = np.random.default_rng()


def _seed(seed):
    global _rng
    _rng = np.random.default_rng(seed)


class Parameter(Tensor):
    """A Tensor that is a module's parameter: a leaf that requires grad.
    Parameter(t) is the same daemon tensor as t."""

    __slots__ = ()

    def __init__(self, tensor, requires_grad=True):
        if not isinstance(tensor, Tensor):
            raise TypeError(f"Parameter(): expected a tensord.Tensor; got {type(tensor).__name__}")
        Tensor.__init__(self, tensor._h, tensor._client)
        self._meta = tensor._meta
        if requires_grad:
            self.requires_grad_(True)


def _parameter(client, values, dtype):
    client = client or default_client()
    return Parameter(client.tensor(np.asarray(values, dtype=np.float32), dtype=dtype or _dtypes.float32))


def _uniform(client, shape, bound, dtype):
    return _parameter(client, _rng.uniform(-bound, bound, size=shape), dtype)


class Module:
    """Base class of models, as torch.nn.Module: assign Parameters and
    submodules as attributes in __init__ (after super().__init__()) and
    define forward(); calling the module calls forward()."""

    def __init__(self):
        object.__setattr__(self, "_parameters", collections.OrderedDict())
        object.__setattr__(self, "_modules", collections.OrderedDict())
        object.__setattr__(self, "training", True)

    def __setattr__(self, name, value):
        parameters = self.__dict__.get("_parameters")
        if parameters is None:
            raise AttributeError(f"cannot assign {name!r} before Module.__init__() (call super().__init__() first)")
        parameters.pop(name, None)
        self._modules.pop(name, None)
        if isinstance(value, Parameter):
            parameters[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        object.__setattr__(self, name, value)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} defines no forward()")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    def named_children(self):
        return iter(self._modules.items())

    def children(self):
        return iter(self._modules.values())

    def named_modules(self, prefix=""):
        yield prefix, self
        for name, module in self._modules.items():
            yield from module.named_modules(f"{prefix}.{name}" if prefix else name)

    def modules(self):
        return (module for _, module in self.named_modules())

    def named_parameters(self, prefix=""):
        """(name, Parameter) of this module and its submodules, each once."""
        seen = set()
        for module_name, module in self.named_modules(prefix):
            for name, parameter in module._parameters.items():
                if id(parameter._h) in seen:
                    continue
                seen.add(id(parameter._h))
                yield (f"{module_name}.{name}" if module_name else name), parameter

    def parameters(self):
        return (parameter for _, parameter in self.named_parameters())

    def state_dict(self):
        """name -> Tensor (the parameters, detached: the same daemon tensors)."""
        return collections.OrderedDict((name, p.detach()) for name, p in self.named_parameters())

    def load_state_dict(self, state, strict=True):
        """Replaces the parameters by the values in `state` (name -> Tensor,
        NumPy array or nested lists), copied: Tensors are cloned, arrays
        uploaded. The parameters become new tensors, so make optimizers
        after loading. strict: every name must match both ways."""
        owners = {}
        for module_name, module in self.named_modules():
            for name in module._parameters:
                owners[f"{module_name}.{name}" if module_name else name] = (module, name)
        if strict:
            missing = sorted(set(owners) - set(state))
            unexpected = sorted(set(state) - set(owners))
            if missing or unexpected:
                raise KeyError(f"load_state_dict: missing {missing}, unexpected {unexpected}")
        for key, value in state.items():
            if key not in owners:
                continue
            module, name = owners[key]
            old = module._parameters[name]
            if isinstance(value, Tensor):
                new = value.detach().clone()  # detached: the copy is a leaf
            else:
                new = old.client.tensor(value, dtype=old.dtype)
            if tuple(new.shape) != tuple(old.shape):
                raise ValueError(f"load_state_dict: {key} has shape {list(new.shape)}; the parameter has "
                                 f"{list(old.shape)}")
            setattr(module, name, Parameter(new, requires_grad=old.requires_grad))

    def train(self, mode=True):
        for module in self.modules():
            object.__setattr__(module, "training", bool(mode))
        return self

    def eval(self):
        return self.train(False)

    def zero_grad(self):
        for parameter in self.parameters():
            parameter.grad = None

    def extra_repr(self):
        return ""

    def __repr__(self):
        lines = [f"{type(self).__name__}({self.extra_repr()}"]
        for name, module in self._modules.items():
            lines.append(f"  ({name}): " + repr(module).replace("\n", "\n  "))
        return lines[0] + ")" if len(lines) == 1 else "\n".join(lines) + "\n)"


def _pair(value, what):
    if _is_int(value):
        return [int(value), int(value)]
    values = [int(v) for v in value]
    if len(values) != 2:
        raise ValueError(f"{what}: expected an int or two ints; got {value!r}")
    return values


class Linear(Module):
    """y = x W^T + b; weight [out_features, in_features], bias [out_features]."""

    def __init__(self, in_features, out_features, bias=True, *, client=None, dtype=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        bound = 1 / math.sqrt(in_features)
        self.weight = _uniform(client, (out_features, in_features), bound, dtype)
        self.bias = _uniform(client, (out_features,), bound, dtype) if bias else None

    def forward(self, x):
        return x.linear(self.weight, self.bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Conv2d(Module):
    """2-D convolution of [N, C, H, W] inputs; weight [out, in/groups, kH, kW]."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, *, client=None, dtype=None):
        super().__init__()
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"Conv2d: in_channels ({in_channels}) and out_channels ({out_channels}) must be "
                             f"divisible by groups ({groups})")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = _pair(kernel_size, "kernel_size")
        self.stride, self.padding = _pair(stride, "stride"), _pair(padding, "padding")
        self.dilation = _pair(dilation, "dilation")
        fan_in = in_channels // groups * self.kernel_size[0] * self.kernel_size[1]
        bound = 1 / math.sqrt(fan_in)
        self.weight = _uniform(client, (out_channels, in_channels // groups, *self.kernel_size), bound, dtype)
        self.bias = _uniform(client, (out_channels,), bound, dtype) if bias else None

    def forward(self, x):
        return x.conv2d(self.weight, self.bias, stride=self.stride, padding=self.padding, dilation=self.dilation,
                        groups=self.groups)

    def extra_repr(self):
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}")


class LayerNorm(Module):
    """Normalises over the last dims (normalized_shape), then scales and shifts."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, *, client=None, dtype=None):
        super().__init__()
        self.normalized_shape = [int(normalized_shape)] if _is_int(normalized_shape) else \
            [int(d) for d in normalized_shape]
        self.eps = eps
        self.weight = self.bias = None
        if elementwise_affine:
            self.weight = _parameter(client, np.ones(self.normalized_shape), dtype)
            if bias:
                self.bias = _parameter(client, np.zeros(self.normalized_shape), dtype)

    def forward(self, x):
        return x.layer_norm(self.weight, self.bias, normalized_shape=self.normalized_shape, eps=self.eps)

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.weight is not None}"


class Embedding(Module):
    """A lookup table: row i of weight [num_embeddings, embedding_dim] for
    index i. padding_idx's row starts at zero and gets no gradient."""

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, *, client=None, dtype=None):
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise ValueError(f"Embedding: padding_idx {padding_idx} is out of range for {num_embeddings} "
                                 "embeddings")
            padding_idx %= num_embeddings
        self.padding_idx = padding_idx
        values = _rng.standard_normal((num_embeddings, embedding_dim))
        if padding_idx is not None:
            values[padding_idx] = 0
        self.weight = _parameter(client, values, dtype)

    def forward(self, indices):
        if not isinstance(indices, Tensor):
            indices = self.weight.client.tensor(np.asarray(indices, dtype=np.int64))
        return self.weight.embedding(indices, padding_idx=self.padding_idx)

    def extra_repr(self):
        return f"{self.num_embeddings}, {self.embedding_dim}"


class Sequential(Module):
    """Modules applied in order."""

    def __init__(self, *modules):
        super().__init__()
        for i, module in enumerate(modules):
            setattr(self, str(i), module)

    def forward(self, x):
        for module in self._modules.values():
            x = module(x)
        return x

    def __getitem__(self, i):
        return list(self._modules.values())[i]

    def __len__(self):
        return len(self._modules)


def clip_grad_norm_(parameters, max_norm, norm_type=2.0):
    """torch.nn.utils.clip_grad_norm_: scales the parameters' gradients in
    place so their total norm is at most max_norm; returns the norm before
    scaling (a 0-d f32 Tensor, pipelined). Parameters without a gradient are
    skipped."""
    parameters = [parameters] if isinstance(parameters, Tensor) else list(parameters)
    if not parameters:
        raise ValueError("clip_grad_norm_: got no parameters")
    for i, p in enumerate(parameters):
        if not isinstance(p, Tensor):
            raise TypeError(f"clip_grad_norm_: parameter {i} is {type(p).__name__}; expected a tensord.Tensor")
    return Tensor(_core.clip_grad_norm([p._h for p in parameters], float(max_norm), float(norm_type)),
                  parameters[0].client)


utils = types.SimpleNamespace(clip_grad_norm_=clip_grad_norm_)
