"""One error-rule table for every op: a priori (bounds) and certified (emulate) rules."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

import thrifty as th
from thrifty.errors import SpecError
from thrifty.graph.ops import OPS
from thrifty.numerics.bounds import propagate_bounds
from thrifty.numerics.error_rules import ERROR_RULES, ErrorRule, certified_error, error_rule
from thrifty.numerics.units import unit
from thrifty.runtime.emulate import emulate


@pytest.mark.parametrize("op", sorted(OPS))
def test_every_registered_op_has_an_error_rule_entry(op: str) -> None:
    """An op added to the IR without an entry (a rule, or the reason for none) fails here."""
    rule = ERROR_RULES.get(op)
    assert rule is not None, f"op {op!r} has no entry in numerics.error_rules.ERROR_RULES"
    assert rule.op == op
    assert (rule.a_priori is not None) != bool(rule.a_priori_refused)
    assert (rule.certified is not None) != bool(rule.certified_refused)


def test_the_table_names_no_op_outside_the_registry() -> None:
    assert set(ERROR_RULES) <= set(OPS), set(ERROR_RULES) - set(OPS)


def test_an_entry_needs_a_rule_or_a_reason() -> None:
    with pytest.raises(SpecError, match="a priori rule or the reason"):
        ErrorRule("frobnicate", certified_refused="none")
    with pytest.raises(SpecError, match="certified rule or the reason"):
        ErrorRule("frobnicate", a_priori_refused="none")


def test_an_op_without_entry_is_refused_by_name() -> None:
    with pytest.raises(SpecError, match="'frobnicate' has no error-propagation entry"):
        error_rule("frobnicate")


def test_refused_ops_give_infinite_bounds_with_the_tables_reason() -> None:
    @th.program
    def f(x):
        return th.log(x) + x

    g = f.trace(x=((3,), "float64"))
    facts = propagate_bounds(g, {}, None, ranges={"x": 2.0})
    log_node = next(n for n in g if n.op == "log")
    assert facts[log_node.id].value == math.inf
    assert facts[log_node.id].detail == ERROR_RULES["log"].a_priori_refused
    assert math.isinf(facts[g.outputs[0]].value)
    x = np.array([1.0, 1.5, 2.0])
    assert certified_error("log", {}, [x], [np.zeros(3)]) is None
    run = emulate(g, {"x": x}, unit("a100", input="bf16"))
    assert run.certified == (math.inf,)


def test_certified_rule_of_mul_bounds_every_perturbation_exactly() -> None:
    """|a b - a' b'| <= E for every |a - a'| <= e_a, |b - b'| <= e_b (exact rationals)."""
    rng = np.random.default_rng(3)
    n = 300
    a, b = rng.standard_normal(n), rng.standard_normal(n)
    ea, eb = np.abs(rng.standard_normal(n)) * 1e-3, np.abs(rng.standard_normal(n)) * 1e-3
    ta, tb = rng.uniform(-1, 1, n), rng.uniform(-1, 1, n)
    ta[:50], tb[:50] = 1.0, 1.0  # the extreme corner, where the bound is tight
    E = certified_error("mul", {}, [a, b], [ea, eb])
    for i in range(n):
        A, B = Fraction(a[i]), Fraction(b[i])
        A2 = A + Fraction(ta[i]) * Fraction(ea[i])
        B2 = B + Fraction(tb[i]) * Fraction(eb[i])
        assert abs(A * B - A2 * B2) <= Fraction(E[i])
