"""Running a whole Graph in emulated low precision, with per-output error bounds.

``emulate(graph, inputs, unit)`` evaluates a traced spec as a machine with a matrix unit
would: every matrix product goes through the unit model (operands rounded to the unit's
input format, products fused ``fma`` at a time, the result in the unit's output format);
every other op is computed exactly in binary64 and rounded to its node's storage format
(by default the unit's output format, inputs in its input format). Next to it, the same
graph runs in binary64 (the reference), and :func:`thrifty.numerics.bounds.propagate_bounds`
gives an a priori bound on every node's max-abs error from the inputs' ranges. The result
states the observed error and the bound side by side.

Two bounds. The a priori bound needs only the inputs' ranges (max |x|) and is norm-wise:
for a sparse matrix it charges every one of the ``k`` terms, so it is loose. The
*certified* bound is a running componentwise bound for the given inputs: every node carries
an array ``E >= |computed - exact|`` entry by entry, where "exact" is the spec evaluated in
exact real arithmetic on the original inputs. Rounding an input or a result adds the
rounding's own size (computed exactly: the two values are within a factor of two, so their
float64 difference is exact); a product on the unit adds ``rel * (|a||b|) + abs`` with the
unit's a priori step bound (:func:`thrifty.numerics.bounds.a_priori_bound`, inputs below the
smallest normal counted as ``2^emin``) plus the propagated ``|a| E_b + E_a |b| + E_a E_b``;
sums add their bounds, products follow the same rule, and ``relu``, ``neg``, ``abs`` and
transposes are 1-Lipschitz. The float64 arithmetic that evaluates these bounds is itself
made safe by a relative margin of ``(k + 2) * 2^-52`` on every product of nonnegative
arrays. Ops without such a rule (``exp``, ``softmax``, …) give an infinite certified bound.

Sparse operands. A unit computes ``D[i, j]`` as a chain of steps over ``k`` in chunks of
``fma``; a chunk whose products are all zero adds exact zeros to the running value, which
the step returns unchanged (it is already a value of the output format). So for a CSR left
operand only the chunks holding a nonzero of row ``i`` are run: the same bits as the dense
emulation (tested against it for every preset), at a cost proportional to the nonzero
chunks.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from thrifty.errors import SpecError
from thrifty.graph.ir import Graph
from thrifty.graph.ops import get_op
from thrifty.runtime.reference import dense_input, evaluate
from thrifty.sparse.fused import as_written
from thrifty.sparse.registry import unit_form


@dataclass(frozen=True, slots=True)
class EmulatedRun:
    """Outputs computed in emulated precision, the binary64 reference, errors and bounds."""

    outputs: tuple[np.ndarray, ...]
    reference: tuple[np.ndarray, ...]
    observed: tuple[float, ...]      # max |emulated - reference| per output
    bounds: tuple[float, ...]        # a priori bound on that max per output (ranges only)
    certified: tuple[float, ...]     # componentwise running bound for these inputs
    formats: Mapping[int | str, str]
    unit: str
    kernels: Mapping[str, int] = field(default_factory=dict)  # products run on the unit

    def within_bounds(self) -> bool:
        return all(o <= b and o <= c
                   for o, b, c in zip(self.observed, self.bounds, self.certified))

    def to_json(self) -> dict[str, Any]:
        return {"unit": self.unit, "observed": list(self.observed),
                "bounds": list(self.bounds), "certified": list(self.certified),
                "within_bounds": self.within_bounds(), "kernels": dict(self.kernels)}


def unit_spmm(unit: Any, A: sp.csr_array, B: np.ndarray, slack: int = 64) -> np.ndarray:
    """``A @ B`` on the unit for a CSR ``A``, running only the chunks holding nonzeros.

    ``A`` and ``B`` must already be values of the unit's input format. Consecutive rows are
    grouped into one unit call over the union of their nonzero chunks while that costs at
    most twice their own chunks plus ``slack`` chunk-rows (a chunk that is all zeros in a
    row leaves that row's running value unchanged, so grouping changes no bit; it saves
    the per-call cost of the unit).
    """
    f = unit.model.fma
    m, k = A.shape
    n = B.shape[1]
    out = np.zeros((m, n))
    A = sp.csr_array(A)
    pad = (-k) % f
    Bp = np.vstack([B, np.zeros((pad, n))]) if pad else B
    chunk_of = A.indices // f

    def run(rows: list[int], chunks: np.ndarray) -> None:
        idx = (chunks[:, None] * f + np.arange(f)[None, :]).ravel()
        block = np.zeros((len(rows), idx.size))
        for r, i in enumerate(rows):
            lo, hi = A.indptr[i], A.indptr[i + 1]
            block[r, np.searchsorted(idx, A.indices[lo:hi])] = A.data[lo:hi]
        out[rows] = unit.matmul(block, Bp[idx])

    group: list[int] = []
    union = np.zeros(0, dtype=np.int64)
    own = 0
    for i in range(m):
        lo, hi = A.indptr[i], A.indptr[i + 1]
        if lo == hi:
            continue
        ch = np.unique(chunk_of[lo:hi])
        if group:
            u = np.union1d(union, ch)
            if (len(group) + 1) * u.size <= 2 * (own + ch.size) + slack and len(group) < 512:
                group.append(i)
                union, own = u, own + ch.size
                continue
            run(group, union)
        group, union, own = [i], ch, ch.size
    if group:
        run(group, union)
    return out


def _matmul(unit: Any, a: Any, b: Any) -> np.ndarray:
    if np.ndim(b) == 1 and (sp.issparse(a) or np.ndim(a) == 2):
        return _matmul(unit, a, np.asarray(b)[:, None])[:, 0]
    if sp.issparse(a):
        return unit_spmm(unit, sp.csr_array(a), np.asarray(b))
    a, b = np.asarray(a), np.asarray(b)
    if a.ndim != 2 or b.ndim != 2:
        raise SpecError(f"emulated matmul supports 2-D operands only, got shapes {a.shape} and "
                        f"{b.shape}")
    return np.asarray(unit.matmul(a, b))


# -- the specialized plan's own kernels on the unit ----------------------------------------
def _csr(a: Any) -> sp.csr_array:
    A = sp.csr_array(a, dtype=np.float64)
    A.sort_indices()
    return A


def _unit_panel(unit: Any, A: sp.csr_array, X: np.ndarray, r0: int, r1: int,
                cols: np.ndarray) -> np.ndarray:
    """A gathered dense panel ``A[r0:r1, cols] @ X[cols]`` as one gemm on the unit: its
    ``len(cols)`` terms run in chunks of ``fma`` in the gathered order, as the engine's
    BLAS call would feed them to a matrix unit."""
    P = A[r0:r1][:, cols].toarray()
    return np.asarray(unit.matmul(P, X[cols]))


def _unit_sampled(unit: Any, rows_of: Any, B: Any, P: sp.csr_array) -> np.ndarray:
    """``(left @ B)`` on the entries of pattern ``P`` only, each a dot product on the unit
    over the nonzero ``fma`` chunks of its row (``rows_of(i)`` is row ``i`` of the left
    operand as a dense vector); the rest stays zero."""
    f = unit.model.fma
    m, n = P.shape
    out = np.zeros((m, n))
    Bd = B.toarray() if sp.issparse(B) else np.asarray(B)
    k = Bd.shape[0]
    pad = (-k) % f
    if pad:
        Bd = np.vstack([Bd, np.zeros((pad, n))])
    for i in range(m):
        js = P.indices[P.indptr[i]:P.indptr[i + 1]]
        if js.size == 0:
            continue
        row = rows_of(i)
        chunks = np.flatnonzero(np.pad(row, (0, pad)).reshape(-1, f).any(axis=1))
        if chunks.size == 0:
            continue
        idx = (chunks[:, None] * f + np.arange(f)[None, :]).ravel()
        out[i, js] = unit.matmul(np.pad(row, (0, pad))[idx][None, :], Bd[idx][:, js])[0]
    return out


def plan_product(unit: Any, plan: Any, node_id: int, a: Any, b: Any
                 ) -> tuple[np.ndarray, dict[str, int]] | None:
    """Node ``node_id``'s matrix product as ``plan`` lowered it, every kernel on ``unit``.

    The tasks the sparse engine made for the node are run with the unit in place of the
    machine's arithmetic, each by its kernel's matrix-unit form
    (:func:`thrifty.sparse.registry.unit_form`) and attrs: CSR row segments (only the
    nonzero chunks of each row) and gathered dense block panels (one unit gemm over the
    gathered columns), SpMV, SDDMM and masked SpGEMM (dot products on the unit at the
    pattern's entries only: the others are not needed downstream, by the backward
    propagation), whole gemms. ``a`` and ``b`` are the operands, already values of the
    unit's input format. Returns the dense result and the kernels run, or ``None`` when the
    plan has no product task for the node.
    """
    tasks = [t for t in plan.taskgraph.tasks.values()
             if t.attrs.get("node") == node_id and unit_form(t.kernel) is not None]
    if not tasks:
        return None
    out = np.zeros(plan.graph[node_id].type.shape)
    ran: Counter[str] = Counter()
    for t in tasks:
        run = _UNIT_FORMS[unit_form(t.kernel)]  # type: ignore[index]
        out = run(unit, t, a, b, out, ran)
    return out, dict(ran)


def _unit_row_segments(unit: Any, t: Any, a: Any, b: Any, out: np.ndarray,
                       ran: Counter[str]) -> np.ndarray:
    A, X = _csr(a), np.asarray(b, dtype=np.float64)
    for s in t.attrs["segments"]:
        if s.r1 <= s.r0:
            continue
        if s.form == "panel":
            assert s.cols is not None
            out[s.r0:s.r1] = _unit_panel(unit, A, X, s.r0, s.r1, s.cols)
            ran["panel_gemm"] += 1
        else:
            out[s.r0:s.r1] = unit_spmm(unit, A[s.r0:s.r1], X)
            ran["spmm_csr"] += 1
    return out


def _unit_spmv(unit: Any, t: Any, a: Any, b: Any, out: np.ndarray,
               ran: Counter[str]) -> np.ndarray:
    A, x = _csr(a), np.asarray(b, dtype=np.float64)[:, None]
    r0, r1 = t.attrs.get("rows", (0, A.shape[0]))
    out[r0:r1] = unit_spmm(unit, A[r0:r1], x)[:, 0]
    ran["spmv"] += 1
    return out


def _unit_sddmm(unit: Any, t: Any, a: Any, b: Any, out: np.ndarray,
                ran: Counter[str]) -> np.ndarray:
    X = np.asarray(a, dtype=np.float64)
    r0, r1 = t.attrs["rows"]
    P = t.attrs["pattern"][r0:r1]
    out[r0:r1] += _unit_sampled(unit, lambda i: X[r0 + i], b, P)
    ran["sddmm"] += 1
    return out


def _unit_masked_spgemm(unit: Any, t: Any, a: Any, b: Any, out: np.ndarray,
                        ran: Counter[str]) -> np.ndarray:
    A = _csr(a)
    r0, r1 = t.attrs["rows"]
    P = t.attrs["pattern"][r0:r1]
    out[r0:r1] += _unit_sampled(unit, lambda i: A[[r0 + i]].toarray()[0], b, P)
    ran["masked_spgemm"] += 1
    return out


def _unit_gemm(unit: Any, t: Any, a: Any, b: Any, out: np.ndarray,
               ran: Counter[str]) -> np.ndarray:
    ran[t.kernel or "gemm"] += 1
    return _matmul(unit, _csr(a) if sp.issparse(a) else a, _dense_of(b))


#: How each matrix-unit form of :mod:`thrifty.sparse.registry` runs on a unit.
_UNIT_FORMS = {"row_segments": _unit_row_segments, "spmv": _unit_spmv, "sddmm": _unit_sddmm,
               "masked_spgemm": _unit_masked_spgemm, "gemm": _unit_gemm,
               "reference": _unit_gemm}


def _dense_of(x: Any) -> np.ndarray:
    return x.toarray() if sp.issparse(x) else np.asarray(x)


def _rounding_error(before: Any, after: Any) -> Any:
    """``|after - before|`` of one rounding, entry by entry (exact in float64)."""
    if sp.issparse(after):
        return abs(sp.csr_array(after) - sp.csr_array(before))
    return np.abs(np.asarray(after) - np.asarray(before))


def _unit_product_bound(unit: Any, a: Any, b: Any, Ea: Any, Eb: Any) -> np.ndarray:
    """The certified rule of a product on the unit (numerics.error_rules)."""
    from thrifty.numerics.error_rules import unit_product_bound

    return unit_product_bound(unit, a, b, Ea, Eb)


def _round_operand(a: Any, fmt: str) -> Any:
    """An operand of the unit: its values rounded to the unit's input format."""
    from thrifty.numerics import round as fround

    if sp.issparse(a):
        r = sp.csr_array(a, dtype=np.float64, copy=True)
        r.data = fround(r.data, fmt, saturation="finite")
        return r
    return fround(np.asarray(a, dtype=np.float64), fmt, saturation="finite")


