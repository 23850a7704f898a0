"""Dense operands sliced per worker on a real LocalCluster of 2 worker processes: each
worker gets the rows of ``X`` its pieces of ``A`` read, and the results equal the
in-process plan and the dense reference."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

import thrifty as th
from thrifty.front.matrices import poisson2d
from thrifty.runtime.slicing import Cols, columns, rebase, rows_of
from thrifty.runtime.sparse_run import specialize
from thrifty.sparse.cost import CostModel
from thrifty.sparse.tasks import Seg, SpmmPanel
from thrifty.testing import assert_eq

distributed = pytest.importorskip("distributed")


def _held(cluster_plan, name: str) -> dict[str, int]:
    return cluster_plan.operand_rows()[name]


def _split_plan(fn, inputs, **cost):
    """The plan of ``fn`` with row panels split off down to tiny ones (several panels on a
    small matrix, so that both workers get rows)."""
    tr = th.program(fn).traced(**inputs)
    return specialize(tr.graph, inputs, structure=tr.structure,
                      cost=CostModel(min_task_seconds=1e-7, **cost))


@pytest.mark.parametrize("k", [None, 8])
def test_a_banded_matrix_sends_each_worker_a_band_of_the_operand(client, k):
    A = poisson2d(60)  # 3600 rows, bandwidth 60
    n = A.shape[0]
    rng = np.random.default_rng(10)
    x = rng.standard_normal(n if k is None else (n, k))
    plan = _split_plan(lambda A, x: A @ x, {"A": A, "x": x})
    cluster_plan = plan.distribute(client, {"A": A})
    got = cluster_plan.run({"A": A, "x": x})
    assert_eq(got, A.toarray() @ x, rtol=1e-12, atol=1e-12)     # dense reference
    assert_eq(got, plan.run({"A": A, "x": x}, scheduler="sync"), rtol=1e-12, atol=1e-12)
    held = _held(cluster_plan, "x")
    assert len(held) == 2
    where = cluster_plan.placement()["A"]
    for w, rows in where.items():
        r0, r1 = rows[0][0], rows[-1][1]
        # the worker's rows of A reach 60 rows (one grid line) beyond its row block
        assert held[w] == min(n, r1 + 60) - max(0, r0 - 60)
    assert sum(held.values()) < 1.1 * n
    # a new operand is sliced again, never stale
    x2 = rng.standard_normal(x.shape)
    assert_eq(cluster_plan.run({"A": A, "x": x2}), A @ x2, rtol=1e-12, atol=1e-12)
    x2[n // 2] += 3.0  # changed in place
    assert_eq(cluster_plan.run({"A": A, "x": x2}), A @ x2, rtol=1e-12, atol=1e-12)


def _parity(n: int) -> sp.csr_array:
    """Rows of the top half read even columns only, the bottom half odd columns only."""
    rng = np.random.default_rng(11)
    rows = np.repeat(np.arange(n), 6)
    half = rows >= n // 2
    cols = 2 * rng.integers(0, n // 2, rows.shape[0]) + half
    A = sp.csr_array((rng.standard_normal(rows.shape[0]), (rows, cols)), shape=(n, n))
    A.sum_duplicates()
    return A


def test_scattered_columns_are_gathered(client):
    A = _parity(3000)
    X = np.random.default_rng(12).standard_normal((A.shape[0], 4))
    plan = _split_plan(lambda A, X: A @ X, {"A": A, "X": X})
    cluster_plan = plan.distribute(client)
    got = cluster_plan.run({"A": A, "X": X})
    assert_eq(got, A.toarray() @ X, rtol=1e-12, atol=1e-12)
    assert_eq(got, plan.run({"A": A, "X": X}, scheduler="sync"), rtol=1e-12, atol=1e-12)
    held = _held(cluster_plan, "X")
    # each worker holds half the rows of X (its parity), not a range spanning them all
    assert len(held) == 2 and all(w <= A.shape[0] // 2 for w in held.values())


def test_gathered_dense_segments_are_renumbered(client):
    """A dense block in the second half: its panel segment's columns are renumbered to
    positions in the second worker's slice of X."""
    n = 16384
    A = sp.lil_array((n, n))
    A[12032:12096, 12032:12544] = np.random.default_rng(8).standard_normal((64, 512))
    A = sp.csr_array(A + sp.eye_array(n) + sp.eye_array(n, k=7))
    X = np.random.default_rng(9).standard_normal((n, 16))
    plan = _split_plan(lambda A, X: A @ X, {"A": A, "X": X})
    segs = [s for t in plan.taskgraph.tasks.values() for s in getattr(t.fn, "segs", ())]
    assert any(s.form == "panel" and s.r0 >= n // 2 for s in segs)
    cluster_plan = plan.distribute(client, {"A": A})
    got = cluster_plan.run({"A": A, "X": X})
    assert_eq(got, A @ X, rtol=1e-10, atol=1e-12)  # scipy (too large for a dense oracle)
    assert_eq(got, plan.run({"A": A, "X": X}, scheduler="sync"), rtol=1e-12, atol=1e-12)
    assert min(_held(cluster_plan, "X").values()) < n


def test_a_fused_chain_and_an_operand_computed_on_the_cluster(client):
    A = poisson2d(60)
    n = A.shape[0]
    rng = np.random.default_rng(13)
    # 64 wide: the fused chain's panels pay (at 16, X @ W by BLAS and a plain SpMM do)
    X, W = rng.standard_normal((n, 64)), rng.standard_normal((64, 64))
    inputs = {"A": A, "X": X, "W": W}

    def layer(A, X, W):
        return th.relu(A @ (X @ W))

    want = np.maximum(A.toarray() @ (X @ W), 0)
    # fused per row panel: X sliced per worker, W sent whole
    fused = _split_plan(layer, inputs)
    assert any(t.kernel == "spmm_chain" for t in fused.taskgraph.tasks.values())
    cluster_plan = fused.distribute(client)
    got = cluster_plan.run(inputs)
    assert "A" in cluster_plan.placement()
    assert max(_held(cluster_plan, "X").values()) < n
    assert_eq(got, want, rtol=1e-10, atol=1e-12)
    assert_eq(got, fused.run(inputs, scheduler="sync"), rtol=1e-12, atol=1e-12)
    # as written: X @ W computed on the cluster, each worker takes the rows it reads
    written = _split_plan(layer, inputs, chains=False)
    got = written.distribute(client).run(inputs)
    assert_eq(got, want, rtol=1e-10, atol=1e-12)
    assert_eq(got, written.run(inputs, scheduler="sync"), rtol=1e-12, atol=1e-12)


def test_columns_and_rebase_agree_with_the_whole_matrix():
    """Without a cluster: a piece and its slice of X give the piece's rows of A @ X, for
    ranges, gathers and gathered dense segments."""
    A = _parity(400) + sp.csr_array(sp.eye_array(400))
    A = sp.csr_array(A)
    X = np.random.default_rng(14).standard_normal((400, 3))
    want = A @ X
    for ranges in ([(0, 100), (100, 200)], [(250, 400)], [(0, 400)]):
        cols, pieces = columns(A, ranges, [])
        assert isinstance(cols, Cols)
        for (r0, r1), P in zip(ranges, pieces):
            assert_eq(P @ cols.of(X), want[r0:r1], rtol=1e-12, atol=1e-12)
    # a panel of rows 300-310 whose dense segment gathers 15 columns: scattered ones
    # (gathered slice) or one run of columns (a range from 385)
    for cols_seg in (np.r_[5:10, 390:400], np.arange(385, 400)):
        B = sp.lil_array((400, 400))
        B[300:310, cols_seg] = 1.0 + np.arange(150).reshape(10, 15)
        B = sp.csr_array(B)
        pos = np.searchsorted(cols_seg, B.indices[B.indptr[300]:B.indptr[310]])
        flat = np.repeat(np.arange(10), np.diff(B.indptr[300:311])) * 15 + pos
        fn = SpmmPanel(300, 310, [Seg(300, 310, "panel", cols_seg, flat)], "float64", None)
        cols, (P,) = columns(B, [(300, 310)], [cols_seg])
        assert cols.width == 15 and (cols.take is None) == (cols_seg[0] == 385)
        out = rebase(fn, cols)(np.empty((10, 3)), P, cols.of(X))
        assert_eq(out, (B @ X)[300:310], rtol=1e-12, atol=1e-12)
        out = rebase(fn)(np.empty((10, 3)), rows_of(B, 300, 310), X)  # not renumbered
        assert_eq(out, (B @ X)[300:310], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", ["add", "relu-mul", "row-bias"])
def test_an_elementwise_op_of_the_panels_runs_per_panel_with_its_rows(client, case):
    """``A @ X + B`` and the like: the elementwise op runs on the workers, each panel with
    its rows of ``B`` (sent by rows with A's placement), a row-broadcast bias sent whole."""
    A = poisson2d(50)
    n = A.shape[0]
    rng = np.random.default_rng(15)
    X, B, b = (rng.standard_normal((n, 6)), rng.standard_normal((n, 6)),
               rng.standard_normal(6))
    D = A.toarray()
    if case == "add":
        fn, inputs, want = (lambda A, X, B: A @ X + B), {"A": A, "X": X, "B": B}, D @ X + B
    elif case == "relu-mul":
        fn, inputs = (lambda A, X, B: th.relu(A @ X) * B), {"A": A, "X": X, "B": B}
        want = np.maximum(D @ X, 0) * B
    else:
        fn, inputs, want = (lambda A, X, b: A @ X - b), {"A": A, "X": X, "b": b}, D @ X - b
    plan = _split_plan(fn, inputs)
    cluster_plan = plan.distribute(client)
    assert len(cluster_plan.fused) == 1  # the elementwise task runs per panel
    got = cluster_plan.run(inputs)
    assert_eq(got, want, rtol=1e-12, atol=1e-12)
    assert_eq(got, plan.run(inputs, scheduler="sync"), rtol=1e-12, atol=1e-12)
    where = cluster_plan.placement()
    if case != "row-bias":
        assert where["B"] == where["A"]  # B's rows went where A's rows are, none whole
    # B changed in place: its rows are sent again
    changed = dict(inputs)
    if case != "row-bias":
        B[n // 2] += 1.0
        want = D @ X + B if case == "add" else np.maximum(D @ X, 0) * B
        assert_eq(cluster_plan.run(changed), want, rtol=1e-12, atol=1e-12)


def test_a_joined_output_that_a_later_task_reads(client):
    """An output joined from panels that another task also reads: joined on the cluster,
    gathered from there."""
    A = poisson2d(40)
    n = A.shape[0]
    rng = np.random.default_rng(16)
    inputs = {"A": A, "X": rng.standard_normal((n, 4)), "B": rng.standard_normal((n, 4))}

    def both(A, X, B):
        y = A @ X + B
        return y, th.relu(y) * 2.0

    plan = _split_plan(both, inputs)
    y = plan.output_buffers()[0]
    assert any(y in t.reads for t in plan.taskgraph.tasks.values())  # y is read again
    D = A.toarray()
    first = D @ inputs["X"] + inputs["B"]
    got = plan.distribute(client).run(inputs)
    want = plan.run(inputs, scheduler="sync")
    assert len(got) == 2
    for g, w, d in zip(got, want, (first, np.maximum(first, 0) * 2.0)):
        assert_eq(g, d, rtol=1e-12, atol=1e-12)
        assert_eq(g, w, rtol=1e-12, atol=1e-12)
