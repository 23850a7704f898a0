"""Bit-exact models of hardware matrix units: multi-term fused dot products ``d = c + sum a_i b_i``.

Policy
------
A matrix unit (an NVIDIA tensor core, an AMD matrix core, an Intel AMX tile unit) computes a
GEMM as a sequence of *steps*; one step fuses ``fma`` products and one addend into one
result. :class:`UnitModel` states how a step computes, in the parameters of Fasi, Higham,
Mikaitis and Pranesh ("Numerical behavior of NVIDIA tensor cores", PeerJ Comput. Sci. 7,
e330, 2021) and Khattak and Mikaitis ("Accurate models of NVIDIA tensor cores", ACM TACO,
2025; their MATLAB toolbox ``north-numerical-computing/MATLAB-tensor-core``):

1. **Products are exact.** ``a_i b_i`` of two input-format numbers is kept as an integer
   significand ``M`` (up to ``2p`` bits) with exponent ``e = e_a + e_b``; the significand
   ``M 2^(x-e)`` lies in ``[0, 4)`` (it is not renormalised), ``x`` its last bit's exponent.
2. **Alignment.** All terms of the step (the products and, when ``c_in_alignment``, the
   addend ``c``, read as an accumulator-format number with ``p_acc`` bits) are aligned to
   the largest exponent ``E``. The fixed-point window keeps ``F = p_acc - 1 + align_bits``
   fraction bits below ``2^E``; ``align_bits`` may be negative (fewer bits than the
   accumulator), or ``None`` for an exact (Kulisch-like) sum.
3. **Shifted-out bits** below ``2^(E-F)`` are ``"truncate"``\\ d (magnitudes toward zero),
   ``"round_down"`` (toward minus infinity) or ``"sticky"`` (kept as one OR-ed extra bit).
4. **Carry bits.** The aligned terms are added exactly, in a two's-complement sense, in an
   accumulator with ``carry_bits`` integer bits above the product's two (``None``: enough
   never to lose a carry; a finite number loses carries out of the top, modulo).
5. **Late addend.** When ``c_in_alignment`` is false the products are summed in their
   window first and ``c`` joins in a second, two-term alignment whose shifted-out bits are
   treated by ``late_shifted_out`` (AMD CDNA3).
6. **Interleaving.** With ``interleave`` a step is two fused sub-steps in sequence, each
   on half of the products: ``interleave_pattern="odd_even"`` takes the even positions
   with ``c``, then the odd ones with that result (CDNA3 FP8's odd/even grouping);
   ``"pairs"`` takes positions ``j`` with ``j mod 4 < 2``, then the others (Khattak and
   Mikaitis's ``GEMM.m`` for Hopper/Blackwell FP8 ``mma.sync``: two 16-term vectors). With
   ``addend_last`` the first sub-step starts from zero, not ``c``, and ``c`` joins at the
   end in a two-term addition in the output format (two guard bits and a sticky bit,
   rounded to nearest-even: ``GEMM.m``'s "final addition with C").
7. **Normalisation** keeps ``normalize_bits`` significant bits (toward zero) when the
   unit's normaliser is narrower than the output (Ada/L40S/Hopper FP8: 14 bits), then
8. **Final rounding** to the output format with ``rounding`` (``"toward_zero"`` or
   ``"nearest_even"``), subnormal outputs produced or flushed (``subnormals_out``); input
   subnormals read or flushed (``subnormals_in``). Overflow gives a signed infinity.

A zero term never decides the alignment unless ``zero_exp`` is set: then a zero product
or addend enters it with that exponent (MMA-Sim's ``e_zero``: -133 for a binary32, -21 for
a binary16 result on Hopper/Blackwell), which can push tiny terms out of the window. With
``positive_zero`` a result that is zero is +0 whatever the sign of the sum (MMA-Sim's
NVIDIA steps; IEEE rounding would give -0 for a negative sum that underflows).
``instruction`` names the instruction a model describes (``mma.sync``, ``wgmma``,
``tcgen05.mma``, ``mfma``, ``tdpbf16ps``): one GPU computes differently through different
instructions (Hopper FP8: ``mma.sync`` after Khattak and Mikaitis, ``wgmma`` after
MMA-Sim, Xie et al., arXiv 2511.10909; :mod:`thrifty.numerics.crosscheck` compares the
presets with MMA-Sim wherever both model an instruction).

A K-long dot product, and each entry of a GEMM, is the **recursive sequence of steps**
``c_0 = c``, ``c_{s+1} = step(a[s f:(s+1) f], b[s f:(s+1) f], c_s)``, zero-padded to a
multiple of ``fma`` (the order in which the MATLAB toolbox's ``GEMM.m`` accumulates).

The arithmetic is exact: significands are integers (numpy int64 where the window is narrow
enough, Python integers in object arrays otherwise) and no operation can round.
Three implementations compute the same bits and are tested against each other: the
vectorised numpy engine, a compiled engine (the same step jitted with numba; finite
windows with ``c`` in the alignment) and :func:`reference_dot`, a plain exact-rational
specification. Where every aligned term and their sum fit in binary64's 53 bits (every
preset with a finite window), the compiled engine sums each step's aligned products as
binary64 integers in vector lanes (:mod:`.lanes`; exact, see there); otherwise it runs
scalar int64 loops (:mod:`.compiled`).

Modules, one job each: :mod:`.model` (the parameters), :mod:`.exact` (exact integer
arithmetic of the numpy engine), :mod:`.engine` (:class:`Unit`: ``dot``/``matmul``),
:mod:`.kernels`, :mod:`.lanes` and :mod:`.compiled` (the numba engine, compiled on
first use),
:mod:`.gpus` (the presets as data, one table per architecture with the source of each
parameter) and :mod:`.presets` (their lookup), :mod:`.reference` (the exact-rational
specification), :mod:`.validation` (measured files and bit-exact comparison),
:mod:`.scaled` (Blackwell's block-scaled MX and NVFP4 ``tcgen05.mma`` kinds: :func:`mx_dot`).

Validation: the presets reproduce every case of the measured V100, A100 and Ada data
(``shared/data/tensorcore``, 14 input/output configurations, 5000 cases each) bit for bit.
Two findings beyond the published parameter tables: with FP8 inputs and a binary32
result, Ada's normaliser keeps 14 significant bits (toward zero) after the 13-bit window;
with a binary16 result the window's sum is rounded directly (nearest-even).

Example
-------
>>> import numpy as np
>>> from thrifty.numerics.units import unit
>>> u = unit("a100", input="bf16", output="fp32")
>>> float(u.dot(np.ones(8), np.ones(8), 0.5))
8.5
"""

