"""Low-precision results in the formats' own dtypes (numpy or ml_dtypes), where they exist."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from thrifty.errors import FormatError
from thrifty.numerics import FORMATS, decode, encode, native_dtype, round

NATIVE = sorted(n for n, f in FORMATS.items() if f.numpy_dtype)


@pytest.mark.parametrize("name", NATIVE)
def test_round_native_agrees_with_ml_dtypes_own_conversion(name):
    fmt = FORMATS[name]
    dt = native_dtype(fmt)
    assert dt.name == fmt.numpy_dtype
    info = ml_dtypes.finfo(dt) if dt.name not in ("float64",) else np.finfo(dt)
    rng = np.random.default_rng(len(name))
    top = min(float(info.max), 1e300)
    x = np.concatenate([rng.uniform(-top, top, 3000),
                        rng.standard_normal(3000) * float(info.tiny) * 4,
                        np.geomspace(float(info.smallest_subnormal), top, 2000)])
    if float(info.min) >= 0:  # unsigned formats
        x = np.abs(x)
    got = round(x, fmt, dtype="native")
    assert got.dtype == dt
    want = x.astype(dt)  # ml_dtypes' (or numpy's) round-to-nearest-even conversion
    same = (got.astype(np.float64) == want.astype(np.float64)) | (
        np.isnan(got.astype(np.float64)) & np.isnan(want.astype(np.float64)))
    assert same.all(), (x[~same][:5], got[~same][:5], want[~same][:5])
    np.testing.assert_array_equal(got.astype(np.float64), round(x, fmt))


@pytest.mark.parametrize("name", NATIVE)
def test_decode_native_is_the_same_bits(name):
    fmt = FORMATS[name]
    if fmt.bits > 16:
        return
    codes = np.arange(1 << fmt.bits)
    vals = decode(codes, fmt, dtype="native")
    assert vals.dtype == native_dtype(fmt)
    width = {1: np.uint8, 2: np.uint16}[vals.dtype.itemsize]
    np.testing.assert_array_equal(vals.view(width).astype(np.int64) & ((1 << fmt.bits) - 1),
                                  encode(vals.astype(np.float64), fmt).astype(np.int64))


def test_formats_without_a_dtype_say_which_have_one():
    plain = next(n for n, f in FORMATS.items() if not f.numpy_dtype)
    with pytest.raises(FormatError, match="formats that have one: .*bfloat16"):
        round(np.ones(3), plain, dtype="native")
    with pytest.raises(FormatError, match="'float64'.*'native'"):
        round(np.ones(3), "bf16", dtype="float32")
