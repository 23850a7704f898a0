"""Bit-exact rounding, encoding and decoding for every :class:`~thrifty.numerics.formats.Format`.

Policy. Inputs are converted exactly to binary64 (binary16/32, bfloat16 and the ml_dtypes
8-bit types all embed exactly), then rounded **once**, directly from binary64 to the
target, so no double rounding occurs. The work is done on the binary64 bit patterns with
vectorised integer numpy operations: the 53-bit significand is shifted right by the number
of bits the target cannot hold at that exponent (more in the target's subnormal range),
and the shifted-out bits decide the rounding. The result is a code; :func:`round` decodes
it (a lookup table for formats of at most 16 bits).

Two engines give identical results: ``engine="numpy"``, the vectorised reference above,
and ``engine="numba"``, the same algorithm compiled as one loop over the raw input bits
(binary32, binary16 and bfloat16 inputs are read as they are; a branch-free loop handles
the deterministic roundings and a general one the stochastic roundings and the rare
special cases; :mod:`.rounding_fast` and :mod:`.rounding_jit`). ``"auto"`` (the default)
takes the compiled loop for arrays of at least 4096 elements. The tests compare the two
on every format, rounding and saturation.

Rounding modes (IEEE 754-2019 §4.3, and IEEE P3109 Interim Report v4.0 for stochastic
rounding, as in Graphcore's gfloat):

``nearest_even``, ``nearest_away``, ``toward_zero``, ``up`` (toward +inf), ``down``
(toward -inf), ``odd`` (truncate, then set the last bit when inexact), and with
``stochastic_bits = N`` random bits ``r`` drawn as
``rng.integers(0, 2**N, size=x.shape, dtype=numpy.uint64)``:

* ``stochastic``: the discarded fraction is first rounded to N bits, ties to even, giving
  ``d``; round away from zero when ``d + r >= 2**N`` (gfloat ``Stochastic``);
* ``stochastic_odd``: the same with ties to odd (gfloat ``StochasticOdd``);
* ``stochastic_fastest``: the discarded fraction truncated to N bits (gfloat
  ``StochasticFastest``; biased).

Stochastic rounding without ``rng`` raises :class:`FormatError`: pass a seed (an int) or
a ``numpy.random.Generator``, so that every run is reproducible and no two calls share
random bits by accident.

Saturation (P3109 SatNone / SatFinite / SatPropagate; OCP OFP8's non-saturating
conversion is ``none``, its saturating one and NVIDIA's ``.satfinite`` are ``finite``):

* ``none``: a finite value whose rounded magnitude exceeds the largest finite one becomes
  +-inf, or NaN where the format has no infinity (OCP E4M3), or the largest finite value
  where the format has neither (MX FP6/FP4: their only conversion). As in IEEE 754, the
  directed roundings that point toward zero (``toward_zero``, ``odd``, ``up`` for
  negative and ``down`` for positive values) give the largest finite value instead.
  Infinite inputs map like overflow.
* ``finite``: overflow and infinities give +-max finite.
* ``propagate``: overflow gives +-max finite; infinities stay infinite (NaN if the
  format has no infinity; max finite if it has neither).

Special inputs: NaN gives NaN (sign kept, payload not) and raises :class:`FormatError`
for formats without NaN. Negative zero gives -0 where the format has it, else +0.
Unsigned formats give NaN for every negative nonzero input. Formats without zero (E8M0)
give NaN for zero inputs and their smallest value for inputs below it.

Non-floating inputs (integers, booleans, complex, objects) are rejected with
:class:`FormatError`: convert them explicitly first.

Example
-------
>>> import numpy as np
>>> from thrifty.numerics import round, encode
>>> round(np.array([1.0625, 500.0]), "e4m3")
array([ 1., nan])
>>> round(np.array([500.0]), "e4m3", saturation="finite")
array([448.])
>>> encode(np.array([1.0]), "bf16")
array([16256], dtype=uint16)
"""

