"""Autograd, tensord.optim and tensord.nn against NumPy: a small MLP's
gradients against finite differences, the optimizers against PyTorch's
update rules, the modules against their formulas."""

import math

import numpy as np
import pytest

import tensord
from tensord import nn, ops, optim

rng = np.random.default_rng(5)


def f32(a):
    return np.asarray(a, dtype=np.float32)


# ---------------------------------------------------------------- autograd
def mlp_loss(x, y, w1, b1, w2, b2):
    """mean((tanh(x W1^T + b1) W2^T + b2 - y)^2), in float64."""
    h = np.tanh(x @ w1.T + b1)
    return float(((h @ w2.T + b2 - y) ** 2).mean())


def test_mlp_gradients_match_finite_differences(client):
    x, y = rng.standard_normal((6, 4)), rng.standard_normal((6, 2))
    params = [rng.standard_normal((5, 4)) * 0.5, rng.standard_normal(5) * 0.5, rng.standard_normal((2, 5)) * 0.5,
              rng.standard_normal(2) * 0.5]
    params = [f32(p).astype(np.float64) for p in params]  # exactly what the daemon holds
    x, y = f32(x).astype(np.float64), f32(y).astype(np.float64)
    leaves = [client.tensor(f32(p), requires_grad=True) for p in params]
    w1, b1, w2, b2 = leaves
    loss = ops.mse_loss(ops.linear(ops.linear(client.tensor(f32(x)), w1, b1).tanh(), w2, b2), client.tensor(f32(y)))
    loss.backward()
    assert loss.item() == pytest.approx(mlp_loss(x, y, *params), rel=1e-5)
    h = 1e-6
    for k, leaf in enumerate(leaves):
        grad = leaf.grad.numpy()
        numeric = np.zeros_like(params[k])
        for j in np.ndindex(params[k].shape):
            plus, minus = [p.copy() for p in params], [p.copy() for p in params]
            plus[k][j] += h
            minus[k][j] -= h
            numeric[j] = (mlp_loss(x, y, *plus) - mlp_loss(x, y, *minus)) / (2 * h)
        np.testing.assert_allclose(grad, numeric, rtol=1e-3, atol=1e-5, err_msg=f"parameter {k}")


def test_gradients_accumulate_and_can_be_cleared(client):
    w = client.tensor([1.0, 2.0], requires_grad=True)
    (w * 3).sum().backward()
    (w * w).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), [3 + 2, 3 + 4])
    w.grad = None
    assert w.grad is None
    (w * 2).sum().backward()
    assert w.grad.tolist() == [2.0, 2.0]
    w.grad = client.tensor([0.5, 0.5])
    assert w.grad.tolist() == [0.5, 0.5]
    with pytest.raises(TypeError):
        w.grad = [1.0]


def test_backward_with_a_gradient_and_through_several_outputs(client):
    a = np.array([[3.0, 1.0, 2.0]], dtype=np.float32)
    x = client.tensor(a, requires_grad=True)
    values, indices = x.max(1)
    values.backward(client.tensor([2.0]))
    assert x.grad.tolist() == [[2.0, 0.0, 0.0]]
    y = client.tensor([1.0, -1.0], requires_grad=True)
    y.relu().backward(np.array([5.0, 5.0], dtype=np.float32))  # arrays are uploaded
    assert y.grad.tolist() == [5.0, 0.0]


def test_detach_and_leaves(client):
    w = client.tensor([1.0], requires_grad=True)
    assert w.requires_grad and (w * 2).requires_grad
    d = (w * 2).detach()
    assert not d.requires_grad and d.item() == 2.0
    with pytest.raises(tensord.Refused, match="not a leaf"):
        (w * 2).requires_grad_(True)
    with pytest.raises(tensord.Refused, match="does not require grad"):
        client.tensor([1.0]).backward()
    loss = (w * w).sum()
    loss.backward()
    with pytest.raises(tensord.Refused, match="freed"):
        loss.backward()


# ---------------------------------------------------------------- optimizers
def quadratic_grads(params, targets):
    """Gradients of sum((p - t)^2) through autograd."""
    loss = None
    for p, t in zip(params, targets):
        term = ((p - t) ** 2).sum()
        loss = term if loss is None else loss + term
    loss.backward()


