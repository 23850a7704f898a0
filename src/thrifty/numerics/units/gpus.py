"""The preset matrix units as data: one table per architecture, each parameter with its source.

Sources, abbreviated in the tables:

* ``KM <file>``: Khattak and Mikaitis, "Accurate models of NVIDIA tensor cores" (ACM TACO,
  2025), MATLAB toolbox ``north-numerical-computing/MATLAB-tensor-core``, ``models/<file>``
  (its ``CDNA*.m`` files for AMD).
* ``FHMP``: Fasi, Higham, Mikaitis and Pranesh, "Numerical behavior of NVIDIA tensor
  cores", PeerJ Comput. Sci. 7, e330 (2021).
* ``measured <folder>``: fitted to, and bit-exact on, the measured GPU outputs in
  ``../shared/data/tensorcore/<folder>``.
* ``Intel ISE``: Intel Architecture Instruction Set Extensions Reference, ``TDPBF16PS``.

A table's ``validated`` lists the measured folders on which every configuration it names
is bit-exact (tests/numerics/test_units.py); configurations without measured data follow
the published parameters. The field meanings are those of :class:`.model.UnitModel`.
"""

from __future__ import annotations

from thrifty.numerics.units.presets import ArchTable, Config, Param, Refusal

P = Param

F16, BF16, TF32 = "binary16", "bfloat16", "tensorfloat32"
E4M3, E5M2 = "float8_e4m3fn", "float8_e5m2"
FP8 = (E4M3, E5M2)
F32_OUT, F16_OUT, BOTH_OUT = ("binary32",), ("binary16",), ("binary32", "binary16")

_KM = "KM "
_ADA_NORM = "measured Ada/E4M3, Ada/E5M2 (a 14-bit normaliser, p_acc + align_bits)"
_RTZ = "toward_zero"
_RNE = "nearest_even"
_WIDE_ONLY = "these inputs accumulate in binary32 only"

V100 = ArchTable(
    name="v100", hardware="NVIDIA V100 (Volta) tensor cores, fp16 mma", aliases=("volta",),
    validated=("V100/fp16",),
    configs=(
        Config((F16,), F32_OUT, {"fma": P(4, _KM + "V100TC.m; FHMP"),
                                 "align_bits": P(0, _KM + "V100TC.m; FHMP"),
                                 "rounding": P(_RTZ, _KM + "V100TC.m; FHMP")}),
        Config((F16,), F16_OUT, {"fma": P(4, _KM + "V100TC.m"),
                                 "align_bits": P(0, _KM + "V100TC.m"),
                                 "rounding": P(_RNE, _KM + "V100TC.m; measured V100/fp16")}),
    ),
)

A100 = ArchTable(
    name="a100", hardware="NVIDIA A100 (Ampere) tensor cores", aliases=("ampere",),
    validated=("A100/fp16", "A100/bf16", "A100/tf32"),
    configs=(
        Config((F16, BF16), F32_OUT, {"fma": P(8, _KM + "A100TC.m"),
                                      "align_bits": P(1, _KM + "A100TC.m"),
                                      "rounding": P(_RTZ, _KM + "A100TC.m")}),
        Config((F16,), F16_OUT, {"fma": P(8, _KM + "A100TC.m"),
                                 "align_bits": P(1, _KM + "A100TC.m"),
                                 "rounding": P(_RNE, _KM + "A100TC.m; measured A100/fp16")}),
        Config((TF32,), F32_OUT, {"fma": P(4, _KM + "A100TC.m"),
                                  "align_bits": P(1, _KM + "A100TC.m"),
                                  "rounding": P(_RTZ, _KM + "A100TC.m")}),
    ),
    refusals=(Refusal((BF16, TF32), F16_OUT, _WIDE_ONLY),),
)

A2 = ArchTable(
    name="a2", hardware="NVIDIA A2 (Ampere) tensor cores",
    configs=(
        Config((F16, BF16), F32_OUT, {"fma": P(8, _KM + "A2TC.m"),
                                      "align_bits": P(1, _KM + "A2TC.m"),
                                      "rounding": P(_RTZ, _KM + "A2TC.m")}),
        Config((F16,), F16_OUT, {"fma": P(8, _KM + "A2TC.m"),
                                 "align_bits": P(1, _KM + "A2TC.m"),
                                 "rounding": P(_RNE, _KM + "A2TC.m")}),
        Config((TF32,), F32_OUT, {"fma": P(4, _KM + "A2TC.m"),
                                  "align_bits": P(1, _KM + "A2TC.m"),
                                  "rounding": P(_RTZ, _KM + "A2TC.m")}),
    ),
    refusals=(Refusal((BF16, TF32), F16_OUT, _WIDE_ONLY),),
)

