"""Matrix Market validation: tokens in the format's grammar, symmetry rules, sizes, gzip."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from thrifty.errors import FileFormatError
from thrifty.front.matrices import load_matrix
from thrifty.testing import assert_eq

_HEAD = "%%MatrixMarket matrix coordinate real general\n"


def _write(tmp_path: Path, text: str, name: str = "m.mtx") -> Path:
    p = tmp_path / name
    p.write_bytes(text.encode("latin-1"))
    return p


@pytest.mark.parametrize(("body", "token"), [
    ("2 2 1\n1 1 1,5\n", "1,5"),      # scipy reads 1.0
    ("2 2 1\n1 1 0x1p3\n", "0x1p3"),  # scipy reads 0.0
    ("2 2 1\n1 1 1.0abc\n", "1.0abc"),  # scipy reads 1.0
    ("2 2 1\n1 1 1.2.3\n", "1.2.3"),
    ("2 2 1\n1 1 1e\n", "1e"),
    ("2 2 1\n1 1 --1\n", "--1"),
    ("2 2 1\n1 1 1d5\n", "1d5"),
    ("2 2 1\n+1 1 1\n", "+1"),
    ("2 2 1\n1 1 +1.5\n", "+1.5"),  # scipy refuses it with no line or token
])
def test_values_outside_the_grammar_are_refused_naming_the_token(tmp_path, body, token):
    path = _write(tmp_path, _HEAD + body)
    with pytest.raises(FileFormatError, match="token") as info:
        load_matrix(path)
    assert info.value.line == 3 and repr(token) in str(info.value)
    assert str(path) in str(info.value)


@pytest.mark.parametrize(("header", "body", "line", "message"), [
    ("real general", "2 2 1\n1 1 1 7\n", 3, "4 tokens"),  # scipy ignores the extra token
    ("integer general", "2 2 1\n1 1 1.5\n", 3, "INTEGER"),  # scipy reads 1
    ("pattern general", "2 2 1\n1 1 3\n", 3, "3 tokens"),
    ("complex general", "2 2 1\n1 1 3\n", 3, "3 tokens"),
    ("real general", "2 2 1\n% late\n1 1 3\n", 3, "comment"),
    ("real general", "2 2 1\n1 1 3e400\n", 3, "float64 range"),  # scipy reads inf
    ("real skew-symmetric", "2 2 1\n1 1 5\n", 3, "nonzero in a skew-symmetric"),
    ("complex hermitian", "2 2 2\n1 1 3 1\n2 1 1 1\n", 3, "not real"),
    ("real symmetric", "2 2 1\n1 2 5\n", 3, "above the diagonal"),
    ("real skew-symmetric", "3 3 2\n2 1 5\n1 3 5\n", 4, "above the diagonal"),
    ("real symmetric", "2 3 1\n2 1 5\n", 2, "square"),
    ("real hermitian", "2 2 1\n2 1 5\n", 1, "needs field 'complex'"),
    ("pattern skew-symmetric", "2 2 1\n2 1\n", 1, "skew"),
    ("real general", "2 2\n1 1 5\n", 2, "size line"),
])
def test_lines_the_header_forbids_are_refused(tmp_path, header, body, line, message):
    path = _write(tmp_path, f"%%MatrixMarket matrix coordinate {header}\n{body}")
    with pytest.raises(FileFormatError, match=message) as info:
        load_matrix(path)
    assert info.value.line == line


def test_array_hermitian_diagonal_must_be_real(tmp_path):
    text = "%%MatrixMarket matrix array complex hermitian\n2 2\n1 0\n2 3\n4 0.5\n"
    with pytest.raises(FileFormatError, match=r"\(2, 2\).*not real") as info:
        load_matrix(_write(tmp_path, text))
    assert info.value.line == 5


def test_what_the_grammar_allows_reads_as_written(tmp_path):
    text = ("%%matrixmarket MATRIX Coordinate REAL General\n% comment\n\n3 3 5\n"
            "1\t1   .5\n2 1 5.\n\n3 2 -1E-2\r\n3 3 inf\n1 3 NaN\n")
    A = load_matrix(_write(tmp_path, text))
    dense = A.toarray()
    assert_eq(dense[:, :2], np.array([[0.5, 0], [5.0, 0], [0, -0.01]]), rtol=0)
    assert dense[2, 2] == np.inf and np.isnan(dense[0, 2])


def test_symmetric_storage_expands_and_zero_skew_diagonal_is_tolerated(tmp_path):
    text = "%%MatrixMarket matrix coordinate real skew-symmetric\n2 2 2\n2 1 3\n1 1 0\n"
    assert_eq(load_matrix(_write(tmp_path, text)), np.array([[0, -3.0], [3, 0]]), rtol=0)


@pytest.mark.parametrize("damage", [
    lambda b: b[: len(b) // 2],           # truncated stream: EOFError in gzip
    lambda b: b"\x1f\x8b" + b"\x00" * 20,  # a gzip magic with garbage: BadGzipFile
    lambda b: b[:12] + bytes(x ^ 0xFF for x in b[12:]),  # corrupt deflate data: zlib.error
])
def test_corrupt_gzip_is_a_file_format_error(tmp_path, damage):
    good = gzip.compress((_HEAD + "2 2 1\n1 1 1\n" * 1).encode() * 50)
    path = tmp_path / "m.mtx.gz"
    path.write_bytes(damage(good))
    with pytest.raises(FileFormatError, match="gzip") as info:
        load_matrix(path)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("text", [
    _HEAD + "2 2 100000000000000\n1 1 1\n",
    _HEAD + "100000000000000000 2 1\n1 1 1\n",
    "%%MatrixMarket matrix array real general\n1000000000 1000000000\n1\n",
    _HEAD + "99999999999999999999999 2 1\n1 1 1\n",
])
def test_sizes_beyond_memory_are_refused_up_front_with_the_need(tmp_path, text):
    with pytest.raises(FileFormatError, match=r"needs about [0-9.e+]+ [KMGTPE]iB.*memory") as info:
        load_matrix(_write(tmp_path, text))
    assert info.value.line == 2


def test_counts_that_differ_from_the_size_line_name_the_line(tmp_path):
    with pytest.raises(FileFormatError, match="declares 2") as info:
        load_matrix(_write(tmp_path, _HEAD + "2 2 2\n1 1 1\n2 2 2\n1 2 3\n"))
    assert info.value.line == 5


def test_a_directory_is_named_as_one(tmp_path):
    d = tmp_path / "m.mtx"
    d.mkdir()
    with pytest.raises(FileFormatError, match="is a directory"):
        load_matrix(d)


@pytest.mark.parametrize(("text", "shape", "error"), [
    ("%%MatrixMarket matrix array real general\n0 3\n", (0, 3), None),  # scipy: SIGFPE
    ("%%MatrixMarket matrix array complex general\n0 0\n", (0, 0), None),
    ("%%MatrixMarket matrix array complex skew-symmetric\n2 2\n2 2\n\n0.0 0.0", None,
     "2 values where the size line declares 1"),  # scipy: SIGFPE
    ("%%MatrixMarket matrix array real general\n0 2\n1\n", None, "declares 0"),
])
def test_empty_and_overfull_arrays_never_reach_scipy(tmp_path, text, shape, error):
    path = _write(tmp_path, text)
    if error is None:
        A = load_matrix(path)
        assert A.shape == shape and A.nnz == 0
        assert A.dtype == (np.complex128 if "complex" in text else np.float64)
    else:
        with pytest.raises(FileFormatError, match=error):
            load_matrix(path)
