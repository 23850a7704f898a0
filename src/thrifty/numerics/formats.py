"""Number formats as data: one descriptor for every binary floating-point format we emulate.

Policy. A format is an instance of :class:`Format`, never code: the encoding rules of IEEE
754 binary16/32/64, bfloat16, TF32, the OCP 8-bit formats (OFP8 v1.0: E4M3 ``fn`` and
E5M2), the FNUZ variants, the OCP Microscaling (MX v1.0) element formats FP6 E3M2/E2M3,
FP4 E2M1, the E8M0 scale and MX INT8, NVFP4's E2M1 element, and the IEEE P3109 family
Binary{K}p{P}{s|u}{e|f} (Interim Report v4.0) are all expressed by the same handful of
fields, in the manner of gfloat's ``FormatInfo``. Names follow ml_dtypes / LLVM
(``float8_e4m3fn``, ``float8_e8m0fnu``); short aliases (``e4m3``, ``bf16``, ``tf32``) are
accepted by :func:`get_format`.

The encoding model (``mag`` is a code with its sign bit removed, ``t`` the fraction bits):

* ``exp = mag >> t``, ``frac = mag & (2**t - 1)``; value ``(1 + frac / 2**t) * 2**(exp -
  bias)``, or ``frac * 2**(1 - bias - t)`` when ``exp == 0`` and the format has subnormals.
* The ``num_high_nans`` largest magnitudes are NaN (``nan="ieee"``: every code whose
  exponent field is all ones and fraction nonzero; ``nan="max_code"``: the one all-ones
  magnitude, OCP ``fn``, or the all-ones code of an unsigned format, ``fnu``).
  ``nan="negative_zero"``: the one code ``1000...0`` is NaN (FNUZ, P3109 signed formats),
  so the format has no negative zero.
* With ``has_inf`` the largest non-NaN magnitude is infinity.
* ``twos_complement`` (MX INT8): the code is a two's complement integer times
  ``2**(1 - bias - t)``.

Example
-------
>>> from thrifty.numerics.formats import get_format
>>> f = get_format("e4m3")
>>> f.name, f.max_finite, f.smallest_subnormal
('float8_e4m3fn', 448.0, 0.001953125)
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from thrifty.errors import FormatError

NanEncoding = Literal["ieee", "max_code", "negative_zero", "none"]
TieParity = Literal["code", "significand"]

__all__ = [
    "FORMATS",
    "Format",
    "all_codes",
    "NanEncoding",
    "format_names",
    "get_format",
    "p3109",
]


@dataclass(frozen=True, slots=True)
class Format:
    """A binary number format, described by data only.

    Parameters
    ----------
    name : str
        Canonical name (ml_dtypes spelling where ml_dtypes has the format).
    bits : int
        Width of one code in bits.
    exponent_bits : int
        Width of the exponent field (0 for all-subnormal formats such as MX INT8).
    mantissa_bits : int
        Trailing significand (fraction) bits ``t = P - 1``.
    bias : int
        Exponent bias.
    signed : bool
        Whether the format has a sign bit.
    has_inf : bool
        Whether the largest non-NaN magnitude encodes infinity.
    nan : {"ieee", "max_code", "negative_zero", "none"}
        Where NaN is encoded (see the module docstring).
    has_subnormals : bool
        Whether exponent field 0 encodes subnormals (and zero). Without subnormals, field
        0 is an ordinary binade and the format has no zero (E8M0).
    twos_complement : bool
        Two's complement integer codes (MX INT8).
    tie_parity : {"code", "significand"}
        What "even" means for ties-to-even when the precision is 1 (the significand is then
        always 1): the code's last bit (P3109, gfloat) or the significand's, which is odd, so
        ties round away from zero (ml_dtypes' ``float8_e8m0fnu``). Irrelevant for P > 1.
    family : str
        Where the format is defined ("IEEE 754", "OCP OFP8", "OCP MX", "P3109", ...).
    numpy_dtype : str or None
        Name of the numpy / ml_dtypes dtype holding exactly this format, if one exists.
    description : str
        One line for tables.

    Examples
    --------
    >>> Format("my_e3m2", bits=6, exponent_bits=3, mantissa_bits=2, bias=3,
    ...        has_inf=False, nan="none").max_finite
    28.0
    """

    name: str
    bits: int
    exponent_bits: int
    mantissa_bits: int
    bias: int
    signed: bool = True
    has_inf: bool = False
    nan: NanEncoding = "ieee"
    has_subnormals: bool = True
    twos_complement: bool = False
    tie_parity: TieParity = "code"
    family: str = ""
    numpy_dtype: str | None = None
    description: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if self.bits != int(self.signed) + self.exponent_bits + self.mantissa_bits:
            raise FormatError(
                f"format {self.name!r}: bits={self.bits} must equal sign "
                f"({int(self.signed)}) + exponent_bits ({self.exponent_bits}) + "
                f"mantissa_bits ({self.mantissa_bits})")
        if not 1 <= self.bits <= 64 or self.mantissa_bits > 52:
            raise FormatError(f"format {self.name!r}: bits must be in 1..64 and "
                              f"mantissa_bits <= 52, got {self.bits}, {self.mantissa_bits}")
        if self.nan == "negative_zero" and not self.signed:
            raise FormatError(f"format {self.name!r}: nan='negative_zero' needs a sign bit")
        if self.twos_complement and not (self.signed and self.exponent_bits == 0
                                         and self.nan == "none" and not self.has_inf):
            raise FormatError(f"format {self.name!r}: two's complement formats must be "
                              "signed, with no exponent field, no NaN and no infinity")
        if self.max_code < 0 or (self.max_code == 0 and not self.has_subnormals):
            raise FormatError(f"format {self.name!r} has no finite value")

    # ---- derived facts -------------------------------------------------------------
    @property
    def precision(self) -> int:
        """Significand precision P, counting the implicit bit."""
        return self.mantissa_bits + 1

    @property
    def magnitude_bits(self) -> int:
        """Bits of a code below the sign bit."""
        return self.bits - int(self.signed)

    @property
    def num_high_nans(self) -> int:
        """Number of NaN magnitudes at the top of each sign's code range."""
        if self.nan == "ieee":
            return (1 << self.mantissa_bits) - 1
        if self.nan == "max_code":
            return 1
        return 0

    @property
    def has_nan(self) -> bool:
        """Whether any code is NaN."""
        return self.nan != "none"

    @property
    def has_negative_zero(self) -> bool:
        """Whether the code ``1000...0`` is -0."""
        return (self.signed and self.has_subnormals and self.nan != "negative_zero"
                and not self.twos_complement)

    @property
    def has_zero(self) -> bool:
        """Whether zero is representable (it is the subnormal with fraction 0)."""
        return self.has_subnormals

    @property
    def max_code(self) -> int:
        """The code of the largest finite value."""
        return (1 << self.magnitude_bits) - 1 - self.num_high_nans - int(self.has_inf)

    @property
    def max_finite(self) -> float:
        """The largest finite value."""
        return float(self.decode_scalar(self.max_code))

    @property
    def min_finite(self) -> float:
        """The most negative finite value (the smallest value for an unsigned format)."""
        if self.twos_complement:
            return -float(2 ** (self.magnitude_bits + 1 - self.bias - self.mantissa_bits))
        if self.signed:
            return -self.max_finite
        return 0.0 if self.has_zero else float(self.decode_scalar(0))

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal binade (``1 - bias``; ``-bias`` without
        subnormals)."""
        return (1 if self.has_subnormals else 0) - self.bias

    @property
    def emax(self) -> int:
        """Exponent of the largest finite value: ``floor(log2(max_finite))``."""
        return math.frexp(self.max_finite)[1] - 1

    @property
    def smallest_normal(self) -> float | None:
        """``2**emin``, or ``None`` when the format has no normal numbers (MX INT8)."""
        if self.exponent_bits == 0 and self.has_subnormals:
            return None
        return math.ldexp(1.0, self.emin)

    @property
    def smallest_subnormal(self) -> float | None:
        """The smallest positive subnormal, or ``None`` when there is none."""
        if not self.has_subnormals or self.mantissa_bits == 0:
            return None
        return math.ldexp(1.0, self.emin - self.mantissa_bits)

    @property
    def smallest_positive(self) -> float:
        """The smallest positive value."""
        sub = self.smallest_subnormal
        return sub if sub is not None else math.ldexp(1.0, self.emin)

    @property
    def eps(self) -> float:
        """Distance from 1 to the next larger value of the same binade: ``2**-t``."""
        return math.ldexp(1.0, -self.mantissa_bits)

    @property
    def unit_roundoff(self) -> float:
        """``u = 2**-P``: the relative error bound of round-to-nearest in the normal range."""
        return math.ldexp(1.0, -self.precision)

    @property
    def num_codes(self) -> int:
        """``2**bits``."""
        return 1 << self.bits

    # ---- decoding -------------------------------------------------------------------
    def decode_scalar(self, code: int) -> float:
        """The value of one code, computed with exact Python integers (a reference for the
        vectorised :func:`thrifty.numerics.rounding.decode`).

        Examples
        --------
        >>> get_format("bf16").decode_scalar(0x3F80)
        1.0
        """
        code = int(code)
        if not 0 <= code < self.num_codes:
            raise FormatError(f"code {code} is outside 0..{self.num_codes - 1} "
                              f"for {self.name}")
        t = self.mantissa_bits
        if self.twos_complement:
            signed_int = code - self.num_codes if code >> (self.bits - 1) else code
            return math.ldexp(float(signed_int), 1 - self.bias - t)
        neg = bool(self.signed and code >> self.magnitude_bits)
        mag = code & ((1 << self.magnitude_bits) - 1)
        top = (1 << self.magnitude_bits) - 1
        if mag > top - self.num_high_nans or (neg and mag == 0 and self.nan == "negative_zero"):
            return math.nan
        if self.has_inf and mag == top - self.num_high_nans:
            return -math.inf if neg else math.inf
        exp, frac = mag >> t, mag & ((1 << t) - 1)
        if exp == 0 and self.has_subnormals:
            value = math.ldexp(float(frac), 1 - self.bias - t)
        else:
            value = math.ldexp(float((1 << t) + frac), exp - self.bias - t)
        return -value if neg else value

    def summary(self) -> dict[str, object]:
        """The table row of ``thrifty fp formats``: a JSON-ready dict."""
        return {
            "name": self.name,
            "family": self.family,
            "bits": self.bits,
            "exponent_bits": self.exponent_bits,
            "mantissa_bits": self.mantissa_bits,
            "precision": self.precision,
            "bias": self.bias,
            "signed": self.signed,
            "emin": self.emin,
            "emax": self.emax,
            "max": self.max_finite,
            "min": self.min_finite,
            "smallest_normal": self.smallest_normal,
            "smallest_subnormal": self.smallest_subnormal,
            "has_inf": self.has_inf,
            "nan": self.nan,
            "has_negative_zero": self.has_negative_zero,
            "aliases": sorted(a for a, n in _ALIASES.items() if n == self.name),
        }


# ---- constructors ---------------------------------------------------------------------

def _ieee(name: str, exponent_bits: int, mantissa_bits: int, *, family: str,
          numpy_dtype: str | None, description: str) -> Format:
    return Format(name, bits=1 + exponent_bits + mantissa_bits, exponent_bits=exponent_bits,
                  mantissa_bits=mantissa_bits, bias=(1 << (exponent_bits - 1)) - 1,
                  has_inf=True, nan="ieee", family=family, numpy_dtype=numpy_dtype,
                  description=description)


def p3109(k: int, p: int, signed: bool = True,
          domain: Literal["extended", "finite"] = "extended") -> Format:
    """The IEEE P3109 format Binary{k}p{p}{s|u}{e|f} (Interim Report v4.0).

    Signed formats: bias ``2**(k - p - 1)``, one NaN at ``1000...0``, no -0. Unsigned
    formats: bias ``2**(k - p)``, NaN at the all-ones code. ``domain="extended"`` adds
    +-infinity just below the NaN (signed: at the all-ones magnitude).

    Examples
    --------
    >>> f = p3109(8, 4)
    >>> f.name, f.bias, f.max_finite
    ('binary8p4se', 8, 224.0)
    """
    if domain not in ("extended", "finite"):
        raise FormatError(f"P3109 domain must be 'extended' or 'finite', got {domain!r}")
    if not (isinstance(k, int) and isinstance(p, int)) or k < 2 or k > 32:
        raise FormatError(f"P3109 width k must be an integer in 2..32, got {k!r}")
    if not 1 <= p <= k - int(signed) or p > 24:
        raise FormatError(f"P3109 precision p must be in 1..{k - int(signed)} for a "
                          f"{'signed' if signed else 'unsigned'} k={k} format, got {p!r}")
    name = f"binary{k}p{p}{'s' if signed else 'u'}{'e' if domain == 'extended' else 'f'}"
    bias = 1 << (k - p - 1) if signed else 1 << (k - p)
    return Format(name, bits=k, exponent_bits=k - int(signed) - (p - 1),
                  mantissa_bits=p - 1, bias=bias, signed=signed,
                  has_inf=domain == "extended", nan="negative_zero" if signed else "max_code",
                  family="P3109", numpy_dtype=None,
                  description=f"P3109 {k}-bit, precision {p}, "
                              f"{'signed' if signed else 'unsigned'}, {domain}")


def _registry() -> dict[str, Format]:
    fmts = [
        _ieee("binary16", 5, 10, family="IEEE 754", numpy_dtype="float16",
              description="IEEE half precision"),
        _ieee("binary32", 8, 23, family="IEEE 754", numpy_dtype="float32",
              description="IEEE single precision"),
        _ieee("binary64", 11, 52, family="IEEE 754", numpy_dtype="float64",
              description="IEEE double precision"),
        _ieee("bfloat16", 8, 7, family="Google", numpy_dtype="bfloat16",
              description="brain float: binary32's range, 8-bit precision"),
        _ieee("tensorfloat32", 8, 10, family="NVIDIA", numpy_dtype=None,
              description="TF32: binary32's range, binary16's precision (19 bits)"),
        Format("float8_e4m3fn", 8, 4, 3, 7, has_inf=False, nan="max_code",
               family="OCP OFP8", numpy_dtype="float8_e4m3fn",
               description="OCP E4M3: no inf, NaN at S.1111.111, max 448"),
        _ieee("float8_e5m2", 5, 2, family="OCP OFP8", numpy_dtype="float8_e5m2",
              description="OCP E5M2: IEEE-like, max 57344"),
        Format("float8_e4m3fnuz", 8, 4, 3, 8, has_inf=False, nan="negative_zero",
               family="FNUZ", numpy_dtype="float8_e4m3fnuz",
               description="E4M3, bias 8, NaN at 0x80, no -0"),
        Format("float8_e5m2fnuz", 8, 5, 2, 16, has_inf=False, nan="negative_zero",
               family="FNUZ", numpy_dtype="float8_e5m2fnuz",
               description="E5M2, bias 16, NaN at 0x80, no -0"),
        Format("float8_e4m3b11fnuz", 8, 4, 3, 11, has_inf=False, nan="negative_zero",
               family="FNUZ", numpy_dtype="float8_e4m3b11fnuz",
               description="E4M3, bias 11, NaN at 0x80, no -0"),
        _ieee("float8_e4m3", 4, 3, family="IEEE-like", numpy_dtype="float8_e4m3",
              description="IEEE-like E4M3 with inf and NaNs (not OCP's)"),
        _ieee("float8_e3m4", 3, 4, family="IEEE-like", numpy_dtype="float8_e3m4",
              description="IEEE-like E3M4"),
        Format("float8_e5m3fnu", 8, 5, 3, 15, signed=False, has_inf=False, nan="max_code",
               family="unsigned", numpy_dtype="float8_e5m3fnu",
               description="unsigned E5M3, NaN at 0xFF"),
        Format("float6_e3m2fn", 6, 3, 2, 3, has_inf=False, nan="none", family="OCP MX",
               numpy_dtype="float6_e3m2fn", description="MX FP6 E3M2: no inf, no NaN"),
        Format("float6_e2m3fn", 6, 2, 3, 1, has_inf=False, nan="none", family="OCP MX",
               numpy_dtype="float6_e2m3fn", description="MX FP6 E2M3: no inf, no NaN"),
        Format("float4_e2m1fn", 4, 2, 1, 1, has_inf=False, nan="none",
               family="OCP MX", numpy_dtype="float4_e2m1fn",
               description="FP4 E2M1 (MX and NVFP4 element): no inf, no NaN"),
        Format("float8_e8m0fnu", 8, 8, 0, 127, signed=False, has_inf=False, nan="max_code",
               has_subnormals=False, tie_parity="significand", family="OCP MX",
               numpy_dtype="float8_e8m0fnu",
               description="MX scale E8M0: powers of two, no zero, NaN at 0xFF"),
        Format("mx_int8", 8, 0, 7, 0, has_inf=False, nan="none", twos_complement=True,
               family="OCP MX", numpy_dtype=None,
               description="MX INT8: two's complement times 2**-6"),
    ]
    fmts += [p3109(8, p, s, d) for s in (True, False) for p in range(1, 8 + (not s))
             for d in ("extended", "finite")]
    fmts += [p3109(k, p, True, "finite") for k, p in ((3, 2), (4, 2), (6, 3), (6, 4))]
    return {f.name: f for f in fmts}


#: Every named format, by canonical name.
FORMATS: dict[str, Format] = _registry()

_ALIASES: dict[str, str] = {
    "fp16": "binary16", "half": "binary16", "float16": "binary16", "e5m10": "binary16",
    "fp32": "binary32", "single": "binary32", "float32": "binary32",
    "fp64": "binary64", "double": "binary64", "float64": "binary64",
    "bf16": "bfloat16",
    "tf32": "tensorfloat32",
    "e4m3": "float8_e4m3fn", "fp8_e4m3": "float8_e4m3fn", "ocp_e4m3": "float8_e4m3fn",
    "e4m3fn": "float8_e4m3fn",
    "e5m2": "float8_e5m2", "fp8_e5m2": "float8_e5m2", "ocp_e5m2": "float8_e5m2",
    "e4m3fnuz": "float8_e4m3fnuz", "e5m2fnuz": "float8_e5m2fnuz",
    "e4m3b11fnuz": "float8_e4m3b11fnuz",
    "e3m2": "float6_e3m2fn", "fp6_e3m2": "float6_e3m2fn", "mxfp6_e3m2": "float6_e3m2fn",
    "e2m3": "float6_e2m3fn", "fp6_e2m3": "float6_e2m3fn", "mxfp6_e2m3": "float6_e2m3fn",
    "e2m1": "float4_e2m1fn", "fp4": "float4_e2m1fn", "fp4_e2m1": "float4_e2m1fn",
    "mxfp4": "float4_e2m1fn", "nvfp4": "float4_e2m1fn", "nvfp4_e2m1": "float4_e2m1fn",
    "e8m0": "float8_e8m0fnu", "mx_scale": "float8_e8m0fnu",
    "int8_mx": "mx_int8", "mxint8": "mx_int8",
}

_P3109_NAME = re.compile(r"^(?:binary|p3109_k)(\d+)p(\d+)([su])([ef])$")


def format_names() -> list[str]:
    """Canonical names of the registered formats, in registry order."""
    return list(FORMATS)


def get_format(name: str | Format) -> Format:
    """The :class:`Format` for a canonical name, an alias or a P3109 name.

    Names are case-insensitive; any ``binary{K}p{P}{s|u}{e|f}`` (or gfloat's
    ``p3109_k{K}p{P}{s|u}{e|f}``) builds that P3109 format. A :class:`Format` is returned
    unchanged.

    Raises
    ------
    FormatError
        For an unknown name; the message lists the valid names and aliases.

    Examples
    --------
    >>> get_format("bf16").name
    'bfloat16'
    >>> get_format("Binary8p3se").bias
    16
    """
    if isinstance(name, Format):
        return name
    if not isinstance(name, str):
        raise FormatError(f"a format is named by a string or given as a Format, "
                          f"got {type(name).__name__}")
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key in FORMATS:
        return FORMATS[key]
    m = _P3109_NAME.match(key)
    if m:
        k, p = int(m.group(1)), int(m.group(2))
        return p3109(k, p, m.group(3) == "s", "extended" if m.group(4) == "e" else "finite")
    raise FormatError(
        f"unknown number format {name!r}; valid names: {', '.join(FORMATS)}; aliases: "
        f"{', '.join(sorted(_ALIASES))}; or any P3109 name binary<K>p<P><s|u><e|f>")


def all_codes(fmt: Format) -> np.ndarray:
    """Every code of ``fmt`` (at most 2**24) as a uint64 array, for exhaustive tests."""
    if fmt.bits > 24:
        raise FormatError(f"{fmt.name} has 2**{fmt.bits} codes; all_codes enumerates "
                          "formats of at most 24 bits")
    return np.arange(fmt.num_codes, dtype=np.uint64)