ADA = ArchTable(
    name="ada", hardware="NVIDIA Ada Lovelace tensor cores (RTX 1000 Ada)",
    aliases=("rtx1000", "ada_lovelace"),
    validated=("Ada/fp16", "Ada/bf16", "Ada/tf32", "Ada/E4M3", "Ada/E5M2"),
    configs=(
        Config((F16, BF16), F32_OUT, {"fma": P(8, _KM + "AdaTC.m"),
                                      "align_bits": P(1, _KM + "AdaTC.m"),
                                      "rounding": P(_RTZ, _KM + "AdaTC.m")}),
        Config((F16,), F16_OUT, {"fma": P(8, _KM + "AdaTC.m"),
                                 "align_bits": P(1, _KM + "AdaTC.m"),
                                 "rounding": P(_RNE, _KM + "AdaTC.m; measured Ada/fp16")}),
        Config((TF32,), F32_OUT, {"fma": P(4, _KM + "AdaTC.m"),
                                  "align_bits": P(1, _KM + "AdaTC.m"),
                                  "rounding": P(_RTZ, _KM + "AdaTC.m")}),
        Config(FP8, F32_OUT, {"fma": P(16, _KM + "AdaTC.m"),
                              "align_bits": P(-10, _KM + "AdaTC.m"),
                              "normalize_bits": P(14, _ADA_NORM),
                              "rounding": P(_RTZ, _KM + "AdaTC.m")}),
        Config(FP8, F16_OUT, {"fma": P(16, _KM + "AdaTC.m"),
                              "align_bits": P(-10, _KM + "AdaTC.m"),
                              "rounding": P(_RNE, _KM + "AdaTC.m; measured Ada/E4M3, "
                                            "Ada/E5M2 (the window rounds directly)")}),
    ),
    refusals=(Refusal((BF16, TF32), F16_OUT, _WIDE_ONLY),),
)

L40S = ArchTable(
    name="l40s", hardware="NVIDIA L40S (Ada Lovelace) tensor cores",
    configs=(
        Config((F16, BF16), F32_OUT, {"fma": P(8, _KM + "L40STC.m"),
                                      "align_bits": P(1, _KM + "L40STC.m"),
                                      "rounding": P(_RTZ, _KM + "L40STC.m")}),
        Config((TF32,), F32_OUT, {"fma": P(4, _KM + "L40STC.m"),
                                  "align_bits": P(1, _KM + "L40STC.m"),
                                  "rounding": P(_RTZ, _KM + "L40STC.m")}),
        Config(FP8, F32_OUT, {"fma": P(16, _KM + "L40STC.m"),
                              "align_bits": P(-10, _KM + "L40STC.m"),
                              "normalize_bits": P(14, _ADA_NORM + ", same chip family"),
                              "rounding": P(_RTZ, _KM + "L40STC.m")}),
        Config(FP8, F16_OUT, {"fma": P(16, _KM + "L40STC.m"),
                              "align_bits": P(-10, _KM + "L40STC.m"),
                              "rounding": P(_RNE, _KM + "L40STC.m; as measured on Ada")}),
    ),
    refusals=(Refusal((F16,), F16_OUT, "binary16 output is not modelled (L40STC.m)"),
              Refusal((BF16, TF32), F16_OUT, _WIDE_ONLY)),
)

_HOPPER_FP8_NORM = "assumed as measured on Ada (no Hopper data here): " + _ADA_NORM


def _hopper(name: str, hardware: str, files: str, aliases: tuple[str, ...]) -> ArchTable:
    """H100 and H200: their model files set the same parameters."""
    km = _KM + files
    return ArchTable(
        name=name, hardware=hardware, aliases=aliases,
        configs=(
            Config((F16, BF16), F32_OUT, {"fma": P(16, km), "align_bits": P(2, km),
                                          "rounding": P(_RTZ, km)}),
            Config((F16,), F16_OUT, {"fma": P(16, km), "align_bits": P(2, km),
                                     "rounding": P(_RNE, km)}),
            Config((TF32,), F32_OUT, {"fma": P(8, km), "align_bits": P(2, km),
                                      "rounding": P(_RTZ, km)}),
            Config(FP8, F32_OUT, {"fma": P(32, km), "align_bits": P(-10, km),
                                  "interleave": P(True, km + " (two 16-term vectors)"),
                                  "normalize_bits": P(14, _HOPPER_FP8_NORM),
                                  "rounding": P(_RTZ, km)}),
            Config(FP8, F16_OUT, {"fma": P(32, km), "align_bits": P(-10, km),
                                  "interleave": P(True, km + " (two 16-term vectors)"),
                                  "rounding": P(_RNE, km)}),
        ),
        refusals=(Refusal((BF16, TF32), F16_OUT, _WIDE_ONLY),),
    )


H100 = _hopper("h100", "NVIDIA H100 (Hopper) tensor cores", "H100TC.m", ("hopper",))
H200 = _hopper("h200", "NVIDIA H200 (Hopper) tensor cores", "H200TC.m", ())

