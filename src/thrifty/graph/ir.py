"""The dense-spec IR: typed nodes in an immutable, topologically ordered graph.

A :class:`Graph` is what tracing a ``@thrifty.program`` produces. Every pass takes a Graph
and returns a new one; analyses return typed per-node facts (``dict[int, Fact]``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from thrifty.errors import GraphError


@dataclass(frozen=True, slots=True)
class TensorType:
    """The static type of a tensor: its shape and its numpy dtype name."""

    shape: tuple[int, ...]
    dtype: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        object.__setattr__(self, "dtype", np.dtype(self.dtype).name)
        if any(s < 0 for s in self.shape):
            raise GraphError(f"negative dimension in shape {self.shape}")

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.dtype).itemsize

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(map(str, self.shape))}]"


@dataclass(frozen=True, slots=True)
class Node:
    """One operation: ``op`` applied to the nodes ``inputs``, producing a tensor of ``type``.

    ``name`` is the argument name of an ``input`` node; ``loc`` the user's source line
    (``"file.py:12 in gcn"``) that created the node, for error messages.
    """

    id: int
    op: str
    inputs: tuple[int, ...]
    attrs: Mapping[str, Any]
    type: TensorType
    name: str | None = None
    loc: str | None = field(default=None, compare=False)

    def describe(self) -> str:
        where = f" at {self.loc}" if self.loc else ""
        if self.op == "input":
            return f"%{self.id} = input {self.name!r}"
        return f"%{self.id} = {self.op}({', '.join(f'%{i}' for i in self.inputs)}){where}"


class Graph:
    """An immutable DAG of :class:`Node` in topological order, with inputs and outputs.

    Example
    -------
    >>> import thrifty as th
    >>> g = th.program(lambda A, x: A @ x).trace(A=((3, 3), "float64"), x=((3,), "float64"))
    >>> [n.op for n in g], g.input_names, g.type_of(g.outputs[0]).shape
    (['input', 'input', 'matmul'], ('A', 'x'), (3,))
    """

    __slots__ = ("nodes", "inputs", "outputs", "input_names", "_users")

    def __init__(self, nodes: Mapping[int, Node] | list[Node], outputs: tuple[int, ...]) -> None:
        items = list(nodes.values()) if isinstance(nodes, Mapping) else list(nodes)
        node_map: dict[int, Node] = {}
        for n in items:
            if n.id in node_map:
                raise GraphError(f"duplicate node id %{n.id}")
            for i in n.inputs:
                if i not in node_map:
                    raise GraphError(
                        f"{n.describe()} uses %{i}, which is not defined before it "
                        "(nodes must be in topological order)")
            node_map[n.id] = n
        for o in outputs:
            if o not in node_map:
                raise GraphError(f"output %{o} is not a node of the graph")
        self.nodes: Mapping[int, Node] = MappingProxyType(node_map)
        self.outputs: tuple[int, ...] = tuple(outputs)
        self.inputs: tuple[int, ...] = tuple(n.id for n in items if n.op == "input")
        self.input_names: tuple[str, ...] = tuple(str(node_map[i].name) for i in self.inputs)
        users: dict[int, list[int]] = {i: [] for i in node_map}
        for n in items:
            for i in dict.fromkeys(n.inputs):
                users[i].append(n.id)
        self._users = {i: tuple(u) for i, u in users.items()}

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes.values())

    def __len__(self) -> int:
        return len(self.nodes)

    def __getitem__(self, node_id: int) -> Node:
        return self.nodes[node_id]

    def users(self, node_id: int) -> tuple[int, ...]:
        """Ids of the nodes that read ``node_id`` (each once, in order)."""
        return self._users[node_id]

    def type_of(self, node_id: int) -> TensorType:
        return self.nodes[node_id].type

    def input_types(self) -> dict[str, TensorType]:
        return {self.nodes[i].name or "": self.nodes[i].type for i in self.inputs}

    def __repr__(self) -> str:
        body = "\n".join(f"  {n.describe()} : {n.type}" for n in self)
        outs = ", ".join(f"%{o}" for o in self.outputs)
        return f"Graph(\n{body}\n  return {outs}\n)"
