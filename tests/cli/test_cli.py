"""The command line: help, info, demo (through click's runner and as a real subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys

from click.testing import CliRunner

from thrifty.cli.main import main


def test_help_lists_engine_groups():
    r = CliRunner().invoke(main, ["--help"])
    assert r.exit_code == 0
    for cmd in ("demo", "info", "sparse", "memory", "fp"):
        assert cmd in r.output


def test_info_json_reports_versions_and_blas():
    r = CliRunner().invoke(main, ["info", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["versions"]["numpy"] and data["cpu_count"] >= 1
    assert isinstance(data["threadpools"], list)


def test_demo_json_small(tmp_path):
    r = CliRunner().invoke(main, ["demo", "--scale", "8", "--json", "--plot", str(tmp_path)])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["graph"]["vertices"] == 256 and data["graph"]["nnz"] > 0
    for spec in ("gcn", "attention"):
        assert data[spec]["max_relative_difference"] < 1e-10
        names = data[spec]["patterns"]  # inputs by name, the rest as op_id
        assert all(k[0].isalpha() and " " not in k and "%" not in k for k in names), names
        assert {"X"} <= names.keys() and any(k.startswith("matmul_") for k in names)
        assert data[spec]["executed_flops"] < data[spec]["dense_flops"]
    mem = data["memory"]
    for run in (mem["main"], mem["tight"]):
        assert run["measured_peak"] <= run["planned_peak"] <= run["budget"]
        assert run["max_relative_difference"] == 0.0
    assert mem["lower_bound"] <= mem["best_schedule_peak"] <= mem["eager_schedule_peak"]
    num = data["numerics"]
    assert num["observed_max_error"] <= num["certified_bound"] <= num["bound"]
    # the GCN's own specialized kernels ran on the unit: two gemms and two sparse products
    assert num["kernels_on_unit"]["gemm"] == 2
    assert sum(v for k, v in num["kernels_on_unit"].items() if k != "gemm") >= 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["errors.png", "memory.png",
                                                          "memory_tight.png", "patterns.png"]
    assert mem["offload_to"] == "host memory"
    assert mem["tight"]["offload_files"] == 0


def test_demo_offloads_to_files_in_the_given_directory(tmp_path):
    off = tmp_path / "offload"
    r = CliRunner().invoke(main, ["demo", "--scale", "8", "--json", "--offload-dir", str(off)])
    assert r.exit_code == 0, r.output
    mem = json.loads(r.output)["memory"]
    assert mem["offload_to"] == str(off)
    assert mem["tight"]["offloads"] > 0
    # every offload went to a file there, each removed once prefetched or at the end
    assert mem["tight"]["offload_files"] == mem["tight"]["offloads"]
    assert off.is_dir() and not any(off.iterdir())
    for run in (mem["main"], mem["tight"]):
        assert run["measured_peak"] <= run["planned_peak"] <= run["budget"]
        assert run["max_relative_difference"] == 0.0


def test_demo_infeasible_budget_names_the_smallest():
    r = CliRunner().invoke(main, ["demo", "--scale", "7", "--budget", "0.01"])
    assert r.exit_code == 1 and "smallest feasible budget" in r.output


def test_demo_rejects_non_square_matrix(tmp_path):
    p = tmp_path / "rect.mtx"
    p.write_text("%%MatrixMarket matrix coordinate real general\n2 3 1\n1 1 1.0\n")
    r = CliRunner().invoke(main, ["demo", "--matrix", str(p)])
    assert r.exit_code != 0 and "square" in r.output


def test_demo_missing_matrix_file_is_a_clear_error():
    r = CliRunner().invoke(main, ["demo", "--matrix", "/nonexistent/m.mtx"])
    assert r.exit_code == 2 and "does not exist" in r.output


def test_console_script_runs():
    out = subprocess.run([sys.executable, "-m", "thrifty.cli", "--help"], capture_output=True,
                         text=True, check=True)
    assert "thrifty" in out.stdout


def test_demo_on_a_local_cluster_gives_the_same_figures():
    r = CliRunner().invoke(main, ["demo", "--scale", "8", "--local-cluster", "2", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output[r.output.index("{"):])
    assert data["scheduler"].startswith("dask.distributed at tcp://")
    assert data["gcn"]["max_relative_difference"] < 1e-10
    assert data["attention"]["max_relative_difference"] < 1e-10
    tight = data["memory"]["tight"]
    assert tight["max_relative_difference"] == 0.0
    assert tight["measured_peak"] <= tight["planned_peak"] <= tight["budget"]


def test_demo_unreachable_scheduler_fails_fast():
    import time

    t0 = time.perf_counter()
    r = CliRunner().invoke(main, ["demo", "--scheduler", "tcp://127.0.0.1:9"])
    assert r.exit_code == 1 and "could not reach the Dask scheduler" in r.output
    assert time.perf_counter() - t0 < 30  # a clear error, not a hang


def test_demo_rejects_scheduler_and_local_cluster_together():
    r = CliRunner().invoke(main, ["demo", "--scheduler", "tcp://127.0.0.1:9",
                                  "--local-cluster", "2"])
    assert r.exit_code == 1 and "not both" in r.output


def test_demo_malformed_matrix_names_the_file_and_line(tmp_path):
    p = tmp_path / "bad.mtx"
    p.write_text("%%MatrixMarket matrix coordinate real general\n3 3 2\n1 1 1.0\n9 x 2.0\n")
    r = CliRunner().invoke(main, ["demo", "--matrix", str(p)])
    assert r.exit_code == 1 and "bad.mtx" in r.output and "line" in r.output


def test_demo_on_a_real_matrix_file():
    from thrifty.testing import require_shared_data

    path = require_shared_data("matrices", "Newman", "dolphins.mtx")
    r = CliRunner().invoke(main, ["demo", "--matrix", str(path), "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["graph"]["vertices"] == 62
    assert data["numerics"]["observed_max_error"] <= data["numerics"]["certified_bound"]


def test_every_command_error_is_one_error_line_never_a_traceback(tmp_path):
    bad = tmp_path / "bad.mtx"
    bad.write_text("%%MatrixMarket matrix coordinate real general\n2 2 1\n1 1 1,5\n")
    zipped = tmp_path / "bad.mtx.gz"
    zipped.write_bytes(b"\x1f\x8b\x08\x00" + b"\x00" * 12)
    for args in (["sparse", "run", "--kernel", "spmv", "--matrix", str(bad)],
                 ["sparse", "run", "--kernel", "spmv", "--matrix", str(zipped)]):
        r = CliRunner().invoke(main, args)
        lines = [x for x in r.output.splitlines() if x.strip()]
        assert r.exit_code == 1 and len(lines) == 1, r.output
        assert lines[0].startswith(f"Error: {args[-1]}"), r.output


def test_python_dash_m_thrifty_runs_the_cli():
    r = subprocess.run([sys.executable, "-m", "thrifty", "--help"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "Usage: thrifty" in r.stdout and "memory" in r.stdout
