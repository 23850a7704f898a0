"""The op registry: for every op, its type rule, flop count and numpy reference.

Adding an op is adding one :class:`OpDef` to :data:`OPS`. Engines key their own rules
(sparsity, error propagation) by the same op names.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from thrifty.errors import ShapeError, SpecError
from thrifty.graph.ir import TensorType

Infer = Callable[[Sequence[TensorType], Mapping[str, Any]], TensorType]
Flops = Callable[[Sequence[TensorType], TensorType, Mapping[str, Any]], int]


@dataclass(frozen=True, slots=True)
class OpDef:
    """One op: how many inputs (``None``: any), which attributes, and its three rules."""

    name: str
    arity: int | tuple[int, ...] | None
    attrs: tuple[str, ...]
    infer: Infer
    flops: Flops
    reference: Callable[..., np.ndarray]
    kind: str  # "source", "elementwise", "matmul", "einsum", "reduce", "layout", "softmax"

    def check_arity(self, n: int) -> None:
        ok = (self.arity is None or n == self.arity
              or (isinstance(self.arity, tuple) and n in self.arity))
        if not ok:
            raise SpecError(f"{self.name} takes {self.arity} inputs, got {n}")


OPS: dict[str, OpDef] = {}


def get_op(name: str) -> OpDef:
    """The registry entry of ``name``; an unknown name lists the valid ones."""
    try:
        return OPS[name]
    except KeyError:
        raise SpecError(f"unknown op {name!r}; valid ops are: {', '.join(sorted(OPS))}") from None


def _register(op: OpDef) -> None:
    OPS[op.name] = op


def _probe_dtype(fn: Callable[..., Any], types: Sequence[TensorType], op: str) -> str:
    try:
        with np.errstate(all="ignore"):
            out = fn(*[np.ones(1, dtype=t.dtype) for t in types])
    except TypeError as e:
        dts = ", ".join(t.dtype for t in types)
        raise SpecError(f"{op} is not defined for dtypes ({dts}): {e}") from None
    return np.asarray(out).dtype.name


def _broadcast(op: str, types: Sequence[TensorType]) -> tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*(t.shape for t in types)))
    except ValueError:
        shapes = " and ".join(str(t.shape) for t in types)
        raise ShapeError(f"{op}: operand shapes {shapes} do not broadcast together "
                         "(numpy broadcasting: trailing dimensions must be equal or 1)") from None


def _elementwise(name: str, fn: Callable[..., np.ndarray], arity: int,
                 cost: int = 1) -> None:
    def infer(types: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
        return TensorType(_broadcast(name, types), _probe_dtype(fn, types, name))

    def flops(types: Sequence[TensorType], out: TensorType, attrs: Mapping[str, Any]) -> int:
        return cost * out.size

    _register(OpDef(name, arity, (), infer, flops, fn, "elementwise"))


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, np.zeros((), dtype=np.asarray(x).dtype))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    if x.dtype.kind not in "fc":
        x = x.astype(np.float64)
    # exp of -|x| never overflows: the standard stable form
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


_BINARY: dict[str, Callable[..., np.ndarray]] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide,
    "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
    "eq": np.equal, "ne": np.not_equal}
for _name, _bin in _BINARY.items():
    _elementwise(_name, _bin, 2)
_UNARY: list[tuple[str, Callable[..., np.ndarray], int]] = [
    ("neg", np.negative, 1), ("abs", np.abs, 1), ("exp", np.exp, 1), ("log", np.log, 1),
    ("sqrt", np.sqrt, 1), ("relu", _relu, 1), ("sigmoid", _sigmoid, 4), ("tanh", np.tanh, 1)]
for _name, _un, _cost in _UNARY:
    _elementwise(_name, _un, 1, _cost)


def _where_ref(c: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.where(np.asarray(c) != 0, x, y)


def _where_infer(types: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    shape = _broadcast("where", types)
    return TensorType(shape, _probe_dtype(lambda c, x, y: np.where(c != 0, x, y), types,
                                          "where"))


_register(OpDef("where", 3, (), _where_infer, lambda ts, o, a: o.size, _where_ref,
                "elementwise"))


# -- sources ---------------------------------------------------------------------------------
def _no_infer(types: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    raise SpecError("input nodes take their type from the program's arguments")


def _const_infer(types: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    v = np.asarray(attrs["value"])
    return TensorType(v.shape, v.dtype.name)


def _const_ref(*, value: Any, **_: Any) -> np.ndarray:
    return np.asarray(value)


_register(OpDef("input", 0, ("name",), _no_infer, lambda ts, o, a: 0,
                lambda **_: np.zeros(()), "source"))
_register(OpDef("const", 0, ("value",), _const_infer, lambda ts, o, a: 0, _const_ref, "source"))


# -- matmul ----------------------------------------------------------------------------------
def matmul_shape(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """numpy's matmul shape rule (1-D promotion, broadcast batch dimensions)."""
    if len(a) == 0 or len(b) == 0:
        raise ShapeError(f"matmul: operand shapes {a} and {b}: matmul needs at least one "
                         "dimension on each side (use * for scalars)")
    a2 = (1,) + a if len(a) == 1 else a
    b2 = b + (1,) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        raise ShapeError(f"matmul: operand shapes {a} and {b} do not fit: the last dimension "
                         f"of the left ({a2[-1]}) must equal the second-to-last of the right "
                         f"({b2[-2]})")
    try:
        batch = tuple(np.broadcast_shapes(a2[:-2], b2[:-2]))
    except ValueError:
        raise ShapeError(f"matmul: batch dimensions of {a} and {b} do not broadcast") from None
    out = batch + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return out


