"""Item assignment (x[key] = value) against NumPy: ints, slices, None and
..., integer index tensors/lists, bool masks; numbers, tensors and arrays
as values; the handle rebinding, autograd and the errors."""

import numpy as np
import pytest

import tensord

rng = np.random.default_rng(3)


def base(shape=(4, 5, 3), dtype=np.float32):
    return (rng.standard_normal(shape) * 10).astype(dtype)


# (key, value) pairs: keys in NumPy's spelling; a value that is an array is
# uploaded (or passed as a list) by the test.
CASES = [
    (1, 7.0),
    (-1, 2.5),
    (slice(1, 3), -1.0),
    (slice(None, None, 2), 4.0),
    (slice(1, None), np.arange(3, dtype=np.float32)),  # broadcast over rows and dims
    ((2, 3), np.full(3, 9.0, np.float32)),
    ((2, 3, 1), 8.0),
    ((slice(None), 1), 5.0),
    ((slice(None), slice(1, 4), 2), -3.0),
    ((Ellipsis, 0), 6.0),
    ((0, Ellipsis, slice(0, 2)), np.ones((5, 2), np.float32)),
    ((slice(1, 3), slice(None), slice(None, None, 2)), np.arange(4, dtype=np.float32).reshape(2, 1, 2)),
    ((None, 0), 1.5),
    ((slice(None), [0, 3]), 2.0),
    ([3, 0], np.arange(15, dtype=np.float32).reshape(5, 3)),
    ((), 11.0),
    (Ellipsis, np.arange(3, dtype=np.float32)),
    (slice(None), 0.5),
]


def case_id(case):
    return repr(case[0]).replace(" ", "")


@pytest.mark.parametrize("key,value", CASES, ids=[case_id(c) for c in CASES])
@pytest.mark.parametrize("value_kind", ["host", "tensor"])
def test_against_numpy(client, key, value, value_kind):
    want = base()
    x = client.from_numpy(want)
    if isinstance(value, np.ndarray) and value_kind == "tensor":
        given = client.from_numpy(value)
    elif value_kind == "tensor":
        given = client.tensor(np.float32(value))  # a 0-d tensor
    else:
        given = value
    x[key] = given
    want[key] = value
    np.testing.assert_array_equal(x.numpy(), want)
    assert x.shape == want.shape and x.dtype is tensord.float32


def test_index_tensor_and_list_rows(client):
    want = base((6, 2))
    x = client.from_numpy(want)
    rows = client.tensor(np.array([4, 0, -1], np.int64))
    x[rows] = client.tensor(np.array([[1, 2], [3, 4], [5, 6]], np.float32))
    want[[4, 0, -1]] = [[1, 2], [3, 4], [5, 6]]
    x[[1, 2]] = 0.0
    want[[1, 2]] = 0.0
    x[client.tensor(np.array([3], np.int32))] = -7.0  # i32 indices too
    want[[3]] = -7.0
    np.testing.assert_array_equal(x.numpy(), want)


def test_bool_masks(client):
    want = base((4, 3))
    x = client.from_numpy(want)
    mask = want > 0
    x[client.from_numpy(mask)] = 0.0  # a number: masked_fill
    want[mask] = 0.0
    np.testing.assert_array_equal(x.numpy(), want)

    mask = want < -5
    x[client.from_numpy(mask)] = client.tensor(np.float32(-5))  # a 0-d tensor
    want[mask] = -5
    np.testing.assert_array_equal(x.numpy(), want)

    mask = np.array([[True, False, True], [False, False, False], [True, True, True], [False, True, False]])
    values = np.arange(mask.sum(), dtype=np.float32) + 100  # one value per true element, in order
    x[client.from_numpy(mask)] = client.from_numpy(values)
    want[mask] = values
    np.testing.assert_array_equal(x.numpy(), want)

    rows = np.array([True, False, False, True])  # a mask of the leading dim: whole rows
    x[client.from_numpy(rows)] = np.array([1, 2, 3], np.float32)
    want[rows] = [1, 2, 3]
    np.testing.assert_array_equal(x.numpy(), want)
    x[rows.tolist()] = client.from_numpy(np.array([[7, 7, 7], [8, 8, 8]], np.float32))  # a list of bools
    want[rows] = [[7, 7, 7], [8, 8, 8]]
    np.testing.assert_array_equal(x.numpy(), want)
    np.testing.assert_array_equal(x[client.from_numpy(rows)].numpy(), want[rows])  # reading: rows too


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.float16, np.bool_], ids=lambda d: np.dtype(d).name)
def test_other_dtypes(client, dtype):
    want = (rng.integers(0, 2, (3, 4)) if dtype == np.bool_ else rng.integers(0, 100, (3, 4))).astype(dtype)
    x = client.from_numpy(want)
    one = dtype(1) if dtype != np.bool_ else True
    x[1] = one
    want[1] = one
    x[:, 2] = client.from_numpy(np.array([0, 1, 0], dtype))
    want[:, 2] = [0, 1, 0]
    x[0, 1:3] = np.array([1, 0], np.int64).astype(dtype)
    want[0, 1:3] = [1, 0]
    np.testing.assert_array_equal(x.numpy(), want)
    assert x.dtype.numpy == np.dtype(dtype)


