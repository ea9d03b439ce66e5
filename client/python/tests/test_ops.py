"""Every op of the daemon, reached through tensord.ops (made from the op
table at connect), on a small case against a NumPy reference; and every
differentiable op's backward op, through autograd, against central finite
differences of the reference in float64.

test_every_op_has_a_case fails for an op of the daemon's table that has no
case here, as tests/compute/coverage_test.cpp does for the conformance
suite: a backward op's case is its forward op's gradient check.
"""

import math
import statistics

import numpy as np
import pytest

import tensord

rng = np.random.default_rng(20240611)


# ---------------------------------------------------------------- inputs
def f32(values):
    return np.asarray(values, dtype=np.float32)


def u(*shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, shape).astype(np.float32)


def away(*shape, lo=0.2, hi=1.0):
    """|x| in [lo, hi], random sign: clear of kinks at 0."""
    return (rng.uniform(lo, hi, shape) * rng.choice([-1.0, 1.0], shape)).astype(np.float32)


def distinct(*shape, lo=-1.0, hi=1.0):
    """Evenly spaced values, shuffled: no ties (max, sort, pools)."""
    n = int(np.prod(shape))
    return rng.permutation(np.linspace(lo, hi, n)).reshape(shape).astype(np.float32)


def nonint(*shape):
    """k + [0.2, 0.8]: clear of the steps of floor, round and friends."""
    return (rng.integers(-3, 3, shape) + rng.uniform(0.2, 0.8, shape)).astype(np.float32)


def ints(*shape, lo=-5, hi=6, dtype=np.int32):
    return rng.integers(lo, hi, shape).astype(dtype)


def idx(hi, *shape):
    return rng.integers(0, hi, shape).astype(np.int64)


def mask(*shape):
    return rng.random(shape) < 0.5


# ---------------------------------------------------------------- math the references need
_erf = np.vectorize(math.erf, otypes=[float])
_normal = statistics.NormalDist()
_erfinv = np.vectorize(lambda v: _normal.inv_cdf((v + 1) / 2) / math.sqrt(2), otypes=[float])


def _axes(dim):
    if dim is None or (isinstance(dim, (list, tuple)) and not dim):
        return None
    return tuple(dim) if isinstance(dim, (list, tuple)) else dim


def softmax(x, dim=-1):
    e = np.exp(x - x.max(axis=dim, keepdims=True))
    return e / e.sum(axis=dim, keepdims=True)


def log_softmax(x, dim=-1):
    m = x.max(axis=dim, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=dim, keepdims=True))


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def reduce(values, reduction, weights=None):
    if reduction == "none":
        return values
    if reduction == "sum":
        return values.sum()
    return values.sum() / (weights.sum() if weights is not None else values.size)


def pool2d(x, kernel, stride, padding, kind, count_include_pad=True, divisor_override=None):
    kh, kw = kernel
    sh, sw = stride or kernel
    ph, pw = padding
    n, c, h, w = x.shape
    ho, wo = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    out = np.zeros((n, c, ho, wo), dtype=x.dtype)
    for i in range(ho):
        for j in range(wo):
            h0, w0 = i * sh - ph, j * sw - pw
            a, b = max(h0, 0), min(h0 + kh, h)
            cc, d = max(w0, 0), min(w0 + kw, w)
            window = x[:, :, a:b, cc:d]
            if kind == "max":
                out[:, :, i, j] = window.max(axis=(2, 3))
            else:
                divisor = divisor_override or (kh * kw if count_include_pad else (b - a) * (d - cc))
                out[:, :, i, j] = window.sum(axis=(2, 3)) / divisor
    return out


def pool1d(x, kernel, stride, padding, kind, **kw):
    return pool2d(x[:, :, None, :], (1, kernel[0]), (1, (stride or kernel)[0]), (0, padding[0]), kind, **kw)[:, :, 0]


def adaptive2d(x, size):
    n, c, h, w = x.shape
    oh, ow = size
    out = np.zeros((n, c, oh, ow), dtype=x.dtype)
    for i in range(oh):
        for j in range(ow):
            a, b = (i * h) // oh, -((-(i + 1) * h) // oh)
            cc, d = (j * w) // ow, -((-(j + 1) * w) // ow)
            out[:, :, i, j] = x[:, :, a:b, cc:d].mean(axis=(2, 3))
    return out