def _matmul_infer(types: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    a, b = types
    return TensorType(matmul_shape(a.shape, b.shape), _probe_dtype(np.add, types, "matmul"))


def _matmul_flops(types: Sequence[TensorType], out: TensorType, attrs: Mapping[str, Any]) -> int:
    k = types[0].shape[-1]
    return 2 * out.size * k


_register(OpDef("matmul", 2, (), _matmul_infer, _matmul_flops, np.matmul, "matmul"))


# -- einsum ----------------------------------------------------------------------------------
def normalize_einsum(subscripts: str,
                     shapes: Sequence[tuple[int, ...]]) -> tuple[str, dict[str, int]]:
    """Explicit subscripts without ellipsis (``"ij,jk->ik"``) and every label's size.

    Ellipses are replaced by fresh labels; implicit mode follows numpy (labels that appear
    once, in alphabetical order, after the broadcast ellipsis dimensions).
    """
    s = subscripts.replace(" ", "")
    if s.count("->") > 1:
        raise ShapeError(f"einsum: {subscripts!r} has more than one '->'")
    lhs, arrow, rhs = s.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(shapes):
        raise ShapeError(f"einsum: {subscripts!r} names {len(terms)} operands but "
                         f"{len(shapes)} were given")
    letters = set(string.ascii_letters)
    for t in terms + ([rhs] if arrow else []):
        bad = set(t.replace("...", "")) - letters
        if bad or t.replace("...", "").count(".") or t.count("...") > 1:
            raise ShapeError(f"einsum: {subscripts!r}: invalid term {t!r}; terms are letters "
                             "a-z, A-Z and at most one '...'")
    used = set(s) & letters
    fresh = [c for c in string.ascii_letters if c not in used]
    ell_nd = 0
    for t, sh in zip(terms, shapes):
        n = len(t.replace("...", ""))
        if "..." in t:
            if len(sh) < n:
                raise ShapeError(f"einsum: operand of shape {sh} has fewer dimensions than "
                                 f"term {t!r}")
            ell_nd = max(ell_nd, len(sh) - n)
        elif len(sh) != n:
            raise ShapeError(f"einsum: term {t!r} has {n} labels but its operand has shape {sh}")
    if ell_nd > len(fresh):
        raise ShapeError("einsum: too many dimensions under '...'")
    ell = "".join(fresh[:ell_nd])
    sizes: dict[str, int] = {}
    new_terms = []
    for t, sh in zip(terms, shapes):
        if "..." in t:
            k = len(sh) - len(t.replace("...", ""))
            t = t.replace("...", ell[ell_nd - k:] if k else "")
        for c, d in zip(t, sh):
            if c in sizes and sizes[c] != d and 1 not in (sizes[c], d):
                raise ShapeError(f"einsum: {subscripts!r}: label {c!r} has size {sizes[c]} in "
                                 f"one operand and {d} in another (shapes "
                                 f"{' and '.join(map(str, shapes))})")
            sizes[c] = max(sizes.get(c, d), d) if c in sizes else d
        new_terms.append(t)
    if arrow:
        if "..." in rhs:
            out = rhs.replace("...", ell)
        elif ell_nd:
            raise ShapeError(f"einsum: {subscripts!r}: output must contain '...' when inputs do")
        else:
            out = rhs
        if len(set(out)) != len(out):
            raise ShapeError(f"einsum: {subscripts!r}: output repeats a label")
        missing = set(out) - set("".join(new_terms))
        if missing:
            raise ShapeError(f"einsum: {subscripts!r}: output labels {sorted(missing)} appear "
                             "in no input")
    else:
        counts: dict[str, int] = {}
        for t in new_terms:
            for c in t:
                counts[c] = counts.get(c, 0) + 1
        out = ell + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in ell))
    return ",".join(new_terms) + "->" + out, sizes


