"""The compiled engine: one fused step as scalar integer loops, jitted with numba.

The same arithmetic as the numpy engine (:mod:`.exact`), one ``(i, j)`` entry at a time,
parallel over rows. Imported only through :func:`.kernels.compiled_kernels`; every function
is compiled on its first call (numba's cache keeps the machine code between runs).
"""

from __future__ import annotations

import math

import numba

from thrifty.numerics.units.kernels import (
    P_CARRY,
    P_EMAXOUT,
    P_EMINACC,
    P_EMINOUT,
    P_F,
    P_FMA,
    P_INF,
    P_INTER,
    P_MODE,
    P_NORM,
    P_PACC,
    P_POUT,
    P_RND,
    P_SHIFT,
    P_SUBIN,
    P_SUBOUT,
)

_NO_TERM = -(1 << 40)  # the largest exponent of a step without nonzero terms

_jit = numba.njit(nogil=True, cache=True)
_par = numba.njit(nogil=True, parallel=True, cache=True)


@_jit
def _align_term(m, sh, mode, neg):
    """A term ``m 2^sh`` (window units) kept as an integer: truncated, floored or sticky."""
    s = sh - 1 if mode == 2 else sh  # sticky mode keeps one more bit below the window
    if s >= 0:
        t = m << s
        lost = False
    else:
        r = min(-s, 63)
        t = m >> r
        lost = (t << r) != m
    if mode == 2:
        t = (t << 1) | (1 if lost else 0)
    elif mode == 1 and neg and lost:
        t += 1
    return -t if neg else t


@_jit
def _bit_length(mag):
    nbits = 0
    while mag > 0:
        nbits += 1
        mag >>= 1
    return nbits


@_jit
def _addend(c, ip):
    """``(m, e)``: the addend read in the accumulator format (``m = 0`` when flushed)."""
    eminacc = ip[P_EMINACC]
    ac = abs(c)
    if ac != 0.0 and (ip[P_SUBIN] == 1 or ac >= math.ldexp(1.0, eminacc)):
        ce = max(math.frexp(ac)[1] - 1, eminacc)
        return int(math.ldexp(ac, ip[P_PACC] - 1 - ce)), ce
    return 0, eminacc


@_jit
def _window_sum(ma, ea, na, mb, eb, nb, start, stop, stride, c, ip):
    """``(S, L, any)``: the aligned sum of one step's terms, ``S 2^L`` (carries applied)."""
    F = ip[P_F]
    mode = ip[P_MODE]
    cm, ce = _addend(c, ip)
    E = _NO_TERM
    if cm != 0:
        E = ce
    for j in range(start, stop, stride):
        if ma[j] != 0 and mb[j] != 0:
            e = ea[j] + eb[j]
            if e > E:
                E = e
    if E == _NO_TERM:
        return 0, 0, False
    L = E - F
    if mode == 2:
        L -= 1
    S = 0
    for j in range(start, stop, stride):
        if ma[j] != 0 and mb[j] != 0:
            S += _align_term(ma[j] * mb[j], ea[j] + eb[j] - ip[P_SHIFT] - L, mode,
                             na[j] != nb[j])
    if cm != 0:
        S += _align_term(cm, ce - (ip[P_PACC] - 1) - L, mode, c < 0.0)
    if ip[P_CARRY] >= 0:
        width = F + 2 + ip[P_CARRY] + (1 if mode == 2 else 0)
        mag = abs(S) % (1 << width)
        S = -mag if S < 0 else mag
    return S, L, True


@_jit
def _round_out(mag, negS, L, ip, maxfin):
    """``(-1)^negS mag 2^L`` (``mag > 0``) normalised and rounded to the output format."""
    eminout = ip[P_EMINOUT]
    nbits = _bit_length(mag)
    if ip[P_NORM] > 0:
        eff = max(L + nbits - 1, eminout)
        s = eff - (ip[P_NORM] - 1) - L
        if s > 0:
            mag = (mag >> min(s, 63)) << min(s, 63)
            if mag == 0:
                return 0.0
            nbits = _bit_length(mag)
    eff = max(L + nbits - 1, eminout)
    q = eff - (ip[P_POUT] - 1)
    s = q - L
    if s <= 0:
        val = math.ldexp(float(mag), L)
    else:
        sc = min(s, 63)
        kept = mag >> sc
        rem = mag - (kept << sc)
        rnd = ip[P_RND]
        up = False
        if rem != 0:
            if rnd == 1:
                half = 1 << min(s - 1, 62)
                up = rem > half or (rem == half and (kept & 1) == 1)
                if s > 63:
                    up = False
            elif rnd == 2:
                up = not negS
            elif rnd == 3:
                up = negS
        if up:
            kept += 1
        val = math.ldexp(float(kept), q)
    if ip[P_INF] == 1:
        if val >= math.ldexp(1.0, ip[P_EMAXOUT] + 1):
            val = math.inf
    elif val > maxfin:
        val = math.inf
    if ip[P_SUBOUT] == 0 and val < math.ldexp(1.0, eminout):
        val = 0.0
    return -val if negS else val


@_jit
def _fused_scalar(ma, ea, na, mb, eb, nb, start, stop, stride, c, ip, maxfin):
    """One fused step over positions ``start:stop:stride`` of one row pair (scalar)."""
    S, L, live = _window_sum(ma, ea, na, mb, eb, nb, start, stop, stride, c, ip)
    if not live or S == 0:
        return 0.0
    return _round_out(-S if S < 0 else S, S < 0, L, ip, maxfin)


@_jit
def _chain_scalar(ma, ea, na, mb, eb, nb, c, ip, maxfin):
    """The recursive sequence of steps for one row pair (scalar)."""
    k = ma.shape[0]
    f = ip[P_FMA]
    for s0 in range(0, k, f):
        s1 = min(s0 + f, k)
        if not math.isfinite(c):
            return c
        if ip[P_INTER] == 1:
            c = _fused_scalar(ma, ea, na, mb, eb, nb, s0, s1, 2, c, ip, maxfin)
            if not math.isfinite(c):
                return c
            c = _fused_scalar(ma, ea, na, mb, eb, nb, s0 + 1, s1, 2, c, ip, maxfin)
        else:
            c = _fused_scalar(ma, ea, na, mb, eb, nb, s0, s1, 1, c, ip, maxfin)
    return c


@_par
def dots_kernel(ma, ea, na, mb, eb, nb, c, out, ip, maxfin):
    """``out[i]``: the chain of steps over row ``i`` of ``a`` and ``b`` from ``c[i]``."""
    for i in numba.prange(ma.shape[0]):
        out[i] = _chain_scalar(ma[i], ea[i], na[i], mb[i], eb[i], nb[i], c[i], ip, maxfin)


@_par
def gemm_kernel(ma, ea, na, mbt, ebt, nbt, C, out, ip, maxfin):
    """``out[i, j]``: the chain over row ``i`` of ``A`` and row ``j`` of ``B^T`` from ``C``."""
    for i in numba.prange(ma.shape[0]):
        for j in range(mbt.shape[0]):
            out[i, j] = _chain_scalar(ma[i], ea[i], na[i], mbt[j], ebt[j], nbt[j], C[i, j],
                                      ip, maxfin)
