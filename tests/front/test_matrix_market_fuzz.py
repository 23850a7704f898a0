"""Fuzzing the Matrix Market reader against an independent oracle (``mm_oracle.py``).

Generated files mix every header field (coordinate/array, real/integer/complex/pattern,
general/symmetric/skew-symmetric/hermitian) and layouts (spacing, tabs, blank lines,
comments, CRLF, letter case), then are mutated byte-wise and structurally. The only outcomes
allowed: the matrix the oracle reads, or a FileFormatError naming the file exactly when the
oracle refuses it. The ``thrifty sparse run`` command prints one ``Error:`` line for every
file the oracle refuses.
"""

from __future__ import annotations

import importlib.util
import math
import tempfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from thrifty.cli.main import main
from thrifty.errors import FileFormatError
from thrifty.front.matrices import load_matrix

_spec = importlib.util.spec_from_file_location("mm_oracle", Path(__file__).with_name(
    "mm_oracle.py"))
assert _spec is not None and _spec.loader is not None
oracle = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(oracle)

_FIELDS = ("real", "integer", "complex", "pattern")
_SYMS = ("general", "symmetric", "skew-symmetric", "hermitian")
_SETTINGS = settings(max_examples=300, deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.too_slow])


def _number(draw, field: str) -> str:
    if field == "integer":
        return str(draw(st.integers(-(10**6), 10**6)))
    x = draw(st.floats(allow_nan=True, allow_infinity=True, width=64))
    style = draw(st.sampled_from(["repr", "e", "g", "f"]))
    if not math.isfinite(x):
        return draw(st.sampled_from({"inf": ["inf", "Infinity", "INF"],
                                     "-inf": ["-inf", "-Infinity"],
                                     "nan": ["nan", "NaN", "-nan"]}[repr(x)]))
    return {"repr": repr(x), "e": f"{x:.17e}", "g": f"{x:g}", "f": f"{x:.3f}"}[style]


@st.composite
def mm_files(draw) -> bytes:
    """A valid Matrix Market file in a random layout."""
    fmt = draw(st.sampled_from(["coordinate", "array"]))
    field = draw(st.sampled_from(_FIELDS if fmt == "coordinate" else _FIELDS[:3]))
    sym = draw(st.sampled_from(_SYMS))
    if sym == "hermitian" and field != "complex" or sym == "skew-symmetric" and \
            field == "pattern":
        sym = "general"
    n = draw(st.integers(0, 5))
    m = n if sym != "general" else draw(st.integers(0, 5))
    nvals = {"pattern": 0, "complex": 2}.get(field, 1)
    sep = draw(st.sampled_from([" ", "  ", "\t", " \t "]))
    eol = draw(st.sampled_from(["\n", "\r\n"]))

    def value(diag: bool) -> list[str]:
        vals = [_number(draw, field) for _ in range(nvals)]
        if diag and sym == "hermitian":
            vals[1] = "0"
        if diag and sym == "skew-symmetric":
            vals = ["0"] * nvals
        return vals

    if fmt == "coordinate":
        cells = [(i, j) for i in range(n if sym != "general" else m) for j in range(n)
                 if sym == "general" or i >= j]
        picked = draw(st.lists(st.sampled_from(cells), max_size=8)) if cells else []
        lines = [sep.join([str(i + 1), str(j + 1), *value(i == j)]) for i, j in picked]
        size = f"{m if sym == 'general' else n} {n} {len(lines)}"
    else:
        cells = [(i, j) for j in range(n) for i in range(m)
                 if sym == "general" or i > j or (i == j and sym != "skew-symmetric")]
        lines = [sep.join(value(i == j)) for i, j in cells]
        size = f"{m} {n}"
    words = ["%%MatrixMarket", "matrix", fmt, field, sym]
    if draw(st.booleans()):
        words = [w.upper() if draw(st.booleans()) else w for w in words]
        words[0] = "%%MatrixMarket" if draw(st.booleans()) else words[0]
    head = [" ".join(words)]
    head += draw(st.lists(st.sampled_from(["% a comment", "%", "", "% 1 2 3"]), max_size=2))
    head.append(size)
    body = []
    for line in lines:
        if draw(st.integers(0, 9)) == 0:
            body.append("")
        body.append(line)
    text = eol.join(head + body) + (eol if draw(st.booleans()) else "")
    return text.encode("latin-1")


