"""Error-propagation rules: one table, keyed by op name, for both kinds of bound.

Each op of the IR (:data:`thrifty.graph.ops.OPS`) has one :class:`ErrorRule` here, with
two rules or the reason there is none:

* ``a_priori``: the norm-wise rule :func:`thrifty.numerics.bounds.propagate_bounds` applies
  from the inputs' ranges: given bounds on ``max |value|`` and ``max |error|`` of the
  operands, a bound on those of the result (the rounding into the node's storage format is
  added by the caller unless the rule says it already counted it).
* ``certified``: the componentwise rule :func:`thrifty.runtime.emulate.emulate` applies to
  the arrays it computed: given the operands' values and arrays ``E >= |computed - exact|``,
  such an array for the exactly computed result (before its rounding). Float64 evaluation
  of the bound is made safe by a relative margin on every sum or product of nonnegative
  arrays.

An op without a sound rule in a domain names the reason (``a_priori_refused`` or
``certified_refused``): its bound is infinite. Contractions (``matmul``, ``einsum``) run
on the unit: their a priori rule charges :func:`.bounds.a_priori_bound`; their certified
rule is :func:`unit_product_bound`, called by the emulator on the operands it rounded.
Adding an op to the IR without an entry here fails ``tests/numerics/test_error_rules.py``.

Example
-------
>>> ERROR_RULES["relu"].a_priori is not None, ERROR_RULES["log"].a_priori_refused != ""
(True, True)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import scipy.sparse as sp

from thrifty.errors import SpecError
from thrifty.numerics.bounds import _gamma, _pow2, _round_err, _up, a_priori_bound
from thrifty.numerics.formats import Format, get_format
from thrifty.numerics.units import Unit


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """What an a priori rule sees of one node: its operands' bounds and its context."""

    op: str
    attrs: Mapping[str, Any]
    shapes: tuple[tuple[int, ...], ...]
    mags: Sequence[float]
    errs: Sequence[float]
    fmt: Format
    unit: Unit | None
    input_range: float | None = None


@dataclass(frozen=True, slots=True)
class Propagated:
    """An a priori rule's result: ``max |value| <= magnitude``, ``max |error| <= error``.

    With ``final`` the error already includes the rounding into the node's format.
    """

    magnitude: float
    error: float
    detail: str
    final: bool = False


APrioriRule = Callable[[NodeFacts], Propagated]
CertifiedRule = Callable[[Mapping[str, Any], list[Any], list[Any]], Any]


@dataclass(frozen=True, slots=True)
class ErrorRule:
    """The error-propagation rules of one op, or why it has none (see the module doc)."""

    op: str
    a_priori: APrioriRule | None = None
    certified: CertifiedRule | None = None
    a_priori_refused: str = ""
    certified_refused: str = ""

    def __post_init__(self) -> None:
        if (self.a_priori is None) == (not self.a_priori_refused):
            raise SpecError(f"error rule of {self.op!r}: give an a priori rule or the "
                            "reason it has none (not both)")
        if (self.certified is None) == (not self.certified_refused):
            raise SpecError(f"error rule of {self.op!r}: give a certified rule or the "
                            "reason it has none (not both)")


# ---- helpers --------------------------------------------------------------------------------

def _dense(x: Any) -> np.ndarray:
    return x.toarray() if sp.issparse(x) else np.asarray(x)


def _abs(x: Any) -> Any:
    return abs(x) if sp.issparse(x) else np.abs(x)


def _nonneg_matmul(a: Any, b: Any, k: int) -> np.ndarray:
    """An upper bound of ``a @ b`` for nonnegative ``a``, ``b`` despite float64 rounding."""
    out = _dense(a @ b)
    return np.asarray(out * (1 + (k + 2) * 2.0**-52), dtype=np.float64)


def contraction_length(op: str, attrs: Mapping[str, Any],
                       shapes: Sequence[tuple[int, ...]]) -> int:
    """``k``: the number of products summed per entry of a matmul or einsum."""
    from thrifty.graph.ops import normalize_einsum

    if op == "matmul":
        return int(shapes[0][-1])
    if len(shapes) != 2:
        raise SpecError(f"einsum with {len(shapes)} operands: only two-operand contractions "
                        "are bounded")
    spec, sizes = normalize_einsum(attrs["subscripts"], list(shapes))
    lhs, out = spec.split("->")
    contracted = set(lhs.replace(",", "")) - set(out)
    return int(np.prod([sizes[x] for x in contracted], dtype=np.int64)) if contracted else 1


# ---- a priori rules (norm-wise: max |value|, max |error|) ------------------------------------

def _ap_source(f: NodeFacts) -> Propagated:
    if f.op == "input":
        assert f.input_range is not None
        mag = float(f.input_range)
    else:
        value = f.attrs["value"]
        mag = float(np.max(np.abs(value))) if np.size(value) else 0.0
    return Propagated(mag, _round_err(f.fmt, mag), f"{f.op} in {f.fmt.name}", final=True)


