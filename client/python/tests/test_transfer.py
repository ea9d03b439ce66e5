"""Data in and out: every dtype round-trips bit-exact, bfloat16 in both
spellings, numpy(out=...) into a reused array, a 256 MiB tensor round-trips
bit-exact, and Ctrl-C interrupts a long transfer cleanly."""

import signal

import numpy as np
import pytest

import tensord
from tensord import _progress

rng = np.random.default_rng(11)


def edge_values(dtype):
    if dtype == np.bool_:
        return np.array([True, False, True, True, False])
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        return np.array([info.min, info.max, 0, 1, info.min + 1, info.max - 1], dtype=dtype)
    info = np.finfo(dtype)
    return np.array([0.0, -0.0, np.inf, -np.inf, np.nan, info.max, info.tiny, info.smallest_subnormal, -1.5],
                    dtype=dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int32, np.int64, np.uint8, np.bool_],
                         ids=lambda d: np.dtype(d).name)
def test_every_dtype_round_trips_bit_exact(client, dtype):
    values = np.concatenate([edge_values(dtype), rng.integers(0, 2, 64).astype(dtype) if dtype == np.bool_
                             else rng.standard_normal(64).astype(dtype) * 100 if np.issubdtype(dtype, np.floating)
                             else rng.integers(np.iinfo(dtype).min, np.iinfo(dtype).max, 64, dtype=dtype)])
    values = values.reshape(-1, 1)[: values.size // 2 * 2].reshape(2, -1)
    t = client.from_numpy(values)
    assert t.dtype.numpy == np.dtype(dtype) and t.shape == values.shape
    back = t.numpy()
    assert back.dtype == values.dtype and back.shape == values.shape
    assert back.tobytes() == values.tobytes()
    assert t.info().dtype == t.dtype.name  # what the daemon says


def bf16_bits(x):
    """Round-to-nearest-even float32 -> bfloat16 bits (finite values)."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)


def test_bfloat16_as_bits(client, monkeypatch):
    monkeypatch.setattr(tensord._dtypes, "_BF16_NUMPY", None)  # as without ml_dtypes
    bits = np.array([0x3F80, 0xC000, 0x7F80, 0xFF80, 0x7FC0, 0x0001, 0x8000, 0x4049], dtype=np.uint16)
    t = client.tensor(bits, dtype=tensord.bfloat16)
    assert t.dtype == tensord.bfloat16
    back = t.numpy()
    assert back.dtype == np.uint16 and back.tobytes() == bits.tobytes()
    assert t[0].item() == 1.0 and t[1].item() == -2.0 and t[2].item() == np.inf
    assert t[:2].tolist() == [1.0, -2.0]
    floats = rng.standard_normal(100).astype(np.float32)
    rounded = client.tensor(floats, dtype="bf16")  # floats are rounded on the daemon
    assert rounded.dtype == tensord.bfloat16
    np.testing.assert_array_equal(rounded.numpy(), bf16_bits(floats))
    assert "dtype=tensord.bfloat16" in repr(rounded)
    np.testing.assert_array_equal((client.tensor(floats).bfloat16()).numpy(), bf16_bits(floats))


def test_bfloat16_with_ml_dtypes(client):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    values = np.array([1.0, -2.0, 3.140625], dtype=ml_dtypes.bfloat16)
    t = client.from_numpy(values)
    assert t.dtype == tensord.bfloat16
    back = t.numpy()
    assert back.dtype == values.dtype and back.tobytes() == values.tobytes()
    assert t[2].item() == pytest.approx(3.140625)


def test_numpy_into_a_reused_array(client):
    out = np.empty((3, 1000), np.float32)
    for _ in range(2):
        values = rng.standard_normal((3, 1000)).astype(np.float32)
        assert client.from_numpy(values).numpy(out=out) is out
        assert out.tobytes() == values.tobytes()
    big = rng.integers(0, 256, (6 << 20) + 5, dtype=np.uint8)  # past the receive worker's threshold
    out = np.zeros_like(big)
    client.from_numpy(big).numpy(out=out)
    assert np.array_equal(out, big)
    bits = np.array([0x3F80, 0xC000], dtype=np.uint16)  # bf16 as its bits
    out = np.zeros(2, np.uint16)
    client.tensor(bits, dtype=tensord.bfloat16).numpy(out=out)
    assert out.tobytes() == bits.tobytes()


def test_numpy_into_refuses_a_mismatched_array(client):
    t = client.from_numpy(np.arange(6, dtype=np.float32).reshape(2, 3))
    for out, what in ((np.zeros((3, 2), np.float32), "f32[3, 2]"), (np.zeros((2, 3), np.float16), "f16[2, 3]"),
                      (np.zeros(6, np.float32), "f32[6]")):
        with pytest.raises(tensord.Error) as e:
            t.numpy(out=out)
        assert "Tensor.numpy(out=...)" in str(e.value) and "f32[2, 3]" in str(e.value) and what in str(e.value)
    with pytest.raises(ValueError, match="C-contiguous"):
        t.numpy(out=np.zeros((3, 2), np.float32).T)
    read_only = np.zeros((2, 3), np.float32)
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match="writable"):
        t.numpy(out=read_only)
    with pytest.raises(TypeError, match="NumPy array"):
        t.numpy(out=[0.0] * 6)
    with pytest.raises(TypeError, match="no tensord dtype"):
        t.numpy(out=np.zeros((2, 3), np.float64))
    assert t.numpy(out=np.empty((2, 3), np.float32)).tolist() == [[0, 1, 2], [3, 4, 5]]  # the handle still works


def test_a_256_mib_tensor_round_trips_bit_exact(client):
    raw = rng.integers(0, 256, 256 << 20, dtype=np.uint8)
    values = raw.view(np.float32).reshape(4096, -1)  # any bit pattern, NaN payloads included
    t = client.from_numpy(values)
    back = t.numpy()
    assert back.shape == values.shape and back.dtype == np.float32
    assert np.array_equal(back.view(np.uint8), values.view(np.uint8))
    assert t.info().bytes == 256 << 20


class InterruptingBar:
    """A stand-in for tqdm whose update() sends this process SIGINT, as a
    Ctrl-C in the middle of the transfer would."""

    bars = []

    def __init__(self, total, **kwargs):
        self.total, self.done = total, 0
        InterruptingBar.bars.append(self)

    def update(self, n):
        self.done += n
        if 0 < self.done < self.total:
            signal.raise_signal(signal.SIGINT)

    def close(self):
        pass


@pytest.fixture
def ctrl_c(monkeypatch):
    InterruptingBar.bars = []
    monkeypatch.setattr(_progress, "_tqdm", InterruptingBar)
    monkeypatch.setattr(_progress, "_enabled", True)
    monkeypatch.setattr(_progress, "_min_bytes", 1 << 20)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    return InterruptingBar.bars


def unnamed(client):
    return len([info for info in client.ls() if not info.name])


def test_ctrl_c_interrupts_an_upload(daemon, ctrl_c):
    client = daemon.connect()
    values = np.zeros(16 << 20, dtype=np.uint8)
    with pytest.raises(KeyboardInterrupt):
        client.from_numpy(values)
    assert len(ctrl_c) == 1 and 0 < ctrl_c[0].done < values.nbytes  # stopped part way
    # The connection goes on, and the daemon kept nothing of the upload.
    kept = client.tensor([1.0, 2.0])
    assert kept.tolist() == [1.0, 2.0]
    assert unnamed(client) == 1


def test_ctrl_c_interrupts_a_download(daemon, ctrl_c):
    client = daemon.connect()
    with tensord.no_grad():
        t = tensord.ops.zeros(16 << 20, dtype="u8", client=client)
    with pytest.raises(KeyboardInterrupt):
        t.numpy()
    assert len(ctrl_c) == 1 and 0 < ctrl_c[0].done < 16 << 20
    assert t[:3].tolist() == [0, 0, 0]  # the tensor and the connection are fine
    tensord.set_progress_bars(False)  # (the fixture restores the settings)
    assert t.numpy().size == 16 << 20
