"""Rocq export: the proof library compiles with no Admitted, the exported instances prove
thrifty's a priori bounds (coqc, when installed), and the statement-only exports say so."""

from __future__ import annotations

import re
import shutil
import tomllib
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from thrifty.errors import FormatError
from thrifty.numerics.bounds import a_priori_bound, dot_magnitude
from thrifty.numerics.formats import get_format
from thrifty.numerics.rocq import (
    LIBRARY,
    STANDARD_AXIOMS,
    admitted_count,
    assumptions,
    check_with_coqc,
    compile_library,
    export_unit,
    format_section,
    library_dir,
    proof_gap,
    write_library,
)
from thrifty.numerics.units import preset

needs_coqc = pytest.mark.skipif(shutil.which("coqc") is None,
                                reason="coqc is not installed (apt-get install coq "
                                       "libcoq-flocq); the proofs are not checked here")

ROOT = Path(__file__).resolve().parents[2]


def _q(text: str, name: str) -> Fraction:
    m = re.search(rf"Definition {name} : R := Q2R \((\d+) # (\d+)\)\.", text)
    assert m, name
    return Fraction(int(m.group(1)), int(m.group(2)))


@pytest.mark.parametrize(("name", "fin", "fout", "k"), [("h100", "bf16", "fp32", 1024),
                                                        ("ada", "e4m3", "fp16", 100),
                                                        ("v100", "fp16", "fp16", 7)])
def test_proved_export_states_pythons_bound(name, fin, fout, k) -> None:
    model = preset(name, fin, fout)
    assert proof_gap(model) is None
    text = export_unit(model, k=k)
    bnd = a_priori_bound(model, k)
    assert _q(text, "bound_rel") == Fraction(bnd.relative)
    assert _q(text, "bound_abs") == Fraction(bnd.absolute)
    assert f"Definition steps : nat := {-(-k // model.fma)}." in text
    assert "Theorem dot_a_priori_bound" in text and "Theorem matmul_a_priori_bound" in text
    assert admitted_count(text) == 0 and "Admitted: 0." in text


@pytest.mark.parametrize(("name", "fin", "fout", "instruction"), [
    ("h100", "e4m3", "fp32", "wgmma"), ("b200", "fp4_e2m1", "fp16", "tcgen05.mma"),
    ("cdna1", "fp16", "fp32", None), ("cdna2", "bf16", "fp32", None),
    ("l40s", "e5m2", "fp32", None), ("a2", "tf32", "fp32", None)])
def test_presets_the_library_models(name, fin, fout, instruction) -> None:
    model = preset(name, fin, fout, instruction=instruction)
    assert proof_gap(model) is None
    text = export_unit(model, k=48)
    assert admitted_count(text) == 0 and "Theorem matmul_a_priori_bound" in text


def test_statement_only_export_counts_its_admitted() -> None:
    model = preset("cdna3", "bf16", "fp32")
    assert "c added after the products" in (proof_gap(model) or "")
    text = export_unit(model, k=32)
    n = admitted_count(text)
    assert n == text.count("Admitted.") == 1
    assert f"Admitted: {n}. statements only" in text


def test_units_outside_both_exports_are_refused() -> None:
    model = preset("h100", "e4m3", "fp16")  # interleaved pairs, c added last
    assert "interleaved halves" in (proof_gap(model) or "")
    with pytest.raises(FormatError, match="pairs halves"):
        export_unit(model, k=64)


def test_admitted_count_ignores_comments() -> None:
    text = ("(* Admitted. admit *)\nLemma a : True.\nAdmitted.\nLemma b : True.\n"
            "Proof. admit. Qed.\nAxiom c : False.\n")
    assert admitted_count(text) == 3
    assert admitted_count("Lemma a : True. Proof. exact I. Qed.") == 0


def test_e4m3_range_facts_follow_the_format() -> None:
    text = format_section("e4m3")
    assert "max_finite float8_e4m3fn_fmt (7)%Z (6)%Z" in text  # max 448 = 7 * 2^6
    assert "float8_e4m3fn_has_inf : bool := false" in text
    f = get_format("e4m3")
    assert f"Fmt ({f.emin - f.precision + 1}) {f.precision} eq_refl" in text
    assert admitted_count(text) == 0


