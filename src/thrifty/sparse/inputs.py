"""What a sparse plan expects of its inputs: :class:`InputSpec`, checked on every run."""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from thrifty.errors import PatternError, ShapeError, SpecError
from thrifty.graph.ir import Node
from thrifty.sparse import kernels as K
from thrifty.sparse.pattern import canonical_csr, index_fingerprint, structure_fingerprint

__all__ = ["InputSpec", "input_spec", "input_spec_csr"]

CSR_TYPES = (sp.csr_array, sp.csr_matrix)


@dataclass(frozen=True, slots=True)
class InputSpec:
    """What a plan expects of one input: type, form, and for sparse inputs the pattern.

    ``indptr`` and ``indices`` are the plan's own copies of the inspected pattern (a caller
    who changes its index arrays in place cannot change them). Every run compares the
    index arrays it is given with them (O(nnz), vectorised, no temporaries; about 3 µs per
    2*10^4 entries here, 10-20% of an SpMV over the same arrays), except when
    ``pattern_free`` is set and the very arrays inspected (``seen``, weak references) are
    passed again: then every task that reads this input reads its index arrays at run time
    and the plan holds nothing derived from its pattern, so the result is right for
    whatever those arrays hold, even after an in-place change (a new pattern in new arrays
    is still compared, and rejected).

    ``fingerprint_`` is the pattern's hash (:func:`thrifty.sparse.pattern.index_fingerprint`)
    when already known; ``None`` until :attr:`fingerprint` is first asked for (hashing
    every sparse input's indices at inspection cost about as much as a masked product's
    call, for a figure only plan caches and messages read).
    """

    name: str
    node: int
    shape: tuple[int, ...]
    dtype: str
    sparse: bool
    fingerprint_: str | None = field(compare=False)
    indptr: np.ndarray | None = field(default=None, repr=False)
    indices: np.ndarray | None = field(default=None, repr=False)
    pattern_free: bool = False
    seen: tuple[Any, Any] | None = field(default=None, repr=False, compare=False)
    np_dtype: np.dtype = field(init=False, repr=False, compare=False)  # type: ignore[type-arg]

    def __post_init__(self) -> None:
        object.__setattr__(self, "np_dtype", np.dtype(self.dtype))  # compared on every run

    @property
    def fingerprint(self) -> str:
        """A hash of the input's pattern (its shape for a dense input), computed once."""
        if self.fingerprint_ is None:
            assert self.indptr is not None and self.indices is not None  # a sparse input
            object.__setattr__(self, "fingerprint_",
                               index_fingerprint(self.shape, self.indptr, self.indices))
        return self.fingerprint_  # type: ignore[return-value]

    def check(self, value: Any) -> Any:
        """The value in the plan's run-time form; raises on a type or pattern mismatch."""
        tv = type(value)
        if tv is np.ndarray and not self.sparse:  # the common dense case, cheaply
            if value.shape != self.shape or value.dtype != self.np_dtype:
                self._mismatch(value)
            return value
        if tv in CSR_TYPES and self.sparse:
            if value.shape != self.shape or value.data.dtype != self.np_dtype:
                self._mismatch(value)
            ip, ix = value.indptr, value.indices
            seen = self.seen
            if (self.pattern_free and seen is not None and ip is seen[0]() and
                    ix is seen[1]()) \
                    or (len(ix) == len(self.indices)  # type: ignore[arg-type]
                        and K.same_values(ip, self.indptr)  # type: ignore[arg-type]
                        and K.same_values(ix, self.indices)):  # type: ignore[arg-type]
                # the inspected pattern: canonical (sorted, no duplicates) like it
                return value if tv is sp.csr_array else sp.csr_array(value)
        self._mismatch(value)
        return self._check_general(value)

    def _mismatch(self, value: Any) -> None:
        """Raise for a value of another shape or dtype."""
        shape = tuple(value.shape) if hasattr(value, "shape") else np.shape(value)
        if shape != self.shape:
            raise ShapeError(f"input {self.name!r} has shape {shape}, but the plan was "
                             f"specialized for shape {self.shape}")
        dtype = value.dtype if hasattr(value, "dtype") else np.asarray(value).dtype
        if dtype != self.dtype:  # numpy compares a dtype with its name without building one
            try:
                name = np.dtype(dtype).name
            except TypeError:  # not a numpy dtype (a torch tensor's, say)
                name = str(dtype)
            raise SpecError(f"input {self.name!r} has dtype {name}, but the "
                            f"plan was specialized for dtype {self.dtype}; cast the input or "
                            "specialize again")

    def _check_general(self, value: Any) -> Any:
        """Other types and forms (shape and dtype already checked)."""
        if not self.sparse:
            if sp.issparse(value):
                raise PatternError(f"input {self.name!r} is sparse, but the plan was "
                                   "specialized for a dense array; specialize again")
            return np.asarray(value)
        if not sp.issparse(value):
            raise PatternError(f"input {self.name!r} is a dense {type(value).__name__}, but "
                               "the plan was specialized for a scipy.sparse matrix; pass one "
                               "or specialize again")
        indptr, indices = self.indptr, self.indices
        assert indptr is not None and indices is not None  # set for every sparse input
        C = canonical_csr(value, self.name)
        if not (len(C.indices) == len(indices) and K.same_values(C.indptr, indptr)
                and K.same_values(C.indices, indices)):
            raise PatternError(
                f"input {self.name!r} has a different sparsity pattern ({C.nnz} stored "
                f"entries, fingerprint {structure_fingerprint(C)}) from the one the plan was "
                f"specialized for ({len(indices)} entries, fingerprint "
                f"{self.fingerprint}); specialize again (calling the program does so)")
        return C


def input_spec(node: Node, value: Any) -> InputSpec:
    """What a plan for ``value`` at input ``node`` expects of that input."""
    return input_spec_csr(node, value)[0]


def input_spec_csr(node: Node, value: Any) -> tuple[InputSpec, sp.csr_array | None]:
    """:func:`input_spec`, and for a sparse input its value as canonical CSR on the spec's
    own index arrays (the inspected pattern: canonicalised once)."""
    name = node.name or ""
    if sp.issparse(value) and node.type.ndim == 2:
        C = canonical_csr(value, name)
        seen = None
        if value.format == "csr" and K.same_values(value.indptr, C.indptr) and \
                K.same_values(value.indices, C.indices):
            # the caller's arrays (canonical already), without keeping them alive
            seen = (weakref.ref(value.indptr), weakref.ref(value.indices))
        spec = InputSpec(name, node.id, node.type.shape, node.type.dtype, True,
                         None, C.indptr.copy(), C.indices.copy(), False, seen)
        return spec, K.csr_from_parts(C.data, spec.indices, spec.indptr,  # type: ignore[arg-type]
                                      C.shape)
    return InputSpec(name, node.id, node.type.shape, node.type.dtype, False,
                     f"dense{node.type.shape}"), None

