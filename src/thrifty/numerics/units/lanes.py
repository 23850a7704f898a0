"""The fast compiled kernels: each step's aligned sum in binary64 lanes.

The step of :mod:`.compiled` (``_window_sum``: align every term to the largest exponent
``E``, keep ``F`` fraction bits, add), reorganised for the vector units. A term
``a_t b_t`` truncated to the window ending at ``2^L`` is ``trunc(a_t * b_t * 2^-L)``
computed on binary64 values, and that is exact for the models of :func:`float_eligible`:

* ``a_t * b_t`` is exact (two significands of at most 26 bits, no underflow);
* ``* 2^-L`` is a power-of-two scaling: exact when the result is normal, and a result
  below binary64's normal range is far below 1, where ``trunc`` (``floor``, the sticky
  bit) sees only that it is nonzero and below 1;
* ``trunc`` / ``floor`` of the scaled term is the truncated (``"truncate"``) or floored
  (``"round_down"``) aligned integer; ``"sticky"`` keeps one more bit and ORs the rest;
* the sum of at most ``fma`` such integers below ``2^(F + 3)`` stays below ``2^53``, so
  binary64 additions are integer additions, in any order.

The addend, the carries, the normalisation and the final rounding then run on the exact
integer sum, per lane, with the integer code of :mod:`.compiled` (``_addends``,
``_round_lanes``, ``_add_last_scalar``). Two drivers share one step: the GEMM, where a
row of ``A`` meets ``BJ`` contiguous columns of packed ``B`` (``gemm_lanes``), and the
batched dot products, ``BJ`` independent dot products side by side (``dots_lanes``).
Imported only through :func:`.kernels.compiled_kernels`.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from thrifty.numerics.units.compiled import (
    _NO_TERM,
    BI,
    BJ,
    _addends,
    _align_signed,
    _picked,
    _pow2,
)
from thrifty.numerics.units.kernels import (
    P_ADDLAST,
    P_CARRY,
    P_EMAXOUT,
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
    P_SUBOUT,
    P_ZEXP,
)

#: Exponents at or below this are sums involving ``_NO_TERM`` (a zero operand).
_DEAD = _NO_TERM // 2

_jit = numba.njit(nogil=True, cache=True)
_par = numba.njit(nogil=True, parallel=True, cache=True)
_inline = numba.njit(nogil=True, cache=True, inline="always")


@_inline
def _nbits(x):
    """Bits of a non-negative integer held in a binary64 (0 for 0): its exponent field."""
    return (np.float64(x).view(np.int64) >> 52) - 1022 if x != 0.0 else 0


@_inline
def _sticky(y):
    """``2 trunc(y)`` plus the sign of ``y`` when ``trunc`` dropped a nonzero fraction:
    a term aligned with one more bit and a sticky bit (``_align_term``'s mode 2)."""
    q = np.trunc(y)
    return 2.0 * q + (np.sign(y) if q != y else 0.0)


@_inline
def _to_output(mag, neg, L, rnd, norm, eminout, pout, top, inf_at_top, tiny):
    """``(-1)^neg mag 2^L`` (``mag`` an integer below ``2^53`` in a binary64) normalised
    to ``norm`` bits (``1 << 20``: none) and rounded with ``rnd`` (a code of ``RNDS``) to
    the output format: ``_round_out`` of :mod:`.compiled` in binary64 lanes (+0 for a zero
    ``mag``). Written without branches, so that the loops calling it vectorise."""
    nb = _nbits(mag)
    sn = min(max(max(L + nb - 1, eminout) - (norm - 1) - L, 0), 63)
    mag = np.floor(mag * _pow2(-sn)) * _pow2(sn)
    nb = _nbits(mag)
    q = max(L + nb - 1, eminout) - (pout - 1)
    s = q - L
    x = mag * _pow2(-min(max(s, 0), 1000))
    kept = np.floor(x)
    frac = x - kept
    half = (frac > 0.5) | ((frac == 0.5) & ((np.int64(kept) & 1) == 1))
    inexact = frac != 0.0
    up = (((rnd == 1) & half) | ((rnd == 2) & inexact & (not neg))
          | ((rnd == 3) & inexact & neg))
    rounded = (kept + (1.0 if up else 0.0)) * _pow2(q)
    exact = mag * _pow2(L)
    val = rounded if s > 0 else exact
    over = (val >= top) if inf_at_top else (val > top)
    val = math.inf if over else val
    val = 0.0 if val < tiny else val
    val = -val if neg else val
    return val if mag != 0.0 else 0.0


@_jit
def _round_row(row, S, L, CM, CE, ip, maxfin):
    """Add each lane's addend to its exact sum ``S[j] 2^L[j]``, apply carries, normalise
    and round into ``row`` (finite lanes only): ``_round_lanes`` of :mod:`.compiled`."""
    F, mode, carry = ip[P_F], ip[P_MODE], ip[P_CARRY]
    norm = ip[P_NORM] if ip[P_NORM] > 0 else 1 << 20
    low, eminout, pout, rnd = ip[P_PACC] - 1, ip[P_EMINOUT], ip[P_POUT], ip[P_RND]
    sticky = 1 if mode == 2 else 0
    inf_at_top = ip[P_INF] == 1
    top = _pow2(ip[P_EMAXOUT] + 1) if inf_at_top else maxfin
    poszero = 0.0 if ip[P_POSZERO] == 1 else -0.0
    tiny = _pow2(eminout) if ip[P_SUBOUT] == 0 else 0.0
    for j in range(BJ):
        S[j] += float(_align_signed(CM[j], CE[j] - low - L[j], mode))
    if carry >= 0:
        wrap = _pow2(F + 2 + carry + sticky)
        for j in range(BJ):
            m = np.fmod(abs(S[j]), wrap)
            S[j] = -m if S[j] < 0.0 else m
    for j in range(BJ):
        Sj = S[j]
        val = _to_output(abs(Sj), Sj < 0.0, L[j], rnd, norm, eminout, pout, top,
                         inf_at_top, tiny) + poszero
        r = row[j]
        row[j] = val if math.isfinite(r) else r


@_jit
def _add_last_row(d, acc, ip, maxfin):
    """``acc[j] = d[j] + acc[j]`` in the output format for the finite ``acc[j]``: two guard
    bits and a sticky bit, nearest-even (``_add_last_scalar`` of :mod:`.compiled`)."""
    p, eminout = ip[P_POUT], ip[P_EMINOUT]
    inf_at_top = ip[P_INF] == 1
    top = _pow2(ip[P_EMAXOUT] + 1) if inf_at_top else maxfin
    tiny = _pow2(eminout) if ip[P_SUBOUT] == 0 else 0.0
    for j in range(BJ):
        x = d[j]
        c = acc[j]
        ex = max(((np.float64(x).view(np.int64) >> 52) & 0x7FF) - 1023, eminout)
        ec = max(((np.float64(c).view(np.int64) >> 52) & 0x7FF) - 1023, eminout)
        E = max(ex if x != 0.0 else -4096, ec if c != 0.0 else -4096)
        L = E - p - 2 if E > -4096 else 0
        inv = _pow2(min(max(-L - 1, -1000), 1000))
        S = _sticky(x * inv) + _sticky(c * inv)
        r = _to_output(abs(S), S < 0.0, L, 1, 1 << 20, eminout, p, top, inf_at_top, tiny)
        r = r if math.isfinite(x) else x + c
        acc[j] = r if math.isfinite(c) else c


@_jit
def _emax_row(ea, i, ebr, s0, s1, sel, E, Z, zlive):
    """``E[j] = max(E[j], e_a + e_b)`` over the picked positions (a zero operand has
    exponent ``_NO_TERM``); ``Z[j]`` notes a zero product when zero terms align."""
    for t in range(s0, s1):
        if not _picked(t - s0, sel):
            continue
        et = ea[i, t]
        if et == _NO_TERM:
            if zlive:
                Z[:] = 1
            continue
        erow = ebr[t]
        for j in range(BJ):
            E[j] = max(E[j], et + erow[j])
        if zlive:
            for j in range(BJ):
                Z[j] |= erow[j] == _NO_TERM


@_jit
def _emax_lanes(ea, ebr, s0, s1, sel, E, Z, zlive):
    """:func:`_emax_row` with one ``a`` per lane (``ea`` packed like ``ebr``)."""
    for t in range(s0, s1):
        if not _picked(t - s0, sel):
            continue
        arow = ea[t]
        erow = ebr[t]
        for j in range(BJ):
            E[j] = max(E[j], arow[j] + erow[j])
        if zlive:
            for j in range(BJ):
                Z[j] |= (arow[j] == _NO_TERM) | (erow[j] == _NO_TERM)


@_jit
def _sum_row(af, i, bfr, s0, s1, sel, inv, S, mode):
    """``S[j]``: the picked products ``a_t b_t`` aligned (``* inv[j]``, a power of two)
    and cut to integers per ``mode``, summed exactly in binary64."""
    S[:] = 0.0
    for t in range(s0, s1):
        if not _picked(t - s0, sel):
            continue
        at = af[i, t]
        if at == 0.0:
            continue
        brow = bfr[t]
        if mode == 0:
            for j in range(BJ):
                S[j] += np.trunc(at * brow[j] * inv[j])
        elif mode == 1:
            for j in range(BJ):
                S[j] += np.floor(at * brow[j] * inv[j])
        else:
            for j in range(BJ):
                y = at * brow[j] * inv[j]
                q = np.trunc(y)
                S[j] += 2.0 * q + (np.sign(y) if q != y else 0.0)


@_jit
def _sum_lanes(af, bfr, s0, s1, sel, inv, S, mode):
    """:func:`_sum_row` with one ``a`` per lane (``af`` packed like ``bfr``)."""
    S[:] = 0.0
    for t in range(s0, s1):
        if not _picked(t - s0, sel):
            continue
        arow = af[t]
        brow = bfr[t]
        if mode == 0:
            for j in range(BJ):
                S[j] += np.trunc(arow[j] * brow[j] * inv[j])
        elif mode == 1:
            for j in range(BJ):
                S[j] += np.floor(arow[j] * brow[j] * inv[j])
        else:
            for j in range(BJ):
                y = arow[j] * brow[j] * inv[j]
                q = np.trunc(y)
                S[j] += 2.0 * q + (np.sign(y) if q != y else 0.0)


@_jit
def _window_ends(E, Z, zlive, ip, inv):
    """``E[j]`` (largest exponent) becomes ``L[j]``, the exponent of the window's last bit
    (zero terms raised to ``zero_exp``); ``inv[j] = 2^-L`` (half that for a sticky bit)."""
    sticky = 1 if ip[P_MODE] == 2 else 0
    F = ip[P_F]
    zexp = ip[P_ZEXP]
    for j in range(BJ):
        e = E[j]
        live = e > _DEAD
        if live and zlive and Z[j] == 1 and zexp > e:
            e = zexp
        L = e - F - sticky if live else 0
        E[j] = L
        inv[j] = _pow2(-L - sticky)


@_jit
def _step(af, ea, lanes, i, bfr, ebr, s0, sel, row, w, ip, maxfin):
    """One fused (sub-)step of the positions ``sel`` picks at ``s0`` for one row of lanes
    (``row``, in place); ``w``: the work arrays ``(E, Z, S, SI, inv, CM, CE)``."""
    E, Z, S, SI, inv, CM, CE = w
    k = bfr.shape[0]
    s1 = min(s0 + ip[P_FMA], k)
    _addends(row, E, CM, CE, ip)
    zlive = ip[P_ZEXP] != _NO_TERM
    if zlive:
        padded = s1 < s0 + ip[P_FMA]
        for j in range(BJ):
            Z[j] = 1 if (CM[j] == 0 or padded) else 0
    if lanes:
        _emax_lanes(ea, ebr, s0, s1, sel, E, Z, zlive)
    else:
        _emax_row(ea, i, ebr, s0, s1, sel, E, Z, zlive)
    _window_ends(E, Z, zlive, ip, inv)
    if lanes:
        _sum_lanes(af, bfr, s0, s1, sel, inv, S, ip[P_MODE])
    else:
        _sum_row(af, i, bfr, s0, s1, sel, inv, S, ip[P_MODE])
    _round_row(row, S, E, CM, CE, ip, maxfin)


@_jit
def _chain(af, ea, lanes, i0, bfr, ebr, acc, ip, maxfin):
    """The recursive sequence of steps (``_chain_scalar`` of :mod:`.compiled`) for the
    rows of lanes ``acc`` (start values in, results out), rows ``i0 + ii`` of ``A``."""
    h = acc.shape[0]
    last = ip[P_ADDLAST] == 1
    d = np.zeros((h, BJ)) if last else acc
    i64 = np.empty((5, BJ), dtype=np.int64)
    f64 = np.empty((2, BJ))
    w = (i64[0], i64[1], f64[0], i64[2], f64[1], i64[3], i64[4])
    inter = ip[P_INTER]
    first = 0 if inter == 0 else (1 if inter == 1 else 3)
    for s0 in range(0, bfr.shape[0], ip[P_FMA]):
        if last:
            d[:, :] = 0.0
        for ii in range(h):
            _step(af, ea, lanes, i0 + ii, bfr, ebr, s0, first, d[ii], w, ip, maxfin)
            if inter != 0:
                _step(af, ea, lanes, i0 + ii, bfr, ebr, s0, first + 1, d[ii], w, ip, maxfin)
        if last:
            for ii in range(h):
                _add_last_row(d[ii], acc[ii], ip, maxfin)


@_par
def gemm_lanes(af, ea, bfp, ebp, C, out, ip, maxfin):
    """``out = C + A @ B`` on the unit, blocks of rows and columns in parallel.

    ``af``/``ea``: the values of A (m, k) (binary64, subnormals flushed as the unit reads
    them) and their exponents (``_NO_TERM`` for zeros); ``bfp``/``ebp``: those of B packed
    as ``(ceil(n / BJ), k, BJ)`` (zeros in the padding).
    """
    m = af.shape[0]
    n = out.shape[1]
    nbi = (m + BI - 1) // BI
    nbj = bfp.shape[0]
    for blk in numba.prange(nbi * nbj):
        i0 = (blk // nbj) * BI
        j0 = (blk % nbj) * BJ
        h = min(m, i0 + BI) - i0
        wd = min(n, j0 + BJ) - j0
        acc = np.zeros((h, BJ))
        acc[:, :wd] = C[i0:i0 + h, j0:j0 + wd]
        _chain(af, ea, False, i0, bfp[blk % nbj], ebp[blk % nbj], acc, ip, maxfin)
        out[i0:i0 + h, j0:j0 + wd] = acc[:, :wd]


@_par
def dots_lanes(afp, eap, bfp, ebp, c, out, ip, maxfin):
    """``out[r] = c[r] + a_r . b_r`` for ``BJ`` dot products side by side per block:
    ``afp``/``eap``/``bfp``/``ebp`` packed as ``(ceil(N / BJ), K, BJ)`` (row ``r`` in lane
    ``r mod BJ`` of block ``r // BJ``, zeros in the padding)."""
    N = out.shape[0]
    for blk in numba.prange(afp.shape[0]):
        r0 = blk * BJ
        wd = min(N, r0 + BJ) - r0
        acc = np.zeros((1, BJ))
        acc[0, :wd] = c[r0:r0 + wd]
        _chain(afp[blk], eap[blk], True, 0, bfp[blk], ebp[blk], acc, ip, maxfin)
        out[r0:r0 + wd] = acc[0, :wd]


@_inline
def _split(x, p, emin, maxfin, subnormals):
    """``(value, exponent, ok)`` of a finite binary64 ``x`` read in a format of precision
    ``p`` (``value`` 0 and ``exponent`` ``_NO_TERM`` for a zero or a flushed subnormal);
    ``ok`` is false when ``x`` is not a value of the format (``decompose`` then names it)."""
    a = abs(x)
    e = max(((np.float64(a).view(np.int64) >> 52) & 0x7FF) - 1023, emin)
    m = a * _pow2(min(max(p - 1 - e, -1000), 1000))
    ok = (m == np.floor(m)) & (a <= maxfin)
    live = (a != 0.0) & (subnormals | (a >= _pow2(emin)))
    return (x if live else 0.0), (e if live else _NO_TERM), ok


@_par
def split_rows(x, p, emin, maxfin, subnormals, vals, exps):
    """``vals``/``exps`` (same shape as ``x``, 2-D): :func:`_split` of each entry; returns
    the number of entries that are not values of the format."""
    bad = 0
    for i in numba.prange(x.shape[0]):
        for t in range(x.shape[1]):
            v, e, ok = _split(x[i, t], p, emin, maxfin, subnormals)
            vals[i, t] = v
            exps[i, t] = e
            bad += 0 if ok else 1
    return bad


@_par
def split_packed(x, p, emin, maxfin, subnormals, vals, exps):
    """:func:`split_rows` of ``x`` (k, n) into column blocks ``(ceil(n / BJ), k, BJ)``:
    ``vals[b, t, j]`` from ``x[t, b BJ + j]``, zero terms in the padding."""
    n = x.shape[1]
    bad = 0
    for b in numba.prange(vals.shape[0]):
        for t in range(x.shape[0]):
            for j in range(BJ):
                col = b * BJ + j
                if col < n:
                    v, e, ok = _split(x[t, col], p, emin, maxfin, subnormals)
                    bad += 0 if ok else 1
                else:
                    v, e = 0.0, _NO_TERM
                vals[b, t, j] = v
                exps[b, t, j] = e
    return bad
