"""Bit-exact models of hardware matrix units: multi-term fused dot products ``d = c + sum a_i b_i``.

Policy
------
A matrix unit (an NVIDIA tensor core, an AMD matrix core, an Intel AMX tile unit) computes a
GEMM as a sequence of *steps*; one step fuses ``fma`` products and one addend into one
result. :class:`UnitModel` states how a step computes, in the parameters of Fasi, Higham,
Mikaitis and Pranesh ("Numerical behavior of NVIDIA tensor cores", PeerJ Comput. Sci. 7,
e330, 2021) and Khattak and Mikaitis ("Accurate models of NVIDIA tensor cores", ACM TACO,
2025; their MATLAB toolbox ``north-numerical-computing/MATLAB-tensor-core``):

1. **Products are exact.** ``a_i b_i`` of two input-format numbers is kept as an integer
   significand ``M`` (up to ``2p`` bits) with exponent ``e = e_a + e_b``; the significand
   ``M 2^(x-e)`` lies in ``[0, 4)`` (it is not renormalised), ``x`` its last bit's exponent.
2. **Alignment.** All terms of the step (the products and, when ``c_in_alignment``, the
   addend ``c``, read as an accumulator-format number with ``p_acc`` bits) are aligned to
   the largest exponent ``E``. The fixed-point window keeps ``F = p_acc - 1 + align_bits``
   fraction bits below ``2^E``; ``align_bits`` may be negative (fewer bits than the
   accumulator), or ``None`` for an exact (Kulisch-like) sum.
3. **Shifted-out bits** below ``2^(E-F)`` are ``"truncate"``\\ d (magnitudes toward zero),
   ``"round_down"`` (toward minus infinity) or ``"sticky"`` (kept as one OR-ed extra bit).
4. **Carry bits.** The aligned terms are added exactly, in a two's-complement sense, in an
   accumulator with ``carry_bits`` integer bits above the product's two (``None``: enough
   never to lose a carry; a finite number loses carries out of the top, modulo).
5. **Late addend.** When ``c_in_alignment`` is false the products are summed in their
   window first and ``c`` joins in a second, two-term alignment whose shifted-out bits are
   treated by ``late_shifted_out`` (AMD CDNA3).
6. **Interleaving.** With ``interleave`` a step is two fused sub-steps in sequence: the
   products at even positions with ``c``, then those at odd positions with that result
   (Hopper/Blackwell FP8 joins two 16-term vectors; CDNA3 FP8 odd/even grouping; no
   measured data here, so this reading of the published parameters is an assumption).
7. **Normalisation** keeps ``normalize_bits`` significant bits (toward zero) when the
   unit's normaliser is narrower than the output (Ada/L40S/Hopper FP8: 14 bits), then
8. **Final rounding** to the output format with ``rounding`` (``"toward_zero"`` or
   ``"nearest_even"``), subnormal outputs produced or flushed (``subnormals_out``); input
   subnormals read or flushed (``subnormals_in``). Overflow gives a signed infinity.

A K-long dot product, and each entry of a GEMM, is the **recursive sequence of steps**
``c_0 = c``, ``c_{s+1} = step(a[s f:(s+1) f], b[s f:(s+1) f], c_s)``, zero-padded to a
multiple of ``fma`` (the order in which the MATLAB toolbox's ``GEMM.m`` accumulates).

The arithmetic is exact: significands are integers (numpy int64 where the window is narrow
enough, Python integers in object arrays otherwise) and no float operation can round.
Three implementations compute the same bits and are tested against each other: the
vectorised numpy engine, a compiled engine (the same step as scalar integer loops, jitted
with numba where installed; finite windows with ``c`` in the alignment) and
:func:`reference_dot`, a plain exact-rational specification.

Validation: the presets reproduce every case of the measured V100, A100 and Ada data
(``shared/data/tensorcore``, 14 input/output configurations, 5000 cases each) bit for bit.
Two findings beyond the published parameter tables: with FP8 inputs and a binary32
result, Ada's normaliser keeps 14 significant bits (toward zero) after the 13-bit window;
with a binary16 result the window's sum is rounded directly (nearest-even).

Example
-------
>>> import numpy as np
>>> u = unit("a100", input="bf16", output="fp32")
>>> float(u.dot(np.ones(8), np.ones(8), 0.5))
8.5
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from thrifty.errors import FileFormatError, FormatError
from thrifty.numerics.formats import Format, get_format

#: Exponent given to a zero term so that it never wins the alignment (not a result value).
_ZERO_EXP = -(1 << 40)

SHIFTED_OUT = ("truncate", "round_down", "sticky")
ROUNDINGS = ("toward_zero", "nearest_even", "up", "down")


@dataclass(frozen=True, slots=True)
class UnitModel:
    """Parameters of one fused step of a matrix unit (see the module docstring).

    Example
    -------
    >>> m = UnitModel("toy", input="bf16", output="fp32", fma=4, align_bits=0)
    >>> m.window_bits
    23
    """

    name: str
    input: str
    output: str
    fma: int
    align_bits: int | None = 0
    shifted_out: str = "truncate"
    carry_bits: int | None = None
    c_in_alignment: bool = True
    late_shifted_out: str = "truncate"
    interleave: bool = False
    normalize_bits: int | None = None
    rounding: str = "toward_zero"
    subnormals_in: bool = True
    subnormals_out: bool = True
    accumulator: str = "binary32"
    source: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "input", get_format(self.input).name)
        object.__setattr__(self, "output", get_format(self.output).name)
        object.__setattr__(self, "accumulator", get_format(self.accumulator).name)
        if not isinstance(self.fma, int) or self.fma < 1:
            raise FormatError(f"unit {self.name!r}: fma must be a positive int, got {self.fma!r}")
        for field_name, value in (("shifted_out", self.shifted_out),
                                  ("late_shifted_out", self.late_shifted_out)):
            if value not in SHIFTED_OUT:
                raise FormatError(f"unit {self.name!r}: {field_name}={value!r}; "
                                  f"valid: {', '.join(SHIFTED_OUT)}")
        if self.rounding not in ROUNDINGS:
            raise FormatError(f"unit {self.name!r}: rounding={self.rounding!r}; "
                              f"valid: {', '.join(ROUNDINGS)}")
        if self.window_bits is not None and self.window_bits < 0:
            raise FormatError(f"unit {self.name!r}: align_bits={self.align_bits} leaves a "
                              "negative window; it must be at least -(p_acc - 1)")
        if self.carry_bits is not None and (
                self.carry_bits < 0 or self.align_bits is None or not self.c_in_alignment):
            raise FormatError(f"unit {self.name!r}: carry_bits must be None, or >= 0 for a "
                              "finite window with c in the alignment")
        if self.normalize_bits is not None and self.normalize_bits < 1:
            raise FormatError(f"unit {self.name!r}: normalize_bits must be >= 1 or None")

    @property
    def window_bits(self) -> int | None:
        """``F``: fraction bits kept below the largest exponent (``None``: exact)."""
        if self.align_bits is None:
            return None
        return get_format(self.accumulator).precision - 1 + self.align_bits

    def describe(self) -> dict[str, object]:
        """The parameters as a JSON-ready dict."""
        return {f: getattr(self, f) for f in self.__slots__}  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------------
# Exact integer helpers (int64 or object arrays of Python ints)
# ---------------------------------------------------------------------------------------

def _bitlen(x: np.ndarray) -> np.ndarray:
    """Bit length of non-negative integers, elementwise, as int64."""
    if x.dtype == object:
        return np.frompyfunc(int.bit_length, 1, 1)(x).astype(np.int64)
    return np.frexp(x.astype(np.float64))[1].astype(np.int64)


def _shift(m: np.ndarray, s: np.ndarray) -> np.ndarray:
    """``floor(m * 2**s)`` for non-negative integer ``m`` and integer shifts ``s``."""
    if m.dtype == object:
        s_obj = s.astype(object)
        return np.where(s >= 0, m << np.maximum(s_obj, 0), m >> np.maximum(-s_obj, 0))
    left = m << np.clip(s, 0, 62)
    right = m >> np.clip(-s, 0, 63)
    return np.where(s >= 0, left, right)


@dataclass(frozen=True, slots=True)
class _Terms:
    """Terms ``(-1)^neg * m * 2^x`` with alignment exponents ``e`` (``m 2^(x-e)`` < 4)."""

    m: np.ndarray
    x: np.ndarray
    e: np.ndarray
    neg: np.ndarray


def decompose(x: np.ndarray, fmt: Format, subnormals: bool = True,
              what: str = "value") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Split finite values of ``fmt`` into integer significand, exponent and sign.

    Returns ``(m, e, neg)`` with ``|x| = m * 2**(e - p + 1)``, ``m < 2**p``, ``e >= emin``
    (subnormals have ``e = emin`` and ``m < 2**(p-1)``), zeros with ``m = 0``.

    Raises
    ------
    FormatError
        When a value is not exactly representable in ``fmt`` (round it first with
        :func:`thrifty.numerics.rounding.round`).

    Example
    -------
    >>> decompose(np.array([1.5, -0.25]), get_format("bf16"))[0].tolist()
    [192, 128]
    """
    v = np.asarray(x, dtype=np.float64)
    a = np.abs(v)
    p, emin = fmt.precision, fmt.emin
    e = np.maximum(np.frexp(a)[1].astype(np.int64) - 1, emin)
    mf = np.ldexp(a, (p - 1 - e).astype(np.int32))
    m = mf.astype(np.int64)
    bad = (mf != m) | (a > fmt.max_finite)
    if np.any(bad):
        i = np.flatnonzero(bad.ravel())[0]
        raise FormatError(f"{what} {v.ravel()[i]!r} is not a finite value of {fmt.name} "
                          f"(precision {p}, max {fmt.max_finite}); round inputs to the "
                          "unit's formats first, e.g. thrifty.numerics.round(x, fmt)")
    if not subnormals:
        m = np.where(a < np.ldexp(1.0, emin), 0, m)
    return m, e, np.signbit(v)


