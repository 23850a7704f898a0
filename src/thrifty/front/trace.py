"""Tracing a dense spec into a :class:`~thrifty.graph.ir.Graph`.

A spec is an ordinary function written with a numpy-like API. Tracing
(:func:`trace_function`) calls it once with symbolic :class:`Tensor` arguments; every
operation on them records a node. The program layer (:mod:`thrifty.programs`,
``@thrifty.program``) traces, caches and runs specs; this module knows only the graph.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from thrifty.errors import SpecError
from thrifty.graph.ir import Graph, Node, TensorType
from thrifty.graph.ops import get_op, infer_type

_THRIFTY_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _user_location() -> str | None:
    """``file:line in function`` of the innermost caller outside the thrifty package."""
    f = sys._getframe(1)
    while f is not None:
        fname = os.path.abspath(f.f_code.co_filename)
        if not fname.startswith(_THRIFTY_DIR + os.sep):
            return f"{os.path.basename(fname)}:{f.f_lineno} in {f.f_code.co_name}"
        f = f.f_back  # type: ignore[assignment]
    return None


class _Tracer:
    """Collects nodes while a program is traced."""

    def __init__(self) -> None:
        self.nodes: list[Node] = []

    def add(self, op: str, inputs: Sequence[Tensor], attrs: Mapping[str, Any] | None = None,
            *, name: str | None = None, type: TensorType | None = None) -> Tensor:
        attrs = dict(attrs or {})
        loc = _user_location()
        if type is None:
            try:
                type = infer_type(op, [t.type for t in inputs], attrs)
            except SpecError as e:
                where = f" (at {loc})" if loc else ""
                raise e.__class__(f"{e}{where}") from None
        node = Node(len(self.nodes), op, tuple(t.node for t in inputs), attrs, type, name, loc)
        self.nodes.append(node)
        return Tensor(self, node.id, type)


_ACTIVE: list[_Tracer] = []


class Tensor:
    """A symbolic tensor seen while tracing: numpy-like operators record graph nodes."""

    __slots__ = ("tracer", "node", "type")
    __hash__ = object.__hash__

    def __init__(self, tracer: _Tracer, node: int, type: TensorType) -> None:
        self.tracer, self.node, self.type = tracer, node, type

    shape = property(lambda self: self.type.shape)
    dtype = property(lambda self: np.dtype(self.type.dtype))
    ndim = property(lambda self: self.type.ndim)

    def __repr__(self) -> str:
        return f"Tensor(%{self.node}: {self.type})"

    def __bool__(self) -> bool:
        raise SpecError("a traced tensor has no truth value: data-dependent control flow "
                        "cannot be traced; use thrifty.where(cond, x, y)")

    def _bin(self, op: str, other: Any, reverse: bool = False) -> Tensor:
        o = _lift(other, self.tracer, like=self)
        a, b = (o, self) if reverse else (self, o)
        return self.tracer.add(op, [a, b])

    def __add__(self, o: Any) -> Tensor: return self._bin("add", o)
    def __radd__(self, o: Any) -> Tensor: return self._bin("add", o, True)
    def __sub__(self, o: Any) -> Tensor: return self._bin("sub", o)
    def __rsub__(self, o: Any) -> Tensor: return self._bin("sub", o, True)
    def __mul__(self, o: Any) -> Tensor: return self._bin("mul", o)
    def __rmul__(self, o: Any) -> Tensor: return self._bin("mul", o, True)
    def __truediv__(self, o: Any) -> Tensor: return self._bin("div", o)
    def __rtruediv__(self, o: Any) -> Tensor: return self._bin("div", o, True)
    def __matmul__(self, o: Any) -> Tensor: return self._bin("matmul", o)
    def __rmatmul__(self, o: Any) -> Tensor: return self._bin("matmul", o, True)
    def __lt__(self, o: Any) -> Tensor: return self._bin("lt", o)
    def __le__(self, o: Any) -> Tensor: return self._bin("le", o)
    def __gt__(self, o: Any) -> Tensor: return self._bin("gt", o)
    def __ge__(self, o: Any) -> Tensor: return self._bin("ge", o)
    def __eq__(self, o: Any) -> Tensor: return self._bin("eq", o)  # type: ignore[override]
    def __ne__(self, o: Any) -> Tensor: return self._bin("ne", o)  # type: ignore[override]
    def __neg__(self) -> Tensor: return self.tracer.add("neg", [self])
    def __pos__(self) -> Tensor: return self
    def __abs__(self) -> Tensor: return self.tracer.add("abs", [self])

    @property
    def T(self) -> Tensor:  # noqa: N802 - numpy's name
        return self.transpose()

    def transpose(self, *axes: int) -> Tensor:
        if len(axes) == 1 and not isinstance(axes[0], int):
            axes = tuple(axes[0])
        perm = tuple(axes) if axes else tuple(reversed(range(self.ndim)))
        return self.tracer.add("transpose", [self], {"axes": perm})

    def sum(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        return _reduce("sum", self, axis, keepdims)

    def max(self, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
        return _reduce("max", self, axis, keepdims)

    # numpy functions on traced tensors record the same ops as thrifty's own functions
    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        from thrifty.front.numpy_api import apply_ufunc

        return apply_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        from thrifty.front.numpy_api import apply_function

        return apply_function(func, args, kwargs)

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        raise SpecError("a traced tensor has no values yet: np.asarray/np.array cannot be "
                        "applied to it inside a program; use its operators and the numpy "
                        "functions of the spec language")

    def reshape(self, *shape: Any, **kwargs: Any) -> Tensor:
        from thrifty.front.numpy_api import refuse

        refuse("reshape")

    def __getitem__(self, key: Any) -> Tensor:
        from thrifty.front.numpy_api import refuse

        refuse("indexing and slicing")

    def astype(self, *args: Any, **kwargs: Any) -> Tensor:
        from thrifty.front.numpy_api import refuse

        refuse("astype")


def _lift(x: Any, tracer: _Tracer, like: Tensor | None = None) -> Tensor:
    """A Tensor for ``x``: a traced tensor as is, anything else as a ``const`` node.

    Python scalars take the dtype numpy's promotion gives them next to ``like`` (so
    ``X * 2.0`` keeps a float32 ``X`` float32, as in numpy).
    """
    if isinstance(x, Tensor):
        if x.tracer is not tracer:
            raise SpecError("a tensor from another trace was used; trace one program at a time")
        return x
    if hasattr(x, "toarray"):
        x = x.toarray()
    if isinstance(x, bool | int | float | complex) and like is not None:
        value = np.asarray(x, dtype=np.result_type(like.dtype, x))
    else:
        value = np.asarray(x)
    if value.dtype == object:
        raise SpecError(f"cannot use a value of type {type(x).__name__} in a traced program; "
                        "use numbers, numpy arrays or traced tensors")
    return tracer.add("const", [], {"value": value})


def _tracer_of(args: Sequence[Any]) -> _Tracer | None:
    for a in args:
        if isinstance(a, Tensor):
            return a.tracer
    return None


def _apply(op: str, args: Sequence[Any], attrs: Mapping[str, Any] | None = None) -> Any:
    """Record ``op`` when an argument is traced; otherwise evaluate it eagerly with numpy."""
    tracer = _tracer_of(args)
    if tracer is None:
        arrays = [a.toarray() if hasattr(a, "toarray") else np.asarray(a) for a in args]
        infer_type(op, [TensorType(a.shape, a.dtype.name) for a in arrays], attrs or {})
        return get_op(op).reference(*arrays, **(attrs or {}))
    like = next(a for a in args if isinstance(a, Tensor))
    return tracer.add(op, [_lift(a, tracer, like) for a in args], attrs)


def _reduce(op: str, x: Any, axis: int | Sequence[int] | None, keepdims: bool) -> Any:
    from thrifty.graph.ops import normalize_axes

    nd = x.ndim if isinstance(x, Tensor) else np.ndim(x)
    return _apply(op, [x], {"axis": normalize_axes(axis, nd, op), "keepdims": bool(keepdims)})


# -- the numpy-like functions of the spec language -------------------------------------------
def matmul(a: Any, b: Any) -> Any:
    """``a @ b`` with numpy's rules."""
    return _apply("matmul", [a, b])


