"""Validation against measured tensor-core outputs: reading the files, counting matches.

File format: ../shared/data/README.md (tensorcore section): ``a_*``/``b_*`` hold binary32
bit patterns in hex, ``c_*``/``d_*_{fp32,fp16}`` one 32-character bit string per case.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from thrifty.errors import FileFormatError, FormatError
from thrifty.numerics.formats import Format, get_format
from thrifty.numerics.units.engine import Unit
from thrifty.numerics.units.exact import decompose, round_scaled

_FILE_FORMATS = {"fp16": "binary16", "bf16": "bfloat16", "tf32": "tensorfloat32",
                 "e4m3": "float8_e4m3fn", "e5m2": "float8_e5m2", "fp32": "binary32"}


@dataclass(frozen=True, slots=True)
class ValidationSet:
    """One folder of measured cases: inputs, addends and the results the GPU returned."""

    folder: Path
    input: str
    a: np.ndarray
    b: np.ndarray
    c: np.ndarray
    d: dict[str, np.ndarray]


def _text_lines(path: Path) -> list[str]:
    """The lines of an ASCII text file, or :class:`FileFormatError` naming the file."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise FileFormatError(path, f"cannot read it ({e.strerror or e})") from None
    try:
        return data.decode("ascii").splitlines()
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise FileFormatError(path, f"not a text file of bit patterns (byte 0x{data[e.start]:02x} "
                              "is not ASCII)", line=line) from None


_HEX_WORD = re.compile(r"[0-9a-fA-F]{1,8}")


def _read_hex_words(path: Path) -> np.ndarray:
    rows: list[list[int]] = []
    width = None
    for lineno, line in enumerate(_text_lines(path), 1):
        words = line.split()
        if not words:
            continue
        if width is None:
            width = len(words)
        if len(words) != width:
            raise FileFormatError(path, f"{len(words)} values, expected {width} like "
                                  "line 1", line=lineno)
        if not all(_HEX_WORD.fullmatch(w) for w in words):
            raise FileFormatError(path, "expected hexadecimal binary32 bit patterns of at "
                                  "most 8 hex digits, such as 3f800000", line=lineno)
        rows.append([int(w, 16) for w in words])
    if not rows:
        raise FileFormatError(path, "no cases")
    return np.array(rows, dtype=np.uint32).view(np.float32).astype(np.float64)


def _read_bit_strings(path: Path) -> np.ndarray:
    vals: list[int] = []
    for lineno, line in enumerate(_text_lines(path), 1):
        s = line.strip()
        if not s:
            continue
        if len(s) != 32 or set(s) - {"0", "1"}:
            raise FileFormatError(path, "expected a 32-character string of 0s and 1s "
                                  "(a binary32 bit pattern)", line=lineno)
        vals.append(int(s, 2))
    if not vals:
        raise FileFormatError(path, "no cases")
    return np.array(vals, dtype=np.uint32).view(np.float32).astype(np.float64)


