"""A readable scalar reference in exact rationals: the specification of the fast engines.

:func:`reference_dot` runs one dot product through a :class:`UnitModel`'s steps with
:class:`fractions.Fraction` arithmetic, step by step as the policy in
:mod:`thrifty.numerics.units` states it; the tests compare both engines with it.
"""

from __future__ import annotations

import math
from fractions import Fraction

from thrifty.numerics.formats import Format, get_format
from thrifty.numerics.units.exact import _halves
from thrifty.numerics.units.model import UnitModel


def _exp_of(v: Fraction) -> int:
    """``floor(log2(|v|))`` of a nonzero rational, exactly."""
    n, d = abs(v.numerator), v.denominator
    e = n.bit_length() - d.bit_length()
    if Fraction(n, d) < Fraction(2) ** e:
        e -= 1
    return e


def _floor_ulps(v: Fraction, ulp: Fraction) -> int:
    """``floor(v / ulp)`` as an int."""
    return int(math.floor(v / ulp))


def round_fraction(v: Fraction, fmt: Format, rounding: str, subnormals: bool = True,
                   precision: int | None = None) -> float:
    """Round an exact rational to ``fmt`` (scalar reference of :func:`round_scaled`).

    Example
    -------
    >>> round_fraction(Fraction(1, 3), get_format("bf16"), "toward_zero")
    0.33203125
    """
    if v == 0:
        return 0.0
    p = fmt.precision if precision is None else precision
    e = max(_exp_of(v), fmt.emin)
    q = Fraction(2) ** (e - (p - 1))
    a = abs(v)
    k = _floor_ulps(a, q)
    r = a - k * q
    neg = v < 0
    if rounding == "nearest_even":
        k += int(r > q / 2 or (r == q / 2 and k % 2 == 1))
    elif rounding == "up":
        k += int(r > 0 and not neg)
    elif rounding == "down":
        k += int(r > 0 and neg)
    mag = k * q
    if (fmt.has_inf and mag >= Fraction(2) ** (fmt.emax + 1)) or (
            not fmt.has_inf and mag > Fraction(fmt.max_finite)):
        out = math.inf
    elif not subnormals and mag < Fraction(2) ** fmt.emin:
        out = 0.0
    else:
        out = float(mag)
    return -out if neg else out


def _ref_window(terms: list[tuple[Fraction, int]], F: int | None,
                mode: str, zero_exp: int | None = None) -> tuple[Fraction, Fraction]:
    """Aligned sum of ``(value, alignment exponent)`` terms, as the hardware's adder.

    Returns the sum and the total magnitude of what the alignment dropped.
    """
    live = [(v, e) for v, e in terms if v != 0]
    if not live:
        return Fraction(0), Fraction(0)
    exact = sum((v for v, _ in live), Fraction(0))
    if F is None:
        return exact, Fraction(0)
    E = _ref_max_exp(terms, zero_exp)
    ulp = Fraction(2) ** (E - F)
    total, lost = Fraction(0), Fraction(0)
    for v, _ in live:
        if mode == "truncate":
            k = _floor_ulps(abs(v), ulp)
            kept = (k if v > 0 else -k) * ulp
        elif mode == "round_down":
            kept = _floor_ulps(v, ulp) * ulp
        else:  # sticky: one extra bit that ORs everything shifted out
            k = _floor_ulps(abs(v), ulp) * 2 + int(abs(v) % ulp != 0)
            kept = (k if v > 0 else -k) * (ulp / 2)
        total += kept
        lost += abs(v - kept)
    return total, lost


