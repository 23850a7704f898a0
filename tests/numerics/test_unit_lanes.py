"""The binary64-lane kernels (``engine="compiled"``'s fast path for GEMMs and batched dot
products) against the numpy engine and the exact-rational reference, bit for bit, on every
Hopper and Blackwell preset, with random and adversarial inputs (cancellation, exponent
spread beyond the window, subnormals, signed zeros, Inf/NaN, overflow, underflow)."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from thrifty.errors import FormatError
from thrifty.numerics import crosscheck as xc
from thrifty.numerics.formats import get_format
from thrifty.numerics.rounding import round as fround
from thrifty.numerics.units import UnitModel, reference_dot, unit
from thrifty.numerics.units.kernels import compiled_eligible, lanes_eligible, tiled_eligible

INPUTS = ("bfloat16", "binary16", "tensorfloat32", "float8_e4m3fn", "float8_e5m2")
INSTRUCTIONS = {"h100": ("mma.sync", "wgmma"), "h200": ("mma.sync", "wgmma"),
                "b200": ("mma.sync", "tcgen05.mma")}


def _presets() -> list[tuple[str, str, str, str]]:
    out = []
    for name, instrs in INSTRUCTIONS.items():
        for instr in instrs:
            for fin in INPUTS:
                for fout in ("binary32", "binary16"):
                    try:
                        unit(name, input=fin, output=fout, instruction=instr)
                    except FormatError:  # a refusal: the instruction has no such kind
                        continue
                    out.append((name, fin, fout, instr))
    return out


PRESETS = _presets()


def _same(x: np.ndarray, y: np.ndarray) -> bool:
    """Equal binary64 bits, every NaN equal to every NaN."""
    nan = np.isnan(x)
    return bool(np.array_equal(nan, np.isnan(y))
                and np.array_equal(x[~nan].view(np.uint64), y[~nan].view(np.uint64)))


def test_every_hopper_and_blackwell_preset_takes_the_lane_kernels() -> None:
    assert len(PRESETS) >= 20
    for name, fin, fout, instr in PRESETS:
        assert lanes_eligible(unit(name, input=fin, output=fout, instruction=instr).model)


@pytest.mark.parametrize(("name", "fin", "fout", "instr"), PRESETS)
def test_lane_dots_equal_numpy_engine_and_reference(name, fin, fout, instr) -> None:
    """Every case family of :func:`thrifty.numerics.crosscheck.cases`, with a length that
    leaves the last step partly padded."""
    u = unit(name, input=fin, output=fout, instruction=instr)
    cfg = xc.Config(name, fin, fout, instr, "", "", "", u.model.fma)
    a, b, c, _ = xc.cases(cfg, 400, K=2 * u.model.fma + 3, seed=11)
    fast = u.dot(a, b, c, engine="compiled")
    assert _same(fast, u.dot(a, b, c, engine="numpy"))
    finite = np.flatnonzero(np.isfinite(a).all(1) & np.isfinite(b).all(1) & np.isfinite(c))
    rows = finite[:48]  # the reference takes finite inputs; every family but "special"
    ref = np.array([reference_dot(u.model, list(a[i]), list(b[i]), c[i]) for i in rows])
    assert _same(fast[rows], ref)


def _adversarial(rng: np.random.Generator, fin: str, fout: str, m: int, k: int, n: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Finite A, B and an addend C with cancelling columns, exponents spread over the whole
    input range, subnormals, signed zeros, values near overflow, and ±0/±inf/NaN in C."""
    fi, fo = get_format(fin), get_format(fout)

    def vals(shape: tuple[int, ...], lo: int, hi: int, fmt=fi) -> np.ndarray:
        x = np.ldexp(rng.uniform(1, 2, shape), rng.integers(lo, hi + 1, shape))
        return fround(x * rng.choice([-1.0, 1.0], shape), fmt, saturation="finite")

    A = vals((m, k), -4, 4)
    B = vals((k, n), -4, 4)
    A[1] = vals((k,), fi.emin, fi.emax)  # a spread beyond any window
    A[2] = vals((k,), fi.emin - fi.precision + 1, fi.emin)  # subnormals
    A[3] = vals((k,), fi.emax - 1, fi.emax)  # products near the top
    B[:, 3] = np.abs(vals((k,), fi.emax - 1, fi.emax))
    A[4] = np.where(rng.random(k) < 0.6, 0.0, A[4]) * rng.choice([-1.0, 1.0], k)  # ±0
    B[:, 1] = -B[:, 0]  # D[:, 1] = -D[:, 0] where C is zero
    A[5, 1::2] = -A[5, 0::2][: k // 2]  # D[5, 5]: equal and opposite pairs, one left over
    B[1::2, 5] = B[0::2, 5][: k // 2]
    A[rng.random((m, k)) < 0.1] = 0.0
    C = vals((m, n), -6, 6, fo)
    C[0, :6] = [np.inf, -np.inf, np.nan, 0.0, -0.0, fo.max_finite]
    C[2, :3] = (fo.smallest_subnormal or 0.0) * np.array([1.0, -3.0, 7.0])
    C[6] = -0.0
    if not fi.has_negative_zero:
        A, B = A + 0.0, B + 0.0
    return A, B, C


@pytest.mark.parametrize(("name", "fin", "fout", "instr"), PRESETS)
def test_lane_gemm_equals_numpy_engine(name, fin, fout, instr) -> None:
    """Two row blocks and two column blocks (the second padded), every adversarial row and
    column family at once."""
    u = unit(name, input=fin, output=fout, instruction=instr)
    rng = np.random.default_rng(zlib.crc32(f"{name}{fin}{fout}{instr}".encode()))
    A, B, C = _adversarial(rng, fin, fout, 21, 2 * u.model.fma + 5, 70)
    got = u.matmul(A, B, C, engine="compiled")
    assert _same(got, u.matmul(A, B, C, engine="numpy"))
    i, j = 5, 1
    assert _same(got[i:i + 1, j], np.array([reference_dot(u.model, list(A[i]), list(B[:, j]),
                                                          C[i, j])]))


def test_specials_in_a_gemm_take_the_dot_path_with_the_same_bits() -> None:
    u = unit("h100", input="e5m2", output="fp32", instruction="wgmma")
    rng = np.random.default_rng(3)
    A, B, C = _adversarial(rng, "float8_e5m2", "binary32", 9, 40, 11)
    A[1, 3], B[7, 2], B[8, 4] = np.inf, -np.inf, np.nan
    assert _same(u.matmul(A, B, C, engine="compiled"), u.matmul(A, B, C, engine="numpy"))


def test_windows_too_wide_for_binary64_lanes_keep_the_integer_kernel() -> None:
    """A 47-bit window (fma 4): the aligned sum can pass 2^53, so the integer tiled kernel
    runs; same bits as the numpy engine either way, near the limit too."""
    wide = UnitModel("wide", "bf16", "binary32", fma=4, align_bits=24)
    assert compiled_eligible(wide) and tiled_eligible(wide) and not lanes_eligible(wide)
    edge = UnitModel("edge", "bf16", "binary32", fma=4, align_bits=22, shifted_out="sticky")
    assert lanes_eligible(edge)
    rng = np.random.default_rng(9)
    for model in (wide, edge):
        A, B, C = _adversarial(rng, "bfloat16", "binary32", 17, 13, 66)
        u = unit(model)
        assert _same(u.matmul(A, B, C, engine="compiled"), u.matmul(A, B, C, engine="numpy"))
        a, b = A[:, None, :].repeat(3, 1), B.T[None, :3, :].repeat(17, 0)
        assert _same(u.dot(a, b, C[:, :3], engine="compiled"),
                     u.dot(a, b, C[:, :3], engine="numpy"))


def test_values_outside_the_input_format_are_refused_by_the_lane_path() -> None:
    u = unit("h100", input="e4m3", output="fp32")
    A = np.ones((3, 40))
    A[2, 7] = 1.0625  # needs 4 fraction bits; E4M3 has 3
    with pytest.raises(FormatError, match="1.0625"):
        u.matmul(A, np.ones((40, 2)))
    with pytest.raises(FormatError, match="1.0625"):
        u.dot(A, np.ones((3, 40)))
    with pytest.raises(FormatError, match="500"):
        u.dot(np.full(40, 500.0), np.ones(40))  # above E4M3's 448


def test_flushed_subnormal_inputs_in_the_lane_path() -> None:
    """A model that flushes subnormal inputs reads them as zeros in both lane drivers."""
    model = UnitModel("ftz", "bf16", "binary32", fma=8, align_bits=1, subnormals_in=False,
                      zero_exp=-130)
    assert lanes_eligible(model)
    rng = np.random.default_rng(12)
    A, B, C = _adversarial(rng, "bfloat16", "binary32", 20, 29, 67)
    u = unit(model)
    got = u.matmul(A, B, C, engine="compiled")
    assert _same(got, u.matmul(A, B, C, engine="numpy"))
    flushed = np.where(np.abs(A) < 2.0**-126, 0.0, A)
    assert _same(got, u.matmul(flushed, B, C, engine="compiled"))
    assert not _same(got, unit(UnitModel("sub", "bf16", "binary32", fma=8, align_bits=1,
                                         zero_exp=-130)).matmul(A, B, C))
