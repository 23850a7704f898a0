"""Matrix-unit models: bit-exact against measured GPU outputs, and fast path == reference."""

from __future__ import annotations

from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from thrifty.errors import FileFormatError, FormatError
from thrifty.numerics.units import (
    UnitModel,
    _compiled_eligible,
    load_validation_set,
    preset,
    reference_dot,
    unit,
    unit_names,
    validate,
)
from thrifty.numerics.units.kernels import tiled_eligible
from thrifty.testing import require_shared_data

# (folder, output): every file of shared/data/tensorcore
CASES = [
    ("V100/fp16", "fp32"), ("V100/fp16", "fp16"),
    ("A100/fp16", "fp32"), ("A100/fp16", "fp16"), ("A100/bf16", "fp32"), ("A100/tf32", "fp32"),
    ("Ada/fp16", "fp32"), ("Ada/fp16", "fp16"), ("Ada/bf16", "fp32"), ("Ada/tf32", "fp32"),
    ("Ada/E4M3", "fp32"), ("Ada/E4M3", "fp16"), ("Ada/E5M2", "fp32"), ("Ada/E5M2", "fp16"),
]


@pytest.mark.needs_data
@pytest.mark.parametrize(("folder", "output"), CASES)
def test_bit_exact_on_measured_tensor_cores(folder: str, output: str) -> None:
    path = require_shared_data("tensorcore", *folder.split("/"))
    data = load_validation_set(path)
    u = unit(folder.split("/")[0].lower(), input=data.input, output=output)
    report = validate(u, data)
    assert report.cases == 5000
    assert report.matched == report.cases, f"first mismatches {report.mismatches[:10]}"


@pytest.mark.needs_data
@pytest.mark.parametrize(("folder", "output"), [("V100/fp16", "fp16"), ("A100/bf16", "fp32"),
                                                ("Ada/E4M3", "fp32"), ("Ada/E5M2", "fp16")])
def test_compiled_engine_is_bit_exact_too(folder: str, output: str) -> None:
    data = load_validation_set(require_shared_data("tensorcore", *folder.split("/")))
    u = unit(folder.split("/")[0].lower(), input=data.input, output=output)
    c = data.c if output == "fp32" else data.c.astype(np.float16).astype(np.float64)
    got = u.dot(data.a, data.b, c, engine="compiled")
    want = data.d[u.model.output]
    assert np.array_equal(got.astype(np.float32).view(np.uint32),
                          want.astype(np.float32).view(np.uint32))


@pytest.mark.needs_data
@pytest.mark.parametrize(("folder", "override"), [
    ("A100/bf16", {"align_bits": 0}),
    ("A100/bf16", {"rounding": "nearest_even"}),
    ("V100/fp16", {"align_bits": None}),
    ("Ada/E4M3", {"normalize_bits": None}),
    ("Ada/fp16", {"fma": 4}),
])
def test_measured_data_discriminates_parameters(folder: str, override: dict) -> None:
    """A wrong parameter loses bit-exactness: the data pin the model down."""
    data = load_validation_set(require_shared_data("tensorcore", *folder.split("/")))
    u = unit(folder.split("/")[0].lower(), input=data.input, output="fp32", **override)
    assert validate(u, data).matched < data.a.shape[0]


def _write_set(tmp_path, a_lines, c_lines, d_lines):
    (tmp_path / "a_X_bf16.txt").write_text("\n".join(a_lines) + "\n")
    (tmp_path / "b_X_bf16.txt").write_text("\n".join(a_lines) + "\n")
    (tmp_path / "c_X_fp32.txt").write_text("\n".join(c_lines) + "\n")
    (tmp_path / "d_X_fp32.txt").write_text("\n".join(d_lines) + "\n")


ONE = "0" * 2 + "1" * 7 + "0" * 23  # 1.0 as a binary32 bit string


@pytest.mark.parametrize(("a_lines", "c_lines", "bad_file", "line"), [
    (["3f800000 3f800000", "3f800000 zz800000"], [ONE, ONE], "a_X_bf16.txt", 2),
    (["3f800000 3f800000", "3f800000"], [ONE, ONE], "a_X_bf16.txt", 2),
    (["3f800000 3f800000", "3f800000 3f800000"], [ONE, ONE[:-1] + "2"], "c_X_fp32.txt", 2),
    (["3f800000 3f800000", "3f800000 3f800000"], [ONE, ONE + "0"], "c_X_fp32.txt", 2),
])
def test_malformed_files_name_file_and_line(tmp_path, a_lines, c_lines, bad_file, line):
    _write_set(tmp_path, a_lines, c_lines, [ONE, ONE])
    with pytest.raises(FileFormatError) as err:
        load_validation_set(tmp_path)
    assert bad_file in str(err.value) and f"line {line}" in str(err.value)


