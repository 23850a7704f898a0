"""Error bounds: never violated on random and adversarial samples; refusals with reasons."""

from __future__ import annotations

import math
import zlib
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest

import thrifty as th
from thrifty.errors import FormatError, SpecError
from thrifty.numerics.bounds import (
    a_posteriori_bound,
    a_priori_bound,
    block_fma_bound,
    dot_magnitude,
    exact_dot,
    gamma_bound,
    probabilistic_bound,
    propagate_bounds,
    step_error_model,
)
from thrifty.numerics.units import UnitModel, preset, unit

DTYPES = {"binary16": np.float16, "bfloat16": ml_dtypes.bfloat16,
          "float8_e4m3fn": ml_dtypes.float8_e4m3fn, "float8_e5m2": ml_dtypes.float8_e5m2,
          "float8_e4m3fnuz": ml_dtypes.float8_e4m3fnuz, "tensorfloat32": None}


def to_format(x: np.ndarray, fmt: str) -> np.ndarray:
    if fmt == "tensorfloat32":
        bits = x.astype(np.float32).view(np.uint32) & np.uint32(0xFFFFE000)
        return bits.view(np.float32).astype(np.float64)
    with np.errstate(over="ignore"):
        v = x.astype(DTYPES[fmt]).astype(np.float64)
    return np.where(np.isfinite(v), v, 0.0)


def sample(model: UnitModel, n: int, k: int, seed: int) -> tuple[np.ndarray, ...]:
    """Random cases plus adversarial ones: a large addend and small products with all-ones
    significands, one sign (every truncation loses almost an ulp), and cancellation."""
    rng = np.random.default_rng(seed)
    fin = model.input
    a = to_format(rng.standard_normal((n, k)), fin)
    b = to_format(rng.standard_normal((n, k)), fin)
    c = rng.standard_normal(n)
    third = n // 3
    p = {"binary16": 11, "bfloat16": 8, "tensorfloat32": 11, "float8_e4m3fn": 4,
         "float8_e5m2": 3, "float8_e4m3fnuz": 4}[fin]
    ones = (2.0 - 2.0 ** (1 - p))
    spread = rng.integers(4, 15, (third, k))
    a[:third] = to_format(ones * np.exp2(-spread.astype(float)), fin)
    b[:third] = to_format(np.full((third, k), ones), fin)
    c[:third] = 256.0
    a[third:2 * third] = to_format(rng.standard_normal((third, k)), fin)
    b[third:2 * third, ::2] = 1.0
    b[third:2 * third, 1::2] = -1.0
    a[third:2 * third, 1::2] = a[third:2 * third, ::2]
    c[third:2 * third] = 2.0**-20
    c_dt = np.float16 if model.output == "binary16" else np.float32
    return a, b, c.astype(c_dt).astype(np.float64)


def errors_and_bounds(model: UnitModel, a, b, c):
    d = unit(model).dot(a, b, c)
    exact = np.array([float(exact_dot(a[i], b[i], c[i])) for i in range(len(c))])
    err = np.abs(d - exact)
    mu = dot_magnitude(model, a, b, c)
    bnd = a_priori_bound(model, a.shape[1])
    # exact -> float64 rounding adds at most 2^-53 |exact|
    limit = bnd.relative * mu + bnd.absolute - 2.0**-52 * np.abs(exact)
    return err, limit


CONFIGS = [("v100", "fp16", "fp32"), ("v100", "fp16", "fp16"), ("a100", "bf16", "fp32"),
           ("a100", "tf32", "fp32"), ("ada", "e4m3", "fp32"), ("ada", "e5m2", "fp16"),
           ("h100", "bf16", "fp32"), ("h100", "e4m3", "fp32"), ("b200", "fp16", "fp32"),
           ("cdna1", "fp16", "fp32"), ("cdna2", "bf16", "fp32"), ("cdna3", "bf16", "fp32"),
           ("cdna3", "e4m3fnuz", "fp32"), ("amx", "bf16", "fp32")]


@pytest.mark.parametrize(("name", "fin", "fout"), CONFIGS)
def test_a_priori_bound_never_violated_on_a_sample(name, fin, fout) -> None:
    model = preset(name, fin, fout)
    a, b, c = sample(model, 240, 64, seed=zlib.crc32(f"{name}-{fin}-{fout}".encode()))
    err, limit = errors_and_bounds(model, a, b, c)
    assert np.all(err <= limit), f"violated in {np.flatnonzero(err > limit)[:5]}"
    assert err.max() > 0  # the sample does make errors


@pytest.mark.parametrize(("name", "fin", "fout"), [("a100", "bf16", "fp32"),
                                                   ("ada", "e4m3", "fp32"),
                                                   ("cdna3", "bf16", "fp32"),
                                                   ("h100", "fp16", "fp16")])
def test_a_posteriori_bound_is_certified_and_tighter(name, fin, fout) -> None:
    model = preset(name, fin, fout)
    a, b, c = sample(model, 24, 40, seed=3)
    d = unit(model).dot(a, b, c)
    prior = a_priori_bound(model, 40)
    for i in range(len(c)):
        post = a_posteriori_bound(model, a[i], b[i], c[i])
        assert post.magnitude == d[i]
        err = abs(Fraction(d[i]) - exact_dot(a[i], b[i], c[i]))
        assert err <= Fraction(post.value)
        assert post.value <= prior.at(dot_magnitude(model, a[i], b[i], c[i])).value