def _window(t: _Terms, F: int | None, shifted_out: str) -> tuple[np.ndarray, np.ndarray]:
    """Align terms (last axis) to their largest exponent, keep ``F`` fraction bits, add.

    Returns ``(S, L)``: the exact signed integer sum and the exponent of its last bit.
    """
    if t.m.shape[-1] == 0:
        zero = np.zeros(t.m.shape[:-1], dtype=np.int64)
        return zero, zero
    e = np.where(t.m == 0, _ZERO_EXP, t.e)
    E = e.max(axis=-1)
    if F is None:
        x = np.where(t.m == 0, -_ZERO_EXP, t.x)
        L = x.min(axis=-1)
        L = np.where(L == -_ZERO_EXP, 0, L)
        sh = np.where(t.m == 0, 0, t.x - L[..., None])
        # int64 when every aligned term and the sum fit in 62 bits, else Python ints
        width = int(sh.max(initial=0)) + int(_bitlen(t.m).max(initial=0))
        fits = width + int(np.ceil(np.log2(max(t.m.shape[-1], 1)))) <= 62
        T = _shift(t.m if fits else t.m.astype(object), sh)
        S = np.where(t.neg, -T, T).sum(axis=-1)
        return S, L
    L = np.where(E == _ZERO_EXP, 0, E - F)
    if shifted_out == "sticky":
        L = L - 1
    sh = t.x - L[..., None]
    wide = F + 4 + int(np.ceil(np.log2(max(t.m.shape[-1], 1)))) > 60
    m = t.m.astype(object) if wide else t.m
    if shifted_out == "sticky":
        T = _shift(m, sh - 1)
        lost = m != _shift(T, 1 - sh)
        T = (T << 1) | lost.astype(m.dtype)
    else:
        T = _shift(m, sh)
        if shifted_out == "round_down":
            lost = m != _shift(T, -sh)
            T = T + (t.neg & lost).astype(m.dtype)
    S = np.where(t.neg, -T, T).sum(axis=-1)
    return S, L


def _as_terms(S: np.ndarray, L: np.ndarray) -> _Terms:
    """A signed sum ``S 2^L`` as one term whose alignment exponent is its leading bit."""
    mag = np.abs(S)
    e = L + _bitlen(mag) - 1
    return _Terms(mag[..., None], L[..., None], e[..., None], (S < 0)[..., None])


def round_scaled(S: np.ndarray, L: np.ndarray, fmt: Format, rounding: str,
                 subnormals: bool = True, precision: int | None = None) -> np.ndarray:
    """Round exact values ``S * 2**L`` (integer arrays) to ``fmt``; float64 results.

    ``precision`` overrides the format's significand bits (a narrower normaliser).
    Overflow gives a signed infinity; without ``subnormals`` results below the smallest
    normal are flushed to a signed zero. Exact zero gives +0.

    Example
    -------
    >>> round_scaled(np.array([3]), np.array([-1]), get_format("binary16"), "toward_zero")
    array([1.5])
    """
    p = fmt.precision if precision is None else precision
    emin, emax = fmt.emin, fmt.emax
    neg = S < 0
    mag = np.abs(S)
    nb = _bitlen(mag)
    eff = np.maximum(L + nb - 1, emin)
    q = eff - (p - 1)
    s = q - L
    if mag.dtype == object:
        s_pos = np.maximum(s, 0).astype(object)
        kept = mag >> s_pos
        rem = mag - (kept << s_pos)
        half = np.where(s > 0, np.left_shift(1, np.maximum(s - 1, 0).astype(object)), 1)
    else:
        s_pos = np.clip(s, 0, 63)
        kept = mag >> s_pos
        rem = mag - (kept << s_pos)
        half = np.where(s > 0, np.left_shift(1, np.clip(s - 1, 0, 62)), 1)
    inexact = rem != 0
    if rounding == "toward_zero":
        up = np.zeros(mag.shape, dtype=bool)
    elif rounding == "nearest_even":
        up = (rem > half) | ((rem == half) & inexact & ((kept % 2) == 1))
    elif rounding == "up":
        up = inexact & ~neg
    elif rounding == "down":
        up = inexact & neg
    else:
        raise FormatError(f"rounding {rounding!r}; valid: {', '.join(ROUNDINGS)}")
    kept = kept + up.astype(kept.dtype)
    exact = s <= 0
    value_mag = np.where(exact, np.ldexp(mag.astype(np.float64), L.astype(np.int64)),
                         np.ldexp(kept.astype(np.float64), q.astype(np.int64)))
    overflow = value_mag >= np.ldexp(1.0, emax + 1)
    if not fmt.has_inf:
        overflow = value_mag > fmt.max_finite
    value_mag = np.where(overflow, np.inf, value_mag)
    if not subnormals:
        value_mag = np.where(value_mag < np.ldexp(1.0, emin), 0.0, value_mag)
    out = np.where(neg, -value_mag, value_mag)
    return np.where(S == 0, 0.0, out)


