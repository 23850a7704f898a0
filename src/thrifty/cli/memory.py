"""``thrifty memory``: minimum-peak schedules and plans under a memory budget."""

from __future__ import annotations

import click

from thrifty.cli.memory_plan import plan
from thrifty.cli.memory_schedule import schedule


@click.group()
def group() -> None:
    """Memory engine: order task graphs, recompute and offload under a budget."""


group.add_command(schedule)
group.add_command(plan)
