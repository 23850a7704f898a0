"""Matrix files and generators: every shared matrix loads as INDEX.tsv says; the
Rutherford-Boeing reader agrees with scipy where scipy can read; generators against
hand-built references.

INDEX.tsv counts ``nnz`` as the entries of the *expanded* matrix (both triangles of a
symmetric one: HB/lap_25.rb stores 97 and INDEX says 169; HB/1138_bus.mtx stores 2596 and
INDEX says 4054), which is what ``load_matrix(...).nnz`` reports.
"""

from __future__ import annotations

import csv
import gzip
import itertools
from pathlib import Path

import numpy as np
import pytest
import scipy.io
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from thrifty.errors import FileFormatError, PatternError, ShapeError, ThriftyError
from thrifty.front.matrices import (
    FortranFormat,
    load_matrix,
    poisson2d,
    poisson3d,
    read_rutherford_boeing,
    rmat,
)
from thrifty.testing import assert_eq, require_shared_data, shared_data_dir


def _index_rows() -> list:
    root = shared_data_dir()
    index = root / "matrices" / "INDEX.tsv" if root else None
    if index is None or not index.exists():
        return [pytest.param(None, id="no-shared-data")]
    with open(index, newline="") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    return [pytest.param(r, id=r["file"]) for r in rows]


def _listed_files() -> set[str]:
    return {p.values[0]["file"] for p in _index_rows() if p.values[0]}


# --- every shared matrix ----------------------------------------------------------------------
@pytest.mark.needs_data
@pytest.mark.parametrize("row", _index_rows())
def test_every_indexed_matrix_loads_with_index_shape_and_nnz(row: dict | None) -> None:
    if row is None:
        require_shared_data("matrices", "INDEX.tsv")
    path = require_shared_data("matrices", row["file"])
    A = load_matrix(path)
    assert isinstance(A, sp.csr_array)
    assert A.shape == (int(row["rows"]), int(row["cols"]))
    assert A.nnz == int(row["nnz"])
    assert A.dtype in (np.float64, np.complex128)
    assert A.has_canonical_format
    if row["symmetric/kind"].startswith("symmetric"):
        assert abs(A - A.T).max() == 0, "symmetric storage must be expanded"
    if "pattern" in row["symmetric/kind"]:
        assert set(np.unique(A.data).tolist()) == {1.0}


@pytest.mark.needs_data
def test_every_matrix_file_is_in_the_index() -> None:
    root = require_shared_data("matrices")
    files = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()
             and p.name != "INDEX.tsv"}
    assert files == _listed_files()


# --- Rutherford-Boeing against scipy ----------------------------------------------------------
@pytest.mark.needs_data
def test_rb_reader_agrees_with_hb_read_and_mmread_on_west0479() -> None:
    rb = require_shared_data("matrices", "HB", "west0479.rb")
    mtx = require_shared_data("matrices", "HB", "west0479.mtx")
    ours = read_rutherford_boeing(rb)
    assert_eq(ours, scipy.io.hb_read(str(rb)), rtol=0)
    assert_eq(ours, scipy.io.mmread(str(mtx)), rtol=0)


@pytest.mark.needs_data
def test_rb_reader_reads_d_exponents_like_hb_read_reads_e_exponents(tmp_path: Path) -> None:
    """scipy rejects fs_183_6.rua's (4D20.12); the same file with E exponents it reads.

    (scipy's reader also needs lines without the trailing blanks of 80-column cards.)
    """
    src = require_shared_data("matrices", "HB", "fs_183_6.rua")
    lines = [ln.rstrip() for ln in src.read_text().splitlines()]
    as_e = lines[:4] + [ln.replace("D", "E") for ln in lines[4:]]
    as_e[3] = as_e[3].replace("(4D20.12)", "(4E20.12)")
    copy = tmp_path / "fs_183_6_E.rua"
    copy.write_text("\n".join(as_e) + "\n")
    with pytest.raises(Exception, match="Unknown character"):  # scipy's BadFortranFormat
        scipy.io.hb_read(str(src))
    assert_eq(load_matrix(src), scipy.io.hb_read(str(copy)), rtol=0)


