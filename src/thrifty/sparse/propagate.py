"""Sparsity propagation: forward (what can be nonzero) and backward (what is needed).

An abstract interpretation of a :class:`~thrifty.graph.ir.Graph` over
:class:`~thrifty.sparse.pattern.Pattern` facts, in the manner of torch.fx's ``ShapeProp``,
returning typed per-node facts ``dict[int, Pattern]``:

* **forward**, from the inputs' patterns: matmul is the boolean product of block patterns;
  ``add``/``sub`` the union; ``mul``, masks and ``where`` the intersection; an elementwise
  op keeps zeros where ``f(0, ...) == 0`` (probed on the op's own numpy reference, so every
  op of the registry gets a sound rule) and is dense otherwise; transposes transpose;
  ``einsum`` of matmul shape is a matmul, any other einsum with sparse operands is
  nonzero only at the output keys of the join of their stored entries
  (:mod:`~thrifty.sparse.coo`; dense when the join leaves an output label free);
  reductions over an axis are dense; a masked ``softmax`` (along either axis) has its
  mask's pattern;
* **backward**, from the outputs: which entries each node must produce. ``(X @ Y.T) * S``
  needs ``X @ Y.T`` only on ``S``'s pattern (an SDDMM), ``(A @ B) * M`` is a masked SpGEMM,
  ``softmax(Q @ K.T, mask=S)`` needs scores only on ``S``'s pattern.

The two alternate until the *effective* pattern (forward ∩ needed) stops shrinking: the
fixed point of Kjolstad et al.'s sparse iteration spaces ("The Tensor Algebra Compiler",
OOPSLA 2017) evaluated at run time on the actual inputs (Ahrens, Kjolstad and Amarasinghe,
"Autoscheduling for Sparse Tensor Algebra with an Asymptotic Cost Model", PLDI 2022, do the
same statically). Costs follow the number of nonzero blocks, never the dense size.

Example
-------
>>> import numpy as np, scipy.sparse as sp, thrifty as th
>>> sddmm = th.program(lambda X, Y, S: (X @ Y.T) * S)
>>> S = sp.random_array((50, 40), density=0.05, format="csr", rng=0)
>>> g = sddmm.trace(X=np.ones((50, 8)), Y=np.ones((40, 8)), S=S)
>>> facts = propagate(g, {"S": S})
>>> mm = next(n.id for n in g if n.op == "matmul")
>>> facts.effective[mm].nnz == S.nnz, facts.need[mm] is not None
(True, True)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from thrifty.errors import SpecError
from thrifty.graph.ir import Graph, Node
from thrifty.sparse.coo import bool_pattern, build_relation
from thrifty.sparse.masked import RECORD_LIMIT
from thrifty.sparse.pattern import Pairs, Pattern

__all__ = ["Propagation", "propagate", "input_pattern", "einsum_as_matmul", "zero_preserving"]

#: Most alternations of forward and backward passes before stopping.
MAX_ROUNDS = 6

#: A stand-in need for the first forward pass: "resolve products at block level only".
_BLOCKS_ONLY = Pattern((0, 0), None, None, sp.csr_array((0, 0), dtype=bool))


@dataclass(frozen=True, slots=True)
class Propagation:
    """Facts per node id: forward pattern, needed pattern (``None``: all) and their meet."""

    forward: Mapping[int, Pattern]
    need: Mapping[int, Pattern | None]
    effective: Mapping[int, Pattern]
    rounds: int
    #: Masked products resolved on their need, by node id: ``(pattern of A, pattern of B,
    #: the product's pattern, its pairs)``, the pairs (``(ptr, ia, ib)`` over that
    #: pattern's elements, as :func:`thrifty.sparse.masked.masked_pairs`) recorded by the
    #: pass that found the pattern (only for ``A @ B`` without transposes, and when few
    #: enough: :data:`thrifty.sparse.masked.RECORD_LIMIT`).
    pairs: Mapping[int, tuple[Pattern, Pattern, Pattern, Pairs]] = field(default_factory=dict)


def input_pattern(value: Any, shape: tuple[int, ...]) -> Pattern:
    """The pattern of an input value: exact for scipy sparse, dense for arrays.

    Example
    -------
    >>> input_pattern(np.ones((2, 2)), (2, 2)).is_dense
    True
    """
    if isinstance(value, Pattern):
        return value
    if sp.issparse(value) and len(shape) == 2:
        return Pattern.from_sparse(value)
    return Pattern.dense(shape)


def _empty(shape: tuple[int, ...]) -> Pattern:
    return Pattern.from_elements(sp.csr_array(shape, dtype=bool))


def _const_value(graph: Graph, nid: int) -> np.ndarray | None:
    node = graph[nid]
    return np.asarray(node.attrs["value"]) if node.op == "const" else None


def zero_preserving(graph: Graph, node: Node, zero_inputs: tuple[int, ...]) -> bool:
    """Whether ``node`` gives exactly 0 when the inputs listed in ``zero_inputs`` are 0.

    Non-zero constants keep their value, other inputs are taken as 0 too; probed on the
    op's numpy reference.
    """
    from thrifty.graph.ops import get_op

    args = []
    for i in node.inputs:
        c = _const_value(graph, i)
        t = graph[i].type
        if c is not None and c.ndim == 0 and i not in zero_inputs:
            args.append(c)
        elif c is not None and i not in zero_inputs:
            return False
        else:
            args.append(np.zeros((), dtype=t.dtype))
    try:
        with np.errstate(all="ignore"):
            out = np.asarray(get_op(node.op).reference(*args, **node.attrs))
    except Exception:  # noqa: BLE001 - any failure means "not provably zero"
        return False
    return bool(out.size == 1 and out.ravel()[0] == 0)


def einsum_as_matmul(subscripts: str) -> tuple[bool, bool, bool] | None:
    """``(transpose_a, transpose_b, transpose_out)`` when a 2-operand einsum is a matmul.

    Example
    -------
    >>> einsum_as_matmul("ij,kj->ik")
    (False, True, False)
    >>> einsum_as_matmul("ij,jk->ik"), einsum_as_matmul("ii->i")
    ((False, False, False), None)
    """
    lhs, _, out = subscripts.partition("->")
    terms = lhs.split(",")
    if len(terms) != 2 or len(out) != 2 or any(len(t) != 2 for t in terms):
        return None
    a, b = terms
    shared = set(a) & set(b)
    if len(shared) != 1 or len(set(a)) != 2 or len(set(b)) != 2 or len(set(out)) != 2:
        return None
    (k,) = shared
    i, j = a.replace(k, ""), b.replace(k, "")
    if {i, j} != set(out) or i == j:
        return None
    return (a[0] == k, b[1] == k, out[0] == j)


def _operand(graph: Graph, pats: Mapping[int, Pattern], nid: int,
             shape: tuple[int, ...]) -> Pattern:
    """An operand's pattern seen at the output's shape (broadcast operands are dense)."""
    c = _const_value(graph, nid)
    if c is not None and not np.any(c):
        return _empty(shape) if len(shape) == 2 else Pattern.dense(shape)
    p = pats[nid]
    return p if p.shape == shape else Pattern.dense(shape)


# -- forward rules: what can be nonzero, by op name ------------------------------------------
#: A forward rule: ``(graph, node, patterns so far, exact)`` to the node's pattern (2-D
#: nodes only; ``exact`` is False where products are resolved at block level only).
ForwardRule = Callable[[Graph, Node, Mapping[int, Pattern], bool], Pattern]


def _fwd_dense(graph: Graph, node: Node, pats: Mapping[int, Pattern], exact: bool) -> Pattern:
    return Pattern.dense(node.type.shape)


def _fwd_matmul(graph: Graph, node: Node, pats: Mapping[int, Pattern], exact: bool) -> Pattern:
    a, b = (pats[i] for i in node.inputs)
    if a.ndim == 2 and b.ndim == 2:
        return a.matmul(b, exact)
    return Pattern.dense(node.type.shape)


def _fwd_einsum(graph: Graph, node: Node, pats: Mapping[int, Pattern], exact: bool) -> Pattern:
    ins = node.inputs
    form = einsum_as_matmul(node.attrs["subscripts"])
    if form is None or len(ins) != 2:
        return _fwd_einsum_general(graph, node, pats)
    a, b = pats[ins[0]], pats[ins[1]]
    a = a.transpose() if form[0] else a
    b = b.transpose() if form[1] else b
    out = a.matmul(b, exact)
    return out.transpose() if form[2] else out


def _fwd_einsum_general(graph: Graph, node: Node, pats: Mapping[int, Pattern]) -> Pattern:
    """An einsum with sparse operands: nonzero only at output keys of the join of the
    sparse operands' stored entries (:mod:`thrifty.sparse.coo`), when that join binds both
    output labels."""
    from thrifty.graph.ops import normalize_einsum

    shapes = [graph[i].type.shape for i in node.inputs]
    subs, sizes = normalize_einsum(node.attrs["subscripts"], shapes)
    lhs, out = subs.split("->")
    terms = lhs.split(",")
    if any(sizes[c] != d for t, sh in zip(terms, shapes) for c, d in zip(t, sh)):
        return Pattern.dense(node.type.shape)
    sparse = {k: pats[i].elements for k, i in enumerate(node.inputs)
              if len(shapes[k]) == 2 and not pats[i].is_dense and pats[i].elements is not None}
    fast = _relabelled(terms, out, [pats[i] for i in node.inputs], set(sparse))
    if fast is not None:
        return fast
    bound = set().union(*(terms[k] for k in sparse)) if sparse else set()
    if not set(out) <= bound:
        return Pattern.dense(node.type.shape)
    rel = build_relation(terms, sizes, out, sparse)  # type: ignore[arg-type]
    rows, cols = rel.labels[out[0]], rel.labels[out[1]]
    return Pattern.from_elements(bool_pattern(rows, cols, node.type.shape))  # type: ignore[arg-type]


def _relabelled(terms: list[str], out: str, ps: list[Pattern], sparse: set[int]
                ) -> Pattern | None:
    """The pattern of ``ij->ij``, ``ij->ji`` and of ``ij,ij->ij`` (either operand order
    transposed) from the operands' patterns directly; ``None`` for other einsums."""
    if any(len(t) != 2 or t[0] == t[1] for t in terms) or len(terms) > 2:
        return None
    if len(terms) == 1 and 0 in sparse:
        return ps[0] if terms[0] == out else ps[0].transpose()
    if len(terms) == 2 and set(terms[0]) == set(terms[1]) == set(out):
        a, b = (p if t == out else p.transpose() for t, p in zip(terms, ps))
        return a.intersect(b)
    return None