def load_validation_set(folder: str | Path) -> ValidationSet:
    """Read the ``a_*``, ``b_*``, ``c_*`` and ``d_*_{fp32,fp16}`` files of one folder.

    File format: ../shared/data/README.md (tensorcore section).

    Raises
    ------
    FileFormatError
        For a missing or malformed file, naming the file and the line.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise FileFormatError(folder, "not a folder of a_*/b_*/c_*/d_* files")

    def one(prefix: str) -> Path:
        found = sorted(folder.glob(f"{prefix}_*.txt"))
        if len(found) != 1:
            raise FileFormatError(folder, f"expected one {prefix}_*.txt file, found "
                                  f"{len(found)}")
        return found[0]

    pa, pb, pc = one("a"), one("b"), one("c")
    m = re.match(r"a_.+_([A-Za-z0-9]+)\.txt$", pa.name)
    key = m.group(1).lower() if m else ""
    if key not in _FILE_FORMATS:
        raise FileFormatError(pa, f"cannot tell the input format from the name; expected "
                              f"a_<gpu>_<{'|'.join(_FILE_FORMATS)}>.txt")
    a, b, c = _read_hex_words(pa), _read_hex_words(pb), _read_bit_strings(pc)
    d: dict[str, np.ndarray] = {}
    for pd in sorted(folder.glob("d_*.txt")):
        mo = re.match(r"d_.+_(fp32|fp16)\.txt$", pd.name)
        if mo is None:
            raise FileFormatError(pd, "expected a name d_<gpu>_<fp32|fp16>.txt")
        d[_FILE_FORMATS[mo.group(1)]] = _read_bit_strings(pd)
    if not d:
        raise FileFormatError(folder, "no d_*_fp32.txt or d_*_fp16.txt result file")
    if a.shape != b.shape:
        raise FileFormatError(pb, f"{b.shape[0]} cases of {b.shape[1]} values; {pa.name} "
                              f"has {a.shape[0]} of {a.shape[1]}")
    for path, arr in [(pc, c)] + [(folder / f"d_*_{k}", v) for k, v in d.items()]:
        if arr.shape[0] != a.shape[0]:
            raise FileFormatError(path, f"{arr.shape[0]} lines; {pa.name} has {a.shape[0]}")
    return ValidationSet(folder, _FILE_FORMATS[key], a, b, c, d)


@dataclass(frozen=True, slots=True)
class ValidationReport:
    """Bit-exact comparison of a unit with measured results."""

    unit: str
    input: str
    output: str
    folder: str
    cases: int
    matched: int
    mismatches: tuple[int, ...]

    def to_json(self) -> dict[str, object]:
        return {"unit": self.unit, "input": self.input, "output": self.output,
                "folder": self.folder, "cases": self.cases, "matched": self.matched,
                "first_mismatches": list(self.mismatches[:20])}


def _bits32(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=np.float32).view(np.uint32)


#: Where a measured file's addend came from: its ``c_*`` file, or zero. Khattak and
#: Mikaitis's ``Validate_TC_models.m``: their H100 and H200 FP8 files were measured as
#: ``D = A*B + D`` from a zero ``D`` (their ``c_*`` files are not the addend used).
ADDENDS = ("file", "zero")


def validate(u: Unit, data: ValidationSet, addend: str = "file") -> ValidationReport:
    """Run ``u`` on every case of ``data`` and count bit-exact matches (NaNs match NaNs).

    The addend ``c`` is read in the unit's output format (for binary16 outputs it is first
    rounded to binary16 by nearest-even, as a binary16 accumulator register holds it).
    ``addend="zero"`` runs every case with ``c = 0`` instead (see :data:`ADDENDS`).
    """
    if addend not in ADDENDS:
        raise FormatError(f"addend {addend!r}; valid: {', '.join(ADDENDS)} (how the "
                          "measured file's addend was produced)")
    out = u.model.output
    if out not in data.d:
        raise FileFormatError(data.folder, f"no measured results for output {out}; "
                              f"available: {', '.join(data.d)}")
    c = data.c if addend == "file" else np.zeros_like(data.c)
    if out != "binary32":
        c = _to_format(c, get_format(out))
    got = u.dot(data.a, data.b, c)
    want = data.d[out]
    same = (_bits32(got) == _bits32(want)) | (np.isnan(got) & np.isnan(want))
    bad = tuple(int(i) for i in np.flatnonzero(~same))
    return ValidationReport(u.name, u.model.input, out, str(data.folder), int(got.size),
                            int(same.sum()), bad)


def _to_format(x: np.ndarray, fmt: Format) -> np.ndarray:
    """Round binary32 values to ``fmt`` by nearest-even (exact integer rounding)."""
    fin = np.isfinite(x)
    m, e, neg = decompose(np.where(fin, x, 0.0), get_format("binary32"), True, "c")
    S = np.where(neg, -m, m)
    r = round_scaled(S, e - 23, fmt, "nearest_even")
    return np.where(fin, np.where((S == 0) & neg, -0.0, r), x)

