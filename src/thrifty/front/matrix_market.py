"""Matrix Market files, validated against the format's grammar and read with scipy.

The format is the NIST one (Boisvert, Pozo and Remington, "The Matrix Market Exchange
Formats: Initial Design", NISTIR 5935, 1996). scipy's reader (fast_matrix_market) parses
numbers leniently: ``1,5`` reads as 1.0, ``0x1p3`` as 0.0, ``1.0abc`` as 1.0, extra tokens
are ignored, and entries that the declared symmetry forbids are accepted. Before scipy
parses, :func:`read_matrix_market` checks every data line against the grammar of its
header, with one compiled regular expression over the whole data section:

* banner ``%%MatrixMarket matrix FORMAT FIELD SYMMETRY`` (keywords in any letter case, as
  NIST's ``mmio.c`` reads them): FORMAT ``coordinate`` or ``array``; FIELD ``real``,
  ``integer``, ``complex`` or ``pattern`` (not with ``array``); SYMMETRY ``general``,
  ``symmetric``, ``skew-symmetric`` (not with ``pattern``) or ``hermitian`` (``complex``
  only); symmetric kinds need a square matrix;
* comment lines (``%`` first) only between the banner and the size line; blank lines
  anywhere after the banner; tokens separated by spaces or tabs;
* coordinate lines ``ROW COL [VALUE]`` (one value; two for ``complex``; none for
  ``pattern``), array lines one value (two for ``complex``), column by column;
* indices: unsigned decimal integers; ``integer`` values: ``-?[0-9]+``; ``real`` and
  ``complex`` parts: decimal floating point ``-?(digits[.digits]|.digits)[(e|E)[+-]digits]``
  or ``inf``, ``infinity``, ``nan`` (any case, optional ``-``; a leading ``+`` is refused,
  as scipy's reader refuses it); a decimal value beyond the float64 range is an error, not
  infinity;
* symmetric and Hermitian coordinate files store the lower triangle (diagonal included),
  skew-symmetric ones the strict lower triangle (a zero on the diagonal is tolerated);
  a Hermitian diagonal is real.

Sizes are checked before anything is allocated: a file declaring more than this machine's
memory can hold is refused with the amount it would need.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from thrifty.errors import FileFormatError

__all__ = ["read_matrix_market"]

_FORMATS = ("coordinate", "array")
_FIELDS = ("real", "integer", "complex", "pattern")
_SYMMETRIES = ("general", "symmetric", "skew-symmetric", "hermitian")

_INDEX = rb"[0-9]+"
_INTEGER = rb"-?[0-9]+"
_REAL = (rb"-?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
         rb"|(?i:inf|infinity|nan))")
# the same grammar, possessive (no backtracking), for the fast pass over well-spaced lines
_REAL_FAST = (rb"-?+(?:[0-9]++(?:\.[0-9]*+)?+|\.[0-9]++)(?:[eE][+-]?+[0-9]++)?+"
              rb"|-?+(?i:inf(?:inity)?+|nan)")
_SEP = rb"[ \t]+"
_LINE_MM = re.compile(r"[Ll]ine (\d+)")


@dataclass(frozen=True, slots=True)
class _Header:
    format: str
    field: str
    symmetry: str
    rows: int
    cols: int
    entries: int  # data lines the body must hold
    banner_end: int  # byte offset just after the banner line
    data_start: int  # byte offset of the first byte after the size line
    size_line: int  # 1-based line number of the size line


def read_matrix_market(path: Path) -> sp.csr_array:
    """Validate and read a ``.mtx`` or ``.mtx.gz`` file as a canonical CSR array."""
    raw = _read_bytes(path)
    h = _parse_header(path, raw)
    _check_memory(path, h)
    _check_data_lines(path, raw, h)
    return _parse_body(path, raw, h)


def _read_bytes(path: Path) -> bytes:
    try:
        if path.name.lower().endswith(".gz"):
            with gzip.open(path, "rb") as fh:
                return fh.read()
        return path.read_bytes()
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise FileFormatError(path, f"corrupt or truncated gzip data ({exc or type(exc).__name__})"
                              ) from None
    except OSError as exc:
        raise FileFormatError(path, f"cannot read: {exc.strerror or exc}") from None


def _lines_from(raw: bytes, pos: int):  # type: ignore[no-untyped-def]
    """Yield (start, end_without_newline, next_start) for the lines from ``pos``."""
    n = len(raw)
    while pos < n:
        end = raw.find(b"\n", pos)
        nxt = n if end < 0 else end + 1
        end = n if end < 0 else end
        yield pos, end, nxt
        pos = nxt


def _parse_header(path: Path, raw: bytes) -> _Header:
    lines = _lines_from(raw, 0)
    first = next(lines, None)
    banner = raw[first[0]:first[1]] if first else b""
    words = banner.strip(b" \t\r").lower().replace(b"\t", b" ").decode("latin-1").split(" ")
    words = [w for w in words if w]
    if len(words) != 5 or words[0] != "%%matrixmarket":
        raise FileFormatError(
            path, f"Matrix Market header: the first line is {banner[:80].decode('latin-1')!r}; "
            "expected '%%MatrixMarket matrix FORMAT FIELD SYMMETRY'", 1)
    obj, fmt, field, sym = words[1:]
    problems = []
    if obj != "matrix":
        problems.append(f"object {obj!r} is not 'matrix'")
    for what, got, valid in (("format", fmt, _FORMATS), ("field", field, _FIELDS),
                             ("symmetry", sym, _SYMMETRIES)):
        if got not in valid:
            problems.append(f"{what} {got!r} is not one of {', '.join(valid)}")
    if not problems:
        if fmt == "array" and field == "pattern":
            problems.append("an array file cannot have field 'pattern'")
        if sym == "hermitian" and field != "complex":
            problems.append(f"symmetry 'hermitian' needs field 'complex', not {field!r}")
        if sym == "skew-symmetric" and field == "pattern":
            problems.append("a pattern file cannot be skew-symmetric")
    if problems:
        raise FileFormatError(path, f"Matrix Market header: {'; '.join(problems)}", 1)
    assert first is not None
    lineno = 1
    for start, end, nxt in lines:
        lineno += 1
        text = raw[start:end]
        if text.startswith(b"%") or not text.strip(b" \t\r"):
            continue
        return _size_line(path, text, lineno, fmt, field, sym, first[2], nxt)
    raise FileFormatError(path, f"Matrix Market: the file ends after line {lineno} before "
                          "the size line", lineno)


def _size_line(path: Path, text: bytes, lineno: int, fmt: str, field: str, sym: str,
               banner_end: int, data_start: int) -> _Header:
    want = 3 if fmt == "coordinate" else 2
    m = re.fullmatch(rb"[ \t]*" + _SEP.join([rb"([0-9]+)"] * want) + rb"[ \t]*\r?", text)
    if m is None:
        what = "ROWS COLS ENTRIES" if want == 3 else "ROWS COLS"
        raise FileFormatError(
            path, f"Matrix Market size line: {text[:80].decode('latin-1')!r} is not {what} "
            f"({want} unsigned integers separated by spaces)", lineno)
    toks = m.groups()
    rows, cols = int(toks[0]), int(toks[1])
    if sym != "general" and rows != cols:
        raise FileFormatError(
            path, f"Matrix Market size line: a {sym} matrix must be square, not {rows} x {cols}",
            lineno)
    if fmt == "coordinate":
        entries = int(toks[2])
    elif sym == "general":
        entries = rows * cols
    else:  # the lower triangle, strict for skew-symmetric
        entries = rows * (rows + 1) // 2 if sym != "skew-symmetric" else rows * (rows - 1) // 2
    return _Header(fmt, field, sym, rows, cols, entries, banner_end, data_start, lineno)


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if n < 1024 or unit == "EiB":
            return f"{n:.3g} {unit}"
        n /= 1024
    return f"{n:.3g} EiB"  # pragma: no cover


def _physical_memory() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - not POSIX
        return 1 << 62


def _check_memory(path: Path, h: _Header) -> None:
    """Refuse declared sizes this machine cannot hold, before anything is allocated."""
    item = 16 if h.field == "complex" else 8
    if h.format == "array":
        need = h.rows * h.cols * item * 2  # the dense array and its CSR copy (at worst)
    else:  # COO triplets, symmetric expansion, CSR arrays, row pointers
        mult = 2 if h.symmetry != "general" else 1
        need = h.entries * (16 + item) * 2 * mult + (h.rows + 1) * 8 * 2
    have = _physical_memory()
    if need > have or max(h.rows, h.cols, h.entries) >= 2**62:
        entries = f" with {h.entries} stored entries" if h.format == "coordinate" else ""
        raise FileFormatError(
            path, f"Matrix Market size line declares a {h.rows} x {h.cols} {h.format} "
            f"matrix{entries}; reading it needs about {_human(need)}, more than this "
            f"machine's {_human(have)} of memory", h.size_line)


def _value_tokens(h: _Header) -> list[bytes]:
    value = {"real": [_REAL], "integer": [_INTEGER], "complex": [_REAL, _REAL],
             "pattern": []}[h.field]
    return ([_INDEX, _INDEX] if h.format == "coordinate" else []) + value


def _line_regexes(h: _Header) -> tuple[re.Pattern[bytes], re.Pattern[bytes]]:
    """A fast regex for the usual layout and one for the first bad line of any layout.

    The first matches (possessively, without backtracking) as many lines of
    single-space-separated tokens as it can (the layout every writer we know of uses); from
    where it stops, the second finds the first line that is neither blank nor well-formed
    with any spacing.
    """
    tokens = _value_tokens(h)
    fast = {_REAL: rb"(?:" + _REAL_FAST + rb")"}
    line = b" ".join(fast.get(t, t.replace(b"]+", b"]++")) for t in tokens)
    strict = re.compile(rb"(?:" + line + rb"\n)*+(?:" + line + rb")?+")
    good = rb"[ \t]*(?:" + _SEP.join(tokens) + rb")?[ \t]*\r?$"
    return strict, re.compile(rb"^(?!" + good + rb").*$", re.M)


def _expected_line(h: _Header) -> str:
    value = {"real": "REAL", "integer": "INTEGER", "complex": "REAL IMAG", "pattern": ""}
    return " ".join(filter(None, ["ROW COL" if h.format == "coordinate" else "",
                                  value[h.field]]))


def _check_data_lines(path: Path, raw: bytes, h: _Header) -> None:
    """Every data line is blank or holds the tokens the header declares, in their grammar;
    there are as many as the size line declares (scipy's reader can die on more)."""
    end = len(raw) - 1 if raw.endswith(b"\n") else len(raw)
    if end < h.data_start:
        stored = 0
    else:
        strict, lenient = _line_regexes(h)
        m = strict.match(raw, h.data_start)  # always matches (possibly nothing)
        stop = m.end() if m is not None else h.data_start
        if stop < len(raw):
            line_start = max(h.data_start, raw.rfind(b"\n", 0, stop) + 1)
            bad = lenient.search(raw, line_start, end)
            if bad is not None:
                lineno = 1 + raw.count(b"\n", 0, bad.start())
                text = bad.group(0).decode("latin-1").strip()
                raise FileFormatError(path, _bad_line_message(h, text), lineno)
            counted = _count_error(path, raw, h)  # blank lines or odd spacing: count slowly
            if counted is not None:
                raise counted
            return
        stored = raw.count(b"\n", h.data_start - 1, end)  # every line holds an entry
    if stored != h.entries:
        counted = _count_error(path, raw, h)
        assert counted is not None
        raise counted


def _count_error(path: Path, raw: bytes, h: _Header) -> FileFormatError | None:
    """The error for a data section holding more or fewer lines than declared, if so."""
    stored, lineno, nth = 0, h.size_line, None
    for start, stop, _ in _lines_from(raw, h.data_start):
        lineno += 1
        if raw[start:stop].strip():
            stored += 1
            if stored == h.entries + 1:
                nth = lineno
    what = "data lines" if h.format == "coordinate" else "values"
    if stored < h.entries:
        return FileFormatError(
            path, f"Matrix Market: the file ends after line {lineno} with {stored} {what}; "
            f"the size line declares {h.entries}", lineno)
    if stored > h.entries:
        return FileFormatError(
            path, f"Matrix Market: {stored} {what} where the size line declares {h.entries}",
            nth)
    return None


def _bad_line_message(h: _Header, text: str) -> str:
    expected = _expected_line(h)
    if text.startswith("%"):
        return (f"Matrix Market: comment line {text[:60]!r} after the size line; comments "
                f"may only precede it")
    toks = text.split()
    n_want = len(expected.split())
    if len(toks) != n_want:
        return (f"Matrix Market: {len(toks)} tokens in {text[:80]!r}; a {h.format} "
                f"{h.field} line is {expected!r} ({n_want} tokens)")
    names = expected.split()
    kinds = {"ROW": _INDEX, "COL": _INDEX, "INTEGER": _INTEGER, "REAL": _REAL, "IMAG": _REAL}
    for name, tok in zip(names, toks):
        if not re.fullmatch(kinds[name], tok.encode("latin-1")):
            grammar = {"ROW": "an unsigned integer", "COL": "an unsigned integer",
                       "INTEGER": "an integer (-?[0-9]+)",
                       "REAL": "a decimal floating-point number (or inf/nan)",
                       "IMAG": "a decimal floating-point number (or inf/nan)"}[name]
            return f"Matrix Market: token {tok[:40]!r} ({name}) is not {grammar}"
    return f"Matrix Market: {text[:80]!r} is not a {h.format} {h.field} line {expected!r}"


def _nth_data_line(raw: bytes, h: _Header, k: int) -> int:
    """The 1-based file line of the ``k``-th (0-based) non-blank data line."""
    lineno, seen = h.size_line, -1
    for start, end, _ in _lines_from(raw, h.data_start):
        lineno += 1
        if raw[start:end].strip():
            seen += 1
            if seen == k:
                return lineno
    return lineno


def _scipy_read(path: Path, raw: bytes, h: _Header, symmetry: str) -> object:
    """scipy's parse of the (validated) file: the coordinate entries as stored when
    ``symmetry`` is ``"general"``, else the matrix scipy builds.

    A plain file with the canonical banner is read by scipy from its path (its C++ reader,
    in parallel); otherwise from memory, with the banner rewritten canonically.
    """
    import scipy.io

    banner = f"%%MatrixMarket matrix {h.format} {h.field} {h.symmetry}".encode()
    direct = not path.name.lower().endswith(".gz") and raw.startswith(banner) and \
        raw[len(banner):h.banner_end].strip() == b""
    try:
        if direct and h.format == "coordinate" and symmetry == "general":
            stored = _scipy_coo_as_stored(path)
            return stored if stored is not None else scipy.io.mmread(str(path))
        if direct and symmetry == h.symmetry:
            return scipy.io.mmread(str(path))
        head = f"%%MatrixMarket matrix {h.format} {h.field} {symmetry}\n".encode()
        return scipy.io.mmread(io.BytesIO(head + raw[h.banner_end:]))
    except (ValueError, OverflowError, TypeError, OSError, EOFError) as exc:
        counted = _count_error(path, raw, h)
        if counted is not None:
            raise counted from None
        msg = str(exc) or type(exc).__name__
        m = _LINE_MM.search(msg)
        line = int(m.group(1)) if m else None
        msg = _LINE_MM.sub("", msg, count=1).lstrip(": ").strip()
        raise FileFormatError(path, f"Matrix Market: {msg}", line) from None


def _scipy_coo_as_stored(path: Path) -> object:
    """The stored coordinate entries (no symmetric expansion) through scipy's reader from
    the path, or ``None`` where this scipy lacks the functions used."""
    try:
        from scipy.io._fast_matrix_market import _get_read_cursor, _read_body_coo
    except ImportError:  # pragma: no cover - another scipy version
        return None
    cursor, stream = _get_read_cursor(str(path))
    try:
        (data, (i, j)), shape = _read_body_coo(cursor, generalize_symmetry=False)
    finally:
        if stream is not None:  # pragma: no cover - only compressed files open one
            stream.close()
    return sp.coo_array((data, (i, j)), shape=shape)


def _parse_body(path: Path, raw: bytes, h: _Header) -> sp.csr_array:
    from thrifty.front.matrices import _canonical, _expand_symmetric

    if h.entries == 0 or h.rows == 0 or h.cols == 0:  # scipy's reader dies (SIGFPE) on 0-row arrays
        counted = _count_error(path, raw, h)
        if counted is not None:
            raise counted
        dtype = np.complex128 if h.field == "complex" else np.float64
        return _canonical(sp.csr_array((h.rows, h.cols), dtype=dtype))
    if h.format == "array":
        M = np.asarray(_scipy_read(path, raw, h, h.symmetry))
        M = M.reshape(h.rows, h.cols)
        _check_overflow(path, raw, h, np.isinf(M.T[_stored_mask(h)]))
        if h.symmetry == "hermitian":
            bad = np.flatnonzero(np.diagonal(M).imag != 0)
            if bad.size:
                j = int(bad[0])
                k = j * h.rows - j * (j - 1) // 2  # lower triangle, column by column
                raise FileFormatError(path, f"Matrix Market: diagonal entry ({j + 1}, {j + 1}) "
                                      "of a hermitian matrix is not real",
                                      _nth_data_line(raw, h, k))
        return _canonical(M)
    C = sp.coo_array(_scipy_read(path, raw, h, "general"))
    if h.field != "pattern":
        _check_overflow(path, raw, h, np.isinf(C.data))
    if h.symmetry == "general":
        return _canonical(C)
    rows, cols, vals = C.row.astype(np.int64), C.col.astype(np.int64), C.data
    _check_triangle(path, raw, h, rows, cols, vals)
    code = {"symmetric": "S", "skew-symmetric": "Z", "hermitian": "H"}[h.symmetry]
    return _expand_symmetric(rows, cols, vals, (h.rows, h.cols), code)


def _stored_mask(h: _Header) -> np.ndarray:
    """Which entries of the column-major array the file stores (in order, transposed)."""
    n = h.rows
    if h.symmetry == "general":
        return np.ones((h.cols, h.rows), dtype=bool)
    i, j = np.indices((n, n))  # [col, row] after the transpose
    return (j > i) if h.symmetry == "skew-symmetric" else (j >= i)


def _check_overflow(path: Path, raw: bytes, h: _Header, inf_mask: np.ndarray) -> None:
    """A decimal value beyond float64's range is an error; a literal inf is not."""
    if not inf_mask.any():
        return
    per = 2 if h.field == "complex" else 1
    for k in np.flatnonzero(inf_mask):
        line = _nth_data_line(raw, h, int(k))
        text = _line_text(raw, line).split()
        for tok in text[-per:]:
            if "inf" not in tok.lower() and np.isinf(float(tok)):
                raise FileFormatError(
                    path, f"Matrix Market: value {tok[:40]!r} is beyond the float64 range "
                    "(largest finite 1.7976931348623157e308)", line)


def _line_text(raw: bytes, line: int) -> str:
    for k, (start, end, _) in enumerate(_lines_from(raw, 0), start=1):
        if k == line:
            return raw[start:end].decode("latin-1")
    return ""


def _check_triangle(path: Path, raw: bytes, h: _Header, rows: np.ndarray, cols: np.ndarray,
                    vals: np.ndarray) -> None:
    upper = rows < cols
    if h.symmetry == "skew-symmetric":
        diag = (rows == cols) & (vals != 0)
    elif h.symmetry == "hermitian":
        diag = (rows == cols) & (np.imag(vals) != 0)
    else:
        diag = np.zeros_like(upper)
    bad = np.flatnonzero(upper | diag)
    if not bad.size:
        return
    k = int(bad[0])
    r, c = int(rows[k]) + 1, int(cols[k]) + 1
    if upper[k]:
        msg = (f"entry ({r}, {c}) lies above the diagonal; a {h.symmetry} file stores the "
               f"{'strict ' if h.symmetry == 'skew-symmetric' else ''}lower triangle only")
    elif h.symmetry == "skew-symmetric":
        msg = f"diagonal entry ({r}, {c}) = {vals[k]!r} is nonzero in a skew-symmetric matrix"
    else:
        msg = f"diagonal entry ({r}, {c}) = {vals[k]!r} of a hermitian matrix is not real"
    raise FileFormatError(path, f"Matrix Market: {msg}", _nth_data_line(raw, h, k))
