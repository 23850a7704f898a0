"""Block formats: MX scale rules, NVFP4 and P3109 block conversion against independent
oracles (gfloat's block quantizer, exact scalar scale rules, ml_dtypes element casts)."""

from __future__ import annotations

import math
from fractions import Fraction

import gfloat
import gfloat.formats as gf
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from thrifty.errors import FormatError
from thrifty.numerics import get_format
from thrifty.numerics.blocks import (
    SCALE_RULES,
    block_quantize,
    mx_quantize,
    nvfp4_quantize,
    p3109_block_quantize,
)

pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered in cast",
                                        "ignore:overflow encountered in cast")

MX_ELEMENTS = {
    "float8_e4m3fn": gf.format_info_mxfp8_e4m3,
    "float8_e5m2": gf.format_info_mxfp8_e5m2,
    "float6_e3m2fn": gf.format_info_mxfp6_e3m2,
    "float6_e2m3fn": gf.format_info_mxfp6_e2m3,
    "float4_e2m1fn": gf.format_info_mxfp4_e2m1,
    "mx_int8": gf.format_info_mxint8,
}
P3109_ELEMENTS = ["binary8p3se", "binary8p4se", "binary8p1se", "binary4p2sf", "binary6p3sf"]


def _blocks_sample(nblocks: int, block_size: int, seed: int) -> np.ndarray:
    """Blocks with varied dynamic range, an all-zero block and two far-subnormal blocks."""
    rng = np.random.default_rng(seed)
    scale = np.exp2(rng.integers(-60, 60, size=(nblocks, 1)))
    spread = np.exp2(rng.integers(-12, 1, size=(nblocks, block_size)))
    x = rng.standard_normal((nblocks, block_size)) * scale * spread
    x[0] = 0.0
    x[1] *= 2.0 ** -100
    x[2] = np.exp2(rng.integers(-140, -130, block_size)) * 1.5
    return x.astype(np.float32).astype(np.float64)


def _gfloat_quantize(name: str, bfi: gfloat.BlockFormatInfo, x: np.ndarray) -> np.ndarray:
    return np.stack([gfloat.quantize_block(bfi, row, gfloat.compute_scale_amax) for row in x])


@pytest.mark.parametrize("name", sorted(MX_ELEMENTS))
def test_mx_floor_matches_gfloat(name: str) -> None:
    x = _blocks_sample(24, 32, seed=1)
    got = mx_quantize(x, name, scale_rule="floor").dequantize()
    np.testing.assert_array_equal(got, _gfloat_quantize(name, MX_ELEMENTS[name], x))


@pytest.mark.parametrize("name", P3109_ELEMENTS)
def test_p3109_block_conversion_matches_gfloat(name: str) -> None:
    gi = gf.format_info_p3109(*_p3109_args(name))
    bfi = gfloat.BlockFormatInfo(name, gi, 32, gf.format_info_ocp_e8m0)
    x = _blocks_sample(16, 32, seed=2)
    got = p3109_block_quantize(x, name).dequantize()
    np.testing.assert_array_equal(got, _gfloat_quantize(name, bfi, x))


def _p3109_args(name: str) -> tuple:
    f = get_format(name)
    return (f.bits, f.precision, gfloat.Signedness.Signed,
            gfloat.Domain.Extended if f.has_inf else gfloat.Domain.Finite)


def _exponent_oracle(amax: float, name: str, rule: str) -> int:
    """The scale exponent of one block by exact rational arithmetic, rule by rule."""
    f = get_format(name)
    if amax == 0:
        return -127
    a = Fraction(amax)
    if rule == "even":                 # round to P bits, ties away from zero
        e = math.frexp(amax)[1] - 1
        ulp = Fraction(2) ** (e - f.mantissa_bits)
        a = math.floor(a / ulp + Fraction(1, 2)) * ulp
    floor_log2 = max(k for k in range(-1200, 1200) if Fraction(2) ** k <= a) \
        if a < 1 else math.floor(math.log2(a))
    while Fraction(2) ** (floor_log2 + 1) <= a:
        floor_log2 += 1
    while Fraction(2) ** floor_log2 > a:
        floor_log2 -= 1
    if rule in ("floor", "even"):
        x = floor_log2 - f.emax
    elif rule == "ceil":
        x = floor_log2 - f.emax + (a != Fraction(2) ** floor_log2)
    else:                              # rceil: smallest X with amax <= max * 2**X
        x = floor_log2 - f.emax - 1
        while a > Fraction(f.max_finite) * Fraction(2) ** x:
            x += 1
    return min(max(x, -127), 127)