from __future__ import annotations

import functools
from typing import Literal

import numpy as np

from thrifty.errors import FormatError, ShapeError
from thrifty.numerics import rounding_fast
from thrifty.numerics.formats import Format, get_format

__all__ = ["ENGINES", "ROUNDINGS", "SATURATIONS", "STOCHASTIC", "decode", "encode", "round"]

Rounding = Literal["nearest_even", "nearest_away", "toward_zero", "up", "down", "odd",
                   "stochastic", "stochastic_odd", "stochastic_fastest"]
Saturation = Literal["none", "finite", "propagate"]
Engine = Literal["auto", "numpy", "numba"]

#: Implementations: the vectorised numpy reference, the compiled loop, or "auto" (the
#: compiled loop where the input has at least 4096 elements and a dtype it reads).
ENGINES: tuple[str, ...] = ("auto", "numpy", "numba")
_FAST_MIN_SIZE = 4096

#: Every rounding mode name.
ROUNDINGS: tuple[str, ...] = ("nearest_even", "nearest_away", "toward_zero", "up", "down",
                              "odd", "stochastic", "stochastic_odd", "stochastic_fastest")
#: The stochastic ones.
STOCHASTIC: frozenset[str] = frozenset({"stochastic", "stochastic_odd", "stochastic_fastest"})
#: Every saturation mode name.
SATURATIONS: tuple[str, ...] = ("none", "finite", "propagate")

_U = np.uint64
_SIGN = _U(1 << 63)
_ABS = _U((1 << 63) - 1)
_FRAC = _U((1 << 52) - 1)
_HIDDEN = _U(1 << 52)

_ML_FLOATS = frozenset({
    "bfloat16", "float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn", "float8_e3m4",
    "float8_e4m3", "float8_e4m3b11fnuz", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2",
    "float8_e5m2fnuz", "float8_e5m3fnu", "float8_e8m0fnu"})


def _as_float64(x: object) -> np.ndarray:
    """``x`` as a float64 array (exact for every floating input), or FormatError."""
    return np.asarray(_as_float(x), dtype=np.float64)


def _as_float(x: object) -> np.ndarray:
    """``x`` as an array of its own floating dtype, or FormatError."""
    try:
        a = np.asarray(x)
    except (ValueError, TypeError) as e:
        raise ShapeError(f"rounding needs a rectangular array of floats ({e})") from None
    if (a.dtype.kind == "f" and a.dtype.itemsize <= 8) or a.dtype.name in _ML_FLOATS:
        return a
    raise FormatError(
        f"rounding needs floating-point input (float16/32/64, bfloat16 or an ml_dtypes "
        f"float type), got dtype {a.dtype}; convert explicitly, e.g. x.astype(np.float64) "
        "(extended precision would be rounded twice)")


def _check_modes(fmt: Format, rounding: str, saturation: str, engine: str = "auto",
                 rng: object = None, stochastic_bits: object = None) -> None:
    for what, v in (("engine", engine), ("rounding", rounding), ("saturation", saturation)):
        if not isinstance(v, str):
            raise FormatError(f"{what} is named by a string, got {type(v).__name__}")
    if rounding not in STOCHASTIC and (rng is not None or stochastic_bits is not None):
        raise FormatError(f"rng and stochastic_bits apply to the stochastic roundings "
                          f"({', '.join(sorted(STOCHASTIC))}) only, not to {rounding!r}")
    if engine not in ENGINES:
        raise FormatError(f"unknown engine {engine!r}; valid: {', '.join(ENGINES)}")
    if rounding not in ROUNDINGS:
        raise FormatError(f"unknown rounding {rounding!r}; valid: {', '.join(ROUNDINGS)}")
    if saturation not in SATURATIONS:
        raise FormatError(
            f"unknown saturation {saturation!r}; valid: {', '.join(SATURATIONS)}")


