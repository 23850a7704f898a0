"""Exact integer arithmetic of the vectorised engine: decomposition, alignment, rounding.

Significands are integers (numpy int64 where the window is narrow enough, Python integers
in object arrays otherwise), so no float operation can round: a value is ``S * 2**L``
with integer arrays ``S`` and ``L``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from thrifty.errors import FormatError
from thrifty.numerics.formats import Format
from thrifty.numerics.units.model import ROUNDINGS

#: Exponent given to a zero term so that it never wins the alignment (not a result value).
_ZERO_EXP = -(1 << 40)


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
    >>> from thrifty.numerics.formats import get_format
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


def _window(t: _Terms, F: int | None, shifted_out: str,
            zero_exp: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Align terms (last axis) to their largest exponent, keep ``F`` fraction bits, add.

    Zero terms take part in the alignment with exponent ``zero_exp`` when it is set.
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
    if zero_exp is not None:
        E = np.maximum(E, np.where((t.m == 0).any(axis=-1), zero_exp, _ZERO_EXP))
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
    >>> from thrifty.numerics.formats import get_format
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


def _halves(f: int, pattern: str) -> tuple[np.ndarray, np.ndarray]:
    """Positions of the first and the second sub-step of an interleaved step of ``f``."""
    j = np.arange(f)
    first = (j % 2 == 0) if pattern == "odd_even" else (j % 4 < 2)
    return np.flatnonzero(first), np.flatnonzero(~first)


def _add_last(d: np.ndarray, c: np.ndarray, fout: Format, subnormals: bool) -> np.ndarray:
    """``d + c`` in ``fout``: two guard bits and a sticky bit, rounded to nearest-even.

    Khattak and Mikaitis's ``GEMM.m``, final addition of C: both operands are values of
    the output format; NaN/Inf follow IEEE rules.
    """
    fin = np.isfinite(d) & np.isfinite(c)
    dm, de, dn = decompose(np.where(fin, d, 0.0), fout, True, "partial sum")
    cm, ce, cn = decompose(np.where(fin, c, 0.0), fout, True, "addend c")
    p = fout.precision
    t = _Terms(np.stack([dm, cm], -1), np.stack([de, ce], -1) - (p - 1),
               np.stack([de, ce], -1), np.stack([dn, cn], -1))
    S, L = _window(t, p - 1 + 2, "sticky")
    r = round_scaled(S, L, fout, "nearest_even", subnormals)
    with np.errstate(invalid="ignore"):
        return np.where(fin, r, d + c)