@pytest.mark.parametrize("rule", ["floor", "ceil", "rceil", "even"])
@pytest.mark.parametrize("name", ["float8_e4m3fn", "float8_e5m2", "float6_e2m3fn",
                                  "float4_e2m1fn"])
def test_mx_scale_rules_against_exact_oracle(name: str, rule: str) -> None:
    x = _blocks_sample(20, 32, seed=3)
    # blocks whose amax sits exactly on, just below and just above a rule's boundary
    fmax = get_format(name).max_finite
    x[3, 0], x[4, 0], x[5, 0] = fmax * 8, np.nextafter(fmax * 8, 0), np.nextafter(fmax * 8, 1e9)
    x[6, 0] = 1.0 + 2.0 ** -(get_format(name).mantissa_bits + 1)       # a tie for "even"
    b = mx_quantize(x, name, scale_rule=rule)
    amax = np.abs(x).max(axis=1)
    expected_exp = np.array([_exponent_oracle(float(a), name, rule) for a in amax])
    np.testing.assert_array_equal(b.scales[:, 0], np.ldexp(1.0, expected_exp))
    fmt = get_format(name)
    scaled = np.clip(x / b.scales, -fmt.max_finite, fmt.max_finite)     # saturate, exactly
    expected = scaled.astype(getattr(ml_dtypes, fmt.numpy_dtype)).astype(np.float64)
    np.testing.assert_array_equal(b.elements, expected)


@pytest.mark.parametrize("rule", ["ceil", "rceil"])
def test_round_up_rules_never_saturate(rule: str) -> None:
    x = _blocks_sample(50, 32, seed=4)
    b = mx_quantize(x, "e4m3", scale_rule=rule)
    assert (np.abs(x / b.scales) <= 448.0).all()


def test_floor_rule_puts_amax_in_the_top_binade() -> None:
    x = _blocks_sample(50, 32, seed=5)[3:]         # skip clamped and zero blocks
    b = mx_quantize(x, "e5m2")
    ratio = np.abs(x).max(axis=1) / b.scales[:, 0]
    assert ((ratio >= 2.0 ** 15) & (ratio < 2.0 ** 16)).all()


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_axis_and_partial_blocks(axis: int) -> None:
    rng = np.random.default_rng(6)
    x = rng.standard_normal((70, 45))
    b = mx_quantize(x, "e2m1", axis=axis)
    assert b.dequantize().shape == x.shape
    nblocks = -(-x.shape[axis] // 32)
    assert b.scale_codes.shape[axis] == nblocks
    moved = np.moveaxis(x, axis, -1)
    pieces = [mx_quantize(moved[..., i:i + 32], "e2m1").dequantize()
              for i in range(0, moved.shape[-1], 32)]
    np.testing.assert_array_equal(np.moveaxis(b.dequantize(), axis, -1),
                                  np.concatenate(pieces, axis=-1))


def test_nan_or_inf_marks_only_its_block() -> None:
    x = np.ones((3, 32))
    x[1, 5] = np.nan
    x[2, 7] = -np.inf
    b = mx_quantize(x, "e4m3")
    out = b.dequantize()
    assert (out[0] == 1.0).all()
    assert np.isnan(out[1:]).all()
    assert (b.scale_codes[1:] == 0xFF).all()


def test_nvfp4_matches_recipe_with_ml_dtypes() -> None:
    """The NVFP4 recipe written out with float64 numpy and ml_dtypes casts."""
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((8, 64)) * np.exp2(rng.integers(-8, 8, (8, 1)))).astype(np.float32)
    x = x.astype(np.float64)
    b = nvfp4_quantize(x)
    ts = float(np.float32(np.abs(x).max() / (448.0 * 6.0)))
    assert b.tensor_scale == ts
    blocks = x.reshape(8, 4, 16)
    sb = np.minimum(np.abs(blocks).max(axis=-1) / (6.0 * ts), 448.0)
    sb = sb.astype(ml_dtypes.float8_e4m3fn).astype(np.float64)
    elems = np.clip(blocks / (sb * ts)[..., None], -6, 6)
    elems = elems.astype(ml_dtypes.float4_e2m1fn).astype(np.float64)
    np.testing.assert_array_equal(b.scales, sb)
    np.testing.assert_array_equal(b.dequantize(), (elems * sb[..., None] * ts).reshape(8, 64))
    assert b.bits_per_element == 4.5


