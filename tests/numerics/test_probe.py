"""Feature tests recover every preset's parameters from an emulated black box."""

from __future__ import annotations

import numpy as np
import pytest

from thrifty.errors import FormatError
from thrifty.numerics.probe import (
    compare,
    emulated_black_box,
    probe,
    report,
    torch_black_box,
)
from thrifty.numerics.units import UnitModel, preset, unit

PAIRS = [("v100", "fp16", "fp32"), ("v100", "fp16", "fp16"), ("a100", "bf16", "fp32"),
         ("a100", "tf32", "fp32"), ("a100", "fp16", "fp16"), ("a2", "fp16", "fp32"),
         ("ada", "e4m3", "fp32"), ("ada", "e5m2", "fp16"), ("ada", "e4m3", "fp16"),
         ("l40s", "bf16", "fp32"), ("h100", "bf16", "fp32"), ("h100", "e4m3", "fp32"),
         ("h200", "e5m2", "fp16"), ("h200", "tf32", "fp32"), ("b200", "e4m3", "fp32"),
         ("b200", "fp16", "fp16"), ("cdna1", "fp16", "fp32"), ("cdna1", "bf16", "fp32"),
         ("cdna2", "bf16", "fp32"), ("cdna3", "bf16", "fp32"), ("cdna3", "e4m3fnuz", "fp32"),
         ("cdna3", "tf32", "fp32"), ("amx", "bf16", "fp32")]

CORE = {"fma", "rounding", "normalize_bits", "subnormals_in"}


@pytest.mark.parametrize(("name", "fin", "fout"), PAIRS)
def test_probe_recovers_preset_parameters(name: str, fin: str, fout: str) -> None:
    model = preset(name, fin, fout)
    result = probe(emulated_black_box(unit(model)), fin, fout)
    table = compare(result, model)
    assert CORE <= set(table)
    if model.align_bits is not None:
        assert {"align_bits", "shifted_out", "interleave", "c_in_alignment"} <= set(table)
    wrong = {k: v for k, v in table.items() if not v[2]}
    assert not wrong, wrong


CUSTOM = [
    UnitModel("sticky", "fp16", "fp32", fma=8, align_bits=3, shifted_out="sticky"),
    UnitModel("floor", "bf16", "fp32", fma=4, align_bits=1, shifted_out="round_down",
              rounding="nearest_even"),
    UnitModel("short", "bf16", "fp32", fma=4, align_bits=-2, rounding="nearest_even"),
    UnitModel("late", "fp16", "fp32", fma=16, align_bits=0, c_in_alignment=False),
    UnitModel("narrow", "bf16", "fp32", fma=8, align_bits=-6, normalize_bits=18),
    UnitModel("carry", "bf16", "fp32", fma=8, align_bits=1, carry_bits=0),
    UnitModel("ftz", "fp16", "fp16", fma=4, align_bits=1, subnormals_in=False,
              subnormals_out=False, rounding="nearest_even"),
]


@pytest.mark.parametrize("model", CUSTOM, ids=lambda m: m.name)
def test_probe_recovers_non_preset_behaviours(model: UnitModel) -> None:
    result = probe(emulated_black_box(unit(model)), model.input, model.output)
    table = compare(result, model)
    wrong = {k: v for k, v in table.items() if not v[2]}
    assert not wrong, wrong
    assert "carry_bits" in table
    assert ("rounding" in result.unobservable) == (model.name == "short")


def test_probe_notices_a_wrong_model() -> None:
    """Probing an A100 and comparing with the H100 preset reports disagreements."""
    result = probe(emulated_black_box(unit("a100", input="bf16")), "bf16", "fp32")
    table = compare(result, preset("h100", "bf16", "fp32"))
    assert not table["fma"][2] and not table["align_bits"][2]
    text = report(result, preset("h100", "bf16", "fp32"))
    assert "| fma | 16 | 8 | NO |" in text


def test_probe_refuses_formats_without_range() -> None:
    with pytest.raises(FormatError, match="span"):
        probe(lambda a, b, c: np.zeros(len(c)), "e2m1", "e2m1")


def test_torch_black_box_on_a_cuda_device() -> None:
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    if not torch.cuda.is_available():
        with pytest.raises(FormatError, match="CUDA device"):
            torch_black_box("bf16", "fp32")
        pytest.skip("no CUDA device here: checked the refusal only")
    result = probe(torch_black_box("bf16", "fp32"), "bf16", "fp32")
    assert result.params["fma"] is not None and result.calls > 5


def test_cli_probe_json_and_report(tmp_path) -> None:
    import json

    from click.testing import CliRunner

    from thrifty.cli.fp_units import probe_cmd
    md = tmp_path / "probe.md"
    res = CliRunner().invoke(probe_cmd, ["--unit", "v100", "--input", "fp16", "--output",
                                         "fp32", "--json", "--report", str(md)])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["params"]["fma"] == 4
    assert all(v["agree"] for v in out["comparison"].values())
    assert "| fma | 4 | 4 | yes |" in md.read_text()
    both = CliRunner().invoke(probe_cmd, ["--unit", "v100", "--device", "cuda"])
    assert both.exit_code != 0 and "exactly one" in both.output
