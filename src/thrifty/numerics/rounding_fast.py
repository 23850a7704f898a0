"""The compiled rounding engine's host side: which inputs it takes, its parameters, and
the call of the kernels of :mod:`.rounding_jit` (loaded, so compiled, on first use).

:func:`thrifty.numerics.rounding.encode`/``round`` call :func:`source_bits` to see whether
the compiled engine takes an input, then :func:`run` on the raw bits.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from thrifty.errors import FormatError
from thrifty.numerics.formats import Format

#: Rounding and saturation names, in the order of their integer codes in the kernels.
_ROUNDING_CODES = ("nearest_even", "nearest_away", "toward_zero", "up", "down", "odd",
                   "stochastic", "stochastic_odd", "stochastic_fastest")
_SATURATION_CODES = ("none", "finite", "propagate")
_NAN_KIND = {"none": 0, "ieee": 1, "max_code": 2, "negative_zero": 3}
#: Source dtypes read as raw bits: name -> (bits, fraction bits, exponent bits).
SOURCES = {"float64": (64, 52, 11), "float32": (32, 23, 8), "float16": (16, 10, 5),
           "bfloat16": (16, 7, 8)}


@functools.cache
def compiled_kernels() -> tuple[Callable[..., int], Callable[..., int], Callable[..., int],
                                Callable[..., None]]:
    """``(general, hot_codes, hot_values, same_range)``, imported on first call."""
    from thrifty.numerics import rounding_jit as j

    return j.general_kernel, j.hot_codes, j.hot_values, j.same_range


def fast_params(fmt: Format, rounding: str, saturation: str, nbits: int,
                src: tuple[int, int, int]) -> np.ndarray:
    """The int64 parameter vector the kernels read (index comments give positions)."""
    sbits, st, se = src
    return np.array([
        sbits, st, (1 << (se - 1)) - 1, (1 << se) - 1,                              # 0-3
        fmt.mantissa_bits, fmt.precision, fmt.bias, fmt.emin,                       # 4-7
        int(fmt.has_subnormals), int(fmt.precision == 1 and fmt.tie_parity == "code"),
        _ROUNDING_CODES.index(rounding), nbits, _SATURATION_CODES.index(saturation),  # 10-12
        fmt.max_code, (1 << fmt.magnitude_bits) - 1 - fmt.num_high_nans,            # 13-14
        int(fmt.has_inf), _NAN_KIND[fmt.nan], int(fmt.signed),                      # 15-17
        int(fmt.has_negative_zero), int(fmt.twos_complement), fmt.bits,             # 18-20
        (1 << fmt.magnitude_bits) - 1], dtype=np.int64)                             # 21


def source_bits(x: np.ndarray, fmt: Format) -> tuple[np.ndarray, tuple[int, int, int]] | None:
    """``(raw bits, source layout)`` of ``x`` for the kernels, or None when they do not
    take this input (formats wider than 32 bits, wide unsigned formats, other dtypes)."""
    if fmt.bits > 32 or not fmt.signed and fmt.bits > 16:
        return None
    name = x.dtype.name
    if name not in SOURCES:
        return None
    if not x.dtype.isnative:
        x = x.astype(x.dtype.newbyteorder("="))
    src = SOURCES[name]
    if name != "float64" and (fmt.emin < 2 - (1 << (src[2] - 1)) or fmt.precision > src[1] + 1):
        x, src = x.astype(np.float64), SOURCES["float64"]
    raw = np.ascontiguousarray(x).reshape(-1).view({64: np.uint64, 32: np.uint32,
                                                    16: np.uint16}[src[0]])
    return raw, src


def run(raw: np.ndarray, src: tuple[int, int, int], fmt: Format, rounding: str,
        saturation: str, rbits: np.ndarray | None, nbits: int, out: np.ndarray,
        want_values: bool) -> None:
    """Round ``raw`` into ``out`` (codes, or float64 values when ``want_values``).

    ``rbits`` holds the random bits of a stochastic rounding (None otherwise).
    """
    general, hot_codes, hot_values, same_range = compiled_kernels()
    prm = fast_params(fmt, rounding, saturation, nbits, src)
    specials = np.array([fmt.max_finite, -fmt.min_finite, fmt.smallest_positive])
    empty_c, empty_v = np.zeros(0, dtype=out.dtype), np.zeros(0)
    codes, values = (empty_c, out) if want_values else (out, empty_v)
    if rbits is not None:
        bad = general(raw, prm, rbits, specials, codes, values)
    elif (src[0] == 32 and fmt.exponent_bits == 8 and fmt.bias == 127 and fmt.nan == "ieee"
          and fmt.has_inf and fmt.signed and fmt.mantissa_bits >= 1):
        same_range(raw, prm, codes, values)
        bad = 0
    else:
        flags = np.empty(raw.size, dtype=np.uint8)
        bad = 0
        hot = hot_values if want_values else hot_codes
        if hot(raw, prm, out, flags):
            idx = np.flatnonzero(flags)
            sub = np.empty(idx.size, dtype=out.dtype)
            sub_c, sub_v = (np.zeros(0, dtype=out.dtype), sub) if want_values else \
                (sub, empty_v)
            bad = general(raw[idx], prm, np.zeros(1, dtype=np.uint64), specials, sub_c, sub_v)
            out[idx] = sub
    if bad:
        raise FormatError(f"{fmt.name} has no NaN, and the input holds {bad} NaN(s); "
                          "remove them or choose a format with NaN")