def _fwd_transpose(graph: Graph, node: Node, pats: Mapping[int, Pattern],
                   exact: bool) -> Pattern:
    axes = tuple(node.attrs["axes"])
    if axes == (0, 1):
        return pats[node.inputs[0]]
    return pats[node.inputs[0]].transpose() if axes == (1, 0) \
        else Pattern.dense(node.type.shape)


def _fwd_softmax(graph: Graph, node: Node, pats: Mapping[int, Pattern],
                 exact: bool) -> Pattern:
    if len(node.inputs) == 2:  # along either axis: zero wherever the mask is
        return _operand(graph, pats, node.inputs[1], node.type.shape)
    return Pattern.dense(node.type.shape)


def _fwd_where(graph: Graph, node: Node, pats: Mapping[int, Pattern], exact: bool) -> Pattern:
    c, x, y = (_operand(graph, pats, i, node.type.shape) for i in node.inputs)
    return c.intersect(x).union(y)


def _fwd_intersect(graph: Graph, node: Node, pats: Mapping[int, Pattern],
                   exact: bool, loose: bool = False) -> Pattern:
    """The inputs' intersection; with ``loose`` (the first pass, every product at block
    level: the next pass refines it), known elements are not filtered by the blocks of a
    block-level operand (a superset: :meth:`Pattern.intersect` without ``exact``)."""
    out = Pattern.dense(node.type.shape)
    for i in node.inputs:
        out = out.intersect(_operand(graph, pats, i, node.type.shape), not loose)
    return out