def _random_bits(shape: tuple[int, ...], rng: object, nbits: int | None,
                 rounding: str) -> np.ndarray:
    if nbits is None or isinstance(nbits, bool) or not isinstance(nbits, int | np.integer) \
            or not 1 <= nbits <= 32:
        raise FormatError(f"rounding={rounding!r} needs stochastic_bits, an integer in "
                          f"1..32, got {nbits!r}")
    if rng is None:
        raise FormatError(f"rounding={rounding!r} needs rng: a seed (int) or a "
                          "numpy.random.Generator, so the result is reproducible")
    if isinstance(rng, int | np.integer) and not isinstance(rng, bool):
        gen = np.random.default_rng(int(rng))
    elif isinstance(rng, np.random.Generator):
        gen = rng
    else:
        raise FormatError(f"rng must be an int seed or a numpy.random.Generator, "
                          f"got {type(rng).__name__}")
    return gen.integers(0, 1 << int(nbits), size=shape, dtype=np.uint64)


def _round_up(kept: np.ndarray, rem: np.ndarray, shift: np.ndarray, neg: np.ndarray,
              odd: np.ndarray, rounding: str, rbits: np.ndarray | None,
              nbits: int) -> np.ndarray:
    """Whether to add one unit in the last place to the truncated significand ``kept``.

    ``rem`` holds the ``shift`` discarded bits (all of the significand when ``shift`` >
    63), ``odd`` the parity of the truncated code.
    """
    sh = np.minimum(shift, _U(63))
    inexact = rem != 0
    if rounding == "toward_zero":
        return np.zeros(kept.shape, dtype=bool)
    if rounding == "up":
        return inexact & ~neg
    if rounding == "down":
        return inexact & neg
    if rounding == "odd":
        return inexact & ~odd
    half = (_U(1) << sh) >> _U(1)
    if rounding == "nearest_even":
        return (rem > half) | ((rem == half) & inexact & odd)
    if rounding == "nearest_away":
        return (rem >= half) & inexact
    # Stochastic: d = the discarded fraction scaled to nbits bits.
    assert rbits is not None
    n = _U(nbits)
    wide = shift <= n                                # exact: d = rem << (n - shift)
    dshift = np.where(wide, _U(0), np.minimum(shift - n, _U(63)))
    d = np.where(wide, rem << np.where(wide, n - shift, _U(0)), rem >> dshift)
    if rounding in ("stochastic", "stochastic_odd"):
        low = rem & ((_U(1) << dshift) - _U(1))
        dhalf = (_U(1) << dshift) >> _U(1)
        tie = (low == dhalf) & (dshift > 0)
        d_odd = (d & _U(1)).astype(bool)
        tie_up = d_odd if rounding == "stochastic" else ~d_odd
        d = d + ((low > dhalf) | (tie & tie_up)).astype(_U)
    return (d + rbits) >= (_U(1) << n)


def _encode_core(x: np.ndarray, fmt: Format, rounding: str, saturation: str,
                 rng: object, stochastic_bits: int | None) -> np.ndarray:
    """Round float64 ``x`` to ``fmt`` and return the codes as uint64."""
    t, p, bias = fmt.mantissa_bits, fmt.precision, fmt.bias
    u = np.ascontiguousarray(x).view(_U).reshape(x.shape)
    neg = (u & _SIGN) != 0
    a = u & _ABS
    big_e = (a >> _U(52)).astype(np.int64)
    frac = a & _FRAC
    is_normal64 = big_e > 0
    m = np.where(is_normal64, frac | _HIDDEN, frac)
    e_scale = np.where(is_normal64, big_e - 1023, -1022)       # x = m * 2**(e_scale - 52)
    if fmt.has_subnormals:
        e_eff = np.maximum(e_scale, fmt.emin)
    else:
        e_eff = e_scale
    shift = (e_eff - e_scale + (53 - p)).astype(_U)
    sh = np.minimum(shift, _U(63))
    kept = m >> sh
    rem = m & ((_U(1) << sh) - _U(1))
    if p == 1 and fmt.tie_parity == "code":
        odd = (kept != 0) & (((e_eff + bias) & 1) == 1)
    else:
        odd = (kept & _U(1)) == 1
    rbits = None
    if rounding in STOCHASTIC:
        rbits = _random_bits(x.shape, rng, stochastic_bits, rounding)
    kept = kept + _round_up(kept, rem, shift, neg, odd, rounding, rbits,
                            0 if stochastic_bits is None else int(stochastic_bits))
    # code of the magnitude; the carry kept == 2**p moves into the exponent field by itself
    mag = ((e_eff + bias).astype(_U) << _U(t)) + kept - (_U(1) << _U(t))
    if not fmt.has_subnormals:                                   # no zero: clamp to smallest
        mag = np.where(e_scale < fmt.emin, _U(0), mag)
    return _specials(fmt, x, neg, mag, rounding, saturation)


