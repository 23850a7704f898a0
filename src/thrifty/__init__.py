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
from thrifty.front.matrices import load_matrix, poisson2d, poisson3d, rmat
from thrifty.front.trace import (
    Tensor,
    abs,
    einsum,
    exp,
    log,
    matmul,
    max,
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
from thrifty.graph.taskgraph_io import load_taskgraph, save_taskgraph
from thrifty.programs import Program, program

try:
    __version__ = version("thrifty")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"


__all__ = [
    "Buffer", "CycleError", "FileFormatError", "FormatError", "Graph", "GraphError",
    "InfeasibleBudget", "Node", "PatternError", "PlanError", "Program", "ShapeError",
    "SpecError", "Task", "TaskGraph", "Tensor", "TensorType", "ThriftyError", "abs", "einsum",
    "exp", "load_matrix", "load_taskgraph", "log", "matmul", "max", "poisson2d", "poisson3d",
    "program", "relu", "rmat", "save_taskgraph", "sigmoid", "softmax", "sqrt", "sum", "tanh",
    "transpose", "where", "__version__",
]
