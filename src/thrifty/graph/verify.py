"""The IR verifier: checks a Graph after every pass in the tests.

Checks: every node's inputs are defined before it (acyclic, topological), op known, arity
and attributes valid, the stored type equals what the op's rule infers, outputs exist.
"""

from __future__ import annotations

from thrifty.errors import GraphError, SpecError
from thrifty.graph.ir import Graph
from thrifty.graph.ops import get_op, infer_type


def verify(graph: Graph) -> None:
    """Raise :class:`GraphError` or :class:`SpecError` naming the first bad node."""
    seen: set[int] = set()
    for node in graph:
        for i in node.inputs:
            if i not in seen:
                raise GraphError(f"{node.describe()}: input %{i} is not defined before it")
        seen.add(node.id)
        get_op(node.op)
        if node.op == "input":
            if node.inputs or not node.name:
                raise GraphError(f"{node.describe()}: an input node has a name and no inputs")
            continue
        try:
            inferred = infer_type(node.op, [graph[i].type for i in node.inputs], node.attrs)
        except SpecError as e:
            raise e.__class__(f"{node.describe()}: {e}") from None
        if inferred != node.type:
            raise GraphError(f"{node.describe()}: stored type {node.type} differs from the "
                             f"inferred type {inferred}")
    for o in graph.outputs:
        if o not in seen:
            raise GraphError(f"output %{o} is not a node")
    if not graph.outputs:
        raise GraphError("a graph needs at least one output")