def test_probabilistic_bound_refuses_biased_units_with_reason() -> None:
    with pytest.raises(FormatError, match="toward_zero: biased"):
        probabilistic_bound(preset("h100", "bf16", "fp32"), 128)
    with pytest.raises(FormatError, match="truncates aligned terms"):
        probabilistic_bound(preset("h100", "fp16", "fp16"), 128)


@pytest.mark.parametrize("name", ["cdna1", "amx"])
def test_probabilistic_bound_holds_and_is_below_worst_case(name) -> None:
    model = preset(name, "bf16", "fp32")
    a, b, c = sample(model, 120, 256, seed=5)
    pb = probabilistic_bound(model, 256)
    assert pb.relative < a_priori_bound(model, 256).relative
    d = unit(model).dot(a, b, c)
    exact = np.array([float(exact_dot(a[i], b[i], c[i])) for i in range(len(c))])
    mu = dot_magnitude(model, a, b, c)
    assert np.all(np.abs(d - exact) <= pb.relative * mu)


def test_model_bound_counts_truncations_not_gamma_n() -> None:
    """The a priori bound follows the window: wider windows give smaller bounds, and an
    exact unit's bound is the block-FMA one (one rounding per step)."""
    k = 256
    narrow = a_priori_bound(preset("v100", "fp16", "fp32"), k).relative
    wide = a_priori_bound(preset("h100", "fp16", "fp32"), k).relative
    assert wide < narrow
    exact = a_priori_bound(preset("cdna1", "fp16", "fp32"), k)
    bfma = block_fma_bound(k, 4, "fp32")
    assert exact.relative == pytest.approx(bfma.relative, rel=1e-3)
    assert gamma_bound(k).relative > bfma.relative
    assert step_error_model(preset("a100", "bf16", "fp32")).truncated_terms == 8


def test_lost_carries_have_no_finite_bound() -> None:
    model = UnitModel("tiny", "bf16", "fp32", fma=8, align_bits=0, carry_bits=1)
    with pytest.raises(FormatError, match="carry bits cannot hold"):
        a_priori_bound(model, 8)


def test_classical_bounds_can_fail_on_truncating_units() -> None:
    """Block-FMA's exact-accumulation assumption does not hold on V100: the adversarial
    sample exceeds it, while the model's own bound holds."""
    model = preset("v100", "fp16", "fp32")
    a, b, c = sample(model, 90, 64, seed=11)
    err, limit = errors_and_bounds(model, a, b, c)
    mu = dot_magnitude(model, a, b, c)
    bfma = block_fma_bound(64, 4, "fp32", "toward_zero").relative
    assert np.any(err > bfma * mu)
    assert np.all(err <= limit)


def test_bad_k_is_refused() -> None:
    with pytest.raises(SpecError, match="k >= 1"):
        a_priori_bound(preset("a100", "bf16", "fp32"), 0)


# ---- propagation through a Graph ----------------------------------------------------

def test_propagated_bounds_hold_for_an_emulated_two_layer_program() -> None:
    rng = np.random.default_rng(2)

    @th.program
    def gcn(A, X, W):
        return th.relu(A @ (X @ W))

    A, X, W = rng.random((6, 24)), rng.standard_normal((24, 16)), rng.standard_normal((16, 5))
    g = gcn.trace(A=A, X=X, W=W)
    u = unit("h100", input="bf16", output="fp32")
    formats = {"A": "bf16", "X": "bf16", "W": "bf16"}
    for node in g:
        if node.op in ("matmul", "relu"):
            formats[node.id] = "fp32"
    facts = propagate_bounds(g, formats, u, ranges={"A": 1.0, "X": float(np.abs(X).max()),
                                                    "W": float(np.abs(W).max())})
    bf = ml_dtypes.bfloat16
    Ab, Xb, Wb = (x.astype(bf).astype(np.float64) for x in (A, X, W))
    T = u.matmul(Xb, Wb)
    Y = np.maximum(u.matmul(Ab, T.astype(bf).astype(np.float64)), 0)
    exact = np.maximum(A @ (X @ W), 0)
    out = facts[g.outputs[0]]
    assert np.abs(Y - exact).max() <= out.value
    assert np.abs(exact).max() <= out.magnitude
    assert out.value < 0.1 * out.magnitude  # and it says something


def test_propagation_refuses_unsound_ops_and_missing_ranges() -> None:
    @th.program
    def f(x, y):
        return th.exp(x) + x * y

    g = f.trace(x=((3,), "float32"), y=((3,), "float32"))
    with pytest.raises(SpecError, match=r"ranges .* inputs \['y'\]"):
        propagate_bounds(g, {}, None, ranges={"x": 1.0})
    facts = propagate_bounds(g, {"x": "bf16", "y": "bf16"}, None, ranges={"x": 1.0, "y": 2.0})
    out = facts[g.outputs[0]]
    assert math.isfinite(out.value) and out.magnitude == pytest.approx(math.e + 2.0)


def test_cli_bound_json_lists_bounds_and_refusal() -> None:
    import json

    from click.testing import CliRunner

    from thrifty.cli.fp_units import bound_cmd
    res = CliRunner().invoke(bound_cmd, ["--unit", "h100", "--input", "bf16", "--k", "256",
                                         "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert [b["kind"] for b in out["bounds"]] == ["a_priori", "gamma", "block_fma"]
    assert "biased" in out["probabilistic_refused"]
    amx = json.loads(CliRunner().invoke(bound_cmd, ["--unit", "amx", "--json"]).output)
    assert amx["probabilistic_refused"] is None and len(amx["bounds"]) == 4
