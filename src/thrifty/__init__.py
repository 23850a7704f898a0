"""thrifty: skip the zeros, fit the memory, trust the bits.

Write a tensor program once as dense array code (``@thrifty.program``); thrifty
specializes it to the sparsity of its inputs, plans it under a memory budget, and emulates
and bounds low-precision arithmetic.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from thrifty.errors import (
    CycleError,
    FileFormatError,
    FormatError,
    GraphError,
    InfeasibleBudget,
    PatternError,
    PlanError,
    ShapeError,
    SpecError,
    ThriftyError,
)
from thrifty.front.trace import (
    Program,
    Tensor,
    abs,
    einsum,
    exp,
    log,
    matmul,
    max,
    program,
    relu,
    sigmoid,
    softmax,
    sqrt,
    sum,
    tanh,
    transpose,
    where,
)
from thrifty.graph.ir import Graph, Node, TensorType
from thrifty.graph.taskgraph import Buffer, Task, TaskGraph

try:
    __version__ = version("thrifty")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"


def load_matrix(path: str):  # type: ignore[no-untyped-def]
    """Read a sparse matrix file (Matrix Market, SuiteSparse .mat, Rutherford-Boeing) as CSR."""
    from thrifty.front.matrices import load_matrix as _load

    return _load(path)


__all__ = [
    "Buffer", "CycleError", "FileFormatError", "FormatError", "Graph", "GraphError",
    "InfeasibleBudget", "Node", "PatternError", "PlanError", "Program", "ShapeError",
    "SpecError", "Task", "TaskGraph", "Tensor", "TensorType", "ThriftyError", "abs", "einsum",
    "exp", "load_matrix", "log", "matmul", "max", "program", "relu", "sigmoid", "softmax",
    "sqrt", "sum", "tanh", "transpose", "where", "__version__",
]
