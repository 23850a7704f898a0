"""The compiled rounding engine: :func:`thrifty.numerics.rounding.encode`'s algorithm as
numba loops over the raw bits of the input.

Imported only through :func:`thrifty.numerics.rounding_fast.compiled_kernels` (numba
compiles each kernel on its first call and caches the machine code). The numpy engine in
:mod:`thrifty.numerics.rounding` is the readable reference; tests run both on every format,
rounding and saturation. ``prm`` is the int64 parameter vector of
:func:`thrifty.numerics.rounding_fast.fast_params`.
"""

from __future__ import annotations

import math

import numba
import numpy as np

_jit = numba.njit(nogil=True, cache=True, boundscheck=False)
_inline = numba.njit(nogil=True, cache=True, inline="always")


@_jit
def _stochastic_up(rem, shift, nbits, mode, r):
    """Whether a stochastic rounding (modes 6-8) rounds away: ``d + r >= 2**nbits``."""
    one = np.int64(1)
    if shift <= nbits:
        d = rem << (nbits - shift)
        dshift = np.int64(0)
    else:
        dshift = min(shift - nbits, 62)
        d = rem >> dshift
    if mode != 8 and dshift > 0:
        low = rem & ((one << dshift) - one)
        dhalf = one << (dshift - 1)
        d_odd = (d & one) == 1
        if low > dhalf or (low == dhalf and (d_odd if mode == 6 else not d_odd)):
            d += 1
    return np.int64(d + r >= (one << nbits))


@_jit
def _round_bits(ub, prm, r):
    """Round the raw bits ``ub``: ``(neg, big_e, f, e_scale, e_eff, kept, mag)``."""
    sbits, st, sbias, semask = prm[0], prm[1], prm[2], prm[3]
    t, p, bias, emin = prm[4], prm[5], prm[6], prm[7]
    has_sub, tie_code, mode, nbits = prm[8], prm[9], prm[10], prm[11]
    one = np.int64(1)
    neg = (ub >> (sbits - 1)) & one
    big_e = (ub >> st) & semask
    f = ub & ((one << st) - 1)
    normal = np.int64(big_e != 0)
    m = f | (normal << st)
    e_scale = big_e - sbias + 1 - normal
    e_eff = max(e_scale, emin) if has_sub == 1 else e_scale
    shift = e_eff - e_scale + st + 1 - p
    sh = min(shift, 62)
    kept = m >> sh
    rem = m & ((one << sh) - one)
    half = (one << sh) >> 1
    inexact = np.int64(rem != 0)
    if tie_code == 1:
        odd = np.int64(kept != 0) & ((e_eff + bias) & one)
    else:
        odd = kept & one
    if mode == 0:
        up = np.int64(rem > half) | (np.int64(rem == half) & inexact & odd)
    elif mode == 1:
        up = np.int64(rem >= half) & inexact
    elif mode == 2:
        up = np.int64(0)
    elif mode == 3:
        up = inexact & (one - neg)
    elif mode == 4:
        up = inexact & neg
    elif mode == 5:
        up = inexact & (one - odd)
    else:
        up = _stochastic_up(rem, shift, nbits, mode, r)
    kept += up
    mag = ((e_eff + bias) << t) + kept - (one << t)
    return neg, big_e, f, e_scale, e_eff, kept, mag


@_jit
def _rare_magnitude(prm, neg, big_e, f, e_scale, mag, limit):
    """``(mag, make_nan, bad_nan)`` of a NaN, infinity, overflow or no-zero element."""
    semask, emin, mode, sat = prm[3], prm[7], prm[10], prm[12]
    inf_mag, has_inf, nan_kind, nozero = prm[14], prm[15], prm[16], 1 - prm[8]
    if big_e == semask and f != 0:
        if nan_kind == 0:
            return np.int64(0), False, 1
        return mag, True, 0
    if big_e == semask:
        if (nan_kind == 0 and has_inf == 0) or sat == 1:
            return limit, False, 0
        if has_inf == 1:
            return inf_mag, False, 0
        return mag, True, 0
    if mag > limit:
        if sat != 0 or (nan_kind == 0 and has_inf == 0) or mode == 2 or mode == 5 \
                or (mode == 3 and neg == 1) or (mode == 4 and neg == 0):
            return limit, False, 0
        if has_inf == 1:
            return inf_mag, False, 0
        return mag, True, 0
    if nozero == 1 and e_scale < emin:
        return np.int64(0), False, 0
    return mag, False, 0


