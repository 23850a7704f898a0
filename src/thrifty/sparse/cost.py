"""The cost model that picks a kernel form per op (and per block row) and sizes tasks.

Times are estimated from flops and bytes at rates measured on the 2-core development
machine (median of repeated runs of ``benchmarks/sparse_kernels.py``); they only need to
rank the alternatives, not predict wall time. The policy follows the roofline reasoning of
Williams, Waterman and Patterson ("Roofline", CACM 2009): a CSR kernel streams its indices
at a low flop rate, a dense gemm on a gathered panel computes the zeros too at a high rate,
so the panel pays once its density exceeds the ratio of the two rates.

Example
-------
>>> cm = CostModel()
>>> cm.spmm_seconds(nnz=10**6, k=64) > cm.gemm_seconds(10**3, 10**3, 64)
True
>>> 0 < cm.panel_density_threshold < 1
True
>>> left, right = cm.chain_seconds(nnz=10**5, n=10**4, m=10**4, f_in=256, f_out=8)
>>> left > right                       # A @ (X @ W): the SpMM on 8 columns, not 256
True
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["CostModel"]


@dataclass(frozen=True, slots=True)
class CostModel:
    """Machine rates and the task-size policy.

    Attributes
    ----------
    csr_flops:
        Flop rate of one thread in a CSR SpMM/SDDMM kernel (flop/s).
    gemm_flops:
        Flop rate of BLAS gemm on one thread (flop/s).
    bandwidth:
        Memory bandwidth of one thread (byte/s), for gathers, scatters and elementwise work.
    task_overhead:
        Seconds the Dask scheduler spends per task.
    threads:
        Worker threads of the threaded scheduler.
    min_task_seconds:
        An op is split into row tasks only when it carries at least twice this much
        estimated work (below that it stays one task in the calling thread).
    split_seconds:
        Once split, each task carries at least this much estimated work (or
        ``min_task_seconds`` where that is smaller), up to :attr:`tasks_per_thread` tasks
        per thread. Finer tasks (0.25 ms, four per thread) were measured against these
        (1 ms, two per thread) with the other core busy: 0.80-2.02x their time on the pool
        (median 1.13x; ``benchmarks/task_split.py``, load 8-10, see the README), so they
        are not the default; with an idle core they were not measured.
    sparse_output_density:
        A result is kept in CSR form below this density, densified above.
    parallel_seconds:
        In an in-process run, a level of independent tasks runs on ``threads`` threads when
        it carries at least this much estimated work (handing a task to a pooled thread and
        waiting for it costs about 20-50 µs here).
    panel_overhead:
        Fixed cost of one gathered panel (allocation, gather and BLAS call: 6 µs measured
        for an 8 x 48 panel here), which keeps tiny panels in CSR form.
    chains:
        Whether matmul chains ``A @ (X @ W)`` / ``(A @ X) @ W`` with a sparse ``A`` are
        associated by :meth:`chain_seconds` (and ``(A @ X) @ W`` fused per row panel);
        ``False`` lowers each product as written (what matrix-unit emulation of a plan
        needs: it replays the spec's products one by one).
    masked_visit:
        Seconds per pair ``(a_ik, b_kj)`` a masked SpGEMM row visits (an indirect load and
        a test of the dense accumulator: latency, not flops, bounds it).
    blas_call:
        Fixed cost of one small BLAS call (a fused chain's per-panel gemm).
    panel_call:
        Fixed cost of a fused kernel's other calls per cache panel (its SpMM rows and its
        unary op: 1.2 and 0.7 µs measured on one-row panels here).
    tasks_per_thread:
        A row-panel op is split into at most this many tasks per thread (the threads take
        them from one queue, so a thread that the OS deschedules holds back less work).
    idle_check:
        A level of parallel tasks runs on the pool only when ``threads - 1`` cores are idle
        (with two threads: fewer threads runnable on the machine than cores,
        :func:`thrifty.runtime.taskrun.core_idle`),
        else in the calling thread, its row panels merged into one call: with the other
        core busy, two threads took 1.0-5.2x one thread's time by median, the merged call
        0.91-1.18x (``benchmarks/task_split.py``, load 8-10, see the README). ``False``:
        always on the pool.
    dask_seconds:
        With no scheduler named, plans with parallel tasks and at least this much estimated
        work run on Dask's threaded scheduler; smaller plans run in process (Dask spends
        100-200 µs per task). Never by default: the in-process runner (levels of row
        panels on pooled threads) was faster on every plan of the benchmark, large ones
        too (SpMM on 3D Poisson 64³, k = 64: Dask's threaded scheduler took 1.3x the
        in-process time, same run); ``scheduler="threads"`` still asks for Dask.
    """

    csr_flops: float = 4.0e9
    gemm_flops: float = 2.5e10
    bandwidth: float = 1.1e10
    task_overhead: float = 150e-6
    threads: int = 2
    min_task_seconds: float = 1.0e-3
    split_seconds: float = 1.0e-3
    sparse_output_density: float = 0.25
    parallel_seconds: float = 1.5e-4
    dask_seconds: float = math.inf
    panel_overhead: float = 1.0e-5
    tasks_per_thread: int = 2
    blas_call: float = 2.0e-6
    panel_call: float = 2.0e-6
    masked_visit: float = 2.5e-9
    chains: bool = True
    idle_check: bool = True

    @property
    def panel_density_threshold(self) -> float:
        """Density above which a gathered dense panel beats CSR for SpMM."""
        return min(1.0, 1.5 * self.csr_flops / self.gemm_flops)

    def spmm_seconds(self, nnz: int, k: int) -> float:
        """CSR SpMM (or SpMV for ``k = 1``) of ``nnz`` entries times ``k`` columns."""
        return (2.0 * nnz * k) / self.csr_flops + 12.0 * nnz / self.bandwidth

    def gemm_seconds(self, m: int, n: int, k: int) -> float:
        """Dense ``(m x n) @ (n x k)``."""
        return 2.0 * m * n * k / self.gemm_flops + 8.0 * (m * n + n * k + m * k) / self.bandwidth

    def panel_seconds(self, rows: int, cols: int, nnz: int, k: int) -> float:
        """A gathered panel: scatter ``nnz`` values, gather ``cols`` rows of X, then gemm."""
        return (self.panel_overhead + self.gemm_seconds(rows, cols, k)
                + 16.0 * nnz / self.bandwidth + 8.0 * rows * cols / self.bandwidth)

    def elementwise_seconds(self, n: int) -> float:
        """One elementwise pass over ``n`` values."""
        return 24.0 * n / self.bandwidth

    def n_tasks(self, seconds: float) -> int:
        """How many parallel tasks to split work of ``seconds`` into: one below
        ``2 * min_task_seconds``; else as many tasks of at least ``split_seconds`` (or
        ``min_task_seconds`` where smaller) as fit, at most ``tasks_per_thread`` per thread,
        and a multiple of the threads (three equal tasks on two threads take two tasks'
        time, a third more than two or four tasks: SpMM on poisson3d-40, k = 16, had been
        cut into three). Never decreasing in ``seconds``.

        >>> cm = CostModel()
        >>> [cm.n_tasks(s) for s in (1e-3, 2e-3, 3e-3, 1e-2)]
        [1, 2, 2, 4]
        >>> CostModel(split_seconds=2.5e-4, tasks_per_thread=4).n_tasks(2e-3)
        8
        """
        if seconds < 2 * self.min_task_seconds or self.threads <= 1:
            return 1
        each = min(self.split_seconds, self.min_task_seconds)
        n = int(min(self.tasks_per_thread * self.threads, max(1, seconds // each)))
        return max(min(n, self.threads), n - n % self.threads)

    def chain_seconds(self, nnz: int, n: int, m: int, f_in: int, f_out: int,
                      x_in_cache: bool = False) -> tuple[float, float]:
        """``(A @ X) @ W`` fused per row panel, and ``A @ (X @ W)``, for an ``n x m``
        ``A`` with ``nnz`` entries, ``X`` of ``m x f_in`` and ``W`` of ``f_in x f_out``.

        The fused form does the SpMM on ``f_in`` columns and one small gemm per cache
        panel (its intermediate never leaves cache); the other does a gemm of all ``m``
        rows (its ``m x f_out`` result written and read back) and the SpMM on ``f_out``
        columns. As in opt_einsum's choice of a dense chain's order, the flops decide
        when the widths differ; the memory traffic of the intermediate when they tie.

        ``x_in_cache``: ``X`` is made one row panel at a time by a fused kernel (the
        previous layer of a GCN), which can multiply each panel by ``W`` while it is in
        cache. Then ``A @ (X @ W)`` costs the gemm's flops and calls, the SpMM on
        ``f_out`` columns, and that kernel writing ``f_out`` columns instead of ``f_in``;
        the fused ``(A @ X) @ W`` pays the SpMM on ``f_in`` and its calls per panel. At
        equal widths those calls decide: ``A @ (X @ W)`` is then a plain SpMM (one
        CPU-time measurement of a two-layer GCN at widths 64 here: 3-14% less than two
        fused ``(A @ X) @ W`` passes).
        """
        left = self.fused_seconds(nnz, n, (f_in, f_out))
        if x_in_cache:
            right = (2.0 * m * f_in * f_out / self.gemm_flops
                     + -(-m // self.chain_rows(f_in, f_out)) * self.blas_call
                     + self.spmm_seconds(nnz, f_out) + 8.0 * n * f_out / self.bandwidth
                     + 8.0 * m * (f_out - f_in) / self.bandwidth)
            return left, right
        right = self.gemm_seconds(m, f_in, f_out) + self.spmm_seconds(nnz, f_out) + \
            8.0 * m * f_out / self.bandwidth
        return left, right

    def across_pays(self, nnz: int, n: int, m: int, f_in: int, f_out: int,
                    panelled: bool) -> bool:
        """Whether ``A @ (X @ W)`` with ``X @ W`` made in the panels of the kernel making
        ``X`` costs less than both associations made on their own (:meth:`chain_seconds`).
        ``panelled``: that kernel already runs per cache panel (a fused chain), so ``W``
        adds one BLAS call per panel; otherwise (a plain SpMM) each panel also pays
        :attr:`panel_call`. A tie (to rounding) does not pay."""
        left, right = self.chain_seconds(nnz, n, m, f_in, f_out)
        _, fused = self.chain_seconds(nnz, n, m, f_in, f_out, x_in_cache=True)
        if not panelled:
            fused += -(-m // self.chain_rows(f_in, f_out)) * self.panel_call
        return fused * (1.0 + 1e-9) < min(left, right)

    def fused_seconds(self, nnz: int, n: int, widths: tuple[int, ...]) -> float:
        """A fused row-panel kernel: the SpMM of ``nnz`` entries on ``widths[0]`` columns,
        then per cache panel of its ``n`` rows a gemm from each width to the next (one
        small BLAS call each) and the unary op, the last width written out."""
        gemms = list(zip(widths, widths[1:]))
        rows = self.fused_rows(widths)
        return (self.spmm_seconds(nnz, widths[0])
                + sum(2.0 * n * a * b for a, b in gemms) / self.gemm_flops
                + -(-n // rows) * (len(gemms) * self.blas_call + self.panel_call)
                + 8.0 * n * widths[-1] / self.bandwidth)

    def fused_rows(self, widths: tuple[int, ...]) -> int:
        """Rows per cache panel of a fused kernel whose gemms go from each of ``widths``
        to the next: the smallest :meth:`chain_rows` of its gemms."""
        return min([self.chain_rows(a, b) for a, b in zip(widths, widths[1:])] or [128])

    @staticmethod
    def chain_rows(f_in: int, f_out: int) -> int:
        """Rows per cache panel of a fused chain: 8-128, with the panel's gemm
        (``rows x f_in x f_out``) at most 2^19 multiply-adds, where OpenBLAS stays on one
        thread (two row tasks each calling a multi-threaded BLAS at once ran 10x slower
        here, measured with 256-row panels at f = 64)."""
        return int(max(8, min(128, (1 << 19) // max(1, f_in * f_out))))

    def masked_seconds(self, visits: float, nnz: int) -> float:
        """A mask-driven masked SpGEMM visiting ``visits`` pairs into ``nnz`` mask entries."""
        return visits * self.masked_visit + 3.0 * self.elementwise_seconds(nnz)
