"""Formats as data: descriptor facts against ml_dtypes and gfloat, exhaustive decoding."""

from __future__ import annotations

import math

import gfloat
import gfloat.formats as gf
import ml_dtypes
import numpy as np
import pytest

from thrifty.errors import FormatError
from thrifty.numerics import FORMATS, Format, decode, get_format, p3109
from thrifty.numerics.formats import all_codes

pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered in cast")

ML_FORMATS = [f for f in FORMATS.values()
              if f.numpy_dtype is not None and hasattr(ml_dtypes, f.numpy_dtype)]
SMALL_FORMATS = [f for f in FORMATS.values() if f.bits <= 16]

# our name -> gfloat's independent FormatInfo
GFLOAT = {
    "float8_e4m3fn": gf.format_info_ocp_e4m3,
    "float8_e5m2": gf.format_info_ocp_e5m2,
    "float6_e3m2fn": gf.format_info_ocp_e3m2,
    "float6_e2m3fn": gf.format_info_ocp_e2m3,
    "float4_e2m1fn": gf.format_info_ocp_e2m1,
    "float8_e8m0fnu": gf.format_info_ocp_e8m0,
    "mx_int8": gf.format_info_ocp_int8,
    "binary16": gf.format_info_binary16,
    "bfloat16": gf.format_info_bfloat16,
    "binary32": gf.format_info_binary32,
    "binary64": gf.format_info_binary64,
    **{f.name.replace("p3109_k", "binary"): f for f in gf.sample_formats
       if f.name.startswith("p3109")},
}


def _ml_dtype(fmt: Format) -> np.dtype:
    return np.dtype(getattr(ml_dtypes, fmt.numpy_dtype))


def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Elementwise: equal including the sign of zero, or both NaN."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return ((a == b) & (np.signbit(a) == np.signbit(b))) | (np.isnan(a) & np.isnan(b))


@pytest.mark.parametrize("fmt", ML_FORMATS, ids=lambda f: f.name)
def test_facts_match_ml_dtypes_finfo(fmt: Format) -> None:
    fi = ml_dtypes.finfo(_ml_dtype(fmt))
    assert float(fi.max) == fmt.max_finite
    assert float(fi.min) == fmt.min_finite
    assert float(fi.smallest_subnormal) == fmt.smallest_positive
    assert float(fi.smallest_normal) == fmt.smallest_normal
    assert fi.bits == fmt.bits
    assert float(fi.eps) == fmt.eps


@pytest.mark.parametrize("name", sorted(GFLOAT), ids=str)
def test_facts_match_gfloat(name: str) -> None:
    fmt, gi = get_format(name), GFLOAT[name]
    assert (fmt.bits, fmt.precision, fmt.bias, fmt.signed) == (gi.k, gi.precision, gi.bias,
                                                              gi.is_signed)
    assert fmt.max_finite == gi.max
    assert fmt.min_finite == gi.min
    if fmt.bits < 64:  # gfloat takes floor(log2(max)) in floats, 1024 for binary64
        assert fmt.emax == gi.emax
    assert fmt.has_negative_zero == gi.has_nz
    assert fmt.has_inf == (gi.num_infs > 0)
    assert fmt.num_high_nans == gi.num_high_nans
    if gi.has_subnormals and gi.precision > 1:
        assert fmt.smallest_subnormal == gi.smallest_subnormal


@pytest.mark.parametrize("fmt", [f for f in ML_FORMATS if f.bits <= 16], ids=lambda f: f.name)
def test_decode_every_code_matches_ml_dtypes(fmt: Format) -> None:
    codes = all_codes(fmt)
    store = np.uint8 if fmt.bits <= 8 else np.uint16
    expected = codes.astype(store).view(_ml_dtype(fmt)).astype(np.float64)
    assert _same(decode(codes, fmt), expected).all()


@pytest.mark.parametrize("name", [n for n in sorted(GFLOAT) if get_format(n).bits <= 16])
def test_decode_every_code_matches_gfloat(name: str) -> None:
    fmt = get_format(name)
    codes = all_codes(fmt)
    expected = gfloat.decode_ndarray(GFLOAT[name], codes.astype(np.int64))
    assert _same(decode(codes, fmt), expected).all()


