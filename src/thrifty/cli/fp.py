"""``thrifty fp``: low-precision formats, matrix-unit models and error bounds."""

from __future__ import annotations

import click


@click.group()
def group() -> None:
    """Numerics engine: bit-exact formats, matrix units, error bounds."""
