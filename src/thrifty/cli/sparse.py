"""``thrifty sparse``: run and benchmark specialized sparse kernels."""

from __future__ import annotations

import click


@click.group()
def group() -> None:
    """Sparse engine: specialize dense specs to the sparsity of their inputs."""
