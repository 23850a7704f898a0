"""Bad arguments to the numerics API and its CLI: a clear ThriftyError, never bad output."""

from __future__ import annotations

import json
import math
import time
from fractions import Fraction

import numpy as np
import pytest
from click.testing import CliRunner

from thrifty.errors import FileFormatError, FormatError, ShapeError, SpecError
from thrifty.numerics import decode, encode, round
from thrifty.numerics.bounds import _EXACT_STEPS, a_priori_bound, gamma_bound, step_error_model
from thrifty.numerics.units import UnitModel, load_validation_set, preset, unit


def _strict_json(text: str) -> object:
    """Parse JSON as the standard defines it: Infinity and NaN are not JSON."""
    def refuse(name: str) -> object:
        raise ValueError(f"{name} is not JSON")
    return json.loads(text, parse_constant=refuse)


U = unit("a100", input="bf16")


# ---- matmul / dot -------------------------------------------------------------------------

@pytest.mark.parametrize("rows", [-1, 0, 1.5, True, math.nan, "4"])
@pytest.mark.parametrize("engine", ["numpy", "auto"])
def test_matmul_block_rows_must_be_a_positive_int(rows: object, engine: str) -> None:
    with pytest.raises(SpecError, match="block_rows must be a positive integer"):
        U.matmul(np.ones((4, 8)), np.ones((8, 2)), block_rows=rows, engine=engine)


def test_matmul_block_rows_accepts_numpy_ints_and_gives_the_same_bits() -> None:
    rng = np.random.default_rng(0)
    A = round(rng.standard_normal((5, 24)), "bf16")
    B = round(rng.standard_normal((24, 3)), "bf16")
    ref = U.matmul(A, B, engine="numpy")
    assert np.array_equal(U.matmul(A, B, block_rows=np.int64(2), engine="numpy"), ref)


def test_matmul_progress_is_a_bool_and_chunking_keeps_the_bits() -> None:
    with pytest.raises(SpecError, match="progress must be True, False or None"):
        U.matmul(np.ones((4, 8)), np.ones((8, 2)), progress="yes")
    rng = np.random.default_rng(1)
    A = round(rng.standard_normal((70, 40)), "bf16")
    B = round(rng.standard_normal((40, 9)), "bf16")
    whole = U.matmul(A, B, engine="compiled", progress=False)
    chunked = U.matmul(A, B, engine="compiled", progress=True)
    assert np.array_equal(whole.view(np.uint64), chunked.view(np.uint64))
    assert np.array_equal(whole, U.matmul(A, B, engine="numpy"))


@pytest.mark.parametrize("bad", [np.ones((4, 8)) + 1j, np.full((4, 8), "1.0"),
                                 np.ones((4, 8), dtype=object)])
def test_non_real_operands_are_refused(bad: np.ndarray) -> None:
    with pytest.raises(SpecError, match="must hold real numbers"):
        U.matmul(bad, np.ones((8, 2)))
    with pytest.raises(SpecError, match="must hold real numbers"):
        U.dot(bad, np.ones((4, 8)))
    with pytest.raises(SpecError, match="must hold real numbers"):
        U.dot(np.ones(8), np.ones(8), 1 + 1j)


def test_ragged_operands_are_shape_errors() -> None:
    with pytest.raises(ShapeError, match="not a rectangular array"):
        U.dot([[1.0, 2.0], [3.0]], np.ones(2))


def test_addend_of_the_wrong_shape_names_both_shapes() -> None:
    with pytest.raises(ShapeError, match=r"\(3, 3\).*\(4, 2\)"):
        U.matmul(np.ones((4, 8)), np.ones((8, 2)), np.ones((3, 3)))
    with pytest.raises(ShapeError, match=r"\(5,\).*\(4,\)"):
        U.dot(np.ones((4, 8)), np.ones((4, 8)), np.ones(5))
    # broadcastable addends still work
    got = U.matmul(np.ones((4, 8)), np.ones((8, 2)), np.ones((1, 2)), engine="numpy")
    assert np.array_equal(got, np.full((4, 2), 9.0))


