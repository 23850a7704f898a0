"""``thrifty sparse run`` and ``thrifty sparse bench`` through click's test runner."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from thrifty.cli.sparse import group
from thrifty.testing import require_shared_data


@pytest.mark.needs_data
@pytest.mark.parametrize("kernel", ["spmv", "spmm", "sddmm", "masked-spgemm", "gcn",
                                    "attention"])
def test_run_json_reports_time_kernels_and_scipy(kernel):
    path = require_shared_data("matrices", "Newman", "karate.mtx")
    res = CliRunner().invoke(group, ["run", "--kernel", kernel, "--matrix", str(path),
                                     "--k", "8", "--repeat", "2", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["kernel"] == kernel and out["nnz"] == 156 and out["seconds"] > 0
    assert out["kernels"] and out["comparison_seconds"]


@pytest.mark.needs_data
def test_run_table_and_rectangular_refusal():
    path = require_shared_data("matrices", "HB", "ash219.mtx")
    res = CliRunner().invoke(group, ["run", "--kernel", "spmm", "--matrix", str(path),
                                     "--k", "4", "--repeat", "1"])
    assert res.exit_code == 0, res.output
    assert "thrifty" in res.output and "scipy" in res.output
    res = CliRunner().invoke(group, ["run", "--kernel", "gcn", "--matrix", str(path)])
    assert res.exit_code != 0 and "square" in res.output


def test_bench_runs_the_benchmark_script_and_writes_json(tmp_path):
    out = tmp_path / "bench.json"
    res = CliRunner().invoke(group, ["bench", "--kernel", "spmv", "--kernel", "spmm",
                                     "--k", "3", "--instance", "poisson2d-12", "--repeat",
                                     "3", "--out", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert data["machine"]["cpu_count"] >= 1 and data["threads"]["numba"] >= 1
    assert [(r["kernel"], r["k"]) for r in data["rows"]] == [("spmv", 1), ("spmm", 3)]
    for r in data["rows"]:
        assert r["thrifty_s"] > 0 and r["peers_s"]["scipy"] > 0
        assert r["wrong_peers"] == []  # every peer computed the plan's result
        assert 0 < r["bw_share"]["thrifty"] and r["bytes"] > 0
    assert data["summary"]["spmm-k3"]["gmean_vs_scipy"] is not None


def test_run_takes_the_scheduler_vocabulary_and_refuses_other_names():
    path = require_shared_data("matrices", "Newman", "karate.mtx")
    for sched in ("sync", "threads", "auto"):
        res = CliRunner().invoke(group, ["run", "--kernel", "spmv", "--matrix", str(path),
                                         "--repeat", "1", "--scheduler", sched, "--json"])
        assert res.exit_code == 0, res.output
        assert json.loads(res.output)["kernel"] == "spmv"
    res = CliRunner().invoke(group, ["run", "--kernel", "spmv", "--matrix", str(path),
                                     "--scheduler", "gpu"])
    assert res.exit_code == 2 and "unknown scheduler 'gpu'" in res.output
    assert "'sync', 'threads'" in res.output