@_jit
def _rare_code(prm, specials, neg, mag, limit, make_nan):
    """``(code, value)`` of a rare element once its magnitude is known."""
    t, has_inf, nan_kind = prm[4], prm[15], prm[16]
    unsigned, nozero, twos, bits, top = 1 - prm[17], 1 - prm[8], prm[19], prm[20], prm[21]
    inf_mag = prm[14]
    one = np.int64(1)
    if make_nan:
        if nan_kind == 3:
            return one << (bits - 1), np.nan
        if unsigned == 1:
            return top, np.nan
        if nan_kind == 1:
            return (inf_mag | (one << (t - 1))) | (neg << (bits - 1)), np.nan
        return top | (neg << (bits - 1)), np.nan
    if mag == limit:
        v = specials[1] if neg == 1 else specials[0]
    elif has_inf == 1 and mag == inf_mag:
        v = np.inf
    elif nozero == 1 and mag == 0:
        v = specials[2]
    else:
        v = 0.0
    if unsigned == 1:
        code = mag
    elif twos == 1:
        code = ((-mag) & ((one << bits) - 1)) if neg == 1 else mag
    else:
        code = mag | (neg << (bits - 1))
    if neg == 1 and unsigned == 0:
        v = -v
    return code, v


@_jit
def general_kernel(src, prm, rbits, specials, codes_out, values_out):
    """Round every element of ``src`` (raw float bits); write codes and/or values.

    Every rounding, stochastic ones included; NaN, infinity, overflow and the other
    special cases take a rare branch. ``specials`` = [max finite, magnitude of the most
    negative finite, smallest positive]. Returns the number of NaN inputs met by a format
    without NaN (the caller raises).
    """
    sbits, p, mode, max_mag = prm[0], prm[5], prm[10], prm[13]
    unsigned, nozero = 1 - prm[17], 1 - prm[8]
    has_nz, twos, bits = prm[18], prm[19], prm[20]
    one = np.int64(1)
    absmask = (one << (sbits - 1)) - 1 if sbits < 64 else np.int64(0x7FFFFFFFFFFFFFFF)
    want_codes = codes_out.size > 0
    want_values = values_out.size > 0
    bad_nan = 0
    for i in range(src.size):
        ub = np.int64(src[i])
        r = np.int64(rbits[i]) if mode >= 6 else np.int64(0)
        neg, big_e, f, e_scale, e_eff, kept, mag = _round_bits(ub, prm, r)
        limit = max_mag + (twos & neg)
        is_zero = (ub & absmask) == 0
        rare = (big_e == prm[3]) or mag > limit or (unsigned == 1 and neg == 1 and not is_zero) \
            or (nozero == 1 and (e_scale < prm[7] or is_zero))
        if not rare:
            if want_codes:
                if twos == 1:
                    codes_out[i] = ((-mag) & ((one << bits) - 1)) if neg == 1 else mag
                else:
                    codes_out[i] = mag | ((neg & (has_nz | np.int64(mag != 0))) << (bits - 1))
            if want_values:
                v = math.ldexp(np.float64(kept), e_eff - p + 1)
                values_out[i] = -v if (neg == 1 and (has_nz == 1 or kept != 0)) else v
            continue
        mag, make_nan, bad = _rare_magnitude(prm, neg, big_e, f, e_scale, mag, limit)
        bad_nan += bad
        if unsigned == 1 and ((neg == 1 and not is_zero) or (is_zero and nozero == 1)):
            make_nan = True
        code, v = _rare_code(prm, specials, neg, mag, limit, make_nan)
        if want_codes:
            codes_out[i] = code
        if want_values:
            values_out[i] = v
    return bad_nan


@_jit
def _hot_consts(prm):
    """Loop constants of the hot kernels, derived once from ``prm``."""
    sbits, st, sbias, semask = prm[0], prm[1], prm[2], prm[3]
    t, p, bias, emin, has_sub, tie_code, mode = (prm[4], prm[5], prm[6], prm[7], prm[8],
                                                 prm[9], prm[10])
    one = np.int64(1)
    absmask = (one << (sbits - 1)) - 1 if sbits < 64 else np.int64(0x7FFFFFFFFFFFFFFF)
    emin_sub = emin if has_sub == 1 else np.int64(-(1 << 40))
    return (sbits, st, sbias, semask, t, p, bias, emin, emin_sub, (one << st) - 1, absmask,
            st + 1 - p, one << t, 1 - prm[17], 1 - has_sub, tie_code,
            np.int64(mode == 0), np.int64(mode == 1), np.int64(mode == 3),
            np.int64(mode == 4), np.int64(mode == 5), prm[13], prm[19])