def _specials(fmt: Format, x: np.ndarray, neg: np.ndarray, mag: np.ndarray, rounding: str,
              saturation: str) -> np.ndarray:
    """Apply overflow, saturation, inf, NaN, zero and sign rules; return full codes."""
    top = (1 << fmt.magnitude_bits) - 1
    inf_mag = _U(top - fmt.num_high_nans)
    max_mag = _U(fmt.max_code)
    limit = np.where(neg, max_mag + _U(1), max_mag) if fmt.twos_complement else \
        np.full(neg.shape, max_mag)
    is_nan = np.isnan(x)
    is_inf = np.isinf(x)
    if fmt.has_nan:
        make_nan = is_nan.copy()
    elif is_nan.any():
        raise FormatError(f"{fmt.name} has no NaN, and the input holds "
                          f"{int(is_nan.sum())} NaN(s); remove them or choose a format "
                          "with NaN")
    else:
        make_nan = np.zeros(x.shape, dtype=bool)
    # where overflow goes without saturation: inf, else NaN, else (neither) max finite
    overflow_to = "inf" if fmt.has_inf else ("nan" if fmt.has_nan else "max")
    over = ~is_nan & ~is_inf & (mag > limit)
    if over.any():
        if saturation != "none" or overflow_to == "max":
            to_max = over
        elif rounding in ("toward_zero", "odd"):
            to_max = over
        elif rounding in ("up", "down"):
            to_max = over & (neg if rounding == "up" else ~neg)
        else:
            to_max = np.zeros_like(over)
        mag = np.where(to_max, limit, mag)
        rest = over & ~to_max
        if overflow_to == "inf":
            mag = np.where(rest, inf_mag, mag)
        else:
            make_nan |= rest
    if is_inf.any():
        if saturation == "finite" or overflow_to == "max":
            mag = np.where(is_inf, limit, mag)
        elif overflow_to == "inf":
            mag = np.where(is_inf, inf_mag, mag)
        else:
            make_nan |= is_inf
    zero_in = x == 0
    if not fmt.signed:
        make_nan |= neg & ~zero_in
        if not fmt.has_zero:
            make_nan |= zero_in
        return np.where(make_nan, _U(top), mag)
    if fmt.twos_complement:
        return np.where(neg, (~mag + _U(1)) & _U((1 << fmt.bits) - 1), mag)
    if not fmt.has_negative_zero:
        neg = neg & (mag != 0)
    codes = mag | (neg.astype(_U) << _U(fmt.bits - 1))
    if make_nan.any():
        sign = _U(1 << (fmt.bits - 1))
        if fmt.nan == "negative_zero":
            nan_codes = np.full(codes.shape, sign)
        else:
            nan_mag = inf_mag | _U(1 << (fmt.mantissa_bits - 1)) if fmt.nan == "ieee" \
                else _U(top)
            nan_codes = np.where((x.view(_U) & _SIGN) != 0, sign | nan_mag, nan_mag)
        codes = np.where(make_nan, nan_codes, codes)
    return codes


