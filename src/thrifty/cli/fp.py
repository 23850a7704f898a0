"""``thrifty fp``: low-precision formats, matrix-unit models and error bounds."""

from __future__ import annotations

import click

from thrifty.cli.fp_formats import formats
from thrifty.cli.fp_units import COMMANDS as UNIT_COMMANDS


@click.group()
def group() -> None:
    """Numerics engine: bit-exact formats, matrix units, error bounds."""


group.add_command(formats)
for _command in UNIT_COMMANDS:
    group.add_command(_command)
