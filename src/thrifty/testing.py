"""Public test helpers: where the shared data lives, generators and ``assert_eq``.

Tests and benchmarks import these; users can too, to test their own specs.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

_SHARED_ENV = "THRIFTY_SHARED_DATA"


def shared_data_dir() -> Path | None:
    """The ``shared/data`` folder beside the repository, or ``None`` when it is absent.

    Looked up, in order: the ``THRIFTY_SHARED_DATA`` variable (read when called, never at
    import), then ``../shared/data`` relative to the repository root and to the current
    directory.
    """
    candidates = []
    env = os.environ.get(_SHARED_ENV)
    if env:
        candidates.append(Path(env))
    repo_root = Path(__file__).resolve().parents[2]
    candidates += [repo_root.parent / "shared" / "data", Path.cwd().parent / "shared" / "data"]
    for c in candidates:
        if c.is_dir():
            return c
    return None


def shared_matrix_index() -> list[dict[str, str]]:
    """The rows of ``shared/data/matrices/INDEX.tsv`` (its columns by name; ``file`` is
    relative to ``matrices/``), or ``[]`` when the index is absent."""
    import csv

    root = shared_data_dir()
    index = root / "matrices" / "INDEX.tsv" if root is not None else None
    if index is None or not index.exists():
        return []
    with open(index) as f:
        return list(csv.DictReader(f, delimiter="\t"))


def require_shared_data(*parts: str) -> Path:
    """Return ``shared/data/<parts>``, or skip the calling pytest test with a clear reason."""
    import pytest

    root = shared_data_dir()
    if root is None:
        pytest.skip("../shared/data is absent (a checkout outside the workplace); "
                    f"set {_SHARED_ENV} to its path to run this test")
    path = root.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} is absent from the shared data")
    return path


def to_dense(x: object) -> np.ndarray:
    """A numpy array from a numpy array, a scipy.sparse matrix/array or a scalar."""
    if hasattr(x, "toarray"):
        return np.asarray(x.toarray())  # type: ignore[attr-defined]
    return np.asarray(x)


def assert_eq(actual: object, expected: object, *, rtol: float = 1e-10, atol: float = 0.0,
              check_dtype: bool = False) -> None:
    """Check shape (and optionally dtype) first, then values, dense or sparse alike.

    NaNs in the same places compare equal.
    """
    a, e = to_dense(actual), to_dense(expected)
    assert a.shape == e.shape, f"shape {a.shape} != expected {e.shape}"
    if check_dtype:
        assert a.dtype == e.dtype, f"dtype {a.dtype} != expected {e.dtype}"
    np.testing.assert_allclose(a, e, rtol=rtol, atol=atol, equal_nan=True)