def conv2d(x, weight, bias=None, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
    n, c, h, w = x.shape
    o, cg, kh, kw = weight.shape
    sh, sw = stride
    ph, pw = padding
    dh, dw = dilation
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    ho = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    wo = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    og = o // groups
    out = np.zeros((n, o, ho, wo), dtype=np.result_type(x, weight))
    for g in range(groups):
        xs = xp[:, g * cg:(g + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i * dh:i * dh + sh * (ho - 1) + 1:sh, j * dw:j * dw + sw * (wo - 1) + 1:sw]
                out[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", patch, weight[g * og:(g + 1) * og, :, i, j])
    if bias is not None:
        out += bias[None, :, None, None]
    return out


def conv1d(x, weight, bias=None, stride=(1,), padding=(0,), dilation=(1,), groups=1):
    return conv2d(x[:, :, None], weight[:, :, None], bias, (1, stride[0]), (0, padding[0]), (1, dilation[0]),
                  groups)[:, :, 0]


def conv_transpose2d(x, weight, bias=None, stride=(1, 1), padding=(0, 0), output_padding=(0, 0), groups=1,
                     dilation=(1, 1)):
    n, c, h, w = x.shape
    _, og, kh, kw = weight.shape
    sh, sw = stride
    ph, pw = padding
    dh, dw = dilation
    ho = (h - 1) * sh - 2 * ph + dh * (kh - 1) + output_padding[0] + 1
    wo = (w - 1) * sw - 2 * pw + dw * (kw - 1) + output_padding[1] + 1
    full = np.zeros((n, og * groups, ho + 2 * ph, wo + 2 * pw), dtype=np.result_type(x, weight))
    cg = c // groups
    for g in range(groups):
        for i in range(kh):
            for j in range(kw):
                full[:, g * og:(g + 1) * og, i * dh:i * dh + sh * (h - 1) + 1:sh, j * dw:j * dw + sw * (w - 1) + 1:sw] += \
                    np.einsum("nchw,co->nohw", x[:, g * cg:(g + 1) * cg], weight[g * cg:(g + 1) * cg, :, i, j])
    out = full[:, :, ph:ph + ho, pw:pw + wo]
    if bias is not None:
        out = out + bias[None, :, None, None]
    return out


def conv_transpose1d(x, weight, bias=None, stride=(1,), padding=(0,), output_padding=(0,), groups=1, dilation=(1,)):
    return conv_transpose2d(x[:, :, None], weight[:, :, None], bias, (1, stride[0]), (0, padding[0]),
                            (0, output_padding[0]), groups, (1, dilation[0]))[:, :, 0]


def interpolate(x, size, mode):
    n, c, h, w = x.shape
    oh, ow = size
    if mode == "nearest":
        rows = np.minimum(np.floor(np.arange(oh) * (h / oh)).astype(int), h - 1)
        cols = np.minimum(np.floor(np.arange(ow) * (w / ow)).astype(int), w - 1)
        return x[:, :, rows][:, :, :, cols]

    def axis(out_size, in_size):  # bilinear, align_corners=False
        src = np.maximum((np.arange(out_size) + 0.5) * (in_size / out_size) - 0.5, 0)
        i0 = np.minimum(np.floor(src).astype(int), in_size - 1)
        i1 = np.minimum(i0 + 1, in_size - 1)
        return i0, i1, src - i0

    r0, r1, lr = axis(oh, h)
    c0, c1, lc = axis(ow, w)
    top = x[:, :, r0] * (1 - lr)[:, None] + x[:, :, r1] * lr[:, None]
    return top[:, :, :, c0] * (1 - lc) + top[:, :, :, c1] * lc


def sdpa(q, k, v, mask=None, is_causal=False, scale=None):
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ np.swapaxes(k, -1, -2) * scale
    if is_causal:
        s = np.where(np.tril(np.ones(s.shape[-2:], dtype=bool)), s, -np.inf)
    if mask is not None:
        s = np.where(mask, s, -np.inf) if mask.dtype == bool else s + mask
    return softmax(s, -1) @ v


def cross_entropy(x, t, weight=None, reduction="mean", ignore_index=-100, label_smoothing=0.0):
    logp = log_softmax(x, 1)
    return nll_loss(logp, t, weight, reduction, ignore_index, label_smoothing)


def nll_loss(logp, t, weight=None, reduction="mean", ignore_index=-100, label_smoothing=0.0):
    c = logp.shape[1]
    w = np.ones(c, dtype=logp.dtype) if weight is None else weight
    keep = t != ignore_index
    safe = np.where(keep, t, 0)
    picked = -np.take_along_axis(logp, safe[:, None], 1)[:, 0] * w[safe] * keep
    wt = w[safe] * keep
    if label_smoothing:
        smooth = -(logp * w[None]).sum(1) * keep
        loss = (1 - label_smoothing) * picked + label_smoothing / c * smooth
    else:
        loss = picked
    return reduce(loss, reduction, wt)


def bce_logits(x, t, weight=None, pos_weight=None, reduction="mean"):
    pw = 1 if pos_weight is None else pos_weight
    loss = -(pw * t * np.log(sigmoid(x)) + (1 - t) * np.log(1 - sigmoid(x)))
    if weight is not None:
        loss = loss * weight
    return reduce(loss, reduction)


def batch_norm(x, mean, var, weight, bias, training=False, momentum=0.1, eps=1e-5):
    axes = (0,) + tuple(range(2, x.ndim))
    shape = (1, -1) + (1,) * (x.ndim - 2)
    if training:
        mean, var = x.mean(axis=axes), x.var(axis=axes)
    return (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + eps) * weight.reshape(shape) + \
        bias.reshape(shape)


def group_norm(x, weight, bias, num_groups, eps=1e-5):
    n, c = x.shape[:2]
    g = x.reshape(n, num_groups, -1)
    norm = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + eps)).reshape(x.shape)
    shape = (1, c) + (1,) * (x.ndim - 2)
    return norm * weight.reshape(shape) + bias.reshape(shape)


def layer_norm(x, weight, bias, normalized_shape, eps=1e-5):
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    norm = (x - x.mean(axes, keepdims=True)) / np.sqrt(x.var(axes, keepdims=True) + eps)
    return norm * weight + bias


def sort_ref(x, dim=-1, descending=False, stable=False):
    order = np.argsort(-x if descending else x, axis=dim, kind="stable")
    return np.take_along_axis(x, order, dim), order


def topk_ref(x, k, dim=-1, largest=True, sorted=True):
    values, order = sort_ref(x, dim, descending=largest)
    return np.take(values, range(k), axis=dim), np.take(order, range(k), axis=dim)


def scatter_ref(x, index, src=None, dim=0, value=None):
    out = x.copy()
    np.put_along_axis(out, index, src if src is not None else value, dim)
    return out


def scatter_add_ref(x, index, src, dim=0):
    out = x.copy()
    for pos in np.ndindex(index.shape):
        target = list(pos)
        target[dim] = index[pos]
        out[tuple(target)] += src[pos]
    return out


def index_put_ref(x, indices, values, accumulate=False):
    out = x.copy()
    if accumulate:
        np.add.at(out, indices, values)
    else:
        out[indices] = values
    return out


def reduction(fn):
    return lambda x, dim=(), keepdim=False, **kw: fn(x, axis=_axes(dim), keepdims=keepdim, **kw)


def index_reduction(values, indices):
    def ref(x, dim=None, keepdim=False):
        if dim is None:
            return values(x)
        return values(x, axis=dim, keepdims=keepdim), indices(x, axis=dim, keepdims=keepdim)

    return ref


def pad_ref(x, pad, mode="constant", value=0.0):
    widths = [(0, 0)] * x.ndim
    for i in range(len(pad) // 2):
        widths[x.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1])
    if mode == "constant":
        return np.pad(x, widths, constant_values=value)
    return np.pad(x, widths, mode={"reflect": "reflect", "replicate": "edge"}[mode])


# ---------------------------------------------------------------- cases
class Case:
    """One call: op(*inputs, **attrs) against ref(*inputs, **attrs).

    check(outputs, inputs, attrs) replaces ref for random ops; run(client)
    replaces the whole call for in-place ops. grad=False skips the gradient
    check; grad_inputs limits it to those input positions."""

    def __init__(self, op, inputs, ref=None, *, check=None, run=None, rtol=1e-4, atol=1e-5, grad=True,
                 grad_inputs=None, label="", **attrs):
        self.op, self.inputs, self.ref, self.check, self.run = op, inputs, ref, check, run
        self.rtol, self.atol, self.grad, self.grad_inputs, self.attrs = rtol, atol, grad, grad_inputs, attrs
        self.id = f"{op}{'-' + label if label else ''}"


CASES = []


def case(*args, **kwargs):
    CASES.append(Case(*args, **kwargs))


# Elementwise, one input: op -> (reference, input).
S = (3, 4)
for op, ref, x in [
    ("abs", np.abs, away(*S)),
    ("acos", np.arccos, u(*S, lo=-0.8, hi=0.8)),
    ("acosh", np.arccosh, u(*S, lo=1.5, hi=3)),
    ("asin", np.arcsin, u(*S, lo=-0.8, hi=0.8)),
    ("asinh", np.arcsinh, u(*S)),
    ("atan", np.arctan, u(*S)),
    ("atanh", np.arctanh, u(*S, lo=-0.8, hi=0.8)),
    ("ceil", np.ceil, nonint(*S)),
    ("clone", lambda x: x.copy(), u(*S)),
    ("contiguous", lambda x: x.copy(), u(*S)),
    ("cos", np.cos, u(*S)),
    ("cosh", np.cosh, u(*S)),
    ("erf", _erf, u(*S)),
    ("erfc", lambda x: 1 - _erf(x), u(*S)),
    ("erfinv", _erfinv, u(*S, lo=-0.8, hi=0.8)),
    ("exp", np.exp, u(*S)),
    ("exp2", np.exp2, u(*S)),
    ("expm1", np.expm1, u(*S)),
    ("floor", np.floor, nonint(*S)),
    ("frac", lambda x: x - np.trunc(x), nonint(*S)),
    ("gelu", lambda x: x * 0.5 * (1 + _erf(x / math.sqrt(2))), u(*S, lo=-3, hi=3)),
    ("hardsigmoid", lambda x: np.clip(x + 3, 0, 6) / 6, f32([[-4, -2.5, -0.5, 0.7], [2.5, 4, 1.1, -1.3], [0.1, -3.5, 3.5, 2]])),
    ("hardswish", lambda x: x * np.clip(x + 3, 0, 6) / 6, f32([[-4, -2.5, -0.5, 0.7], [2.5, 4, 1.1, -1.3], [0.1, -3.5, 3.5, 2]])),
    ("hardtanh", lambda x: np.clip(x, -1, 1), f32([[-1.5, -0.5, 0.3, 0.9], [1.4, 0.0, -0.7, 2.0], [0.5, -2, 0.2, 0.6]])),
    ("log", np.log, u(*S, lo=0.5, hi=2)),
    ("log10", np.log10, u(*S, lo=0.5, hi=2)),
    ("log1p", np.log1p, u(*S, lo=0.5, hi=2)),
    ("log2", np.log2, u(*S, lo=0.5, hi=2)),
    ("logsigmoid", lambda x: -np.log1p(np.exp(-x)), u(*S, lo=-3, hi=3)),
    ("mish", lambda x: x * np.tanh(np.log1p(np.exp(x))), u(*S, lo=-3, hi=3)),
    ("neg", np.negative, u(*S)),
    ("reciprocal", np.reciprocal, u(*S, lo=0.5, hi=2)),
    ("relu", lambda x: np.maximum(x, 0), away(*S)),
    ("relu6", lambda x: np.clip(x, 0, 6), f32([[-1, 0.5, 2, 5.5], [7, 3, -0.3, 6.5], [1, 2, 3, 4]])),
    ("round", np.round, f32([[-2.2, -0.9, 0.1, 1.3], [2.8, 3.7, 0.7, 1.6], [2.4, -0.4, -1.6, 4.2]])),
    ("rsqrt", lambda x: 1 / np.sqrt(x), u(*S, lo=0.5, hi=2)),
    ("selu", lambda x: 1.0507009873554805 * np.where(x > 0, x, 1.6732632423543772 * np.expm1(x)), away(*S, hi=2)),
    ("sigmoid", sigmoid, u(*S, lo=-3, hi=3)),
    ("sign", np.sign, nonint(*S)),
    ("silu", lambda x: x * sigmoid(x), u(*S, lo=-3, hi=3)),
    ("sin", np.sin, u(*S)),
    ("sinh", np.sinh, u(*S)),
    ("softsign", lambda x: x / (1 + np.abs(x)), u(*S, lo=-3, hi=3)),
    ("sqrt", np.sqrt, u(*S, lo=0.5, hi=2)),
    ("square", np.square, u(*S)),
    ("tan", np.tan, u(*S, lo=-1.2, hi=1.2)),
    ("tanh", np.tanh, u(*S)),
    ("trunc", np.trunc, nonint(*S)),
]:
    case(op, [x], ref)

case("gelu", [u(*S, lo=-3, hi=3)],
     lambda x, approximate: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))),
     approximate="tanh", label="tanh")
