"""The reference executor: evaluate a Graph node by node with numpy (sparse inputs densified).

It is the oracle every other executor is tested against.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from thrifty.errors import ShapeError, SpecError
from thrifty.graph.ir import Graph
from thrifty.graph.ops import get_op


def dense_input(name: str, value: Any, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """``value`` as a numpy array, checked against the graph's declared type."""
    arr = np.asarray(value.toarray()) if hasattr(value, "toarray") else np.asarray(value)
    if arr.shape != shape:
        raise ShapeError(f"input {name!r} has shape {arr.shape}, but the graph was traced "
                         f"for shape {shape}")
    if arr.dtype.name != dtype:
        raise SpecError(f"input {name!r} has dtype {arr.dtype.name}, but the graph was traced "
                        f"for dtype {dtype}; trace again or cast the input")
    return arr


def evaluate(graph: Graph, inputs: Mapping[str, Any]) -> tuple[np.ndarray, ...]:
    """Run every node's numpy reference in order; returns the outputs' values.

    Intermediate values are dropped after their last use.
    """
    missing = [n for n in graph.input_names if n not in inputs]
    if missing:
        raise SpecError(f"missing input(s) {missing}; the graph's inputs are "
                        f"{list(graph.input_names)}")
    remaining = {i: len(graph.users(i)) for i in graph.nodes}
    for o in graph.outputs:
        remaining[o] += 1
    values: dict[int, np.ndarray] = {}
    for node in graph:
        if node.op == "input":
            assert node.name is not None
            values[node.id] = dense_input(node.name, inputs[node.name], node.type.shape,
                                          node.type.dtype)
            continue
        args = [values[i] for i in node.inputs]
        with np.errstate(all="ignore"):
            values[node.id] = np.asarray(get_op(node.op).reference(*args, **node.attrs))
        for i in dict.fromkeys(node.inputs):
            remaining[i] -= 1
            if remaining[i] == 0:
                del values[i]
    return tuple(values[o] for o in graph.outputs)
