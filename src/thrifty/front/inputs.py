"""Program inputs made safe to run: numbers only, well-formed sparse arrays, torch converted.

:func:`as_inputs` is applied to the arguments of every program call. It passes numeric
numpy arrays and numbers through untouched; it refuses object, string and other
non-numeric dtypes with a :class:`~thrifty.errors.SpecError`; it checks the structure of
CSR/CSC arrays (their index pointers and the range of their indices: a cheap pass, so that
a malformed array is a :class:`~thrifty.errors.PatternError` rather than a scipy or C++
error, or an out-of-bounds read in a compiled kernel); and it turns torch tensors into
numpy arrays (detached, on the CPU; ``bfloat16`` as :mod:`ml_dtypes` ``bfloat16``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from thrifty.errors import PatternError, SpecError

__all__ = ["as_inputs", "as_input"]

_NUMERIC_KINDS = frozenset("biufc")


def as_inputs(inputs: dict[str, Any]) -> dict[str, Any]:
    """:func:`as_input` of every value (the dict is returned as is when nothing changes)."""
    out = inputs
    for name, v in inputs.items():
        w = as_input(name, v)
        if w is not v:
            if out is inputs:
                out = dict(inputs)
            out[name] = w
    return out


def as_input(name: str, v: Any) -> Any:
    """``v`` checked (and converted, for torch tensors) as the program input ``name``."""
    if type(v) is np.ndarray:
        if v.dtype.kind not in _NUMERIC_KINDS:
            _check_dtype(name, v.dtype)
        return v
    if hasattr(v, "indptr") and hasattr(v, "indices") and hasattr(v, "format"):
        _check_dtype(name, v.dtype)
        _check_compressed(name, v)
        return v
    module = type(v).__module__.split(".")[0]
    if module == "torch" and hasattr(v, "detach"):
        return _from_torch(name, v)
    if isinstance(v, np.ndarray | np.generic) or (hasattr(v, "dtype") and hasattr(v, "shape")):
        _check_dtype(name, np.dtype(v.dtype) if not isinstance(v.dtype, np.dtype) else v.dtype)
    return v


def _check_dtype(name: str, dtype: Any) -> None:
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise SpecError(f"input {name!r}: dtype {dtype!r} is not a numpy dtype; pass "
                        "numeric numpy arrays, scipy.sparse arrays or torch tensors") from None
    if dt.kind in _NUMERIC_KINDS or type(dt).__module__.startswith("ml_dtypes") or \
            dt.type.__module__.startswith("ml_dtypes"):
        return
    raise SpecError(f"input {name!r} has dtype {dt} ({dt.kind!r}); programs take numbers: "
                    "bool, integer, floating or complex arrays (or ml_dtypes formats)")


def _check_compressed(name: str, A: Any) -> None:
    """CSR/CSC index pointers and index ranges, as scipy's check_format would, but cheap."""
    if A.format not in ("csr", "csc"):
        return
    major, minor = A.shape if A.format == "csr" else A.shape[::-1]
    what = "row" if A.format == "csr" else "column"
    ptr, ind = np.asarray(A.indptr), np.asarray(A.indices)
    problem = None
    if ptr.ndim != 1 or ptr.size != major + 1:
        problem = f"indptr has {ptr.size} entries; a {A.shape} {A.format} array needs {major + 1}"
    elif ptr.dtype.kind not in "iu" or ind.dtype.kind not in "iu":
        problem = f"index arrays have dtypes {ptr.dtype}/{ind.dtype}, not integers"
    elif ptr[0] != 0:
        problem = f"indptr starts at {ptr[0]}, not 0"
    elif ptr[-1] > ind.size or ptr[-1] > np.asarray(A.data).size:
        problem = (f"indptr ends at {ptr[-1]} but there are {ind.size} indices and "
                   f"{np.asarray(A.data).size} values")
    elif major and (ptr[1:] < ptr[:-1]).any():
        k = int(np.flatnonzero(ptr[1:] < ptr[:-1])[0])
        problem = f"indptr decreases at {what} {k} ({ptr[k]} then {ptr[k + 1]})"
    else:
        used = ind[:ptr[-1]]
        # one pass: as unsigned integers, negative indices are huge too
        unsigned = used.view(used.dtype.str.replace("i", "u")) if used.dtype.kind == "i" \
            else used
        if used.size and int(unsigned.max()) >= minor:
            bad = int(used.min()) if int(used.min()) < 0 else int(used.max())
            problem = f"index {bad} is outside 0..{minor - 1}"
    if problem is not None:
        raise PatternError(f"input {name!r}: malformed {A.format.upper()} array: {problem}")


def _from_torch(name: str, t: Any) -> np.ndarray:
    import torch

    if t.layout != torch.strided:
        raise SpecError(f"input {name!r}: a torch tensor with layout {t.layout} is not "
                        "supported; pass a scipy.sparse array (or a dense torch tensor)")
    t = t.detach().cpu().resolve_conj().resolve_neg()
    if t.dtype == torch.bfloat16:
        import ml_dtypes

        return t.contiguous().view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    try:
        return t.numpy()
    except (TypeError, RuntimeError) as exc:
        raise SpecError(f"input {name!r}: torch dtype {t.dtype} has no numpy equivalent "
                        f"({exc})") from None