def _propagate_error(op: str, node_attrs: Any, vals: list[Any], errs: list[Any]) -> Any:
    """E of an exactly computed op (before its result is rounded), or None: no rule.

    The rules are the certified ones of :data:`thrifty.numerics.error_rules.ERROR_RULES`.
    """
    from thrifty.numerics.error_rules import certified_error

    return certified_error(op, node_attrs, vals, errs)


def default_formats(graph: Graph, unit: Any) -> dict[int | str, str]:
    """Inputs in the unit's input format, every other node in its output format."""
    fin, fout = unit.model.input, unit.model.output
    return {n.id: (fin if n.op == "input" else fout) for n in graph}


def emulate(graph: Graph, inputs: Mapping[str, Any], unit: Any,
            formats: Mapping[int | str, str] | None = None, plan: Any = None) -> EmulatedRun:
    """Run ``graph`` with its matrix products on ``unit``; compare with binary64; bound it.

    With ``plan`` (the :class:`~thrifty.sparse.specialize.SparsePlan` of ``graph`` for
    these inputs' patterns), every matrix product runs as the sparse engine lowered it:
    its CSR segments, gathered dense block panels, SpMV, SDDMM and masked SpGEMM tasks,
    each on the unit (:func:`plan_product`); ``EmulatedRun.kernels`` counts them (a plan
    that associated a matmul chain is lowered again with each product as written,
    :func:`thrifty.sparse.fused.as_written`). The
    certified bound stays valid: a panel of ``k' <= k`` gathered columns runs at most
    ``ceil(k / fma)`` steps, and the a priori step bound grows with the step count.

    Example
    -------
    >>> import numpy as np, thrifty as th
    >>> from thrifty.numerics import unit
    >>> g = th.program(lambda A, B: th.relu(A @ B)).trace(A=((8, 32), "float64"),
    ...                                                  B=((32, 4), "float64"))
    >>> rng = np.random.default_rng(0)
    >>> r = emulate(g, {"A": rng.standard_normal((8, 32)), "B": rng.standard_normal((32, 4))},
    ...             unit("h100", input="bf16", output="fp32"))
    >>> r.within_bounds(), r.observed[0] > 0
    (True, True)
    """
    from thrifty.numerics.bounds import propagate_bounds

    if plan is not None:
        _check_plan(plan, graph, inputs)
        plan = as_written(plan, inputs)
    fmts: dict[int | str, str] = {**default_formats(graph, unit), **(formats or {})}
    values, errors, kernels = _run_on_unit(graph, inputs, unit, fmts, plan)
    outs = tuple(np.asarray(values[o]) for o in graph.outputs)
    ref = evaluate(graph, inputs)
    observed = tuple(float(np.max(np.abs(o - r))) if o.size else 0.0
                     for o, r in zip(outs, ref))
    facts = propagate_bounds(graph, fmts, unit, ranges=_input_ranges(graph, inputs))
    bounds = tuple(float(facts[o].value) for o in graph.outputs)
    certified = tuple(float("inf") if errors[o] is None else
                      (float(np.max(errors[o])) * (1 + 2.0**-50) if np.size(errors[o]) else 0.0)
                      for o in graph.outputs)
    return EmulatedRun(outs, ref, observed, bounds, certified, fmts, unit.model.name,
                       dict(sorted(kernels.items())))


