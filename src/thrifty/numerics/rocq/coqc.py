"""Running ``coqc`` on the proof library and on exported files.

The library (the ``*.v`` files of this package, logical name ``Thrifty``) is compiled once
per process into a temporary folder; an exported file is then compiled against it.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from thrifty.errors import FormatError

#: The library's files, in dependency order.
LIBRARY = ("Formats", "Align", "Step", "Chain", "Dot", "Rational")
#: The axioms ``Print Assumptions`` may show for a proved theorem: those of Coq's standard
#: library of real numbers (classical Dedekind reals) and of functional extensionality,
#: which Flocq and Coq's ``Reals`` rest on.
STANDARD_AXIOMS = frozenset({
    "ClassicalDedekindReals.sig_not_dec", "ClassicalDedekindReals.sig_forall_dec",
    "FunctionalExtensionality.functional_extensionality_dep", "Classical_Prop.classic"})

_COMPILED: dict[tuple[str, str], Path] = {}


def library_dir() -> Path:
    """The folder holding the library's ``.v`` files (installed as package data)."""
    return Path(__file__).resolve().parent


def write_library(dest: str | Path) -> list[Path]:
    """Copy the library's ``.v`` files into ``dest``; compile them there with
    ``coqc -Q DEST Thrifty DEST/<name>.v`` in the order of :data:`LIBRARY`."""
    d = Path(dest)
    d.mkdir(parents=True, exist_ok=True)
    out = []
    for name in LIBRARY:
        target = d / f"{name}.v"
        shutil.copyfile(library_dir() / f"{name}.v", target)
        out.append(target)
    return out


def find_coqc(coqc: str | None = None) -> str:
    """The ``coqc`` executable, or :class:`FormatError` saying how to install it."""
    exe = coqc or shutil.which("coqc")
    if exe is None:
        raise FormatError("coqc is not installed; on Debian: apt-get install coq "
                          "libcoq-flocq")
    return exe


def _run(exe: str, args: list[str], cwd: Path, timeout: float) -> tuple[bool, str]:
    proc = subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd)
    return proc.returncode == 0, (proc.stdout + proc.stderr).strip()


def compile_library(coqc: str | None = None, timeout: float = 300.0) -> Path:
    """Compile the library (once per process and ``coqc``); the folder holding it.

    Raises
    ------
    FormatError
        When ``coqc`` is missing or rejects a library file (the message is coqc's).
    """
    exe = find_coqc(coqc)
    digest = hashlib.sha256(b"".join((library_dir() / f"{n}.v").read_bytes()
                                     for n in LIBRARY)).hexdigest()
    key = (exe, digest)
    if key in _COMPILED and all((_COMPILED[key] / f"{n}.vo").exists() for n in LIBRARY):
        return _COMPILED[key]
    d = Path(tempfile.mkdtemp(prefix="thrifty-rocq-"))
    write_library(d)
    for name in LIBRARY:
        ok, messages = _run(exe, ["-q", "-Q", str(d), "Thrifty", str(d / f"{name}.v")], d,
                            timeout)
        if not ok:
            raise FormatError(f"coqc rejected the library file {name}.v:\n{messages}")
    _COMPILED[key] = d
    return d


def check_with_coqc(text: str, coqc: str | None = None, timeout: float = 300.0
                    ) -> tuple[bool, str]:
    """Compile ``text`` with ``coqc`` against the library; ``(ok, messages)``.

    ``messages`` holds coqc's output, including what the file's ``Print Assumptions``
    commands print.

    Raises
    ------
    FormatError
        When ``coqc`` is not installed (Debian: ``apt-get install coq libcoq-flocq``).
    """
    exe = find_coqc(coqc)
    lib = compile_library(exe, timeout)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "thrifty_unit.v"
        path.write_text(text)
        return _run(exe, ["-q", "-Q", str(lib), "Thrifty", str(path)], Path(tmp), timeout)


def admitted_count(text: str) -> int:
    """How many proofs of a Coq text end in ``Admitted`` (or use ``admit``/``Axiom``)."""
    body = re.sub(r"\(\*.*?\*\)", "", text, flags=re.S)
    return len(re.findall(r"\b(?:Admitted\s*\.|admit\b|Axiom\b|Parameter\b)", body))


def assumptions(messages: str) -> list[set[str]]:
    """The axioms each ``Print Assumptions`` printed, in coqc's output order (an empty set
    for "Closed under the global context")."""
    out: list[set[str]] = []
    current: set[str] | None = None
    for line in messages.splitlines():
        if line.startswith("Closed under the global context"):
            out.append(set())
            current = None
        elif line.startswith("Axioms:"):
            current = set()
            out.append(current)
        elif current is not None and line and not line[0].isspace():
            current.add(line.split()[0])
    return out
