"""The compiled engine: one fused step as scalar integer loops, jitted with numba.

The same arithmetic as the numpy engine (:mod:`.exact`), one ``(i, j)`` entry at a time,
parallel over rows. Imported only through :func:`.kernels.compiled_kernels`; every function
is compiled on its first call (numba's cache keeps the machine code between runs).
"""

from __future__ import annotations

import math

import numba

from thrifty.numerics.units.kernels import (
    P_ADDLAST,
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
    P_POSZERO,
    P_POUT,
    P_RND,
    P_SHIFT,
    P_SUBIN,
    P_SUBOUT,
    P_ZEXP,
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
def _picked(r, sel):
    """Whether position ``r`` of a step belongs to sub-step ``sel``: 0 all, 1 even, 2 odd,
    3 ``r mod 4 < 2``, 4 the others."""
    if sel == 0:
        return True
    if sel == 1:
        return r % 2 == 0
    if sel == 2:
        return r % 2 == 1
    if sel == 3:
        return r % 4 < 2
    return r % 4 >= 2


@_jit
def _window_sum(ma, ea, na, mb, eb, nb, start, sel, c, ip):
    """``(S, L, any)``: the aligned sum of the terms of positions ``sel`` picks of the step
    at ``start`` (positions past the row are zeros), ``S 2^L`` (carries applied)."""
    F = ip[P_F]
    mode = ip[P_MODE]
    cm, ce = _addend(c, ip)
    stop = min(start + ip[P_FMA], ma.shape[0])
    E = _NO_TERM
    zero_seen = cm == 0 or stop < start + ip[P_FMA]
    if cm != 0:
        E = ce
    for j in range(start, stop):
        if not _picked(j - start, sel):
            continue
        if ma[j] != 0 and mb[j] != 0:
            e = ea[j] + eb[j]
            if e > E:
                E = e
        else:
            zero_seen = True
    if E == _NO_TERM:
        return 0, 0, False
    if zero_seen and ip[P_ZEXP] > E:
        E = ip[P_ZEXP]
    L = E - F
    if mode == 2:
        L -= 1
    S = 0
    for j in range(start, stop):
        if _picked(j - start, sel) and ma[j] != 0 and mb[j] != 0:
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
def _round_out(mag, negS, L, ip, maxfin, rnd, norm):
    """``(-1)^negS mag 2^L`` (``mag > 0``) normalised to ``norm`` bits (0: none) and rounded
    (``rnd``, a code of ``RNDS``) to the output format."""
    eminout = ip[P_EMINOUT]
    nbits = _bit_length(mag)
    if norm > 0:
        eff = max(L + nbits - 1, eminout)
        s = eff - (norm - 1) - L
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
def _fused_scalar(ma, ea, na, mb, eb, nb, start, sel, c, ip, maxfin):
    """One fused step over the positions ``sel`` picks of the step at ``start`` (scalar)."""
    S, L, live = _window_sum(ma, ea, na, mb, eb, nb, start, sel, c, ip)
    if not live or S == 0:
        return 0.0
    d = _round_out(-S if S < 0 else S, S < 0, L, ip, maxfin, ip[P_RND], ip[P_NORM])
    return d + 0.0 if ip[P_POSZERO] == 1 else d


@_jit
def _output_term(x, ip):
    """``(m, e)`` of a finite value of the output format (``m = 0`` for zero)."""
    eminout = ip[P_EMINOUT]
    if x == 0.0:
        return 0, eminout
    e = max(math.frexp(abs(x))[1] - 1, eminout)
    return int(math.ldexp(abs(x), ip[P_POUT] - 1 - e)), e


@_jit
def _add_last_scalar(d, c, ip, maxfin):
    """``d + c`` in the output format: two guard bits and a sticky bit, nearest-even."""
    if not (math.isfinite(d) and math.isfinite(c)):
        return d + c
    p = ip[P_POUT]
    md, de = _output_term(d, ip)
    mc, ce = _output_term(c, ip)
    if md == 0 and mc == 0:
        return 0.0
    E = de if mc == 0 else (ce if md == 0 else max(de, ce))
    L = E - (p + 1) - 1
    S = 0
    if md != 0:
        S += _align_term(md, de - (p - 1) - L, 2, d < 0.0)
    if mc != 0:
        S += _align_term(mc, ce - (p - 1) - L, 2, c < 0.0)
    if S == 0:
        return 0.0
    # the final addition rounds to nearest-even in the output format, no normaliser
    return _round_out(-S if S < 0 else S, S < 0, L, ip, maxfin, 1, 0)


@_jit
def _chain_scalar(ma, ea, na, mb, eb, nb, c, ip, maxfin):
    """The recursive sequence of steps for one row pair (scalar)."""
    k = ma.shape[0]
    f = ip[P_FMA]
    inter = ip[P_INTER]
    for s0 in range(0, k, f):
        if not math.isfinite(c):
            return c
        d = 0.0 if ip[P_ADDLAST] == 1 else c
        if inter == 0:
            d = _fused_scalar(ma, ea, na, mb, eb, nb, s0, 0, d, ip, maxfin)
        else:
            first = 1 if inter == 1 else 3
            d = _fused_scalar(ma, ea, na, mb, eb, nb, s0, first, d, ip, maxfin)
            if math.isfinite(d):
                d = _fused_scalar(ma, ea, na, mb, eb, nb, s0, first + 1, d, ip, maxfin)
        c = _add_last_scalar(d, c, ip, maxfin) if ip[P_ADDLAST] == 1 else d
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
