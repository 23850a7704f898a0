"""Rocq (Coq) proofs of matrix-unit error bounds, and their export per unit.

The ``*.v`` files of this package are a proof library (logical name ``Thrifty``, over
Flocq): formats as FLT formats (``Formats.v``), the aligned sum of a fused step
(``Align.v``), one step and its error (``Step.v``), the chain of steps of a dot product
and its a priori bound (``Chain.v``), dot and matrix products of a unit (``Dot.v``), and
the bound's constants as exact rationals (``Rational.v``). :func:`export_unit` writes a
per-unit file that instantiates them (see :mod:`thrifty.numerics.rocq.export`);
:func:`check_with_coqc` compiles it against the library.
"""

from thrifty.numerics.rocq.coqc import (
    LIBRARY,
    STANDARD_AXIOMS,
    admitted_count,
    assumptions,
    check_with_coqc,
    compile_library,
    library_dir,
    write_library,
)
from thrifty.numerics.rocq.export import export_unit, format_section, proof_gap

__all__ = ["LIBRARY", "STANDARD_AXIOMS", "admitted_count", "assumptions", "check_with_coqc",
           "compile_library", "export_unit", "format_section", "library_dir", "proof_gap",
           "write_library"]
