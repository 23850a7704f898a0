"""The unit presets against MMA-Sim (arXiv 2511.10909), an independent bit-accurate simulator.

Every configuration both model runs a few hundred random and adversarial cases (the full
10^5-case comparison is benchmarks/numerics_mmasim.py). Where thrifty's preset follows
another source than MMA-Sim, the disagreement is pinned to its stated cause: with the
MMA-Sim parameter swapped in, the agreement becomes total, or a constructed case shows the
two behaviours side by side.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from thrifty.numerics import crosscheck as xc
from thrifty.numerics.units import unit

REASON = xc.mmasim_available()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

N = 8 * 60  # cases per configuration: 60 of each family

#: MMA-Sim's e_zero for mma.sync (nv_ptx/sim.py), (binary32 result, binary16 result).
MMA_E_ZERO = {"v100": (-131, -19), "a100": (-132, -20), "ada": (-132, -20),
              "h100": (-133, -21), "b200": (-133, -21)}

#: Families where a preset follows another source than MMA-Sim, and why.
KNOWN = {
    "mma.sync": ({"underflow"}, "KM's models keep zeros out of the alignment; MMA-Sim "
                                "aligns them at e_zero and reads a binary16 addend as "
                                "binary16 (a subnormal one at 2^-14)"),
    "cdna2": (set(xc.FAMILIES) - {"special"}, "KM CDNA2.m (pair_wise_sum with neab=Inf, "
                                              "read as exact) vs MMA-Sim's rounded fp32 "
                                              "pairwise adds"),
    "cdna3": (set(xc.FAMILIES) - {"special"}, "KM CDNA3.m's late two-term alignment of c "
                                              "(F=24, round down) vs MMA-Sim's F2=31 "
                                              "partial sum"),
}


def _known(cfg: xc.Config) -> set[str]:
    if cfg.unit in KNOWN:
        return KNOWN[cfg.unit][0]
    return KNOWN[cfg.instruction][0] if cfg.instruction in KNOWN else set()


@pytest.mark.parametrize("key", list(xc.CONFIGS))
def test_preset_agrees_with_mmasim_outside_the_explained_families(key: str) -> None:
    cfg = xc.CONFIGS[key]
    agr = xc.compare(cfg, N, seed=11)
    known = _known(cfg)
    for family, (equal, n) in agr.per_family.items():
        if family not in known:
            assert equal == n, (f"{key}: {family} {equal}/{n} equal; first differences "
                                f"{agr.first[:5]}")


@pytest.mark.parametrize("key", [k for k, c in xc.CONFIGS.items() if c.instruction == "mma.sync"])
def test_mma_sync_disagreement_is_mmasims_zero_and_addend_alignment(key: str) -> None:
    """Swap in MMA-Sim's e_zero and its binary16 reading of the addend: every case agrees."""
    cfg = xc.CONFIGS[key]
    a, b, c, _ = xc.cases(cfg, N, seed=12)
    model = unit(cfg.unit, cfg.input, cfg.output).model
    fp16 = cfg.output == "binary16"
    swapped = replace(model, zero_exp=MMA_E_ZERO[cfg.unit][int(fp16)])
    if fp16:  # same window F, counted from the binary16 addend's 11 bits
        assert model.window_bits is not None
        swapped = replace(swapped, accumulator="binary16", align_bits=model.window_bits - 10)
    ours = unit(swapped).dot(a, b, c, engine="numpy")
    assert xc.same_bits(ours, xc.run_mmasim(cfg, a, b, c), cfg.output).all()


def _one(cfg: xc.Config, a: list[float], b: list[float], c: float) -> tuple[float, float]:
    A, B, C = np.array([a]), np.array([b]), np.array([c])
    return float(xc.run_thrifty(cfg, A, B, C)[0]), float(xc.run_mmasim(cfg, A, B, C)[0])


def test_cdna2_pairwise_rounding_is_the_disagreement() -> None:
    # products 1, 2^-24, 2^-24, 0: exact sum 1 + 2^-23 is a binary32; MMA-Sim rounds the
    # pairs (1 + 2^-24 -> 1, tie to even) and loses it
    cfg = xc.CONFIGS["cdna2/fp16/fp32"]
    t = 2.0 ** -12
    ours, theirs = _one(cfg, [1.0, t, t, 0.0], [1.0, t, t, 0.0], 0.0)
    assert ours == 1 + 2.0 ** -23
    assert theirs == 1.0


def test_cdna3_late_alignment_is_the_disagreement() -> None:
    # c = 1, products 2^-24 + 2^-25: KM's 24-bit late window keeps 2^-24 (a tie, rounds to
    # 1); MMA-Sim keeps 31 bits of the partial sum, 1 + 0.75 ulp rounds up
    cfg = xc.CONFIGS["cdna3/fp16/fp32"]
    a = [2.0 ** -12, 2.0 ** -12] + [0.0] * 6
    b = [2.0 ** -12, 2.0 ** -13] + [0.0] * 6
    ours, theirs = _one(cfg, a, b, 1.0)
    assert ours == 1.0
    assert theirs == 1 + 2.0 ** -23


def test_zero_exp_drops_bits_below_the_zero_terms_window() -> None:
    # tcgen05 fp16 -> fp16: a zero product aligns at 2^-21 (F = 25: down to 2^-46), so the
    # 2^-48 that lifts 2^-25 above the rounding tie is lost and the result ties to 0
    cfg = xc.CONFIGS["b200/fp16/fp16/tcgen05.mma"]
    a = [2.0 ** -12, 2.0 ** -24] + [0.0] * 14
    b = [2.0 ** -13, 2.0 ** -24] + [0.0] * 14
    ours, theirs = _one(cfg, a, b, 0.0)
    assert ours == theirs == 0.0
    wide = unit(replace(unit("b200", "fp16", "fp16", instruction="tcgen05.mma").model,
                        zero_exp=None))
    assert float(wide.dot(np.array(a), np.array(b), 0.0)) == 2.0 ** -24


@pytest.mark.parametrize("key", list(xc.SCALED_CONFIGS))
def test_block_scaled_kinds_agree_with_mmasim(key: str) -> None:
    agr = xc.compare_scaled(xc.SCALED_CONFIGS[key], N, seed=13)
    assert agr.equal == agr.cases, f"{key}: first differences {agr.first[:5]}"
