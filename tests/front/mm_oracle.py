"""An independent Matrix Market reader, written plainly, as the oracle of the fuzz tests.

It follows the grammar documented in :mod:`thrifty.front.matrix_market` with hand-written
character checks (no regular expressions, no scipy) and returns the matrix as a dict of
summed entries ``{(row, col): value}`` with its shape, or raises :class:`Rejected`.
"""

from __future__ import annotations

import math

DIGITS = set("0123456789")


class Rejected(Exception):
    """The oracle refuses the file."""


def is_uint(t: str) -> bool:
    return len(t) > 0 and all(c in DIGITS for c in t)


def is_int(t: str) -> bool:
    return is_uint(t[1:]) if t.startswith("-") else is_uint(t)


def is_real(t: str) -> bool:
    if t[:1] == "-":  # a leading "+" is refused, as scipy's reader refuses it
        t = t[1:]
    if t.lower() in ("inf", "infinity", "nan"):
        return True
    for e in ("e", "E"):
        if e in t:
            mant, _, exp = t.partition(e)
            if not is_uint(exp[1:] if exp[:1] in ("+", "-") else exp):
                return False
            t = mant
            break
    whole, dot, frac = t.partition(".")
    if dot and "." in frac:
        return False
    if not whole and not frac:
        return False
    return (not whole or is_uint(whole)) and (not frac or is_uint(frac))


def _split(line: str) -> list[str]:
    """Tokens of a data line: separated by spaces/tabs, an optional CR at the end only."""
    if line.endswith("\r"):
        line = line[:-1]
    if "\r" in line:
        raise Rejected("carriage return inside a line")
    out, cur = [], ""
    for c in line:
        if c in " \t":
            if cur:
                out.append(cur)
            cur = ""
        else:
            cur += c
    if cur:
        out.append(cur)
    return out


def _real(t: str) -> float:
    if not is_real(t):
        raise Rejected(f"not a real: {t!r}")
    v = float(t)
    if math.isinf(v) and "inf" not in t.lower():
        raise Rejected("overflow")
    return v


def _value(field: str, toks: list[str]) -> complex | float:
    if field == "pattern":
        return 1.0
    if field == "integer":
        if not is_int(toks[0]):
            raise Rejected("not an integer")
        v = int(toks[0])
        if not -(2**63) <= v < 2**63:
            raise Rejected("integer out of range")
        return float(v)
    if field == "real":
        return _real(toks[0])
    return complex(_real(toks[0]), _real(toks[1]))


def parse(text: bytes) -> tuple[tuple[int, int], dict[tuple[int, int], complex | float], bool]:
    """(shape, entries, is_complex) of a Matrix Market file, or :class:`Rejected`."""
    lines = text.decode("latin-1").split("\n")
    words = [w for w in lines[0].strip(" \t\r").replace("\t", " ").split(" ") if w]
    if len(words) != 5 or words[0].lower() != "%%matrixmarket":
        raise Rejected("banner")
    obj, fmt, field, sym = (w.lower() for w in words[1:])
    if obj != "matrix" or fmt not in ("coordinate", "array"):
        raise Rejected("object/format")
    if field not in ("real", "integer", "complex", "pattern"):
        raise Rejected("field")
    if sym not in ("general", "symmetric", "skew-symmetric", "hermitian"):
        raise Rejected("symmetry")
    if (fmt == "array" and field == "pattern") or (sym == "hermitian" and field != "complex") \
            or (sym == "skew-symmetric" and field == "pattern"):
        raise Rejected("combination")
    k = 1
    while k < len(lines) and (lines[k].startswith("%") or not lines[k].strip(" \t\r")):
        k += 1
    if k == len(lines):
        raise Rejected("no size line")
    size = _split(lines[k])
    want = 3 if fmt == "coordinate" else 2
    if len(size) != want or not all(is_uint(t) for t in size):
        raise Rejected("size line")
    rows, cols = int(size[0]), int(size[1])
    if sym != "general" and rows != cols:
        raise Rejected("not square")
    if max(rows, cols) > 2**31:
        raise Rejected("too large for the oracle")
    data = [_split(line) for line in lines[k + 1:]]
    data = [d for d in data if d]
    nval = {"pattern": 0, "complex": 2}.get(field, 1)
    for d in data:
        if len(d) != nval + (2 if fmt == "coordinate" else 0):
            raise Rejected("token count")
    if fmt == "coordinate":
        if int(size[2]) != len(data):
            raise Rejected("entry count")
        stored = []
        for d in data:
            if not (is_uint(d[0]) and is_uint(d[1])):
                raise Rejected("index")
            i, j = int(d[0]), int(d[1])
            if not (1 <= i <= rows and 1 <= j <= cols):
                raise Rejected("index range")
            stored.append((i - 1, j - 1, _value(field, d[2:])))
    else:
        cells = [(i, j) for j in range(cols) for i in range(rows)
                 if sym == "general" or i > j or (i == j and sym != "skew-symmetric")]
        if len(cells) != len(data):
            raise Rejected("value count")
        stored = [(i, j, _value(field, d)) for (i, j), d in zip(cells, data)]
    entries: dict[tuple[int, int], complex | float] = {}
    for i, j, v in stored:
        if sym != "general" and i < j:
            raise Rejected("upper triangle")
        if sym == "skew-symmetric" and i == j and v != 0:
            raise Rejected("skew diagonal")
        if sym == "hermitian" and i == j and complex(v).imag != 0:
            raise Rejected("hermitian diagonal")
        entries[(i, j)] = entries.get((i, j), 0) + v
        if sym != "general" and i != j:
            mirror = {"symmetric": v, "skew-symmetric": -v,
                      "hermitian": complex(v).conjugate()}[sym]
            entries[(j, i)] = entries.get((j, i), 0) + mirror
    return (rows, cols), entries, field == "complex"