def _einsum_infer(types: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    subs, sizes = normalize_einsum(attrs["subscripts"], [t.shape for t in types])
    out = subs.split("->")[1]
    return TensorType(tuple(sizes[c] for c in out), _probe_dtype(np.add, types, "einsum")
                      if len(types) > 1 else types[0].dtype)


def _einsum_flops(types: Sequence[TensorType], out: TensorType, attrs: Mapping[str, Any]) -> int:
    _, sizes = normalize_einsum(attrs["subscripts"], [t.shape for t in types])
    return max(1, len(types)) * int(np.prod(list(sizes.values()), dtype=np.int64))


def _einsum_ref(*ops: np.ndarray, subscripts: str) -> np.ndarray:
    return np.asarray(np.einsum(subscripts, *ops))


_register(OpDef("einsum", None, ("subscripts",), _einsum_infer, _einsum_flops, _einsum_ref,
                "einsum"))


# -- layout and reductions -------------------------------------------------------------------
def normalize_axes(axis: int | Sequence[int] | None, ndim: int, op: str) -> tuple[int, ...]:
    """Axes as a sorted tuple of non-negative ints; ``None`` means all of them."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, int | np.integer) else tuple(axis)
    out = []
    for a in axes:
        if not -ndim <= int(a) < ndim:
            raise ShapeError(f"{op}: axis {a} is out of range for a tensor of {ndim} "
                             f"dimensions (valid: {-ndim} to {ndim - 1})")
        out.append(int(a) % ndim)
    if len(set(out)) != len(out):
        raise ShapeError(f"{op}: repeated axis in {axis!r}")
    return tuple(sorted(out))


def _transpose_infer(types: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    (t,) = types
    axes = tuple(attrs["axes"])
    if sorted(axes) != list(range(t.ndim)):
        raise ShapeError(f"transpose: axes {axes} are not a permutation of 0..{t.ndim - 1} "
                         f"for shape {t.shape}")
    return TensorType(tuple(t.shape[a] for a in axes), t.dtype)


_register(OpDef("transpose", 1, ("axes",), _transpose_infer, lambda ts, o, a: 0,
                lambda x, axes: np.transpose(x, axes), "layout"))


def _reduce(name: str, fn: Callable[..., np.ndarray]) -> None:
    def infer(types: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
        (t,) = types
        axes = normalize_axes(attrs["axis"], t.ndim, name)
        if name == "max" and any(t.shape[a] == 0 for a in axes):
            raise ShapeError(f"max: reduction over an empty axis of shape {t.shape} has no "
                             "identity")
        keep = bool(attrs["keepdims"])
        shape = tuple((1 if i in axes else d) for i, d in enumerate(t.shape)
                      if keep or i not in axes)
        with np.errstate(all="ignore"):
            dt = np.asarray(fn(np.ones((1,) * t.ndim, dtype=t.dtype), axis=axes)).dtype.name
        return TensorType(shape, dt)

    def ref(x: np.ndarray, axis: tuple[int, ...], keepdims: bool) -> np.ndarray:
        return np.asarray(fn(x, axis=tuple(axis), keepdims=keepdims))

    _register(OpDef(name, 1, ("axis", "keepdims"), infer,
                    lambda ts, o, a: ts[0].size, ref, "reduce"))


_reduce("sum", np.sum)
_reduce("max", np.max)


# -- softmax ---------------------------------------------------------------------------------
def softmax_ref(x: np.ndarray, mask: np.ndarray | None = None, *, axis: int) -> np.ndarray:
    """Softmax along ``axis``; entries where ``mask == 0`` are excluded and get 0.

    A slice with no included entry gives all zeros (never NaN).
    """
    x = np.asarray(x)
    if x.dtype.kind not in "fc":
        x = x.astype(np.float64)
    keep = np.ones(x.shape, dtype=bool) if mask is None else np.broadcast_to(
        np.asarray(mask) != 0, x.shape)
    with np.errstate(invalid="ignore", over="ignore"):
        xm = np.where(keep, x, -np.inf)
        mx = np.max(xm, axis=axis, keepdims=True) if x.shape[axis] else xm
        mx = np.where(np.isfinite(mx), mx, 0)
        e = np.where(keep, np.exp(x - mx), 0)
        s = np.sum(e, axis=axis, keepdims=True)
        out = np.zeros_like(e)
        np.divide(e, s, out=out, where=np.broadcast_to(s > 0, e.shape))
    return out


def _softmax_infer(types: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    x = types[0]
    (axis,) = normalize_axes(attrs["axis"], x.ndim, "softmax")
    if len(types) == 2:
        try:
            if np.broadcast_shapes(types[1].shape, x.shape) != x.shape:
                raise ValueError
        except ValueError:
            raise ShapeError(f"softmax: mask shape {types[1].shape} does not broadcast to the "
                             f"input shape {x.shape}") from None
    dt = x.dtype if np.dtype(x.dtype).kind in "fc" else "float64"
    return TensorType(x.shape, dt)


_register(OpDef("softmax", (1, 2), ("axis",), _softmax_infer, lambda ts, o, a: 5 * o.size,
                softmax_ref, "softmax"))


def infer_type(op: str, types: Sequence[TensorType], attrs: Mapping[str, Any]) -> TensorType:
    """Check arity and attribute names of ``op``, then apply its type rule."""
    d = get_op(op)
    d.check_arity(len(types))
    unknown = set(attrs) - set(d.attrs)
    if unknown:
        raise SpecError(f"{op}: unknown attribute(s) {sorted(unknown)}; valid attributes are "
                        f"{list(d.attrs) or 'none'}")
    missing = set(d.attrs) - set(attrs) - ({"name"} if op == "input" else set())
    if missing:
        raise SpecError(f"{op}: missing attribute(s) {sorted(missing)}")
    return d.infer(types, attrs)
