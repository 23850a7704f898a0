"""Running a whole Graph in emulated low precision, with per-output error bounds.

``emulate(graph, inputs, unit)`` evaluates a traced spec as a machine with a matrix unit
would: every matrix product goes through the unit model (operands rounded to the unit's
input format, products fused ``fma`` at a time, the result in the unit's output format);
every other op is computed exactly in binary64 and rounded to its node's storage format
(by default the unit's output format, inputs in its input format). Next to it, the same
graph runs in binary64 (the reference), and :func:`thrifty.numerics.bounds.propagate_bounds`
gives an a priori bound on every node's max-abs error from the inputs' ranges. The result
states the observed error and the bound side by side.

Sparse operands. A unit computes ``D[i, j]`` as a chain of steps over ``k`` in chunks of
``fma``; a chunk whose products are all zero adds exact zeros to the running value, which
the step returns unchanged (it is already a value of the output format). So for a CSR left
operand only the chunks holding a nonzero of row ``i`` are run: the same bits as the dense
emulation (tested against it for every preset), at a cost proportional to the nonzero
chunks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from thrifty.errors import SpecError
from thrifty.graph.ir import Graph
from thrifty.graph.ops import get_op
from thrifty.runtime.reference import dense_input, evaluate


@dataclass(frozen=True, slots=True)
class EmulatedRun:
    """Outputs computed in emulated precision, the binary64 reference, errors and bounds."""

    outputs: tuple[np.ndarray, ...]
    reference: tuple[np.ndarray, ...]
    observed: tuple[float, ...]      # max |emulated - reference| per output
    bounds: tuple[float, ...]        # a priori bound on that max per output
    formats: Mapping[int | str, str]
    unit: str

    def within_bounds(self) -> bool:
        return all(o <= b for o, b in zip(self.observed, self.bounds))

    def to_json(self) -> dict[str, Any]:
        return {"unit": self.unit, "observed": list(self.observed),
                "bounds": list(self.bounds), "within_bounds": self.within_bounds()}


def unit_spmm(unit: Any, A: sp.csr_array, B: np.ndarray) -> np.ndarray:
    """``A @ B`` on the unit for a CSR ``A``, running only the chunks holding nonzeros.

    ``A`` and ``B`` must already be values of the unit's input format.
    """
    f = unit.model.fma
    m, k = A.shape
    n = B.shape[1]
    out = np.zeros((m, n))
    A = sp.csr_array(A)
    pad = (-k) % f
    Bp = np.vstack([B, np.zeros((pad, n))]) if pad else B
    for i in range(m):
        lo, hi = A.indptr[i], A.indptr[i + 1]
        if lo == hi:
            continue
        cols = A.indices[lo:hi]
        chunks = np.unique(cols // f)
        idx = (chunks[:, None] * f + np.arange(f)[None, :]).ravel()
        row = np.zeros(idx.size)
        pos = np.searchsorted(idx, cols)
        row[pos] = A.data[lo:hi]
        out[i] = unit.matmul(row[None, :], Bp[idx])[0]
    return out


def _matmul(unit: Any, a: Any, b: Any) -> np.ndarray:
    if sp.issparse(a):
        return unit_spmm(unit, sp.csr_array(a), np.asarray(b))
    a, b = np.asarray(a), np.asarray(b)
    if a.ndim != 2 or b.ndim != 2:
        raise SpecError(f"emulated matmul supports 2-D operands only, got shapes {a.shape} and "
                        f"{b.shape}")
    return np.asarray(unit.matmul(a, b))


def default_formats(graph: Graph, unit: Any) -> dict[int | str, str]:
    """Inputs in the unit's input format, every other node in its output format."""
    fin, fout = unit.model.input, unit.model.output
    return {n.id: (fin if n.op == "input" else fout) for n in graph}


def emulate(graph: Graph, inputs: Mapping[str, Any], unit: Any,
            formats: Mapping[int | str, str] | None = None) -> EmulatedRun:
    """Run ``graph`` with its matrix products on ``unit``; compare with binary64; bound it.

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
    from thrifty.numerics import round as fround
    from thrifty.numerics.bounds import propagate_bounds

    fmts: dict[int | str, str] = {**default_formats(graph, unit), **(formats or {})}
    fin = unit.model.input
    values: dict[int, Any] = {}
    for node in graph:
        if node.op == "input":
            assert node.name is not None
            raw = inputs[node.name]
            if sp.issparse(raw):
                if raw.shape != node.type.shape:
                    raise SpecError(f"input {node.name!r} has shape {raw.shape}, but the graph "
                                    f"was traced for shape {node.type.shape}")
                A = sp.csr_array(raw, dtype=np.float64, copy=True)
                A.data = fround(A.data, fmts[node.id], saturation="finite")
                values[node.id] = A
            else:
                x = dense_input(node.name, raw, node.type.shape, node.type.dtype)
                values[node.id] = fround(np.asarray(x, dtype=np.float64), fmts[node.id],
                                         saturation="finite")
            continue
        args = [values[i] for i in node.inputs]
        if node.op == "matmul":
            ops = [a if sp.issparse(a) else fround(np.asarray(a), fin, saturation="finite")
                   for a in args]
            if sp.issparse(ops[1]):
                raise SpecError("emulated matmul takes a sparse operand on the left only")
            res = _matmul(unit, ops[0], ops[1])
        else:
            dense = [a.toarray() if sp.issparse(a) else a for a in args]
            with np.errstate(all="ignore"):
                res = np.asarray(get_op(node.op).reference(*dense, **node.attrs),
                                 dtype=np.float64)
        values[node.id] = fround(np.asarray(res, dtype=np.float64), fmts[node.id],
                                 saturation="finite")
    outs = tuple(np.asarray(values[o]) for o in graph.outputs)
    ref = evaluate(graph, inputs)
    observed = tuple(float(np.max(np.abs(o - r))) if o.size else 0.0
                     for o, r in zip(outs, ref))
    ranges = {}
    for i in graph.inputs:
        v = inputs[graph[i].name or ""]
        data = v.data if sp.issparse(v) else np.asarray(v)
        ranges[graph[i].name or ""] = float(np.max(np.abs(data))) if np.size(data) else 0.0
    facts = propagate_bounds(graph, fmts, unit, ranges=ranges)
    bounds = tuple(float(facts[o].value) for o in graph.outputs)
    return EmulatedRun(outs, ref, observed, bounds, fmts, unit.model.name)