from __future__ import annotations

from thrifty.numerics.units.engine import Unit
from thrifty.numerics.units.exact import decompose, round_scaled
from thrifty.numerics.units.kernels import _compiled_eligible, compiled_eligible
from thrifty.numerics.units.model import (
    INSTRUCTIONS,
    INTERLEAVE_PATTERNS,
    ROUNDINGS,
    SHIFTED_OUT,
    UnitModel,
)
from thrifty.numerics.units.presets import (
    ArchTable,
    Config,
    Param,
    Refusal,
    arch_table,
    preset,
    unit,
    unit_names,
)
from thrifty.numerics.units.reference import reference_dot, round_fraction
from thrifty.numerics.units.scaled import KINDS, mx_dot
from thrifty.numerics.units.validation import (
    ADDENDS,
    ValidationReport,
    ValidationSet,
    load_validation_set,
    validate,
)

__all__ = [
    "ADDENDS",
    "INSTRUCTIONS",
    "INTERLEAVE_PATTERNS",
    "KINDS",
    "ROUNDINGS",
    "SHIFTED_OUT",
    "ArchTable",
    "Config",
    "Param",
    "Refusal",
    "Unit",
    "UnitModel",
    "ValidationReport",
    "ValidationSet",
    "_compiled_eligible",
    "arch_table",
    "compiled_eligible",
    "decompose",
    "load_validation_set",
    "mx_dot",
    "preset",
    "reference_dot",
    "round_fraction",
    "round_scaled",
    "unit",
    "unit_names",
    "validate",
]
