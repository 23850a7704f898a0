"""The :class:`Unit`: a :class:`UnitModel` with batched ``dot``/``matmul`` executors.

Two engines compute the same bits: the vectorised numpy engine (exact integer arrays,
:mod:`.exact`) and the compiled engine (:mod:`.kernels`, numba loops, loaded on first
use); :func:`thrifty.numerics.units.reference_dot` is the plain specification both are
tested against.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from thrifty.errors import FormatError, ShapeError, SpecError
from thrifty.numerics.formats import Format, get_format
from thrifty.numerics.units import checks
from thrifty.numerics.units.exact import (
    _add_last,
    _as_terms,
    _check_values,
    _halves,
    _Terms,
    _truncate_bits,
    _window,
    decompose,
    round_scaled,
)
from thrifty.numerics.units.kernels import (
    compiled_eligible,
    compiled_kernels,
    kernel_params,
    lane_kernels,
    lanes_eligible,
    tiled_eligible,
)
from thrifty.numerics.units.model import UnitModel


@dataclass(frozen=True, slots=True)
class Unit:
    """A matrix unit: a :class:`UnitModel` with batched ``dot``/``matmul`` executors.

    Example
    -------
    >>> import numpy as np
    >>> from thrifty.numerics.units import unit
    >>> u = unit("v100", input="fp16", output="fp32")
    >>> a = np.array([1.0, 2.0**-24, 0, 0]); b = np.ones(4)
    >>> float(u.dot(a, b, 0.0)) == 1.0   # 2^-24 falls out of V100's 23-bit window
    True
    """

    model: UnitModel

    @property
    def name(self) -> str:
        return self.model.name

    # -- one fused step on decomposed inputs ------------------------------------------
    def _step(self, pa: tuple[np.ndarray, ...], pb: tuple[np.ndarray, ...],
              c: np.ndarray) -> np.ndarray:
        """``d = c + sum_j a_j b_j`` over the last axis (length <= fma), one step.

        An interleaved step is two fused sub-steps on the two halves of the products
        (``interleave_pattern``); with ``addend_last`` they start from zero and ``c`` is
        added last (see :mod:`thrifty.numerics.units`).
        """
        md = self.model
        c0 = np.zeros_like(c) if md.addend_last else c
        if md.interleave:
            first, second = _halves(pa[0].shape[-1], md.interleave_pattern)
            d = self._fused(tuple(x[..., first] for x in pa), tuple(x[..., first] for x in pb),
                            c0)
            d = self._fused(tuple(x[..., second] for x in pa),
                            tuple(x[..., second] for x in pb), d)
        else:
            d = self._fused(pa, pb, c0)
        if md.addend_last:
            # a non-finite running value ends the chain (as in reference_dot): keep it
            d = np.where(np.isfinite(c), _add_last(d, c, get_format(md.output),
                                                   md.subnormals_out), c)
        return d

    def _fused(self, pa: tuple[np.ndarray, ...], pb: tuple[np.ndarray, ...],
               c: np.ndarray) -> np.ndarray:
        md = self.model
        fin, facc, fout = (get_format(md.input), get_format(md.accumulator),
                           get_format(md.output))
        ma, ea, na = pa
        mb, eb, nb = pb
        shift = 2 * (fin.precision - 1)
        prod = _Terms(ma * mb, ea + eb - shift, ea + eb, na ^ nb)
        finite = np.isfinite(c)
        cm, ce, cn = decompose(np.where(finite, c, 0.0), facc, md.subnormals_in, "addend c")
        cterm = _Terms(cm[..., None], (ce - (facc.precision - 1))[..., None], ce[..., None],
                       cn[..., None])
        F = md.window_bits
        if md.c_in_alignment:
            cat = _Terms(*(np.concatenate([getattr(prod, f), getattr(cterm, f)], axis=-1)
                           for f in ("m", "x", "e", "neg")))
            S, L = _window(cat, F, md.shifted_out, md.zero_exp)
        else:
            pt = _as_terms(*_window(prod, F, md.shifted_out))
            two = _Terms(*(np.concatenate([getattr(pt, f), getattr(cterm, f)], axis=-1)
                           for f in ("m", "x", "e", "neg")))
            S, L = _window(two, F, md.late_shifted_out)
        if md.carry_bits is not None and F is not None:
            width = F + 2 + md.carry_bits + (1 if md.shifted_out == "sticky" else 0)
            mag = np.abs(S) % (np.ones_like(S) << width)
            S = np.where(S < 0, -mag, mag)
        if md.normalize_bits is not None:
            S = _truncate_bits(S, L, md.normalize_bits, fout.emin)
        d = round_scaled(S, L, fout, md.rounding, md.subnormals_out)
        if md.positive_zero:
            d = d + 0.0  # -0 + 0 = +0
        return np.where(finite, d, c)

    # -- public API ---------------------------------------------------------------------
    def dot(self, a: object, b: object, c: object = 0.0, *,
            engine: str = "auto") -> np.ndarray:
        """Batched dot products ``c + sum_i a_i b_i`` over the last axis, step by step.

        ``a`` and ``b`` have shape ``(..., K)`` with values of the input format; ``c`` is
        broadcast to ``(...)`` and holds values of the output format. Returns float64
        values of the output format. NaN/Inf inputs follow IEEE rules (any NaN or
        ``inf - inf`` gives NaN, otherwise the infinity). ``engine``: ``"numpy"`` (the
        vectorised path), ``"compiled"`` (numba loops; finite windows with ``c`` in the
        alignment) or ``"auto"`` (compiled where possible).
        """
        use_compiled = self._use_compiled(engine)
        A, B = checks.real_array(a, "a"), checks.real_array(b, "b")
        try:
            A, B = np.broadcast_arrays(A, B)
        except ValueError:
            raise ShapeError(f"dot needs a and b of broadcastable shapes (..., K); got "
                             f"{A.shape} and {B.shape}") from None
        if A.ndim == 0 or A.shape[-1] == 0:
            raise ShapeError(f"dot needs vectors of length K >= 1 on the last axis; got "
                             f"shape {A.shape}")
        C = checks.addend(c, A.shape[:-1], "addend c")
        fout = get_format(self.model.output)
        _check_values(C, fout, "addend c")
        if np.isfinite(A).all() and np.isfinite(B).all():
            # products of finite input-format values are finite in binary64: only a
            # NaN/Inf addend decides a result (itself, whatever its row's terms give)
            special, value = ~np.isfinite(C), C
        else:
            special, value = _specials(A, B, C)
            fine = np.isfinite(A) & np.isfinite(B) & ~special[..., None]
            A = np.where(fine, A, 0.0)
            B = np.where(fine, B, 0.0)
        fin = get_format(self.model.input)
        shape, K = C.shape, A.shape[-1]
        c0 = np.where(special, 0.0, C).reshape(-1)
        if use_compiled and lanes_eligible(self.model):
            flat = self._lane_dots(A.reshape(-1, K), B.reshape(-1, K), c0)
            return np.where(special, value, flat.reshape(shape))
        pa = decompose(A.reshape(-1, K), fin, self.model.subnormals_in, "a")
        pb = decompose(B.reshape(-1, K), fin, self.model.subnormals_in, "b")
        if use_compiled:
            ip, maxfin = kernel_params(self.model)
            flat = np.empty(c0.shape)
            compiled_kernels()[0](*(np.ascontiguousarray(x) for x in pa + pb), c0, flat, ip,
                                  maxfin)
        else:
            flat = self._chain(pa, pb, c0)
        return np.where(special, value, flat.reshape(shape))

    def _lane_dots(self, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        """Finite ``(N, K)`` operands and addends: the dot products, ``BJ`` side by side in
        the lane kernel (models of :func:`lanes_eligible`)."""
        fin, sub = get_format(self.model.input), self.model.subnormals_in
        fa, ea = _lane_split(a.T, fin, sub, "a", packed=True)
        fb, eb = _lane_split(b.T, fin, sub, "b", packed=True)
        ip, maxfin = kernel_params(self.model)
        out = np.empty(c.shape)
        lane_kernels()[0](fa, ea, fb, eb, np.ascontiguousarray(c), out, ip, maxfin)
        return out

    def _lane_gemm(self, A: np.ndarray, B: np.ndarray, C: np.ndarray,
                   progress: bool | None) -> np.ndarray:
        """``C + A @ B`` of finite operands in the lane kernel, blocks of rows and columns
        in parallel threads, behind a progress bar for a large product."""
        fin, sub = get_format(self.model.input), self.model.subnormals_in
        fa, ea = _lane_split(A, fin, sub, "A", packed=False)
        bfp, ebp = _lane_split(B, fin, sub, "B", packed=True)
        ip, maxfin = kernel_params(self.model)
        (m, k), n = A.shape, B.shape[1]
        C = np.ascontiguousarray(C, dtype=np.float64)
        out = np.empty((m, n))
        for i0, i1 in _row_chunks(m, n, k, progress):
            lane_kernels()[1](fa[i0:i1], ea[i0:i1], bfp, ebp, C[i0:i1], out[i0:i1], ip,
                              maxfin)
        return out

    def _use_compiled(self, engine: str) -> bool:
        engine = checks.engine_name(engine)
        if engine == "numpy":
            return False
        ok = compiled_eligible(self.model)
        if engine == "compiled" and not ok:
            raise FormatError(f"unit {self.name!r}: the compiled engine needs a finite "
                              "window with c in the alignment; use engine='numpy'")
        return ok

    def _chain(self, pa: tuple[np.ndarray, ...], pb: tuple[np.ndarray, ...],
               c: np.ndarray) -> np.ndarray:
        f = self.model.fma
        K = pa[0].shape[-1]
        steps = max(1, -(-K // f))
        pad = steps * f - K
        if pad:
            pa = tuple(np.concatenate([x, np.zeros(x.shape[:-1] + (pad,), x.dtype)], -1)
                       for x in pa)
            pb = tuple(np.concatenate([x, np.zeros(x.shape[:-1] + (pad,), x.dtype)], -1)
                       for x in pb)
        for s in range(steps):
            sl = slice(s * f, (s + 1) * f)
            c = self._step(tuple(x[..., sl] for x in pa), tuple(x[..., sl] for x in pb), c)
        return c

    def matmul(self, A: object, B: object, C: object = None, *,
               block_rows: int | None = None, engine: str = "auto",
               progress: bool | None = None) -> np.ndarray:
        """``D = C + A @ B`` as the unit computes it.

        Each ``D[i, j]`` is the recursive sequence of steps over ``k`` in chunks of
        ``fma`` (``c_0 = C[i, j]``), exactly as :meth:`dot` on row ``i`` of ``A`` and
        column ``j`` of ``B``. The numpy engine processes rows in blocks to bound memory;
        the compiled engine runs blocks of rows and columns in parallel threads. With
        ``progress`` (default: when stderr is a terminal and the product has more than
        ``2^31`` terms) the compiled engine shows a progress bar on stderr.
        """
        use_compiled = self._use_compiled(engine)
        rows = checks.block_rows(block_rows)
        if progress is not None and not isinstance(progress, bool):
            raise SpecError(f"progress must be True, False or None, got {progress!r}")
        A, B = checks.real_array(A, "A"), checks.real_array(B, "B")
        if A.ndim != 2 or B.ndim != 2 or A.shape[1] != B.shape[0]:
            raise ShapeError(f"matmul needs A (m, k) and B (k, n); got A {A.shape} and "
                             f"B {B.shape}")
        m, k = A.shape
        n = B.shape[1]
        C = np.zeros((m, n)) if C is None else checks.addend(C, (m, n), "addend C")
        if not (np.all(np.isfinite(A)) and np.all(np.isfinite(B))):
            return self.dot(A[:, None, :], np.broadcast_to(B.T[None], (m, n, k)), C,
                            engine=engine)
        fin = get_format(self.model.input)
        _check_values(C, get_format(self.model.output), "addend C")
        if use_compiled and lanes_eligible(self.model):
            return self._lane_gemm(A, B, C, progress)
        pa = decompose(A, fin, self.model.subnormals_in, "A")
        pb = decompose(B, fin, self.model.subnormals_in, "B")
        pbt = tuple(x.T for x in pb)
        if use_compiled:
            ip, maxfin = kernel_params(self.model)
            out = np.empty((m, n))
            C = np.ascontiguousarray(C, dtype=np.float64)
            _, tiled, by_rows = compiled_kernels()
            if tiled_eligible(self.model):
                sa, ea = _signed(pa), np.ascontiguousarray(pa[1])
                sbp, ebp = _packed_columns(_signed(pb), pb[1])
                for i0, i1 in _row_chunks(m, n, k, progress):
                    tiled(sa[i0:i1], ea[i0:i1], sbp, ebp, C[i0:i1], out[i0:i1], ip, maxfin)
            else:
                by_rows(*(np.ascontiguousarray(x) for x in pa + pbt), C, out, ip, maxfin)
            return out
        rows = rows or max(1, (1 << 21) // max(1, n * min(k, self.model.fma)))
        out = np.empty((m, n))
        for i0 in range(0, m, rows):
            i1 = min(m, i0 + rows)
            ba = tuple(np.broadcast_to(x[i0:i1, None, :], (i1 - i0, n, k)) for x in pa)
            bb = tuple(np.broadcast_to(x[None, :, :], (i1 - i0, n, k)) for x in pbt)
            out[i0:i1] = self._chain(ba, bb, np.array(C[i0:i1], dtype=np.float64))
        return out


def _signed(parts: tuple[np.ndarray, ...]) -> np.ndarray:
    """Signed significands ``-m`` / ``m`` of decomposed values, C-contiguous int64."""
    m, _, neg = parts
    return np.ascontiguousarray(np.where(neg, -m, m), dtype=np.int64)


#: Products above which a compiled GEMM shows progress (a few seconds of work).
_PROGRESS_TERMS = 1 << 31


def _row_chunks(m: int, n: int, k: int, progress: bool | None) -> Iterator[tuple[int, int]]:
    """Row ranges to run the compiled GEMM over: all at once, or in 32 chunks behind a
    progress bar on stderr (``progress=None``: a terminal and a large product)."""
    if progress is None:
        progress = m * n * k > _PROGRESS_TERMS and sys.stderr.isatty()
    if not progress or m < 2:
        yield 0, m
        return
    from rich.console import Console
    from rich.progress import Progress

    step = -(-m // (32 * 16)) * 16  # whole blocks of 16 rows
    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(f"unit GEMM {m}x{k}x{n}", total=m)
        for i0 in range(0, m, step):
            yield i0, min(m, i0 + step)
            bar.update(task, completed=min(m, i0 + step))


def _lane_split(x: np.ndarray, fmt: Format, subnormals: bool, what: str, *,
                packed: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(values, exponents)`` of finite operands for the lane kernels: binary64 values as
    the unit reads them (subnormals flushed when it flushes them), exponents ``_NO_TERM``
    for zeros; ``x`` (k, n) packed in column blocks ``(ceil(n / BJ), k, BJ)``, or as it is.

    Raises
    ------
    FormatError
        A value that is not in ``fmt`` (named by :func:`decompose`).
    """
    from thrifty.numerics.units.compiled import BJ

    x = np.asarray(x, dtype=np.float64)
    shape = (-(-x.shape[1] // BJ), x.shape[0], BJ) if packed else x.shape
    vals, exps = np.empty(shape), np.empty(shape, dtype=np.int64)
    split = lane_kernels()[3 if packed else 2]
    if split(x, fmt.precision, fmt.emin, float(fmt.max_finite), subnormals, vals, exps):
        decompose(x, fmt, subnormals, what)  # raises, naming the first such value
        raise FormatError(f"{what}: values outside {fmt.name}")  # pragma: no cover
    return vals, exps


def _packed_columns(sb: np.ndarray, eb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """B's signed significands and exponents (k, n) as ``(ceil(n / BJ), k, BJ)`` blocks of
    contiguous columns, zero-padded (zero terms never count), for the compiled GEMM."""
    from thrifty.numerics.units.compiled import BJ

    k, n = sb.shape
    nb = -(-n // BJ)
    out = []
    for x in (sb, eb):
        padded = np.zeros((k, nb * BJ), dtype=np.int64)
        padded[:, :n] = x
        out.append(np.ascontiguousarray(padded.reshape(k, nb, BJ).transpose(1, 0, 2)))
    return out[0], out[1]


def _specials(A: np.ndarray, B: np.ndarray, C: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(mask, value)``: where a NaN/Inf input decides the result, and that result."""
    with np.errstate(invalid="ignore"):
        prods = A * B
    anynan = np.isnan(prods).any(-1) | np.isnan(C)
    pinf = (prods == np.inf).any(-1) | (C == np.inf)
    ninf = (prods == -np.inf).any(-1) | (C == -np.inf)
    value = np.where(anynan | (pinf & ninf), np.nan, np.where(pinf, np.inf, -np.inf))
    return anynan | pinf | ninf, value