def _code_dtype(fmt: Format) -> type[np.unsignedinteger]:
    for bits, dt in ((8, np.uint8), (16, np.uint16), (32, np.uint32)):
        if fmt.bits <= bits:
            return dt
    return np.uint64


def encode(x: object, fmt: str | Format, rounding: Rounding = "nearest_even",
           saturation: Saturation = "none", rng: object = None,
           stochastic_bits: int | None = None, engine: Engine = "auto") -> np.ndarray:
    """Round ``x`` to ``fmt`` and return the codes (the smallest unsigned dtype that holds
    ``fmt.bits`` bits; sub-byte formats in the low bits).

    Parameters are as for :func:`round`.

    Examples
    --------
    >>> import numpy as np
    >>> encode(np.array([448.0, -0.0]), "float8_e4m3fn")
    array([126, 128], dtype=uint8)
    """
    fmt = get_format(fmt)
    _check_modes(fmt, rounding, saturation, engine, rng, stochastic_bits)
    xa = _as_float(x)
    fast = _try_fast(xa, fmt, rounding, saturation, rng, stochastic_bits, engine, False)
    if fast is not None:
        return fast
    codes = _encode_core(np.asarray(xa, np.float64), fmt, rounding, saturation, rng,
                         stochastic_bits)
    return codes.astype(_code_dtype(fmt))


def _try_fast(xa: np.ndarray, fmt: Format, rounding: str, saturation: str, rng: object,
              stochastic_bits: int | None, engine: str, want_values: bool) -> np.ndarray | None:
    """The compiled engine's result, or None where the numpy engine computes it."""
    if engine == "numpy" or (engine == "auto" and xa.size < _FAST_MIN_SIZE):
        return None
    taken = rounding_fast.source_bits(xa, fmt)
    if taken is None:
        if engine == "numba":
            raise FormatError(f"engine='numba' does not cover {fmt.name} with {xa.dtype} "
                              "input; use engine='numpy' or 'auto'")
        return None
    raw, src = taken
    rbits, nbits = None, 0
    if rounding in STOCHASTIC:
        rbits = _random_bits(xa.shape, rng, stochastic_bits, rounding).reshape(-1)
        nbits = int(stochastic_bits)  # type: ignore[arg-type]
    out = np.empty(raw.size) if want_values else np.empty(raw.size, dtype=_code_dtype(fmt))
    rounding_fast.run(raw, src, fmt, rounding, saturation, rbits, nbits, out, want_values)
    return out.reshape(xa.shape)


@functools.lru_cache(maxsize=64)
def _decode_table(fmt: Format) -> np.ndarray:
    table = _decode_formula(np.arange(fmt.num_codes, dtype=_U), fmt)
    table.setflags(write=False)
    return table


def _decode_formula(codes: np.ndarray, fmt: Format) -> np.ndarray:
    t = fmt.mantissa_bits
    if fmt.twos_complement:
        ints = codes.astype(np.int64)
        ints = np.where(ints >= (1 << (fmt.bits - 1)), ints - (1 << fmt.bits), ints)
        return np.ldexp(ints.astype(np.float64), 1 - fmt.bias - t)
    mask = _U((1 << fmt.magnitude_bits) - 1)
    mag = codes & mask
    neg = ((codes >> _U(fmt.magnitude_bits)) & _U(1)).astype(bool) if fmt.signed else \
        np.zeros(codes.shape, dtype=bool)
    exp = (mag >> _U(t)).astype(np.int64)
    frac = (mag & _U((1 << t) - 1)).astype(np.float64)
    sub = (exp == 0) & fmt.has_subnormals
    sig = np.where(sub, frac, frac + float(1 << t))
    scale = np.where(sub, 1 - fmt.bias - t, exp - fmt.bias - t)
    val = np.ldexp(sig, scale.astype(np.int32))
    top = (1 << fmt.magnitude_bits) - 1
    if fmt.has_inf:
        val = np.where(mag == _U(top - fmt.num_high_nans), np.inf, val)
    val = np.where(mag > _U(top - fmt.num_high_nans), np.nan, val)
    val = np.where(neg, -val, val)
    if fmt.nan == "negative_zero":
        val = np.where(neg & (mag == 0), np.nan, val)
    return val