def test_operand_shapes_are_shape_errors() -> None:
    with pytest.raises(ShapeError, match=r"A \(4, 8\) and B \(7, 2\)"):
        U.matmul(np.ones((4, 8)), np.ones((7, 2)))
    with pytest.raises(ShapeError, match="broadcastable"):
        U.dot(np.ones((3, 8)), np.ones((4, 8)))


@pytest.mark.parametrize("engine", ["fast", None, 3, ""])
def test_engine_names_are_checked(engine: object) -> None:
    with pytest.raises(FormatError, match="valid: auto, numpy, compiled"):
        U.matmul(np.ones((2, 8)), np.ones((8, 2)), engine=engine)


# ---- unit(), presets and UnitModel --------------------------------------------------------

@pytest.mark.parametrize("name", [None, 5, ["h100"]])
def test_unit_name_must_be_a_string_or_model(name: object) -> None:
    with pytest.raises(FormatError, match="preset name"):
        unit(name)
    with pytest.raises(FormatError, match="named by a string"):
        preset(name)


def test_unknown_override_lists_the_fields() -> None:
    with pytest.raises(FormatError, match="unknown UnitModel field.*fmaa.*valid: name"):
        unit("a100", input="bf16", fmaa=4)


def test_model_with_contradicting_formats_is_refused() -> None:
    md = preset("a100", "bf16")
    with pytest.raises(FormatError, match="the model's input is bfloat16"):
        unit(md, input="fp16")
    assert unit(md, input="bf16").model == md


@pytest.mark.parametrize(("field", "value", "needle"), [
    ("fma", True, "fma must be a positive int"), ("fma", 2.5, "fma must be"),
    ("fma", -3, "fma must be"), ("align_bits", "1", "align_bits must be an int or None"),
    ("carry_bits", 1.0, "carry_bits must be"), ("normalize_bits", 1.5, "normalize_bits"),
    ("interleave", "yes", "interleave must be True or False"),
    ("subnormals_in", 1, "subnormals_in must be True or False"),
    ("rounding", ["nearest_even"], "rounding must be a string"),
    ("name", 5, "name and source must be strings"),
])
def test_model_fields_are_type_checked(field: str, value: object, needle: str) -> None:
    base = {"name": "x", "input": "bf16", "output": "fp32", "fma": 4}
    with pytest.raises(FormatError, match=needle):
        UnitModel(**{**base, field: value})


def test_model_accepts_numpy_ints_as_ints() -> None:
    md = UnitModel("x", "bf16", "fp32", fma=np.int64(4), align_bits=np.int32(1))
    assert type(md.fma) is int and type(md.align_bits) is int


# ---- round / encode / decode --------------------------------------------------------------

def test_rounding_refuses_complex_ragged_and_text() -> None:
    with pytest.raises(FormatError, match="floating-point input"):
        round(np.array([1 + 2j]), "bf16")
    with pytest.raises(ShapeError, match="rectangular"):
        round([[1.0, 2.0], [3.0]], "bf16")
    with pytest.raises(ShapeError, match="rectangular"):
        decode([[1, 2], [3]], "e4m3")
    with pytest.raises(FormatError, match="codes must be integers"):
        decode(np.array(["1"]), "e4m3")


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"rounding": ["nearest_even"]}, "rounding is named by a string"),
    ({"saturation": None}, "saturation is named by a string"),
    ({"rng": 3}, "apply to the stochastic roundings"),
    ({"stochastic_bits": 4}, "apply to the stochastic roundings"),
])
def test_rounding_parameters_are_checked(kwargs: dict, needle: str) -> None:
    with pytest.raises(FormatError, match=needle):
        round(np.ones(3), "bf16", **kwargs)
    with pytest.raises(FormatError, match=needle):
        encode(np.ones(3), "bf16", **kwargs)


# ---- validate-unit on junk files ----------------------------------------------------------