case("celu", [away(*S, hi=2)], lambda x, alpha: np.maximum(x, 0) + np.minimum(0, alpha * np.expm1(x / alpha)),
     alpha=2.0)
case("elu", [away(*S, hi=2)], lambda x, alpha: np.where(x > 0, x, alpha * np.expm1(x)), alpha=0.5)
case("leaky_relu", [away(*S, hi=2)], lambda x, negative_slope: np.where(x >= 0, x, negative_slope * x),
     negative_slope=0.2)
case("hardtanh", [f32([[-2.5, -1.5, 0.3, 2.4]])], lambda x, min_val, max_val: np.clip(x, min_val, max_val),
     min_val=-2.0, max_val=2.0, label="bounds")
case("softplus", [f32([[-2.0, -0.5, 0.1, 0.4, 0.6, 2.0]])],
     lambda x, beta, threshold: np.where(beta * x > threshold, x, np.log1p(np.exp(beta * x)) / beta),
     beta=2.0, threshold=1.0)
case("logit", [u(*S, lo=0.1, hi=0.9)], lambda x: np.log(x / (1 - x)))
case("logit", [f32([[0.05, 0.3, 0.7, 0.97]])], lambda x, eps: np.log(np.clip(x, eps, 1 - eps) / (1 - np.clip(x, eps, 1 - eps))),
     eps=0.1, label="eps")
case("nan_to_num", [f32([[np.nan, np.inf, -np.inf, 1.5]])],
     lambda x, nan, posinf, neginf: np.nan_to_num(x, nan=nan, posinf=posinf, neginf=neginf),
     nan=0.5, posinf=100.0, neginf=-100.0, grad=False, label="specials")
