"""The element types of tensord tensors and their NumPy counterparts.

bfloat16 has no NumPy dtype of its own. When the ml_dtypes package is
installed, bf16 tensors come back as ml_dtypes.bfloat16 arrays and such
arrays upload as bf16; without it they come back as uint16 arrays of the raw
bits, and c.tensor(x, dtype=tensord.bfloat16) takes a uint16 array of bits
or converts a float array.
"""

import numpy as np

try:  # optional: a real NumPy bfloat16
    import ml_dtypes as _ml_dtypes

    _BF16_NUMPY = np.dtype(_ml_dtypes.bfloat16)
except ImportError:
    _ml_dtypes = None
    _BF16_NUMPY = None


class dtype:
    """A tensord element type: tensord.float32, float16, bfloat16, int32,
    int64, uint8 or bool. Compares equal to its short name ('f32') too."""

    __slots__ = ("name", "long_name", "itemsize", "is_floating_point", "_storage")

    def __init__(self, name, long_name, storage, is_floating_point):
        self.name = name  # the daemon's name: f32, f16, bf16, i32, i64, u8, bool
        self.long_name = long_name
        self._storage = np.dtype(storage)  # the NumPy dtype of the raw elements
        self.itemsize = self._storage.itemsize
        self.is_floating_point = is_floating_point

    @property
    def numpy(self):
        """The NumPy dtype that numpy() returns for this type (bf16: ml_dtypes'
        bfloat16 when installed, else uint16 holding the bits)."""
        if self.name == "bf16" and _BF16_NUMPY is not None:
            return _BF16_NUMPY
        return self._storage

    def __repr__(self):
        return "tensord." + self.long_name

    def __eq__(self, other):
        if isinstance(other, dtype):
            return self is other
        if isinstance(other, str):
            return other in (self.name, self.long_name)
        return NotImplemented

    def __hash__(self):
        return hash(self.name)

    def __reduce__(self):
        return (as_dtype, (self.name,))


float32 = dtype("f32", "float32", np.float32, True)
float16 = dtype("f16", "float16", np.float16, True)
bfloat16 = dtype("bf16", "bfloat16", np.uint16, True)
int32 = dtype("i32", "int32", np.int32, False)
int64 = dtype("i64", "int64", np.int64, False)
uint8 = dtype("u8", "uint8", np.uint8, False)
bool_ = dtype("bool", "bool", np.bool_, False)

ALL = (float32, float16, bfloat16, int32, int64, uint8, bool_)
BY_NAME = {d.name: d for d in ALL}
_BY_TEXT = {**BY_NAME, **{d.long_name: d for d in ALL}, "float": float32, "half": float16, "int": int32,
            "long": int64}
_BY_NUMPY = {np.dtype(np.float32): float32, np.dtype(np.float16): float16, np.dtype(np.int32): int32,
             np.dtype(np.int64): int64, np.dtype(np.uint8): uint8, np.dtype(np.bool_): bool_}
if _BF16_NUMPY is not None:
    _BY_NUMPY[_BF16_NUMPY] = bfloat16


def as_dtype(value):
    """A tensord dtype from a dtype, its name ('f32', 'float32', 'half' ...),
    or a NumPy dtype or type (np.float32 ...). Raises TypeError otherwise."""
    if isinstance(value, dtype):
        return value
    if isinstance(value, str):
        found = _BY_TEXT.get(value)
        if found is None:
            raise TypeError(f"unknown dtype {value!r} (expected one of: "
                            f"{', '.join(d.long_name for d in ALL)}, or f32, f16, bf16, i32, i64, u8)")
        return found
    try:
        npdtype = np.dtype(value)
    except TypeError:
        raise TypeError(f"expected a dtype (tensord.float32, 'f32', np.float32 ...); got {value!r}") from None
    found = from_numpy(npdtype)
    if found is None:
        raise TypeError(f"NumPy dtype {npdtype} has no tensord counterpart (tensord has "
                        f"{', '.join(d.long_name for d in ALL)})")
    return found


def from_numpy(npdtype):
    """The tensord dtype of NumPy dtype `npdtype` exactly (any byte order), or None."""
    npdtype = np.dtype(npdtype)
    if npdtype.byteorder not in ("=", "|"):
        npdtype = npdtype.newbyteorder("=")
    return _BY_NUMPY.get(npdtype)


def bf16_bits_to_float32(bits):
    """float32 values of bf16 bit patterns (a uint16 array): exact."""
    bits = np.asarray(bits, dtype=np.uint16)
    return (bits.reshape(-1).astype(np.uint32) << 16).view(np.float32).reshape(bits.shape)
