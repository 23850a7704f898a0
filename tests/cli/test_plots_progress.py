"""--plot figures (spy plot, schedule timeline in SI units), log-spaced error bins, and
progress shown only on a terminal."""

from __future__ import annotations

import io
import sys

import numpy as np
from click.testing import CliRunner

from thrifty.cli.common import log_bins, progress
from thrifty.cli.main import main
from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
from thrifty.graph.taskgraph_io import save_taskgraph
from thrifty.memory.plot import plot_plan

_PNG = b"\x89PNG\r\n\x1a\n"


def _graph(size: int) -> TaskGraph:
    return TaskGraph([Task("a", writes=("x",), time=1.0),
                      Task("b", reads=("x",), writes=("y",), time=2.0),
                      Task("c", reads=("x", "y"), writes=("z",), time=1.0)],
                     [Buffer("x", size, "a"), Buffer("y", 2 * size, "b"),
                      Buffer("z", size, "c")])


def test_memory_schedule_plot_draws_the_timeline(tmp_path):
    path = tmp_path / "g.json"
    save_taskgraph(_graph(3 * 10**9), path)
    out = tmp_path / "timeline.png"
    r = CliRunner().invoke(main, ["memory", "schedule", str(path), "--plot", str(out), "--json"])
    assert r.exit_code == 0, r.output
    assert out.read_bytes().startswith(_PNG)


def test_timelines_are_drawn_in_si_units_not_multiples_of_1e10():
    import matplotlib.pyplot as plt

    for size, unit, top in ((3 * 10**9, "GB", 12), (4 * 10**6, "MB", 16), (200, "B", 800)):
        fig = plot_plan(_graph(size), ["a", "b", "c"])
        ax = fig.axes[0]
        assert ax.get_ylabel() == f"memory ({unit})"
        peak = max(max(line.get_ydata()) for line in ax.get_lines())
        assert peak == top  # x + y + z resident while c runs: 4 sizes
        assert ax.yaxis.get_offset_text().get_text() == ""
        plt.close(fig)


def test_sparse_run_plot_is_a_spy_plot(tmp_path):
    m = tmp_path / "m.mtx"
    m.write_text("%%MatrixMarket matrix coordinate real general\n3 3 3\n1 1 1\n2 2 2\n3 1 4\n")
    out = tmp_path / "spy.png"
    r = CliRunner().invoke(main, ["sparse", "run", "--kernel", "spmv", "--matrix", str(m),
                                  "--repeat", "1", "--json", "--plot", str(out)])
    assert r.exit_code == 0, r.output
    assert out.read_bytes().startswith(_PNG)


def test_log_bins_are_evenly_spaced_on_a_log_axis():
    errors = np.array([1e-12, 3e-9, 0.0, 2e-4, np.nan, 5e-3])
    edges = log_bins(errors, bins=30)
    assert len(edges) == 31 and np.isclose(edges[0], 1e-12) and np.isclose(edges[-1], 5e-3)
    ratios = edges[1:] / edges[:-1]
    assert np.allclose(ratios, ratios[0])
    assert np.histogram(errors[np.isfinite(errors) & (errors > 0)], edges)[0].sum() == 4


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_shows_on_a_terminal_only(monkeypatch):
    tty = _Terminal()
    monkeypatch.setattr(sys, "stderr", tty)
    with progress("planning 12 tasks") as say:
        say("still planning")
    assert "planning" in tty.getvalue()
    pipe = io.StringIO()
    monkeypatch.setattr(sys, "stderr", pipe)
    with progress("planning 12 tasks") as say:
        say("still planning")
    assert pipe.getvalue() == ""


def test_fp_bound_plot_histograms_observed_errors_below_the_bound(tmp_path):
    from thrifty.cli.fp_plot import error_histogram
    from thrifty.numerics.bounds import a_priori_bound
    from thrifty.numerics.units import preset

    model = preset("h100", "bf16", "fp32")
    bound = a_priori_bound(model, 64)
    out = tmp_path / "err.png"
    seen = error_histogram(model, 64, [bound], str(out), samples=300)
    assert 0 < seen["max_observed_relative"] <= bound.relative
    assert out.read_bytes().startswith(_PNG)
    r = CliRunner().invoke(main, ["fp", "bound", "--unit", "h100", "--k", "32", "--plot",
                                  str(tmp_path / "cli.png"), "--json"])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "cli.png").read_bytes().startswith(_PNG)
    r = CliRunner().invoke(main, ["fp", "bound", "--unit", "h100", "--k", str(1 << 20),
                                  "--plot", str(tmp_path / "big.png")])
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert r.exit_code == 1 and len(lines) == 1 and "k <=" in lines[0], r.output