case("nan_to_num", [u(*S)], lambda x: x)
case("isfinite", [f32([[np.nan, np.inf, -np.inf, 1.5]])], np.isfinite)
case("isinf", [f32([[np.nan, np.inf, -np.inf, 1.5]])], np.isinf)
case("isnan", [f32([[np.nan, np.inf, -np.inf, 1.5]])], np.isnan)
case("logical_not", [f32([[0, 1.5, -2, 0]])], np.logical_not)
case("bitwise_not", [ints(*S)], np.invert)
case("round", [f32([[0.5, 1.5, 2.5, -0.5, -1.5, -2.5]])], np.round, grad=False, label="ties")
case("to", [u(*S)], lambda x, dtype: x.copy(), dtype="f32")
case("to", [u(*S, lo=-3, hi=3)], lambda x, dtype: x.astype(np.float16), dtype="f16", rtol=1e-3, grad=False, label="f16")
case("to", [u(*S, lo=-3, hi=3)], lambda x, dtype: np.trunc(x).astype(np.int32), dtype="i32", grad=False, label="i32")
case("to", [f32([[0, 1.5, -2, 0]])], lambda x, dtype: x != 0, dtype="bool", grad=False, label="bool")

# Elementwise, two inputs (broadcasting) and scalar operands.
A, B = u(3, 4), u(4)
case("add", [A, B], lambda x, y, alpha: x + alpha * y, alpha=2.5)
case("add", [A], lambda x, other: x + other, other=2.5, label="scalar")
case("sub", [A, u(3, 1)], lambda x, y, alpha: x - alpha * y, alpha=-0.5)
case("sub", [A], lambda x, other: x - other, other=1.5, label="scalar")
case("mul", [A, B], np.multiply)
case("mul", [A], lambda x, other: x * other, other=-3.0, label="scalar")
case("div", [A, u(4, lo=0.5, hi=2)], np.divide)
case("div", [f32([[7, -7, 5.5, -5.5]]), f32([[2, 2, -2, -2]])], lambda x, y, rounding_mode: np.floor(x / y),
     rounding_mode="floor", label="floor")
case("div", [f32([[7, -7, 5.5, -5.5]]), f32([[2, 2, -2, -2]])], lambda x, y, rounding_mode: np.trunc(x / y),
     rounding_mode="trunc", label="trunc")
case("atan2", [A, u(4, lo=0.5, hi=1.5)], np.arctan2)
case("copysign", [A, away(4)], np.copysign)
case("fmod", [f32([[5.3, -5.3, 2.2, -2.7]]), f32([[2, 2, -1.5, 1.5]])], np.fmod)
case("remainder", [f32([[5.3, -5.3, 2.2, -2.7]]), f32([[2, 2, -1.5, 1.5]])], np.remainder)
case("hypot", [A, B], np.hypot)
case("logaddexp", [A, B], np.logaddexp)
case("maximum", [distinct(3, 4), distinct(3, 4, lo=-0.95, hi=1.05)], np.maximum)
case("minimum", [distinct(3, 4), distinct(3, 4, lo=-0.95, hi=1.05)], np.minimum)
case("pow", [u(3, 4, lo=0.5, hi=2), u(4, lo=-2, hi=2)], np.power)
case("pow", [u(3, 4, lo=0.5, hi=2)], lambda x, exponent: x ** exponent, exponent=3, label="scalar")
case("xlogy", [A, u(4, lo=0.5, hi=2)], lambda x, y: x * np.log(y))
for op, ref in [("eq", np.equal), ("ne", np.not_equal), ("lt", np.less), ("le", np.less_equal),
                ("gt", np.greater), ("ge", np.greater_equal)]:
    case(op, [ints(3, 4, lo=-2, hi=3), ints(4, lo=-2, hi=3)], ref)
    case(op, [A], lambda x, other, ref=ref: ref(x, other), other=0.25, label="scalar")
for op, ref in [("logical_and", np.logical_and), ("logical_or", np.logical_or), ("logical_xor", np.logical_xor)]:
    case(op, [f32([[0, 1, 0, 2]]), f32([[0, 0, 3, 4]])], ref)
for op, ref in [("bitwise_and", np.bitwise_and), ("bitwise_or", np.bitwise_or), ("bitwise_xor", np.bitwise_xor)]:
    case(op, [ints(3, 4, lo=0, hi=64), ints(4, lo=0, hi=64)], ref)
case("bitwise_and", [mask(3, 4), mask(3, 4)], np.logical_and, label="bool")

# Elementwise, three inputs.
case("addcdiv", [A, u(3, 4), away(4)], lambda x, a, b, value: x + value * a / b, value=0.5)
case("addcmul", [A, u(3, 4), B], lambda x, a, b, value: x + value * a * b, value=-2.0)
case("lerp", [A, u(3, 4), u(4, lo=0, hi=1)], lambda x, e, w: x + w * (e - x))
case("lerp", [A, u(3, 4)], lambda x, e, weight: x + weight * (e - x), weight=0.3, label="scalar")
case("where", [mask(3, 4), A, B], np.where)
case("where", [mask(3, 4), A], lambda c, x, other: np.where(c, x, other), other=0.5, label="scalar")
case("clamp", [f32([[-2, -0.5, 0.3, 0.9, 1.6, 0.0]]), f32([-1.0]), f32([1.0])], lambda x, lo, hi: np.clip(x, lo, hi))
case("clamp", [f32([[-2, -0.5, 0.3, 0.9, 1.6, 0.0]])], lambda x, min, max: np.clip(x, min, max), min=-1.0, max=1.0,
     label="scalar")
case("masked_fill", [A, mask(3, 4)], lambda x, m, value: np.where(m, value, x), value=2.0)

# Reductions.
X = u(3, 4, 5)
D = distinct(3, 4, 5)
case("sum", [X], reduction(np.sum), dim=[1], keepdim=True)
case("sum", [ints(3, 4)], lambda x: x.sum().astype(np.int64), label="int")
case("mean", [X], reduction(np.mean), dim=[0, 2])
case("prod", [u(3, 4, lo=0.5, hi=1.5)], reduction(np.prod), dim=[1])
case("amax", [D], reduction(np.max), dim=[2])
case("amin", [D], reduction(np.min), dim=[0, 1], keepdim=True)
case("max", [D], index_reduction(np.max, np.argmax), dim=1)
case("max", [D], lambda x: x.max(), label="all")
case("min", [D], index_reduction(np.min, np.argmin), dim=2, keepdim=True)
case("min", [D], lambda x: x.min(), label="all")
case("argmax", [D], lambda x, dim: np.argmax(x, axis=dim), dim=1)
case("argmin", [D], lambda x: np.argmin(x), label="flat")
case("argsort", [D], lambda x, dim, descending: sort_ref(x, dim, descending)[1], dim=1, descending=True)
case("sort", [D], sort_ref, dim=1)
case("topk", [D], topk_ref, k=2, dim=-1)
case("cumsum", [X], lambda x, dim: np.cumsum(x, axis=dim), dim=1)
case("cumprod", [u(3, 4, lo=0.5, hi=1.5)], lambda x, dim: np.cumprod(x, axis=dim), dim=1)
case("logsumexp", [X], lambda x, dim: np.log(np.exp(x).sum(axis=tuple(dim))), dim=[2])
case("norm", [X], lambda x, dim: np.sqrt((x ** 2).sum(axis=tuple(dim))), dim=[1])
case("norm", [away(3, 4)], lambda x, p: np.abs(x).sum(), p=1.0, label="p1")
case("std", [X], lambda x, dim: np.std(x, axis=tuple(dim), ddof=1), dim=[2])
case("var", [X], lambda x, dim, correction: np.var(x, axis=tuple(dim), ddof=correction), dim=[0], correction=0.0)
case("var_mean", [X], lambda x, dim: (np.var(x, axis=tuple(dim), ddof=1), np.mean(x, axis=tuple(dim))), dim=[1])
case("all", [f32([[1, 2, 0], [1, 1, 1]])], lambda x, dim: np.all(x != 0, axis=tuple(dim)), dim=[1])
case("any", [f32([[0, 0, 0], [0, 1, 0]])], lambda x, dim: np.any(x != 0, axis=tuple(dim)), dim=[1])
case("count_nonzero", [f32([[0, 2, 0], [1, 1, 0]])], lambda x: np.int64(np.count_nonzero(x)))

