"""Shared helpers of the CLI: errors as one line, JSON output, rich tables, progress."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import click
import numpy as np

from thrifty.errors import ThriftyError

if TYPE_CHECKING:
    from rich.console import Console

#: Set to 1 to see the traceback of an unexpected error instead of its one-line summary.
TRACEBACK_ENV = "THRIFTY_TRACEBACK"


def one_line(text: str) -> str:
    """``text`` with its lines joined by ``; `` (an error message fits one line)."""
    return "; ".join(part.strip() for part in str(text).splitlines() if part.strip())


def error_message(exc: BaseException) -> str:
    """The one-line message the CLI prints for an exception raised by a command."""
    if isinstance(exc, ThriftyError):
        return one_line(str(exc))
    if isinstance(exc, OverflowError):
        return one_line(f"a number is beyond the range of a float ({exc})")
    if isinstance(exc, MemoryError):
        return one_line(f"not enough memory ({exc or 'allocation failed'})")
    if isinstance(exc, RecursionError):
        return "input nested too deeply to process"
    if isinstance(exc, OSError):
        where = f"{exc.filename}: " if exc.filename else ""
        return one_line(f"{where}{exc.strerror or exc}")
    if isinstance(exc, EOFError):
        return one_line(f"unexpected end of input ({exc or 'EOF'})")
    return one_line(f"unexpected {type(exc).__name__}: {exc} (set {TRACEBACK_ENV}=1 to see "
                    "where)")


class Group(click.Group):
    """A click group whose commands end every error with one ``Error: ...`` line.

    Bad input raises a :class:`~thrifty.errors.ThriftyError` deep in the library; this
    turns it (and the few Python errors input can still provoke: overflow, memory, file
    system, end of file) into click's one-line error and exit status 1 instead of a
    traceback or a bare "Aborted!". ``THRIFTY_TRACEBACK=1`` re-raises unexpected errors.
    """

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.Exit, click.ClickException, click.Abort, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - the CLI's last line of defence
            known = (ThriftyError, OverflowError, MemoryError, RecursionError, OSError,
                     EOFError)
            if not isinstance(exc, known) and os.environ.get(TRACEBACK_ENV) == "1":
                raise
            raise click.ClickException(error_message(exc)) from None


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
    from rich.table import Table

    t = Table(title=title)
    for c in columns:
        t.add_column(str(c))
    for r in rows:
        t.add_row(*[fmt(v) for v in r])
    if console is None:
        from rich.console import Console

        console = Console()
    console.print(t)


def fmt(v: Any) -> str:
    if isinstance(v, float | np.floating):
        return f"{v:.4g}"
    return str(v)


def kv_table(title: str, data: Mapping[str, Any]) -> None:
    table(title, ["", "value"], [(k, v) for k, v in data.items()])


def deprecated_alias(old: str, new: str, old_value: Any, new_value: Any) -> Any:
    """The value of option ``new``, or of its deprecated alias ``old`` (with a note on
    stderr); both given is an error."""
    if old_value is None:
        return new_value
    if new_value is not None:
        raise click.UsageError(f"{old} is a deprecated alias of {new}; give only {new}")
    click.echo(f"note: {old} is deprecated; use {new}", err=True)
    return old_value


@contextmanager
def progress(description: str, enabled: bool = True) -> Iterator[Callable[[str], None]]:
    """A spinner with the elapsed time on stderr while a long step runs; yields a function
    that changes its description. Shown only when stderr is a terminal (never in pipes,
    files or ``--json`` output captured by another program).
    """
    if not enabled or not sys.stderr.isatty():
        yield lambda _msg: None
        return
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                  console=Console(file=sys.stderr), transient=True) as bar:
        task = bar.add_task(description, total=None)
        yield lambda msg: bar.update(task, description=msg)


def spy_plot(A: Any, path: str, title: str) -> None:
    """Save the nonzero pattern of sparse matrix ``A`` (a spy plot) to ``path``."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 6), layout="constrained")
    n = max(A.shape) or 1
    ax.spy(A, markersize=max(0.05, min(4.0, 300.0 / n)), color="tab:blue")
    ax.set_title(title)
    fig.savefig(path, dpi=120)
    plt.close(fig)


def log_bins(values: Any, bins: int = 60) -> Any:
    """``bins`` histogram bin edges spaced evenly on a log axis over the positive
    ``values`` (linear bins look wrong on a log axis: all but the last few are empty)."""
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    if v.size == 0:
        return np.geomspace(1e-300, 1.0, bins + 1)
    lo, hi = float(v.min()), float(v.max())
    if hi <= lo:
        lo, hi = lo / 2, hi * 2
    return np.geomspace(lo, hi, bins + 1)