def test_values_are_converted_to_the_tensors_dtype(client):
    x = client.tensor(np.zeros(4, np.int64))
    x[1:3] = client.tensor(np.array([5.0, 6.0], np.float32))  # a float tensor into an int tensor
    x[3] = 9
    assert x.tolist() == [0, 5, 6, 9] and x.dtype is tensord.int64
    y = client.tensor(np.zeros(3, np.float32))
    y[0] = True  # a bool is 1
    y[1:] = np.array([2, 3], np.int64)
    assert y.tolist() == [1.0, 2.0, 3.0]


def test_the_handle_is_rebound(client):
    x = client.tensor(np.zeros(3, np.float32))
    alias = x  # the same Python object
    before = x.detach()  # another handle to the old daemon tensor
    x[0] = 1.0
    assert alias.tolist() == [1.0, 0.0, 0.0]
    assert before.tolist() == [0.0, 0.0, 0.0]
    x[5:9] = 2.0  # an empty slice changes nothing
    assert x.tolist() == [1.0, 0.0, 0.0]


def test_pipelined_until_read(client):
    x = client.tensor(np.zeros((2, 3), np.float32))
    calls, trips = client.stats().calls, client.stats().round_trips
    x[0] = 1.0
    x[1, 1:] = 2.0
    x[:, 0] += 3.0  # read, add, write back: all calls
    assert client.stats().round_trips == trips  # nothing waited: the shape was known
    assert client.stats().calls > calls
    np.testing.assert_array_equal(x.numpy(), [[4, 1, 1], [3, 2, 2]])


def test_autograd_flows_through_an_assignment(client):
    a_np = base((3, 2))
    v_np = np.array([0.5, -0.5], np.float32)
    c_np = base((3, 2))
    a = client.from_numpy(a_np, requires_grad=True)
    v = client.from_numpy(v_np, requires_grad=True)
    x = a * 2.0  # not a leaf
    assert a.is_leaf and not x.is_leaf
    x[1] = v * 3.0
    assert not x.is_leaf and x.requires_grad
    loss = (x * client.from_numpy(c_np)).sum()
    loss.backward()
    want_a = 2.0 * c_np
    want_a[1] = 0.0  # row 1 was overwritten
    np.testing.assert_allclose(a.grad.numpy(), want_a, rtol=1e-6)
    np.testing.assert_allclose(v.grad.numpy(), 3.0 * c_np[1], rtol=1e-6)
    expect = 2.0 * a_np
    expect[1] = 3.0 * v_np
    np.testing.assert_allclose(x.numpy(), expect, rtol=1e-6)


def test_a_masked_fill_is_differentiable(client):
    a = client.tensor(np.array([1.0, -2.0, 3.0], np.float32), requires_grad=True)
    x = a * 1.0
    x[x < 0] = 0.0
    x.sum().backward()
    assert a.grad.tolist() == [1.0, 0.0, 1.0]


def test_a_leaf_that_requires_grad(client):
    w = client.tensor(np.ones((2, 2), np.float32), requires_grad=True)
    with pytest.raises(RuntimeError, match="no_grad"):
        w[0] = 0.0
    assert w.numpy().tolist() == [[1, 1], [1, 1]]  # unchanged
    optimizer = tensord.optim.SGD([w], lr=0.5)
    (w * 2.0).sum().backward()
    with tensord.no_grad():
        w[0] = 3.0  # written in place of the handle: the optimizer sees it
    assert w.requires_grad and w.is_leaf and w.grad is not None
    optimizer.step()  # w -= 0.5 * 2
    np.testing.assert_array_equal(w.numpy(), [[2, 2], [0, 0]])
    w.grad = None
    (w * w).sum().backward()  # still a leaf of new graphs
    np.testing.assert_array_equal(w.grad.numpy(), [[4, 4], [0, 0]])


def test_errors(client):
    x = client.tensor(np.zeros((3, 4), np.float32))
    with pytest.raises(IndexError, match="out of bounds for dim 0 with size 3"):
        x[3] = 1.0
    with pytest.raises(ValueError, match="step must be positive"):
        x[::-1] = 1.0
    with pytest.raises(ValueError, match=r"cannot be broadcast to the indexing result of shape \[3, 2\]"):
        x[:, 1:3] = np.ones(3, np.float32)
    with pytest.raises(IndexError, match="mask"):
        x[client.tensor(np.array([True, False]))] = 1.0
    with pytest.raises(IndexError, match="single ellipsis"):
        x[..., ...] = 1.0
    with pytest.raises(TypeError, match="value must be a number"):
        x[0] = "one"
    with pytest.raises(IndexError, match="integer"):
        x[client.tensor(np.array([0.0, 1.0], np.float32))] = 1.0
    np.testing.assert_array_equal(x.numpy(), np.zeros((3, 4)))  # nothing changed
