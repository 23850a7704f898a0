"""``thrifty memory schedule FILE``: the least-peak order of a task graph file.

``--json`` prints exactly ``{"peak": int, "optimal": bool, "lower_bound": int, "order":
[ids]}`` (a stable format other tools read); otherwise a rich table with the peak of every
baseline beside ours.

Example
-------
``thrifty memory schedule ../shared/data/graphs/checkmate/vgg16_train.json --json``
"""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.table import Table

from thrifty.errors import ThriftyError
from thrifty.memory.schedule import METHODS
from thrifty.memory.schedule import schedule as schedule_graph


@click.command("schedule")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--json", "as_json", is_flag=True,
              help='Print {"peak", "optimal", "lower_bound", "order"} as JSON.')
@click.option("--method", type=click.Choice(METHODS), default="auto", show_default=True,
              help="Scheduling method (auto: exact where possible, else best heuristic).")
@click.option("--time-limit", type=click.FloatRange(min=0), default=10.0, show_default=True,
              help="Seconds the exact search may take.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              help="Draw memory over time of the schedule to this image file (PNG, SVG, PDF).")
def schedule(file: str, as_json: bool, method: str, time_limit: float,
             plot_path: str | None) -> None:
    """Order the tasks of FILE (node-link JSON, thrifty JSON or DOT) for the least peak."""
    from thrifty.cli.common import progress
    from thrifty.graph.taskgraph_io import read_taskgraph

    try:
        with progress(f"reading {file}") as say:
            tf = read_taskgraph(file)
            say(f"scheduling {len(tf.graph.tasks)} tasks ({method}, up to {time_limit:g} s)")
            res = schedule_graph(tf, method=method, time_limit=time_limit)
    except ThriftyError as e:
        raise click.ClickException(str(e)) from e
    if plot_path:
        from thrifty.memory.plot import plot_plan

        plot_plan(tf.graph, res.order, plot_path,
                  title=f"{tf.graph.name}: schedule ({res.method}), peak {res.peak:,} B")
    if as_json:
        click.echo(json.dumps(res.to_json(), default=list))
        return
    g = tf.graph
    t = Table(title=f"{g.name}: {len(g.tasks)} tasks, {len(g.buffers)} buffers")
    t.add_column("order")
    t.add_column("peak (bytes)", justify="right")
    t.add_column("vs ours", justify="right")
    t.add_row(f"ours ({res.method})", f"{res.peak:,}", "1.000")
    for name, peak in res.info.get("peaks", {}).items():
        t.add_row(name, f"{peak:,}", f"{peak / res.peak:.3f}" if res.peak else "-")
    console = Console()
    console.print(t)
    status = "proven optimal" if res.optimal else f"lower bound {res.lower_bound:,}"
    console.print(f"peak {res.peak:,} bytes ({status}); {res.info.get('seconds', 0.0):.2f} s")
