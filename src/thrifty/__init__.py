"""thrifty: skip the zeros, fit the memory, trust the bits.

Write a tensor program once as dense array code (``@thrifty.program``); thrifty
specializes it to the sparsity of its inputs, plans it under a memory budget, and emulates
and bounds low-precision arithmetic.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

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

# Everything else is imported on first use (PEP 562), so that ``import thrifty`` stays
# fast: scipy, dask, rich, matplotlib and numba load only when a feature needs them.
_LAZY: dict[str, str] = {
    **dict.fromkeys(("load_matrix", "poisson2d", "poisson3d", "rmat"), "thrifty.front.matrices"),
    **dict.fromkeys(("Tensor", "abs", "einsum", "exp", "log", "matmul", "max", "relu",
                     "sigmoid", "softmax", "sqrt", "sum", "tanh", "transpose", "where"),
                    "thrifty.front.trace"),
    **dict.fromkeys(("Program", "program"), "thrifty.programs"),
    **dict.fromkeys(("Graph", "Node", "TensorType"), "thrifty.graph.ir"),
    **dict.fromkeys(("Buffer", "Task", "TaskGraph"), "thrifty.graph.taskgraph"),
    **dict.fromkeys(("load_taskgraph", "save_taskgraph"), "thrifty.graph.taskgraph_io"),
}
_SUBMODULES = frozenset({"cli", "errors", "front", "graph", "memory", "numerics", "programs",
                         "runtime", "sizes", "sparse", "testing", "torch"})

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs
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


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    if name in _SUBMODULES:
        return import_module(f"thrifty.{name}")
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            v = version("thrifty")
        except PackageNotFoundError:  # pragma: no cover - running from a source tree
            v = "0.0.0"
        globals()["__version__"] = v
        return v
    raise AttributeError(f"module 'thrifty' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY, "__version__"})


__all__ = [
    "Buffer", "CycleError", "FileFormatError", "FormatError", "Graph", "GraphError",
    "InfeasibleBudget", "Node", "PatternError", "PlanError", "Program", "ShapeError",
    "SpecError", "Task", "TaskGraph", "Tensor", "TensorType", "ThriftyError", "abs", "einsum",
    "exp", "load_matrix", "load_taskgraph", "log", "matmul", "max", "poisson2d", "poisson3d",
    "program", "relu", "rmat", "save_taskgraph", "sigmoid", "softmax", "sqrt", "sum", "tanh",
    "transpose", "where", "__version__",
]