def reference_dot(model: UnitModel, a: list[float], b: list[float], c: float,
                  losses: list[Fraction] | None = None) -> float:
    """One dot product through ``model``'s steps, in exact rational arithmetic (scalar).

    Slow and plain: the specification the vectorised :meth:`Unit.dot` is tested against.
    When ``losses`` is a list, the exact total magnitude of everything each step dropped
    (alignment, carries, normalisation, final rounding) is appended to it, one entry per
    step: their sum bounds ``|result - exact|`` (the certified a posteriori bound).
    """
    f = model.fma
    K = len(a)
    steps = max(1, -(-K // f))
    a = list(a) + [0.0] * (steps * f - K)
    b = list(b) + [0.0] * (steps * f - K)
    acc = float(c)
    if model.interleave:
        halves = [[int(j) for j in h] for h in _halves(f, model.interleave_pattern)]
    else:
        halves = [list(range(f))]
    for s in range(steps):
        if not math.isfinite(acc):
            break
        d = 0.0 if model.addend_last else acc
        for half in halves:
            if not math.isfinite(d):
                break
            xs = [a[s * f + j] for j in half]
            ys = [b[s * f + j] for j in half]
            d = _ref_fused(model, xs, ys, d, losses)
        acc = _ref_add_last(model, d, acc, losses) if model.addend_last else d
    return acc


def _ref_add_last(model: UnitModel, d: float, c: float,
                  losses: list[Fraction] | None) -> float:
    """The final two-term addition of ``addend_last`` (scalar reference of ``_add_last``)."""
    if not (math.isfinite(d) and math.isfinite(c)):
        return d + c
    fout = get_format(model.output)
    terms = [(Fraction(v), max(_exp_of(Fraction(v)), fout.emin) if v != 0 else fout.emin)
             for v in (d, c)]
    total, dropped = _ref_window(terms, fout.precision + 1, "sticky")
    out = round_fraction(total, fout, "nearest_even", model.subnormals_out)
    if losses is not None and math.isfinite(out):
        losses.append(dropped + abs(total - Fraction(out)))
    return out


def _ref_max_exp(terms: list[tuple[Fraction, int]], zero_exp: int | None) -> int:
    """The alignment exponent: the largest of the nonzero terms', and ``zero_exp`` when a
    term is zero and ``zero_exp`` is set."""
    E = max(e for v, e in terms if v != 0)
    if zero_exp is not None and any(v == 0 for v, _ in terms):
        E = max(E, zero_exp)
    return E


def _ref_fused(model: UnitModel, xs: list[float], ys: list[float], acc: float,
               losses: list[Fraction] | None) -> float:
    fin, facc, fout = (get_format(model.input), get_format(model.accumulator),
                       get_format(model.output))
    F = model.window_bits

    def read(x: float, fmt: Format) -> tuple[Fraction, int]:
        v = Fraction(x)
        if v == 0 or (not model.subnormals_in and abs(v) < Fraction(2) ** fmt.emin):
            return Fraction(0), fmt.emin
        return v, max(_exp_of(v), fmt.emin)

    prods = []
    for x, y in zip(xs, ys):
        (va, ea), (vb, eb) = read(x, fin), read(y, fin)
        prods.append((va * vb, ea + eb))
    cterm = read(acc, facc)
    flushed = sum((abs(Fraction(x) * Fraction(y)) - abs(v)
                   for (x, y), (v, _) in zip(zip(xs, ys), prods)), Fraction(0))
    lost = flushed + abs(Fraction(acc) - cterm[0])
    if model.c_in_alignment:
        total, dropped = _ref_window(prods + [cterm], F, model.shifted_out, model.zero_exp)
        lost += dropped
    else:
        partial, dropped = _ref_window(prods, F, model.shifted_out)
        lost += dropped
        pe = _exp_of(partial) if partial != 0 else 0
        total, dropped = _ref_window([(partial, pe), cterm], F, model.late_shifted_out)
        lost += dropped
    before = total
    if model.carry_bits is not None and F is not None and total != 0:
        E = _ref_max_exp(prods + [cterm], model.zero_exp)
        ulp = Fraction(2) ** (E - F - (1 if model.shifted_out == "sticky" else 0))
        width = F + 2 + model.carry_bits + (1 if model.shifted_out == "sticky" else 0)
        units = int(abs(total) / ulp) % (1 << width)
        total = units * ulp if total > 0 else -units * ulp
    if model.normalize_bits is not None and total != 0:
        e = max(_exp_of(total), fout.emin)
        q = Fraction(2) ** (e - (model.normalize_bits - 1))
        units = _floor_ulps(abs(total), q)
        total = units * q if total > 0 else -units * q
    acc = round_fraction(total, fout, model.rounding, model.subnormals_out)
    if model.positive_zero:
        acc += 0.0
    if losses is not None and math.isfinite(acc):
        losses.append(lost + abs(before - Fraction(acc)))
    return acc

