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


def test_demo_json_small():
    r = CliRunner().invoke(main, ["demo", "--scale", "7", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["graph"]["rows"] == 128 and data["graph"]["nnz"] > 0
    assert data["reference"]["output_shape"] == [128, 32]


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
