"""Rocq export: the generated file typechecks with coqc (when installed)."""

from __future__ import annotations

import shutil

import pytest

from thrifty.errors import FormatError
from thrifty.numerics.rocq import check_with_coqc, export_unit, format_section
from thrifty.numerics.units import preset

needs_coqc = pytest.mark.skipif(shutil.which("coqc") is None,
                                reason="coqc is not installed (apt-get install coq "
                                       "libcoq-flocq)")


@pytest.mark.parametrize(("name", "fin", "fout"), [("a100", "bf16", "fp32"),
                                                   ("ada", "e4m3", "fp32"),
                                                   ("cdna3", "bf16", "fp32")])
def test_export_states_format_model_and_bound(name, fin, fout) -> None:
    text = export_unit(preset(name, fin, fout), k=64)
    for needle in ("FLT_exp", "Definition step", "Fixpoint dot", "Lemma dot_a_priori_bound",
                   "_saturate", "bound_rel"):
        assert needle in text


@needs_coqc
@pytest.mark.parametrize(("name", "fin", "fout"), [("a100", "bf16", "fp32"),
                                                   ("ada", "e4m3", "fp32"),
                                                   ("cdna3", "bf16", "fp32")])
def test_coqc_accepts_the_exported_file(name, fin, fout) -> None:
    ok, messages = check_with_coqc(export_unit(preset(name, fin, fout), k=32))
    assert ok, messages


@needs_coqc
def test_coqc_rejects_an_ill_typed_statement() -> None:
    text = export_unit(preset("v100", "fp16", "fp32"), k=8) + "\nDefinition oops : R := true.\n"
    ok, messages = check_with_coqc(text)
    assert not ok and "expected to have type \"R\"" in messages


def test_e4m3_range_facts_follow_the_format() -> None:
    text = format_section("e4m3")
    assert "Float radix2 (7)%Z (6)%Z" in text  # max 448 = 7 * 2^6
    assert "float8_e4m3fn_has_inf : bool := false" in text


def test_integer_formats_are_refused() -> None:
    with pytest.raises(FormatError, match="sign-magnitude"):
        format_section("mx_int8")


@needs_coqc
def test_cli_export_rocq_checks_with_coqc(tmp_path) -> None:
    from click.testing import CliRunner

    from thrifty.cli.fp_units import export_rocq
    out = tmp_path / "h100.v"
    res = CliRunner().invoke(export_rocq, ["--unit", "h100", "--input", "e4m3", "--output",
                                           "fp16", "--k", "64", "-o", str(out), "--check"])
    assert res.exit_code == 0, res.output
    assert "Lemma dot_a_priori_bound" in out.read_text()
