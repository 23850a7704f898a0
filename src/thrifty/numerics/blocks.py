"""Block-scaled formats: OCP MX, NVFP4 and P3109 block max-abs conversion.

Policy. A tensor is cut along one axis into blocks of ``block_size`` consecutive elements
(the last block may be shorter). Each block gets one scale ``s`` in a scale format, and
each element is stored as ``round(x / s)`` in the element format; the value is ``element *
s`` (times a per-tensor scale for NVFP4). Every division by a power-of-two scale is exact
and every element is rounded once, bit-exactly, by :func:`thrifty.numerics.round`.

Scale rules, with ``amax`` the block's largest magnitude and ``emax``/``max`` the element
format's largest exponent and value (names as in torchao's ``ScaleCalculationMode``):

* ``floor`` (OCP MX v1.0 §6.3): ``s = 2**(floor(log2 amax) - emax)``; elements above
  ``max`` saturate to it. gfloat's ``compute_scale_amax`` (P3109 block conversion).
* ``ceil``: ``s = 2**(ceil(log2 amax) - emax)``.
* ``rceil`` (NVIDIA cuBLAS, "round the scale up"): ``s`` is ``amax / max`` rounded up to a
  power of two, so no element saturates. Computed exactly (torchao multiplies by a
  float32 reciprocal first).
* ``even``: ``amax`` is first rounded to the element precision (ties away from zero, as
  torchao's EVEN does on the float32 bits), then ``floor``.
* ``amax`` (for non power-of-two scale formats, NVFP4): ``s = amax / max`` rounded to the
  nearest value of the scale format (saturating).

With a per-tensor scale ``ts``, ``amax`` above is ``amax / ts`` (one binary64 division;
the ``amax`` rule divides once by the exact product ``max * ts``) and elements are
``round(x / (s * ts))``.

Power-of-two scale exponents are clamped to the scale format's range (E8M0: -127..127;
an all-zero block gets the smallest scale). A block holding NaN or infinity gets a NaN
scale (OCP: the whole block reads as NaN); its elements are stored as zeros.

NVFP4 (NVIDIA, "Pretraining LLMs with NVFP4", 2025; cuBLAS docs): E2M1 elements, blocks
of 16, E4M3 block scales and a float32 per-tensor scale ``amax_tensor / (448 * 6)``;
block scale ``e4m3(amax_block / 6 / tensor_scale)``; element ``e2m1(x / (block_scale *
tensor_scale))``, the quotient taken in binary64 then rounded once.

Example
-------
>>> import numpy as np
>>> from thrifty.numerics.blocks import mx_quantize
>>> b = mx_quantize(np.array([1.0, 3.0, 600.0, -0.01]), "e4m3", block_size=4)
>>> b.scales, b.dequantize()
(array([2.]), array([ 1.000000e+00,  3.000000e+00,  5.760000e+02, -1.171875e-02]))
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from thrifty.errors import FormatError
from thrifty.numerics.formats import Format, get_format
from thrifty.numerics.rounding import Rounding, _as_float64, decode, encode

__all__ = [
    "SCALE_RULES",
    "BlockArray",
    "block_quantize",
    "mx_quantize",
    "nvfp4_quantize",
    "p3109_block_quantize",
]

ScaleRule = Literal["floor", "ceil", "rceil", "even", "amax"]
#: Every scale rule.
SCALE_RULES: tuple[str, ...] = ("floor", "ceil", "rceil", "even", "amax")
_POW2_RULES = ("floor", "ceil", "rceil", "even")


@dataclass(frozen=True, slots=True)
class BlockArray:
    """A block-scaled array: element codes, one scale code per block, the formats.

    Attributes
    ----------
    element_codes : numpy.ndarray
        Codes of the element format, same shape as the input.
    scale_codes : numpy.ndarray
        Codes of the scale format: the input's shape with ``axis`` cut to the number of
        blocks.
    element_format, scale_format : Format
    block_size : int
    axis : int
        The (non-negative) axis along which blocks run.
    scale_rule : str
    tensor_scale : float or None
        Per-tensor scale multiplying every value (NVFP4), or None.
    """

    element_codes: np.ndarray
    scale_codes: np.ndarray
    element_format: Format
    scale_format: Format
    block_size: int
    axis: int
    scale_rule: str
    tensor_scale: float | None = None

    @property
    def elements(self) -> np.ndarray:
        """Element values (before scaling), float64."""
        return decode(self.element_codes, self.element_format)

    @property
    def scales(self) -> np.ndarray:
        """Block scale values, float64 (without the tensor scale)."""
        return decode(self.scale_codes, self.scale_format)

    def dequantize(self) -> np.ndarray:
        """The represented values, float64, in the input's shape (exact products)."""
        scales = np.repeat(self.scales, self.block_size, axis=self.axis)
        n = self.element_codes.shape[self.axis]
        scales = np.take(scales, np.arange(n), axis=self.axis)
        out = self.elements * scales
        if self.tensor_scale is not None:
            out = out * self.tensor_scale
        return out

    @property
    def bits_per_element(self) -> float:
        """Storage cost: element bits plus the scale bits shared by a block."""
        return self.element_format.bits + self.scale_format.bits / self.block_size


