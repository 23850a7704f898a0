"""Argument checks of the unit API: every bad argument is a clear :class:`ThriftyError`.

Operands must be real arrays (floating, integer or boolean dtypes, or the ml_dtypes float
types); complex, string, object and ragged inputs are refused rather than truncated or
converted with a warning. Shapes that do not fit are :class:`ShapeError`\\ s naming them.
"""

from __future__ import annotations

import math

import numpy as np

from thrifty.errors import FormatError, ShapeError, SpecError

ENGINES = ("auto", "numpy", "compiled")

#: ml_dtypes float types, read exactly as float64.
_ML_FLOATS = frozenset({
    "bfloat16", "float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn", "float8_e3m4",
    "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
    "float8_e5m2fnuz", "float8_e5m3fnu", "float8_e8m0fnu"})


def real_array(x: object, what: str) -> np.ndarray:
    """``x`` as a float64 array, or :class:`SpecError` for complex, text, object or ragged
    input."""
    try:
        a = np.asarray(x)
    except (ValueError, TypeError) as e:
        raise ShapeError(f"{what} is not a rectangular array of numbers ({e})") from None
    kind = a.dtype.kind
    if kind not in "fiub" and a.dtype.name not in _ML_FLOATS:
        hint = ("complex values would lose their imaginary part; pass the real part "
                "explicitly" if kind == "c" else "convert it to a float array first")
        raise SpecError(f"{what} must hold real numbers (a float, integer or bool array), "
                        f"got dtype {a.dtype}: {hint}")
    if kind == "f" and a.dtype.itemsize > 8:
        raise SpecError(f"{what} has dtype {a.dtype}, wider than float64: round it to "
                        "float64 explicitly (its extra bits would be dropped)")
    return np.asarray(a, dtype=np.float64)


def engine_name(engine: object) -> str:
    """A valid engine name, or :class:`FormatError` listing them."""
    if not isinstance(engine, str) or engine not in ENGINES:
        raise FormatError(f"engine {engine!r}; valid: {', '.join(ENGINES)}")
    return engine


def block_rows(value: object) -> int | None:
    """``None`` or a positive number of rows, or :class:`SpecError`."""
    if value is None:
        return None
    ok = isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)
    if not ok or int(value) < 1:  # type: ignore[call-overload]
        shown = value if not isinstance(value, float) or math.isfinite(value) else str(value)
        raise SpecError(f"block_rows must be a positive integer (rows per block of the numpy "
                        f"engine) or None; got {shown!r}")
    return int(value)  # type: ignore[call-overload]


def addend(c: object, shape: tuple[int, ...], what: str) -> np.ndarray:
    """The addend broadcast to the result's ``shape`` (a copy), or :class:`ShapeError`."""
    C = real_array(c, what)
    try:
        return np.broadcast_to(C, shape).copy()
    except ValueError:
        raise ShapeError(f"{what} has shape {C.shape}, which does not broadcast to the "
                         f"result's shape {shape}") from None