def test_nvfp4_error_is_small() -> None:
    rng = np.random.default_rng(8)
    x = rng.standard_normal(4096)
    b = nvfp4_quantize(x)
    err = np.abs(b.dequantize() - x)
    unit = np.repeat(b.scales * b.tensor_scale, 16)
    # half the widest E2M1 gap (4 to 6) is one unit; beyond 6 units, saturation
    bound = unit + np.maximum(0.0, np.abs(x) - 6 * unit)
    assert (err <= bound).all()
    assert err.mean() < 0.1 * np.abs(x).mean()


def test_bits_per_element() -> None:
    assert mx_quantize(np.ones(32), "e4m3").bits_per_element == 8.25


@pytest.mark.parametrize(("call", "match"), [
    (lambda: mx_quantize(np.ones(4), block_size=0), "block_size"),
    (lambda: block_quantize(np.ones(4), "e4m3", scale_rule="round"), "unknown scale rule"),
    (lambda: mx_quantize(np.ones(4), scale_rule="amax"), "powers of two"),
    (lambda: mx_quantize(np.ones((2, 2)), axis=2), "axis 2"),
    (lambda: mx_quantize(np.ones(4), rounding="stochastic"), "deterministic"),
    (lambda: mx_quantize(np.ones(4, dtype=int)), "floating-point input"),
    (lambda: block_quantize(np.array([np.nan]), "e4m3", scale_format="fp4",
                            scale_rule="amax"), "has no NaN"),
    (lambda: nvfp4_quantize(np.ones(4), tensor_scale=-1.0), "tensor_scale"),
])
def test_bad_input(call, match: str) -> None:
    with pytest.raises(FormatError, match=match):
        call()


def test_scale_rules_registry() -> None:
    assert set(SCALE_RULES) == {"floor", "ceil", "rceil", "even", "amax"}


@settings(max_examples=150, deadline=None)
@given(hnp.arrays(np.float64, st.integers(1, 70),
                  elements=st.floats(-2.0**100, 2.0**100, allow_nan=False, width=32)),
       st.sampled_from(["ceil", "rceil"]),
       st.sampled_from(["e4m3", "e5m2", "e2m3", "fp4"]))
def test_round_up_rules_error_is_half_an_ulp(x: np.ndarray, rule: str, name: str) -> None:
    """With a scale that never saturates, each element is x / s rounded to nearest: the
    error is at most half a unit in the last place of the element at that scale."""
    fmt = get_format(name)
    b = mx_quantize(x, name, scale_rule=rule)
    s = np.repeat(b.scales, 32)[: x.size]
    assert set(np.unique(np.log2(b.scales) % 1)) <= {0.0}
    y = np.abs(x / s)
    e = np.maximum(np.floor(np.log2(np.where(y > 0, y, 1.0))), fmt.emin)
    half_ulp = np.exp2(e - fmt.mantissa_bits - 1) * s
    assert (np.abs(b.dequantize() - x) <= half_ulp).all()