def run_optimizer(client, make, reference, steps=3):
    starts = [rng.standard_normal((2, 3)).astype(np.float32), rng.standard_normal(4).astype(np.float32)]
    targets = [rng.standard_normal(s.shape).astype(np.float32) for s in starts]
    params = [client.tensor(s, requires_grad=True).wait() for s in starts]
    target_tensors = [client.tensor(t).wait() for t in targets]
    opt = make(params)
    state = [dict() for _ in starts]
    want = [s.astype(np.float64) for s in starts]
    for step in range(1, steps + 1):
        opt.zero_grad()
        quadratic_grads(params, target_tensors)
        opt.step()
        for k in range(len(want)):
            want[k] = reference(want[k], 2 * (want[k] - targets[k]), state[k], step)
    # The daemon enqueues a call once its input tensors exist, but a download
    # at once: a read sent right after an in-place call can overtake it. With
    # every input of the steps existing (the waits above), a round trip is
    # enough for the last step to be enqueued before the reads.
    client.info()
    for p, w in zip(params, want):
        np.testing.assert_allclose(p.numpy(), w, rtol=1e-4, atol=1e-5)


def test_sgd_with_momentum_matches_pytorch(client):
    lr, momentum, dampening, wd = 0.1, 0.9, 0.1, 0.01

    def reference(p, g, state, step):
        g = g + wd * p
        buf = g if step == 1 else momentum * state["buf"] + (1 - dampening) * g
        state["buf"] = buf
        return p - lr * buf

    run_optimizer(client, lambda ps: optim.SGD(ps, lr=lr, momentum=momentum, dampening=dampening, weight_decay=wd),
                  reference)


def test_sgd_nesterov_matches_pytorch(client):
    def reference(p, g, state, step):
        buf = g if step == 1 else 0.5 * state["buf"] + g
        state["buf"] = buf
        return p - 0.05 * (g + 0.5 * buf)

    run_optimizer(client, lambda ps: optim.SGD(ps, lr=0.05, momentum=0.5, nesterov=True), reference)


def adam_reference(lr, betas, eps, wd, decoupled):
    def reference(p, g, state, step):
        if decoupled:
            p = p * (1 - lr * wd)
        else:
            g = g + wd * p
        m = betas[0] * state.get("m", 0) + (1 - betas[0]) * g
        v = betas[1] * state.get("v", 0) + (1 - betas[1]) * g * g
        state.update(m=m, v=v)
        return p - lr / (1 - betas[0] ** step) * m / (np.sqrt(v) / math.sqrt(1 - betas[1] ** step) + eps)

    return reference


def test_adam_matches_pytorch(client):
    run_optimizer(client, lambda ps: optim.Adam(ps, lr=0.01, betas=(0.8, 0.99), weight_decay=0.1),
                  adam_reference(0.01, (0.8, 0.99), 1e-8, 0.1, False))


def test_adamw_matches_pytorch(client):
    run_optimizer(client, lambda ps: optim.AdamW(ps, lr=0.02), adam_reference(0.02, (0.9, 0.999), 1e-8, 0.01, True))


def test_optimizer_arguments_are_checked(client):
    p = client.tensor([1.0], requires_grad=True)
    with pytest.raises(ValueError, match="lr must be >= 0"):
        optim.SGD([p], lr=-1)
    with pytest.raises(ValueError, match="nesterov"):
        optim.SGD([p], nesterov=True)
    with pytest.raises(ValueError, match="betas"):
        optim.Adam([p], betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="empty parameter list"):
        optim.AdamW([])
    with pytest.raises(TypeError, match="parameter 0 is list"):
        optim.AdamW([[1.0]])
    with pytest.raises(ValueError, match="set_to_none"):
        optim.SGD([p]).zero_grad(set_to_none=False)


def test_a_parameter_without_gradient_is_left_alone(client):
    a, b = client.tensor([1.0], requires_grad=True).wait(), client.tensor([1.0], requires_grad=True).wait()
    opt = optim.SGD([a, b], lr=0.5)
    (a * 2).sum().backward()
    opt.step()
    client.info()  # see run_optimizer
    assert a.item() == 0.0 and b.item() == 1.0


def test_clip_grad_norm(client):
    a, b = client.tensor([3.0], requires_grad=True), client.tensor([4.0], requires_grad=True)
    (a * a + b * b).sum().backward()  # grads 6 and 8: norm 10
    norm = nn.utils.clip_grad_norm_([a, b], max_norm=5.0)
    assert norm.item() == pytest.approx(10.0)
    np.testing.assert_allclose([a.grad.item(), b.grad.item()], [3.0, 4.0], rtol=1e-5)
    with pytest.raises(ValueError, match="no parameters"):
        nn.utils.clip_grad_norm_([], 1.0)


