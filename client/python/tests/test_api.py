"""The public surface of the tensord package: connecting, making and reading
tensors, operators, indexing, the op namespaces, named tensors, pipelining,
the thread rule."""

import copy
import faulthandler
import gc
import inspect
import os
import signal
import threading

import numpy as np
import pytest

import tensord
from conftest import Daemon


# ---------------------------------------------------------------- connecting
def test_connect_with_arguments(daemon):
    c = tensord.connect(daemon.address, daemon.token)
    assert c.address == daemon.address
    assert c.whoami() == daemon.principal
    assert repr(c) == f"tensord.Client({daemon.address!r})"


def test_connect_from_the_environment(daemon, monkeypatch):
    monkeypatch.setenv("TENSORD_ADDR", daemon.address)
    monkeypatch.setenv("TENSORD_TOKEN", daemon.token)
    c = tensord.connect()
    assert c.address == daemon.address and c.whoami() == daemon.principal


def test_arguments_beat_the_environment(daemon, monkeypatch):
    monkeypatch.setenv("TENSORD_ADDR", "127.0.0.1:1")  # nothing listens there
    monkeypatch.setenv("TENSORD_TOKEN", "wrong")
    assert tensord.connect(daemon.address, daemon.token).whoami() == daemon.principal


def test_connect_from_the_credentials_file(daemon, monkeypatch, tmp_path):
    for name in ("TENSORD_ADDR", "TENSORD_TOKEN", "TENSORD_CA", "TENSORD_CERT", "TENSORD_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    path = tmp_path / "tensord" / "credentials"
    path.parent.mkdir()
    path.write_text(f"# written by the test\ntoken = {daemon.token}\nconnect = {daemon.address}\n")
    path.chmod(0o600)
    assert tensord.connect().whoami() == daemon.principal
    path.chmod(0o644)  # readable by others: refused, as tensorctl refuses it
    with pytest.raises(ValueError, match="accessible by group or others"):
        tensord.connect()


def test_bad_connect_arguments():
    with pytest.raises(ValueError, match="address needs HOST:PORT"):
        tensord.connect("")
    with pytest.raises(ValueError, match="needs"):
        tensord.connect("tls://127.0.0.1:1", cert="client.pem")


def test_connect_sets_the_default_client_and_fills_the_op_namespace(daemon):
    c = daemon.connect()
    z = tensord.ops.zeros(2, 3)
    assert z.client is c
    assert "relu" in tensord.ops and "relu" in dir(tensord.ops)
    assert tensord.relu is tensord.ops.relu
    with pytest.raises(AttributeError, match="no op 'no_such_op'"):
        tensord.ops.no_such_op


def test_daemon_information(client, daemon):
    info = client.info()
    assert info.protocol_version >= 5 and info.version
    assert info.device.name and "f32" in info.device.dtypes
    assert info.memory.limit_bytes >= 0
    status = client.status()
    assert status.principal == daemon.principal and status.roles == []
    stats = client.stats()
    assert stats.calls >= 0 and stats.round_trips >= 1
    assert client.op_info("matmul").category == "linalg"
    assert len(client.op_info()) == len(list(tensord.ops))
    with pytest.raises(KeyError):
        client.op_info("no_such_op")
    client.refresh_ops()
    assert "relu" in tensord.ops


def test_admin_reload_needs_no_policy_to_work(client):
    # Without a policy file every principal may do everything, reload included.
    client.admin_reload()


# ---------------------------------------------------------------- tensors in and out
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.int64, np.uint8, np.bool_])
def test_from_numpy_round_trips(client, dtype):
    a = (np.arange(24).reshape(2, 3, 4) % 7).astype(dtype)
    t = client.from_numpy(a)
    assert t.shape == (2, 3, 4) and t.dtype.numpy == np.dtype(dtype)
    back = t.numpy()
    assert back.dtype == a.dtype and back.shape == a.shape
    np.testing.assert_array_equal(back, a)


def test_tensor_from_lists_and_numbers(client):
    assert client.tensor([[1.0, 2.0]]).dtype == tensord.float32  # float64 -> float32
    assert client.tensor([1, 2, 3]).dtype == tensord.int64
    assert client.tensor([True, False]).dtype == tensord.bool
    scalar = client.tensor(2.5)
    assert scalar.shape == () and scalar.item() == 2.5
    assert client.tensor(np.arange(3, dtype=np.int16)).dtype == tensord.int64
    assert client.tensor([1, 2], dtype="f16").numpy().dtype == np.float16
    assert client.tensor([1.5, 2.5], dtype=tensord.int32).tolist() == [1, 2]
    with pytest.raises(TypeError, match="no tensord counterpart"):
        client.tensor(np.array(["a"]))
    with pytest.raises(TypeError, match="already a tensord.Tensor|got a tensord.Tensor"):
        client.tensor(client.tensor([1.0]))


