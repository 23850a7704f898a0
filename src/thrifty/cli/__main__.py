"""``python -m thrifty.cli``: the same as the ``thrifty`` command."""

from thrifty.cli.main import main

main()
