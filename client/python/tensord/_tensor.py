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


def _check_advanced(key):
    """Refuses keys where tensord's indexing (one index tensor, applied to
    its dim) would differ from NumPy's and PyTorch's advanced indexing:
    several index tensors (paired pointwise there), or ints and an index
    tensor apart from each other (their dims go to the front there)."""
    at = [i for i, k in enumerate(key) if isinstance(k, Tensor)]
    if len(at) > 1:
        raise IndexError("tensord indexes with one index tensor (or list/array) per key; got "
                         f"{len(at)} (NumPy and PyTorch would pair them pointwise): index in two steps")
    if at:
        advanced = [i for i, k in enumerate(key) if i == at[0] or _is_int(k)]
        if advanced[-1] - advanced[0] + 1 != len(advanced):
            raise IndexError("an index tensor and ints apart from each other in one key (NumPy and PyTorch move "
                             "the indexed dim to the front then): index in two steps")


class Tensor:
    """A tensor held by a tensord daemon, as a handle.

    Made by a Client (c.tensor, c.from_numpy, c.restore) or by ops on other
    tensors. Every op of the daemon is a method (x.relu(), x.sum(dim=1)) and
    a function in tensord.ops; operators (+ - * / @ ** comparisons, unary -),
    indexing (x[0], x[1:3], x[..., None], x[index_tensor], x[bool_mask])
    and item assignment (x[1:3] = 0, x[mask] = t; see __setitem__) are ops
    too. Calls are pipelined: they return at once, and an error in
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
    def numpy(self, out=None):
        """The tensor's values as a new NumPy array (waits; one round trip).

        bf16 comes back as ml_dtypes.bfloat16 when that package is installed,
        else as uint16 holding the bits. Large downloads show a tqdm bar when
        tqdm is installed; Ctrl-C interrupts them (KeyboardInterrupt).

        With `out`, a C-contiguous, writable array of the tensor's dtype and
        shape, the values land in it instead and it is returned: an array
        reused from one download to the next costs no allocation and no page
        faults. A mismatch raises tensord.Error naming both."""
        if out is not None:
            return self._numpy_into(out)
        with transfer_bar("download") as bar:
            info, raw = self._h.download(bar)
        dtype = _dtypes.BY_NAME[info.dtype]
        self._meta = (dtype, tuple(info.shape))
        return raw.view(dtype.numpy).reshape(info.shape)

    def _numpy_into(self, out):
        if not isinstance(out, np.ndarray):
            raise TypeError(f"Tensor.numpy(out=...): out must be a NumPy array, got {type(out).__name__}")
        if not out.flags.c_contiguous or not out.flags.writeable:
            raise ValueError("Tensor.numpy(out=...): out must be C-contiguous and writable"
                             f" (contiguous: {out.flags.c_contiguous}, writable: {out.flags.writeable})")
        # uint16 is how bf16 comes back without ml_dtypes; tensord has no u16.
        expected = _dtypes.bfloat16 if out.dtype == np.uint16 else _dtypes._BY_NUMPY.get(out.dtype)
        if expected is None:
            raise TypeError(f"Tensor.numpy(out=...): out's dtype {out.dtype} is no tensord dtype")
        with transfer_bar("download") as bar:
            info = self._h.download_into(out, expected.name, list(out.shape), bar)
        self._meta = (_dtypes.BY_NAME[info.dtype], tuple(info.shape))
        return out

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

    @property
    def is_leaf(self):
        """False for the result of a call recorded for autograd, else True
        (as torch.Tensor.is_leaf)."""
        return self._h.is_leaf

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
        _check_advanced(key)
        masks = [k for k in key if isinstance(k, Tensor) and k.dtype is _dtypes.bool_]
        if masks:
            if len(key) != 1:
                raise IndexError("a bool mask index must be the only index (x[mask])")
            mask, rest = self._full_mask(masks[0])
            out = self._op("masked_select", mask)
            return out._op("reshape", shape=[-1, *rest]) if rest else out
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

    def _full_mask(self, mask):
        """(mask broadcast over this tensor's trailing dims, those dims) for
        a bool mask of this tensor's leading dims, as PyTorch's x[mask]."""
        shape, mask_shape = self.shape, mask.shape
        if len(mask_shape) > len(shape) or tuple(shape[:len(mask_shape)]) != tuple(mask_shape):
            raise IndexError(f"the shape of the mask {list(mask_shape)} does not match the leading dims of the "
                             f"indexed tensor's shape {list(shape)}")
        rest = tuple(shape[len(mask_shape):])
        if rest:
            mask = mask._op("reshape", shape=[*mask_shape, *([1] * len(rest))])
        return mask, rest

    # ------------------------------------------------------------ item assignment
    def __setitem__(self, key, value):
        """x[key] = value, as PyTorch's: key as in x[key] (ints, slices with a
        positive step, None, ..., a 1-D integer index Tensor/list/array per
        dim, or a bool mask of the leading dims alone); value a number, a
        Tensor or an array, broadcast to x[key]'s shape and converted to x's
        dtype.

        The daemon's index ops (index_put, masked_fill) are out of place, so
        the assignment computes the updated tensor and rebinds this Tensor
        object's handle to it: x (and every Python reference to this object)
        then shows the new contents, pipelined like any call, while other
        handles to the old daemon tensor (from x.detach(), or a named tensor
        x was saved as) keep the old values. Autograd: the write is a
        recorded index_put/masked_fill, so gradients flow to the kept part of
        x and to a value that requires grad. A leaf that requires grad cannot
        be written outside tensord.no_grad() (RuntimeError, as PyTorch);
        under no_grad it is written in place of its handle, so its optimizer
        and module see the new values and it stays a leaf with its grad.

        Cost: a key on dim 0 alone (x[i], x[a:b], x[index]) or a bool mask
        with a single value is one op; other keys build a flat i64 index of
        x's size on the daemon first."""
        new = self._assigned(key, value)
        if new is self:
            return
        if self._h.requires_grad and self._h.is_leaf:
            from . import _core  # (a cycle at import time otherwise)

            if _core.grad_enabled():
                raise RuntimeError("a leaf tensor that requires grad cannot be written in place (x[...] = v) while "
                                   "autograd records; do it inside tensord.no_grad(), or write x.detach() instead")
            self._h.replace_contents(new._h)
        else:
            self._h = new._h

    def _value_for(self, value, dtype):
        """`value` (number, Tensor, array or list) as a Tensor of `dtype`, or a
        number kept as is."""
        if isinstance(value, Tensor):
            if value._client is not self._client:
                raise ValueError("x[key] = value: value belongs to another tensord Client")
            # (a dtype not known yet is converted rather than waited for)
            return value if value._meta is not None and value._meta[0] is dtype else value.to(dtype)
        if _is_number(value):
            return value.item() if isinstance(value, np.generic) else value
        if isinstance(value, (np.ndarray, list, tuple)):
            return self._client.tensor(value, dtype=dtype)
        raise TypeError(f"x[key] = value: value must be a number, a tensord.Tensor or an array; "
                        f"got {type(value).__name__}")

    def _value_tensor(self, value, dtype):
        """_value_for's result as a Tensor (a number becomes a 0-d tensor)."""
        if isinstance(value, Tensor):
            return value
        if isinstance(value, bool) and dtype is not _dtypes.bool_:
            value = int(value)
        return self._client._opset.functions["full"](size=[], fill_value=value, dtype=dtype.name,
                                                   client=self._client)

    def _assigned(self, key, value):
        """The tensor x[key] = value makes (self when it changes nothing)."""
        shape, dtype = self.shape, self.dtype
        key = key if isinstance(key, tuple) else (key,)
        if sum(k is Ellipsis for k in key) > 1:
            raise IndexError("an index can only have a single ellipsis ('...')")
        key = tuple(self._index_operand(k) for k in key)
        _check_advanced(key)
        value = self._value_for(value, dtype)

        # Everything: the value broadcast to the shape.
        if all(k is Ellipsis or (isinstance(k, slice) and k == slice(None)) for k in key):
            if isinstance(value, Tensor):
                return value._op("expand", size=list(shape))
            return self._op("full_like", fill_value=value)

        masks = [k for k in key if isinstance(k, Tensor) and k.dtype is _dtypes.bool_]
        if masks:
            if len(key) != 1:
                raise IndexError("a bool mask index must be the only index (x[mask] = value)")
            mask, rest = self._full_mask(masks[0])
            single = not isinstance(value, Tensor) or value.numel() == 1
            if single:
                if isinstance(value, Tensor):
                    value = value._op("reshape", shape=[])
                    return self._op("masked_fill", mask, value)
                return self._op("masked_fill", mask, value=value)
            mask = mask._op("expand", size=list(shape)) if rest else mask
            target = self._flat_ids()._op("masked_select", mask)
            per = int(np.prod(rest, dtype=np.int64))
            return self._put_flat(target, value, [target.numel() // per, *rest])  # (waits for the count)

        # One item for dim 0: index_put on the rows it names.
        if len(key) == 1 and (_is_int(key[0]) or isinstance(key[0], (slice, Tensor))) and shape:
            rows = self._rows(key[0], shape[0])
            if rows is None:
                return self  # an empty slice
            # index_put broadcasts the value to [rows, *shape[1:]].
            return self._op("index_put", rows, self._value_tensor(value, dtype))

        # Any other key: the flat positions it selects, from an index of every element.
        return self._put_flat(self._flat_ids()[key], value, self._selection_shape(key))

    def _rows(self, item, size):
        """A 1-D i64 index Tensor of the dim-0 rows `item` (int, slice or
        index Tensor) names, or None when it names none."""
        c = self._client
        if _is_int(item):
            i = int(item)
            if not -size <= i < size:
                raise IndexError(f"index {i} is out of bounds for dim 0 with size {size}")
            return c._opset.functions["full"](size=[1], fill_value=i % size, dtype="i64", client=c)
        if isinstance(item, slice):
            if item.step is not None and item.step <= 0:
                raise ValueError(f"slice step must be positive; got {item.step}")
            start, stop, step = item.indices(size)
            if start >= stop:
                return None
            return c._opset.functions["arange"](start, stop, step, dtype="i64", client=c)
        if item.dtype not in (_dtypes.int32, _dtypes.int64):
            raise IndexError(f"index tensors must be integer (i32, i64) or bool; got {item.dtype.name}")
        return item

    def _flat_ids(self):
        """arange(numel) in this tensor's shape (i64), on the daemon."""
        c = self._client
        ids = c._opset.functions["arange"](self.numel(), dtype="i64", client=c)
        return ids._op("reshape", shape=list(self.shape))

    def _selection_shape(self, key):
        """x[key]'s shape, worked out on the host (index tensors: their
        lengths). Keys have passed _check_advanced, so NumPy's rules give
        the shape tensord's indexing makes."""
        probe = tuple(np.zeros(k.shape, np.intp) if isinstance(k, Tensor) else k for k in key)
        return list(np.broadcast_to(np.zeros((), np.uint8), self.shape)[probe].shape)

    def _put_flat(self, target, value, vshape):
        """This tensor with the flat positions `target` (an i64 tensor, x[key]
        of _flat_ids(), of `vshape` elements in all) set to `value`
        broadcast to `vshape`."""
        if int(np.prod(vshape, dtype=np.int64)) == 0:
            return self
        values = self._value_tensor(value, self.dtype)
        have = None if values._meta is None else list(values._meta[1])  # (not waited for)
        if have is not None and (len(have) > len(vshape) or
                                 any(v not in (1, t) for v, t in zip(have[::-1], vshape[::-1]))):
            raise ValueError(f"x[key] = value: shape mismatch: value of shape {have} cannot be broadcast to the "
                             f"indexing result of shape {list(vshape)}")
        if have != list(vshape):
            values = values._op("expand", size=list(vshape))
        flat = self._op("reshape", shape=[-1])
        out = flat._op("index_put", target._op("reshape", shape=[-1]), values._op("reshape", shape=[-1]))
        return out._op("reshape", shape=list(self.shape))

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