def _blocked(x: np.ndarray, axis: int, block_size: int) -> tuple[np.ndarray, int]:
    """Move ``axis`` last, zero-pad it to a multiple of ``block_size``, split into blocks."""
    moved = np.moveaxis(x, axis, -1)
    n = moved.shape[-1]
    nblocks = max(1, -(-n // block_size))
    pad = nblocks * block_size - n
    if pad:
        moved = np.concatenate([moved, np.zeros(moved.shape[:-1] + (pad,))], axis=-1)
    return moved.reshape(moved.shape[:-1] + (nblocks, block_size)), n


def _pow2_exponents(amax: np.ndarray, elem: Format, rule: str) -> np.ndarray:
    """Scale exponents X (int64) of the power-of-two rules, before clamping."""
    safe = np.where(amax > 0, amax, 1.0)
    if rule == "even":
        safe = np.where(amax > 0, _round_magnitude_away(safe, elem.mantissa_bits), 1.0)
    mant, exp = np.frexp(safe)                    # safe = mant * 2**exp, mant in [0.5, 1)
    floor_log2 = exp.astype(np.int64) - 1
    if rule in ("floor", "even"):
        return floor_log2 - elem.emax
    if rule == "ceil":
        return floor_log2 + (mant != 0.5) - elem.emax
    # rceil: the smallest X with amax <= max * 2**X; it is floor_log2 - emax or one more
    x0 = floor_log2 - elem.emax
    return x0 + (safe > np.ldexp(elem.max_finite, x0.astype(np.int32)))


def _round_magnitude_away(a: np.ndarray, mantissa_bits: int) -> np.ndarray:
    """Round positive ``a`` to ``mantissa_bits`` fraction bits, ties away (bits of float64)."""
    u = a.view(np.uint64)
    drop = np.uint64(52 - mantissa_bits)
    u = (u + (np.uint64(1) << (drop - np.uint64(1)))) & ~((np.uint64(1) << drop) - np.uint64(1))
    return u.view(np.float64)


def block_quantize(x: object, element: str | Format, *, block_size: int = 32, axis: int = -1,
                   scale_format: str | Format = "e8m0", scale_rule: ScaleRule = "floor",
                   rounding: Rounding = "nearest_even",
                   tensor_scale: float | None = None) -> BlockArray:
    """Quantize ``x`` into blocks along ``axis``: the engine behind the MX, NVFP4 and
    P3109 block functions.

    Parameters
    ----------
    x : array_like of floats
    element : str or Format
        Element format.
    block_size : int
        Elements per block (the last block along ``axis`` may be shorter).
    axis : int
        Axis along which blocks run.
    scale_format : str or Format
        Format of the block scales (E8M0 for MX).
    scale_rule : {"floor", "ceil", "rceil", "even", "amax"}
        How a block's scale follows from its largest magnitude (module docstring).
    rounding : str
        Rounding of the elements (any deterministic mode of :func:`round`).
    tensor_scale : float, optional
        A per-tensor scale dividing ``x`` before blocking (NVFP4).

    Returns
    -------
    BlockArray

    Examples
    --------
    >>> import numpy as np
    >>> b = block_quantize(np.arange(8.0), "binary8p3se", block_size=8)
    >>> b.dequantize()          # floor rule: 7 scales past max finite, saturates to 6
    array([0., 1., 2., 3., 4., 5., 6., 6.])
    >>> block_quantize(np.arange(8.0), "binary8p3se", block_size=8,
    ...                scale_rule="rceil").dequantize()
    array([0., 1., 2., 3., 4., 5., 6., 7.])
    """
    elem, sfmt = get_format(element), get_format(scale_format)
    _check_block_arguments(block_size, scale_rule, rounding)
    a = _as_float64(x)
    if a.ndim == 0:
        a = a.reshape(1)
    if not -a.ndim <= axis < a.ndim:
        raise FormatError(f"axis {axis} is out of range for an array of {a.ndim} dimensions")
    axis = axis % a.ndim
    ts = _tensor_scale_value(tensor_scale)
    blocks, n = _blocked(a, axis, int(block_size))
    bad = ~np.isfinite(blocks).all(axis=-1)
    if bad.any() and not sfmt.has_nan:
        raise FormatError(f"the input holds NaN or infinity, and the scale format "
                          f"{sfmt.name} has no NaN to mark such blocks")
    clean = np.where(np.isfinite(blocks), blocks, 0.0)
    scales = np.where(bad, np.nan, _block_scales(clean, ts, elem, sfmt, scale_rule))
    ok = (scales > 0) & ~bad
    unit = np.where(ok, scales * ts, 1.0)[..., None]      # exact: short significands
    scaled = np.where(ok[..., None], clean / unit, 0.0)
    codes = encode(scaled, elem, rounding, "finite")
    codes = codes.reshape(codes.shape[:-2] + (-1,))[..., :n]
    return BlockArray(element_codes=np.moveaxis(codes, -1, axis),
                      scale_codes=np.moveaxis(encode(scales, sfmt), -1, axis),
                      element_format=elem, scale_format=sfmt, block_size=int(block_size),
                      axis=axis, scale_rule=scale_rule, tensor_scale=tensor_scale)


def _check_block_arguments(block_size: object, scale_rule: str, rounding: str) -> None:
    """Refuse a block size, scale rule or rounding that block quantization does not take."""
    if not isinstance(block_size, int | np.integer) or block_size < 1:
        raise FormatError(f"block_size must be a positive integer, got {block_size!r}")
    if scale_rule not in SCALE_RULES:
        raise FormatError(f"unknown scale rule {scale_rule!r}; valid: {', '.join(SCALE_RULES)}")
    if rounding in ("stochastic", "stochastic_odd", "stochastic_fastest"):
        raise FormatError("block quantization takes a deterministic rounding; "
                          f"got {rounding!r}")


def _tensor_scale_value(tensor_scale: float | None) -> float:
    """The per-tensor divisor: ``tensor_scale``, checked finite and positive, or 1."""
    if tensor_scale is None:
        return 1.0
    if not (math.isfinite(tensor_scale) and tensor_scale > 0):
        raise FormatError(f"tensor_scale must be finite and positive, got {tensor_scale}")
    return float(tensor_scale)


def _block_scales(clean: np.ndarray, ts: float, elem: Format, sfmt: Format,
                  scale_rule: str) -> np.ndarray:
    """Each block's scale, from the largest magnitude of its finite entries ``clean``."""
    amax_raw = np.abs(clean).max(axis=-1)
    amax = amax_raw / ts
    if scale_rule in _POW2_RULES:
        lo = math.frexp(sfmt.smallest_positive)[1] - 1
        if sfmt.smallest_positive != math.ldexp(1.0, lo) or not sfmt.emax >= lo:
            raise FormatError(f"scale format {sfmt.name} cannot hold the power-of-two scales "
                              f"of rule {scale_rule!r}")
        exps = np.clip(_pow2_exponents(amax, elem, scale_rule), lo, sfmt.emax)
        exps = np.where(amax > 0, exps, lo)
        return np.ldexp(1.0, exps.astype(np.int32))
    return _round_scale(amax_raw / (elem.max_finite * ts), sfmt)


def _round_scale(values: np.ndarray, fmt: Format) -> np.ndarray:
    """``values`` rounded to ``fmt`` (nearest even, saturating), as float64."""
    return decode(encode(values, fmt, "nearest_even", "finite"), fmt)


def mx_quantize(x: object, element: str | Format = "e4m3", *, block_size: int = 32,
                axis: int = -1, scale_rule: ScaleRule = "floor",
                rounding: Rounding = "nearest_even") -> BlockArray:
    """OCP MX quantization: E8M0 power-of-two scales shared by ``block_size`` elements.

    Examples
    --------
    >>> import numpy as np
    >>> x = np.linspace(-1, 1, 64).reshape(2, 32)
    >>> b = mx_quantize(x, "fp4")
    >>> b.scale_codes.shape, float(abs(b.dequantize() - x).max()) <= 0.25
    ((2, 1), True)
    """
    if scale_rule == "amax":
        raise FormatError("MX scales are powers of two: use floor, ceil, rceil or even")
    return block_quantize(x, element, block_size=block_size, axis=axis,
                          scale_format="float8_e8m0fnu", scale_rule=scale_rule,
                          rounding=rounding)


def nvfp4_quantize(x: object, *, axis: int = -1, tensor_scale: float | None = None,
                   block_size: int = 16) -> BlockArray:
    """NVFP4: E2M1 elements, E4M3 scales per 16 elements, a float32 per-tensor scale.

    ``tensor_scale`` defaults to ``float32(amax / (448 * 6))`` (1 for an all-zero input).

    Examples
    --------
    >>> import numpy as np
    >>> b = nvfp4_quantize(np.array([0.5, -6.0, 3.0, 1.0]), tensor_scale=1 / 448)
    >>> b.scales, b.dequantize()
    (array([448.]), array([ 0.5, -6. ,  3. ,  1. ]))
    """
    a = _as_float64(x)
    if tensor_scale is None:
        finite = a[np.isfinite(a)]
        amax = float(np.abs(finite).max()) if finite.size else 0.0
        tensor_scale = float(np.float32(amax / (448.0 * 6.0))) if amax > 0 else 1.0
        if tensor_scale == 0.0:
            tensor_scale = float(np.finfo(np.float32).smallest_subnormal)
    return block_quantize(a, "float4_e2m1fn", block_size=block_size, axis=axis,
                          scale_format="float8_e4m3fn", scale_rule="amax",
                          tensor_scale=tensor_scale)


def p3109_block_quantize(x: object, element: str | Format = "binary8p3se", *,
                         block_size: int = 32, axis: int = -1,
                         scale_format: str | Format = "float8_e8m0fnu") -> BlockArray:
    """P3109 block max-abs conversion (gfloat ``quantize_block`` with
    ``compute_scale_amax``): scale ``2**(floor(log2 amax) - emax)``, elements saturated.

    Examples
    --------
    >>> import numpy as np
    >>> p3109_block_quantize(np.array([1e5, 3.0]), "binary8p4se").dequantize()
    array([9.8304e+04, 3.0000e+00])
    """
    return block_quantize(x, element, block_size=block_size, axis=axis,
                          scale_format=scale_format, scale_rule="floor")