def decode(codes: object, fmt: str | Format) -> np.ndarray:
    """The float64 values of integer ``codes`` of ``fmt``.

    Raises
    ------
    FormatError
        If the codes are not integers or do not fit in ``fmt.bits`` bits.

    Examples
    --------
    >>> decode([0x7E, 0x7F, 0x80], "float8_e4m3fn")
    array([448.,  nan,  -0.])
    """
    fmt = get_format(fmt)
    try:
        c = np.asarray(codes)
    except (ValueError, TypeError) as e:
        raise ShapeError(f"codes must be a rectangular array of integers ({e})") from None
    if c.dtype.kind not in "ui":
        raise FormatError(f"codes must be integers, got dtype {c.dtype}")
    if c.size and (c.min() < 0 or (fmt.bits < 64 and c.max() >= (1 << fmt.bits))):
        raise FormatError(f"codes of {fmt.name} lie in 0..{(1 << fmt.bits) - 1}, got "
                          f"values in {c.min()}..{c.max()}")
    if fmt.name == "binary64":
        return c.astype(_U).view(np.float64)
    if fmt.bits <= 16:
        return np.asarray(_decode_table(fmt)[c.astype(np.intp)])
    return _decode_formula(c.astype(_U), fmt)


def round(x: object, fmt: str | Format, rounding: Rounding = "nearest_even",
          saturation: Saturation = "none", rng: object = None,
          stochastic_bits: int | None = None, engine: Engine = "auto") -> np.ndarray:
    """Round ``x`` to the values of ``fmt``; the result is a float64 array.

    Parameters
    ----------
    x : array_like of floats
        Input, of any floating dtype (converted exactly to float64).
    fmt : str or Format
        Target format (name or alias, see :func:`~thrifty.numerics.formats.get_format`).
    rounding : str
        One of :data:`ROUNDINGS` (see the module docstring).
    saturation : {"none", "finite", "propagate"}
        Overflow behaviour (P3109 SatNone, SatFinite, SatPropagate).
    rng : int or numpy.random.Generator, optional
        Source of random bits; required by the stochastic roundings.
    stochastic_bits : int, optional
        Number of random bits (1..32); required by the stochastic roundings.
    engine : {"auto", "numpy", "numba"}
        Implementation (:data:`ENGINES`); both give identical results.

    Returns
    -------
    numpy.ndarray
        float64 values, each one exactly a value of ``fmt`` (or NaN/inf).

    Examples
    --------
    >>> import numpy as np
    >>> round(np.array([0.1, 1e6]), "bf16")
    array([1.00097656e-01, 9.99424000e+05])
    >>> round(np.float32(2.75), "binary8p3se", rounding="toward_zero")
    array(2.5)
    """
    fmt = get_format(fmt)
    _check_modes(fmt, rounding, saturation, engine, rng, stochastic_bits)
    xa = _as_float(x)
    fast = _try_fast(xa, fmt, rounding, saturation, rng, stochastic_bits, engine, True)
    if fast is not None:
        return fast
    x64 = np.asarray(xa, dtype=np.float64)
    if fmt.name == "binary64" and saturation != "finite":
        return np.array(x64, dtype=np.float64, copy=True)
    codes = _encode_core(x64, fmt, rounding, saturation, rng, stochastic_bits)
    if fmt.bits <= 16:
        return np.asarray(_decode_table(fmt)[codes.astype(np.intp)])
    return _decode_formula(codes, fmt)