# ---------------------------------------------------------------- nn
def test_linear(client):
    layer = nn.Linear(4, 3)
    x = rng.standard_normal((2, 4)).astype(np.float32)
    w, b = layer.weight.numpy(), layer.bias.numpy()
    assert w.shape == (3, 4) and np.abs(w).max() <= 0.5 and layer.weight.requires_grad
    np.testing.assert_allclose(layer(client.tensor(x)).numpy(), x @ w.T + b, rtol=1e-5, atol=1e-6)
    assert nn.Linear(4, 3, bias=False).bias is None
    assert repr(layer) == "Linear(in_features=4, out_features=3, bias=True)"


def test_conv2d(client):
    conv = nn.Conv2d(2, 3, 3, padding=1, stride=2)
    x = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)
    w, b = conv.weight.numpy(), conv.bias.numpy()
    assert w.shape == (3, 2, 3, 3)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros((1, 3, 3, 3), dtype=np.float64)
    for i in range(3):
        for j in range(3):
            want[0, :, i, j] = np.einsum("chw,ochw->o", xp[0, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3], w) + b
    np.testing.assert_allclose(conv(client.tensor(x)).numpy(), want, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="divisible by groups"):
        nn.Conv2d(3, 4, 3, groups=2)


def test_layer_norm_and_embedding(client):
    norm = nn.LayerNorm(4)
    assert norm.weight.tolist() == [1.0] * 4 and norm.bias.tolist() == [0.0] * 4
    x = rng.standard_normal((2, 4)).astype(np.float32)
    want = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(norm(client.tensor(x)).numpy(), want, rtol=1e-4, atol=1e-5)
    assert len(list(nn.LayerNorm([2, 4], elementwise_affine=False).parameters())) == 0
    emb = nn.Embedding(5, 3, padding_idx=-1)
    table = emb.weight.numpy()
    assert emb.padding_idx == 4 and (table[4] == 0).all()
    np.testing.assert_array_equal(emb([[1, 4], [0, 1]]).numpy(), table[[[1, 4], [0, 1]]])
    with pytest.raises(ValueError, match="padding_idx"):
        nn.Embedding(3, 2, padding_idx=3)


class TwoLayer(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(3, 4), nn.LayerNorm(4))
        self.head = nn.Linear(4, 2)
        self.scale = nn.Parameter(tensord.ops.ones(1))

    def forward(self, x):
        return self.head(self.body(x).relu()) * self.scale


def test_modules_register_parameters_and_submodules(client):
    tensord.manual_seed(1)
    model = TwoLayer()
    names = [name for name, _ in model.named_parameters()]
    assert names == ["scale", "body.0.weight", "body.0.bias", "body.1.weight", "body.1.bias", "head.weight",
                     "head.bias"]
    assert len(list(model.parameters())) == 7 and all(p.requires_grad for p in model.parameters())
    assert [n for n, _ in model.named_children()] == ["body", "head"] and len(model.body) == 2
    assert list(model.children()) == [model.body, model.head]
    assert isinstance(model.body[1], nn.LayerNorm) and len(list(model.modules())) == 5
    assert not model.eval().head.training and model.train().body[0].training
    out = model(client.tensor(np.ones((2, 3), np.float32)))
    assert out.shape == (2, 2)
    out.sum().backward()
    assert all(p.grad is not None for p in model.parameters())
    model.zero_grad()
    assert all(p.grad is None for p in model.parameters())
    tensord.manual_seed(1)
    again = TwoLayer()
    np.testing.assert_array_equal(again.head.weight.numpy(), model.head.weight.numpy())
    assert "(body): Sequential(" in repr(model)


def test_state_dict_round_trip(client):
    model, other = TwoLayer(), TwoLayer()
    state = model.state_dict()
    assert list(state) == [name for name, _ in model.named_parameters()]
    other.load_state_dict(state)
    for (name, a), (_, b) in zip(model.named_parameters(), other.named_parameters()):
        np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=name)
        assert b.requires_grad and a._h is not b._h  # copies, not shared
    arrays = {name: t.numpy() * 0 for name, t in state.items()}
    other.load_state_dict(arrays)
    assert other.head.weight.numpy().sum() == 0
    with pytest.raises(KeyError, match="missing"):
        other.load_state_dict({})
    with pytest.raises(ValueError, match="shape"):
        other.load_state_dict({**arrays, "head.bias": np.zeros(3, np.float32)})


def test_modules_need_init_first():
    class Broken(nn.Module):
        def __init__(self):
            self.w = 1

    with pytest.raises(AttributeError, match="super"):
        Broken()
    with pytest.raises(NotImplementedError):
        nn.Module()(1)
    with pytest.raises(TypeError):
        nn.Parameter([1.0])