@_inline
def _hot_core(ub, c):
    """One element of the deterministic roundings, without branches.

    Returns (neg, kept, e_eff, mag, rare): the sign, the rounded significand and its
    exponent, the magnitude code, and whether the element needs the general kernel.
    """
    (sbits, st, sbias, semask, t, p, bias, emin, emin_sub, fmask, absmask, sp1_p, one_t,
     unsigned, nozero, tie_c, c_ne, c_na, c_up, c_dn, c_odd, max_mag, twos) = c
    one = np.int64(1)
    neg = (ub >> (sbits - 1)) & one
    big_e = (ub >> st) & semask
    f = ub & fmask
    normal = np.int64(big_e != 0)
    m = f | (normal << st)
    e_scale = big_e - sbias + 1 - normal
    e_eff = max(e_scale, emin_sub)
    shift = min(e_eff - e_scale + sp1_p, 62)
    kept = m >> shift
    rem = m & ((one << shift) - one)
    half = (one << shift) >> 1
    inexact = np.int64(rem != 0)
    odd = (tie_c & np.int64(kept != 0) & ((e_eff + bias) & one)) | ((one - tie_c) & kept & one)
    up = inexact & ((c_ne & (np.int64(rem > half) | (np.int64(rem == half) & odd)))
                    | (c_na & np.int64(rem >= half)) | (c_up & (one - neg))
                    | (c_dn & neg) | (c_odd & (one - odd)))
    kept += up
    mag = max(((e_eff + bias) << t) + kept - one_t, 0)
    nz = np.int64((ub & absmask) != 0)
    rare = (np.int64(big_e == semask) | np.int64(mag > max_mag + (twos & neg))
            | (unsigned & neg & nz) | (nozero & (np.int64(e_scale < emin) | (one - nz))))
    return neg, kept, e_eff, mag, rare


@_jit
def same_range(src, prm, codes_out, values_out):
    """Deterministic rounding from binary32 to a format with binary32's exponent field
    (bfloat16, TF32): drop fraction bits, and the carry of rounding up runs into the
    exponent and on to infinity by itself, as IEEE 754 overflow asks."""
    st, t, mode, sat = prm[1], prm[4], prm[10], prm[12]
    max_mag, inf_mag, bits = prm[13], prm[14], prm[20]
    one = np.int64(1)
    d = st - t
    dmask = (one << d) - one
    half = one << (d - 1)
    inf_bits = inf_mag << d
    quiet = inf_mag | (one << (t - 1))
    c_ne, c_na = np.int64(mode == 0), np.int64(mode == 1)
    c_up, c_dn, c_odd = np.int64(mode == 3), np.int64(mode == 4), np.int64(mode == 5)
    want_codes = codes_out.size > 0
    for i in range(src.size):
        u = np.int64(src[i])
        a = u & np.int64(0x7FFFFFFF)
        neg = (u >> 31) & one
        kept = a >> d
        low = a & dmask
        odd = kept & one
        inexact = np.int64(low != 0)
        up = inexact & ((c_ne & (np.int64(low > half) | (np.int64(low == half) & odd)))
                        | (c_na & np.int64(low >= half)) | (c_up & (one - neg))
                        | (c_dn & neg) | (c_odd & (one - odd)))
        mag = kept + up
        finite = np.int64(a < inf_bits)
        if sat == 1 or (sat == 2 and finite == 1):
            mag = min(mag, max_mag)
        if a > inf_bits:
            mag = quiet
        code = mag | (neg << (bits - 1))
        if want_codes:
            codes_out[i] = code
        else:
            values_out[i] = np.float64(np.uint32(code << d).view(np.float32))


@_jit
def hot_codes(src, prm, codes_out, flags):
    """Codes of the deterministic roundings for ordinary elements; ``flags[i] = 1`` where
    an element needs :func:`general_kernel` (NaN, infinity, overflow, unsigned negatives,
    formats without zero). Returns the number of flagged elements."""
    c = _hot_consts(prm)
    has_nz, twos, bits = prm[18], prm[19], prm[20]
    one = np.int64(1)
    code_mask = (one << bits) - 1
    nrare = 0
    for i in range(src.size):
        neg, kept, e_eff, mag, rare = _hot_core(np.int64(src[i]), c)
        tw = ((-mag) & code_mask) * neg + mag * (one - neg)
        sm = mag | ((neg & (has_nz | np.int64(mag != 0))) << (bits - 1))
        codes_out[i] = tw * twos + sm * (one - twos)
        flags[i] = rare
        nrare += rare
    return nrare


@_jit
def hot_values(src, prm, values_out, flags):
    """Values of the deterministic roundings, as :func:`hot_codes` does codes."""
    c = _hot_consts(prm)
    p, has_nz = prm[5], prm[18]
    nrare = 0
    for i in range(src.size):
        neg, kept, e_eff, mag, rare = _hot_core(np.int64(src[i]), c)
        # kept * 2**(e_eff - p + 1), the power of two built from its bits (exponent clamped
        # for flagged elements, whose value is rewritten later)
        pow2 = np.int64(min(max(e_eff - p + 1 + 1023, 1), 2046) << 52).view(np.float64)
        v = np.float64(np.float64(np.int32(kept)) * pow2)
        flip = neg & (has_nz | np.int64(kept != 0))
        values_out[i] = np.int64(v.view(np.int64) | (flip << 63)).view(np.float64)
        flags[i] = rare
        nrare += rare
    return nrare