def test_from_numpy_takes_exact_dtypes_only(client):
    with pytest.raises(TypeError, match="float64 has no tensord counterpart"):
        client.from_numpy(np.zeros(3))
    with pytest.raises(TypeError, match="expected a numpy.ndarray"):
        client.from_numpy([1.0])


def test_non_contiguous_and_big_endian_arrays(client):
    a = np.arange(20, dtype=np.float32).reshape(4, 5)
    np.testing.assert_array_equal(client.from_numpy(a.T).numpy(), a.T)
    np.testing.assert_array_equal(client.from_numpy(a[::2, 1:]).numpy(), a[::2, 1:])
    big = a.astype(">f4")
    np.testing.assert_array_equal(client.from_numpy(big).numpy(), a)
    empty = client.from_numpy(np.zeros((0, 3), dtype=np.float32))
    assert empty.numpy().shape == (0, 3)


def test_tensor_properties(client):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = client.tensor(a)
    assert t.shape == (3, 4) and t.size() == (3, 4) and t.size(1) == 4
    assert t.ndim == 2 and t.dim() == 2 and t.numel() == 12 and len(t) == 3
    assert t.is_floating_point() and not client.tensor([1]).is_floating_point()
    assert t.dtype == tensord.float32 and t.dtype == "f32" and repr(t.dtype) == "tensord.float32"
    assert [row.tolist() for row in t] == a.tolist()
    assert t.tolist() == a.tolist()
    assert t.wait() is t
    info = t.info()
    assert info.shape == (3, 4) and info.dtype == "f32" and info.bytes == 48
    np.testing.assert_array_equal(np.asarray(t), a)
    assert t.client is client
    with pytest.raises(TypeError, match="0-d"):
        len(client.tensor(1.0))
    with pytest.raises(TypeError, match="cannot be pickled or copied"):
        copy.copy(t)


def test_item_and_conversions(client):
    assert client.tensor([[4.5]]).item() == 4.5
    assert float(client.tensor(2.0)) == 2.0 and int(client.tensor(3)) == 3
    assert bool(client.tensor(True)) and not bool(client.tensor(0.0))
    with pytest.raises(ValueError, match="exactly one"):
        client.tensor([1.0, 2.0]).item()
    t = client.tensor([1.7, -2.2])
    assert t.to(tensord.int32).tolist() == [1, -2]
    assert t.float().dtype == tensord.float32 and t.half().dtype == tensord.float16
    assert t.bfloat16().dtype == tensord.bfloat16 and t.int().dtype == tensord.int32
    assert t.long().dtype == tensord.int64 and t.byte().dtype == tensord.uint8 and t.bool().dtype == tensord.bool


def test_repr(client):
    t = client.tensor([[1.0, 2.0]])
    assert repr(t) == "tensor([[1., 2.]], dtype=tensord.float32)"
    assert "requires_grad=True" in repr(client.tensor([1.0], requires_grad=True))
    big = tensord.ops.zeros(1024, 1024)
    assert repr(big) == "tensor(shape=[1024, 1024], dtype=tensord.float32)"
    failed = client.tensor([[1.0, 2.0]]) @ client.tensor([[1.0, 2.0]])  # shapes do not fit
    assert repr(failed).startswith("tensor(<failed: ")


def test_dtypes():
    assert tensord.float is tensord.float32 and tensord.half is tensord.float16
    assert tensord.long is tensord.int64 and tensord.int is tensord.int32
    assert tensord.bool.name == "bool" and tensord.uint8.itemsize == 1
    assert tensord.bfloat16.is_floating_point and not tensord.int32.is_floating_point
    assert {tensord.float32, tensord.float32} == {tensord.float32}


