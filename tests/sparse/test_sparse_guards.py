"""Index arrays changed in place after inspection: a PatternError, never an out-of-bounds
read. Run in a child process, so that a regression shows as a failed test rather than a
crashed test run."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

CHILD = textwrap.dedent("""
    import numpy as np, scipy.sparse as sp, thrifty as th
    A = sp.random_array((300, 300), density=0.05, format="csr", rng=0)
    A.sort_indices()
    k, where, bad = {k}, {where!r}, {bad}
    arg = np.ones(300) if k == 0 else np.ones((300, k))
    prog = th.program(lambda A, X: A @ X)
    B = A.copy()
    ref = prog(B, arg)
    assert np.allclose(ref, A @ arg)
    if where == "indices":
        B.indices[7] = bad
    else:
        B.indptr[-1] = bad
    try:
        prog(B, arg)
    except th.PatternError as e:
        print("PatternError", e)
    else:
        print("no error")
""")


@pytest.mark.parametrize("k", [0, 8, 64])
@pytest.mark.parametrize(("where", "bad"), [("indices", 2_000_000_000), ("indices", -5),
                                            ("indices", 300), ("indptr", 10**9)])
def test_index_arrays_changed_after_inspection_are_refused(k, where, bad):
    out = subprocess.run([sys.executable, "-c", CHILD.format(k=k, where=where, bad=bad)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("PatternError"), out.stdout + out.stderr[-2000:]
    assert "specialize again" in out.stdout