def _fwd_div(graph: Graph, node: Node, pats: Mapping[int, Pattern], exact: bool) -> Pattern:
    shape, ins = node.type.shape, node.inputs
    num, den = (_operand(graph, pats, i, shape) for i in ins)
    cden = _const_value(graph, ins[1])
    if den.is_dense and (cden is None or np.all(cden != 0)):
        return num  # 0 / y is 0 (implicit zeros are structural)
    return Pattern.dense(shape)


def _fwd_zero_preserving(graph: Graph, node: Node, pats: Mapping[int, Pattern],
                         exact: bool) -> Pattern:
    """Zero where every non-constant input is zero, when the op maps those zeros to 0."""
    shape, ins = node.type.shape, node.inputs
    zeros = tuple(i for i in ins if graph[i].op != "const")
    if len(ins) not in (1, 2) or not zero_preserving(graph, node, zeros):
        return Pattern.dense(shape)
    acc: Pattern | None = None
    for i in zeros:
        p = _operand(graph, pats, i, shape)
        acc = p if acc is None else acc.union(p)
    return acc if acc is not None else Pattern.dense(shape)


_UNARY_BINARY = ("add", "sub", "lt", "le", "gt", "ge", "eq", "ne", "neg", "abs", "exp", "log",
                 "sqrt", "relu", "sigmoid", "tanh",
                 # a reduction keeps a pattern only where it keeps the shape (no axes)
                 "sum", "max")

