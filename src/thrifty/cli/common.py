"""Shared helpers of the CLI: JSON output and rich tables."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table


def _default(o: Any) -> Any:
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, set | frozenset | tuple):
        return list(o)
    return str(o)


def emit_json(data: Any) -> None:
    """Print ``data`` as JSON on stdout (numpy scalars and arrays converted)."""
    sys.stdout.write(json.dumps(data, indent=2, default=_default) + "\n")


def table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]],
          console: Console | None = None) -> None:
    """Print a rich table."""
    t = Table(title=title)
    for c in columns:
        t.add_column(str(c))
    for r in rows:
        t.add_row(*[fmt(v) for v in r])
    (console or Console()).print(t)


def fmt(v: Any) -> str:
    if isinstance(v, float | np.floating):
        return f"{v:.4g}"
    return str(v)


def kv_table(title: str, data: Mapping[str, Any]) -> None:
    table(title, ["", "value"], [(k, v) for k, v in data.items()])
