"""Safetensors files on the daemon's disk (Client.load_file, save_file) and
the daemon's stats (Client.daemon_stats), against a daemon whose config
lists a files directory; the files are read and written here with NumPy as
an independent check of the format."""

import json
import pathlib
import shutil
import signal
import struct
import tempfile

import numpy as np
import pytest

import tensord
from conftest import PRINCIPAL, Daemon
from tensord import _progress

rng = np.random.default_rng(5)

ST_DTYPES = {"F32": np.float32, "F16": np.float16, "I32": np.int32, "I64": np.int64, "U8": np.uint8,
             "BOOL": np.bool_}
ST_NAMES = {np.dtype(v): k for k, v in ST_DTYPES.items()}


def write_safetensors(path, tensors):
    """A safetensors file of NumPy arrays, written the plain way."""
    header, offset, blobs = {}, 0, []
    for name, array in tensors.items():
        data = np.ascontiguousarray(array).tobytes()
        header[name] = {"dtype": ST_NAMES[array.dtype], "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    path.write_bytes(struct.pack("<Q", len(encoded)) + encoded + b"".join(blobs))


def read_safetensors(path):
    """{name: array} of a safetensors file."""
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + length])
    data = raw[8 + length:]
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        out[name] = np.frombuffer(data[begin:end], dtype=ST_DTYPES[entry["dtype"]]).reshape(entry["shape"])
    return out


def sample_tensors():
    return {
        "f32": rng.standard_normal((4, 3)).astype(np.float32),
        "f16": rng.standard_normal(5).astype(np.float16),
        "i32": rng.integers(-1000, 1000, (2, 3), dtype=np.int32),
        "i64": np.array([np.iinfo(np.int64).min, 0, np.iinfo(np.int64).max], np.int64),
        "u8": rng.integers(0, 256, 17, dtype=np.uint8),
        "bool": np.array([True, False, True]),
        "scalar": np.array(2.5, np.float32),
        "empty": np.zeros((0, 3), np.int64),
    }