@pytest.mark.parametrize("fmt", SMALL_FORMATS, ids=lambda f: f.name)
def test_vectorised_decode_matches_scalar_reference(fmt: Format) -> None:
    codes = all_codes(fmt)
    step = max(1, fmt.num_codes // 4096)
    sample = codes[::step]
    expected = np.array([fmt.decode_scalar(int(c)) for c in sample])
    assert _same(decode(sample, fmt), expected).all()


@pytest.mark.parametrize("fmt", SMALL_FORMATS, ids=lambda f: f.name)
def test_code_census(fmt: Format) -> None:
    """Count NaNs, infinities and zeros among all codes; check max and the smallest values."""
    v = decode(all_codes(fmt), fmt)
    nan_count = int(np.isnan(v).sum())
    signs = 2 if fmt.signed else 1
    if fmt.nan == "negative_zero":
        assert nan_count == 1
    else:
        assert nan_count == signs * fmt.num_high_nans
    assert int(np.isinf(v).sum()) == (signs if fmt.has_inf else 0)
    assert int((v == 0).sum()) == (0 if not fmt.has_zero else 1 + fmt.has_negative_zero)
    finite = v[np.isfinite(v)]
    assert finite.max() == fmt.max_finite
    assert finite.min() == fmt.min_finite
    assert finite[finite > 0].min() == fmt.smallest_positive
    assert np.unique(finite).size == finite.size - (2 if fmt.has_negative_zero else 1) + 1


@pytest.mark.parametrize(("name", "facts"), [
    ("e4m3", {"name": "float8_e4m3fn", "max_finite": 448.0, "bias": 7, "has_inf": False}),
    ("e5m2", {"name": "float8_e5m2", "max_finite": 57344.0, "has_inf": True}),
    ("BF16", {"name": "bfloat16", "precision": 8, "emax": 127}),
    ("tf32", {"name": "tensorfloat32", "bits": 19, "precision": 11, "emin": -126}),
    ("fp16", {"max_finite": 65504.0, "smallest_subnormal": 2.0 ** -24}),
    ("Binary8p4se", {"bias": 8, "max_finite": 224.0, "has_negative_zero": False}),
    ("binary8p3se", {"bias": 16, "max_finite": 49152.0, "has_inf": True}),
    ("binary4p2sf", {"bias": 2, "max_finite": 3.0, "has_inf": False}),
    ("e8m0", {"min_finite": 2.0 ** -127, "has_zero": False, "signed": False}),
    ("mx_int8", {"max_finite": 127 / 64, "min_finite": -2.0, "smallest_normal": None}),
    ("nvfp4", {"name": "float4_e2m1fn", "max_finite": 6.0}),
    ("p3109_k8p1ue", {"bias": 128, "signed": False}),
])
def test_named_facts(name: str, facts: dict[str, object]) -> None:
    fmt = get_format(name)
    for attr, value in facts.items():
        assert getattr(fmt, attr) == value, attr


def test_p3109_constructor_matches_spec_rules() -> None:
    for k, p in [(8, 1), (8, 3), (8, 4), (8, 7), (6, 3), (16, 11)]:
        f = p3109(k, p)
        assert f.bias == 2 ** (k - p - 1)
        assert f.nan == "negative_zero" and not f.has_negative_zero
        assert math.isnan(f.decode_scalar(1 << (k - 1)))
        assert math.isinf(f.decode_scalar((1 << (k - 1)) - 1))
    assert p3109(8, 4, signed=False, domain="finite").bias == 16


@pytest.mark.parametrize(("args", "match"), [
    ((8, 0), "precision p"),
    ((8, 8), "precision p"),
    ((1, 1), "width k"),
    ((8, 3, True, "open"), "domain"),
])
def test_p3109_constructor_rejects_bad_parameters(args: tuple, match: str) -> None:
    with pytest.raises(FormatError, match=match):
        p3109(*args)


def test_unknown_name_lists_valid_names() -> None:
    with pytest.raises(FormatError, match="unknown number format 'fp7'.*float8_e4m3fn.*bf16"):
        get_format("fp7")
    with pytest.raises(FormatError, match="string"):
        get_format(8)  # type: ignore[arg-type]


def test_inconsistent_descriptor_is_rejected() -> None:
    with pytest.raises(FormatError, match="bits=8 must equal"):
        Format("bad", bits=8, exponent_bits=4, mantissa_bits=4, bias=7)
    with pytest.raises(FormatError, match="needs a sign bit"):
        Format("bad", bits=8, exponent_bits=5, mantissa_bits=3, bias=7, signed=False,
               nan="negative_zero")


def test_format_is_frozen_and_hashable() -> None:
    f = get_format("e4m3")
    with pytest.raises(AttributeError):
        f.bias = 3  # type: ignore[misc]
    assert {f: 1}[get_format("float8_e4m3fn")] == 1
    assert get_format(f) is f


def test_summary_is_json_ready() -> None:
    import json

    row = json.loads(json.dumps(get_format("e5m2").summary()))
    assert row["max"] == 57344.0 and "e5m2" in row["aliases"]


def test_cli_formats_table_and_json() -> None:
    import json

    from click.testing import CliRunner

    from thrifty.cli.fp_formats import formats

    runner = CliRunner()
    table = runner.invoke(formats, [])
    assert table.exit_code == 0
    assert "float8_e4m3fn" in table.output and "448" in table.output
    out = runner.invoke(formats, ["e4m3", "binary8p3se", "--json"])
    assert out.exit_code == 0
    rows = json.loads(out.output)
    assert [r["name"] for r in rows.values()] == ["float8_e4m3fn", "binary8p3se"]
    assert rows["float8_e4m3fn"]["max"] == 448.0 and rows["binary8p3se"]["nan"] == "negative_zero"
    bad = runner.invoke(formats, ["e9m9"])
    assert bad.exit_code == 2 and "unknown number format" in bad.output