def _ap_add(f: NodeFacts) -> Propagated:
    m, e = f.mags, f.errs
    return Propagated(m[0] + m[1], e[0] + e[1], f.op)


def _ap_mul(f: NodeFacts) -> Propagated:
    m, e = f.mags, f.errs
    return Propagated(m[0] * m[1], m[0] * e[1] + m[1] * e[0] + e[0] * e[1], f.op)


def _ap_lipschitz(f: NodeFacts) -> Propagated:
    """1-Lipschitz in the max norm, magnitude kept (neg, abs, relu, transpose, max)."""
    return Propagated(f.mags[0], f.errs[0], f.op)


def _ap_where(f: NodeFacts) -> Propagated:
    m, e = f.mags, f.errs
    if e[0] != 0:
        return Propagated(max(m[1], m[2]), math.inf,
                          "where: its condition is inexact and may flip", final=True)
    return Propagated(max(m[1], m[2]), max(e[1], e[2]), f.op)


def _ap_compare(f: NodeFacts) -> Propagated:
    if f.errs[0] or f.errs[1]:
        return Propagated(1.0, math.inf, f"{f.op}: a comparison of inexact values may flip",
                          final=True)
    return Propagated(1.0, 0.0, f"{f.op} of exact values", final=True)


def _ap_exp(f: NodeFacts) -> Propagated:
    mag = math.exp(f.mags[0])
    return Propagated(mag, mag * math.expm1(f.errs[0]), f.op)


def _ap_sigmoid(f: NodeFacts) -> Propagated:
    return Propagated(1.0, f.errs[0] / 4, f.op)


def _ap_tanh(f: NodeFacts) -> Propagated:
    return Propagated(min(1.0, f.mags[0]), f.errs[0], f.op)


def _ap_sum(f: NodeFacts) -> Propagated:
    shape = f.shapes[0]
    axes = f.attrs.get("axis") or tuple(range(len(shape)))
    n = int(np.prod([shape[a] for a in axes], dtype=np.int64)) if shape else 1
    m, e = f.mags[0], f.errs[0]
    err = n * e + float(_up(_gamma(max(n - 1, 0), _pow2(-f.fmt.precision))
                            * Fraction(n * (m + e))))
    return Propagated(n * m, err, f.op)


def _ap_contraction(f: NodeFacts) -> Propagated:
    try:
        k = contraction_length(f.op, f.attrs, f.shapes)
    except SpecError as exc:
        return Propagated(math.inf, math.inf, str(exc), final=True)
    (m0, m1), (e0, e1) = f.mags, f.errs
    mag = k * m0 * m1
    if f.unit is None:
        err = k * (m0 * e1 + m1 * e0 + e0 * e1)
        err += float(_up(_gamma(k, _pow2(-f.fmt.precision))
                         * Fraction(k * (m0 + e0) * (m1 + e1))))
        return Propagated(mag, err, f.op)
    md = f.unit.model
    fin = get_format(md.input)
    ea = e0 + _round_err(fin, m0 + e0)
    eb = e1 + _round_err(fin, m1 + e1)
    err = k * (m0 * eb + m1 * ea + ea * eb)
    tiny = math.ldexp(1.0, fin.emin)
    mu = k * (m0 + ea + tiny) * (m1 + eb + tiny)
    ap = a_priori_bound(md, k)
    err += ap.relative * mu + ap.absolute
    if get_format(md.output).name != f.fmt.name:
        err += _round_err(f.fmt, mag + err)
    return Propagated(mag, _up(Fraction(err) * (1 + _pow2(-50))),
                      f"{f.op} k={k} on {md.name} {md.input}->{md.output}, stored "
                      f"{f.fmt.name}", final=True)


# ---- certified rules (componentwise arrays E >= |computed - exact|) -------------------------

def _ce_const(attrs: Mapping[str, Any], vals: list[Any], errs: list[Any]) -> Any:
    return np.zeros(())


def _ce_same(attrs: Mapping[str, Any], vals: list[Any], errs: list[Any]) -> Any:
    """1-Lipschitz entrywise (relu, neg, abs): the operand's bound."""
    return errs[0]


def _ce_sum(attrs: Mapping[str, Any], vals: list[Any], errs: list[Any]) -> Any:
    e = _dense(errs[0])
    k = max(1, e.size)
    return np.sum(e, axis=tuple(attrs["axis"]), keepdims=attrs["keepdims"]) \
        * (1 + (k + 2) * 2.0**-52)


def _ce_transpose(attrs: Mapping[str, Any], vals: list[Any], errs: list[Any]) -> Any:
    return errs[0].T if sp.issparse(errs[0]) else np.transpose(errs[0], attrs["axes"])


def _ce_add(attrs: Mapping[str, Any], vals: list[Any], errs: list[Any]) -> Any:
    return (_dense(errs[0]) + _dense(errs[1])) * (1 + 2.0**-51)


def _ce_mul(attrs: Mapping[str, Any], vals: list[Any], errs: list[Any]) -> Any:
    a, b = (_dense(v) for v in vals)
    ea, eb = (_dense(e) for e in errs)
    return (np.abs(a) * eb + ea * np.abs(b) + ea * eb) * (1 + 2.0**-50)