@pytest.fixture(scope="module")
def files_dir():
    path = pathlib.Path(tempfile.mkdtemp(prefix="tensord-pytest-files-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def files_daemon(files_dir):
    d = Daemon(extra={"files": {"dirs": [str(files_dir)]}})
    yield d
    d.stop()


@pytest.fixture(scope="module")
def fc(files_daemon):
    return files_daemon.connect()


def test_save_file_writes_what_numpy_reads(fc, files_dir):
    tensors = sample_tensors()
    for name, array in tensors.items():
        fc.from_numpy(array).save("w/" + name, overwrite=True)
    result = fc.save_file("model.safetensors", prefix="w/")
    assert isinstance(result, tensord._core.FileTransfer)
    assert result.path == str(files_dir / "model.safetensors")
    assert result.bytes == (files_dir / "model.safetensors").stat().st_size
    assert sorted(result.names) == sorted("w/" + name for name in tensors)
    assert "FileTransfer(path=" in repr(result) and "'w/f32'" in repr(result)
    as_dict = result.as_dict()
    assert as_dict["path"] == result.path and len(as_dict["tensors"]) == len(tensors)
    read = read_safetensors(files_dir / "model.safetensors")
    assert sorted(read) == sorted(tensors)  # named without the prefix
    for name, array in tensors.items():
        assert read[name].dtype == array.dtype and read[name].shape == array.shape
        assert read[name].tobytes() == array.tobytes(), name

    # Chosen names only.
    some = fc.save_file("some.safetensors", names=["f32", "u8"], prefix="w/")
    assert sorted(some.names) == ["w/f32", "w/u8"]
    assert sorted(read_safetensors(files_dir / "some.safetensors")) == ["f32", "u8"]


def test_load_file_reads_what_numpy_wrote(fc, files_dir):
    tensors = sample_tensors()
    write_safetensors(files_dir / "np.safetensors", tensors)
    result = fc.load_file("np.safetensors", prefix="np/")  # relative: in the first files dir
    assert result.path == str(files_dir / "np.safetensors")
    assert [t.name for t in result.tensors] == ["np/" + name for name in tensors]  # file order
    assert result.bytes == sum(array.nbytes for array in tensors.values())
    for info in result.tensors:
        array = tensors[info.name[len("np/"):]]
        assert info.dtype == tensord._dtypes.from_numpy(array.dtype).name and info.shape == array.shape
        back = fc.restore(info.name).numpy()
        assert back.dtype == array.dtype and back.shape == array.shape
        assert back.tobytes() == array.tobytes(), info.name
    assert {t.name for t in fc.ls("np/")} == {t.name for t in result.tensors}


def test_save_then_load_is_the_identity(fc, files_dir):
    values = rng.standard_normal((8, 8)).astype(np.float32)
    fc.from_numpy(values).save("rt/a", overwrite=True)
    fc.save_file(files_dir / "rt.safetensors", names="a", prefix="rt/", overwrite=True)  # a path object, one name
    fc.rm("rt/a")
    fc.load_file(files_dir / "rt.safetensors", prefix="rt/")
    np.testing.assert_array_equal(fc.restore("rt/a").numpy(), values)


def test_existing_files_and_names_need_overwrite(fc, files_dir):
    fc.tensor([1.0, 2.0]).save("ow/x", overwrite=True)
    fc.save_file("ow.safetensors", prefix="ow/", overwrite=True)
    with pytest.raises(tensord.Refused, match="exists"):
        fc.save_file("ow.safetensors", prefix="ow/")
    fc.save_file("ow.safetensors", prefix="ow/", overwrite=True)
    with pytest.raises(tensord.Refused, match="ow/x"):
        fc.load_file("ow.safetensors", prefix="ow/")
    fc.tensor([5.0]).save("ow/x", overwrite=True)
    fc.load_file("ow.safetensors", prefix="ow/", overwrite=True)
    assert fc.restore("ow/x").tolist() == [1.0, 2.0]


def test_bad_paths_and_files_are_refused(fc, files_dir):
    with pytest.raises(tensord.Refused, match="files.dirs"):
        fc.load_file("/etc/passwd")
    with pytest.raises(tensord.Refused, match="missing.safetensors"):
        fc.load_file("missing.safetensors")
    (files_dir / "broken.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}")
    with pytest.raises(tensord.Refused, match="broken.safetensors"):
        fc.load_file("broken.safetensors", prefix="broken/")
    assert fc.ls("broken/") == []  # nothing loaded
    with pytest.raises(TypeError, match="names must be tensor names"):
        fc.save_file("x.safetensors", names=[fc.tensor([1.0])])
    assert fc.tensor([3.0]).item() == 3.0  # the connection goes on


def test_without_files_dirs_the_daemon_refuses(client):
    with pytest.raises(tensord.Refused, match="files.dirs"):
        client.load_file("model.safetensors")


class RecordingBar:
    """A stand-in for tqdm that records what it is told."""

    bars = []

    def __init__(self, total, desc=None, **kwargs):
        self.total, self.desc, self.done = total, desc, 0
        RecordingBar.bars.append(self)

    def update(self, n):
        self.done += n

    def close(self):
        pass


class InterruptingBar(RecordingBar):
    """Sends this process SIGINT at the first update, as a Ctrl-C would."""

    def update(self, n):
        super().update(n)
        signal.raise_signal(signal.SIGINT)


@pytest.fixture
def bars(monkeypatch):
    monkeypatch.setattr(_progress, "_enabled", True)
    monkeypatch.setattr(_progress, "_min_bytes", 1 << 20)
    RecordingBar.bars = []
    return RecordingBar.bars


def test_load_and_save_show_progress(fc, files_dir, bars, monkeypatch):
    monkeypatch.setattr(_progress, "_tqdm", RecordingBar)
    big = rng.integers(0, 256, 3 << 20, dtype=np.uint8)
    write_safetensors(files_dir / "big.safetensors", {"big": big})
    fc.load_file("big.safetensors", prefix="big/", overwrite=True)
    assert [b.desc for b in bars] == ["load"]
    assert bars[0].total == big.nbytes and bars[0].done == big.nbytes
    fc.save_file("big2.safetensors", prefix="big/", overwrite=True)
    assert [b.desc for b in bars] == ["load", "save"]
    assert bars[1].done == bars[1].total > 0
    assert np.array_equal(read_safetensors(files_dir / "big2.safetensors")["big"], big)


def test_ctrl_c_interrupts_a_load(files_daemon, files_dir, bars, monkeypatch):
    monkeypatch.setattr(_progress, "_tqdm", InterruptingBar)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    client = files_daemon.connect()
    write_safetensors(files_dir / "huge.safetensors", {"huge": np.zeros(24 << 20, np.uint8)})
    with pytest.raises(KeyboardInterrupt):
        client.load_file("huge.safetensors", prefix="huge/", overwrite=True)
    assert len(bars) == 1 and 0 < bars[0].done <= bars[0].total
    assert client.tensor([1.0, 2.0]).sum().item() == 3.0  # the connection goes on
    # The daemon finished the load or dropped it, whole: all or nothing.
    assert [t.name for t in client.ls("huge/")] in ([], ["huge/huge"])


def test_daemon_stats(fc):
    a = fc.tensor(rng.standard_normal((3, 3)).astype(np.float32))
    (a @ a).relu().numpy()
    stats = fc.daemon_stats()
    assert isinstance(stats, tensord._core.DaemonStats)
    info = fc.info()
    assert stats.version == info.version and stats.device.name == info.device.name
    assert stats.uptime_seconds > 0 and stats.connections >= 1 and stats.sessions >= 1
    assert stats.bytes_in > 0 and stats.bytes_out > 0 and stats.ops_executed >= 2
    matmul = stats.op("matmul")
    assert matmul is not None and matmul.completed >= 1 and matmul.latency_max >= matmul.latency_p50 >= 0
    assert stats.op("no_such_op") is None
    me = [p for p in stats.principals if p.principal == PRINCIPAL]
    assert len(me) == 1 and me[0].calls > 0 and me[0].ops >= 2 and me[0].sessions >= 1
    text = repr(stats)
    assert text.startswith("DaemonStats(version=") and "ops=" in text and "principals=" in text
    assert repr(matmul).startswith("OpStats(op='matmul', completed=")
    assert repr(me[0]).startswith(f"PrincipalStats(principal='{PRINCIPAL}'")
    plain = json.loads(json.dumps(stats.as_dict()))  # plain data all the way down
    assert plain["version"] == stats.version and plain["device"]["name"] == stats.device.name
    assert any(o["op"] == "matmul" for o in plain["ops"])
    assert plain["memory"]["live_bytes"] == stats.memory.live_bytes
    assert "DeviceInfo(name=" in repr(stats.device) and "MemoryStats(live_bytes=" in repr(stats.memory)


def test_rights_are_the_policys(tmp_path):
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"principals": {PRINCIPAL: {"rules": ["+@all", "~*:rwd"]}}}))
    files = tmp_path / "files"
    files.mkdir()
    d = Daemon(extra={"policy_file": str(policy), "files": {"dirs": [str(files)]}})
    try:
        c = d.connect()
        c.tensor([1.0]).save("x")
        with pytest.raises(tensord.Refused, match="admin:usage"):
            c.daemon_stats()
        with pytest.raises(tensord.Refused, match="files:save"):
            c.save_file("x.safetensors", names=["x"])
        assert not (files / "x.safetensors").exists()
        assert c.restore("x").tolist() == [1.0]
    finally:
        d.stop()