# Linear algebra.
case("matmul", [u(2, 3, 4), u(4, 5)], np.matmul)
case("matmul", [u(4), u(2, 4, 3)], np.matmul, label="vector")
case("mm", [u(3, 4), u(4, 2)], np.matmul)
case("bmm", [u(2, 3, 4), u(2, 4, 2)], np.matmul)
case("dot", [u(5), u(5)], np.dot)
case("outer", [u(3), u(4)], np.outer)
case("linear", [u(2, 3, 4), u(5, 4), u(5)], lambda x, w, b: x @ w.T + b)
case("linear", [u(3, 4), u(5, 4)], lambda x, w: x @ w.T, label="nobias")
case("addmm", [u(4), u(3, 5), u(5, 4)], lambda x, a, b, beta, alpha: beta * x + alpha * (a @ b), beta=0.5, alpha=2.0)
case("baddbmm", [u(2, 3, 4), u(2, 3, 5), u(2, 5, 4)], lambda x, a, b: x + a @ b)

# Shape.
case("cat", [u(2, 3), u(2, 2)], lambda a, b, dim: np.concatenate([a, b], axis=dim), dim=1)
case("stack", [u(2, 3), u(2, 3), u(2, 3)], lambda *xs, dim: np.stack(xs, axis=dim), dim=1)
case("chunk", [u(5, 3)], lambda x, chunks: tuple(np.array_split(x, [2, 4], axis=0)), chunks=3)
case("split", [u(5, 3)], lambda x, split_size_or_sections: tuple(np.split(x, [2, 4])), split_size_or_sections=2)
case("split", [u(3, 6)], lambda x, split_size_or_sections, dim: tuple(np.split(x, [1, 4], axis=1)),
     split_size_or_sections=[1, 3, 2], dim=1, label="sections")
case("expand", [u(3, 1)], lambda x, size: np.broadcast_to(x, (2, 3, 4)).copy(), size=[2, -1, 4])
case("flatten", [u(2, 3, 4)], lambda x, start_dim: x.reshape(2, 12), start_dim=1)
case("flip", [u(2, 3, 4)], lambda x, dims: np.flip(x, axis=tuple(dims)).copy(), dims=[0, 2])
case("narrow", [u(4, 5)], lambda x, dim, start, length: x[:, start:start + length], dim=1, start=1, length=3)
case("pad", [u(2, 3)], pad_ref, pad=[1, 2, 0, 1], value=0.5)
case("pad", [u(2, 4)], pad_ref, pad=[2, 1], mode="reflect", label="reflect")
case("pad", [u(2, 4)], pad_ref, pad=[1, 2, 1, 1], mode="replicate", label="replicate")
case("permute", [u(2, 3, 4)], lambda x, dims: np.transpose(x, dims).copy(), dims=[2, 0, 1])
case("repeat", [u(2, 3)], lambda x, repeats: np.tile(x, repeats), repeats=[2, 1, 2])
case("reshape", [u(2, 6)], lambda x, shape: x.reshape(shape), shape=[3, -1])
case("roll", [u(3, 4)], lambda x, shifts, dims: np.roll(x, shifts, axis=tuple(dims)), shifts=[1, -1], dims=[0, 1])
case("roll", [u(3, 4)], lambda x, shifts: np.roll(x, shifts), shifts=[5], label="flat")
case("slice", [u(5, 6)], lambda x, dim, start, end, step: x[:, start:end:step], dim=1, start=1, end=-1, step=2)
case("squeeze", [u(2, 1, 3, 1)], lambda x, dim: x.squeeze(axis=tuple(dim)), dim=[1])
case("unsqueeze", [u(2, 3)], lambda x, dim: np.expand_dims(x, dim), dim=-1)
case("transpose", [u(2, 3, 4)], lambda x, dim0, dim1: np.swapaxes(x, dim0, dim1).copy(), dim0=0, dim1=2)
case("tril", [u(4, 4)], lambda x, diagonal: np.tril(x, diagonal), diagonal=-1)
case("triu", [u(3, 4)], lambda x, diagonal: np.triu(x, diagonal), diagonal=1)

# Indexing.
G = idx(3, 2, 4)
case("gather", [u(3, 4), G], lambda x, i, dim: np.take_along_axis(x, i, dim), dim=0)
case("index_select", [u(3, 4), f32([2, 0, 2]).astype(np.int64)], lambda x, i, dim: np.take(x, i, axis=dim), dim=0)
case("index_put", [u(4, 3), np.array([3, 0], dtype=np.int64), u(2, 3)], index_put_ref)
case("index_put", [u(4, 3), np.array([1, 1, 2], dtype=np.int64), u(3, 3)], index_put_ref, accumulate=True,
     label="accumulate")
case("masked_select", [u(3, 4), mask(3, 4)], lambda x, m: x[m])
case("scatter", [u(3, 4), np.array([[0, 2, 1, 0], [1, 0, 2, 1]], dtype=np.int64), u(2, 4)], scatter_ref, dim=0)
case("scatter", [u(3, 4), np.array([[3], [0], [1]], dtype=np.int64)], scatter_ref, dim=1, value=7.5,
     label="value")