@pytest.mark.needs_data
def test_lap_25_is_the_nine_point_pattern_of_a_5x5_grid() -> None:
    """lap_25.rb (psa: pattern, symmetric, lower triangle stored) against the grid."""
    A = load_matrix(require_shared_data("matrices", "HB", "lap_25.rb"))
    pts = list(itertools.product(range(5), range(5)))
    expected = np.array([[1.0 if max(abs(i - k), abs(j - l)) <= 1 else 0.0
                          for (k, l) in pts] for (i, j) in pts])
    assert_eq(A, expected, rtol=0)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_rb_reader_reads_what_hb_write_writes(tmp_path: Path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    M = sp.random_array((40, 30), density=0.1, rng=rng, format="csc")
    path = tmp_path / "m.rua"
    scipy.io.hb_write(str(path), M)
    assert_eq(load_matrix(path), M, rtol=0)


def _rb_file(title: str, mxtype: str, shape: tuple[int, int], colptr: list[int],
             rowind: list[int], values: list[str] | None, valfmt: str = "(3D25.16)",
             rhs: list[str] | None = None) -> str:
    """A Rutherford-Boeing file written by hand, one value per field as given.

    With ``rhs``, a Harwell-Boeing file with a right-hand-side block (line 5 and one card).
    """
    nrow, ncol = shape
    ptr = "".join(f"{p:5d}" for p in colptr)
    ind = "".join(f"{r:5d}" for r in rowind)
    per = int(valfmt[1])
    width = int(valfmt.split("D")[1].split(".")[0]) if "D" in valfmt else 20
    val_lines = [] if values is None else [
        "".join(f"{v:>{width}}" for v in values[i:i + per]) for i in range(0, len(values), per)]
    nnz = len(rowind)
    cards = f"{1 + 1 + len(val_lines):14d}{1:14d}{1:14d}{len(val_lines):14d}"
    lines = [f"{title:<72}{'KEY':<8}",
             cards + (f"{1:14d}" if rhs else ""),
             f"{mxtype:<3}{'':11}{nrow:14d}{ncol:14d}{nnz:14d}{0:14d}",
             f"{'(16I5)':<16}{'(16I5)':<16}{valfmt if values is not None else '':<20}"
             + ("(3D25.16)" if rhs else "")]
    if rhs:
        lines.append(f"{'F':<3}{'':11}{1:14d}{0:14d}")
    lines += [ptr, ind, *val_lines]
    if rhs:
        lines.append("".join(f"{v:>25}" for v in rhs))
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(("mxtype", "values", "expected"), [
    ("rsa", ["4.0D0", "-1.0D0", "3.0D0"], [[4, -1], [-1, 3]]),
    ("rza", ["0.0D0", "2.5D+00", "0.0D0"], [[0, -2.5], [2.5, 0]]),
    ("rua", ["4.0D0", "-1.0D0", "3.0D0"], [[4, 0], [-1, 3]]),
    ("psa", None, [[1, 1], [1, 1]]),
    ("pua", None, [[1, 0], [1, 1]]),
    ("rsa", ["4.0-100", "-1.0D0", "3.0D0"], [[4e-100, -1], [-1, 3]]),  # Fortran "4.0-100"
])
def test_rb_symmetry_types_expand(tmp_path: Path, mxtype: str, values: list[str] | None,
                                  expected: list[list[float]]) -> None:
    """A 2x2 with entries (1,1), (2,1), (2,2) stored: the lower triangle."""
    path = tmp_path / f"m.{mxtype}"
    path.write_text(_rb_file("hand", mxtype.upper(), (2, 2), [1, 3, 4], [1, 2, 2], values))
    A = load_matrix(path)
    assert A.dtype == np.float64
    assert_eq(A, np.array(expected, dtype=float), rtol=0)


def test_hb_right_hand_side_block_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "m.rua"
    path.write_text(_rb_file("with rhs", "RUA", (2, 2), [1, 3, 4], [1, 2, 2],
                             ["4.0D0", "-1.0D0", "3.0D0"], rhs=["1.0D0", "2.0D0"]))
    assert_eq(load_matrix(path), np.array([[4.0, 0.0], [-1.0, 3.0]]), rtol=0)


def test_complex_mat_file_stays_complex(tmp_path: Path) -> None:
    M = sp.csc_array(np.array([[1 + 2j, 0], [0, -3j]]))
    scipy.io.savemat(tmp_path / "c.mat", {"Problem": {"A": M}})
    A = load_matrix(tmp_path / "c.mat")
    assert A.dtype == np.complex128
    assert_eq(A, M, rtol=0)


def test_rb_complex_hermitian_expands_with_conjugates(tmp_path: Path) -> None:
    values = ["2.0D0", "0.0D0", "1.0D0", "3.0D0", "5.0D0", "0.0D0"]  # re, im pairs
    path = tmp_path / "m.cha"
    path.write_text(_rb_file("herm", "CHA", (2, 2), [1, 3, 4], [1, 2, 2], values,
                             valfmt="(2D25.16)"))
    A = load_matrix(path)
    assert A.dtype == np.complex128
    assert_eq(A, np.array([[2, 1 - 3j], [1 + 3j, 5]]), rtol=0)


@pytest.mark.parametrize(("text", "expected"), [
    ("(16I5)", FortranFormat(16, "I", 5)),
    ("(26I3)", FortranFormat(26, "I", 3)),
    ("(4E20.12)", FortranFormat(4, "E", 20)),
    ("(3D25.16)", FortranFormat(3, "D", 25)),
    ("(1P,4E20.12)", FortranFormat(4, "E", 20)),
    ("(1P5E16.8)", FortranFormat(5, "E", 16)),
    ("(8F10.3)", FortranFormat(8, "F", 10)),
    ("(E25.16E3)", FortranFormat(1, "E", 25)),
])
def test_fortran_formats_parse(text: str, expected: FortranFormat) -> None:
    assert FortranFormat.parse(text) == expected


@pytest.mark.parametrize("text", ["(A10)", "16I5", "(5(1X,E15.7))", "(0I5)"])
def test_unsupported_fortran_formats_say_what_is_understood(text: str) -> None:
    with pytest.raises(ValueError, match="understood|zero repeat"):
        FortranFormat.parse(text)


# --- malformed files name the file and the line -----------------------------------------------
def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def _good_rb() -> str:
    return _rb_file("ok", "RUA", (2, 2), [1, 3, 4], [1, 2, 2], ["4.0D0", "-1.0D0", "3.0D0"])


@pytest.mark.parametrize(("mutate", "line", "message"), [
    (lambda ls: ls[:5], 5, "ends after line 5"),                          # truncated
    (lambda ls: ls[:6] + ["  4.0D0   garbage!!!         -1.0D0"], 7, "not a number"),
    (lambda ls: ls[:5] + ["    1    9    2"] + ls[6:], 6, "outside 1..2"),  # row index 9
    (lambda ls: ls[:4] + ["    1    3    2"] + ls[5:], 5, "less than"),     # pointers fall
    (lambda ls: ls[:4] + ["    2    3    4"] + ls[5:], 5, "first column pointer"),
    (lambda ls: ls[:2] + ["XYZ" + ls[2][3:]] + ls[3:], 3, "matrix type"),
    (lambda ls: ls[:2] + ["RUE" + ls[2][3:]] + ls[3:], 3, "elemental"),
    (lambda ls: ls[:1] + ["  four cards"] + ls[2:], 2, "card counts"),
    (lambda ls: ls[:3] + ["(16I5)          (A7)            (3D25.16)"] + ls[4:], 4,
     "unsupported Fortran format"),
    (lambda ls: ls[:3], 3, "header has 4 lines"),
])
def test_malformed_rb_names_file_and_line(tmp_path: Path, mutate, line: int,
                                          message: str) -> None:
    path = _write(tmp_path, "bad.rua", "\n".join(mutate(_good_rb().splitlines())) + "\n")
    with pytest.raises(FileFormatError, match=message) as info:
        load_matrix(path)
    assert info.value.line == line
    assert str(path) in str(info.value) and f"line {line}" in str(info.value)


def test_the_hand_written_rb_file_is_good(tmp_path: Path) -> None:
    """The base of the malformed cases above reads correctly."""
    A = load_matrix(_write(tmp_path, "ok.rua", _good_rb()))
    assert_eq(A, np.array([[4.0, 0.0], [-1.0, 3.0]]), rtol=0)


_MTX = ("%%MatrixMarket matrix coordinate real general\n% a comment\n3 3 4\n"
        "1 1 1.5\n2 1 -2\n3 2 4e-3\n3 3 7\n")


@pytest.mark.parametrize(("mutate", "line", "message"), [
    (lambda s: s.replace("3 2 4e-3", "3 x 4e-3"), 6, "Matrix Market"),
    (lambda s: s.replace("3 2 4e-3", "3 9 4e-3"), 6, "out of bounds"),
    (lambda s: s.replace("3 3 7\n", ""), 6, "ends after line 6"),
    (lambda s: s.replace("coordinate real", "coordinate reel"), 1, "header"),
])
def test_malformed_matrix_market_names_file_and_line(tmp_path: Path, mutate, line: int,
                                                     message: str) -> None:
    path = _write(tmp_path, "bad.mtx", mutate(_MTX))
    with pytest.raises(FileFormatError, match=message) as info:
        load_matrix(path)
    assert info.value.line == line
    assert str(path) in str(info.value)


def test_matrix_market_plain_and_gzipped_agree_with_a_dense_reference(tmp_path: Path) -> None:
    expected = np.array([[1.5, 0, 0], [-2, 0, 0], [0, 4e-3, 7]])
    plain = _write(tmp_path, "m.mtx", _MTX)
    zipped = tmp_path / "m.mtx.gz"
    with gzip.open(zipped, "wt") as fh:
        fh.write(_MTX)
    assert_eq(load_matrix(plain), expected, rtol=0)
    assert_eq(load_matrix(zipped), expected, rtol=0)


@pytest.mark.parametrize(("header", "body", "expected"), [
    ("complex hermitian", "2 2 2\n1 1 1 0\n2 1 2 3\n", [[1, 2 - 3j], [2 + 3j, 0]]),
    ("integer symmetric", "2 2 2\n1 1 5\n2 1 -7\n", [[5, -7], [-7, 0]]),
    ("pattern general", "2 2 2\n1 2\n2 1\n", [[0, 1], [1, 0]]),
    ("real skew-symmetric", "2 2 1\n2 1 2.5\n", [[0, -2.5], [2.5, 0]]),
])
def test_matrix_market_fields_and_symmetries(tmp_path: Path, header: str, body: str,
                                             expected: list) -> None:
    path = _write(tmp_path, "m.mtx", f"%%MatrixMarket matrix coordinate {header}\n{body}")
    A = load_matrix(path)
    assert A.dtype == (np.complex128 if "complex" in header else np.float64)
    assert_eq(A, np.array(expected), rtol=0)


def test_mat_file_problem_struct_plain_a_and_missing_a(tmp_path: Path) -> None:
    M = sp.csc_array(np.array([[0.0, 2.0], [3.0, 0.0]]))
    scipy.io.savemat(tmp_path / "p.mat", {"Problem": {"A": M, "name": "t/p"}})
    scipy.io.savemat(tmp_path / "a.mat", {"A": M})
    scipy.io.savemat(tmp_path / "b.mat", {"B": M})
    assert_eq(load_matrix(tmp_path / "p.mat"), M, rtol=0)
    assert_eq(load_matrix(tmp_path / "a.mat"), M, rtol=0)
    with pytest.raises(FileFormatError, match="variables found: B"):
        load_matrix(tmp_path / "b.mat")


def test_garbage_mat_file_is_a_file_format_error(tmp_path: Path) -> None:
    with pytest.raises(FileFormatError, match="bad.mat"):
        load_matrix(_write(tmp_path, "bad.mat", "this is not MATLAB"))


@pytest.mark.parametrize("name", ["m.txt", "m.csv", "m"])
def test_unknown_extension_lists_the_valid_ones(tmp_path: Path, name: str) -> None:
    with pytest.raises(FileFormatError, match=r"\.mtx.*\.mat.*\.rb"):
        load_matrix(_write(tmp_path, name, "1 2 3\n"))


def test_missing_file_is_a_thrifty_error(tmp_path: Path) -> None:
    with pytest.raises(ThriftyError, match="no such file"):
        load_matrix(tmp_path / "absent.mtx")


# --- generators -------------------------------------------------------------------------------
def _grid_laplacian(n: int, dims: int) -> np.ndarray:
    """Dense reference: 2*dims on the diagonal, -1 for each grid neighbour."""
    pts = list(itertools.product(range(n), repeat=dims))
    index = {p: i for i, p in enumerate(pts)}
    A = np.zeros((len(pts), len(pts)))
    for p, i in index.items():
        A[i, i] = 2 * dims
        for d in range(dims):
            for step in (-1, 1):
                q = list(p)
                q[d] += step
                if tuple(q) in index:
                    A[i, index[tuple(q)]] = -1
    return A


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_poisson2d_matches_the_grid_definition(n: int) -> None:
    A = poisson2d(n)
    assert_eq(A, _grid_laplacian(n, 2), rtol=0)
    assert A.nnz == 5 * n * n - 4 * n
    assert A.has_canonical_format and A.dtype == np.float64


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_poisson3d_matches_the_grid_definition(n: int) -> None:
    A = poisson3d(n)
    assert_eq(A, _grid_laplacian(n, 3), rtol=0)
    assert A.nnz == 7 * n ** 3 - 6 * n ** 2


@pytest.mark.parametrize(("gen", "n", "dims"), [(poisson2d, 6, 2), (poisson3d, 5, 3)])
def test_poisson_is_symmetric_and_interior_rows_sum_to_zero(gen, n: int, dims: int) -> None:
    A = gen(n)
    assert abs(A - A.T).max() == 0
    row_sums = np.asarray(A.sum(axis=1)).ravel()
    coords = np.array(list(itertools.product(range(n), repeat=dims)))
    interior = np.all((coords > 0) & (coords < n - 1), axis=1)
    assert np.all(row_sums[interior] == 0)
    assert np.all(row_sums[~interior] > 0)


def _rmat_reference(scale: int, edge_factor: int, a: float, b: float, c: float, seed: int,
                    symmetric: bool, self_loops: bool) -> set[tuple[int, int]]:
    """Edge by edge and bit by bit, from the same random stream as the generator."""
    rng = np.random.default_rng(seed)
    m = edge_factor * (1 << scale)
    levels = [rng.random(m, dtype=np.float32) for _ in range(scale)]
    edges = set()
    for e in range(m):
        r = col = 0
        for lv in levels:
            u = lv[e]
            quadrant = 0 if u < a else 1 if u < a + b else 2 if u < a + b + c else 3
            r, col = 2 * r + quadrant // 2, 2 * col + quadrant % 2
        if self_loops or r != col:
            edges.add((r, col))
            if symmetric:
                edges.add((col, r))
    return edges


@settings(max_examples=25, deadline=None)
@given(scale=st.integers(0, 6), edge_factor=st.integers(0, 6), seed=st.integers(0, 2**32 - 1),
       symmetric=st.booleans(), self_loops=st.booleans(),
       abc=st.sampled_from([(0.57, 0.19, 0.19), (0.25, 0.25, 0.25), (0.45, 0.15, 0.15),
                            (1.0, 0.0, 0.0)]))
def test_rmat_matches_the_edge_by_edge_reference(scale, edge_factor, seed, symmetric,
                                                 self_loops, abc) -> None:
    a, b, c = abc
    A = rmat(scale, edge_factor, a, b, c, seed=seed, symmetric=symmetric,
             self_loops=self_loops)
    coo = A.tocoo()
    assert set(zip(coo.row.tolist(), coo.col.tolist())) == _rmat_reference(
        scale, edge_factor, a, b, c, seed, symmetric, self_loops)
    assert A.shape == (1 << scale, 1 << scale)
    assert A.has_canonical_format and np.all(A.data == 1.0)


def test_rmat_is_deterministic_for_a_seed_and_differs_across_seeds() -> None:
    A, B, C = rmat(10, seed=3), rmat(10, seed=3), rmat(10, seed=4)
    assert (A != B).nnz == 0
    assert (A != C).nnz > 0


def test_rmat_options_symmetric_and_no_self_loops() -> None:
    A = rmat(9, 8, seed=1, symmetric=True, self_loops=False)
    assert abs(A - A.T).max() == 0
    assert A.diagonal().sum() == 0
    assert A.nnz <= 2 * 8 * 512


def test_rmat_degrees_are_skewed_unlike_a_uniform_graph() -> None:
    skewed = np.diff(rmat(14, 16, seed=0).indptr)
    uniform = np.diff(rmat(14, 16, 0.25, 0.25, 0.25, seed=0).indptr)
    assert skewed.max() > 20 * skewed.mean()
    assert uniform.max() < 3 * uniform.mean()
    assert np.argmax(skewed) == 0  # quadrant a is the top-left: vertex 0 gets the most


@pytest.mark.parametrize(("call", "error", "message"), [
    (lambda: poisson2d(0), ShapeError, "poisson2d n = 0"),
    (lambda: poisson3d(2.5), ShapeError, "integer >= 1"),
    (lambda: rmat(-1), ShapeError, "scale = -1"),
    (lambda: rmat(40), ShapeError, "at most 31"),
    (lambda: rmat(4, a=0.6, b=0.3, c=0.3), PatternError, "a \\+ b \\+ c"),
    (lambda: rmat(4, a=-0.1), PatternError, "rmat a = -0.1"),
])
def test_generator_arguments_are_checked(call, error, message: str) -> None:
    with pytest.raises(error, match=message):
        call()
