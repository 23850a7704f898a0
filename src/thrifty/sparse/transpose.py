"""The transpose of a CSR value whose pattern was inspected: a gather of its values.

The pattern of ``A.T`` (its index pointers and column indices, sorted) and the permutation
taking ``A``'s stored values to ``A.T``'s are computed once, when the plan is made; a run
only gathers the values (``A.T`` feeding a product costs one pass over ``nnz`` values, not
scipy's transposition and index sort on every call).

Example
-------
>>> import numpy as np, scipy.sparse as sp
>>> A = sp.csr_array(np.array([[0., 1., 2.], [3., 0., 0.]]))
>>> t = CsrTranspose(*transpose_pattern(A))
>>> t(A).toarray().tolist()
[[0.0, 3.0], [1.0, 0.0], [2.0, 0.0]]
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from thrifty.sparse import kernels as K

__all__ = ["CsrTranspose", "transpose_pattern"]


def transpose_pattern(S: sp.csr_array) -> tuple[sp.csr_array, np.ndarray]:
    """The canonical pattern of ``S.T`` (boolean values) and ``perm`` with
    ``S.T.data == S.data[perm]`` for any values stored on ``S``'s (canonical) pattern."""
    idx = sp.csr_array((np.arange(S.nnz, dtype=np.int64), S.indices, S.indptr),
                       shape=S.shape)
    T = sp.csr_array(idx.T)
    T.sort_indices()
    P = K.csr_from_parts(np.ones(T.nnz, dtype=bool), T.indices, T.indptr, T.shape)
    return P, np.asarray(T.data, dtype=np.int64)


class CsrTranspose:
    """``A.T`` for a CSR ``A`` of the inspected pattern: its values gathered into the
    precomputed pattern of the transpose."""

    def __init__(self, pattern: sp.csr_array, perm: np.ndarray) -> None:
        self.pattern, self.perm = pattern, perm

    def __call__(self, A: sp.csr_array) -> sp.csr_array:
        P = self.pattern
        return K.csr_from_parts(A.data[self.perm], P.indices, P.indptr, P.shape)
