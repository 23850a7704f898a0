"""Instructions as a preset dimension, and the step structures they bring.

Hopper/Blackwell FP8 ``mma.sync`` follows Khattak and Mikaitis's ``GEMM.m`` (halves in
pairs, ``c`` added last); ``wgmma``/``tcgen05.mma`` follow MMA-Sim (zero terms at
``e_zero``). Expected values below are worked by hand from those sources.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from thrifty.errors import FormatError
from thrifty.numerics import crosscheck as xc
from thrifty.numerics.bounds import a_priori_bound
from thrifty.numerics.units import UnitModel, preset, reference_dot, unit

NEW = [("h100", "e4m3", "fp32", None), ("h200", "e5m2", "fp16", None),
       ("b200", "e4m3", "fp16", None), ("b200", "e5m2", "fp32", None),
       ("h100", "e4m3", "fp32", "wgmma"), ("h200", "e5m2", "fp16", "wgmma"),
       ("h100", "bf16", "fp32", "wgmma"), ("b200", "e2m1", "fp32", "tcgen05.mma"),
       ("b200", "e3m2", "fp16", "tcgen05.mma"), ("b200", "tf32", "fp32", "tcgen05.mma"),
       ("l40s", "fp16", "fp16", None), ("cdna3", "e5m2fnuz", "fp32", None)]


def test_default_instruction_and_names() -> None:
    assert preset("h100", "bf16").instruction == "mma.sync"
    assert preset("b200", "e4m3", instruction="tcgen05.mma").instruction == "tcgen05.mma"
    assert preset("cdna3", "bf16").instruction == "mfma"
    assert preset("amx", "bf16").instruction == "tdpbf16ps"


@pytest.mark.parametrize(("args", "needle"), [
    (("a100", "bf16", "fp32", "wgmma"), "no 'wgmma' instruction; valid: mma.sync"),
    (("b200", "e2m1", "fp32", None), "tcgen05.mma kind::f8f6f4 computes them"),
    (("cdna3", "e4m3", "fp32", None), "FNUZ"),
    (("h100", "bf16", "fp16", "wgmma"), "binary32 only"),
    (("h100", "e2m1", "fp32", "wgmma"), "no float4_e2m1fn input through wgmma"),
])
def test_refusals_name_what_the_hardware_does_not_offer(args, needle) -> None:
    with pytest.raises(FormatError, match=needle):
        preset(*args)


def test_bad_instruction_parameter() -> None:
    with pytest.raises(FormatError, match="instruction="):
        UnitModel("x", "bf16", "fp32", fma=4, instruction="hmma")
    with pytest.raises(FormatError, match="interleave_pattern"):
        UnitModel("x", "bf16", "fp32", fma=4, interleave_pattern="quads")
    with pytest.raises(FormatError, match="addend_last"):
        UnitModel("x", "bf16", "fp32", fma=4, align_bits=None, addend_last=True)


def test_l40s_fp16_out_is_adas_model() -> None:
    a, b = preset("l40s", "fp16", "fp16"), preset("ada", "fp16", "fp16")
    assert (a.fma, a.align_bits, a.rounding) == (b.fma, b.align_bits, b.rounding)


def test_hopper_fp8_mma_sync_halves_are_pairs() -> None:
    # big at 0, -big at 1, tiny at 2: GEMM.m's first half (0, 1, 4, 5, ...) cancels
    # exactly, the tiny is alone in the second: it survives. Odd/even halves would align
    # the tiny with big and lose it.
    u = unit("h100", "e4m3", "fp32")
    a = np.zeros(32)
    b = np.zeros(32)
    a[:3], b[:3] = [256.0, -256.0, 2.0 ** -6], [256.0, 256.0, 2.0 ** -6]
    assert float(u.dot(a, b, 0.0)) == 2.0 ** -12
    a[1], a[2] = 2.0 ** -6, -256.0
    b[1], b[2] = 2.0 ** -6, 256.0
    assert float(u.dot(a, b, 0.0)) == 0.0


def test_hopper_fp8_mma_sync_adds_c_last_to_the_rounded_products() -> None:
    # products 2^8 + 2^-16 in one window (F = 25) round toward zero to 2^8 first; then
    # c = 2^-16 is added with round-to-nearest-even: 2^8 + 2^-16 is a tie -> 2^8. With c in
    # the window the exact 2^8 + 2^-15 would be kept.
    u = unit("h100", "e5m2", "fp32")
    a = np.zeros(32)
    b = np.zeros(32)
    a[:2], b[:2] = [16.0, 2.0 ** -8], [16.0, 2.0 ** -8]
    assert float(u.dot(a, b, 2.0 ** -16)) == 256.0
    inline = unit("h100", "e5m2", "fp32", addend_last=False)
    assert float(inline.dot(a, b, 2.0 ** -16)) == 256.0 + 2.0 ** -15


@pytest.mark.parametrize(("name", "fin", "fout", "instr"), NEW)
def test_engines_and_reference_agree(name, fin, fout, instr) -> None:
    u = unit(name, fin, fout, instruction=instr)
    cfg = xc.Config(name, u.model.input, u.model.output, u.model.instruction, "", "", "",
                    u.model.fma)
    a, b, c, _ = xc.cases(cfg, 240, K=2 * u.model.fma + 3, seed=5)
    fine = np.isfinite(a).all(1) & np.isfinite(b).all(1) & np.isfinite(c)
    a, b, c = a[fine], b[fine], c[fine]
    numpy_ = u.dot(a, b, c, engine="numpy")
    if u.model.c_in_alignment:  # the compiled engine's scope
        compiled = u.dot(a, b, c, engine="compiled")
        assert xc.same_bits(numpy_, compiled, u.model.output).all()
    ref = np.array([reference_dot(u.model, list(a[i]), list(b[i]), float(c[i]))
                    for i in range(0, len(a), 4)])
    assert xc.same_bits(numpy_[::4], ref, u.model.output).all()


@pytest.mark.parametrize(("name", "fin", "fout", "instr"), NEW)
def test_a_priori_bound_holds(name, fin, fout, instr) -> None:
    u = unit(name, fin, fout, instruction=instr)
    cfg = xc.Config(name, u.model.input, u.model.output, u.model.instruction, "", "", "",
                    u.model.fma)
    a, b, c, _ = xc.cases(cfg, 240, K=2 * u.model.fma, seed=6)
    got = u.dot(a, b, c, engine="numpy")
    bound = a_priori_bound(u.model, a.shape[1])
    for i in np.flatnonzero(np.isfinite(got) & np.isfinite(a).all(1) & np.isfinite(b).all(1)
                            & np.isfinite(c)):
        exact = math.fsum(list(a[i] * b[i]) + [c[i]])
        mu = math.fsum(np.abs(a[i] * b[i])) + abs(c[i])
        assert abs(got[i] - exact) <= bound.relative * mu + bound.absolute, i


def test_validate_addend_choice_is_checked(tmp_path) -> None:
    from thrifty.numerics.units import ADDENDS, load_validation_set, validate
    one = "3f800000"
    (tmp_path / "a_X_bf16.txt").write_text(f"{one} {one}\n")
    (tmp_path / "b_X_bf16.txt").write_text(f"{one} {one}\n")
    bits = format(0x3F800000, "032b")
    (tmp_path / "c_X_fp32.txt").write_text(bits + "\n")
    (tmp_path / "d_X_fp32.txt").write_text(format(0x40000000, "032b") + "\n")
    ds = load_validation_set(tmp_path)
    u = unit("a100", "bf16")
    assert ADDENDS == ("file", "zero")
    assert validate(u, ds, addend="file").matched == 0  # 1 + 1 + c=1 is 3, not 2
    assert validate(u, ds, addend="zero").matched == 1  # measured as D = A*B + 0
    with pytest.raises(FormatError, match="valid: file, zero"):
        validate(u, ds, addend="c")


def test_nvfp4_groups_are_exact_then_scaled() -> None:
    from thrifty.numerics.units import mx_dot
    a = np.zeros(64)
    b = np.zeros(64)
    a[:16], b[:16] = 6.0, 6.0  # one group of 16 products 36: exactly 576
    got = mx_dot(a, b, 0.0, np.array([1.5, 1, 1, 1]), np.array([2.0, 1, 1, 1]), "e2m1",
                 kind="mxf4nvf4", block=16, scale_format="e4m3")
    assert float(got) == 576 * 3.0


def test_fp4_group_below_the_35_bit_window_is_dropped() -> None:
    from thrifty.numerics.units import mx_dot
    a = np.zeros(64)
    b = np.zeros(64)
    a[0] = b[0] = 1.0    # group 0 (block 0, scale 2^20 * 2^20)
    a[32] = b[32] = 0.5  # group 2 (block 1, scale 2^-20 * 2^-20): 2^-42, beyond 2^(40-35)
    got = mx_dot(a, b, 0.0, np.array([2.0 ** 20, 2.0 ** -20]),
                 np.array([2.0 ** 20, 2.0 ** -20]), "e2m1", kind="mxf4")
    assert float(got) == 2.0 ** 40


@pytest.mark.parametrize(("kw", "needle"), [
    ({"kind": "mxf9"}, "valid: mxf8f6f4"),
    ({"kind": "mxf4", "block": 16}, "blocks of"),
    ({"kind": "mxf4nvf4", "block": 32, "scale_format": "e4m3"}, "blocks of 16"),
])
def test_block_scaled_refusals(kw, needle) -> None:
    from thrifty.numerics.units import mx_dot
    with pytest.raises(FormatError, match=needle):
        mx_dot(np.zeros(64), np.zeros(64), 0.0, np.ones(4), np.ones(4), "e2m1", **kw)