#: The forward sparsity rule of every op, by op name (a test checks every op of ``OPS``
#: has one; ``_fwd_dense`` is the explicit "anything can be nonzero" fallback).
FORWARD_RULES: Mapping[str, ForwardRule] = {
    "input": _fwd_dense,  # inputs take their values' patterns before any rule runs
    "const": _fwd_dense,  # a constant is dense; an all-zero one is seen by _operand
    "matmul": _fwd_matmul, "einsum": _fwd_einsum, "transpose": _fwd_transpose,
    "softmax": _fwd_softmax, "where": _fwd_where, "mul": _fwd_intersect, "div": _fwd_div,
    **{op: _fwd_zero_preserving for op in _UNARY_BINARY},
}


def _rule(table: Mapping[str, Any], op: str, name: str) -> Any:
    rule = table.get(op)
    if rule is None:
        raise SpecError(f"op {op!r} has no {name} sparsity rule; add one (a dense fallback "
                        f"counts) to thrifty.sparse.propagate")
    return rule


def _forward_node(graph: Graph, node: Node, pats: Mapping[int, Pattern],
                  need: Pattern | None = None, memo: dict[int, tuple[Any, ...]] | None = None
                  ) -> Pattern:
    shape = node.type.shape
    if len(shape) != 2 or node.op in ("input", "const"):
        return Pattern.dense(shape)
    # a product needed only on a known element set is resolved at block level, then on
    # the need's elements alone (one mask-driven pass: never the whole product)
    exact = need is None or need.elements is None
    rule = _rule(FORWARD_RULES, node.op, "forward")
    form = _product_form(node)
    if need is _BLOCKS_ONLY and rule is _fwd_intersect:  # the first pass: a superset
        return _fwd_intersect(graph, node, pats, exact, loose=True)
    if need is _BLOCKS_ONLY and form is not None and _masked_by_known(graph, node, pats):
        return Pattern.dense(shape)  # the first pass: see _masked_by_known
    if exact or need is None or need is _BLOCKS_ONLY or need.shape != shape or form is None:
        return rule(graph, node, pats, exact)  # type: ignore[no-any-return]
    key = (pats[node.inputs[0]], pats[node.inputs[1]], need)
    if memo is not None and node.id in memo and \
            all(x is y or x.same_as(y) for x, y in zip(memo[node.id][:3], key)):
        return memo[node.id][3]  # type: ignore[no-any-return]  # the round before's
    res = _masked_product(key[0], key[1], need, form)
    if res is None:  # too large to resolve, or an operand's elements unknown: the blocks
        return rule(graph, node, pats, exact)  # type: ignore[no-any-return]
    if memo is not None:
        memo[node.id] = (*key, *res)
    return res[0]


def _masked_by_known(graph: Graph, node: Node, pats: Mapping[int, Pattern]) -> bool:
    """Whether every reader of product ``node`` multiplies it by an operand of its shape
    whose elements are known already (``(A @ B) * S``): the first pass keeps those
    elements whole whatever the product's blocks (:func:`_fwd_intersect`, ``loose``),
    so the product's block-level pattern there would be computed for nothing (a dense
    one stands in: a superset; the next pass resolves the product on ``S``'s elements)."""
    users = graph.users(node.id)
    if not users or node.id in graph.outputs:
        return False
    for u in (graph[i] for i in users):
        if u.op != "mul" or u.type.shape != node.type.shape or not any(
                j != node.id and j in pats and pats[j].elements is not None
                and pats[j].shape == node.type.shape for j in u.inputs):
            return False
    return True