def relu(x: Any) -> Any:
    """max(x, 0)."""
    return _apply("relu", [x])


def exp(x: Any) -> Any:
    return _apply("exp", [x])


def log(x: Any) -> Any:
    return _apply("log", [x])


def sqrt(x: Any) -> Any:
    return _apply("sqrt", [x])


def abs(x: Any) -> Any:  # noqa: A001 - numpy's name
    return _apply("abs", [x])


def sigmoid(x: Any) -> Any:
    return _apply("sigmoid", [x])


def tanh(x: Any) -> Any:
    return _apply("tanh", [x])


def where(cond: Any, x: Any, y: Any) -> Any:
    """``x`` where ``cond`` is nonzero, else ``y`` (numpy broadcasting)."""
    return _apply("where", [cond, x, y])


def einsum(subscripts: str, *operands: Any) -> Any:
    """numpy's einsum: any valid subscripts, ellipsis and implicit output included."""
    from thrifty.graph.ops import normalize_einsum

    shapes = [o.shape if isinstance(o, Tensor) else np.shape(o) for o in operands]
    subs, _ = normalize_einsum(subscripts, shapes)
    return _apply("einsum", list(operands), {"subscripts": subs})


def transpose(x: Any, axes: Sequence[int] | None = None) -> Any:
    nd = x.ndim if isinstance(x, Tensor) else np.ndim(x)
    perm = tuple(axes) if axes is not None else tuple(reversed(range(nd)))
    return _apply("transpose", [x], {"axes": perm})