def test_integer_formats_are_refused() -> None:
    with pytest.raises(FormatError, match="sign-magnitude"):
        format_section("mx_int8")


def test_library_is_package_data(tmp_path) -> None:
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = conf["tool"]["setuptools"]["package-data"]["thrifty"]
    assert "numerics/rocq/*.v" in patterns
    files = write_library(tmp_path)
    assert [p.stem for p in files] == list(LIBRARY)
    for p in files:
        text = p.read_text()
        assert text == (library_dir() / p.name).read_text()
        assert admitted_count(text) == 0, p.name


def test_dot_magnitude_is_never_below_the_exact_magnitude() -> None:
    from thrifty.numerics.rounding import round as fround
    rng = np.random.default_rng(7)
    model = preset("h100", "bf16", "fp32")
    fin = get_format(model.input)
    tiny = Fraction(2) ** fin.emin
    for k in (1, 17, 2000):
        a = np.asarray(fround(rng.standard_normal(k) * 2.0 ** rng.integers(-140, 20, k), fin),
                       float)
        b = np.asarray(fround(rng.standard_normal(k) * 3.0, fin), float)
        c = float(rng.standard_normal())
        exact = abs(Fraction(c)) + sum(
            (max(abs(Fraction(x)), tiny) if x else Fraction(0))
            * (max(abs(Fraction(y)), tiny) if y else Fraction(0)) for x, y in zip(a, b))
        assert Fraction(float(dot_magnitude(model, a, b, c))) >= exact


@needs_coqc
def test_library_compiles_without_admitted() -> None:
    d = compile_library()
    for name in LIBRARY:
        assert (d / f"{name}.vo").exists()
        assert admitted_count((d / f"{name}.v").read_text()) == 0


@needs_coqc
@pytest.mark.parametrize(("name", "fin", "fout", "k"), [("h100", "bf16", "fp32", 1024),
                                                        ("h100", "e5m2", "fp32", 100),
                                                        ("amx", "bf16", "fp32", 64)])
def test_coqc_proves_the_exported_bound(name, fin, fout, k) -> None:
    # h100 e5m2 through wgmma: a normaliser, zero terms at e_zero, fma + 1 lossy terms;
    # amx: exact sums, rounding to nearest, results flushed to zero
    model = preset(name, fin, fout, instruction="wgmma" if fin == "e5m2" else None)
    text = export_unit(model, k=k)
    ok, messages = check_with_coqc(text)
    assert ok, messages
    found = assumptions(messages)
    assert len(found) == 2  # dot_a_priori_bound, matmul_a_priori_bound
    for axioms in found:
        assert axioms <= STANDARD_AXIOMS, axioms


@needs_coqc
def test_coqc_refuses_a_bound_below_the_proved_one() -> None:
    text = export_unit(preset("h100", "bf16", "fp32"), k=1024)
    rel = _q(text, "bound_rel")
    smaller = rel * Fraction(999, 1000)
    text = text.replace(f"Q2R ({rel.numerator} # {rel.denominator})",
                        f"Q2R ({smaller.numerator} # {smaller.denominator})")
    ok, _ = check_with_coqc(text)
    assert not ok


@needs_coqc
def test_coqc_checks_the_statement_only_export() -> None:
    text = export_unit(preset("cdna3", "bf16", "fp32"), k=32)
    ok, messages = check_with_coqc(text)
    assert ok, messages
    ok, messages = check_with_coqc(text + "\nDefinition oops : R := true.\n")
    assert not ok and "expected to have type \"R\"" in messages


@needs_coqc
def test_cli_export_rocq_checks_with_coqc(tmp_path) -> None:
    from click.testing import CliRunner

    from thrifty.cli.fp_units import export_rocq
    out, lib = tmp_path / "v100.v", tmp_path / "lib"
    res = CliRunner().invoke(export_rocq, ["--unit", "v100", "--input", "fp16", "--output",
                                           "fp16", "--k", "64", "-o", str(out), "--library",
                                           str(lib), "--check"])
    assert res.exit_code == 0, res.output
    assert "Admitted: 0" in res.output and "Classical_Prop.classic" in res.output
    assert "Theorem matmul_a_priori_bound" in out.read_text()
    assert sorted(p.stem for p in lib.glob("*.v")) == sorted(LIBRARY)