def _product_form(node: Node) -> tuple[bool, bool, bool] | None:
    """A 2-operand product's transposes (:func:`einsum_as_matmul`), else ``None``."""
    if len(node.inputs) != 2:
        return None
    if node.op == "matmul":
        return (False, False, False)
    return einsum_as_matmul(node.attrs["subscripts"]) if node.op == "einsum" else None


def _masked_product(a: Pattern, b: Pattern, need: Pattern, form: tuple[bool, bool, bool]
                    ) -> tuple[Pattern, Pairs | None] | None:
    """The product's entries among ``need``'s elements where a row of one operand meets a
    column of the other (:meth:`Pattern.matmul_on`; a subset of ``need``), and for
    ``A @ B`` (no transposes) the pairs landing on them, when few enough."""
    if a.ndim != 2 or b.ndim != 2:
        return None
    if form == (False, False, False):
        return a.matmul_on_pairs(b, need, RECORD_LIMIT)
    ta, tb, tout = form
    a = a.transpose() if ta else a
    b = b.transpose() if tb else b
    out = a.matmul_on(b, need.transpose() if tout else need)
    return None if out is None else (out.transpose() if tout else out, None)


def _meet(a: Pattern | None, b: Pattern | None) -> Pattern | None:
    if a is None:
        return b
    if b is None:
        return a
    return a.intersect(b)


def _join(a: Pattern | None, b: Pattern | None) -> Pattern | None:
    if a is None or b is None:
        return None
    return a.union(b)


# -- backward rules: what each input must provide, by op name --------------------------------
#: A backward rule: ``(graph, node, need of its output, forward patterns, which inputs have
#: the output's shape)`` to the need of each input (``None``: all of it).
BackwardRule = Callable[[Graph, Node, Pattern | None, Mapping[int, Pattern], list[bool]],
                        list[Pattern | None]]


def _bwd_all(graph: Graph, node: Node, need_out: Pattern | None, fwd: Mapping[int, Pattern],
             same: list[bool]) -> list[Pattern | None]:
    """Every input entry may contribute to every output entry: all of each input."""
    return [None] * len(node.inputs)


def _bwd_intersect(graph: Graph, node: Node, need_out: Pattern | None,
                   fwd: Mapping[int, Pattern], same: list[bool]) -> list[Pattern | None]:
    ins = node.inputs
    res: list[Pattern | None] = []
    for k in range(len(ins)):
        if not same[k]:
            res.append(None)
            continue
        need = need_out
        for j, other in enumerate(ins):
            if j != k and same[j] and not fwd[other].is_dense:
                need = _meet(need, fwd[other])
        res.append(need)
    return res


def _bwd_where(graph: Graph, node: Node, need_out: Pattern | None, fwd: Mapping[int, Pattern],
               same: list[bool]) -> list[Pattern | None]:
    c = node.inputs[0]
    nx = _meet(need_out, fwd[c]) if same[0] and not fwd[c].is_dense else need_out
    return [need_out if same[0] else None, nx if same[1] else None,
            need_out if same[2] else None]


def _bwd_softmax(graph: Graph, node: Node, need_out: Pattern | None,
                 fwd: Mapping[int, Pattern], same: list[bool]) -> list[Pattern | None]:
    ins = node.inputs
    if len(ins) == 2 and same[0] and same[1] and not fwd[ins[1]].is_dense:
        return [fwd[ins[1]], None]
    return [None] * len(ins)


def _bwd_transpose(graph: Graph, node: Node, need_out: Pattern | None,
                   fwd: Mapping[int, Pattern], same: list[bool]) -> list[Pattern | None]:
    return [None if need_out is None else need_out.transpose()]


def _bwd_same_entries(graph: Graph, node: Node, need_out: Pattern | None,
                      fwd: Mapping[int, Pattern], same: list[bool]) -> list[Pattern | None]:
    """An elementwise op: output entry (i, j) reads input entry (i, j) only."""
    if len(node.inputs) not in (1, 2):
        return [None] * len(node.inputs)
    return [need_out if s else None for s in same]