def _check_plan(plan: Any, graph: Graph, inputs: Mapping[str, Any]) -> None:
    """Refuse a plan made for another graph or for other input patterns."""
    def sig(g: Graph) -> list[tuple[Any, ...]]:
        return [(n.op, n.inputs, n.type, n.name) for n in g]

    if plan.graph is not graph and sig(plan.graph) != sig(graph):
        raise SpecError("the plan was specialized for another graph; pass the graph it "
                        "was made from (plan.graph)")
    if not plan.matches(inputs):
        raise SpecError("the inputs do not have the patterns the plan was specialized "
                        "for; specialize the graph for these inputs first")


def _run_on_unit(graph: Graph, inputs: Mapping[str, Any], unit: Any,
                 fmts: Mapping[int | str, str], plan: Any
                 ) -> tuple[dict[int, Any], dict[int, Any], Counter[str]]:
    """Every node's value in its format, its error bound, and the kernels that ran.

    An error bound E satisfies E >= |computed - exact| entry by entry; ``None``: unknown.
    """
    from thrifty.numerics import round as fround

    kernels: Counter[str] = Counter()
    values: dict[int, Any] = {}
    errors: dict[int, Any] = {}
    for node in graph:
        if node.op == "input":
            assert node.name is not None
            values[node.id], errors[node.id] = _round_input(node, inputs[node.name],
                                                            fmts[node.id])
            continue
        args = [values[i] for i in node.inputs]
        errs = [errors[i] for i in node.inputs]
        if node.op == "matmul":
            res, err = _unit_matmul(unit, plan, node.id, args, errs, kernels)
        else:
            dense = [a.toarray() if sp.issparse(a) else a for a in args]
            with np.errstate(all="ignore"):
                res = np.asarray(get_op(node.op).reference(*dense, **node.attrs),
                                 dtype=np.float64)
            err = None if any(e is None for e in errs) else \
                _propagate_error(node.op, node.attrs, dense, errs)
        res = np.asarray(res, dtype=np.float64)
        values[node.id] = fround(res, fmts[node.id], saturation="finite")
        errors[node.id] = None if err is None else \
            _dense_of(err) + _rounding_error(res, values[node.id])
    return values, errors, kernels