_NOISE = b"0123456789-+.eE, x\t\r\n%pinfa\xe9"


@st.composite
def mutated(draw) -> bytes:
    data = bytearray(draw(mm_files()))
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["flip", "insert", "delete", "line", "swap", "word"]))
        if kind in ("flip", "insert", "delete") and data:
            k = draw(st.integers(0, len(data) - 1))
            b = draw(st.sampled_from(list(_NOISE)))
            if kind == "flip":
                data[k] = b
            elif kind == "insert":
                data.insert(k, b)
            else:
                del data[k]
        elif kind in ("line", "swap"):
            lines = bytes(data).split(b"\n")
            k = draw(st.integers(0, len(lines) - 1))
            if kind == "line":  # drop or duplicate a line
                lines[k:k + 1] = [] if draw(st.booleans()) else [lines[k], lines[k]]
            else:  # swap the first two tokens of a line (an entry into the upper triangle)
                toks = lines[k].split(b" ")
                if len(toks) >= 2:
                    toks[0], toks[1] = toks[1], toks[0]
                lines[k] = b" ".join(toks)
            data = bytearray(b"\n".join(lines))
        else:  # change a header or size word
            lines = bytes(data).split(b"\n")
            toks = lines[0].split(b" ")
            if len(toks) > 1 and draw(st.booleans()):
                k = draw(st.integers(1, len(toks) - 1))
                toks[k] = draw(st.sampled_from([b"vector", b"array", b"coordinate", b"real",
                                                b"pattern", b"complex", b"hermitian",
                                                b"skew-symmetric", b"symmetric", b"double"]))
                lines[0] = b" ".join(toks)
            elif len(lines) > 1:
                k = draw(st.integers(1, len(lines) - 1))
                lines[k] = draw(st.sampled_from([b"3 3 9", b"2 2", b"0 0 0", b"-1 2 1",
                                                 b"99999999999999 9 1", b"5 5 5 5"]))
            data = bytearray(b"\n".join(lines))
    return bytes(data)


def _entries(A) -> dict[tuple[int, int], complex]:
    C = A.tocoo()
    return {(int(i), int(j)): complex(v) for i, j, v in zip(C.row, C.col, C.data) if v != 0}


def _same(got: dict, want: dict) -> bool:
    want = {k: complex(v) for k, v in want.items() if v != 0}
    if got.keys() != want.keys():
        return False
    for k, v in want.items():
        g = got[k]
        for a, b in ((g.real, v.real), (g.imag, v.imag)):
            if not (a == b or (math.isnan(a) and math.isnan(b))
                    or abs(a - b) <= 1e-12 * max(abs(a), abs(b))):
                return False
    return True


def _check(data: bytes, tmp: Path) -> None:
    path = tmp / "f.mtx"
    path.write_bytes(data)
    try:
        shape, want, is_complex = oracle.parse(data)
    except oracle.Rejected as why:
        with pytest.raises(FileFormatError) as info:
            load_matrix(path)
        assert str(path) in str(info.value), (why, data)
        return
    try:
        A = load_matrix(path)
    except FileFormatError as e:  # only sizes beyond this machine's memory may differ
        assert "memory" in str(e), (str(e), data)
        return
    assert A.shape == shape, data
    assert (A.dtype == np.complex128) == is_complex, data
    assert _same(_entries(A), want), (data, _entries(A), want)


@_SETTINGS
@given(mm_files())
def test_valid_files_read_as_the_oracle_reads_them(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        _check(data, Path(tmp))


@settings(_SETTINGS, max_examples=1000)
@given(mutated())
def test_mutated_files_read_as_the_oracle_or_fail_naming_the_file(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        _check(data, Path(tmp))


@settings(_SETTINGS, max_examples=120)
@given(mutated())
def test_sparse_run_prints_one_error_line_for_every_refused_file(data: bytes) -> None:
    try:
        oracle.parse(data)
        return  # readable: other tests run the kernels
    except oracle.Rejected:
        pass
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "f.mtx"
        path.write_bytes(data)
        r = CliRunner().invoke(main, ["sparse", "run", "--kernel", "spmv", "--matrix",
                                      str(path), "--repeat", "1"])
    assert r.exit_code == 1, r.output
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("Error: "), r.output
    assert "Traceback" not in r.output
