"""tensord.Tensor: a handle to a tensor held by the daemon."""

import numbers
import types

import numpy as np

from . import _dtypes
from ._progress import transfer_bar

# slice's default end: "to the end of the dim".
_END = (1 << 63) - 1
# Tensors up to this size show their values in repr().
_REPR_MAX_BYTES = 1 << 20


def _is_number(value):
    return isinstance(value, (numbers.Number, np.generic)) and not isinstance(value, (str, bytes))


def _is_int(value):
    return isinstance(value, (numbers.Integral, np.integer)) and not isinstance(value, (bool, np.bool_))


class Tensor:
    """A tensor held by a tensord daemon, as a handle.

    Made by a Client (c.tensor, c.from_numpy, c.restore) or by ops on other
    tensors. Every op of the daemon is a method (x.relu(), x.sum(dim=1)) and
    a function in tensord.ops; operators (+ - * / @ ** comparisons, unary -)
    and indexing (x[0], x[1:3], x[..., None], x[index_tensor], x[bool_mask])
    are ops too. Calls are pipelined: they return at once, and an error in
    one (a bad shape) is raised by the first call that waits: numpy(),
    item(), wait(), or the properties shape and dtype.

    Thread rule: a tensor belongs to the thread that created its Client; using
    it from another thread raises tensord.ThreadError (connect in each thread
    instead).
    """

    __slots__ = ("_h", "_client", "_meta", "__weakref__")
    # NumPy defers binary operators with a Tensor to the Tensor's reflected ones.
    __array_ufunc__ = None

    def __init__(self, handle, client):
        self._h = handle  # tensord._core.Tensor
        self._client = client
        self._meta = None  # (dtype, shape) once known: a tensor never changes either

    # ------------------------------------------------------------ metadata
    def _info(self):
        if self._meta is None:
            info = self._h.info()
            self._meta = (_dtypes.BY_NAME[info.dtype], tuple(info.shape))
        return self._meta

    @property
    def client(self):
        """The Client that made this tensor."""
        return self._client

    @property
    def dtype(self):
        """The element type (waits for the tensor the first time)."""
        return self._info()[0]

    @property
    def shape(self):
        """The shape, as a tuple (waits for the tensor the first time)."""
        return self._info()[1]

    def size(self, dim=None):
        """The shape, or the size of dim `dim` (as torch.Tensor.size)."""
        shape = self.shape
        return shape if dim is None else shape[dim]

    @property
    def ndim(self):
        """The number of dims."""
        return len(self.shape)

    def dim(self):
        """The number of dims."""
        return len(self.shape)

    def numel(self):
        """The number of elements."""
        return int(np.prod(self.shape, dtype=np.int64))

    def is_floating_point(self):
        return self.dtype.is_floating_point

    @property
    def T(self):
        """The last two dims swapped (the transpose of a matrix)."""
        return self._op("transpose", dim0=-2, dim1=-1)

    mT = T

    def info(self):
        """What the daemon knows of the tensor: id, name, owner, dtype, shape, bytes (waits)."""
        return self._h.info()

    # ------------------------------------------------------------ data
    def numpy(self):
        """The tensor's values as a new NumPy array (waits; one round trip).

        bf16 comes back as ml_dtypes.bfloat16 when that package is installed,
        else as uint16 holding the bits. Large downloads show a tqdm bar when
        tqdm is installed; Ctrl-C interrupts them (KeyboardInterrupt)."""
        with transfer_bar("download") as bar:
            info, raw = self._h.download(bar)
        dtype = _dtypes.BY_NAME[info.dtype]
        self._meta = (dtype, tuple(info.shape))
        return raw.view(dtype.numpy).reshape(info.shape)

    def __array__(self, dtype=None, copy=None):
        array = self.numpy()
        return array if dtype is None else array.astype(dtype)

    def tolist(self):
        """The values as (nested) Python lists (waits)."""
        return self._floats_for_humans(self.numpy()).tolist()

    def item(self):
        """The value of a one-element tensor as a Python number (waits)."""
        array = self.numpy()
        if array.size != 1:
            raise ValueError(f"item(): the tensor has {array.size} elements (shape {list(array.shape)}); "
                             "item() needs exactly one")
        return self._floats_for_humans(array).reshape(()).item()

    def _floats_for_humans(self, array):
        # bf16 bits (no ml_dtypes) read as the numbers they encode.
        if self._meta[0] is _dtypes.bfloat16:
            return _dtypes.bf16_bits_to_float32(array.view(np.uint16)) if array.dtype == np.uint16 \
                else array.astype(np.float32)
        return array

    def __reduce__(self):
        raise TypeError("a tensord.Tensor is a handle to a daemon's tensor and cannot be pickled or copied; "
                        "use numpy() for its values, or save(name) to keep it on the daemon")

    def wait(self):
        """Waits until the tensor exists on the daemon; raises the error of the
        call that made it, if it failed. Returns the tensor."""
        self._h.wait()
        return self

    def save(self, name, overwrite=False):
        """Names the tensor on the daemon so it outlives this client
        (Client.restore finds it again). Waits."""
        self._h.save(name, overwrite)
        return self

    # ------------------------------------------------------------ autograd
    @property
    def requires_grad(self):
        """Whether calls on this tensor are recorded for backward()."""
        return self._h.requires_grad

    @requires_grad.setter
    def requires_grad(self, on):
        self._h.requires_grad = bool(on)

    def requires_grad_(self, on=True):
        """Marks this tensor (a leaf: no recorded call made it) as needing a
        gradient; returns it."""
        self._h.requires_grad = bool(on)
        return self

    @property
    def grad(self):
        """The gradient backward() accumulated into this leaf (a Tensor on the
        daemon), or None."""
        handle = self._h.grad
        return None if handle is None else Tensor(handle, self._client)

    @grad.setter
    def grad(self, value):
        if value is not None and not isinstance(value, Tensor):
            raise TypeError(f"grad: expected a tensord.Tensor or None; got {type(value).__name__}")
        self._h.grad = None if value is None else value._h

    def backward(self, gradient=None):
        """Backpropagates from this tensor (gradient: ones of its shape by
        default), accumulating .grad of the leaves that require it. Issues
        the backward ops pipelined; nothing waits."""
        if gradient is not None and not isinstance(gradient, Tensor):
            gradient = self._client.tensor(gradient)
        self._h.backward(None if gradient is None else gradient._h)

    def detach(self):
        """The same daemon tensor without recorded history."""
        return Tensor(self._h.detach(), self._client)

    # ------------------------------------------------------------ ops as methods
    def __getattr__(self, name):
        # Only reached for names the class does not define: the daemon's ops.
        if name.startswith("_"):
            raise AttributeError(name)
        function = self._client._opset.functions.get(name)
        if function is None:
            raise AttributeError(f"'tensord.Tensor' has no attribute {name!r} (and the daemon has no op {name!r})")
        return types.MethodType(function, self)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._client._opset.functions))

    def _op(self, name, *args, **kwargs):
        return self._client._opset.functions[name](self, *args, **kwargs)

    def to(self, dtype):
        """A copy converted to `dtype` (tensord.float16, 'bf16', np.int32 ...)."""
        return self._op("to", dtype=_dtypes.as_dtype(dtype).name)

    def float(self):
        return self.to(_dtypes.float32)

    def half(self):
        return self.to(_dtypes.float16)

    def bfloat16(self):
        return self.to(_dtypes.bfloat16)

    def int(self):
        return self.to(_dtypes.int32)

    def long(self):
        return self.to(_dtypes.int64)

    def byte(self):
        return self.to(_dtypes.uint8)

    def bool(self):
        return self.to(_dtypes.bool_)

    # ------------------------------------------------------------ operators
    def _operand(self, other):
        """`other` as an op argument: a Tensor, a number, or None when it is
        neither (the operator then returns NotImplemented)."""
        if isinstance(other, Tensor) or _is_number(other):
            return other
        if isinstance(other, (np.ndarray, list, tuple)):
            return self._client.tensor(other)
        return None

    def _binary(self, op, other, **attrs):
        other = self._operand(other)
        if other is None:
            return NotImplemented
        return self._op(op, other, **attrs)

    def __add__(self, other):
        return self._binary("add", other)

    def __radd__(self, other):
        return self._binary("add", other)

    def __sub__(self, other):
        return self._binary("sub", other)

    def __rsub__(self, other):
        other = self._operand(other)
        if other is None:
            return NotImplemented
        return other - self if isinstance(other, Tensor) else self._op("neg")._op("add", other)

    def __mul__(self, other):
        return self._binary("mul", other)

    def __rmul__(self, other):
        return self._binary("mul", other)

    def __truediv__(self, other):
        return self._binary("div", other)

    def __rtruediv__(self, other):
        other = self._operand(other)
        if other is None:
            return NotImplemented
        return other / self if isinstance(other, Tensor) else self._op("reciprocal")._op("mul", other)

    def __floordiv__(self, other):
        return self._binary("div", other, rounding_mode="floor")

    def __mod__(self, other):
        return self._binary("remainder", other)

    def __pow__(self, other):
        return self._binary("pow", other)

    def __rpow__(self, other):
        other = self._operand(other)
        if other is None:
            return NotImplemented
        if isinstance(other, Tensor):
            return other ** self
        return self._op("full_like", fill_value=other)._op("pow", self)

    def __matmul__(self, other):
        return self._binary("matmul", other)

    def __rmatmul__(self, other):
        other = self._operand(other)
        if other is None or _is_number(other):
            return NotImplemented
        return other @ self

    def __neg__(self):
        return self._op("neg")

    def __pos__(self):
        return self

    def __abs__(self):
        return self._op("abs")

    def __invert__(self):
        return self._op("bitwise_not")

    def __and__(self, other):
        return self._binary("bitwise_and", other)

    __rand__ = __and__

    def __or__(self, other):
        return self._binary("bitwise_or", other)

    __ror__ = __or__

    def __xor__(self, other):
        return self._binary("bitwise_xor", other)

    __rxor__ = __xor__

    def __eq__(self, other):
        return self._binary("eq", other)

    def __ne__(self, other):
        return self._binary("ne", other)

    def __lt__(self, other):
        return self._binary("lt", other)

    def __le__(self, other):
        return self._binary("le", other)

    def __gt__(self, other):
        return self._binary("gt", other)

    def __ge__(self, other):
        return self._binary("ge", other)

    # == returns a tensor, so hashing goes by identity (as torch.Tensor's).
    __hash__ = object.__hash__

    def __bool__(self):
        return bool(self.item())

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    # ------------------------------------------------------------ sequence
    def __len__(self):
        shape = self.shape
        if not shape:
            raise TypeError("len() of a 0-d tensor")
        return shape[0]

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __getitem__(self, key):
        """Indexing as NumPy's and PyTorch's basic indexing, with the daemon's
        ops: integers (narrow + squeeze), slices with a positive step (slice),
        None (unsqueeze), ... ; a 1-D integer index (Tensor, list or array)
        along one dim (index_select); a bool mask alone (masked_select, 1-D
        result). Copies, not views. Indexing with a Tensor waits for its dtype
        (to tell a mask from indices) unless it is known."""
        key = key if isinstance(key, tuple) else (key,)
        if sum(k is Ellipsis for k in key) > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        key = tuple(self._index_operand(k) for k in key)
        masks = [k for k in key if isinstance(k, Tensor) and k.dtype is _dtypes.bool_]
        if masks:
            if len(key) != 1:
                raise IndexError("a bool mask index must be the only index (x[mask])")
            return self._op("masked_select", masks[0])
        if Ellipsis in key:
            at = key.index(Ellipsis)
            front, back = key[:at], key[at + 1:]
        else:
            front, back = key, ()
        x, dim = self, 0
        for item in front:
            x, dim = x._index_one(item, dim, +1)
        x, dim = x, -1
        for item in reversed(back):
            x, dim = x._index_one(item, dim, -1)
        return x

    def _index_operand(self, item):
        if isinstance(item, (list, np.ndarray)):
            array = np.asarray(item)
            if array.dtype != np.bool_ and not np.issubdtype(array.dtype, np.integer):
                raise IndexError(f"index arrays must hold integers or bools; got {array.dtype}")
            if array.dtype != np.bool_:
                array = array.astype(np.int64)
            return self._client.tensor(array)
        return item

    def _index_one(self, item, dim, direction):
        """Applies one index item at `dim`; returns (result, dim of the next
        item). direction +1: items left of '...' (dims from the front), -1:
        right of it (from the back, applied right to left)."""
        if _is_int(item):
            out = self._op("narrow", dim=dim, start=int(item), length=1)._op("squeeze", dim=[dim])
            return out, dim  # the dim is gone; the next item indexes the same position
        if item is None:
            return self._op("unsqueeze", dim=dim), dim + direction
        if isinstance(item, slice):
            if item.step is not None and item.step <= 0:
                raise ValueError(f"slice step must be positive; got {item.step}")
            if item == slice(None):
                return self, dim + direction
            out = self._op("slice", dim=dim, start=0 if item.start is None else int(item.start),
                           end=_END if item.stop is None else int(item.stop),
                           step=1 if item.step is None else int(item.step))
            return out, dim + direction
        if isinstance(item, Tensor):
            return self._op("index_select", item, dim=dim), dim + direction
        raise IndexError(f"tensord tensors are indexed by ints, slices, None, ..., integer index "
                         f"tensors/arrays or a bool mask; got {type(item).__name__}")

    # ------------------------------------------------------------ repr
    def __repr__(self):
        try:
            dtype, shape = self._info()
            extra = f", dtype={dtype!r}" + (", requires_grad=True" if self.requires_grad else "")
            nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            if nbytes > _REPR_MAX_BYTES:
                return f"tensor(shape={list(shape)}{extra})"
            values = np.array2string(self._floats_for_humans(self.numpy()), separator=", ", prefix="tensor(")
            return f"tensor({values}{extra})"
        except Exception as error:  # a failed call still gets a readable repr
            return f"tensor(<failed: {error}>)"
