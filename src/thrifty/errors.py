"""The one exception hierarchy of thrifty.

Every error raised on bad input is a :class:`ThriftyError`. Messages name what was wrong
and what would have been valid.
"""

from __future__ import annotations


class ThriftyError(Exception):
    """Base class of every error thrifty raises on bad input or an impossible request."""


class SpecError(ThriftyError, TypeError):
    """A dense spec is malformed: unknown op, wrong arity, shapes or dtypes that do not fit."""


class ShapeError(SpecError, ValueError):
    """Operand shapes do not fit an op."""


class GraphError(ThriftyError, ValueError):
    """A Graph or TaskGraph is malformed (cycle, dangling reference, bad attribute)."""


class CycleError(GraphError):
    """A graph that must be acyclic has a cycle; ``cycle`` lists its node ids in order."""

    def __init__(self, message: str, cycle: list[object] | None = None) -> None:
        super().__init__(message)
        self.cycle = list(cycle or [])


class FileFormatError(ThriftyError, ValueError):
    """A file could not be read: names the file and, where known, the line."""

    def __init__(self, path: object, message: str, line: int | None = None) -> None:
        where = f"{path}" if line is None else f"{path}, line {line}"
        super().__init__(f"{where}: {message}")
        self.path = path
        self.line = line


class PatternError(ThriftyError, ValueError):
    """A sparsity pattern is invalid, or differs from the one a plan was specialized for."""


class PlanError(ThriftyError, ValueError):
    """A Plan does not fit its TaskGraph; names the first invalid step."""


class InfeasibleBudget(ThriftyError, ValueError):
    """No plan fits the requested memory budget; ``smallest`` is the smallest feasible one."""

    def __init__(self, message: str, budget: int | float | None = None,
                 smallest: int | float | None = None) -> None:
        super().__init__(message)
        self.budget = budget
        self.smallest = smallest


class BudgetNotMet(UserWarning):
    """A memory budget that could not be met where raising would stop the user's program
    (a ``torch.compile`` backend): the message says what was reached instead."""


class FormatError(ThriftyError, ValueError):
    """An unknown or misused number format, rounding mode or saturation mode."""
