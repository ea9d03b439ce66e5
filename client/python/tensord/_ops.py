"""The daemon's ops as Python functions, generated from its op table.

Each op becomes a function with the op's name, a signature built from its
inputs and attributes, and a docstring from its documentation; a new op on
the daemon appears at the next connect without changing this package.

How arguments map onto an op (name(inputs..., *, attrs...)):
  * Tensors fill the inputs in order; a variadic input (cat, stack) takes
    the remaining Tensors or one list of them.
  * Where an input has a scalar attribute of the same name (add's `other`,
    clamp's `min`/`max`), a number in its place is that attribute:
    add(x, 2.5), clamp(x, 0, 1).
  * Other positional values fill the attributes in order, as PyTorch's
    positional arguments do: sum(x, 1), transpose(x, 0, 1),
    gather(x, 1, index). Shapes may be spread (reshape(x, 2, 3), zeros(2, 3)).
  * Keywords name inputs or attributes: linear(x, weight=w), softmax(x, dim=1).
  * None leaves an optional input (or an attribute) off.
"""

import inspect
import threading
from collections import namedtuple

import numpy as np

from . import _dtypes
from ._tensor import Tensor, _is_int, _is_number

# Attributes PyTorch spells as *args: x.reshape(2, 3), x.permute(1, 0), zeros(2, 3).
_SPREAD_ATTRS = {"size", "shape", "dims", "repeats"}


def _dim_size(tensor, dim):
    shape = tensor.shape
    if not shape:
        return None  # 0-d: the daemon reports the error
    return shape[dim % len(shape)] if -len(shape) <= dim < len(shape) else None


