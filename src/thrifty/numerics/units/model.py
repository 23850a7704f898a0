"""The parameters of one fused step of a matrix unit (:class:`UnitModel`).

The meaning of each parameter is the policy stated in :mod:`thrifty.numerics.units`
(Fasi, Higham, Mikaitis and Pranesh, PeerJ Comput. Sci. 7, e330, 2021; Khattak and
Mikaitis, ACM TACO 2025). This module only holds the dataclass and checks its values.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from thrifty.errors import FormatError
from thrifty.numerics.formats import get_format

_ZERO_EXP = -(1 << 40)

SHIFTED_OUT = ("truncate", "round_down", "sticky")
ROUNDINGS = ("toward_zero", "nearest_even", "up", "down")
INTERLEAVE_PATTERNS = ("odd_even", "pairs")
#: Instructions a preset may model (NVIDIA PTX, AMD, Intel).
INSTRUCTIONS = ("mma.sync", "wgmma", "tcgen05.mma", "mfma", "tdpbf16ps")


@dataclass(frozen=True, slots=True)
class UnitModel:
    """Parameters of one fused step of a matrix unit (see the module docstring).

    Example
    -------
    >>> m = UnitModel("toy", input="bf16", output="fp32", fma=4, align_bits=0)
    >>> m.window_bits
    23
    """

    name: str
    input: str
    output: str
    fma: int
    align_bits: int | None = 0
    shifted_out: str = "truncate"
    carry_bits: int | None = None
    c_in_alignment: bool = True
    late_shifted_out: str = "truncate"
    interleave: bool = False
    normalize_bits: int | None = None
    rounding: str = "toward_zero"
    subnormals_in: bool = True
    subnormals_out: bool = True
    accumulator: str = "binary32"
    source: str = ""
    instruction: str = ""
    interleave_pattern: str = "odd_even"
    addend_last: bool = False
    zero_exp: int | None = None
    positive_zero: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not isinstance(self.source, str):
            raise FormatError(f"unit name and source must be strings, got {self.name!r} and "
                              f"{self.source!r}")
        object.__setattr__(self, "input", get_format(self.input).name)
        object.__setattr__(self, "output", get_format(self.output).name)
        object.__setattr__(self, "accumulator", get_format(self.accumulator).name)
        self._check_types()
        if self.fma < 1:
            raise FormatError(f"unit {self.name!r}: fma must be a positive int, got {self.fma!r}")
        for field_name, value in (("shifted_out", self.shifted_out),
                                  ("late_shifted_out", self.late_shifted_out)):
            if value not in SHIFTED_OUT:
                raise FormatError(f"unit {self.name!r}: {field_name}={value!r}; "
                                  f"valid: {', '.join(SHIFTED_OUT)}")
        if self.rounding not in ROUNDINGS:
            raise FormatError(f"unit {self.name!r}: rounding={self.rounding!r}; "
                              f"valid: {', '.join(ROUNDINGS)}")
        if self.window_bits is not None and self.window_bits < 0:
            raise FormatError(f"unit {self.name!r}: align_bits={self.align_bits} leaves a "
                              "negative window; it must be at least -(p_acc - 1)")
        if self.carry_bits is not None and (
                self.carry_bits < 0 or self.align_bits is None or not self.c_in_alignment):
            raise FormatError(f"unit {self.name!r}: carry_bits must be None, or >= 0 for a "
                              "finite window with c in the alignment")
        if self.normalize_bits is not None and self.normalize_bits < 1:
            raise FormatError(f"unit {self.name!r}: normalize_bits must be >= 1 or None")
        if self.interleave_pattern not in INTERLEAVE_PATTERNS:
            raise FormatError(f"unit {self.name!r}: interleave_pattern="
                              f"{self.interleave_pattern!r}; valid: "
                              f"{', '.join(INTERLEAVE_PATTERNS)}")
        if self.addend_last and (not self.c_in_alignment or self.window_bits is None):
            raise FormatError(f"unit {self.name!r}: addend_last needs a finite window with "
                              "c_in_alignment (c then joins after the products)")
        if self.zero_exp is not None and (isinstance(self.zero_exp, bool)
                                          or not isinstance(self.zero_exp, int)):
            raise FormatError(f"unit {self.name!r}: zero_exp must be an int or None, got "
                              f"{self.zero_exp!r}")
        if self.instruction and self.instruction not in INSTRUCTIONS:
            raise FormatError(f"unit {self.name!r}: instruction={self.instruction!r}; valid: "
                              f"{', '.join(INSTRUCTIONS)} (or '' for a user model)")

    def _check_types(self) -> None:
        """Integer fields hold ints (numpy ints converted), flags hold bools."""
        for f, optional in (("fma", False), ("align_bits", True), ("carry_bits", True),
                            ("normalize_bits", True)):
            v = getattr(self, f)
            if v is None and optional:
                continue
            if isinstance(v, bool | np.bool_) or not isinstance(v, int | np.integer):
                want = "an int or None" if optional else "a positive int"
                raise FormatError(f"unit {self.name!r}: {f} must be {want}, got {v!r}")
            object.__setattr__(self, f, int(v))
        for f in ("c_in_alignment", "interleave", "subnormals_in", "subnormals_out",
                  "addend_last", "positive_zero"):
            v = getattr(self, f)
            if not isinstance(v, bool | np.bool_):
                raise FormatError(f"unit {self.name!r}: {f} must be True or False, got {v!r}")
            object.__setattr__(self, f, bool(v))
        for f in ("shifted_out", "late_shifted_out", "rounding", "instruction",
                  "interleave_pattern"):
            if not isinstance(getattr(self, f), str):
                raise FormatError(f"unit {self.name!r}: {f} must be a string, got "
                                  f"{getattr(self, f)!r}")

    @property
    def window_bits(self) -> int | None:
        """``F``: fraction bits kept below the largest exponent (``None``: exact)."""
        if self.align_bits is None:
            return None
        return get_format(self.accumulator).precision - 1 + self.align_bits

    def describe(self) -> dict[str, object]:
        """The parameters as a JSON-ready dict."""
        return {f: getattr(self, f) for f in self.__slots__}  # type: ignore[attr-defined]