case("scatter_add", [u(3, 4), idx(3, 2, 4), u(2, 4)], scatter_add_ref, dim=0)
case("take", [u(3, 4), np.array([[0, 11], [5, -1]], dtype=np.int64)], lambda x, i: np.take(x, i))
case("embedding", [u(5, 3), np.array([[4, 0], [2, 2]], dtype=np.int64)], lambda w, i: w[i])
case("embedding", [u(5, 3), np.array([1, 0, 3], dtype=np.int64)], lambda w, i, padding_idx: w[i], padding_idx=0,
     grad=False, label="padding")  # padding_idx's row gets no gradient, which the forward reference cannot show

# Neural network.
IMG = u(2, 3, 5, 6)
case("conv2d", [IMG, u(4, 3, 3, 3), u(4)], conv2d, stride=[1, 2], padding=[1, 1], rtol=1e-4)
case("conv2d", [u(2, 4, 5, 6), u(4, 2, 2, 3)], lambda x, w, dilation, groups: conv2d(x, w, None, (1, 1), (0, 0),
                                                                                     tuple(dilation), groups),
     dilation=[2, 1], groups=2, label="groups")
case("conv1d", [u(2, 3, 7), u(4, 3, 3), u(4)], conv1d, stride=[2], padding=[1])
case("conv_transpose2d", [u(2, 3, 4, 3), u(3, 2, 3, 2), u(2)], conv_transpose2d, stride=[2, 1], padding=[1, 0],
     output_padding=[1, 0])
case("conv_transpose1d", [u(2, 4, 5), u(4, 1, 3)], lambda x, w, stride, groups: conv_transpose1d(x, w, None, tuple(stride),
                                                                                                  (0,), (0,), groups),
     stride=[2], groups=2)
case("max_pool2d", [distinct(2, 2, 4, 6)], lambda x, kernel_size: pool2d(x, kernel_size, None, (0, 0), "max"),
     kernel_size=[2, 2])
case("max_pool2d", [distinct(1, 2, 5, 5)], lambda x, kernel_size, stride, padding: pool2d(
    x, kernel_size, stride, padding, "max"), kernel_size=[3, 3], stride=[2, 2], padding=[1, 1], label="padding")
case("max_pool1d", [distinct(2, 3, 8)], lambda x, kernel_size: pool1d(x, kernel_size, None, (0,), "max"),
     kernel_size=[2])
case("avg_pool2d", [u(2, 2, 4, 6)], lambda x, kernel_size: pool2d(x, kernel_size, None, (0, 0), "avg"),
     kernel_size=[2, 3])
case("avg_pool2d", [u(1, 2, 5, 5)], lambda x, kernel_size, stride, padding, count_include_pad: pool2d(
    x, kernel_size, stride, padding, "avg", count_include_pad), kernel_size=[3, 3], stride=[2, 2], padding=[1, 1],
     count_include_pad=False, label="padding")
case("avg_pool2d", [u(1, 2, 4, 4)], lambda x, kernel_size, divisor_override: pool2d(
    x, kernel_size, None, (0, 0), "avg", divisor_override=divisor_override), kernel_size=[2, 2], divisor_override=3,
     label="divisor")
case("avg_pool1d", [u(2, 3, 8)], lambda x, kernel_size, stride: pool1d(x, kernel_size, stride, (0,), "avg"),
     kernel_size=[3], stride=[2])
case("adaptive_avg_pool2d", [u(2, 3, 5, 7)], lambda x, output_size: adaptive2d(x, output_size), output_size=[2, 3])
case("adaptive_avg_pool1d", [u(2, 3, 7)], lambda x, output_size: adaptive2d(x[:, :, None], (1, output_size[0]))[:, :, 0],
     output_size=[3])
case("interpolate", [u(1, 2, 3, 4)], lambda x, size: interpolate(x, size, "nearest"), size=[5, 6])
case("interpolate", [u(1, 2, 3, 4)], lambda x, size, mode: interpolate(x, size, mode), size=[5, 7], mode="bilinear",
     label="bilinear")
case("softmax", [X], softmax, dim=1)
case("log_softmax", [X], log_softmax, dim=-1)
case("layer_norm", [u(2, 3, 4), u(4, lo=0.5, hi=1.5), u(4)], layer_norm, normalized_shape=[4])
case("layer_norm", [u(2, 3, 4)], lambda x, normalized_shape: layer_norm(x, 1, 0, normalized_shape),
     normalized_shape=[3, 4], label="noaffine")
case("rms_norm", [u(2, 3, 4), u(4, lo=0.5, hi=1.5)],
     lambda x, w, normalized_shape, eps: x / np.sqrt((x ** 2).mean(-1, keepdims=True) + eps) * w,
     normalized_shape=[4], eps=1e-6)
case("group_norm", [u(2, 4, 3), u(4, lo=0.5, hi=1.5), u(4)], group_norm, num_groups=2)
case("batch_norm", [u(4, 3, 2), u(3), u(3, lo=0.5, hi=1.5), u(3, lo=0.5, hi=1.5), u(3)], batch_norm, grad_inputs=[0, 3, 4])
case("batch_norm", [u(4, 3, 2), u(3), u(3, lo=0.5, hi=1.5), u(3, lo=0.5, hi=1.5), u(3)], batch_norm, training=True,
     grad_inputs=[0, 3, 4], label="training")
case("dropout", [u(4, 4)], lambda x, p: x, p=0.0, label="p0")
case("mse_loss", [u(3, 4), u(3, 4)], lambda x, y: ((x - y) ** 2).mean())
case("l1_loss", [u(3, 4), u(3, 4)], lambda x, y, reduction: np.abs(x - y).sum(), reduction="sum")
case("smooth_l1_loss", [f32([[0.0, 0.0, 0.0, 0.0]]), f32([[0.2, -0.4, 1.5, -2.5]])],
     lambda x, y, beta: np.where(np.abs(x - y) < beta, 0.5 * (x - y) ** 2 / beta, np.abs(x - y) - 0.5 * beta).mean(),
     beta=1.0)
case("kl_div", [log_softmax(u(3, 4), 1), softmax(u(3, 4), 1)],
     lambda x, t, reduction: (t * (np.log(t) - x)).sum() / x.shape[0], reduction="batchmean")
case("binary_cross_entropy", [u(3, 4, lo=0.1, hi=0.9), u(3, 4, lo=0, hi=1), u(4, lo=0.5, hi=1.5)],
     lambda x, t, w: (-w * (t * np.log(x) + (1 - t) * np.log(1 - x))).mean())
case("binary_cross_entropy_with_logits", [u(3, 4, lo=-2, hi=2), u(3, 4, lo=0, hi=1), u(4, lo=0.5, hi=1.5),
                                          u(4, lo=0.5, hi=2)], bce_logits)
case("cross_entropy", [u(4, 5), idx(5, 4)], cross_entropy)
case("cross_entropy", [u(4, 5), np.array([1, -100, 3, 0], dtype=np.int64), u(5, lo=0.5, hi=1.5)], cross_entropy,
     reduction="sum", label="weight")
