"""benchmarks/torch_grad_diff.py: the figures the README quotes on where compiled gradients
differ from eager's come from its ``worst`` and its comparisons; checked here on the CPU,
where every variant is bitwise equal to eager."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import torch_grad_diff as gd  # noqa: E402


def test_worst_names_the_parameter_and_its_relative_difference() -> None:
    ref = {"a": torch.tensor([1.0, -4.0]), "b": torch.tensor([0.5, 0.25])}
    got = {"a": torch.tensor([1.0, -3.0]), "b": torch.tensor([0.5, 0.25])}
    w = gd.worst(got, ref)
    assert (w["param"], w["rel"], w["abs"], w["ref_max"]) == ("a", 0.25, 1.0, 4.0)
    assert (w["n_differ"], w["n_params"]) == (1, 2)
    assert gd.worst(ref, ref)["rel"] == 0.0


def test_cpu_run_every_variant_bitwise(tmp_path, monkeypatch) -> None:
    out = tmp_path / "diff.json"
    monkeypatch.setattr(sys, "argv", ["torch_grad_diff.py", "--model", "attention6",
                                      "--device", "cpu", "--variants", "eager_again",
                                      "aot_eager", "thrifty@0.3", "--out", str(out)])
    gd.main()
    res = json.loads(out.read_text())
    rows = res["variants"]
    assert set(rows) == {"eager_again", "aot_eager", "thrifty@0.3"}
    assert all(r["equal"] and r["vs_eager"]["rel"] == 0.0 for r in rows.values())
    assert rows["thrifty@0.3"]["equal_aot_eager"] is True
    assert 0.0 < res["eager_vs_float64"]["rel"] < 1e-3
