"""The compiled engine: one fused step as scalar integer loops, jitted with numba.

The same arithmetic as the numpy engine (:mod:`.exact`), one ``(i, j)`` entry at a time,
parallel over rows, and a tiled GEMM on int64 significands. Models whose steps fit
binary64 lanes run the faster kernels of :mod:`.lanes` instead (they share this module's
addend and rounding helpers); these kernels take the wider windows. Imported only through
:func:`.kernels.compiled_kernels`; every function is compiled on its first call (numba's
cache keeps the machine code between runs).
"""

from __future__ import annotations

import math

import numba
import numpy as np

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
_inline = numba.njit(nogil=True, cache=True, inline="always")


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
    """Bits of a non-negative int64 (``float(mag)`` may round up to the next power of 2)."""
    if mag == 0:
        return 0
    nbits = math.frexp(float(mag))[1]
    if (mag >> (nbits - 1)) == 0:
        nbits -= 1
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


# ---- the tiled GEMM kernel -------------------------------------------------------------------
# The same steps, reorganised for speed: a block of BI rows of A and BJ columns of B advances
# one step at a time, and each step's loops run over the BJ columns, contiguous in the packed
# B (``(n / BJ, k, BJ)``, zero-padded), so the compiler vectorises them. Operands are signed
# significands (``-m`` for negative values) with exponents.

BI = 16
BJ = 64


@_inline
def _align_signed(p, sh, mode):
    """``_align_term`` of the signed integer term ``p 2^sh`` (|p| 2^sh rounded per mode)."""
    neg = p < 0
    a = -p if neg else p
    s = sh - 1 if mode == 2 else sh
    sl = min(max(s, 0), 63)
    sr = min(max(-s, 0), 63)
    up = a << sl
    t = up >> sr
    if mode == 2:
        t = (t << 1) | ((t << sr) != up)
    elif mode == 1:
        t += neg & ((t << sr) != up)
    return -t if neg else t


@_jit
def _max_exponents(sa, ea, i, sbr, ebr, s0, s1, sel, E, Z):
    """``E[j] = max(E[j], e_a + e_b)`` over the nonzero products the sub-step ``sel``
    picks; ``Z[j]`` notes a zero product among them."""
    for t in range(s0, s1):
        if not _picked(t - s0, sel):
            continue
        if sa[i, t] == 0:
            for j in range(BJ):
                Z[j] = 1
            continue
        et = ea[i, t]
        brow = sbr[t]
        erow = ebr[t]
        for j in range(BJ):
            nz = brow[j] != 0
            e = et + erow[j] if nz else _NO_TERM
            E[j] = max(E[j], e)
            Z[j] |= 0 if nz else 1


@_jit
def _aligned_sum(sa, ea, i, sbr, ebr, s0, s1, sel, L, S, shift, mode):
    """``S[j]``: the sub-step's products aligned to the window ending at ``2^L[j]``, summed."""
    for j in range(BJ):
        S[j] = 0
    for t in range(s0, s1):
        if not _picked(t - s0, sel):
            continue
        at = sa[i, t]
        if at == 0:
            continue
        xt = ea[i, t] - shift
        brow = sbr[t]
        erow = ebr[t]
        if mode == 0:  # truncation toward zero: the common case, without the lost bits
            for j in range(BJ):
                p = at * brow[j]
                a = -p if p < 0 else p
                s = xt + erow[j] - L[j]
                v = (a << min(max(s, 0), 63)) >> min(max(-s, 0), 63)
                S[j] += -v if p < 0 else v
        else:
            for j in range(BJ):
                S[j] += _align_signed(at * brow[j], xt + erow[j] - L[j], mode)


@_inline
def _pow2(e):
    """``2.0**e`` built from its bits (``-1022 <= e <= 1023``)."""
    return np.int64((e + 1023) << 52).view(np.float64)


@_jit
def _addends(row, E, CM, CE, ip):
    """Each lane's addend read in the accumulator format, from the bits of its float64.

    ``CM``/``CE``: signed significand (0 when zero, flushed or non-finite) and exponent;
    ``E`` starts at the addend's exponent (no term: ``_NO_TERM``).
    """
    eminacc = ip[P_EMINACC]
    r0 = 52 - (ip[P_PACC] - 1)
    subin = ip[P_SUBIN]
    for j in range(BJ):
        c = row[j]
        bits = np.int64(np.float64(c).view(np.int64))
        e64 = ((bits >> 52) & 0x7FF) - 1023
        ce = max(e64, eminacc)
        cm = (((bits & 0xFFFFFFFFFFFFF) | (1 << 52)) >> min(r0 + ce - e64, 63))
        live = c != 0.0 and e64 != 1024 and (subin == 1 or e64 >= eminacc)
        cm = cm if live else 0
        CM[j] = -cm if c < 0.0 else cm
        CE[j] = ce
        E[j] = ce if cm != 0 else _NO_TERM