B200 = ArchTable(
    name="b200", hardware="NVIDIA B200 (Blackwell) tensor cores", aliases=("blackwell",),
    configs=(
        Config((F16, BF16), F32_OUT, {"fma": P(16, _KM + "B200TC.m"),
                                      "align_bits": P(2, _KM + "B200TC.m"),
                                      "rounding": P(_RTZ, _KM + "B200TC.m")}),
        Config((F16,), F16_OUT, {"fma": P(16, _KM + "B200TC.m"),
                                 "align_bits": P(2, _KM + "B200TC.m"),
                                 "rounding": P(_RNE, _KM + "B200TC.m")}),
        Config((TF32,), F32_OUT, {"fma": P(8, _KM + "B200TC.m"),
                                  "align_bits": P(2, _KM + "B200TC.m"),
                                  "rounding": P(_RTZ, _KM + "B200TC.m")}),
        Config(FP8, F32_OUT, {"fma": P(32, _KM + "B200TC.m"),
                              "align_bits": P(2, _KM + "B200TC.m"),
                              "interleave": P(True, _KM + "B200TC.m"),
                              "rounding": P(_RTZ, _KM + "B200TC.m")}),
    ),
    refusals=(Refusal(FP8, F16_OUT, "not modelled (B200TC.m forces binary32)"),
              Refusal((BF16, TF32), F16_OUT, _WIDE_ONLY)),
)

_CDNA_NOTE = " (no measured data here: parameters as published)"

CDNA1 = ArchTable(
    name="cdna1", hardware="AMD CDNA1 matrix cores (MI100)", aliases=("mi100",),
    configs=(
        Config((F16,), F32_OUT, {"fma": P(4, _KM + "CDNA1.m"),
                                 "align_bits": P(None, _KM + "CDNA1.m (exact accumulation)"),
                                 "rounding": P(_RNE, _KM + "CDNA1.m" + _CDNA_NOTE)}),
        Config((BF16,), F32_OUT, {"fma": P(2, _KM + "CDNA1.m"),
                                  "align_bits": P(None, _KM + "CDNA1.m (exact accumulation)"),
                                  "rounding": P(_RNE, _KM + "CDNA1.m" + _CDNA_NOTE)}),
    ),
)

CDNA2 = ArchTable(
    name="cdna2", hardware="AMD CDNA2 matrix cores (MI210/MI250)",
    aliases=("mi210", "mi250", "mi250x"),
    configs=(
        Config((F16, BF16), F32_OUT, {
            "fma": P(4, _KM + "CDNA2.m"),
            "align_bits": P(None, _KM + "CDNA2.m (pairwise sum with unlimited alignment "
                            "bits: exact accumulation)"),
            "rounding": P(_RNE, _KM + "CDNA2.m" + _CDNA_NOTE),
            "subnormals_in": P(False, _KM + "CDNA2.m"),
            "subnormals_out": P(False, _KM + "CDNA2.m")}),
    ),
)

_CDNA3_SHARED = {
    "align_bits": P(1, _KM + "CDNA3.m (a 24-bit window for the products)"),
    "rounding": P(_RNE, _KM + "CDNA3.m" + _CDNA_NOTE),
    "c_in_alignment": P(False, _KM + "CDNA3.m (c joins in a second, two-term alignment)"),
    "late_shifted_out": P("round_down", _KM + "CDNA3.m"),
}

CDNA3 = ArchTable(
    name="cdna3", hardware="AMD CDNA3 matrix cores (MI300)", aliases=("mi300", "mi300x"),
    configs=(
        Config((F16, BF16), F32_OUT, {"fma": P(8, _KM + "CDNA3.m"), **_CDNA3_SHARED}),
        Config((TF32,), F32_OUT, {"fma": P(4, _KM + "CDNA3.m"), **_CDNA3_SHARED}),
        Config(FP8, F32_OUT, {"fma": P(16, _KM + "CDNA3.m"),
                              "interleave": P(True, _KM + "CDNA3.m (odd/even grouping)"),
                              **_CDNA3_SHARED}),
    ),
)

_ISE = "Intel ISE TDPBF16PS"

AMX = ArchTable(
    name="amx", hardware="Intel AMX TDPBF16PS: bfloat16 x bfloat16 + binary32 only",
    aliases=("amx_bf16", "intel_amx"),
    configs=(
        Config((BF16,), F32_OUT, {"fma": P(1, _ISE + " (a chain of binary32 FMAs)"),
                                  "align_bits": P(None, _ISE + " (each FMA exact)"),
                                  "rounding": P(_RNE, _ISE),
                                  "subnormals_in": P(False, _ISE + " (DAZ)"),
                                  "subnormals_out": P(False, _ISE + " (FTZ)")}),
    ),
)

#: Every preset, in the order :func:`thrifty.numerics.units.unit_names` lists them.
TABLES: tuple[ArchTable, ...] = (V100, A100, A2, ADA, L40S, H100, H200, B200, CDNA1, CDNA2,
                                 CDNA3, AMX)
