#!/usr/bin/python3
"""An independent safetensors reader and writer, written from the format's
specification with numpy alone (Debian packages no safetensors library), so
the integration tests can check tensord's files against a second
implementation in both directions.

The format: an unsigned little-endian 64-bit header length N, N bytes of
UTF-8 JSON mapping each tensor name to {"dtype", "shape", "data_offsets":
[BEGIN, END]} (offsets into the byte buffer that follows the header), plus an
optional "__metadata__" object of strings; then the byte buffer, which the
tensors must cover entirely, without holes or overlaps. Data is
little-endian, row-major.

  safetensors_np.py write FILE   writes a fixed set of tensors in every dtype
                                 tensord knows; prints their manifest
  safetensors_np.py read FILE    validates FILE strictly; prints its manifest
  safetensors_np.py big FILE N   writes one F32 tensor "big" of N elements

A manifest is JSON: {"metadata": {...}, "tensors": {name: {"dtype", "shape",
"sha256"}}}, sha256 over the tensor's bytes as stored. Exit status 1 with a
message on stderr when a file breaks the format.
"""

import hashlib
import json
import struct
import sys

import numpy as np

# dtype name -> numpy dtype of its stored bytes. numpy has no bfloat16: BF16
# is carried as its 16-bit patterns.
DTYPES = {
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),
    "I32": np.dtype("<i4"),
    "I64": np.dtype("<i8"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}


class BadFile(Exception):
    pass


def manifest_entry(dtype, array):
    return {"dtype": dtype, "shape": list(array.shape), "sha256": hashlib.sha256(array.tobytes()).hexdigest()}


def write(path, tensors, metadata=None):
    """tensors: list of (name, dtype, array), written in that order."""
    header = {}
    if metadata:
        header["__metadata__"] = metadata
    offset = 0
    for name, dtype, array in tensors:
        nbytes = array.astype(DTYPES[dtype], copy=False).nbytes
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    text = json.dumps(header).encode("utf-8")
    text += b" " * (-(8 + len(text)) % 8)  # the data starts 8-aligned, as the reference writer does it
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, dtype, array in tensors:
            f.write(np.ascontiguousarray(array.astype(DTYPES[dtype], copy=False)).tobytes())


def read(path):
    with open(path, "rb") as f:
        blob = f.read()
    if len(blob) < 8:
        raise BadFile("%s: %d bytes, shorter than the header length" % (path, len(blob)))
    (n,) = struct.unpack("<Q", blob[:8])
    if 8 + n > len(blob):
        raise BadFile("%s: header length %d past the end of the file" % (path, n))
    try:
        header = json.loads(blob[8 : 8 + n].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise BadFile("%s: header is not JSON: %s" % (path, e))
    if not isinstance(header, dict):
        raise BadFile("%s: header is not an object" % path)
    buffer = blob[8 + n :]
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise BadFile("%s: __metadata__ is not an object of strings" % path)
    spans = []
    tensors = {}
    for name, info in header.items():
        if set(info) != {"dtype", "shape", "data_offsets"}:
            raise BadFile("%s: tensor %r has keys %s" % (path, name, sorted(info)))
        dtype = info["dtype"]
        if dtype not in DTYPES:
            raise BadFile("%s: tensor %r has dtype %r" % (path, name, dtype))
        shape = info["shape"]
        begin, end = info["data_offsets"]
        if not all(isinstance(d, int) and d >= 0 for d in shape) or not 0 <= begin <= end <= len(buffer):
            raise BadFile("%s: tensor %r has shape %r, offsets %r" % (path, name, shape, info["data_offsets"]))
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if count * DTYPES[dtype].itemsize != end - begin:
            raise BadFile("%s: tensor %r: shape %r of %s does not fill [%d, %d)" % (path, name, shape, dtype, begin, end))
        array = np.frombuffer(buffer, dtype=DTYPES[dtype], count=count, offset=begin).reshape(shape)
        if dtype == "BOOL" and not np.all(np.frombuffer(buffer[begin:end], dtype="u1") <= 1):
            raise BadFile("%s: tensor %r holds bool bytes other than 0 and 1" % (path, name))
        spans.append((begin, end, name))
        tensors[name] = manifest_entry(dtype, array)
    covered = 0
    for begin, end, name in sorted(spans):
        if begin != covered:
            raise BadFile("%s: tensor %r starts at %d, expected %d (a hole or an overlap)" % (path, name, begin, covered))
        covered = end
    if covered != len(buffer):
        raise BadFile("%s: %d bytes of data, tensors cover %d" % (path, len(buffer), covered))
    return {"metadata": metadata, "tensors": tensors}


def sample_tensors():
    rng = np.random.default_rng(20261122)
    f32 = rng.standard_normal((3, 5)).astype("<f4")
    return [
        ("bool", "BOOL", rng.integers(0, 2, (7,)).astype("?")),
        ("f32", "F32", f32),
        ("f16", "F16", rng.standard_normal((2, 3, 4)).astype("<f2")),
        # bf16 is the top half of an f32: these are the patterns of f32 values.
        ("bf16", "BF16", (f32.reshape(-1).view("<u4") >> 16).astype("<u2").reshape(5, 3)),
        ("i32", "I32", rng.integers(-(2**31), 2**31 - 1, (4, 2), dtype=np.int64).astype("<i4")),
        ("i64", "I64", rng.integers(-(2**62), 2**62, (3,), dtype=np.int64).astype("<i8")),
        ("u8", "U8", rng.integers(0, 256, (9,)).astype("u1")),
        ("scalar", "F32", np.array(2.5, dtype="<f4")),
        ("empty", "I32", np.zeros((0, 4), dtype="<i4")),
        ("nested/name.with:chars", "U8", np.arange(5, dtype="u1")),
    ]


def main(argv):
    try:
        if len(argv) == 3 and argv[1] == "write":
            tensors = sample_tensors()
            write(argv[2], tensors, {"writer": "safetensors_np"})
            print(json.dumps(read(argv[2])))
        elif len(argv) == 3 and argv[1] == "read":
            print(json.dumps(read(argv[2])))
        elif len(argv) == 4 and argv[1] == "big":
            n = int(argv[3])
            big = (np.arange(n, dtype=np.int64) % 65521).astype("<f4") * np.float32(0.5)
            write(argv[2], [("big", "F32", big)])
            print(json.dumps(read(argv[2])))
        else:
            sys.stderr.write(__doc__)
            return 2
    except BadFile as e:
        sys.stderr.write("safetensors_np: %s\n" % e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
