"""numpy functions applied to traced tensors (``__array_ufunc__``, ``__array_function__``).

Inside a ``@thrifty.program``, ``np.tanh(x)``, ``np.exp(x)``, ``np.matmul(a, b)``,
``np.einsum(...)``, ``np.sum(x, axis=...)``, ``np.where(c, x, y)``, ``np.maximum(x, 0)``
(relu) and the others in :data:`UFUNCS` and :data:`FUNCTIONS` record the same ops as
thrifty's own functions. Anything else is a :class:`~thrifty.errors.SpecError` naming the
supported functions; shape-changing operations (reshape, indexing and slicing,
concatenation, stacking) are refused: the sparse engine specializes whole-tensor ops on
patterns and has no sparse-aware form of them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

import numpy as np

from thrifty.errors import SpecError

__all__ = ["FUNCTIONS", "UFUNCS", "apply_function", "apply_ufunc", "refuse"]

#: numpy ufuncs (by name) and the spec-language op each records.
UFUNCS: dict[str, str] = {
    "add": "add", "subtract": "sub", "multiply": "mul", "divide": "div",
    "true_divide": "div", "matmul": "matmul", "negative": "neg", "absolute": "abs",
    "exp": "exp", "log": "log", "sqrt": "sqrt", "tanh": "tanh", "less": "lt",
    "less_equal": "le", "greater": "gt", "greater_equal": "ge", "equal": "eq",
    "not_equal": "ne",
}

_SHAPE_CHANGING = ("reshape", "ravel", "squeeze", "expand_dims", "concatenate", "stack",
                   "hstack", "vstack", "dstack", "column_stack", "split", "array_split",
                   "take", "broadcast_to", "tile", "repeat", "pad", "flip", "roll", "diag",
                   "tril", "triu", "moveaxis", "swapaxes")


def _supported() -> str:
    names = sorted({*UFUNCS, "maximum (against 0: relu)", "positive", *FUNCTIONS})
    return ", ".join(f"np.{n}" for n in names)


def refuse(what: str) -> NoReturn:
    """Raise the SpecError for a shape-changing operation the spec language lacks."""
    raise SpecError(
        f"{what} is not in the spec language: the sparse engine specializes whole-tensor "
        "ops on patterns and has no sparse-aware form of reshaping, indexing, slicing or "
        "concatenation; compute the pieces as separate program inputs or outputs instead. "
        f"Supported numpy functions: {_supported()}")


def _is_zero(x: Any) -> bool:
    from thrifty.front.trace import Tensor

    return not isinstance(x, Tensor) and np.ndim(x) == 0 and bool(np.asarray(x) == 0)


def apply_ufunc(ufunc: Any, method: str, inputs: Sequence[Any],
                kwargs: Mapping[str, Any]) -> Any:
    """The traced op of ``ufunc(*inputs)``, or a SpecError."""
    from thrifty.front import trace

    name = getattr(ufunc, "__name__", str(ufunc))
    if method != "__call__":
        raise SpecError(f"np.{name}.{method} is not in the spec language; call np.{name} "
                        f"itself. Supported numpy functions: {_supported()}")
    if kwargs:
        raise SpecError(f"np.{name}: keyword arguments {sorted(kwargs)} are not supported "
                        "in a traced program")
    if name == "positive":
        return inputs[0]
    if name == "maximum" and len(inputs) == 2 and any(_is_zero(x) for x in inputs):
        return trace.relu(inputs[1] if _is_zero(inputs[0]) else inputs[0])
    op = UFUNCS.get(name)
    if op is None:
        raise SpecError(f"np.{name} is not in the spec language. Supported numpy functions: "
                        f"{_supported()}")
    return trace._apply(op, list(inputs))


def _reduction(name: str) -> Callable[..., Any]:
    def fn(a: Any, axis: Any = None, dtype: Any = None, out: Any = None,
           keepdims: Any = False, **rest: Any) -> Any:
        from thrifty.front import trace

        if dtype is not None or out is not None or rest:
            raise SpecError(f"np.{name}: only axis= and keepdims= are supported in a traced "
                            "program")
        return getattr(trace, "sum" if name == "sum" else "max")(a, axis, bool(keepdims))
    return fn


def _einsum(*operands: Any, **kwargs: Any) -> Any:
    from thrifty.front import trace

    if kwargs:
        raise SpecError(f"np.einsum: keyword arguments {sorted(kwargs)} are not supported in "
                        "a traced program")
    return trace.einsum(*operands)


def _where(*args: Any) -> Any:
    from thrifty.front import trace

    if len(args) != 3:
        raise SpecError("np.where(cond) (the indices of nonzeros) is not in the spec "
                        "language; np.where(cond, x, y) is")
    return trace.where(*args)


def _transpose(a: Any, axes: Any = None) -> Any:
    from thrifty.front import trace

    return trace.transpose(a, axes)


def _dot(a: Any, b: Any, out: Any = None) -> Any:
    from thrifty.front import trace

    nd = (np.ndim(a) if not isinstance(a, trace.Tensor) else a.ndim,
          np.ndim(b) if not isinstance(b, trace.Tensor) else b.ndim)
    if out is not None or not all(1 <= d <= 2 for d in nd):
        raise SpecError("np.dot is supported for 1-D and 2-D operands (where it equals "
                        "matmul); use np.matmul or np.einsum otherwise")
    return trace.matmul(a, b)


def _shape(a: Any) -> tuple[int, ...]:
    return tuple(a.shape)


def _ndim(a: Any) -> int:
    return int(a.ndim)


#: numpy functions (by name) that have a traced form.
FUNCTIONS: dict[str, Callable[..., Any]] = {
    "einsum": _einsum, "sum": _reduction("sum"), "max": _reduction("max"),
    "amax": _reduction("max"), "where": _where, "transpose": _transpose, "dot": _dot,
    "shape": _shape, "ndim": _ndim,
}


def apply_function(func: Any, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    """The traced op of numpy function ``func(*args, **kwargs)``, or a SpecError."""
    name = getattr(func, "__name__", str(func))
    fn = FUNCTIONS.get(name)
    if fn is not None and getattr(np, name, None) is func:
        return fn(*args, **kwargs)
    if name in _SHAPE_CHANGING:
        refuse(f"np.{name}")
    raise SpecError(f"np.{name} is not in the spec language. Supported numpy functions: "
                    f"{_supported()}")