def _split_count(inputs, attrs):
    sections = attrs.get("split_size_or_sections", [])
    if len(sections) != 1:
        return max(len(sections), 1)
    size = _dim_size(inputs[0], attrs.get("dim", 0))
    chunk = sections[0]
    if size is None or chunk <= 0 or size == 0:
        return 1
    return -(-size // chunk)


def _chunk_count(inputs, attrs):
    size = _dim_size(inputs[0], attrs.get("dim", 0))
    chunks = attrs.get("chunks", 1)
    if size is None or not _is_int(chunks) or chunks <= 0:
        return 1
    if size == 0:
        return chunks
    per = -(-size // chunks)
    return -(-size // per)


# Ops whose number of outputs depends on the call: how many to ask for. The
# others have as many as the op table lists. split and chunk need the
# input's shape, so they wait for it.
_OUTPUT_COUNT = {
    "max": lambda inputs, attrs: 2 if "dim" in attrs else 1,
    "min": lambda inputs, attrs: 2 if "dim" in attrs else 1,
    "split": _split_count,
    "chunk": _chunk_count,
}


# Ops that return a tuple of pieces, however many (torch.split, torch.chunk).
_PIECES = {"split", "chunk"}


def _arange_args(args, kwargs):
    # arange(end), as PyTorch's; two or three numbers are start, end[, step].
    if len(args) == 1 and "end" not in kwargs:
        return (), {**kwargs, "end": args[0]}
    return args, kwargs


def _randint_args(args, kwargs):
    # randint(high, size), as PyTorch's; randint(low, high, size) as declared.
    if len(args) == 2 and not _is_number(args[1]) and "high" not in kwargs:
        return (), {**kwargs, "high": args[0], "size": args[1]}
    return args, kwargs


# PyTorch call forms that do not follow the attributes' declared order.
_ADAPT_ARGS = {"arange": _arange_args, "randint": _randint_args}


class _Default:
    """The thread's default client: the last one connect() made on it."""

    local = threading.local()


def default_client():
    client = getattr(_Default.local, "client", None)
    if client is None:
        raise RuntimeError("no tensord client on this thread: call tensord.connect() first, or pass client=")
    return client


def set_default_client(client):
    _Default.local.client = client


def _type_name(value):
    return type(value).__name__


def _normalize_attr(op, spec, value):
    """`value` in the form the daemon's attribute of type spec.type takes."""
    name = f"{op}: attribute '{spec.name}'"
    if isinstance(value, Tensor):
        raise TypeError(f"{name} takes {spec.type}, not a Tensor")
    if isinstance(value, _dtypes.dtype):
        return value.name
    if spec.name == "dtype" and value != "":  # '' means "the input's" where the op allows it
        return _dtypes.as_dtype(value).name
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, tuple):
        value = list(value)
    if isinstance(value, list):
        value = [v.item() if isinstance(v, np.generic) else v for v in value]
    kind = spec.type
    if kind == "ints" and _is_int(value):
        return [int(value)]
    if kind == "floats" and _is_number(value) and not isinstance(value, bool):
        return [float(value)]
    if kind == "floats" and isinstance(value, list):
        return [float(v) if _is_number(v) and not isinstance(v, bool) else v for v in value]
    if kind == "float" and _is_int(value):
        return float(value)
    if kind == "text" and not isinstance(value, str):
        raise TypeError(f"{name} takes text; got {_type_name(value)} {value!r}")
    return value




class OpFunction:
    """How one op binds its arguments; makes the Python function."""

    def __init__(self, info):
        self.info = info
        self.name = info.name
        self.inputs = list(info.inputs)
        self.input_index = {spec.name: i for i, spec in enumerate(self.inputs)}
        self.attrs = {spec.name: spec for spec in info.attrs}
        # Attributes that stand in for an input of the same name (a number for a tensor).
        self.twins = {name for name in self.attrs if name in self.input_index}
        self.positional_attrs = [spec.name for spec in info.attrs if spec.name not in self.twins]
        self.output_tuple = namedtuple(f"{self.name}_result", info.outputs) if len(info.outputs) > 1 else None

    # ------------------------------------------------------------ binding
    def bind(self, args, kwargs):
        """(inputs, attrs, client) for a call with `args` and `kwargs`."""
        op = self.name
        client = kwargs.pop("client", None)
        adapt = _ADAPT_ARGS.get(op)
        if adapt is not None:
            args, kwargs = adapt(args, kwargs)
        slots = [None] * len(self.inputs)
        filled = [False] * len(self.inputs)  # given, possibly as None or as a scalar attribute
        attrs = {}
        for key, value in kwargs.items():
            if key in self.input_index:
                i = self.input_index[key]
                spec = self.inputs[i]
                if isinstance(value, Tensor) or (spec.variadic and isinstance(value, (list, tuple))):
                    slots[i] = list(value) if spec.variadic and not isinstance(value, Tensor) else value
                elif key in self.twins and value is not None:
                    attrs[key] = value
                elif value is not None:
                    raise TypeError(f"{op}: input '{key}' takes a Tensor; got {_type_name(value)}")
                filled[i] = True
            elif key in self.attrs:
                if value is not None:
                    attrs[key] = value
            else:
                raise TypeError(f"{op}() got an unexpected keyword argument '{key}' (inputs: "
                                f"{', '.join(self.input_index) or 'none'}; attributes: "
                                f"{', '.join(self.attrs) or 'none'})")

        slot, attr_at, i = 0, 0, 0
        while i < len(args):
            arg = args[i]
            while slot < len(self.inputs) and filled[slot] and not self.inputs[slot].variadic:
                slot += 1
            spec = self.inputs[slot] if slot < len(self.inputs) else None
            if isinstance(arg, Tensor) or (spec is not None and spec.variadic and isinstance(arg, (list, tuple))
                                           and all(isinstance(t, Tensor) for t in arg)):
                if spec is None:
                    raise TypeError(f"{op}() takes {len(self.inputs)} tensor input(s); got more "
                                    f"(argument {i} is a Tensor)")
                if spec.variadic:
                    slots[slot] = (slots[slot] or []) + (list(arg) if isinstance(arg, (list, tuple)) else [arg])
                    filled[slot] = True
                else:
                    slots[slot] = arg
                    filled[slot] = True
                    slot += 1
                i += 1
                continue
            if spec is not None and spec.variadic and filled[slot]:
                slot += 1  # a non-tensor ends the variadic input
                spec = None
            if spec is not None:
                if arg is None and spec.optional:
                    filled[slot] = True
                    slot += 1
                    i += 1
                    continue
                if spec.name in self.twins and _is_number(arg):
                    attrs[spec.name] = arg
                    filled[slot] = True
                    slot += 1
                    i += 1
                    continue
            # The next attribute not given yet.
            while attr_at < len(self.positional_attrs) and self.positional_attrs[attr_at] in attrs:
                attr_at += 1
            if attr_at >= len(self.positional_attrs):
                raise TypeError(f"{op}(): too many positional arguments: {arg!r} (argument {i}) has no input or "
                                f"attribute left to fill (attributes: {', '.join(self.attrs) or 'none'})")
            name = self.positional_attrs[attr_at]
            attr_at += 1
            if name in _SPREAD_ATTRS and self.attrs[name].type == "ints" and _is_int(arg):
                values = []
                while i < len(args) and _is_int(args[i]):
                    values.append(int(args[i]))
                    i += 1
                attrs[name] = values
                continue
            if arg is not None:
                attrs[name] = arg
            i += 1

        inputs = []
        left_off = None
        for k, spec in enumerate(self.inputs):
            value = slots[k]
            if spec.variadic:
                if not value:
                    if spec.optional:
                        continue
                    raise TypeError(f"{op}() needs at least one tensor for input '{spec.name}'")
                values = value
            elif value is None:
                if spec.optional or spec.name in attrs:
                    left_off = left_off or spec.name
                    continue
                raise TypeError(f"{op}() missing required input '{spec.name}' (a Tensor)")
            else:
                values = [value]
            if left_off is not None:
                raise TypeError(f"{op}(): input '{spec.name}' is given but the optional input '{left_off}' before "
                                "it is not; the daemon takes optional inputs in order")
            inputs.extend(values)
        for spec in self.info.attrs:
            if spec.name in attrs:
                attrs[spec.name] = _normalize_attr(op, spec, attrs[spec.name])
            elif spec.required:
                raise TypeError(f"{op}() missing required attribute '{spec.name}' ({spec.type}: {spec.doc})")
        if client is None:
            client = inputs[0]._client if inputs else default_client()
        return inputs, attrs, client

    def __call__(self, args, kwargs):
        inputs, attrs, client = self.bind(args, kwargs)
        rule = _OUTPUT_COUNT.get(self.name)
        count = rule(inputs, attrs) if rule is not None else -1
        outputs = client._call(self.name, inputs, list(attrs.items()), count)
        if self.name in _PIECES:
            return tuple(outputs)
        if not outputs:
            return None
        if len(outputs) == 1:
            return outputs[0]
        if self.output_tuple is not None and len(outputs) == len(self.info.outputs):
            return self.output_tuple(*outputs)
        return tuple(outputs)

    # ------------------------------------------------------------ documentation
    def signature(self):
        params = []
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        for spec in self.inputs:
            if spec.variadic:
                params.append(inspect.Parameter(spec.name, inspect.Parameter.VAR_POSITIONAL))
                kind = None
            else:
                # After an optional input every input shows a default (Python's rule;
                # the call checks what is really required).
                if spec.optional or (params and params[-1].default is not inspect.Parameter.empty):
                    default = None
                else:
                    default = inspect.Parameter.empty
                params.append(inspect.Parameter(spec.name, kind or inspect.Parameter.KEYWORD_ONLY, default=default))
        for spec in self.info.attrs:
            if spec.name in self.twins:
                continue
            if spec.required:
                default = inspect.Parameter.empty
            else:
                default = spec.default if spec.has_default else None
            params.append(inspect.Parameter(spec.name, inspect.Parameter.KEYWORD_ONLY, default=default))
        return inspect.Signature(params)

    def docstring(self):
        info = self.info
        lines = [info.doc, ""]  # help() shows the signature above it
        if self.inputs:
            lines.append("Inputs:")
            for spec in self.inputs:
                notes = []
                if spec.variadic:
                    notes.append("one or more tensors")
                if spec.optional:
                    notes.append("optional")
                if spec.name in self.twins:
                    notes.append("or a number")
                role = {"index": "indices (i32 or i64)", "mask": "bool mask", "any": "any dtype"}.get(spec.role)
                if role:
                    notes.append(role)
                lines.append(f"  {spec.name}" + (f": {', '.join(notes)}" if notes else ""))
        if info.attrs:
            lines.append("Attributes:")
            for spec in info.attrs:
                if spec.required:
                    how = "required"
                elif spec.has_default:
                    how = f"default {spec.default!r}"
                else:
                    how = "optional"
                lines.append(f"  {spec.name} ({spec.type}, {how}): {spec.doc}")
        lines.append(f"Dtypes: {', '.join(info.dtypes)}")
        if len(info.outputs) > 1:
            lines.append(f"Returns: ({', '.join(info.outputs)})")
        elif not info.outputs:
            lines.append("Returns: None")
        notes = []
        if info.view:
            notes.append("a view: the output shares the input's memory")
        if info.mutates:
            notes.append(f"writes {', '.join(info.mutates)} in place")
        if info.differentiable:
            notes.append(f"differentiable (backward op {info.backward})")
        if notes:
            lines.append("Notes: " + "; ".join(notes) + ".")
        return "\n".join(lines)

    def make_function(self):
        binder = self

        def op(*args, **kwargs):
            return binder(args, kwargs)

        op.__name__ = op.__qualname__ = self.name
        op.__module__ = "tensord.ops"
        op.__doc__ = self.docstring()
        op.__signature__ = self.signature()
        op.op_info = self.info
        return op


class OpSet:
    """One daemon's op table: a function per op."""

    def __init__(self, infos):
        self.infos = {info.name: info for info in infos}
        self.functions = {info.name: OpFunction(info).make_function() for info in infos}


class OpNamespace:
    """tensord.ops: every op of the daemon as a function, from the op table
    of the last connect(). tensord.ops.relu(x), tensord.ops.zeros(2, 3).

    A function runs on the client of its first tensor input; ops without
    tensor inputs (zeros, arange, randn ...) on client= if given, else on the
    thread's default client (the last connect() on this thread)."""

    def __init__(self):
        self._functions = {}

    def _install(self, opset):
        self._functions.update(opset.functions)

    def __getattr__(self, name):
        try:
            return self._functions[name]
        except KeyError:
            if not self._functions:
                raise AttributeError(f"tensord.ops has no op {name!r} yet: the namespace fills from the daemon's "
                                     "op table at tensord.connect()") from None
            raise AttributeError(f"the daemon has no op {name!r} (tensord.ops lists its ops)") from None

    def __dir__(self):
        return sorted(self._functions)

    def __iter__(self):
        return iter(sorted(self._functions))

    def __contains__(self, name):
        return name in self._functions

    def __repr__(self):
        return f"<tensord.ops: {len(self._functions)} ops>"


class BoundOps:
    """c.ops: the ops of one client's daemon, running on that client when no
    tensor input says otherwise (c.ops.zeros(2, 3))."""

    def __init__(self, client):
        self._client = client

    def __getattr__(self, name):
        function = self._client._opset.functions.get(name)
        if function is None:
            raise AttributeError(f"the daemon at {self._client.address} has no op {name!r}")

        def bound(*args, **kwargs):
            kwargs.setdefault("client", self._client)
            return function(*args, **kwargs)

        bound.__name__ = bound.__qualname__ = name
        bound.__doc__ = function.__doc__
        bound.__signature__ = function.__signature__
        return bound

    def __dir__(self):
        return sorted(self._client._opset.functions)


ops = OpNamespace()
