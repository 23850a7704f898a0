"""The Hopper/Blackwell FP8 ``mma.sync`` presets against a line-by-line reading of the source.

``km_gemm_step`` below follows Khattak and Mikaitis's MATLAB toolbox (revision 109e412:
``models/B200TC.m``, ``models/tools/GEMM.m``, ``models/tools/Generic_BFMA_TC.m``) step by
step, with its own devices: operands sorted by magnitude with zeros removed, exponents and
24-bit significands as ``single`` holds them, the ``special_case``/``spc`` extra bit for a
largest product with significand >= 2, alignment to the largest operand, truncation after
``23 + neab (+ spc)`` fraction bits (a sticky bit when asked), then normalisation and ``rz``
truncation or ``rne`` rounding. It shares no code with :mod:`thrifty.numerics.units`,
whose unnormalised-product window is a different (equivalent) formulation.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from thrifty.numerics import crosscheck as xc
from thrifty.numerics.formats import get_format
from thrifty.numerics.units import unit

EXP_BITS = {"binary32": 8, "binary16": 5}
MAN_BITS = {"binary32": 23, "binary16": 10}
BIG = Fraction(10) ** 400  # stands for an infinite result


def _exp_sig(x: Fraction, man_bits: int, emin: int) -> int:
    """``fpbits_IEEE``: the unbiased exponent of ``x`` as the format stores it."""
    e = math.floor(math.log2(abs(x)))
    while Fraction(2) ** e > abs(x):
        e -= 1
    while Fraction(2) ** (e + 1) <= abs(x):
        e += 1
    return max(e, emin)


def _norm_exp(v: float, emin_in: int) -> tuple[Fraction, int]:
    """``norm_exp_log2``: significand and exponent of an input (clamped at its emin)."""
    e = max(math.floor(math.log2(abs(v))), emin_in)
    return Fraction(v) / Fraction(2) ** e, e


def generic_bfma(r: list[Fraction], man_prd: int, round_mode: str, neab: int, stk: int,
                 man_out: int, exp_out: int, a_blk: list[float], b_blk: list[float],
                 c: Fraction, special_case: int, emin_in: int) -> Fraction:
    """``Generic_BFMA_TC.m`` (revision 109e412) on exact operands ``r`` (sorted, no zeros)."""
    emin = 1 - (2 ** (exp_out - 1) - 1)
    emin_prd = -126 if man_prd == 23 else -14
    K = len(r)
    spc = 0
    if K > 1:
        if special_case == 1:
            pairs = [(x, y) for x, y in zip(a_blk, b_blk) if x * y != 0]
            norms = [(_norm_exp(x, emin_in), _norm_exp(y, emin_in)) for x, y in pairs]
            prod_norm = [sa * sb for (sa, _), (sb, _) in norms]
            prod_exp = [ea + eb for (_, ea), (_, eb) in norms]
            if c != 0:
                c_exp = math.floor(math.log2(abs(c)))
                if all(c_exp > pe for pe in prod_exp):
                    special_case = 0
            if prod_exp:
                mx = max(prod_exp)
                if max(abs(p) for p, pe in zip(prod_norm, prod_exp) if pe == mx) < 2:
                    special_case = 0
        spc = special_case
    exps = [_exp_sig(x, man_prd, emin_prd) for x in r]
    E1 = exps[0]
    if K == 1:
        total = r[0]
    else:
        keep = man_prd + neab + spc  # fraction bits below 2^E1
        ulp = Fraction(2) ** (E1 - keep)
        total = Fraction(0)
        for x in r:
            k = abs(x) // ulp
            lost = abs(x) - k * ulp
            if stk:
                t = k * ulp + (ulp / 2 if lost else 0)
            else:
                t = k * ulp
            total += t if x > 0 else -t
    if total == 0:
        return Fraction(0)
    # normalisation, subnormal shift, rounding to man_out fraction bits
    mag = abs(total)
    e = _exp_sig(mag, 60, -10**9)
    e = max(e, emin)
    q = Fraction(2) ** (e - man_out)
    k = mag // q
    rem = mag - k * q
    if round_mode == "rne" and (rem > q / 2 or (rem == q / 2 and k % 2 == 1)):
        k += 1
    out = k * q
    emax = 2 ** (exp_out - 1) - 1
    if out >= Fraction(2) ** (emax + 1):
        return Fraction(-1 if total < 0 else 1) * BIG  # stands for Inf
    return out if total > 0 else -out


def km_gemm_step(a: list[float], b: list[float], c: float, fin: str, fout: str,
                 neab: int = 2) -> float:
    """``GEMM.m``'s loop for ``inter_pattern = 1`` (FP8 on B200TC.m, H100TC.m, H200TC.m)."""
    man_out, exp_out = MAN_BITS[fout], EXP_BITS[fout]
    mode = "rne" if fout == "binary16" else "rz"
    emin_in = get_format(fin).emin
    nfma = 32
    seq1 = [j for j in range(nfma) if j % 4 < 2]
    seq2 = [j + 2 for j in seq1]
    acc = Fraction(c)
    for s in range(0, len(a), nfma):
        ab = a[s:s + nfma]
        bb = b[s:s + nfma]
        r = [Fraction(x) * Fraction(y) for x, y in zip(ab, bb)]
        blk1 = sorted((r[j] for j in seq1 if r[j] != 0), key=abs, reverse=True)
        d1 = generic_bfma(blk1, 23, mode, neab, 0, man_out, exp_out, [ab[j] for j in seq1],
                          [bb[j] for j in seq1], Fraction(0), 1, emin_in) if blk1 else 0
        if abs(d1) >= BIG:  # Inf: Generic_BFMA_TC returns sum(r), the Inf, from here on
            return math.inf if d1 > 0 else -math.inf
        in2 = [r[j] for j in seq2] + [Fraction(0)]
        special = 0 if all(abs(d1) > abs(x) for x in in2) else 1
        in2[-1] = Fraction(d1)
        blk2 = sorted((x for x in in2 if x != 0), key=abs, reverse=True)
        d2 = generic_bfma(blk2, 23, mode, neab, 0, man_out, exp_out, [ab[j] for j in seq2],
                          [bb[j] for j in seq2], Fraction(d1), special, emin_in) \
            if blk2 else 0
        if abs(d2) >= BIG:
            return math.inf if d2 > 0 else -math.inf
        blk3 = sorted((x for x in (Fraction(d2), acc) if x != 0), key=abs, reverse=True)
        acc = generic_bfma(blk3, man_out, "rne", 2, 1, man_out, exp_out, [], [], Fraction(0),
                           0, emin_in) if blk3 else Fraction(0)
        if abs(acc) >= BIG:
            return math.inf if acc > 0 else -math.inf
    return float(acc)


@pytest.mark.parametrize(("name", "fin", "fout"), [
    ("h100", "e4m3", "fp32"), ("h200", "e5m2", "fp32"), ("b200", "e4m3", "fp16"),
    ("h100", "e5m2", "fp16")])
def test_fp8_mma_sync_preset_equals_the_matlab_steps(name: str, fin: str, fout: str) -> None:
    u = unit(name, fin, fout)
    cfg = xc.Config(name, u.model.input, u.model.output, "mma.sync", "", "", "", 32)
    a, b, c, _ = xc.cases(cfg, 320, K=64, seed=21)
    fine = np.isfinite(a).all(1) & np.isfinite(b).all(1) & np.isfinite(c)
    a, b, c = a[fine], b[fine], c[fine]
    ours = u.dot(a, b, c, engine="numpy")
    theirs = np.array([km_gemm_step(list(a[i]), list(b[i]), float(c[i]), u.model.input,
                                    u.model.output) for i in range(len(a))])
    same = xc.same_bits(ours, theirs, u.model.output) | ((ours == 0) & (theirs == 0))
    assert same.all(), [(i, ours[i], theirs[i]) for i in np.flatnonzero(~same)[:5]]