#: The backward (need) rule of every op, by op name (a test checks every op of ``OPS``).
BACKWARD_RULES: Mapping[str, BackwardRule] = {
    "input": _bwd_all, "const": _bwd_all,  # no inputs
    "matmul": _bwd_all, "einsum": _bwd_all,  # a contraction reads whole rows and columns
    "sum": _bwd_all, "max": _bwd_all,  # a reduction reads whole slices
    "mul": _bwd_intersect, "where": _bwd_where, "softmax": _bwd_softmax,
    "transpose": _bwd_transpose,
    **{op: _bwd_same_entries for op in ("add", "sub", "div", "lt", "le", "gt", "ge", "eq",
                                        "ne", "neg", "abs", "exp", "log", "sqrt", "relu",
                                        "sigmoid", "tanh")},
}


def _backward_node(graph: Graph, node: Node, need_out: Pattern | None,
                   fwd: Mapping[int, Pattern]) -> list[Pattern | None]:
    """What each input of ``node`` must provide so that ``node`` is right on ``need_out``."""
    if len(node.type.shape) != 2:
        return [None] * len(node.inputs)
    same = [graph[i].type.shape == node.type.shape for i in node.inputs]
    return _rule(BACKWARD_RULES, node.op, "backward")(graph, node, need_out, fwd, same)


def _forward(graph: Graph, inputs: Mapping[str, Any],
             need: Mapping[int, Pattern | None] | None,
             memo: dict[int, tuple[Any, ...]] | None = None
             ) -> tuple[dict[int, Pattern], dict[int, Pattern]]:
    """One forward pass; ``need=None`` is the first pass, where products are resolved at
    block level only (an exact product could turn out to be needed only under a mask)."""
    fwd: dict[int, Pattern] = {}
    eff: dict[int, Pattern] = {}
    first = need is None
    need = need or {}
    for node in graph:
        if node.op == "input":
            value = inputs.get(node.name or "")
            p = value if isinstance(value, Pattern) else \
                input_pattern(value, node.type.shape)
        else:
            p = _forward_node(graph, node, eff, _BLOCKS_ONLY if first else need.get(node.id),
                              memo)
        fwd[node.id] = p
        n = need.get(node.id)
        # a masked product's pattern lies inside its need already
        within = memo is not None and node.id in memo and memo[node.id][3] is p and \
            memo[node.id][2] is n
        eff[node.id] = p if n is None or within else p.intersect(n)
    return fwd, eff


def _backward(graph: Graph, fwd: Mapping[int, Pattern]) -> dict[int, Pattern | None]:
    need: dict[int, Pattern | None] = {}
    wanted: dict[int, list[Pattern | None]] = {i: [] for i in graph.nodes}
    for o in graph.outputs:
        wanted[o].append(None)
    for node in reversed(list(graph)):
        demands = wanted[node.id]
        n: Pattern | None
        if not demands:
            n = _empty(node.type.shape) if node.type.ndim == 2 else None
        else:
            n = demands[0]
            for d in demands[1:]:
                n = _join(n, d)
        need[node.id] = n
        for i, d in zip(node.inputs, _backward_node(graph, node, n, fwd)):
            wanted[i].append(d)
    return need


def _size_of(p: Pattern) -> tuple[int, int]:
    return (p.nnz_blocks, p.nnz)


def propagate(graph: Graph, inputs: Mapping[str, Any]) -> Propagation:
    """Forward and backward sparsity propagation over ``graph`` to a fixed point.

    Parameters
    ----------
    graph:
        The traced dense spec.
    inputs:
        Input values by name; scipy sparse values give exact patterns, anything else
        (numpy arrays, or absent names) is dense. Patterns may be given directly.
    """
    need: dict[int, Pattern | None] = {}
    # input patterns are built once (O(nnz)) and shared by every round
    inputs = {graph[i].name or "": input_pattern(inputs.get(graph[i].name or ""),
                                                 graph[i].type.shape) for i in graph.inputs}
    fwd, eff = _forward(graph, inputs, None)
    rounds = 1
    memo: dict[int, tuple[Any, ...]] = {}  # masked products, by node: reused across rounds
    while rounds < MAX_ROUNDS:
        need = _backward(graph, eff)
        fwd, new_eff = _forward(graph, inputs, need, memo)
        rounds += 1
        if rounds > 2 and all(_size_of(new_eff[i]) == _size_of(eff[i]) for i in eff):
            eff = new_eff
            break
        eff = new_eff
    pairs = {nid: (m[0], m[1], m[3], m[4]) for nid, m in memo.items() if m[4] is not None}
    return Propagation(fwd, need, eff, rounds, pairs)