case("cross_entropy", [u(4, 5), idx(5, 4)], cross_entropy, label_smoothing=0.1, label="smoothing")
case("nll_loss", [log_softmax(u(4, 5), 1), idx(5, 4), u(5, lo=0.5, hi=1.5)], nll_loss)
case("scaled_dot_product_attention", [u(2, 3, 4), u(2, 5, 4), u(2, 5, 3)], sdpa)
case("scaled_dot_product_attention", [u(2, 4, 4), u(2, 4, 4), u(2, 4, 3)], sdpa, is_causal=True, scale=0.7,
     label="causal")
case("scaled_dot_product_attention", [u(1, 3, 4), u(1, 5, 4), u(1, 5, 2), u(3, 5)], sdpa, label="mask")


# Random and creation ops: checked for their contract (range, shape, determinism per seed).
def check_dropout(outputs, inputs, attrs):
    (out,), (x,) = outputs, inputs
    kept = out != 0
    np.testing.assert_allclose(out[kept], x[kept] / (1 - attrs["p"]), rtol=1e-6)
    assert 0.3 < kept.mean() < 0.7, kept.mean()


def check_uniform(outputs, inputs, attrs):
    (out,) = outputs
    assert out.shape == tuple(attrs["size"]) and out.dtype == np.float32
    assert out.min() >= 0 and out.max() < 1 and 0.4 < out.mean() < 0.6


def check_normal(outputs, inputs, attrs):
    (out,) = outputs
    assert out.shape == tuple(attrs["size"])
    assert abs(out.mean()) < 0.1 and 0.9 < out.std() < 1.1


def check_randint(outputs, inputs, attrs):
    (out,) = outputs
    assert out.dtype == np.int64 and out.min() >= attrs["low"] and out.max() < attrs["high"]
    assert set(np.unique(out)) == set(range(attrs["low"], attrs["high"]))


def check_bernoulli(outputs, inputs, attrs):
    (out,), (p,) = outputs, inputs
    assert set(np.unique(out)) <= {0.0, 1.0}
    assert (out[p == 0] == 0).all() and (out[p == 1] == 1).all()


def check_multinomial(outputs, inputs, attrs):
    (out,), (w,) = outputs, inputs
    assert out.shape == (w.shape[0], attrs["num_samples"]) and out.dtype == np.int64
    for row, weights in zip(out, w):
        assert len(set(row)) == len(row) and all(weights[i] > 0 for i in row)


case("dropout", [u(16, 16)], check=check_dropout, p=0.5, seed=3, grad=False)
case("rand", [], check=check_uniform, size=[64, 32], seed=1)
case("randn", [], check=check_normal, size=[64, 32], seed=2)
case("randint", [], check=check_randint, low=-2, high=3, size=[200], seed=3)
case("bernoulli", [f32([0.0, 1.0, 0.3, 0.7] * 4)], check=check_bernoulli, seed=4)
case("multinomial", [f32([[1, 0, 2, 3, 0], [0, 1, 1, 1, 5]])], check=check_multinomial, num_samples=3, seed=5)
case("arange", [], lambda start, end, step: np.arange(start, end, step, dtype=np.int64), start=2, end=11, step=3)
case("arange", [], lambda end, step: np.arange(0, end, step, dtype=np.float32), end=2.0, step=0.25, label="float")
case("eye", [], lambda n, m: np.eye(n, m, dtype=np.float32), n=3, m=4)
case("full", [], lambda size, fill_value: np.full(size, fill_value, dtype=np.float32), size=[2, 3], fill_value=1.5)
case("full_like", [ints(2, 3)], lambda x, fill_value: np.full_like(x, fill_value), fill_value=7)
case("linspace", [], lambda start, end, steps: np.linspace(start, end, steps, dtype=np.float32), start=-1.0, end=2.0,
     steps=7)
case("ones", [], lambda size, dtype: np.ones(size, dtype=np.int32), size=[2, 2], dtype="i32")
case("ones_like", [u(2, 3)], np.ones_like)
case("zeros", [], lambda size: np.zeros(size, dtype=np.float32), size=[3, 1])
case("zeros_like", [u(2, 3)], lambda x, dtype: np.zeros(x.shape, dtype=np.bool_), dtype="bool")


# In-place ops: run(client) calls the op and checks what it wrote. The daemon
# enqueues a call once its inputs exist but a download at once, so a read sent
# right after an in-place call could overtake it: the inputs are waited for
# first, and a round trip (settled) lets the call be enqueued before the reads.
def uploaded(client, *arrays):
    return [client.tensor(a).wait() for a in arrays]


def settled(client):
    client.info()


