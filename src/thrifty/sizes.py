"""Byte sizes and memory budgets: one reading everywhere (library, CLI, demo).

**Byte sizes** are a whole number of bytes (``123456``), or a number with a unit:

* SI units, powers of 1000 (BIPM SI brochure, 9th ed., 2019): ``B``, ``kB``, ``MB``,
  ``GB``, ``TB``, ``PB``;
* IEC units, powers of 1024 (IEC 80000-13:2008): ``KiB``, ``MiB``, ``GiB``, ``TiB``,
  ``PiB``.

Units are read without regard to letter case (``kB``, ``KB`` and ``kb`` are all 1000
bytes; ``mib`` is 2**20): a byte count has no use for bits or milli-bytes, so no reading is
lost. A bare prefix (``k``, ``M``, ``G`` ...) is refused as ambiguous (1000 or 1024?):
write ``kB`` or ``KiB``. A size with a unit may have a fraction (``1.5kB`` is 1500 bytes);
the result is rounded down to whole bytes.

**Budgets** are a byte size, or a *fraction*: a non-integer number ``x`` with
``0 < x <= 1``, written with a decimal point or an exponent (``0.7``, ``1.0``, ``5e-1``;
a Python ``float``), means that fraction of the peak of the best schedule found (the least
peak without recomputation or offloading, as :func:`thrifty.memory.schedule` finds it).
An integer (``1``, ``4096``; a Python ``int``) is always whole bytes. Any other plain
number is refused: ``1.5`` is neither a fraction nor whole bytes, and is never read as one
byte. The same rule holds for Python numbers (``plan(g, 0.7)``, ``plan(g, 10**9)``) and
the command line (``--budget 0.7``, ``--budget 1.0``, ``--budget 2GB``).
"""

from __future__ import annotations

import math
import re

from thrifty.errors import PlanError

__all__ = ["BYTE_UNITS", "format_bytes", "is_fraction", "parse_budget", "parse_bytes"]

#: Units understood by :func:`parse_bytes`, lower-cased, and their sizes in bytes.
BYTE_UNITS: dict[str, int] = {
    "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "pb": 10**15,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "pib": 2**50,
}
_AMBIGUOUS = {"k", "m", "g", "t", "p", "ki", "mi", "gi", "ti", "pi"}
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?|[0-9]+\.)\s*([a-zA-Z]*)\s*$")
_VALID = ("bytes ('123456'), a size with a unit (B, kB, MB, GB, TB, PB = powers of 1000; "
          "KiB, MiB, GiB, TiB, PiB = powers of 1024)")


def _split(text: str, what: str) -> tuple[float, str]:
    m = _SIZE_RE.match(text)
    if not m:
        raise PlanError(f"{what} {text!r} is not understood; give {_VALID}")
    unit = m.group(2).lower()
    if unit in _AMBIGUOUS:
        raise PlanError(f"{what} {text!r}: the unit {m.group(2)!r} is ambiguous; write "
                        f"{m.group(2)[0].upper()}B (powers of 1000) or "
                        f"{m.group(2)[0].upper()}iB (powers of 1024)")
    if unit and unit not in BYTE_UNITS:
        raise PlanError(f"{what} {text!r}: unknown unit {m.group(2)!r}; give {_VALID}")
    num = float(m.group(1))
    if not math.isfinite(num) or num * BYTE_UNITS.get(unit, 1) >= 2**63:
        raise PlanError(f"{what} {text!r} is beyond 2**63 bytes")
    return num, unit


def parse_bytes(value: int | float | str, what: str = "size") -> int:
    """Whole bytes from an int, an integral float, or a string with an optional unit.

    Example
    -------
    >>> parse_bytes("64MiB"), parse_bytes("2GB"), parse_bytes("1.5 kB"), parse_bytes(4096)
    (67108864, 2000000000, 1500, 4096)
    """
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise PlanError(f"{what} {value!r} is not a number of bytes; give {_VALID}")
    if isinstance(value, str):
        num, unit = _split(value, what)
        if not unit and num != int(num):
            raise PlanError(f"{what} {value!r} is not a whole number of bytes; give {_VALID}")
        return int(num * BYTE_UNITS.get(unit, 1))
    if isinstance(value, float) and not math.isfinite(value) or not (0 <= value < 2**63):
        raise PlanError(f"{what} {value!r} must be a number of bytes in [0, 2**63)")
    if value != int(value):
        raise PlanError(f"{what} {value!r} is not a whole number of bytes")
    return int(value)


def is_fraction(value: object) -> bool:
    """Whether ``value`` is a budget given as a fraction: a float, or a plain number written
    with a decimal point or an exponent, in (0, 1]. Integers are bytes."""
    if isinstance(value, float):
        return 0 < value <= 1
    if isinstance(value, str):
        m = _SIZE_RE.match(value)
        if not m or m.group(2) or m.group(1).isdigit():
            return False
        return 0 < float(m.group(1)) <= 1
    return False


def parse_budget(value: int | float | str, peak: int | None = None) -> int:
    """Bytes of a budget (see the module docstring for the rule).

    A fraction needs ``peak``, the best schedule's peak it is a fraction of.

    Example
    -------
    >>> parse_budget("64MiB"), parse_budget("2GB"), parse_budget("0.5", peak=1000)
    (67108864, 2000000000, 500)
    >>> parse_budget(1.0, peak=1000), parse_budget("1.0", peak=1000), parse_budget(1)
    (1000, 1000, 1)
    """
    if is_fraction(value):
        if peak is None:
            raise PlanError(f"budget {value!r} is a fraction of the best schedule's peak; "
                            "that needs the peak (pass peak=, or give bytes)")
        return int(float(value) * peak)
    plain: float | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        plain = float(value)
    elif isinstance(value, str):
        m = _SIZE_RE.match(value)
        plain = float(m.group(1)) if m and not m.group(2) else None
    if plain is not None and math.isfinite(plain) and plain != int(plain):
        raise PlanError(f"budget {value!r}: a plain number is a fraction of the best "
                        "schedule's peak when in (0, 1], else whole bytes; for bytes give an "
                        "integer or a unit (e.g. '1.5GB', '1.5GiB')")
    return parse_bytes(value, "budget")


def format_bytes(n: float, binary: bool = False) -> str:
    """A readable size: ``1.5 GB`` (SI) or ``1.4 GiB`` (``binary``).

    Example
    -------
    >>> format_bytes(1_500_000_000), format_bytes(2**20, binary=True), format_bytes(12)
    ('1.5 GB', '1 MiB', '12 B')
    """
    scale, unit = bytes_unit(n, binary)
    if unit == "B":
        return f"{int(n)} B" if n == int(n) else f"{n:.3g} B"
    return f"{n / scale:.3g} {unit}"


def bytes_unit(n: float, binary: bool = False) -> tuple[int, str]:
    """The largest unit not above ``n`` (``(10**9, "GB")`` for 3e9): axis labels of plots."""
    base, units = (1024, ("B", "KiB", "MiB", "GiB", "TiB", "PiB")) if binary else \
        (1000, ("B", "kB", "MB", "GB", "TB", "PB"))
    k = 0
    while k + 1 < len(units) and abs(n) >= base ** (k + 1):
        k += 1
    return base ** k, units[k]