def test_small_validation_folder_roundtrip(tmp_path) -> None:
    """1*1 + 1*1 + 1 = 3 exactly: a two-case folder written here validates."""
    three = "0" + "10000000" + "1" + "0" * 22
    _write_set(tmp_path, ["3f800000 3f800000"] * 2, [ONE, ONE], [three, ONE])
    report = validate(unit("a100", input="bf16"), load_validation_set(tmp_path))
    assert (report.cases, report.matched, report.mismatches) == (2, 1, (1,))


# ---- presets and bad input --------------------------------------------------------------

PRESET_PAIRS = [(n, i, o) for n in ("v100", "a100", "a2", "ada", "h100", "h200", "b200")
                for i, o in (("fp16", "fp32"), ("fp16", "fp16"))] + [
    (n, i, "fp32") for n in ("a100", "ada", "l40s", "h100", "h200", "b200")
    for i in ("bf16", "tf32")] + [
    (n, i, o) for n in ("ada", "l40s", "h100", "h200") for i in ("e4m3", "e5m2")
    for o in ("fp32", "fp16")] + [("b200", "e4m3", "fp32"), ("cdna1", "fp16", "fp32"),
                                  ("cdna1", "bf16", "fp32"), ("cdna2", "bf16", "fp32"),
                                  ("cdna3", "bf16", "fp32"), ("cdna3", "e4m3fnuz", "fp32"),
                                  ("cdna3", "tf32", "fp32"), ("amx", "bf16", "fp32")]


@pytest.mark.parametrize(("name", "fin", "fout"), PRESET_PAIRS)
def test_every_preset_builds_and_computes_an_exact_case(name, fin, fout) -> None:
    u = unit(name, input=fin, output=fout)
    k = 2 * u.model.fma
    got = u.dot(np.full(k, 0.5), np.full(k, 2.0), 1.0)
    assert got == k + 1.0


@pytest.mark.parametrize(("name", "fin", "fout", "needle"), [
    ("v200", "fp16", "fp32", "valid: v100"),
    ("v100", "bf16", "fp32", "no bfloat16 input"),
    ("a100", "bf16", "fp16", "binary32 only"),
    ("cdna2", "fp16", "fp16", "binary32 only"),
    ("amx", "fp16", "fp32", "bfloat16 x bfloat16"),
    ("a100", "fp17", "fp32", "unknown number format"),
])
def test_bad_unit_requests_raise_with_valid_choices(name, fin, fout, needle) -> None:
    with pytest.raises(FormatError, match=needle):
        preset(name, fin, fout)


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"fma": 0}, "fma"), ({"shifted_out": "chop"}, "valid: truncate"),
    ({"rounding": "odd"}, "valid: toward_zero"), ({"align_bits": -30}, "negative window"),
    ({"carry_bits": 2, "align_bits": None}, "carry_bits"),
])
def test_bad_model_parameters(kwargs, needle) -> None:
    base = {"name": "x", "input": "bf16", "output": "fp32", "fma": 4}
    with pytest.raises(FormatError, match=needle):
        UnitModel(**{**base, **kwargs})


def test_inputs_not_in_the_input_format_are_refused() -> None:
    with pytest.raises(FormatError, match="not a finite value of bfloat16"):
        unit("a100", input="bf16").dot(np.array([1 + 2.0**-10]), np.array([1.0]), 0.0)


def test_engine_choice_is_checked() -> None:
    with pytest.raises(FormatError, match="valid: auto, numpy, compiled"):
        unit("a100", input="bf16").dot(np.ones(8), np.ones(8), 0.0, engine="fast")
    with pytest.raises(FormatError, match="finite window"):
        unit("amx", input="bf16").dot(np.ones(8), np.ones(8), 0.0, engine="compiled")


def test_unit_names_lists_all_presets() -> None:
    assert {"v100", "a100", "h100", "b200", "cdna3", "amx"} <= set(unit_names())


@pytest.mark.parametrize(("a", "c", "want"), [
    ([np.nan, 1.0], 0.0, "nan"), ([np.inf, 1.0], 1.0, "inf"), ([np.inf, -np.inf], 0.0, "nan"),
    ([1.0, 1.0], -np.inf, "-inf"), ([np.inf, 0.0], 0.0, "inf"),
])
def test_nan_and_inf_follow_ieee(a, c, want) -> None:
    got = unit("a100", input="fp16").dot(np.array(a), np.ones(2), c)
    assert str(float(got)) == want


def test_overflow_gives_infinity() -> None:
    big = float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
    got = unit("a100", input="bf16").dot(np.full(8, big), np.full(8, big), 0.0)
    assert got == np.inf


# ---- fast path == scalar exact-rational reference ------------------------------------

