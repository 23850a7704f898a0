"""The ``thrifty`` command: one entry point, one command group per engine, plus ``demo``."""

from __future__ import annotations

import click

from thrifty.cli.common import Group
from thrifty.cli.demo import demo
from thrifty.cli.fp import group as fp_group
from thrifty.cli.info import info
from thrifty.cli.memory import group as memory_group
from thrifty.cli.sparse import group as sparse_group


@click.group(cls=Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="thrifty")
def main() -> None:
    """thrifty: skip the zeros, fit the memory, trust the bits."""


main.add_command(info, "info")
main.add_command(demo, "demo")
main.add_command(sparse_group, "sparse")
main.add_command(memory_group, "memory")
main.add_command(fp_group, "fp")
