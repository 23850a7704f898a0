"""The program layer: ``@thrifty.program``, its trace and plan caches, and how it runs.

A :class:`Program` wraps a dense spec (an ordinary function of arrays). It traces the spec
with :func:`thrifty.front.trace.trace_function` (once per input types), specializes it with
the sparse engine (once per input sparsity pattern) and runs the plan with the runtime; with
only dense inputs, the reference executor runs the graph. This module sits above the
engines and the runtime: nothing below it imports it.

(The module is ``programs``, not ``program``: ``thrifty.program`` is the decorator, and a
submodule of that name would be shadowed by it, or shadow it when imported again.)
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import scipy.sparse as sp

from thrifty.errors import SpecError, ThriftyError
from thrifty.front.inputs import as_inputs
from thrifty.front.trace import Traced, trace_function, type_of_value
from thrifty.graph.ir import Graph, TensorType

__all__ = ["Program", "pack", "program"]


class Program:
    """A dense spec: call it with arrays to run it, or ``trace`` it to get its Graph.

    Example
    -------
    >>> import numpy as np, thrifty as th
    >>> @th.program
    ... def layer(A, X, W):
    ...     return th.relu(A @ (X @ W))
    >>> A, X, W = np.eye(3), np.ones((3, 2)), np.ones((2, 2))
    >>> layer(A=A, X=X, W=W).tolist()
    [[2.0, 2.0], [2.0, 2.0], [2.0, 2.0]]
    """

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
        self.signature = inspect.signature(fn)
        for p in self.signature.parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise SpecError(f"program {fn.__name__!r}: *args/**kwargs are not supported; "
                                "name every input")
        self._traces: dict[tuple[TensorType, ...], Traced] = {}
        self._plans: dict[Any, Any] = {}  # specialized plans by (types, pattern fingerprints)
        self._last_plan: Any = None
        self._param_names = tuple(self.signature.parameters)
        self._param_set = frozenset(self._param_names)
        self.__name__ = getattr(fn, "__name__", "program")
        self.__doc__ = fn.__doc__

    def bind(self, args: Sequence[Any], kwargs: Mapping[str, Any],
             check: bool = True) -> dict[str, Any]:
        """Map positional and keyword arguments to the function's parameter names.

        With ``check`` (the default) the values go through
        :func:`~thrifty.front.inputs.as_inputs` (numeric dtypes, well-formed CSR/CSC, torch
        tensors converted); a call that the last plan accepts skips that pass, since the
        plan's own input check is stricter.
        """
        if not args and kwargs.keys() == self._param_set:
            inputs = {p: kwargs[p] for p in self._param_names}  # every parameter by name
        else:
            try:
                b = self.signature.bind(*args, **kwargs)
            except TypeError as e:
                raise SpecError(f"program {self.__name__!r}: {e}; its inputs are "
                                f"{list(self.signature.parameters)}") from None
            b.apply_defaults()
            inputs = dict(b.arguments)
        return as_inputs(inputs) if check else inputs

    def traced(self, *args: Any, **kwargs: Any) -> Traced:
        """Trace (cached per input types) and return the Graph with the output structure."""
        inputs = self.bind(args, kwargs)
        types = tuple(type_of_value(k, v) for k, v in inputs.items())
        hit = self._traces.get(types)
        if hit is not None:
            return hit
        result = trace_function(self.fn, dict(zip(inputs, types)), self.__name__)
        self._traces[types] = result
        return result

    def trace(self, *args: Any, **kwargs: Any) -> Graph:
        """The Graph of this program for inputs of these types (arrays or shapes/dtypes)."""
        return self.traced(*args, **kwargs).graph

    def specialize(self, *args: Any, **kwargs: Any) -> Any:
        """Inspect the inputs' sparsity and return an executable plan (sparse engine).

        ``plan(**inputs)`` runs it on new values with the same patterns; ``plan.run(inputs,
        scheduler=...)`` picks the scheduler; ``plan.report()`` says what was chosen.
        """
        from thrifty.runtime.sparse_run import specialize

        inputs = self.bind(args, kwargs)
        tr = self.traced(**inputs)
        return specialize(tr.graph, inputs, structure=tr.structure)

    def plan_for(self, *args: Any, **kwargs: Any) -> Any:
        """The cached plan for these inputs' types and patterns, specializing on a miss.

        Plans are cached per pattern fingerprint; the most recently used plan is checked
        first by array identity or equality of the index arrays (no hashing).
        """
        inputs = self.bind(args, kwargs)
        last = self._last_plan
        if last is not None and last.matches(inputs):
            return last
        return self._cached_plan(inputs)

    def _cached_plan(self, inputs: dict[str, Any]) -> Any:
        """The plan for these inputs' types and patterns from the cache, specializing on a
        miss (the last plan already found not to fit)."""
        from thrifty.sparse.pattern import canonical_csr, structure_fingerprint

        types = tuple(type_of_value(k, v) for k, v in inputs.items())
        key = (types, tuple(structure_fingerprint(canonical_csr(v, k))
                            if sp.issparse(v) and np.ndim(v) == 2 else "dense"
                            for k, v in inputs.items()))
        plan = self._plans.get(key)
        if plan is None:
            plan = self.specialize(**inputs)
            self._plans[key] = plan
        self._last_plan = plan
        return plan

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the program on arrays; returns numpy arrays shaped like the function's result.

        With a scipy.sparse input the sparse engine runs it: specialized once per pattern
        (see :meth:`plan_for`), CSR results where the output pattern is sparse. With only
        dense inputs the reference executor runs it.
        """
        inputs = self.bind(args, kwargs, check=False)
        last = self._last_plan
        if last is not None:  # the common case: the same patterns as the last call
            out = last.fast_call(inputs)  # a one-SpMV plan given the arrays it inspected
            if out is not None:
                return out
            try:
                checked = last.check_inputs(inputs)
            except ThriftyError:
                checked = None
            if checked is not None:
                return last.run_checked(checked)
        inputs = as_inputs(inputs)
        if any(sp.issparse(v) for v in inputs.values()):
            return self._cached_plan(inputs).run(inputs)
        from thrifty.runtime.reference import evaluate

        tr = self.traced(**inputs)
        outs = evaluate(tr.graph, inputs)
        return pack(outs, tr.structure)


def pack(outs: Sequence[Any], structure: type | None) -> Any:
    """The program's results in the shape the function returned them."""
    if structure is None:
        return outs[0]
    return structure(outs)


def program(fn: Callable[..., Any]) -> Program:
    """Decorator: make a dense spec out of an ordinary function of arrays."""
    return Program(fn)
