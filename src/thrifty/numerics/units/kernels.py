"""The compiled engine's parameters and its lazily compiled kernels.

The kernels (:mod:`.compiled`) compute the same step as the numpy engine, as scalar integer
loops jitted with numba; they are compiled on first use by :func:`compiled_kernels` (a
cached loader: importing this module imports neither numba nor the kernels). A model's
parameters travel to them as one int64 vector (:func:`kernel_params`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np

from thrifty.numerics.formats import get_format
from thrifty.numerics.units.model import UnitModel

# Integer parameters of a model, in this order (``kernel_params``):
P_FMA, P_F, P_SHIFT, P_MODE, P_CARRY, P_NORM, P_RND, P_SUBIN, P_SUBOUT, \
    P_INTER, P_PACC, P_EMINACC, P_POUT, P_EMINOUT, P_EMAXOUT, P_INF, P_ZEXP, P_ADDLAST, \
    P_POSZERO = range(19)
MODES = {"truncate": 0, "round_down": 1, "sticky": 2}
RNDS = {"toward_zero": 0, "nearest_even": 1, "up": 2, "down": 3}
#: ``P_INTER``: one fused step, odd/even halves, halves in pairs (``j mod 4 < 2`` first).
INTER = {None: 0, "odd_even": 1, "pairs": 2}
#: ``P_ZEXP`` of a model without ``zero_exp`` (zero terms never win the alignment).
NO_ZERO_EXP = -(1 << 40)


def kernel_params(md: UnitModel) -> tuple[np.ndarray, float]:
    """``(ip, max_finite)``: the model as the kernels read it."""
    fin, facc, fout = (get_format(md.input), get_format(md.accumulator),
                       get_format(md.output))
    p = np.array([md.fma, md.window_bits, 2 * (fin.precision - 1), MODES[md.shifted_out],
                  -1 if md.carry_bits is None else md.carry_bits, md.normalize_bits or 0,
                  RNDS[md.rounding], int(md.subnormals_in), int(md.subnormals_out),
                  INTER[md.interleave_pattern if md.interleave else None], facc.precision,
                  facc.emin, fout.precision, fout.emin, fout.emax, int(fout.has_inf),
                  NO_ZERO_EXP if md.zero_exp is None else md.zero_exp, int(md.addend_last),
                  int(md.positive_zero)], dtype=np.int64)
    return p, float(fout.max_finite)


def compiled_eligible(md: UnitModel) -> bool:
    """Models the compiled kernel computes: a finite window narrow enough for int64."""
    F = md.window_bits
    return F is not None and md.c_in_alignment and F + 8 + md.fma.bit_length() < 60


def tiled_eligible(md: UnitModel) -> bool:
    """Models the tiled GEMM kernel takes: compiled-eligible, and every exponent it builds
    from bits (addends, results, ``2^e`` scale factors) inside binary64's normal range."""
    fin, fout, facc = (get_format(md.input), get_format(md.output),
                       get_format(md.accumulator))
    return (compiled_eligible(md) and fout.emin - fout.precision >= -1000
            and facc.emin >= -1000 and 2 * (fin.emax + 2) + 64 <= 1000
            and fout.emax <= 1000)


def lanes_eligible(md: UnitModel) -> bool:
    """Models the binary64-lane kernels (:mod:`.lanes`) compute exactly: tiled-eligible,
    input significands of at most 26 bits, a step's aligned sum below ``2^53``, and every
    power of two the alignment scales by, and every scaled product, inside binary64's
    range (see that module)."""
    if not tiled_eligible(md):
        return False
    fin, facc = get_format(md.input), get_format(md.accumulator)
    F = md.window_bits
    assert F is not None
    z = 0 if md.zero_exp is None else md.zero_exp
    lo = min(2 * fin.emin, facc.emin, z)
    hi = max(2 * (fin.emax + 1), facc.emax, z)
    return (fin.precision <= 26 and F + 4 + md.fma.bit_length() <= 52
            and F + 2 - lo <= 1000 and hi <= 1000
            and 2 * (fin.emin - fin.precision + 1) - hi >= -1000)


@functools.cache
def lane_kernels() -> tuple[Callable[..., None], Callable[..., None], Callable[..., int],
                            Callable[..., int]]:
    """The ``(dots_lanes, gemm_lanes, split_rows, split_packed)`` kernels of :mod:`.lanes`
    (models of :func:`lanes_eligible`), imported (so jitted lazily) on first call."""
    from thrifty.numerics.units import lanes

    return lanes.dots_lanes, lanes.gemm_lanes, lanes.split_rows, lanes.split_packed


@functools.cache
def compiled_kernels() -> tuple[Callable[..., None], Callable[..., None],
                                Callable[..., None]]:
    """The ``(dots, gemm_tiled, gemm_rows)`` kernels, imported (so jitted lazily) on first
    call.

    ``dots`` runs the chain of steps one row pair at a time, ``gemm_rows`` the same per
    ``(i, j)``; ``gemm_tiled`` (signed significands and exponents of A (m, k) and of B
    packed in column blocks) advances blocks of rows and columns one step at a time over
    contiguous columns (models of :func:`tiled_eligible`).
    """
    from thrifty.numerics.units import compiled

    return compiled.dots_kernel, compiled.gemm_tiled, compiled.gemm_kernel


#: Former private name, kept for the tests and benchmarks that import it.
_compiled_eligible = compiled_eligible