# ---------------------------------------------------------------------------------------
# The unit
# ---------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Unit:
    """A matrix unit: a :class:`UnitModel` with batched ``dot``/``matmul`` executors.

    Example
    -------
    >>> import numpy as np
    >>> u = unit("v100", input="fp16", output="fp32")
    >>> a = np.array([1.0, 2.0**-24, 0, 0]); b = np.ones(4)
    >>> float(u.dot(a, b, 0.0)) == 1.0   # 2^-24 falls out of V100's 23-bit window
    True
    """

    model: UnitModel

    @property
    def name(self) -> str:
        return self.model.name

    # -- one fused step on decomposed inputs ------------------------------------------
    def _step(self, pa: tuple[np.ndarray, ...], pb: tuple[np.ndarray, ...],
              c: np.ndarray) -> np.ndarray:
        """``d = c + sum_j a_j b_j`` over the last axis (length <= fma), one step.

        An interleaved step is two fused sub-steps: the even positions with ``c``, then the
        odd positions with that result.
        """
        if self.model.interleave:
            even = self._fused(tuple(x[..., 0::2] for x in pa), tuple(x[..., 0::2] for x in pb),
                               c)
            return self._fused(tuple(x[..., 1::2] for x in pa), tuple(x[..., 1::2] for x in pb),
                               even)
        return self._fused(pa, pb, c)

    def _fused(self, pa: tuple[np.ndarray, ...], pb: tuple[np.ndarray, ...],
               c: np.ndarray) -> np.ndarray:
        md = self.model
        fin, facc, fout = (get_format(md.input), get_format(md.accumulator),
                           get_format(md.output))
        ma, ea, na = pa
        mb, eb, nb = pb
        shift = 2 * (fin.precision - 1)
        prod = _Terms(ma * mb, ea + eb - shift, ea + eb, na ^ nb)
        finite = np.isfinite(c)
        cm, ce, cn = decompose(np.where(finite, c, 0.0), facc, md.subnormals_in, "addend c")
        cterm = _Terms(cm[..., None], (ce - (facc.precision - 1))[..., None], ce[..., None],
                       cn[..., None])
        F = md.window_bits
        if md.c_in_alignment:
            cat = _Terms(*(np.concatenate([getattr(prod, f), getattr(cterm, f)], axis=-1)
                           for f in ("m", "x", "e", "neg")))
            S, L = _window(cat, F, md.shifted_out)
        else:
            pt = _as_terms(*_window(prod, F, md.shifted_out))
            two = _Terms(*(np.concatenate([getattr(pt, f), getattr(cterm, f)], axis=-1)
                           for f in ("m", "x", "e", "neg")))
            S, L = _window(two, F, md.late_shifted_out)
        if md.carry_bits is not None and F is not None:
            width = F + 2 + md.carry_bits + (1 if md.shifted_out == "sticky" else 0)
            mag = np.abs(S) % (np.ones_like(S) << width)
            S = np.where(S < 0, -mag, mag)
        if md.normalize_bits is not None:
            S = _truncate_bits(S, L, md.normalize_bits, fout.emin)
        d = round_scaled(S, L, fout, md.rounding, md.subnormals_out)
        return np.where(finite, d, c)

    # -- public API ---------------------------------------------------------------------
    def dot(self, a: object, b: object, c: object = 0.0, *,
            engine: str = "auto") -> np.ndarray:
        """Batched dot products ``c + sum_i a_i b_i`` over the last axis, step by step.

        ``a`` and ``b`` have shape ``(..., K)`` with values of the input format; ``c`` is
        broadcast to ``(...)`` and holds values of the output format. Returns float64
        values of the output format. NaN/Inf inputs follow IEEE rules (any NaN or
        ``inf - inf`` gives NaN, otherwise the infinity). ``engine``: ``"numpy"`` (the
        vectorised path), ``"compiled"`` (numba loops; finite windows with ``c`` in the
        alignment) or ``"auto"`` (compiled where possible).
        """
        use_compiled = self._use_compiled(engine)
        A = np.asarray(a, dtype=np.float64)
        B = np.asarray(b, dtype=np.float64)
        try:
            A, B = np.broadcast_arrays(A, B)
        except ValueError:
            raise FormatError(f"dot needs a and b of broadcastable shapes (..., K); got "
                              f"{A.shape} and {B.shape}") from None
        if A.ndim == 0 or A.shape[-1] == 0:
            raise FormatError(f"dot needs vectors of length K >= 1 on the last axis; got "
                              f"shape {A.shape}")
        C = np.broadcast_to(np.asarray(c, dtype=np.float64), A.shape[:-1]).copy()
        fout = get_format(self.model.output)
        _check_values(C, fout, "addend c")
        special, value = _specials(A, B, C)
        fine = np.isfinite(A) & np.isfinite(B) & ~special[..., None]
        A = np.where(fine, A, 0.0)
        B = np.where(fine, B, 0.0)
        fin = get_format(self.model.input)
        shape, K = C.shape, A.shape[-1]
        pa = decompose(A.reshape(-1, K), fin, self.model.subnormals_in, "a")
        pb = decompose(B.reshape(-1, K), fin, self.model.subnormals_in, "b")
        c0 = np.where(special, 0.0, C).reshape(-1)
        if use_compiled:
            kernels = _compiled()
            assert kernels is not None
            ip, maxfin = _kernel_params(self.model)
            flat = np.empty(c0.shape)
            kernels[0](*(np.ascontiguousarray(x) for x in pa + pb), c0, flat, ip, maxfin)
        else:
            flat = self._chain(pa, pb, c0)
        return np.where(special, value, flat.reshape(shape))

    def _use_compiled(self, engine: str) -> bool:
        if engine not in ("auto", "numpy", "compiled"):
            raise FormatError(f"engine {engine!r}; valid: auto, numpy, compiled")
        if engine == "numpy":
            return False
        ok = _compiled_eligible(self.model)
        if engine == "compiled":
            if not ok:
                raise FormatError(f"unit {self.name!r}: the compiled engine needs a finite "
                                  "window with c in the alignment; use engine='numpy'")
            if _compiled() is None:
                raise FormatError("the compiled engine needs numba (pip install numba)")
            return True
        return ok and _compiled() is not None

    def _chain(self, pa: tuple[np.ndarray, ...], pb: tuple[np.ndarray, ...],
               c: np.ndarray) -> np.ndarray:
        f = self.model.fma
        K = pa[0].shape[-1]
        steps = max(1, -(-K // f))
        pad = steps * f - K
        if pad:
            pa = tuple(np.concatenate([x, np.zeros(x.shape[:-1] + (pad,), x.dtype)], -1)
                       for x in pa)
            pb = tuple(np.concatenate([x, np.zeros(x.shape[:-1] + (pad,), x.dtype)], -1)
                       for x in pb)
        for s in range(steps):
            sl = slice(s * f, (s + 1) * f)
            c = self._step(tuple(x[..., sl] for x in pa), tuple(x[..., sl] for x in pb), c)
        return c

    def matmul(self, A: object, B: object, C: object = None, *,
               block_rows: int | None = None, engine: str = "auto") -> np.ndarray:
        """``D = C + A @ B`` as the unit computes it.

        Each ``D[i, j]`` is the recursive sequence of steps over ``k`` in chunks of
        ``fma`` (``c_0 = C[i, j]``), exactly as :meth:`dot` on row ``i`` of ``A`` and
        column ``j`` of ``B``. The numpy engine processes rows in blocks to bound memory;
        the compiled engine runs the (i, j) loops in parallel threads.
        """
        use_compiled = self._use_compiled(engine)
        A = np.asarray(A, dtype=np.float64)
        B = np.asarray(B, dtype=np.float64)
        if A.ndim != 2 or B.ndim != 2 or A.shape[1] != B.shape[0]:
            raise FormatError(f"matmul needs A (m, k) and B (k, n); got {A.shape} and "
                              f"{B.shape}")
        m, k = A.shape
        n = B.shape[1]
        C = np.zeros((m, n)) if C is None else np.broadcast_to(
            np.asarray(C, dtype=np.float64), (m, n))
        if not (np.all(np.isfinite(A)) and np.all(np.isfinite(B))):
            return self.dot(A[:, None, :], np.broadcast_to(B.T[None], (m, n, k)), C,
                            engine=engine)
        fin = get_format(self.model.input)
        _check_values(C, get_format(self.model.output), "addend C")
        pa = decompose(A, fin, self.model.subnormals_in, "A")
        pb = tuple(x.T for x in decompose(B, fin, self.model.subnormals_in, "B"))
        if use_compiled:
            kernels = _compiled()
            assert kernels is not None
            ip, maxfin = _kernel_params(self.model)
            out = np.empty((m, n))
            kernels[1](*(np.ascontiguousarray(x) for x in pa + pb),
                       np.ascontiguousarray(C, dtype=np.float64), out, ip, maxfin)
            return out
        rows = block_rows or max(1, (1 << 21) // max(1, n * min(k, self.model.fma)))
        out = np.empty((m, n))
        for i0 in range(0, m, rows):
            i1 = min(m, i0 + rows)
            ba = tuple(np.broadcast_to(x[i0:i1, None, :], (i1 - i0, n, k)) for x in pa)
            bb = tuple(np.broadcast_to(x[None, :, :], (i1 - i0, n, k)) for x in pb)
            out[i0:i1] = self._chain(ba, bb, np.array(C[i0:i1], dtype=np.float64))
        return out


def _truncate_bits(S: np.ndarray, L: np.ndarray, bits: int, emin: int) -> np.ndarray:
    """Keep ``bits`` significant bits of ``S 2^L`` (toward zero; fewer below ``2^emin``)."""
    mag = np.abs(S)
    nb = _bitlen(mag)
    eff = np.maximum(L + nb - 1, emin)
    s = np.maximum(eff - (bits - 1) - L, 0)
    if mag.dtype == object:
        s = s.astype(object)
    else:
        s = np.minimum(s, 62)
    kept = (mag >> s) << s
    return np.where(S < 0, -kept, kept)


def _check_values(x: np.ndarray, fmt: Format, what: str) -> None:
    fin = np.isfinite(x)
    decompose(np.where(fin, x, 0.0), fmt, True, what)


def _specials(A: np.ndarray, B: np.ndarray, C: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(mask, value)``: where a NaN/Inf input decides the result, and that result."""
    with np.errstate(invalid="ignore"):
        prods = A * B
    anynan = np.isnan(prods).any(-1) | np.isnan(C)
    pinf = (prods == np.inf).any(-1) | (C == np.inf)
    ninf = (prods == -np.inf).any(-1) | (C == -np.inf)
    value = np.where(anynan | (pinf & ninf), np.nan, np.where(pinf, np.inf, -np.inf))
    return anynan | pinf | ninf, value


# ---------------------------------------------------------------------------------------
# Presets
# ---------------------------------------------------------------------------------------

_KM = ("Khattak & Mikaitis, Accurate models of NVIDIA tensor cores (ACM TACO 2025), "
       "MATLAB-tensor-core models/")
_FHMP = "Fasi, Higham, Mikaitis & Pranesh, PeerJ CS 2021"

#: Input format families by canonical name.
_FP8 = ("float8_e4m3fn", "float8_e5m2")


def _nvidia(arch: str, fin: str, fout: str) -> UnitModel:
    """NVIDIA presets: parameters of Khattak & Mikaitis's ``<arch>TC.m``."""
    fp16_out = fout == "binary16"
    rnd = "nearest_even" if fp16_out else "toward_zero"
    base: dict[str, Any] = dict(name=arch, input=fin, output=fout, rounding=rnd)
    supported = {
        "v100": ("binary16",),
        "a100": ("binary16", "bfloat16", "tensorfloat32"),
        "a2": ("binary16", "bfloat16", "tensorfloat32"),
        "ada": ("binary16", "bfloat16", "tensorfloat32") + _FP8,
        "l40s": ("binary16", "bfloat16", "tensorfloat32") + _FP8,
        "h100": ("binary16", "bfloat16", "tensorfloat32") + _FP8,
        "h200": ("binary16", "bfloat16", "tensorfloat32") + _FP8,
        "b200": ("binary16", "bfloat16", "tensorfloat32") + _FP8,
    }[arch]
    if fin not in supported:
        raise FormatError(f"unit {arch!r} has no {fin} input; valid: {', '.join(supported)}")
    if fout not in ("binary32", "binary16"):
        raise FormatError(f"unit {arch!r} outputs binary32 or binary16, not {fout}")
    if fp16_out and fin in ("bfloat16", "tensorfloat32"):
        raise FormatError(f"unit {arch!r}: {fin} inputs accumulate in binary32 only")
    # FP8 with a binary32 result: the normaliser keeps 14 bits (p_acc + align_bits), as the
    # measured Ada data require; with a binary16 result the window rounds directly.
    nrm8 = None if fp16_out else 14
    if arch == "v100":
        return UnitModel(**base, fma=4, align_bits=0, source=_KM + "V100TC.m; " + _FHMP)
    if arch in ("a100", "a2"):
        fma = 4 if fin == "tensorfloat32" else 8
        return UnitModel(**base, fma=fma, align_bits=1, source=_KM + "A100TC.m, A2TC.m")
    if arch in ("ada", "l40s"):
        if fin in _FP8:
            return UnitModel(**base, fma=16, align_bits=-10, normalize_bits=nrm8,
                             source=_KM + "AdaTC.m, L40STC.m")
        if arch == "l40s" and fp16_out:
            raise FormatError("unit 'l40s': binary16 output is not modelled (L40STC.m)")
        fma = 4 if fin == "tensorfloat32" else 8
        return UnitModel(**base, fma=fma, align_bits=1, source=_KM + "AdaTC.m, L40STC.m")
    if arch in ("h100", "h200"):
        if fin in _FP8:
            return UnitModel(**base, fma=32, align_bits=-10, normalize_bits=nrm8,
                             interleave=True, source=_KM + "H100TC.m, H200TC.m")
        fma = 8 if fin == "tensorfloat32" else 16
        return UnitModel(**base, fma=fma, align_bits=2, source=_KM + "H100TC.m, H200TC.m")
    # b200
    if fin in _FP8:
        if fp16_out:
            raise FormatError("unit 'b200': fp8 inputs with binary16 output are not "
                              "modelled (B200TC.m forces binary32)")
        return UnitModel(**base, fma=32, align_bits=2, interleave=True,
                         source=_KM + "B200TC.m")
    fma = 8 if fin == "tensorfloat32" else 16
    return UnitModel(**base, fma=fma, align_bits=2, source=_KM + "B200TC.m")


def _amd(arch: str, fin: str, fout: str) -> UnitModel:
    """AMD CDNA matrix cores: Khattak & Mikaitis's ``CDNA1/2/3.m`` (binary32 output).

    CDNA1: exact accumulation, one nearest-even rounding per step. CDNA2: the toolbox's
    pairwise summation with unlimited alignment bits, modelled as exact accumulation, with
    subnormal inputs and outputs flushed. CDNA3: a 24-bit window for the products, ``c``
    added after in a two-term alignment that rounds down, nearest-even result; FP8 steps
    of 16 with odd/even grouping. No measured data here: parameters as published.
    """
    if fout != "binary32":
        raise FormatError(f"unit {arch!r} accumulates in binary32 only, not {fout}")
    src = _KM + {"cdna1": "CDNA1.m (MI100)", "cdna2": "CDNA2.m (MI210/MI250)",
                 "cdna3": "CDNA3.m (MI300)"}[arch]
    if arch == "cdna1":
        if fin not in ("binary16", "bfloat16"):
            raise FormatError(f"unit 'cdna1' has no {fin} input; valid: binary16, bfloat16")
        return UnitModel(arch, fin, fout, fma=4 if fin == "binary16" else 2, align_bits=None,
                         rounding="nearest_even", source=src)
    if arch == "cdna2":
        if fin not in ("binary16", "bfloat16"):
            raise FormatError(f"unit 'cdna2' has no {fin} input; valid: binary16, bfloat16")
        return UnitModel(arch, fin, fout, fma=4, align_bits=None, rounding="nearest_even",
                         subnormals_in=False, subnormals_out=False, source=src)
    valid = ("binary16", "bfloat16", "tensorfloat32") + _FP8
    if fin not in valid:
        raise FormatError(f"unit 'cdna3' has no {fin} input; valid: {', '.join(valid)}")
    fma = {"tensorfloat32": 4}.get(fin, 16 if fin in _FP8 else 8)
    return UnitModel(arch, fin, fout, fma=fma, align_bits=1, rounding="nearest_even",
                     c_in_alignment=False, late_shifted_out="round_down",
                     interleave=fin in _FP8, source=src)


def _amx(arch: str, fin: str, fout: str) -> UnitModel:
    """Intel AMX TDPBF16PS: a chain of binary32 FMAs, nearest-even, DAZ and FTZ."""
    if fin != "bfloat16" or fout != "binary32":
        raise FormatError(f"unit 'amx' computes bfloat16 x bfloat16 + binary32 only; got "
                          f"input {fin}, output {fout}")
    return UnitModel(arch, fin, fout, fma=1, align_bits=None, rounding="nearest_even",
                     subnormals_in=False, subnormals_out=False,
                     source="Intel Architecture Instruction Set Extensions Reference, "
                            "TDPBF16PS (FMA chain, RNE, DAZ/FTZ)")


_PRESETS = {**{a: _nvidia for a in ("v100", "a100", "a2", "ada", "l40s", "h100", "h200",
                                    "b200")},
            **{a: _amd for a in ("cdna1", "cdna2", "cdna3")},
            "amx": _amx}
_UNIT_ALIASES = {"volta": "v100", "ampere": "a100", "hopper": "h100", "blackwell": "b200",
                 "mi100": "cdna1", "mi210": "cdna2", "mi250": "cdna2", "mi250x": "cdna2",
                 "mi300": "cdna3", "mi300x": "cdna3", "amx_bf16": "amx", "intel_amx": "amx",
                 "rtx1000": "ada", "ada_lovelace": "ada"}


def unit_names() -> list[str]:
    """Names of the preset units."""
    return list(_PRESETS)


def preset(name: str, input: str = "fp16", output: str = "fp32") -> UnitModel:
    """The :class:`UnitModel` of a preset unit for one input/output format pair.

    Raises
    ------
    FormatError
        For an unknown unit (listing the valid ones) or an unsupported format pair.
    """
    key = str(name).strip().lower()
    key = _UNIT_ALIASES.get(key, key)
    if key not in _PRESETS:
        raise FormatError(f"unknown unit {name!r}; valid: {', '.join(_PRESETS)} (aliases: "
                          f"{', '.join(sorted(_UNIT_ALIASES))})")
    return _PRESETS[key](key, get_format(input).name, get_format(output).name)


def unit(name: str | UnitModel, input: str = "fp16", output: str = "fp32",
         **overrides: object) -> Unit:
    """A :class:`Unit` for a preset name (or a :class:`UnitModel`), with optional overrides.

    Example
    -------
    >>> unit("h100", input="bf16", output="fp32").model.fma
    16
    """
    model = name if isinstance(name, UnitModel) else preset(name, input, output)
    if overrides:
        model = replace(model, **overrides)  # type: ignore[arg-type]
    return Unit(model)


# ---------------------------------------------------------------------------------------
# Validation against measured tensor-core outputs
# ---------------------------------------------------------------------------------------

_FILE_FORMATS = {"fp16": "binary16", "bf16": "bfloat16", "tf32": "tensorfloat32",
                 "e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2", "fp32": "binary32"}


@dataclass(frozen=True, slots=True)
class ValidationSet:
    """One folder of measured cases: inputs, addends and the results the GPU returned."""

    folder: Path
    input: str
    a: np.ndarray
    b: np.ndarray
    c: np.ndarray
    d: dict[str, np.ndarray]


def _read_hex_words(path: Path) -> np.ndarray:
    rows: list[list[int]] = []
    width = None
    with open(path) as fh:
        for lineno, line in enumerate(fh, 1):
            words = line.split()
            if not words:
                continue
            if width is None:
                width = len(words)
            if len(words) != width:
                raise FileFormatError(path, f"{len(words)} values, expected {width} like "
                                      "line 1", line=lineno)
            try:
                vals = [int(w, 16) for w in words]
            except ValueError:
                raise FileFormatError(path, "expected hexadecimal binary32 bit patterns "
                                      "such as 3f800000", line=lineno) from None
            if any(len(w) > 8 for w in words):
                raise FileFormatError(path, "a binary32 bit pattern has at most 8 hex "
                                      "digits", line=lineno)
            rows.append(vals)
    if not rows:
        raise FileFormatError(path, "no cases")
    return np.array(rows, dtype=np.uint32).view(np.float32).astype(np.float64)


def _read_bit_strings(path: Path) -> np.ndarray:
    vals: list[int] = []
    with open(path) as fh:
        for lineno, line in enumerate(fh, 1):
            s = line.strip()
            if not s:
                continue
            if len(s) != 32 or set(s) - {"0", "1"}:
                raise FileFormatError(path, "expected a 32-character string of 0s and 1s "
                                      "(a binary32 bit pattern)", line=lineno)
            vals.append(int(s, 2))
    if not vals:
        raise FileFormatError(path, "no cases")
    return np.array(vals, dtype=np.uint32).view(np.float32).astype(np.float64)


def load_validation_set(folder: str | Path) -> ValidationSet:
    """Read the ``a_*``, ``b_*``, ``c_*`` and ``d_*_{fp32,fp16}`` files of one folder.

    File format: ../shared/data/README.md (tensorcore section).

    Raises
    ------
    FileFormatError
        For a missing or malformed file, naming the file and the line.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise FileFormatError(folder, "not a folder of a_*/b_*/c_*/d_* files")

    def one(prefix: str) -> Path:
        found = sorted(folder.glob(f"{prefix}_*.txt"))
        if len(found) != 1:
            raise FileFormatError(folder, f"expected one {prefix}_*.txt file, found "
                                  f"{len(found)}")
        return found[0]

    pa, pb, pc = one("a"), one("b"), one("c")
    m = re.match(r"a_.+_([A-Za-z0-9]+)\.txt$", pa.name)
    key = m.group(1).lower() if m else ""
    if key not in _FILE_FORMATS:
        raise FileFormatError(pa, f"cannot tell the input format from the name; expected "
                              f"a_<gpu>_<{'|'.join(_FILE_FORMATS)}>.txt")
    a, b, c = _read_hex_words(pa), _read_hex_words(pb), _read_bit_strings(pc)
    d: dict[str, np.ndarray] = {}
    for pd in sorted(folder.glob("d_*.txt")):
        mo = re.match(r"d_.+_(fp32|fp16)\.txt$", pd.name)
        if mo is None:
            raise FileFormatError(pd, "expected a name d_<gpu>_<fp32|fp16>.txt")
        d[_FILE_FORMATS[mo.group(1)]] = _read_bit_strings(pd)
    if not d:
        raise FileFormatError(folder, "no d_*_fp32.txt or d_*_fp16.txt result file")
    if a.shape != b.shape:
        raise FileFormatError(pb, f"{b.shape[0]} cases of {b.shape[1]} values; {pa.name} "
                              f"has {a.shape[0]} of {a.shape[1]}")
    for path, arr in [(pc, c)] + [(folder / f"d_*_{k}", v) for k, v in d.items()]:
        if arr.shape[0] != a.shape[0]:
            raise FileFormatError(path, f"{arr.shape[0]} lines; {pa.name} has {a.shape[0]}")
    return ValidationSet(folder, _FILE_FORMATS[key], a, b, c, d)


@dataclass(frozen=True, slots=True)
class ValidationReport:
    """Bit-exact comparison of a unit with measured results."""

    unit: str
    input: str
    output: str
    folder: str
    cases: int
    matched: int
    mismatches: tuple[int, ...]

    def to_json(self) -> dict[str, object]:
        return {"unit": self.unit, "input": self.input, "output": self.output,
                "folder": self.folder, "cases": self.cases, "matched": self.matched,
                "first_mismatches": list(self.mismatches[:20])}


def _bits32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float32).view(np.uint32)


def validate(u: Unit, data: ValidationSet) -> ValidationReport:
    """Run ``u`` on every case of ``data`` and count bit-exact matches (NaNs match NaNs).

    The addend ``c`` is read in the unit's output format (for binary16 outputs it is first
    rounded to binary16 by nearest-even, as a binary16 accumulator register holds it).
    """
    out = u.model.output
    if out not in data.d:
        raise FileFormatError(data.folder, f"no measured results for output {out}; "
                              f"available: {', '.join(data.d)}")
    c = data.c
    if out != "binary32":
        c = _to_format(c, get_format(out))
    got = u.dot(data.a, data.b, c)
    want = data.d[out]
    same = (_bits32(got) == _bits32(want)) | (np.isnan(got) & np.isnan(want))
    bad = tuple(int(i) for i in np.flatnonzero(~same))
    return ValidationReport(u.name, u.model.input, out, str(data.folder), int(got.size),
                            int(same.sum()), bad)


def _to_format(x: np.ndarray, fmt: Format) -> np.ndarray:
    """Round binary32 values to ``fmt`` by nearest-even (exact integer rounding)."""
    fin = np.isfinite(x)
    m, e, neg = decompose(np.where(fin, x, 0.0), get_format("binary32"), True, "c")
    S = np.where(neg, -m, m)
    r = round_scaled(S, e - 23, fmt, "nearest_even")
    return np.where(fin, np.where((S == 0) & neg, -0.0, r), x)


# ---------------------------------------------------------------------------------------
# Readable scalar reference (exact rationals), for differential tests of the fast path
# ---------------------------------------------------------------------------------------

def _exp_of(v: Fraction) -> int:
    """``floor(log2(|v|))`` of a nonzero rational, exactly."""
    n, d = abs(v.numerator), v.denominator
    e = n.bit_length() - d.bit_length()
    if Fraction(n, d) < Fraction(2) ** e:
        e -= 1
    return e


def _floor_ulps(v: Fraction, ulp: Fraction) -> int:
    """``floor(v / ulp)`` as an int."""
    return int(math.floor(v / ulp))


def round_fraction(v: Fraction, fmt: Format, rounding: str, subnormals: bool = True,
                   precision: int | None = None) -> float:
    """Round an exact rational to ``fmt`` (scalar reference of :func:`round_scaled`).

    Example
    -------
    >>> round_fraction(Fraction(1, 3), get_format("bf16"), "toward_zero")
    0.33203125
    """
    if v == 0:
        return 0.0
    p = fmt.precision if precision is None else precision
    e = max(_exp_of(v), fmt.emin)
    q = Fraction(2) ** (e - (p - 1))
    a = abs(v)
    k = _floor_ulps(a, q)
    r = a - k * q
    neg = v < 0
    if rounding == "nearest_even":
        k += int(r > q / 2 or (r == q / 2 and k % 2 == 1))
    elif rounding == "up":
        k += int(r > 0 and not neg)
    elif rounding == "down":
        k += int(r > 0 and neg)
    mag = k * q
    if (fmt.has_inf and mag >= Fraction(2) ** (fmt.emax + 1)) or (
            not fmt.has_inf and mag > Fraction(fmt.max_finite)):
        out = math.inf
    elif not subnormals and mag < Fraction(2) ** fmt.emin:
        out = 0.0
    else:
        out = float(mag)
    return -out if neg else out


def _ref_window(terms: list[tuple[Fraction, int]], F: int | None,
                mode: str) -> tuple[Fraction, Fraction]:
    """Aligned sum of ``(value, alignment exponent)`` terms, as the hardware's adder.

    Returns the sum and the total magnitude of what the alignment dropped.
    """
    live = [(v, e) for v, e in terms if v != 0]
    if not live:
        return Fraction(0), Fraction(0)
    exact = sum((v for v, _ in live), Fraction(0))
    if F is None:
        return exact, Fraction(0)
    E = max(e for _, e in live)
    ulp = Fraction(2) ** (E - F)
    total, lost = Fraction(0), Fraction(0)
    for v, _ in live:
        if mode == "truncate":
            k = _floor_ulps(abs(v), ulp)
            kept = (k if v > 0 else -k) * ulp
        elif mode == "round_down":
            kept = _floor_ulps(v, ulp) * ulp
        else:  # sticky: one extra bit that ORs everything shifted out
            k = _floor_ulps(abs(v), ulp) * 2 + int(abs(v) % ulp != 0)
            kept = (k if v > 0 else -k) * (ulp / 2)
        total += kept
        lost += abs(v - kept)
    return total, lost


def reference_dot(model: UnitModel, a: list[float], b: list[float], c: float,
                  losses: list[Fraction] | None = None) -> float:
    """One dot product through ``model``'s steps, in exact rational arithmetic (scalar).

    Slow and plain: the specification the vectorised :meth:`Unit.dot` is tested against.
    When ``losses`` is a list, the exact total magnitude of everything each step dropped
    (alignment, carries, normalisation, final rounding) is appended to it, one entry per
    step: their sum bounds ``|result - exact|`` (the certified a posteriori bound).
    """
    f = model.fma
    K = len(a)
    steps = max(1, -(-K // f))
    a = list(a) + [0.0] * (steps * f - K)
    b = list(b) + [0.0] * (steps * f - K)
    acc = float(c)
    halves = [slice(None)] if not model.interleave else [slice(0, None, 2), slice(1, None, 2)]
    for s in range(steps):
        for half in halves:
            if not math.isfinite(acc):
                break
            xs = a[s * f:(s + 1) * f][half]
            ys = b[s * f:(s + 1) * f][half]
            acc = _ref_fused(model, xs, ys, acc, losses)
    return acc


def _ref_fused(model: UnitModel, xs: list[float], ys: list[float], acc: float,
               losses: list[Fraction] | None) -> float:
    fin, facc, fout = (get_format(model.input), get_format(model.accumulator),
                       get_format(model.output))
    F = model.window_bits

    def read(x: float, fmt: Format) -> tuple[Fraction, int]:
        v = Fraction(x)
        if v == 0 or (not model.subnormals_in and abs(v) < Fraction(2) ** fmt.emin):
            return Fraction(0), fmt.emin
        return v, max(_exp_of(v), fmt.emin)

    prods = []
    for x, y in zip(xs, ys):
        (va, ea), (vb, eb) = read(x, fin), read(y, fin)
        prods.append((va * vb, ea + eb))
    cterm = read(acc, facc)
    flushed = sum((abs(Fraction(x) * Fraction(y)) - abs(v)
                   for (x, y), (v, _) in zip(zip(xs, ys), prods)), Fraction(0))
    lost = flushed + abs(Fraction(acc) - cterm[0])
    if model.c_in_alignment:
        total, dropped = _ref_window(prods + [cterm], F, model.shifted_out)
        lost += dropped
    else:
        partial, dropped = _ref_window(prods, F, model.shifted_out)
        lost += dropped
        pe = _exp_of(partial) if partial != 0 else 0
        total, dropped = _ref_window([(partial, pe), cterm], F, model.late_shifted_out)
        lost += dropped
    before = total
    if model.carry_bits is not None and F is not None and total != 0:
        live = [e for v, e in prods + [cterm] if v != 0]
        E = max(live)
        ulp = Fraction(2) ** (E - F - (1 if model.shifted_out == "sticky" else 0))
        width = F + 2 + model.carry_bits + (1 if model.shifted_out == "sticky" else 0)
        units = int(abs(total) / ulp) % (1 << width)
        total = units * ulp if total > 0 else -units * ulp
    if model.normalize_bits is not None and total != 0:
        e = max(_exp_of(total), fout.emin)
        q = Fraction(2) ** (e - (model.normalize_bits - 1))
        units = _floor_ulps(abs(total), q)
        total = units * q if total > 0 else -units * q
    acc = round_fraction(total, fout, model.rounding, model.subnormals_out)
    if losses is not None and math.isfinite(acc):
        losses.append(lost + abs(before - Fraction(acc)))
    return acc


# ---------------------------------------------------------------------------------------
# Compiled path: the same step as scalar loops, jitted with numba where it is installed
# ---------------------------------------------------------------------------------------
# Integer parameters of a model, in this order (``_kernel_params``):
_P_FMA, _P_F, _P_SHIFT, _P_MODE, _P_CARRY, _P_NORM, _P_RND, _P_SUBIN, _P_SUBOUT, \
    _P_INTER, _P_PACC, _P_EMINACC, _P_POUT, _P_EMINOUT, _P_EMAXOUT, _P_INF = range(16)
_MODES = {"truncate": 0, "round_down": 1, "sticky": 2}
_RNDS = {"toward_zero": 0, "nearest_even": 1, "up": 2, "down": 3}
_prange = range  # numba.prange once compiled


def _kernel_params(md: UnitModel) -> tuple[np.ndarray, float]:
    fin, facc, fout = (get_format(md.input), get_format(md.accumulator),
                       get_format(md.output))
    p = np.array([md.fma, md.window_bits, 2 * (fin.precision - 1), _MODES[md.shifted_out],
                  -1 if md.carry_bits is None else md.carry_bits, md.normalize_bits or 0,
                  _RNDS[md.rounding], int(md.subnormals_in), int(md.subnormals_out),
                  int(md.interleave), facc.precision, facc.emin, fout.precision, fout.emin,
                  fout.emax, int(fout.has_inf)], dtype=np.int64)
    return p, float(fout.max_finite)


def _compiled_eligible(md: UnitModel) -> bool:
    """Models the compiled kernel computes: a finite window narrow enough for int64."""
    F = md.window_bits
    return F is not None and md.c_in_alignment and F + 8 + md.fma.bit_length() < 60


def _align_term_py(m, sh, mode, neg):
    """A term ``m 2^sh`` (window units) kept as an integer: truncated, floored or sticky."""
    s = sh - 1 if mode == 2 else sh  # sticky mode keeps one more bit below the window
    if s >= 0:
        t = m << s
        lost = False
    else:
        r = min(-s, 63)
        t = m >> r
        lost = (t << r) != m
    if mode == 2:
        t = (t << 1) | (1 if lost else 0)
    elif mode == 1 and neg and lost:
        t += 1
    return -t if neg else t


def _fused_scalar_py(ma, ea, na, mb, eb, nb, start, stop, stride, c, ip, maxfin):
    """One fused step over positions ``start:stop:stride`` of one row pair (scalar)."""
    F = ip[_P_F]
    shift = ip[_P_SHIFT]
    mode = ip[_P_MODE]
    pacc = ip[_P_PACC]
    eminacc = ip[_P_EMINACC]
    # the addend, read in the accumulator format
    ac = abs(c)
    cm = 0
    ce = eminacc
    if ac != 0.0 and (ip[_P_SUBIN] == 1 or ac >= math.ldexp(1.0, eminacc)):
        ce = max(math.frexp(ac)[1] - 1, eminacc)
        cm = int(math.ldexp(ac, pacc - 1 - ce))
    E = -(1 << 40)
    if cm != 0:
        E = ce
    for j in range(start, stop, stride):
        if ma[j] != 0 and mb[j] != 0:
            e = ea[j] + eb[j]
            if e > E:
                E = e
    if E == -(1 << 40):
        return 0.0
    L = E - F
    if mode == 2:
        L -= 1
    S = 0
    for j in range(start, stop, stride):
        if ma[j] != 0 and mb[j] != 0:
            S += _align_term(ma[j] * mb[j], ea[j] + eb[j] - shift - L, mode, na[j] != nb[j])
    if cm != 0:
        S += _align_term(cm, ce - (pacc - 1) - L, mode, c < 0.0)
    if ip[_P_CARRY] >= 0:
        width = F + 2 + ip[_P_CARRY] + (1 if mode == 2 else 0)
        mag = abs(S) % (1 << width)
        S = -mag if S < 0 else mag
    negS = S < 0
    mag = -S if negS else S
    if mag == 0:
        return 0.0
    eminout = ip[_P_EMINOUT]
    nbits = 0
    t = mag
    while t > 0:
        nbits += 1
        t >>= 1
    if ip[_P_NORM] > 0:
        eff = max(L + nbits - 1, eminout)
        s = eff - (ip[_P_NORM] - 1) - L
        if s > 0:
            mag = (mag >> min(s, 63)) << min(s, 63)
            if mag == 0:
                return 0.0
            nbits = 0
            t = mag
            while t > 0:
                nbits += 1
                t >>= 1
    p = ip[_P_POUT]
    eff = max(L + nbits - 1, eminout)
    q = eff - (p - 1)
    s = q - L
    if s <= 0:
        val = math.ldexp(float(mag), L)
    else:
        sc = min(s, 63)
        kept = mag >> sc
        rem = mag - (kept << sc)
        rnd = ip[_P_RND]
        up = False
        if rem != 0:
            if rnd == 1:
                half = 1 << min(s - 1, 62)
                up = rem > half or (rem == half and (kept & 1) == 1)
                if s > 63:
                    up = False
            elif rnd == 2:
                up = not negS
            elif rnd == 3:
                up = negS
        if up:
            kept += 1
        val = math.ldexp(float(kept), q)
    if ip[_P_INF] == 1:
        if val >= math.ldexp(1.0, ip[_P_EMAXOUT] + 1):
            val = math.inf
    elif val > maxfin:
        val = math.inf
    if ip[_P_SUBOUT] == 0 and val < math.ldexp(1.0, eminout):
        val = 0.0
    return -val if negS else val


def _chain_scalar_py(ma, ea, na, mb, eb, nb, c, ip, maxfin):
    """The recursive sequence of steps for one row pair (scalar)."""
    k = ma.shape[0]
    f = ip[_P_FMA]
    for s0 in range(0, k, f):
        s1 = min(s0 + f, k)
        if not math.isfinite(c):
            return c
        if ip[_P_INTER] == 1:
            c = _fused_scalar(ma, ea, na, mb, eb, nb, s0, s1, 2, c, ip, maxfin)
            if not math.isfinite(c):
                return c
            c = _fused_scalar(ma, ea, na, mb, eb, nb, s0 + 1, s1, 2, c, ip, maxfin)
        else:
            c = _fused_scalar(ma, ea, na, mb, eb, nb, s0, s1, 1, c, ip, maxfin)
    return c


def _dots_kernel_py(ma, ea, na, mb, eb, nb, c, out, ip, maxfin):
    for i in _prange(ma.shape[0]):
        out[i] = _chain_scalar(ma[i], ea[i], na[i], mb[i], eb[i], nb[i], c[i], ip, maxfin)


def _gemm_kernel_py(ma, ea, na, mbt, ebt, nbt, C, out, ip, maxfin):
    for i in _prange(ma.shape[0]):
        for j in range(mbt.shape[0]):
            out[i, j] = _chain_scalar(ma[i], ea[i], na[i], mbt[j], ebt[j], nbt[j], C[i, j],
                                      ip, maxfin)


_align_term = _align_term_py
_fused_scalar = _fused_scalar_py
_chain_scalar = _chain_scalar_py


@functools.cache
def _compiled() -> tuple | None:
    """The numba-compiled ``(dots, gemm)`` kernels, or ``None`` without numba."""
    try:
        import numba
    except ImportError:
        return None
    g = globals()
    g["_align_term"] = numba.njit(nogil=True, cache=True)(_align_term_py)
    g["_fused_scalar"] = numba.njit(nogil=True, cache=True)(_fused_scalar_py)
    g["_chain_scalar"] = numba.njit(nogil=True, cache=True)(_chain_scalar_py)
    g["_prange"] = numba.prange
    par = numba.njit(nogil=True, parallel=True, cache=True)
    return par(_dots_kernel_py), par(_gemm_kernel_py)