def run_sgd(client):
    p, g, buf = u(3, 4), u(3, 4), u(3, 4)
    tp, tg, tbuf = uploaded(client, p, g, buf)
    tensord.ops.sgd(tp, tg, tbuf, lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01, step=2)
    settled(client)
    g2 = g + 0.01 * p
    new_buf = 0.9 * buf + 0.9 * g2
    np.testing.assert_allclose(tbuf.numpy(), new_buf, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(tp.numpy(), p - 0.1 * new_buf, rtol=1e-5, atol=1e-6)


def adam_ref(p, g, m, v, lr, beta1, beta2, eps, weight_decay, step, decoupled):
    if decoupled:
        p = p * (1 - lr * weight_decay)
    else:
        g = g + weight_decay * p
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    p = p - lr / (1 - beta1 ** step) * m / (np.sqrt(v) / math.sqrt(1 - beta2 ** step) + eps)
    return p, m, v


def run_adam(op, multi):
    def run(client):
        hyper = dict(lr=0.01, beta1=0.8, beta2=0.95, eps=1e-6, weight_decay=0.1, step=3)
        groups = [(u(3, 4), u(3, 4), u(3, 4), u(3, 4, lo=0, hi=1)) for _ in range(2 if multi else 1)]
        tensors = [uploaded(client, *group) for group in groups]
        if multi:
            getattr(tensord.ops, op)(*[t for group in tensors for t in group], **hyper)
        else:
            getattr(tensord.ops, op)(*tensors[0], **hyper)
        settled(client)
        for (p, g, m, v), (tp, _, tm, tv) in zip(groups, tensors):
            want = adam_ref(p, g, m, v, decoupled=op.startswith("adamw"), **hyper)
            for got, expected in zip((tp, tm, tv), want):
                np.testing.assert_allclose(got.numpy(), expected, rtol=1e-4, atol=1e-6)

    return run


def run_sgd_multi(client):
    groups = [(u(2, 3), u(2, 3)), (u(4), u(4))]
    tensors = [uploaded(client, *group) for group in groups]
    tensord.ops.sgd_multi(*[t for group in tensors for t in group], lr=0.5, maximize=True)
    settled(client)
    for (p, g), (tp, _) in zip(groups, tensors):
        np.testing.assert_allclose(tp.numpy(), p + 0.5 * g, rtol=1e-6)


def run_clip_grad_norm(client):
    g1, g2 = u(3, 4), u(5)
    t1, t2 = uploaded(client, g1, g2)
    total = tensord.ops.clip_grad_norm_(t1, t2, max_norm=0.5)  # reading its output orders the reads after it
    norm = math.sqrt((g1.astype(np.float64) ** 2).sum() + (g2.astype(np.float64) ** 2).sum())
    scale = min(0.5 / (norm + 1e-6), 1)
    assert total.item() == pytest.approx(norm, rel=1e-5)
    np.testing.assert_allclose(t1.numpy(), g1 * scale, rtol=1e-5)
    np.testing.assert_allclose(t2.numpy(), g2 * scale, rtol=1e-5)


def run_zero(client):
    (t,) = uploaded(client, ints(3, 4))
    assert tensord.ops.zero_(t) is None
    settled(client)
    assert (t.numpy() == 0).all() and t.dtype == tensord.int32


case("sgd", [], run=run_sgd)
case("sgd_multi", [], run=run_sgd_multi)
for name in ("adam", "adamw", "adam_multi", "adamw_multi"):
    case(name, [], run=run_adam(name, name.endswith("_multi")))
case("clip_grad_norm_", [], run=run_clip_grad_norm)
case("zero_", [], run=run_zero)


# ---------------------------------------------------------------- running the cases
def _outputs(result):
    if result is None:
        return ()
    return tuple(result) if isinstance(result, tuple) else (result,)


def _expected(case_):
    want = case_.ref(*case_.inputs, **case_.attrs)
    return want if isinstance(want, tuple) else (want,)


def _compare(got, want, case_, what):
    want = np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    if want.dtype.kind in "biu":
        assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, expected {want.dtype}"
        np.testing.assert_array_equal(got, want, err_msg=what)
    else:
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=case_.rtol, atol=case_.atol, err_msg=what)


@pytest.mark.parametrize("case_", CASES, ids=[c.id for c in CASES])
def test_op(client, case_):
    if case_.run is not None:
        case_.run(client)
        return
    inputs = [client.from_numpy(a) for a in case_.inputs]
    outputs = [t.numpy() for t in _outputs(getattr(tensord.ops, case_.op)(*inputs, **case_.attrs))]
    if case_.check is not None:
        case_.check(outputs, case_.inputs, case_.attrs)
        return
    want = _expected(case_)
    assert len(outputs) == len(want), f"{len(outputs)} outputs, expected {len(want)}"
    for k, (got, expected) in enumerate(zip(outputs, want)):
        _compare(got, expected, case_, f"{case_.op} output {k}")


def _gradcheck_cases():
    return [c for c in CASES if c.grad and c.ref is not None and c.run is None and c.check is None
            and any(a.dtype == np.float32 for a in c.inputs)]


@pytest.mark.parametrize("case_", _gradcheck_cases(), ids=[c.id for c in _gradcheck_cases()])
def test_gradient(client, case_):
    """The gradient autograd computes (the op's backward op) against central
    differences of the reference in float64, along a random direction per
    input: L(x) = sum_k <r_k, out_k(x)> for random cotangents r_k."""
    info = client.op_info(case_.op)
    if not info.differentiable:
        pytest.skip(f"{case_.op} is not differentiable")
    positions = [i for i, a in enumerate(case_.inputs) if a.dtype == np.float32
                 and (case_.grad_inputs is None or i in case_.grad_inputs)]
    tensors = [client.from_numpy(a, requires_grad=i in positions) for i, a in enumerate(case_.inputs)]
    want = _expected(case_)
    floats = [k for k, w in enumerate(want) if np.asarray(w).dtype.kind == "f"]
    assert floats, f"{case_.op}: no float output to differentiate (mark the case grad=False)"
    cotangents = {k: rng.standard_normal(np.shape(want[k])) for k in floats}
    outputs = _outputs(getattr(tensord.ops, case_.op)(*tensors, **case_.attrs))
    loss = None
    for k in floats:
        term = (outputs[k] * client.tensor(cotangents[k].astype(np.float32))).sum()
        loss = term if loss is None else loss + term
    loss.backward()

    def L(inputs):
        values = case_.ref(*inputs, **case_.attrs)
        values = values if isinstance(values, tuple) else (values,)
        return sum(float((cotangents[k] * np.asarray(values[k], dtype=np.float64)).sum()) for k in floats)

    checked = 0
    for i in positions:
        grad = tensors[i].grad
        if grad is None:
            continue  # the op gives this input no gradient (running statistics ...)
        g = grad.numpy().astype(np.float64)
        assert g.shape == case_.inputs[i].shape
        base = [a.astype(np.float64) if a.dtype == np.float32 else a for a in case_.inputs]
        v = rng.standard_normal(g.shape)
        h = 1e-4
        plus, minus = list(base), list(base)
        plus[i], minus[i] = base[i] + h * v, base[i] - h * v
        numeric = (L(plus) - L(minus)) / (2 * h)
        analytic = float((g * v).sum())
        scale = float(np.abs(g * v).sum())
        assert abs(numeric - analytic) <= 2e-3 * scale + 1e-4, \
            f"{case_.op}: input {i}: d/dv = {numeric} by finite differences, {analytic} by autograd"
        checked += 1
    assert checked, f"{case_.op}: no input got a gradient"


def test_every_op_has_a_case(client):
    infos = {info.name: info for info in client.op_info()}
    covered = {c.op for c in CASES}
    gradchecked = {c.op for c in _gradcheck_cases() if infos.get(c.op) and infos[c.op].differentiable}
    missing = [name for name in sorted(infos) if name not in covered
               and not (name.endswith("_backward") and name.removesuffix("_backward") in gradchecked)]
    assert not missing, f"ops without a case in {__file__}: {' '.join(missing)}"


def test_every_differentiable_op_has_a_gradient_check(client):
    gradchecked = {c.op for c in _gradcheck_cases()}
    missing = [info.name for info in client.op_info() if info.differentiable and info.name not in gradchecked]
    assert not missing, f"differentiable ops without a gradient check: {' '.join(missing)}"


def test_every_case_names_an_op(client):
    names = {info.name for info in client.op_info()}
    assert not [c.op for c in CASES if c.op not in names]
