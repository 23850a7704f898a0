"""Rounding-error bounds for dot products, GEMMs and whole programs run on a matrix unit.

Policy
------
* :func:`a_priori_bound` derives a worst-case bound from the unit model's *own* parameters
  (:class:`thrifty.numerics.units.UnitModel`): per step it counts the aligned terms that
  can really be truncated (the term holding the largest exponent is exact when its last
  bit lies inside the window), charges each at most one window ulp ``2^(E-F)`` (half for a
  sticky bit), then the normaliser (``2^(1-p_n)``) and the final rounding (``2^(1-p)``
  toward zero, ``2^-p`` to nearest), plus an underflow term; steps chain recursively.
  The magnitude it multiplies is ``|c| + sum |a_i b_i|`` where each input below the
  smallest normal counts as ``2^emin`` (subnormal significands do not fill the window).
* :func:`gamma_bound` (recursive summation, ``gamma_n = n u / (1 - n u)``) and
  :func:`block_fma_bound` (Blanchard, Higham, Lopez, Mary and Pranesh, "Mixed precision
  block fused multiply-add: error analysis and application to GPU tensor cores", SISC 42,
  2020: one rounding per block of ``b`` exact products) are the classical comparisons;
  they assume exact internal accumulation, which truncating units do not have.
* :func:`probabilistic_bound` is Higham and Mary's ("A new approach to probabilistic
  rounding error analysis", SISC 41, 2019) ``gamma~_n(lambda) = exp(lambda sqrt(n) u +
  n u^2 / (1-u)) - 1``, holding with probability ``1 - 2 n exp(-lambda^2 (1-u)^2 / 2)``
  when rounding errors are independent with mean zero: it refuses biased units
  (truncation, toward zero, directed rounding), naming the reason.
* :func:`a_posteriori_bound` certifies the error of given inputs: the exact sum of the
  magnitudes of everything each step dropped, in rational arithmetic, rounded up.
* :func:`propagate_bounds` is an abstract interpreter over a Graph of the IR: per node a
  bound on ``max |value|`` and on ``max |error|``, with per-node formats and the unit for
  matmul/einsum contractions.

Example
-------
>>> from thrifty.numerics.units import unit
>>> b = a_priori_bound(unit("h100", input="bf16", output="fp32").model, 1024)
>>> 0 < b.relative < 1e-4
True
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np

from thrifty.errors import FormatError, SpecError
from thrifty.numerics.formats import Format, get_format
from thrifty.numerics.units import Unit, UnitModel, reference_dot


@dataclass(frozen=True, slots=True)
class ErrorBound:
    """``|computed - exact| <= absolute + relative * magnitude``.

    ``magnitude`` is the quantity the relative part multiplies (for a dot product
    ``|c| + sum |a_i b_i|``, for a graph node a bound on ``max |exact value|``), when known.
    ``probability`` is 1 for worst-case bounds. ``detail`` says how it was derived.
    """

    kind: str
    relative: float
    absolute: float
    magnitude: float | None = None
    probability: float = 1.0
    detail: str = ""

    @property
    def value(self) -> float:
        """The bound itself (``inf`` while the magnitude is unknown)."""
        if self.magnitude is None or not all(
                math.isfinite(x) for x in (self.magnitude, self.relative, self.absolute)):
            return math.inf
        return _up(Fraction(self.absolute) + Fraction(self.relative) * Fraction(self.magnitude))

    def at(self, magnitude: float) -> ErrorBound:
        """The same bound applied to a given magnitude."""
        return ErrorBound(self.kind, self.relative, self.absolute, float(magnitude),
                          self.probability, self.detail)

    def to_json(self) -> dict[str, object]:
        """The bound as valid JSON values (JSON has no infinity or NaN).

        Rule: a non-finite number is written as the string ``"inf"``, ``"-inf"`` or
        ``"nan"``; ``magnitude`` and ``value`` are ``null`` while the magnitude is unknown
        (the relative part then has nothing to multiply).
        """
        known = self.magnitude is not None
        return {"kind": self.kind, "relative": json_number(self.relative),
                "absolute": json_number(self.absolute),
                "magnitude": json_number(self.magnitude) if known else None,
                "value": json_number(self.value) if known else None,
                "probability": json_number(self.probability), "detail": self.detail}


def json_number(x: float | None) -> float | str | None:
    """``x`` for JSON: finite floats as they are, others as ``"inf"``, ``"-inf"``, ``"nan"``.

    Example
    -------
    >>> json_number(1.5), json_number(-math.inf), json_number(None)
    (1.5, '-inf', None)
    """
    if x is None or math.isfinite(x):
        return x
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def _up(x: Fraction) -> float:
    """The smallest float64 >= x."""
    f = float(x)
    if math.isfinite(f) and Fraction(f) < x:
        f = math.nextafter(f, math.inf)
    return f


def _pow2(e: int) -> Fraction:
    return Fraction(2) ** e


# ---------------------------------------------------------------------------------------
# A priori: from the unit's parameters
# ---------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class StepErrorModel:
    """What one step of a unit can lose, as exact rationals.

    ``|step - exact step| <= eps * mu + eta`` with ``mu = |c~| + sum |a~_i b~_i|``.
    """

    eps: Fraction
    eta: Fraction
    truncated_terms: int
    detail: str


def _rounding_unit(rounding: str, p: int) -> Fraction:
    return _pow2(-p) if rounding == "nearest_even" else _pow2(1 - p)


def step_error_model(model: UnitModel) -> StepErrorModel:
    """The per-step error of ``model``, counting the truncations it really makes.

    For an interleaved unit this is the error of one of its two sub-steps; with
    ``addend_last`` the final addition of ``c`` (correctly rounded to nearest) counts as one
    more such step (its error, at most half an ulp, is below the step's). With ``zero_exp``
    a zero term may set the alignment: its truncations add at most ``2^(zero_exp - F)``
    each, absolutely, before the final rounding (``(1 + delta)`` times that in ``eta``).

    Raises
    ------
    FormatError
        When the model can lose carries (``carry_bits`` too few for ``fma`` terms): no
        finite bound exists.
    """
    if model.interleave:  # two fused sub-steps of half the products each
        model = replace(model, fma=-(-model.fma // 2), interleave=False,
                        interleave_pattern="odd_even")
    fin, facc, fout = (get_format(model.input), get_format(model.accumulator),
                       get_format(model.output))
    F = model.window_bits
    n_prod = model.fma
    notes = []
    if F is None:
        align = Fraction(0)
        n_trunc = 0
        notes.append("exact alignment")
    else:
        tau = Fraction(1, 2) if model.shifted_out == "sticky" else Fraction(1)
        prod_top_exact = 2 * (fin.precision - 1) <= F
        c_top_exact = facc.precision - 1 <= F
        if model.c_in_alignment:
            terms = n_prod + 1
            n_trunc = terms - 1 if (prod_top_exact and c_top_exact) else terms
            align = n_trunc * tau * _pow2(-F)
        else:
            n_trunc = n_prod - 1 if prod_top_exact else n_prod
            align = n_trunc * tau * _pow2(-F)
            tau2 = Fraction(1, 2) if model.late_shifted_out == "sticky" else Fraction(1)
            align += 2 * tau2 * _pow2(-F) * (1 + align)
            n_trunc += 2
        notes.append(f"{n_trunc} truncated terms per step at most, window F={F}")
        if model.carry_bits is not None and (n_prod + 1) > (1 << model.carry_bits):
            raise FormatError(f"unit {model.name!r}: {model.carry_bits} carry bits cannot hold "
                              f"the sum of {n_prod + 1} terms; no finite bound (carries "
                              f"are lost); use carry_bits >= {math.ceil(math.log2(n_prod + 1))}")
    delta = delta_out = _rounding_unit(model.rounding, fout.precision)
    if model.normalize_bits is not None and model.normalize_bits < fout.precision:
        delta = (1 + _pow2(1 - model.normalize_bits)) * (1 + delta) - 1
        notes.append(f"normaliser keeps {model.normalize_bits} bits")
    eps = align + delta * (1 + align)
    # underflow: final rounding spacing, normaliser spacing, flushed results, the addend's
    # exponent clamp; flushed inputs are outside the a priori bound (see detail)
    spacing = _pow2(fout.emin - fout.precision + 1)
    eta = spacing if model.rounding != "nearest_even" else spacing / 2
    if model.normalize_bits is not None:  # the normaliser's spacing, rounded once more
        eta += (1 + delta_out) * _pow2(fout.emin - model.normalize_bits + 1)
    if not model.subnormals_out:
        eta += _pow2(fout.emin)
    eta += eps * _pow2(facc.emin)
    if model.zero_exp is not None and F is not None:  # dropped before the final rounding
        eta += (1 + delta) * (model.fma + 1) * _pow2(model.zero_exp - F)
        notes.append(f"zero terms align at 2^{model.zero_exp}")
    if not model.subnormals_in:
        notes.append("inputs assumed normal or zero (the unit flushes subnormal inputs)")
    notes.append(f"final rounding {model.rounding} to p={fout.precision}")
    return StepErrorModel(eps, eta, n_trunc, "; ".join(notes))


#: Up to this many steps ``(1 + eps)^S`` is computed exactly; beyond, ``exp(S eps)`` bounds
#: it (looser by a relative ``S eps^2 / 2`` at most; exact powers take seconds from 10^5).
_EXACT_STEPS = 1 << 14


def _length(k: object, what: str = "a dot product") -> int:
    """``k`` as a positive int, or :class:`SpecError`."""
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise SpecError(f"{what} needs an integer length k >= 1, got {k!r}")
    return int(k)


def _exp_growth(S: int, eps: Fraction, eta: Fraction) -> tuple[float, float]:
    """Upper bounds of ``exp(S eps) - 1`` and ``S eta exp(S eps)`` (float64, rounded up)."""
    x = _up(S * eps)
    if x > 700:
        return math.inf, math.inf
    grow_m1 = math.nextafter(math.expm1(x) * (1 + 2.0**-50), math.inf)
    grow = math.nextafter((1 + grow_m1) * (1 + 2.0**-52), math.inf)
    return grow_m1, math.nextafter(_up(S * eta) * grow * (1 + 2.0**-52), math.inf)


def a_priori_bound(model: UnitModel, k: int) -> ErrorBound:
    """Worst-case bound for a length-``k`` dot product ``c + sum a_i b_i`` on ``model``.

    With ``S = ceil(k / fma)`` steps, ``|d - exact| <= ((1+eps)^S - 1) mu + S eta
    (1+eps)^S``, ``mu = |c| + sum |a~_i b~_i|`` (inputs below the smallest normal count as
    ``2^emin``). Each GEMM entry has the same bound with ``k`` its inner dimension.

    Example
    -------
    >>> from thrifty.numerics.units import preset
    >>> # one V100 step: 4 truncated terms of one window ulp (2^-23) + final truncation
    >>> round(a_priori_bound(preset("v100", "fp16", "fp32"), 4).relative * 2**23, 6)
    5.0
    """
    k = _length(k)
    st = step_error_model(model)
    S = -(-k // model.fma) * ((2 if model.interleave else 1) + int(model.addend_last))
    if S <= _EXACT_STEPS:
        grow = (1 + st.eps) ** S
        rel, eta = _up(grow - 1), _up(S * st.eta * grow)
    else:  # (1 + eps)^S <= exp(S eps): a closed form, rounded up, in constant time
        rel, eta = _exp_growth(S, st.eps, st.eta)
    return ErrorBound("a_priori", rel, eta,
                      detail=f"{model.name} {model.input}->{model.output}, k={k}, {S} steps; "
                             + st.detail)


# ---------------------------------------------------------------------------------------
# Classical comparisons
# ---------------------------------------------------------------------------------------

def _u(fmt: Format, rounding: str) -> Fraction:
    return _rounding_unit(rounding, fmt.precision)


def _gamma(n: int, u: Fraction) -> Fraction:
    if n * u >= 1:
        return Fraction(10) ** 300
    return n * u / (1 - n * u)


def gamma_bound(k: int, output: str = "fp32", rounding: str = "nearest_even") -> ErrorBound:
    """Classical recursive-summation bound ``gamma_{k+1}`` for ``c + sum a_i b_i``.

    Assumes every product and every addition is rounded once in ``output`` (``u = 2^-p``
    to nearest, ``2^(1-p)`` for directed roundings); underflow ignored.
    """
    k = _length(k)
    fmt = get_format(output)
    g = _gamma(k + 1, _u(fmt, rounding))
    return ErrorBound("gamma", _up(g), 0.0,
                      detail=f"gamma_{k + 1} with u={float(_u(fmt, rounding)):.3g} ({fmt.name})")


def block_fma_bound(k: int, block: int, output: str = "fp32",
                    rounding: str = "nearest_even") -> ErrorBound:
    """Blanchard et al. (SISC 2020) block-FMA bound: ``gamma_{ceil(k/b)}`` in the output.

    Each block of ``b`` products is added to the accumulator exactly and rounded once;
    underflow ignored.
    """
    k, block = _length(k), _length(block, "a block")
    fmt = get_format(output)
    steps = -(-k // block)
    g = _gamma(steps, _u(fmt, rounding))
    return ErrorBound("block_fma", _up(g), 0.0,
                      detail=f"gamma_{steps} (k={k}, block {block}) in {fmt.name}")


def probabilistic_bound(model: UnitModel, k: int, failure: float = 1e-6) -> ErrorBound:
    """Higham–Mary probabilistic bound; refuses biased units.

    ``lambda`` is chosen so that ``2 n exp(-lambda^2 (1-u)^2 / 2) = failure`` with ``n``
    the number of roundings (one per step).

    Raises
    ------
    FormatError
        When the unit's rounding errors are not mean-zero: final rounding other than
        nearest-even, or alignment that truncates / rounds down (the analysis needs
        independent, unbiased errors).
    """
    if model.rounding != "nearest_even":
        raise FormatError(f"unit {model.name!r} rounds its result {model.rounding}: biased "
                          "errors (all of one sign); the probabilistic bound of Higham and "
                          "Mary needs mean-zero errors (nearest-even); use a_priori_bound")
    if model.window_bits is not None:
        raise FormatError(f"unit {model.name!r} {model.shifted_out}s aligned terms to a "
                          f"{model.window_bits}-bit window: biased errors; the probabilistic "
                          "bound needs mean-zero errors; use a_priori_bound")
    if isinstance(failure, bool) or not isinstance(failure, int | float) \
            or not 0 < failure < 1:
        raise FormatError(f"failure probability must be in (0, 1), got {failure}")
    k = _length(k)
    fout = get_format(model.output)
    u = float(_pow2(-fout.precision))
    n = -(-k // model.fma)
    lam = math.sqrt(2 * math.log(2 * n / failure)) / (1 - u)
    x = lam * math.sqrt(n) * u + n * u * u / (1 - u)
    g = math.inf if x > 700 else math.nextafter(math.expm1(x), math.inf)
    return ErrorBound("probabilistic", g, 0.0, probability=1 - failure,
                      detail=f"Higham-Mary, n={n} roundings, lambda={lam:.3f}")


# ---------------------------------------------------------------------------------------
# A posteriori: certified for given inputs
# ---------------------------------------------------------------------------------------

def dot_magnitude(model: UnitModel, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``|c| + sum |a_i b_i|`` with inputs below the smallest normal counted as ``2^emin``.

    Computed in float64, then scaled up by ``1 + 2^-50 + (n + 4) 2^-52`` for ``n`` terms:
    each float64 product and addition of nonnegative terms loses at most a relative
    ``2^-53``, so the result is at least the exact magnitude (the quantity the proved
    Rocq theorems multiply; a constant ``1 + 2^-50`` alone is not enough from a few
    dozen terms on).
    """
    fin = get_format(model.input)
    tiny = math.ldexp(1.0, fin.emin)
    A, B = np.abs(np.asarray(a, float)), np.abs(np.asarray(b, float))
    A = np.where(A == 0, 0.0, np.maximum(A, tiny))
    B = np.where(B == 0, 0.0, np.maximum(B, tiny))
    C = np.abs(np.asarray(c, float))
    C = np.where(C == 0, 0.0, np.maximum(C, math.ldexp(1.0, get_format(model.accumulator).emin)))
    mu = C + (A * B).sum(axis=-1)
    n = A.shape[-1] + 1 if A.ndim else 2
    return mu * (1 + 2.0**-50 + (n + 4) * 2.0**-52)


def exact_dot(a: np.ndarray, b: np.ndarray, c: float) -> Fraction:
    """``c + sum a_i b_i`` as an exact rational."""
    return Fraction(float(c)) + sum((Fraction(float(x)) * Fraction(float(y))
                                     for x, y in zip(a, b)), Fraction(0))


def a_posteriori_bound(u: Unit | UnitModel, a: np.ndarray, b: np.ndarray,
                       c: float = 0.0) -> ErrorBound:
    """Certified bound on the error of one dot product on these inputs.

    The sum over steps of the exact magnitudes of what each alignment, carry, normaliser
    and final rounding dropped (exact rationals, rounded up): by the triangle inequality
    it bounds ``|computed - exact|``. ``magnitude`` holds the computed result.
    """
    model = u.model if isinstance(u, Unit) else u
    losses: list[Fraction] = []
    d = reference_dot(model, list(map(float, a)), list(map(float, b)), float(c), losses)
    if not math.isfinite(d):
        return ErrorBound("a_posteriori", math.inf, math.inf, d, detail="non-finite result")
    total = sum(losses, Fraction(0))
    return ErrorBound("a_posteriori", 0.0, _up(total), d,
                      detail=f"exact losses over {len(losses)} steps")


# ---------------------------------------------------------------------------------------
# Propagation through a Graph
# ---------------------------------------------------------------------------------------

def _round_err(fmt: Format, mag: float) -> float:
    """Bound on the error of rounding (nearest-even) a value of size <= mag into fmt."""
    if not math.isfinite(mag):
        return math.inf
    if fmt.name == "binary64":
        return 0.0 if mag == 0 else float(mag) * 2.0**-53 * (1 + 2.0**-50)
    return float(_up(Fraction(mag) * _pow2(-fmt.precision)
                     + _pow2(fmt.emin - fmt.precision)))


def _node_bound(mag: float, err: float, detail: str) -> ErrorBound:
    return ErrorBound("propagated", 0.0, err, mag, detail=detail)


def propagate_bounds(graph: object, formats: Mapping[int | str, str], unit: Unit | None = None,
                     *, ranges: Mapping[str, float] | None = None) -> dict[int, ErrorBound]:
    """Per-node bounds on ``max |value|`` (``magnitude``) and ``max |error|`` (``value``).

    ``formats`` maps node ids (or input names) to the format each node's result is stored
    in (default binary64, nearly exact); ``ranges`` gives ``max |x|`` of every input;
    ``unit`` computes matmul and two-operand einsum nodes (operands are first rounded to its
    input format; result in its output format, then rounded to the node's format). Without
    a unit contractions are recursive sums in the node's format. Ops with no sound rule
    (division, log, sqrt, softmax, comparisons of inexact values) get an infinite bound
    with the reason in ``detail``.

    Example
    -------
    >>> import thrifty as th
    >>> from thrifty.numerics.units import unit as mk
    >>> g = th.program(lambda A, B: A @ B).trace(A=((4, 8), "float32"), B=((8, 2), "float32"))
    >>> bb = propagate_bounds(g, {"A": "bf16", "B": "bf16"}, mk("a100", input="bf16"),
    ...                       ranges={"A": 1.0, "B": 1.0})
    >>> bb[g.outputs[0]].magnitude
    8.0
    """
    from thrifty.numerics.error_rules import NodeFacts, error_rule

    ranges = dict(ranges or {})
    missing = [n for n in graph.input_names if n not in ranges]  # type: ignore[attr-defined]
    if missing:
        raise SpecError(f"propagate_bounds needs ranges (max |x|) for inputs {missing}; "
                        f"given for {sorted(ranges)}")
    facts: dict[int, ErrorBound] = {}
    for node in graph:  # type: ignore[attr-defined]
        key = node.name if node.op == "input" and node.name in formats else node.id
        fmt = get_format(formats.get(key, formats.get(node.id, "binary64")))
        rule = error_rule(node.op)
        if rule.a_priori is None:
            facts[node.id] = _node_bound(math.inf, math.inf, rule.a_priori_refused)
            continue
        ins = [facts[i] for i in node.inputs]
        p = rule.a_priori(NodeFacts(
            node.op, node.attrs, tuple(graph[i].type.shape for i in node.inputs),  # type: ignore[index]
            [f.magnitude if f.magnitude is not None else math.inf for f in ins],
            [f.absolute for f in ins], fmt, unit,
            ranges[node.name] if node.op == "input" else None))
        if p.final:
            facts[node.id] = _node_bound(p.magnitude, p.error, p.detail)
            continue
        err = p.error + _round_err(fmt, p.magnitude + p.error)
        facts[node.id] = _node_bound(p.magnitude, _up(Fraction(err) * (1 + _pow2(-50)))
                                     if math.isfinite(err) else math.inf,
                                     f"{p.detail}, stored {fmt.name}")
    return facts