def test_binary_junk_file_is_a_file_format_error_naming_it(tmp_path) -> None:
    from thrifty.cli.fp_units import validate_unit

    (tmp_path / "a_X_bf16.txt").write_bytes(b"3f800000\n\xff\xfe\x00junk")
    (tmp_path / "b_X_bf16.txt").write_text("3f800000\n")
    (tmp_path / "c_X_fp32.txt").write_text("0" * 32 + "\n")
    (tmp_path / "d_X_fp32.txt").write_text("0" * 32 + "\n")
    with pytest.raises(FileFormatError, match=r"a_X_bf16\.txt, line 2: not a text file"):
        load_validation_set(tmp_path)
    res = CliRunner().invoke(validate_unit, ["--unit", "a100", "--data", str(tmp_path)])
    assert res.exit_code != 0 and "a_X_bf16.txt" in res.output
    assert not isinstance(res.exception, UnicodeDecodeError)


@pytest.mark.parametrize("word", ["-3f80", "3f_80", "0x3f", "+3f"])
def test_hex_words_follow_the_grammar(tmp_path, word: str) -> None:
    (tmp_path / "a_X_bf16.txt").write_text(f"{word}\n")
    (tmp_path / "b_X_bf16.txt").write_text("3f800000\n")
    (tmp_path / "c_X_fp32.txt").write_text("0" * 32 + "\n")
    (tmp_path / "d_X_fp32.txt").write_text("0" * 32 + "\n")
    with pytest.raises(FileFormatError, match="hexadecimal"):
        load_validation_set(tmp_path)


# ---- fp bound: huge k, JSON -----------------------------------------------------------------

@pytest.mark.parametrize("k", [0, -5, 2.5, True])
def test_bound_lengths_are_checked(k: object) -> None:
    with pytest.raises(SpecError, match="integer length k >= 1"):
        a_priori_bound(preset("h100", "bf16"), k)  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="integer length k >= 1"):
        gamma_bound(k)  # type: ignore[arg-type]


def test_huge_k_bound_is_a_closed_form_and_sound() -> None:
    model = preset("h100", "bf16")
    t = time.perf_counter()
    b = a_priori_bound(model, 10**12)
    assert time.perf_counter() - t < 5  # a closed form (the exact power never ends)
    assert math.isinf(b.relative) or b.relative > 0
    # just above the exact range: the closed form bounds the exact power from above,
    # and is close to it
    st = step_error_model(model)
    S = _EXACT_STEPS + 1
    exact = (1 + st.eps) ** S - 1
    got = a_priori_bound(model, S * model.fma)
    assert Fraction(got.relative) >= exact
    assert got.relative <= float(exact) * (1 + 1e-6)
    assert Fraction(got.absolute) >= S * st.eta * (1 + st.eps) ** S


def test_cli_bound_json_is_valid_json_for_huge_k() -> None:
    from thrifty.cli.fp_units import bound_cmd

    for k in ("256", str(10**12)):
        res = CliRunner().invoke(bound_cmd, ["--unit", "h100", "--input", "bf16", "--k", k,
                                             "--json"])
        assert res.exit_code == 0, res.output
        out = _strict_json(res.output)
        assert isinstance(out, dict)
        for b in out["bounds"]:
            assert b["value"] is None and b["magnitude"] is None  # no magnitude given
            assert isinstance(b["relative"], float) or b["relative"] == "inf"


def test_cli_formats_json_is_one_object_per_format() -> None:
    from thrifty.cli.fp_formats import formats

    res = CliRunner().invoke(formats, ["--json", "e4m3", "bf16", "e8m0"])
    assert res.exit_code == 0, res.output
    out = _strict_json(res.output)
    assert isinstance(out, dict)
    assert list(out) == ["float8_e4m3fn", "bfloat16", "float8_e8m0fnu"]
    assert out["bfloat16"]["bits"] == 16 and out["float8_e4m3fn"]["max"] == 448.0
    every = _strict_json(CliRunner().invoke(formats, ["--json"]).output)
    assert isinstance(every, dict) and len(every) > 40