def _round_input(node: Any, raw: Any, fmt: str) -> tuple[Any, Any]:
    """An input rounded to its format, and the rounding error, entry by entry."""
    from thrifty.numerics import round as fround

    if sp.issparse(raw):
        if raw.shape != node.type.shape:
            raise SpecError(f"input {node.name!r} has shape {raw.shape}, but the graph "
                            f"was traced for shape {node.type.shape}")
        exact = sp.csr_array(raw, dtype=np.float64, copy=True)
        A = exact.copy()
        A.data = fround(A.data, fmt, saturation="finite")
        return A, _rounding_error(exact, A)
    x = np.asarray(dense_input(node.name, raw, node.type.shape, node.type.dtype),
                   dtype=np.float64)
    rounded = fround(x, fmt, saturation="finite")
    return rounded, _rounding_error(x, rounded)


def _unit_matmul(unit: Any, plan: Any, node_id: int, args: list[Any], errs: list[Any],
                 kernels: Counter[str]) -> tuple[Any, Any]:
    """A matrix product on the unit (as ``plan`` lowered it, if given) and its error bound.

    The kernels that ran are counted in ``kernels``.
    """
    fin = unit.model.input
    ops = [_round_operand(a, fin) for a in args]
    lowered = None if plan is None else plan_product(unit, plan, node_id, *ops)
    if lowered is not None:
        res, ran = lowered
        kernels.update(ran)
    else:
        res = _matmul(unit, ops[0], _dense_of(ops[1]))
        kernels["spmm_csr" if sp.issparse(ops[0]) else "gemm"] += 1
    if any(e is None for e in errs):
        return res, None
    ea = errs[0] + _rounding_error(args[0], ops[0])
    eb = _dense_of(errs[1]) + _dense_of(_rounding_error(args[1], ops[1]))
    return res, _unit_product_bound(unit, ops[0], _dense_of(ops[1]), ea, eb)


def _input_ranges(graph: Graph, inputs: Mapping[str, Any]) -> dict[str, float]:
    """The largest magnitude of each input, by name."""
    ranges = {}
    for i in graph.inputs:
        v = inputs[graph[i].name or ""]
        data = v.data if sp.issparse(v) else np.asarray(v)
        ranges[graph[i].name or ""] = float(np.max(np.abs(data))) if np.size(data) else 0.0
    return ranges