@_jit
def _round_lanes(row, S, L, CM, CE, ip, maxfin):
    """Add each lane's addend, apply carries, normalise and round into ``row`` (finite
    lanes only): :func:`_round_out` for a whole block of columns."""
    F, mode, carry, norm = ip[P_F], ip[P_MODE], ip[P_CARRY], ip[P_NORM]
    low, eminout, pout, rnd = ip[P_PACC] - 1, ip[P_EMINOUT], ip[P_POUT], ip[P_RND]
    sticky = 1 if mode == 2 else 0
    top = math.ldexp(1.0, ip[P_EMAXOUT] + 1) if ip[P_INF] == 1 else maxfin
    inf_at_top = ip[P_INF] == 1
    poszero = ip[P_POSZERO] == 1
    tiny = math.ldexp(1.0, eminout) if ip[P_SUBOUT] == 0 else 0.0
    for j in range(BJ):
        Sj = S[j] + _align_signed(CM[j], CE[j] - low - L[j], mode)
        if carry >= 0:
            m = abs(Sj) % (1 << (F + 2 + carry + sticky))
            Sj = -m if Sj < 0 else m
        neg = Sj < 0
        mag = -Sj if neg else Sj
        Lj = L[j]
        nb = _bit_length(mag)
        if norm > 0:
            sn = min(max(max(Lj + nb - 1, eminout) - (norm - 1) - Lj, 0), 63)
            mag = (mag >> sn) << sn
            nb = _bit_length(mag)
        q = max(Lj + nb - 1, eminout) - (pout - 1)
        s = q - Lj
        sc = min(max(s, 0), 63)
        kept = mag >> sc
        rem = mag - (kept << sc)
        if rnd == 1:
            half = np.int64(1) << min(max(s - 1, 0), 62)
            up = (rem > half or (rem == half and (kept & 1) == 1)) and s <= 63
        elif rnd == 2:
            up = rem != 0 and not neg
        elif rnd == 3:
            up = rem != 0 and neg
        else:
            up = False
        kept += up
        val = float(kept) * _pow2(q) if s > 0 else float(mag) * _pow2(Lj)
        val = math.inf if (val >= top if inf_at_top else val > top) else val
        val = 0.0 if val < tiny else val
        val = -val if neg else val
        val = val + 0.0 if poszero else val
        if mag != 0 and math.isfinite(row[j]):
            row[j] = val
        elif math.isfinite(row[j]):
            row[j] = 0.0


@_jit
def _step_block(sa, ea, sbr, ebr, i0, i1, s0, sel, acc, E, S, CM, CE, Z, ip, maxfin):
    """One fused (sub-)step for rows ``i0:i1`` and one packed column block, on the
    positions ``sel`` picks (see :func:`_picked`) of the step at ``s0``: ``acc`` in place."""
    F = ip[P_F]
    mode = ip[P_MODE]
    sticky = 1 if mode == 2 else 0
    zexp = ip[P_ZEXP]
    s1 = min(s0 + ip[P_FMA], sa.shape[1])
    padded = s1 < s0 + ip[P_FMA]
    for ii in range(i1 - i0):
        row = acc[ii]
        _addends(row, E, CM, CE, ip)
        for j in range(BJ):
            Z[j] = 1 if (CM[j] == 0 or padded) else 0
        _max_exponents(sa, ea, i0 + ii, sbr, ebr, s0, s1, sel, E, Z)
        for j in range(BJ):
            e = E[j]
            if e != _NO_TERM and Z[j] == 1 and zexp > e:
                e = zexp
            E[j] = e - F - sticky  # now L, the exponent of the window's last bit
        _aligned_sum(sa, ea, i0 + ii, sbr, ebr, s0, s1, sel, E, S, ip[P_SHIFT], mode)
        _round_lanes(row, S, E, CM, CE, ip, maxfin)


@_jit
def _gemm_block(sa, ea, sbr, ebr, C, out, ip, maxfin, i0, i1, j0, j1):
    """Rows ``i0:i1`` and columns ``j0:j1`` (one packed block ``sbr``/``ebr``) of D: the
    chain of steps of :func:`_chain_scalar`, a block of lanes at a time."""
    w = j1 - j0
    h = i1 - i0
    acc = np.zeros((h, BJ))
    for ii in range(h):
        for j in range(w):
            acc[ii, j] = C[i0 + ii, j0 + j]
    last = ip[P_ADDLAST] == 1
    d = np.zeros((h, BJ)) if last else acc
    E = np.empty(BJ, dtype=np.int64)
    S = np.empty(BJ, dtype=np.int64)
    CM = np.empty(BJ, dtype=np.int64)
    CE = np.empty(BJ, dtype=np.int64)
    Z = np.empty(BJ, dtype=np.int64)
    inter = ip[P_INTER]
    first = 0 if inter == 0 else (1 if inter == 1 else 3)
    for s0 in range(0, sa.shape[1], ip[P_FMA]):
        if last:
            d[:, :] = 0.0
        _step_block(sa, ea, sbr, ebr, i0, i1, s0, first, d, E, S, CM, CE, Z, ip, maxfin)
        if inter != 0:
            _step_block(sa, ea, sbr, ebr, i0, i1, s0, first + 1, d, E, S, CM, CE, Z, ip,
                        maxfin)
        if last:
            for ii in range(h):
                for j in range(BJ):
                    if math.isfinite(acc[ii, j]):
                        acc[ii, j] = _add_last_scalar(d[ii, j], acc[ii, j], ip, maxfin)
    for ii in range(h):
        for j in range(w):
            out[i0 + ii, j0 + j] = acc[ii, j]


@_par
def gemm_tiled(sa, ea, sbp, ebp, C, out, ip, maxfin):
    """``out = C + A @ B`` on the unit, blocks of rows and columns in parallel.

    ``sa``/``ea``: signed significands and exponents of A (m, k); ``sbp``/``ebp``: those of
    B packed as ``(ceil(n / BJ), k, BJ)`` (zero significands in the padding).
    """
    m = sa.shape[0]
    n = out.shape[1]
    nbi = (m + BI - 1) // BI
    nbj = sbp.shape[0]
    for blk in numba.prange(nbi * nbj):
        bi = blk // nbj
        bj = blk % nbj
        i0 = bi * BI
        j0 = bj * BJ
        _gemm_block(sa, ea, sbp[bj], ebp[bj], C, out, ip, maxfin, i0, min(m, i0 + BI), j0,
                    min(n, j0 + BJ))