# ---------------------------------------------------------------- operators
def test_arithmetic_operators(client):
    a = np.array([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
    b = np.array([0.5, -1.0], dtype=np.float32)
    x, y = client.tensor(a), client.tensor(b)
    for got, want in [(x + y, a + b), (x - y, a - b), (x * y, a * b), (x / y, a / b), (x @ x, a @ a),
                      (x ** 2, a ** 2), (-x, -a), (+x, a), (abs(-x), a), (x // 3, a // 3), (x % 3, a % 3),
                      (x + 1, a + 1), (1 + x, 1 + a), (2 - x, 2 - a), (3 * x, 3 * a), (2 / x, 2 / a),
                      (2 ** x, 2 ** a), (x - 1.5, a - 1.5), (x / 4, a / 4),
                      (x + b, a + b), (b + x, b + a), (a @ x, a @ a), (x.T, a.T), (x.mT, a.T)]:
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5)


def test_comparison_and_logical_operators(client):
    a = np.array([1, 2, 3, 4], dtype=np.int32)
    x = client.tensor(a)
    for got, want in [(x < 3, a < 3), (x <= 3, a <= 3), (x > 3, a > 3), (x >= 3, a >= 3), (x == 2, a == 2),
                      (x != 2, a != 2), (3 > x, 3 > a), (x == client.tensor(a[::-1].copy()), a == a[::-1]),
                      (x & 6, a & 6), (x | 8, a | 8), (x ^ 1, a ^ 1), (~x, ~a)]:
        np.testing.assert_array_equal(got.numpy(), want)
    assert hash(x) == hash(x) and x in {x}  # hashable by identity though == is elementwise
    assert (x.__add__("text")) is NotImplemented
    with pytest.raises(TypeError):
        x + "text"


# ---------------------------------------------------------------- indexing
@pytest.mark.parametrize("key", [
    0, -1, 2, slice(1, 3), slice(None, None, 2), slice(-2, None), (1, 2), (slice(None), 1), (Ellipsis, 0),
    (Ellipsis, None), (None, 1), (0, Ellipsis, slice(1, 3)), (slice(None), None, slice(1, None)), (Ellipsis,),
    ([2, 0],), (slice(None), np.array([3, 1, 1])), (Ellipsis, [0]),
], ids=repr)
def test_indexing_matches_numpy(client, key):
    a = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    np.testing.assert_array_equal(client.tensor(a)[key].numpy(), a[key])


def test_indexing_with_tensors(client):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = client.tensor(a)
    np.testing.assert_array_equal(x[client.tensor([2, 0])].numpy(), a[[2, 0]])
    np.testing.assert_array_equal(x[x > 5].numpy(), a[a > 5])
    np.testing.assert_array_equal(x[a % 2 == 0].numpy(), a[a % 2 == 0])
    with pytest.raises(IndexError, match="only index"):
        x[x > 5, 0]
    with pytest.raises(IndexError, match="single ellipsis"):
        x[..., ...]
    with pytest.raises(ValueError, match="positive"):
        x[::-1]
    with pytest.raises(IndexError, match="indexed by"):
        x["a"]


# ---------------------------------------------------------------- ops
def test_op_functions_carry_the_daemon_documentation(client):
    add = tensord.ops.add
    assert add.__name__ == "add"
    assert "input + alpha * other" in add.__doc__ and "alpha (scalar, default 1)" in add.__doc__
    assert str(inspect.signature(add)) == "(input, other=None, *, alpha=1)"
    assert str(inspect.signature(tensord.ops.cat)) == "(*tensors, dim=0)"
    assert "Returns: (values, indices)" in tensord.ops.sort.__doc__
    assert "backward op relu_backward" in tensord.ops.relu.__doc__
    x = client.tensor([1.0])
    assert x.relu.__doc__ == tensord.ops.relu.__doc__
    assert "relu" in dir(x) and "relu" in dir(client.ops)
    assert client.ops.relu.__doc__ == tensord.ops.relu.__doc__


def test_argument_mapping(client):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = client.tensor(a)
    i = client.tensor(np.array([[0, 1, 2, 0]]))
    same = np.testing.assert_array_equal
    same(tensord.ops.sum(x, 1).numpy(), a.sum(1))                      # positional attribute
    same(x.sum(dim=[0, 1], keepdim=True).numpy(), a.sum(keepdims=True))
    same(x.transpose(0, 1).numpy(), a.T)
    same(tensord.ops.gather(x, 0, i).numpy(), np.take_along_axis(a, np.array([[0, 1, 2, 0]]), 0))  # torch order
    same(x.reshape(2, 6).numpy(), a.reshape(2, 6))                      # spread shape
    same(x.reshape((6, 2)).numpy(), a.reshape(6, 2))
    same(x.permute(1, 0).numpy(), a.T)
    same(tensord.ops.zeros(2, 3).numpy(), np.zeros((2, 3)))
    same(tensord.ops.full((2, 2), 1.5).numpy(), np.full((2, 2), 1.5))
    same(tensord.ops.arange(5).numpy(), np.arange(5))
    same(tensord.ops.arange(1, 7, 2).numpy(), np.arange(1, 7, 2))
    assert tensord.ops.randint(10, (7,), seed=1).numpy().max() < 10
    same(x.clamp(2, 9).numpy(), np.clip(a, 2, 9))                        # numbers for tensor inputs
    same(x.clamp(None, 9).numpy(), np.minimum(a, 9))
    same(tensord.ops.where(x > 5, x, 0.0).numpy(), np.where(a > 5, a, 0))
    same(x.add(x, alpha=2).numpy(), a + 2 * a)
    same(tensord.ops.linear(x, weight=client.tensor(np.eye(4, dtype=np.float32))).numpy(), a)
    same(tensord.ops.cat([x, x], 1).numpy(), np.concatenate([a, a], 1))  # a list for a variadic input
    same(tensord.ops.stack(x, x).numpy(), np.stack([a, a]))
    same(x.to(tensord.float16).numpy(), a.astype(np.float16))           # a dtype attribute
    same(x.to(np.int32).numpy(), a.astype(np.int32))
    same(tensord.ops.to(x, "float16").numpy(), a.astype(np.float16))       # PyTorch's dtype names too
    same(tensord.ops.softmax(x, dim=np.int64(1)).numpy().argmax(1), a.argmax(1))  # NumPy scalars
    same(client.ops.ones(2).numpy(), np.ones(2))


def test_multiple_outputs(client):
    a = np.array([[3.0, 1.0, 2.0], [0.0, 5.0, 4.0]], dtype=np.float32)
    x = client.tensor(a)
    values, indices = x.max(1)
    np.testing.assert_array_equal(values.numpy(), a.max(1))
    assert x.max(dim=1).indices.tolist() == [0, 1]
    assert x.max().item() == 5.0                      # without dim: one output
    assert x.sort(1).values.tolist() == np.sort(a, 1).tolist()
    parts = x.split(2, 1)
    assert isinstance(parts, tuple) and [p.shape for p in parts] == [(2, 2), (2, 1)]
    assert [p.shape for p in x.split([1, 2], 1)] == [(2, 1), (2, 2)]
    assert [p.shape for p in x.chunk(3, 1)] == [(2, 1)] * 3
    assert [p.shape for p in tensord.ops.chunk(client.tensor(np.zeros((5, 1), np.float32)), 3)] == \
        [(2, 1), (2, 1), (1, 1)]
    assert tensord.ops.zero_(client.tensor([1.0])) is None


def test_argument_errors(client):
    x = client.tensor([1.0, 2.0])
    with pytest.raises(TypeError, match="missing required input 'other'"):
        tensord.ops.matmul(x)
    with pytest.raises(TypeError, match="missing required attribute 'dim'"):
        tensord.ops.cumsum(x)
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        x.relu(bogus=1)
    with pytest.raises(TypeError, match="too many positional arguments"):
        x.relu(1)
    with pytest.raises(TypeError, match="takes 2 tensor input"):
        tensord.ops.matmul(x, x, x)
    with pytest.raises(TypeError, match="optional input 'weight' before it is not"):
        tensord.ops.layer_norm(x, None, x, normalized_shape=[2])
    with pytest.raises(TypeError, match="attribute 'dim' takes ints, not a Tensor"):
        x.sum(dim=x)
    with pytest.raises(TypeError, match="unknown dtype"):
        x.to("complex")
    with pytest.raises(AttributeError, match="no attribute 'no_such_method'"):
        x.no_such_method


def test_raw_call(client):
    x = client.tensor([-1.0, 2.0])
    assert client.call("relu", x).tolist() == [0.0, 2.0]
    values, indices = client.call("max", x, dim=0)
    assert values.item() == 2.0 and indices.item() == 1
    assert client.call("zeros", size=[2], dtype=tensord.int32).tolist() == [0, 0]
    with pytest.raises(TypeError, match="expected a tensord.Tensor"):
        client.call("relu", [1.0])


# ---------------------------------------------------------------- named tensors
def test_named_tensors(client):
    x = client.tensor([1.0, 2.0])
    x.save("pytest/a")
    client.save(x * 2, "pytest/b")
    assert sorted(i.name for i in client.ls("pytest/")) == ["pytest/a", "pytest/b"]
    listed = {i.name: i for i in client.ls("pytest/")}["pytest/b"]
    assert listed.shape == (2,) and listed.dtype == "f32" and listed.bytes == 8 and listed.owner
    assert client.restore("pytest/b").tolist() == [2.0, 4.0]
    with pytest.raises(tensord.Refused, match="pytest/a"):
        (x + 1).save("pytest/a")  # exists
    (x + 1).save("pytest/a", overwrite=True)
    assert client.restore("pytest/a").tolist() == [2.0, 3.0]
    client.rm("pytest/a", "pytest/b")
    assert client.ls("pytest/") == []
    with pytest.raises(tensord.Refused):
        client.restore("pytest/a").numpy()
    with pytest.raises(TypeError):
        client.save([1.0], "pytest/c")


def test_named_tensors_outlive_their_client(daemon):
    daemon.connect().tensor([7.0]).save("pytest/kept")
    gc.collect()
    c = daemon.connect()
    assert c.restore("pytest/kept").item() == 7.0
    c.rm("pytest/kept")


# ---------------------------------------------------------------- pipelining
def test_calls_are_pipelined(client):
    x = client.tensor(np.ones((4, 4), dtype=np.float32))
    before = client.stats()
    y = x
    for _ in range(20):
        y = (y * 0.5).relu() + 0.5
    middle = client.stats()
    assert middle.calls - before.calls == 60 and middle.round_trips == before.round_trips
    assert y.numpy().shape == (4, 4)
    assert client.stats().round_trips == middle.round_trips + 1


def test_an_error_surfaces_at_the_first_wait(client):
    bad = client.tensor(np.ones((2, 3), np.float32)) @ client.tensor(np.ones((2, 3), np.float32))
    chained = bad.relu().sum()  # calls on a failed result still return at once
    with pytest.raises(tensord.Refused, match="matmul"):
        chained.numpy()
    assert client.tensor([1.0]).item() == 1.0  # the client goes on


def test_a_batch_sends_its_calls_together_and_each_fails_alone(client, daemon):
    x = client.tensor(np.arange(4, dtype=np.float32))
    one = client.tensor(np.ones(4, dtype=np.float32))
    x.numpy()
    stats = lambda: next(p for p in client.daemon_stats().principals if p.principal == daemon.principal)
    before = stats()
    with client.batch():
        y = x
        for _ in range(30):
            y = y + one
        bad = x @ client.tensor(np.ones((3, 3), np.float32))  # the upload sends what is held first
        after_bad = y * 2  # runs: it does not need the failed call
    np.testing.assert_array_equal(y.numpy(), np.arange(4, dtype=np.float32) + 30)
    np.testing.assert_array_equal(after_bad.numpy(), (np.arange(4, dtype=np.float32) + 30) * 2)
    with pytest.raises(tensord.Refused, match="matmul"):
        bad.numpy()
    after = stats()
    assert after.ops - before.ops == 32
    assert after.calls - before.calls < 15  # 32 calls did not each travel alone

    with client.batch() as b:
        z = x + one
        b.send()
        z = z + one
    np.testing.assert_array_equal(z.numpy(), np.arange(4, dtype=np.float32) + 2)


def test_a_captured_graph_runs_as_one_request_with_its_elementwise_calls_fused(client, daemon):
    w = client.tensor(np.full((3, 3), 0.5, np.float32))
    b = client.tensor(np.array([1.0, -2.0, 3.0], np.float32))

    def step(x, scale):
        h = (x @ w + b).relu()  # matmul, then add, relu and mul in one kernel that writes h and h * scale
        return h * scale, h.sum()

    graph = client.capture(step, ("f32", (2, 3)), (tensord.float32, [1]))
    assert graph.calls == 5
    assert graph.kernels() == 3  # matmul, add+relu+mul, sum
    stats = lambda: next(p for p in client.daemon_stats().principals if p.principal == daemon.principal)
    for seed in range(2):
        x = np.random.default_rng(seed).standard_normal((2, 3)).astype(np.float32)
        xt, st = client.tensor(x), client.tensor([2.0])
        xt.numpy(), st.numpy()
        before = stats()
        y, total = graph(xt, st)
        h = np.maximum(x @ np.full((3, 3), 0.5, np.float32) + np.array([1, -2, 3], np.float32), 0)
        np.testing.assert_allclose(y.numpy(), h * 2, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(total.numpy(), h.sum(), rtol=1e-5, atol=1e-5)
        assert stats().ops - before.ops == 5  # every captured call counts as an op run

    single = client.capture(lambda x: x + x, ("f32", (2,)))
    np.testing.assert_array_equal(single(client.tensor([1.0, 2.0])).numpy(), [2.0, 4.0])
    with pytest.raises(TypeError, match="the graph takes 1"):
        single()
    with pytest.raises(TypeError, match=r"input 0 is \('f32',\); expected \(dtype, shape\)"):
        client.capture(lambda x: x, ("f32",))
    with pytest.raises(tensord.Error, match="matmul"):
        client.capture(lambda x: x @ x, ("f32", (2, 3)))


# ---------------------------------------------------------------- autograd switches
def test_no_grad(client):
    w = client.tensor([1.0, 2.0], requires_grad=True)
    assert tensord.is_grad_enabled()
    with tensord.no_grad():
        assert not tensord.is_grad_enabled()
        assert not (w * 2).requires_grad
    assert tensord.is_grad_enabled() and (w * 2).requires_grad

    @tensord.no_grad()
    def double(t):
        return t * 2

    assert not double(w).requires_grad and tensord.is_grad_enabled()


# ---------------------------------------------------------------- threads
def test_a_tensor_used_from_another_thread_raises(client):
    x = client.tensor([1.0])
    errors = []

    def worker():
        for use in (lambda: x.numpy(), lambda: x + 1, lambda: client.tensor([2.0]), lambda: x.wait()):
            try:
                use()
            except tensord.ThreadError as error:
                errors.append(str(error))

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert len(errors) == 4
    assert "belongs to thread" in errors[0] and "tensord.connect() in each thread" in errors[0]
    assert x.item() == 1.0  # the owner thread is unaffected


def test_a_client_per_thread(daemon):
    results = {}

    def worker(k):
        c = daemon.connect()
        results[k] = (c.tensor([float(k)]) * 2).item()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {k: 2.0 * k for k in range(4)}


def test_a_handle_dropped_on_another_thread_is_released_by_the_owner(daemon):
    client = daemon.connect()

    def unnamed():
        return len([info for info in client.ls() if not info.name])

    box = [client.tensor([3.0])]
    assert unnamed() == 1

    def worker():
        box.pop()  # the last reference goes away here

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    gc.collect()
    # The owner's next call releases it, and the daemon frees it.
    assert unnamed() == 0


def test_the_gil_is_released_while_waiting_on_the_network():
    """The daemon is stopped, so the main thread's read waits on the network;
    only another Python thread, which needs the GIL, can let it go on. (Were
    the GIL held, that would deadlock: faulthandler then ends the run.)"""
    daemon = Daemon()
    try:
        client = daemon.connect()
        x = client.tensor([1.0, 2.0])
        blocking = threading.Event()

        def resume():
            blocking.wait()
            daemon.process.send_signal(signal.SIGCONT)

        helper = threading.Thread(target=resume)
        helper.start()
        faulthandler.dump_traceback_later(120, exit=True)
        try:
            daemon.process.send_signal(signal.SIGSTOP)
            blocking.set()
            assert x.tolist() == [1.0, 2.0]
        finally:
            faulthandler.cancel_dump_traceback_later()
            daemon.process.send_signal(signal.SIGCONT)
            helper.join()
    finally:
        daemon.stop()


# ---------------------------------------------------------------- progress
def test_progress_bars_for_large_transfers(client, monkeypatch):
    from tensord import _progress

    bars = []

    class FakeBar:
        def __init__(self, total, **kwargs):
            self.total, self.done, self.closed = total, 0, False
            bars.append(self)

        def update(self, n):
            self.done += n

        def close(self):
            self.closed = True

    monkeypatch.setattr(_progress, "_tqdm", FakeBar)
    tensord.set_progress_bars(True, min_bytes=1 << 20)
    try:
        a = np.arange(1 << 20, dtype=np.float32)  # 4 MiB
        t = client.from_numpy(a)
        np.testing.assert_array_equal(t.numpy(), a)
        client.tensor([1.0]).numpy()  # small: no bar
        tensord.set_progress_bars(False)
        client.from_numpy(a).numpy()  # off: no bar
    finally:
        tensord.set_progress_bars()
    assert [(b.total, b.done, b.closed) for b in bars] == [(a.nbytes, a.nbytes, True)] * 2


def test_the_module_documents_itself():
    assert "thread" in tensord.Client.__doc__ and "ThreadError" in tensord.Tensor.__doc__
    assert "ml_dtypes" in tensord.Tensor.numpy.__doc__
    assert os.path.basename(tensord.__file__) == "__init__.py"
    assert set(tensord.__all__) <= set(dir(tensord))
