"""Sparse matrices in: files of the SuiteSparse collection, and generated large instances.

Reading follows the formats as the SuiteSparse Matrix Collection publishes them (Davis and
Hu, "The University of Florida Sparse Matrix Collection", ACM TOMS 38(1), 2011):

* Matrix Market ``.mtx`` / ``.mtx.gz``: every data line is checked against the format's
  grammar (:mod:`thrifty.front.matrix_market`), then parsed by :func:`scipy.io.mmread`;
  symmetric, skew-symmetric and Hermitian files are expanded to both triangles;
* MATLAB ``.mat`` through :func:`scipy.io.loadmat`, reading field ``A`` of the collection's
  ``Problem`` struct (a plain variable ``A`` is accepted too);
* Rutherford-Boeing / Harwell-Boeing (``.rb``, ``.hb``, and the type-named ``.rua``,
  ``.rsa``, ``.psa``, ``.cua`` ...) with a fixed-width reader of our own, following Duff,
  Grimes and Lewis, "The Rutherford-Boeing Sparse Matrix Collection" (RAL-TR-97-031, 1997):
  it reads the Fortran edit descriptors ``(16I5)``, ``(4E20.12)``, ``(1P,3D25.16)`` (with
  ``D`` exponents, which :func:`scipy.io.hb_read` rejects), pattern matrices (no values,
  which ``hb_read`` rejects too), and expands symmetric, skew-symmetric and Hermitian
  types.

Every loader returns a canonical :class:`scipy.sparse.csr_array` (sorted indices, duplicates
summed) of dtype float64, or complex128 for complex matrices; integer matrices become
float64, pattern matrices float64 with every stored value 1. Explicit zeros stored in a file
are kept as stored entries, so ``nnz`` counts the entries of the expanded matrix.

Generators: :func:`poisson2d` and :func:`poisson3d` (finite-difference Laplacians built with
Kronecker sums) and :func:`rmat` (the recursive-matrix power-law graph of Chakrabarti, Zhan
and Faloutsos, "R-MAT: A Recursive Model for Graph Mining", SDM 2004, drawn as in the
Graph500 generator), all vectorised.
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp

from thrifty.errors import FileFormatError, PatternError, ShapeError
from thrifty.front.matrix_market import read_matrix_market

__all__ = ["load_matrix", "poisson2d", "poisson3d", "rmat", "read_rutherford_boeing",
           "MATRIX_EXTENSIONS"]

#: File name endings :func:`load_matrix` understands.
MATRIX_EXTENSIONS: tuple[str, ...] = (
    ".mtx", ".mtx.gz", ".mat", ".rb", ".rb.gz", ".hb", ".hb.gz",
    ".r?a / .p?a / .c?a / .i?a (Rutherford-Boeing type codes, ? in u s h z r)",
)
_RB_TYPE_EXT = re.compile(r"^\.[rpci][ushzr]a$")


def load_matrix(path: str | Path) -> sp.csr_array:
    """Load a sparse matrix file as a canonical CSR array.

    Parameters
    ----------
    path:
        A ``.mtx``/``.mtx.gz`` Matrix Market file, a ``.mat`` file holding the SuiteSparse
        ``Problem`` struct, or a Rutherford-Boeing/Harwell-Boeing file (``.rb``, ``.hb``,
        ``.rua``, ``.rsa``, ``.psa``, ...; optionally gzipped).

    Returns
    -------
    scipy.sparse.csr_array
        float64, or complex128 for complex matrices. Symmetric storage is expanded.

    Raises
    ------
    FileFormatError
        The file is malformed (naming the file and, for text formats, the line), or its
        extension is not one listed in :data:`MATRIX_EXTENSIONS`.

    Example
    -------
    >>> A = load_matrix("../shared/data/matrices/HB/lap_25.rb")  # doctest: +SKIP
    >>> A.shape, A.nnz  # doctest: +SKIP
    ((25, 25), 169)
    """
    p = Path(path)
    if p.is_dir():
        raise FileFormatError(p, "is a directory, not a matrix file")
    if not p.is_file():
        raise FileFormatError(p, "no such file" if not p.exists() else "not a regular file")
    name = p.name.lower()
    stem_ext = Path(name[:-3]).suffix if name.endswith(".gz") else Path(name).suffix
    if name.endswith(".mtx") or name.endswith(".mtx.gz"):
        return read_matrix_market(p)
    if name.endswith(".mat"):
        return _read_mat(p)
    if stem_ext in (".rb", ".hb") or _RB_TYPE_EXT.match(stem_ext):
        return read_rutherford_boeing(p)
    raise FileFormatError(
        p, f"unknown matrix file extension {''.join(p.suffixes) or '(none)'!r}; "
        f"valid: {', '.join(MATRIX_EXTENSIONS)}")


def _canonical(A: object) -> sp.csr_array:
    """CSR with sorted indices and summed duplicates; float64 or complex128."""
    M = sp.csr_array(A)
    if np.iscomplexobj(M.data):
        M = M.astype(np.complex128)
    else:
        M = M.astype(np.float64)
    M.sum_duplicates()
    M.sort_indices()
    return M


# --- MATLAB ---------------------------------------------------------------------------------
def _read_mat(path: Path) -> sp.csr_array:
    import scipy.io
    import scipy.io.matlab

    try:
        data = scipy.io.loadmat(str(path), squeeze_me=True, struct_as_record=True)
    except NotImplementedError as exc:  # MATLAB v7.3 files are HDF5
        raise FileFormatError(
            path, f"{exc}; only MATLAB v4-v7.2 .mat files are read (save with -v7)") from exc
    except (ValueError, OSError, TypeError, scipy.io.matlab.MatReadError) as exc:
        raise FileFormatError(path, f"not a readable MATLAB .mat file: {exc}") from exc
    if "Problem" in data:
        problem = data["Problem"]
        names = problem.dtype.names or ()
        if "A" not in names:
            raise FileFormatError(
                path, f"the Problem struct has no field 'A' (fields: {', '.join(names)})")
        A = problem["A"][()]
    elif "A" in data:
        A = data["A"]
    else:
        found = sorted(k for k in data if not k.startswith("__"))
        raise FileFormatError(
            path, f"expected a SuiteSparse 'Problem' struct with field 'A' (or a variable "
            f"'A'); variables found: {', '.join(found) or 'none'}")
    if not (sp.issparse(A) or (isinstance(A, np.ndarray) and A.ndim == 2
                               and np.issubdtype(A.dtype, np.number))):
        raise FileFormatError(path, f"Problem.A is a {type(A).__name__}, not a 2-D matrix")
    return _canonical(A)


# --- Rutherford-Boeing / Harwell-Boeing -----------------------------------------------------
_FORTRAN_FORMAT = re.compile(
    r"^\(\s*(?:[+-]?\d+\s*P\s*,?\s*)?(\d*)\s*([IEDFG])\s*(\d+)(?:\s*\.\s*\d+)?"
    r"(?:\s*E\s*\d+)?\s*\)$", re.IGNORECASE)
_MISSING_EXPONENT = re.compile(r"(?<=[0-9.])([+-]\d+)$")  # Fortran's "1.5-100"


@dataclass(frozen=True, slots=True)
class FortranFormat:
    """A repeated fixed-width Fortran edit descriptor: ``repeat`` fields of ``width``.

    Example
    -------
    >>> FortranFormat.parse("(3D25.16)")
    FortranFormat(repeat=3, kind='D', width=25)
    """

    repeat: int
    kind: str  # I, E, D, F or G
    width: int

    @staticmethod
    def parse(text: str) -> FortranFormat:
        """Parse ``(16I5)``, ``(4E20.12)``, ``(1P,3D25.16)``, ``(1P5E16.8)``, ``(8F10.3)``."""
        m = _FORTRAN_FORMAT.match(text.strip())
        if not m:
            raise ValueError(
                f"unsupported Fortran format {text.strip()!r}; understood: (rIw), (rEw.d), "
                "(rDw.d), (rFw.d), (rGw.d), optionally with a scale factor such as 1P")
        repeat = int(m.group(1) or 1)
        width = int(m.group(3))
        if repeat < 1 or width < 1:
            raise ValueError(f"Fortran format {text.strip()!r} has a zero repeat or width")
        return FortranFormat(repeat, m.group(2).upper(), width)


def _open_text(path: Path) -> list[str]:
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="latin-1") as fh:
            return fh.read().splitlines()
    except (OSError, EOFError, zlib.error) as exc:
        raise FileFormatError(path, f"cannot read: {exc or type(exc).__name__}") from exc


def _header_ints(path: Path, text: str, lineno: int, what: str, least: int) -> list[int]:
    try:
        vals = [int(tok) for tok in text.split()]
    except ValueError:
        vals = []
    if len(vals) < least:
        raise FileFormatError(
            path, f"expected {what} ({least} or more integers), found {text.strip()!r}",
            lineno)
    return vals


def _parse_fields(path: Path, lines: Sequence[str], first_line: int, fmt: FortranFormat,
                  count: int, what: str, integer: bool) -> np.ndarray:
    """Read ``count`` values laid out ``fmt.repeat`` per line starting at ``first_line``.

    A vectorised pass handles well-formed sections; on any failure a line-by-line pass finds
    and names the offending line.
    """
    per = fmt.repeat * fmt.width
    needed = -(-count // fmt.repeat) if count else 0
    if len(lines) < needed:
        last = first_line + len(lines) - 1
        raise FileFormatError(
            path, f"the {what} section needs {needed} lines for {count} values, but the file "
            f"ends after line {last}", last)
    block = "".join(line.ljust(per)[:per] for line in lines[:needed])
    if not integer:
        block = block.replace("D", "E").replace("d", "e")
    try:
        raw = np.frombuffer(block.encode("latin-1"), dtype=f"S{fmt.width}")[:count]
        vals = raw.astype(np.int64 if integer else np.float64)
    except ValueError:
        return _parse_fields_slowly(path, lines, first_line, fmt, count, what, integer)
    return vals


def _parse_fields_slowly(path: Path, lines: Sequence[str], first_line: int,
                         fmt: FortranFormat, count: int, what: str,
                         integer: bool) -> np.ndarray:
    out: list[float | int] = []
    for k, line in enumerate(lines):
        lineno = first_line + k
        for j in range(fmt.repeat):
            if len(out) == count:
                break
            field = line[j * fmt.width:(j + 1) * fmt.width].strip()
            try:
                if integer:
                    out.append(int(field))
                else:
                    field = field.replace("D", "E").replace("d", "e")
                    if "E" not in field.upper():
                        field = _MISSING_EXPONENT.sub(r"E\1", field)
                    out.append(float(field))
            except ValueError:
                kind = "an integer" if integer else "a number"
                raise FileFormatError(
                    path, f"{what} field {j + 1} ({fmt.repeat} fields of width {fmt.width} per "
                    f"line) is {field!r}, not {kind}", lineno) from None
        if len(out) == count:
            break
    return np.asarray(out, dtype=np.int64 if integer else np.float64)


def read_rutherford_boeing(path: str | Path) -> sp.csr_array:
    """Read a Rutherford-Boeing or Harwell-Boeing assembled matrix with our own reader.

    The header gives card counts, the type code (``R``/``C``/``P``/``I`` for real, complex,
    pattern, integer; ``U``/``R``/``S``/``Z``/``H`` for unsymmetric, rectangular, symmetric,
    skew-symmetric, Hermitian; ``A`` for assembled), the shape and the Fortran formats; the
    body holds column pointers, row indices and values in columns of fixed width. A
    Harwell-Boeing right-hand-side block, if present, is skipped.

    Example
    -------
    >>> A = read_rutherford_boeing("../shared/data/matrices/HB/fs_183_6.rua")  # doctest: +SKIP
    >>> A.shape, A.nnz  # doctest: +SKIP
    ((183, 183), 1069)
    """
    p = Path(path)
    lines = _open_text(p)
    if len(lines) < 4:
        raise FileFormatError(
            p, f"a Rutherford-Boeing header has 4 lines; the file has {len(lines)}",
            max(len(lines), 1))
    cards = _header_ints(p, lines[1], 2, "card counts TOTCRD PTRCRD INDCRD VALCRD [RHSCRD]", 3)
    ptrcrd, indcrd = cards[1], cards[2]
    valcrd = cards[3] if len(cards) > 3 else 0
    rhscrd = cards[4] if len(cards) > 4 else 0
    mxtype = lines[2][:3].upper()
    if len(mxtype) != 3 or mxtype[0] not in "RCPI" or mxtype[1] not in "USHZR":
        raise FileFormatError(
            p, f"matrix type {lines[2][:3]!r} is not one of [RCPI][USHZR][AE] (e.g. RUA, PSA)",
            3)
    if mxtype[2] != "A":
        raise FileFormatError(
            p, f"matrix type {mxtype!r} is elemental; only assembled matrices (third letter "
            "'A') are read", 3)
    dims = _header_ints(p, lines[2][3:], 3, "NROW NCOL NNZERO [NELTVL]", 3)
    nrow, ncol, nnz = dims[:3]
    if min(nrow, ncol, nnz) < 0:
        raise FileFormatError(p, f"negative size in NROW NCOL NNZERO = {nrow} {ncol} {nnz}", 3)
    formats = re.findall(r"\([^)]*\)", lines[3])
    pattern = mxtype[0] == "P"
    if len(formats) < (2 if pattern or valcrd == 0 else 3):
        raise FileFormatError(
            p, f"expected Fortran formats for pointers, indices and values, found {lines[3]!r}",
            4)
    try:
        ptr_fmt = FortranFormat.parse(formats[0])
        ind_fmt = FortranFormat.parse(formats[1])
        val_fmt = FortranFormat.parse(formats[2]) if not pattern and valcrd > 0 else None
    except ValueError as exc:
        raise FileFormatError(p, str(exc), 4) from None
    start = 5 if rhscrd > 0 else 4  # 0-based index of the first body line
    ptr_line = start
    ptr = _parse_fields(p, lines[ptr_line:ptr_line + ptrcrd], ptr_line + 1, ptr_fmt, ncol + 1,
                        "column-pointer", integer=True)
    ind_line = ptr_line + ptrcrd
    ind = _parse_fields(p, lines[ind_line:ind_line + indcrd], ind_line + 1, ind_fmt, nnz,
                        "row-index", integer=True)
    _check_structure(p, ptr, ind, nrow, ncol, nnz, ptr_line, ptr_fmt, ind_line, ind_fmt)
    val_line = ind_line + indcrd
    if pattern:
        vals: np.ndarray = np.ones(nnz)
    elif val_fmt is None:
        raise FileFormatError(p, f"type {mxtype} needs values but VALCRD is 0", 2)
    else:
        complex_ = mxtype[0] == "C"
        raw = _parse_fields(p, lines[val_line:val_line + valcrd], val_line + 1, val_fmt,
                            2 * nnz if complex_ else nnz, "value",
                            integer=val_fmt.kind == "I")
        vals = (raw[0::2] + 1j * raw[1::2]) if complex_ else raw.astype(np.float64)
    cols = np.repeat(np.arange(ncol, dtype=np.int64), np.diff(ptr))
    rows = ind - 1
    return _expand_symmetric(rows, cols, vals, (nrow, ncol), mxtype[1])


def _check_structure(path: Path, ptr: np.ndarray, ind: np.ndarray, nrow: int, ncol: int,
                     nnz: int, ptr_line: int, ptr_fmt: FortranFormat, ind_line: int,
                     ind_fmt: FortranFormat) -> None:
    def line_of(first: int, fmt: FortranFormat, k: int) -> int:
        return first + 1 + k // fmt.repeat

    if ptr[0] != 1:
        raise FileFormatError(path, f"the first column pointer is {ptr[0]}, not 1",
                              ptr_line + 1)
    bad = np.flatnonzero(np.diff(ptr) < 0)
    if bad.size:
        k = int(bad[0]) + 1
        raise FileFormatError(
            path, f"column pointer {k + 1} ({ptr[k]}) is less than the one before ({ptr[k - 1]})",
            line_of(ptr_line, ptr_fmt, k))
    if ptr[-1] != nnz + 1:
        raise FileFormatError(
            path, f"the last column pointer is {ptr[-1]}; with NNZERO = {nnz} it must be "
            f"{nnz + 1}", line_of(ptr_line, ptr_fmt, ncol))
    bad = np.flatnonzero((ind < 1) | (ind > nrow))
    if bad.size:
        k = int(bad[0])
        raise FileFormatError(
            path, f"row index {ind[k]} (entry {k + 1}) is outside 1..{nrow}",
            line_of(ind_line, ind_fmt, k))


def _expand_symmetric(rows: np.ndarray, cols: np.ndarray, vals: np.ndarray,
                      shape: tuple[int, int], symmetry: str) -> sp.csr_array:
    """Add the mirrored off-diagonal entries of S (same), Z (negated), H (conjugated)."""
    if symmetry in "SZH":
        off = rows != cols
        mirrored = vals[off]
        if symmetry == "Z":
            mirrored = -mirrored
        elif symmetry == "H":
            mirrored = np.conj(mirrored)
        rows, cols = np.concatenate([rows, cols[off]]), np.concatenate([cols, rows[off]])
        vals = np.concatenate([vals, mirrored])
    return _canonical(sp.coo_array((vals, (rows, cols)), shape=shape))


# --- generators -----------------------------------------------------------------------------
def _check_size(name: str, value: object, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < least:
        raise ShapeError(f"{name} = {value!r}; it must be an integer >= {least}")
    return int(value)


def _laplacian_1d(n: int) -> sp.csr_array:
    """tridiag(-1, 2, -1) of order n (Dirichlet boundary)."""
    return sp.diags_array([-np.ones(n - 1), 2.0 * np.ones(n), -np.ones(n - 1)],
                          offsets=[-1, 0, 1], format="csr")


def poisson2d(n: int) -> sp.csr_array:
    """The 5-point Laplacian on an ``n`` x ``n`` grid: ``n*n`` unknowns, 4 on the diagonal.

    Built as the Kronecker sum ``I (x) T + T (x) I`` of the 1-D Dirichlet Laplacian ``T``;
    grid point ``(i, j)`` is unknown ``i*n + j``. Rows of interior points sum to zero.

    Example
    -------
    >>> A = poisson2d(3)
    >>> A.shape, A.nnz, A[4, 4], A[4].sum()
    ((9, 9), 33, np.float64(4.0), np.float64(0.0))
    """
    n = _check_size("poisson2d n", n, 1)
    T = _laplacian_1d(n)
    eye = sp.eye_array(n, format="csr")
    return _canonical(sp.kron(eye, T, format="csr") + sp.kron(T, eye, format="csr"))


def poisson3d(n: int) -> sp.csr_array:
    """The 7-point Laplacian on an ``n`` x ``n`` x ``n`` grid: ``n**3`` unknowns, 6 on the diagonal.

    Grid point ``(i, j, k)`` is unknown ``(i*n + j)*n + k``.

    Example
    -------
    >>> A = poisson3d(3)
    >>> A.shape, A.nnz, A[13].sum()
    ((27, 27), 135, np.float64(0.0))
    """
    n = _check_size("poisson3d n", n, 1)
    T = _laplacian_1d(n)
    eye = sp.eye_array(n, format="csr")
    eye2 = sp.eye_array(n * n, format="csr")
    return _canonical(sp.kron(eye2, T, format="csr")
                      + sp.kron(eye, sp.kron(T, eye, format="csr"), format="csr")
                      + sp.kron(T, eye2, format="csr"))


def rmat(scale: int, edge_factor: int = 16, a: float = 0.57, b: float = 0.19,
         c: float = 0.19, seed: int = 0, symmetric: bool = False,
         self_loops: bool = True) -> sp.csr_array:
    """An R-MAT power-law graph's adjacency matrix with ``2**scale`` vertices.

    ``edge_factor * 2**scale`` edges are drawn; each picks, bit by bit from the most
    significant, a quadrant of the adjacency matrix with probabilities ``a`` (top left),
    ``b`` (top right), ``c`` (bottom left) and ``d = 1 - a - b - c`` (bottom right), the
    Graph500 defaults. Duplicate edges are merged, every stored value is 1.0, so ``nnz`` is
    the number of distinct edges (at most the number drawn). Vertex 0 gets the most edges;
    vertex labels are not permuted.

    Parameters
    ----------
    scale, edge_factor:
        ``2**scale`` vertices and ``edge_factor * 2**scale`` drawn edges.
    a, b, c:
        Quadrant probabilities, each >= 0, with ``a + b + c <= 1``.
    seed:
        Seed of :func:`numpy.random.default_rng`; equal seeds give equal matrices.
    symmetric:
        Add the reverse of every edge (an undirected graph).
    self_loops:
        Keep drawn edges ``(v, v)``; ``False`` removes them (an empty diagonal).

    Example
    -------
    >>> A = rmat(10, edge_factor=8, seed=1)
    >>> A.shape, bool(A.nnz <= 8 * 1024), set(A.data.tolist())
    ((1024, 1024), True, {1.0})
    """
    scale = _check_size("rmat scale", scale, 0)
    edge_factor = _check_size("rmat edge_factor", edge_factor, 0)
    probs = {"a": a, "b": b, "c": c}
    for k, v in probs.items():
        if not (isinstance(v, (int, float, np.floating)) and 0.0 <= v <= 1.0):
            raise PatternError(f"rmat {k} = {v!r}; quadrant probabilities lie in [0, 1]")
    if a + b + c > 1.0 + 1e-12:
        raise PatternError(
            f"rmat a + b + c = {a + b + c!r} > 1; d = 1 - a - b - c must be >= 0")
    if scale > 31:
        raise ShapeError(f"rmat scale = {scale}; at most 31 (2**31 vertices)")
    n = 1 << scale
    m = edge_factor * n
    rng = np.random.default_rng(seed)
    vertex_dtype = np.int32 if scale <= 30 else np.int64
    rows: np.ndarray = np.zeros(m, dtype=vertex_dtype)
    cols: np.ndarray = np.zeros(m, dtype=vertex_dtype)
    ab, abc = a + b, a + b + c
    for _ in range(scale):  # one bit of row and column per level, most significant first
        u = rng.random(m, dtype=np.float32)
        np.left_shift(rows, 1, out=rows)
        np.left_shift(cols, 1, out=cols)
        bottom = u >= ab  # quadrant c or d
        np.bitwise_or(rows, bottom.view(np.uint8), out=rows)
        # right half (quadrant b or d): exactly one or all three of u >= a, ab, abc hold
        np.bitwise_or(cols, ((u >= a) ^ bottom ^ (u >= abc)).view(np.uint8), out=cols)
    if not self_loops:
        keep = rows != cols
        rows, cols = rows[keep], cols[keep]
    if symmetric:
        rows, cols = np.concatenate([rows, cols]), np.concatenate([cols, rows])
    keys = rows.astype(np.int64) * n + cols
    keys.sort()  # a sort and a mask: faster here than np.unique's hashing
    if keys.size:
        keys = keys[np.concatenate(([True], keys[1:] != keys[:-1]))]
    rows, cols = np.divmod(keys, n)
    index_dtype = np.int32 if max(n, keys.size) < 2**31 else np.int64
    indptr = np.zeros(n + 1, dtype=index_dtype)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    return sp.csr_array((np.ones(keys.size), cols.astype(index_dtype), indptr), shape=(n, n))