def sum(x: Any, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Any:  # noqa: A001
    return _reduce("sum", x, axis, keepdims)


def max(x: Any, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Any:  # noqa: A001
    return _reduce("max", x, axis, keepdims)


def softmax(x: Any, axis: int = -1, mask: Any = None) -> Any:
    """Softmax along ``axis``; where ``mask`` is given, entries with ``mask == 0`` are left
    out (they get 0, and a slice with none left is all zeros)."""
    args = [x] if mask is None else [x, mask]
    return _apply("softmax", args, {"axis": int(axis)})


# -- programs --------------------------------------------------------------------------------
def type_of_value(name: str, v: Any) -> TensorType:
    """The TensorType of an argument: an array, a scipy.sparse matrix, a TensorType, a
    ``(shape, dtype)`` pair, or a number."""
    if isinstance(v, TensorType):
        return v
    if isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], tuple | list):
        try:
            return TensorType(tuple(v[0]), np.dtype(v[1]).name)
        except TypeError:
            raise SpecError(f"argument {name!r}: {v[1]!r} is not a numpy dtype") from None
    if hasattr(v, "shape") and hasattr(v, "dtype"):
        return TensorType(tuple(v.shape), np.dtype(v.dtype).name)
    if isinstance(v, bool | int | float | complex | np.generic):
        a = np.asarray(v)
        return TensorType((), a.dtype.name)
    raise SpecError(f"argument {name!r} of type {type(v).__name__} is not a tensor; pass a "
                    "numpy array, a scipy.sparse matrix, a number, or (shape, dtype)")


@dataclass(frozen=True, slots=True)
class Traced:
    """A Graph with the structure of the function's return value (``None``: one tensor)."""

    graph: Graph
    structure: type | None  # tuple or list when the function returned several tensors


def trace_function(fn: Callable[..., Any], types: Mapping[str, TensorType],
                   name: str | None = None) -> Traced:
    """Call ``fn`` once on symbolic tensors of ``types`` (by parameter name) and return the
    Graph it records, with the structure of its return value."""
    label = name or getattr(fn, "__name__", "program")
    tracer = _Tracer()
    sym = {k: tracer.add("input", [], {"name": k}, name=k, type=t) for k, t in types.items()}
    out = fn(**sym)
    structure: type | None = None
    outs: list[Any]
    if isinstance(out, tuple | list):
        structure, outs = type(out), list(out)
    else:
        outs = [out]
    if not outs:
        raise SpecError(f"program {label!r} returned nothing; return a tensor or a tuple of "
                        "tensors")
    ids = []
    for o in outs:
        if not isinstance(o, Tensor):
            o = _lift(o, tracer)
        ids.append(o.node)
    return Traced(Graph(tracer.nodes, tuple(ids)), structure)
