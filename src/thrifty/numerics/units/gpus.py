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
* ``KM@109e412``: the toolbox revision whose ``B200TC.m`` (called by ``H100TC.m`` and
  ``H200TC.m``) sets ``inter_pattern=1`` for FP8, with ``tools/GEMM.m``'s interleaving
  (positions ``j mod 4 < 2``, then the others; the first half from zero, the second from
  its result, then ``c`` added with rne, 2 guard bits and a sticky bit) and
  ``tools/Generic_BFMA_TC.m``; the revision holding the validation data and the CUDA
  harnesses (``mma.sync.aligned.m16n8k32`` for FP8; ``Validate_TC_models.m`` notes that the
  H100/H200 FP8 files were measured with a zero accumulator).
* ``MMA-Sim``: Xie et al., "MMA-Sim" (arXiv 2511.10909), ``mmasim`` 2.1
  ``nv_ptx/sim.py``: ``wgmma`` (Hopper) and ``tcgen05.mma`` (Blackwell) as one fused step
  of 32 bytes per operand with window ``F``, zero terms aligned at ``e_zero``, zero
  results +0 (``t_fdpa``'s "-0.0 to +0.0"); a binary16 addend is read as binary16.

Every NVIDIA row returns +0 for a zero result (MMA-Sim; the measured files hold no zero
result of a negative sum, and KM's validation compares values, blind to the sign of zero).

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
F6F4 = ("float6_e3m2fn", "float6_e2m3fn", "float4_e2m1fn")
FNUZ8 = ("float8_e4m3fnuz", "float8_e5m2fnuz")
F32_OUT, F16_OUT, BOTH_OUT = ("binary32",), ("binary16",), ("binary32", "binary16")

_KM = "KM "
_ADA_NORM = "measured Ada/E4M3, Ada/E5M2 (a 14-bit normaliser, p_acc + align_bits)"
_RTZ = "toward_zero"
_RNE = "nearest_even"
_WIDE_ONLY = "these inputs accumulate in binary32 only"
_POSZ = P(True, "MMA-Sim t_fdpa (-0.0 to +0.0)")


def C(inputs: tuple[str, ...], outputs: tuple[str, ...], params: dict[str, Param],
      instruction: str | None = None) -> Config:
    """An NVIDIA row: ``params`` plus a +0 zero result (see the module docstring)."""
    return Config(inputs, outputs, {**params, "positive_zero": _POSZ}, instruction)


V100 = ArchTable(
    name="v100", hardware="NVIDIA V100 (Volta) tensor cores, fp16 mma", aliases=("volta",),
    validated=("V100/fp16",),
    configs=(
        C((F16,), F32_OUT, {"fma": P(4, _KM + "V100TC.m; FHMP"),
                            "align_bits": P(0, _KM + "V100TC.m; FHMP"),
                            "rounding": P(_RTZ, _KM + "V100TC.m; FHMP")}),
        C((F16,), F16_OUT, {"fma": P(4, _KM + "V100TC.m"),
                            "align_bits": P(0, _KM + "V100TC.m"),
                            "rounding": P(_RNE, _KM + "V100TC.m; measured V100/fp16")}),
    ),
)


def _ampere(name: str, hardware: str, file: str, aliases: tuple[str, ...],
            validated: tuple[str, ...]) -> ArchTable:
    """A100 and A2: their model files set the same parameters."""
    km = _KM + file
    return ArchTable(
        name=name, hardware=hardware, aliases=aliases, validated=validated,
        configs=(
            C((F16, BF16), F32_OUT, {"fma": P(8, km), "align_bits": P(1, km),
                                     "rounding": P(_RTZ, km)}),
            C((F16,), F16_OUT, {"fma": P(8, km), "align_bits": P(1, km),
                                "rounding": P(_RNE, km + ("; measured A100/fp16"
                                                          if validated else ""))}),
            C((TF32,), F32_OUT, {"fma": P(4, km), "align_bits": P(1, km),
                                 "rounding": P(_RTZ, km)}),
        ),
        refusals=(Refusal((BF16, TF32), F16_OUT, _WIDE_ONLY),),
    )


A100 = _ampere("a100", "NVIDIA A100 (Ampere) tensor cores", "A100TC.m", ("ampere",),
               ("A100/fp16", "A100/bf16", "A100/tf32"))
A2 = _ampere("a2", "NVIDIA A2 (Ampere) tensor cores", "A2TC.m", (), ())


def _ada(name: str, hardware: str, file: str, aliases: tuple[str, ...],
         validated: tuple[str, ...]) -> ArchTable:
    """Ada and L40S (the same Ada Lovelace tensor core)."""
    km = _KM + file
    f16_src = (km + "; measured Ada/fp16" if name == "ada" else
               _KM + "AdaTC.m (L40STC.m leaves fp16 -> fp16 out; the L40S is an Ada "
                     "Lovelace GPU, validated on Ada/fp16)")
    return ArchTable(
        name=name, hardware=hardware, aliases=aliases, validated=validated,
        configs=(
            C((F16, BF16), F32_OUT, {"fma": P(8, km), "align_bits": P(1, km),
                                     "rounding": P(_RTZ, km)}),
            C((F16,), F16_OUT, {"fma": P(8, f16_src), "align_bits": P(1, f16_src),
                                "rounding": P(_RNE, f16_src)}),
            C((TF32,), F32_OUT, {"fma": P(4, km), "align_bits": P(1, km),
                                 "rounding": P(_RTZ, km)}),
            C(FP8, F32_OUT, {"fma": P(16, km), "align_bits": P(-10, km),
                             "normalize_bits": P(14, _ADA_NORM),
                             "rounding": P(_RTZ, km)}),
            C(FP8, F16_OUT, {"fma": P(16, km), "align_bits": P(-10, km),
                             "rounding": P(_RNE, km + "; measured Ada/E4M3, Ada/E5M2 (the "
                                           "window rounds directly)")}),
        ),
        refusals=(Refusal((BF16, TF32), F16_OUT, _WIDE_ONLY),),
    )


ADA = _ada("ada", "NVIDIA Ada Lovelace tensor cores (RTX 1000 Ada)", "AdaTC.m",
           ("rtx1000", "ada_lovelace"),
           ("Ada/fp16", "Ada/bf16", "Ada/tf32", "Ada/E4M3", "Ada/E5M2"))
L40S = _ada("l40s", "NVIDIA L40S (Ada Lovelace) tensor cores", "L40STC.m", (), ())

_KM8 = _KM + "B200TC.m (H100TC.m and H200TC.m call it), tools/GEMM.m; KM@109e412"
#: Hopper and Blackwell FP8 through mma.sync: Generic_BFMA_TC with B200TC.m's parameters.
_MMA_SYNC_FP8 = {
    "fma": P(32, _KM8 + " (fma 16 doubled by inter_pattern=1)"),
    "align_bits": P(2, _KM8 + " (neab 2)"),
    "interleave": P(True, _KM8 + " (inter_pattern=1: two 16-term vectors)"),
    "interleave_pattern": P("pairs", _KM8 + " (seq1: positions j mod 4 < 2)"),
    "addend_last": P(True, _KM8 + " (final addition with C: rne, neab 2, sticky bit)"),
}


def _async_rows(instr: str) -> tuple[Config, ...]:
    """``wgmma`` (Hopper) or ``tcgen05.mma`` (Blackwell) after MMA-Sim: one fused step of
    32 bytes per operand; a 13-bit window and a 14-bit normaliser for Hopper FP8 into
    binary32; zero terms at ``e_zero`` = -133 (binary32) / -21 (binary16)."""
    src = "MMA-Sim " + ("WGMMA (Hopper)" if instr == "wgmma" else "TCGen05MMA (Blackwell)")
    narrow = instr == "wgmma"
    low = FP8 if instr == "wgmma" else FP8 + F6F4

    def row(ins: tuple[str, ...], out: tuple[str, ...], fma: int, F: int,
            extra: dict[str, Param]) -> Config:
        acc = "binary16" if out == F16_OUT else "binary32"
        p_acc = 11 if acc == "binary16" else 24
        return C(ins, out, {"fma": P(fma, src + " (L_max: 32 bytes)"),
                            "align_bits": P(F - p_acc + 1, src + f" (F = {F})"),
                            "accumulator": P(acc, src + " (the addend read in the output "
                                                        "format)"),
                            "zero_exp": P(-21 if acc == "binary16" else -133,
                                          src + " (e_zero)"),
                            "rounding": P(_RNE if acc == "binary16" else _RTZ,
                                          src + " (rho)"), **extra}, instr)

    return (row((TF32,), F32_OUT, 8, 25, {}), row((F16, BF16), F32_OUT, 16, 25, {}),
            row((F16,), F16_OUT, 16, 25, {}),
            row(low, F32_OUT, 32, 13 if narrow else 25,
                {"normalize_bits": P(14, src + " (RZ-E8M13)")} if narrow else {}),
            row(low, F16_OUT, 32, 13 if narrow else 25, {}))


def _hopper(name: str, hardware: str, files: str, aliases: tuple[str, ...]) -> ArchTable:
    """H100 and H200: their model files set the same parameters."""
    km = _KM + files
    return ArchTable(
        name=name, hardware=hardware, aliases=aliases, instructions=("mma.sync", "wgmma"),
        configs=(
            C((F16, BF16), F32_OUT, {"fma": P(16, km), "align_bits": P(2, km),
                                     "rounding": P(_RTZ, km)}),
            C((F16,), F16_OUT, {"fma": P(16, km), "align_bits": P(2, km),
                                "rounding": P(_RNE, km)}),
            C((TF32,), F32_OUT, {"fma": P(8, km), "align_bits": P(2, km),
                                 "rounding": P(_RTZ, km)}),
            C(FP8, F32_OUT, {**_MMA_SYNC_FP8, "rounding": P(_RTZ, _KM8 + " (frmode rz)")}),
            C(FP8, F16_OUT, {**_MMA_SYNC_FP8, "rounding": P(_RNE, _KM8 + " (frmode rne)")}),
        ) + _async_rows("wgmma"),
        refusals=(Refusal((BF16, TF32), F16_OUT, _WIDE_ONLY),),
    )


H100 = _hopper("h100", "NVIDIA H100 (Hopper) tensor cores", "H100TC.m", ("hopper",))
H200 = _hopper("h200", "NVIDIA H200 (Hopper) tensor cores", "H200TC.m", ())

_KMB = _KM + "B200TC.m"

B200 = ArchTable(
    name="b200", hardware="NVIDIA B200 (Blackwell) tensor cores", aliases=("blackwell",),
    instructions=("mma.sync", "tcgen05.mma"),
    configs=(
        C((F16, BF16), F32_OUT, {"fma": P(16, _KMB), "align_bits": P(2, _KMB),
                                 "rounding": P(_RTZ, _KMB)}),
        C((F16,), F16_OUT, {"fma": P(16, _KMB), "align_bits": P(2, _KMB),
                            "rounding": P(_RNE, _KMB)}),
        C((TF32,), F32_OUT, {"fma": P(8, _KMB), "align_bits": P(2, _KMB),
                             "rounding": P(_RTZ, _KMB)}),
        C(FP8, F32_OUT, {**_MMA_SYNC_FP8, "rounding": P(_RTZ, _KM8 + " (frmode rz)")}),
        C(FP8, F16_OUT, {**_MMA_SYNC_FP8, "rounding": P(_RNE, _KM8 + " (frmode rne)")}),
    ) + _async_rows("tcgen05.mma"),
    refusals=(Refusal(F6F4, BOTH_OUT, "mma.sync has no FP6/FP4 kinds on sm_100 (that is "
                                      "sm_120's mma); tcgen05.mma kind::f8f6f4 computes them: "
                                      "instruction='tcgen05.mma'", "mma.sync"),
              Refusal((BF16, TF32), F16_OUT, _WIDE_ONLY)),
)

_CDNA_NOTE = " (no measured data here: parameters as published)"

CDNA1 = ArchTable(
    name="cdna1", hardware="AMD CDNA1 matrix cores (MI100)", aliases=("mi100",),
    instructions=("mfma",),
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
    aliases=("mi210", "mi250", "mi250x"), instructions=("mfma",),
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
    instructions=("mfma",),
    configs=(
        Config((F16, BF16), F32_OUT, {"fma": P(8, _KM + "CDNA3.m"), **_CDNA3_SHARED}),
        Config((TF32,), F32_OUT, {"fma": P(4, _KM + "CDNA3.m"), **_CDNA3_SHARED}),
        Config(FNUZ8, F32_OUT, {"fma": P(16, _KM + "CDNA3.m"),
                                "interleave": P(True, _KM + "CDNA3.m (odd/even grouping)"),
                                **_CDNA3_SHARED}),
    ),
    refusals=(Refusal(FP8, F32_OUT + F16_OUT, "MI300 computes FP8 in the FNUZ formats "
                      "(e4m3fnuz 'fp8', e5m2fnuz 'bf8'); OCP E4M3/E5M2 came with CDNA4"),),
)

_ISE = "Intel ISE TDPBF16PS"

AMX = ArchTable(
    name="amx", hardware="Intel AMX TDPBF16PS: bfloat16 x bfloat16 + binary32 only",
    aliases=("amx_bf16", "intel_amx"), instructions=("tdpbf16ps",),
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