IN_FORMATS = {"binary16": np.float16, "bfloat16": ml_dtypes.bfloat16,
              "float8_e4m3fn": ml_dtypes.float8_e4m3fn, "float8_e5m2": ml_dtypes.float8_e5m2}


def _random_values(rng: np.random.Generator, fmt: str, shape: tuple[int, ...],
                   spread: int) -> np.ndarray:
    """Random finite values of ``fmt`` with exponents spread over ``2**±spread``."""
    if fmt == "tensorfloat32":
        x = rng.standard_normal(shape) * np.exp2(rng.integers(-spread, spread + 1, shape))
        bits = x.astype(np.float32).view(np.uint32) & np.uint32(0xFFFFE000)
        return bits.view(np.float32).astype(np.float64)
    dt = IN_FORMATS[fmt]
    x = rng.standard_normal(shape) * np.exp2(rng.integers(-spread, spread + 1, shape))
    x = np.where(rng.random(shape) < 0.1, 0.0, x)
    with np.errstate(over="ignore"):
        v = x.astype(dt).astype(np.float64)
    return np.where(np.isfinite(v), v, 1.0)


models = st.builds(
    lambda fin, fout, fma, ab, so, carry, cin, late, inter, nb, rnd, subin, subout: UnitModel(
        "random", fin, fout, fma=fma, align_bits=ab, shifted_out=so,
        carry_bits=carry if (ab is not None and cin and not inter) else None,
        c_in_alignment=cin, late_shifted_out=late, interleave=inter, normalize_bits=nb,
        rounding=rnd, subnormals_in=subin, subnormals_out=subout),
    st.sampled_from(["binary16", "bfloat16", "tensorfloat32", "float8_e4m3fn",
                     "float8_e5m2"]),
    st.sampled_from(["binary32", "binary16"]),
    st.integers(1, 8),
    st.one_of(st.none(), st.integers(-8, 4)),
    st.sampled_from(["truncate", "round_down", "sticky"]),
    st.one_of(st.none(), st.integers(0, 3)),
    st.booleans(), st.sampled_from(["truncate", "round_down", "sticky"]), st.booleans(),
    st.one_of(st.none(), st.integers(6, 24)),
    st.sampled_from(["toward_zero", "nearest_even", "up", "down"]),
    st.booleans(), st.booleans())


@settings(max_examples=120, deadline=None, derandomize=True)
@given(model=models, seed=st.integers(0, 2**32 - 1), k=st.integers(1, 12),
       spread=st.sampled_from([2, 6, 20]))
def test_vectorised_unit_equals_exact_rational_reference(model, seed, k, spread) -> None:
    rng = np.random.default_rng(seed)
    n = 6
    a = _random_values(rng, model.input, (n, k), spread)
    b = _random_values(rng, model.input, (n, k), spread)
    c_dt = np.float16 if model.output == "binary16" else np.float32
    with np.errstate(over="ignore"):
        c = rng.standard_normal(n) * np.exp2(rng.integers(-spread, spread + 1, n))
        c = c.astype(c_dt)
    c = np.where(np.isfinite(c), c, 0).astype(np.float64)
    fast = unit(model).dot(a, b, c, engine="numpy")
    ref = np.array([reference_dot(model, list(a[i]), list(b[i]), c[i]) for i in range(n)])
    assert np.array_equal(fast, ref, equal_nan=True), (fast, ref)
    if _compiled_eligible(model):
        compiled = unit(model).dot(a, b, c, engine="compiled")
        assert np.array_equal(compiled, ref, equal_nan=True), (compiled, ref)


@pytest.mark.parametrize("name", ["h100", "cdna3", "amx", "v100"])
def test_matmul_is_the_documented_sequence_of_dot_steps(name: str) -> None:
    fin = "bf16" if name in ("cdna3", "amx") else "fp16"
    rng = np.random.default_rng(7)
    u = unit(name, input=fin, output="fp32")
    dt = ml_dtypes.bfloat16 if fin == "bf16" else np.float16
    A = rng.standard_normal((5, 37)).astype(dt).astype(np.float64)
    B = rng.standard_normal((37, 4)).astype(dt).astype(np.float64)
    C = rng.standard_normal((5, 4)).astype(np.float32).astype(np.float64)
    D = u.matmul(A, B, C, block_rows=2, engine="numpy")
    rows = np.array([[reference_dot(u.model, list(A[i]), list(B[:, j]), C[i, j])
                      for j in range(4)] for i in range(5)])
    assert np.array_equal(D, rows)
    if _compiled_eligible(u.model):
        assert np.array_equal(u.matmul(A, B, C, engine="compiled"), rows)
    assert np.array_equal(D, u.dot(A[:, None, :], np.broadcast_to(B.T, (5, 4, 37)), C))