def unit_product_bound(unit: Unit, a: Any, b: Any, Ea: Any, Eb: Any) -> np.ndarray:
    """Certified rule of a product on ``unit`` of operands already in its input format.

    ``Ea``/``Eb`` bound the operands' errors (their rounding to the input format
    included); the result bounds ``|computed - exact|`` of ``a @ b`` entry by entry: the
    unit's a priori step bound on ``|a||b|`` (entries below the smallest normal counted as
    ``2^emin``) plus ``|a| Eb + Ea |b| + Ea Eb``.
    """
    k = a.shape[1]
    step = a_priori_bound(unit.model, k)
    tiny = 2.0 ** get_format(unit.model.input).emin
    if sp.issparse(a):
        amag = sp.csr_array(a, copy=True)
        amag.data = np.maximum(np.abs(amag.data), tiny)
    else:
        amag = np.where(a != 0, np.maximum(np.abs(a), tiny), 0.0)
    bmag = np.where(b != 0, np.maximum(np.abs(b), tiny), 0.0)
    mu = _nonneg_matmul(amag, bmag, k)
    E = mu * step.relative + step.absolute
    E = E + _nonneg_matmul(_abs(a), Eb, k) + _nonneg_matmul(Ea, np.abs(b), k) \
        + _nonneg_matmul(Ea, Eb, k)
    return np.asarray(E * (1 + 2.0**-50))


# ---- the table ------------------------------------------------------------------------------

_NOT_LIPSCHITZ = "no error-propagation rule (needs a lower bound on an operand or is not " \
                 "Lipschitz here)"
_NO_CERT = "no componentwise rule yet: the certified bound is infinite"
_ON_UNIT = "computed on the unit: the emulator applies unit_product_bound to the operands " \
           "it rounded"
_INPUT = "the emulator rounds the input itself: its error is that rounding"


def _compare(op: str) -> ErrorRule:
    return ErrorRule(op, _ap_compare, certified_refused=_NO_CERT)


ERROR_RULES: dict[str, ErrorRule] = {r.op: r for r in (
    ErrorRule("input", _ap_source, certified_refused=_INPUT),
    ErrorRule("const", _ap_source, _ce_const),
    ErrorRule("add", _ap_add, _ce_add),
    ErrorRule("sub", _ap_add, _ce_add),
    ErrorRule("mul", _ap_mul, _ce_mul),
    ErrorRule("div", a_priori_refused=f"div: {_NOT_LIPSCHITZ}",
              certified_refused=f"div: {_NOT_LIPSCHITZ}"),
    *(_compare(op) for op in ("lt", "le", "gt", "ge", "eq", "ne")),
    ErrorRule("neg", _ap_lipschitz, _ce_same),
    ErrorRule("abs", _ap_lipschitz, _ce_same),
    ErrorRule("relu", _ap_lipschitz, _ce_same),
    ErrorRule("exp", _ap_exp, certified_refused=_NO_CERT),
    ErrorRule("log", a_priori_refused=f"log: {_NOT_LIPSCHITZ}",
              certified_refused=f"log: {_NOT_LIPSCHITZ}"),
    ErrorRule("sqrt", a_priori_refused=f"sqrt: {_NOT_LIPSCHITZ}",
              certified_refused=f"sqrt: {_NOT_LIPSCHITZ}"),
    ErrorRule("sigmoid", _ap_sigmoid, certified_refused=_NO_CERT),
    ErrorRule("tanh", _ap_tanh, certified_refused=_NO_CERT),
    ErrorRule("where", _ap_where, certified_refused=_NO_CERT),
    ErrorRule("matmul", _ap_contraction, certified_refused=_ON_UNIT),
    ErrorRule("einsum", _ap_contraction, certified_refused=_NO_CERT),
    ErrorRule("transpose", _ap_lipschitz, _ce_transpose),
    ErrorRule("sum", _ap_sum, _ce_sum),
    ErrorRule("max", _ap_lipschitz, certified_refused=_NO_CERT),
    ErrorRule("softmax", a_priori_refused=f"softmax: {_NOT_LIPSCHITZ}",
              certified_refused=f"softmax: {_NOT_LIPSCHITZ}"),
)}


def error_rule(op: str) -> ErrorRule:
    """The :class:`ErrorRule` of ``op``; a :class:`SpecError` for an op without an entry."""
    try:
        return ERROR_RULES[op]
    except KeyError:
        raise SpecError(f"op {op!r} has no error-propagation entry in "
                        "thrifty.numerics.error_rules.ERROR_RULES (add one, with the reason "
                        "where it has no rule)") from None


def certified_error(op: str, attrs: Mapping[str, Any], vals: list[Any],
                    errs: list[Any]) -> Any:
    """The certified rule's ``E`` for an exactly computed op, or None where it has none."""
    rule = error_rule(op).certified
    return None if rule is None else rule(attrs, vals, errs)
