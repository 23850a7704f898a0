"""``python -m thrifty``: the same as the ``thrifty`` command."""

from thrifty.cli.main import main

main(prog_name="thrifty")
