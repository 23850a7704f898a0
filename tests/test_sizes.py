"""One reading of byte sizes and budgets in the library, ``memory plan`` and the demo."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from thrifty.cli.main import main
from thrifty.errors import PlanError
from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
from thrifty.graph.taskgraph_io import save_taskgraph
from thrifty.memory import simulate
from thrifty.memory.budget import best_order, plan
from thrifty.sizes import bytes_unit, format_bytes, is_fraction, parse_budget, parse_bytes


@pytest.mark.parametrize(("text", "expected"), [
    ("1kB", 1000), ("1KB", 1000), ("1kb", 1000), ("2MB", 2 * 10**6), ("3GB", 3 * 10**9),
    ("1TB", 10**12), ("1PB", 10**15), ("1KiB", 1024), ("1kib", 1024), ("2MiB", 2 * 2**20),
    ("3GiB", 3 * 2**30), ("1TiB", 2**40), ("1PiB", 2**50), ("7B", 7), ("1.5kB", 1500),
    ("1.5 KiB", 1536), ("123456", 123456), ("  64 MiB ", 64 * 2**20), (4096, 4096),
    (1e9, 10**9),
])
def test_sizes_follow_si_and_iec(text, expected):
    assert parse_bytes(text) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("1m", "ambiguous"), ("1M", "ambiguous"), ("2g", "ambiguous"), ("3k", "ambiguous"),
    ("1Mi", "ambiguous"), ("1e400", "2\\*\\*63"), ("1e400GB", "2\\*\\*63"),
    ("99999999999999999999", "2\\*\\*63"), ("12 parsecs", "unknown unit"), ("lots", "understood"),
    ("-5", "understood"), ("1.5", "whole"), (float("inf"), "2\\*\\*63"), (-1, "2\\*\\*63"),
    (True, "not a number"), (None, "not a number"),
])
def test_bad_sizes_say_what_is_valid(text, message):
    with pytest.raises(PlanError, match=message):
        parse_bytes(text)


@pytest.mark.parametrize(("value", "fraction"), [
    ("0.7", True), ("1.0", True), (0.5, True), (1.0, True), ("1e-1", True), ("1.", True),
    ("1", False), (1, False), ("0", False), (0, False), ("2", False), (2, False),
    ("64MiB", False), ("0.5GB", False), (True, False), (0.0, False), ("0.0", False),
])
def test_a_plain_number_in_zero_to_one_is_a_fraction(value, fraction):
    assert is_fraction(value) is fraction


def test_budgets_apply_one_rule():
    assert parse_budget("0.7", peak=1000) == parse_budget(0.7, peak=1000) == 700
    assert parse_budget("1.0", peak=1000) == parse_budget(1.0, peak=1000) == 1000
    assert parse_budget("1", peak=1000) == parse_budget(1, peak=1000) == 1  # integers: bytes
    assert parse_budget("1000", peak=7) == parse_budget(1000, peak=7) == 1000
    assert parse_budget("2kB", peak=7) == 2000
    for plain in ("1.5", 1.5, "2.25"):  # neither a fraction nor whole bytes: never 1 byte
        with pytest.raises(PlanError, match="fraction of the best schedule's peak when in"):
            parse_budget(plain, peak=1000)


def _graph() -> TaskGraph:
    return TaskGraph([Task("a", writes=("x",), time=1.0),
                      Task("b", reads=("x",), writes=("y",), time=1.0),
                      Task("c", reads=("y",), writes=("z",), time=1.0),
                      Task("d", reads=("x", "z"), writes=("w",), time=1.0)],
                     [Buffer("x", 40, "a"), Buffer("y", 40, "b"), Buffer("z", 40, "c"),
                      Buffer("w", 4, "d")])


def test_plan_takes_a_fraction_of_the_best_schedule_peak():
    g = _graph()
    peak = simulate(g, best_order(g, 1.0)).peak
    p = plan(g, 0.9, offload_bandwidth=1e3, time_limit=1.0)
    assert p.budget == int(0.9 * peak) < peak
    assert simulate(g, p, offload_bandwidth=1e3).peak <= p.budget
    assert plan(g, 1.0, time_limit=1.0).budget == peak


def test_memory_plan_cli_reads_budgets_like_the_library(tmp_path):
    g = _graph()
    path = tmp_path / "g.json"
    save_taskgraph(g, path)
    peak = simulate(g, best_order(g, 1.0)).peak
    for budget, expected in (("0.9", int(0.9 * peak)), ("1.0", peak), (str(peak), peak)):
        r = CliRunner().invoke(main, ["memory", "plan", str(path), "--budget", budget,
                                      "--offload-bandwidth", "1000", "--json"])
        assert r.exit_code == 0, r.output
        assert json.loads(r.output)["budget"] == expected
    r = CliRunner().invoke(main, ["memory", "plan", str(path), "--budget", "200",
                                  "--bandwidth", "1000", "--json"])  # the deprecated alias
    assert r.exit_code == 0, r.output
    for bad in ("1.5", "1e400", "5m"):
        r = CliRunner().invoke(main, ["memory", "plan", str(path), "--budget", bad])
        lines = [x for x in r.output.splitlines() if x.strip()]
        assert r.exit_code == 1 and len(lines) == 1 and lines[0].startswith("Error: "), r.output


def test_byte_units_for_axes_and_messages():
    assert bytes_unit(3e9) == (10**9, "GB") and bytes_unit(5e5) == (1000, "kB")
    assert bytes_unit(3 * 2**30, binary=True) == (2**30, "GiB") and bytes_unit(12) == (1, "B")
    assert format_bytes(1.5e10) == "15 GB" and format_bytes(2.5 * 2**20, True) == "2.5 MiB"