def test_exact_units_round_once() -> None:
    """CDNA1 accumulates exactly: 1 + 2^-30 - 1 over one step gives 2^-30 exactly."""
    u = unit("cdna1", input="fp16")
    got = u.dot(np.array([1.0, 2.0**-15, -1.0, 0.0]), np.array([1.0, 2.0**-15, 1.0, 0.0]), 0.0)
    assert got == 2.0**-30
    truncating = unit("v100", input="fp16")
    assert truncating.dot(np.array([1.0, 2.0**-15, -1.0, 0.0]),
                          np.array([1.0, 2.0**-15, 1.0, 0.0]), 0.0) == 0.0


# ---- command line ---------------------------------------------------------------------

@pytest.mark.needs_data
def test_cli_validate_unit_json() -> None:
    import json

    from click.testing import CliRunner

    from thrifty.cli.fp_units import validate_unit
    path = require_shared_data("tensorcore", "A100", "bf16")
    res = CliRunner().invoke(validate_unit, ["--unit", "a100", "--input", "bf16", "--output",
                                             "fp32", "--data", str(path), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert (out["cases"], out["matched"]) == (5000, 5000)
    bad = CliRunner().invoke(validate_unit, ["--unit", "h100", "--output", "fp32", "--data",
                                             str(path)])
    assert bad.exit_code == 1  # H100's model does not match A100 data


def test_cli_validate_unit_names_a_missing_folder(tmp_path) -> None:
    from click.testing import CliRunner

    from thrifty.cli.fp_units import validate_unit
    res = CliRunner().invoke(validate_unit, ["--unit", "a100", "--data", str(tmp_path / "x")])
    assert res.exit_code != 0 and "not a folder" in res.output


models_ext = st.builds(
    lambda md, pattern, last, zexp, pz: replace(
        md, interleave_pattern=pattern, zero_exp=zexp, positive_zero=pz,
        addend_last=last and md.c_in_alignment and md.window_bits is not None),
    models, st.sampled_from(["odd_even", "pairs"]), st.booleans(),
    st.one_of(st.none(), st.integers(-40, 12)), st.booleans())


@settings(max_examples=140, deadline=None, derandomize=True)
@given(model=models_ext, seed=st.integers(0, 2**32 - 1), k=st.integers(1, 40),
       spread=st.sampled_from([2, 6, 20]))
def test_tiled_compiled_gemm_equals_the_numpy_engine(model, seed, k, spread) -> None:
    """The blocked GEMM kernel (row and column blocks, padded columns, one step at a time)
    gives the numpy engine's bits, across block edges, with NaN/Inf addends kept."""
    if not _compiled_eligible(model):
        return
    rng = np.random.default_rng(seed)
    m, n = 19, 70  # two row blocks and two column blocks (the second one padded)
    A = _random_values(rng, model.input, (m, k), spread)
    B = _random_values(rng, model.input, (k, n), spread)
    A[rng.random((m, k)) < 0.2] = 0.0
    c_dt = np.float16 if model.output == "binary16" else np.float32
    with np.errstate(over="ignore"):
        C = (rng.standard_normal((m, n)) * np.exp2(rng.integers(-spread, spread + 1, (m, n))))
        C = C.astype(c_dt).astype(np.float64)
    C[0, :3] = [np.inf, -np.inf, np.nan]
    u = unit(model)
    want = u.matmul(A, B, C, engine="numpy")
    got = u.matmul(A, B, C, engine="compiled")
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.uint64), want[~nan].view(np.uint64)), \
        np.argwhere(got != want)[:5]


def test_wide_format_models_take_the_per_entry_kernel() -> None:
    """A binary64 accumulator is outside the tiled kernel's bit tricks: same bits anyway."""
    model = UnitModel("wide", "bf16", "binary32", fma=4, align_bits=-30, accumulator="binary64")
    assert _compiled_eligible(model) and not tiled_eligible(model)
    rng = np.random.default_rng(5)
    A = _random_values(rng, "bfloat16", (6, 9), 6)
    B = _random_values(rng, "bfloat16", (9, 5), 6)
    u = unit(model)
    assert np.array_equal(u.matmul(A, B, engine="compiled"), u.matmul(A, B, engine="numpy"))


def test_addend_last_keeps_an_infinite_running_value() -> None:
    """With c added last, an infinite addend ends the chain in every engine (the products
    may overflow the other way: -inf + inf must not appear)."""
    model = UnitModel("x", "binary16", "binary16", fma=1, align_bits=0, addend_last=True)
    A, B, C = np.array([[-4460.0]]), np.array([[7152.0]]), np.array([[np.inf]])
    want = reference_dot(model, [-4460.0], [7152.0], np.inf)
    assert want == np.inf
    for engine in ("numpy", "compiled"):
        assert unit(model).matmul(A, B, C, engine=engine)[0, 0] == want
        assert unit(model).dot(A[0], B[:, 0], np.inf, engine=engine) == want
