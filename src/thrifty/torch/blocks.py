"""Real PyTorch training that follows a plan: recompute and offload of saved activations.

A sequential model (``nn.Sequential`` of blocks, the loss as a last block) becomes a
*block chain* TaskGraph (:func:`block_graph`), measured on the real model:

* ``F{i}`` reads ``a{i-1}`` (the block's input; ``x`` for the first) and writes ``a{i}``
  (its output) and ``s{i}`` (the tensors autograd saves inside block ``i``, excluding
  parameters and the block's input, deduplicated by storage; a saved tensor that is the
  block's output is counted in both ``a{i}`` and ``s{i}``);
* ``B{i}`` reads ``a{i-1}``, ``a{i}``, ``s{i}`` and the gradient ``d{i+1}`` and writes
  ``d{i}``. Gradients are not activations: their buffers have size 0, so the graph's
  memory is exactly the saved-activation bytes the executor holds.

:func:`train_step` then runs one training step step-by-step as the plan says. Each block
runs on a detached input (``requires_grad``) under ``torch.autograd.graph.
saved_tensors_hooks``: the pack hook puts every saved activation in a per-block store
and hands autograd a handle; the unpack hook returns it from the store. ``free s{i}`` drops
the store (recompute: a later ``compute F{i}`` re-runs the block with the RNG state of its
first run and its module buffers, e.g. batch-norm statistics, restored, as
``torch.utils.checkpoint`` does); ``offload``/``prefetch`` move the store to host memory and
back, one copy per storage, so that saved tensors sharing a storage share it again after
the round trip; ``compute B{i}`` back-propagates through block ``i`` alone
(``torch.autograd.backward(out_i, d_i)``), leaving the gradient of its input for ``B{i-1}``.

The bytes resident (unique storages among the block inputs/outputs the executor holds and
the stores on the device) are counted after every step and inside every pack hook; their
maximum is the measured peak, which is never above the plan's predicted peak (the
prediction counts aliases twice; the measurement once). If the plan frees a block's input
while that block's graph is still needed, the executor re-runs the block before its
backward and reports it in ``extra_recomputes`` (the memory stays within the prediction;
the time does not).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from thrifty.errors import GraphError, PlanError
from thrifty.graph.taskgraph import Buffer, Task, TaskGraph
from thrifty.memory.model import Plan

__all__ = ["StepResult", "block_graph", "reference_step", "train_step"]


@dataclass(frozen=True, slots=True)
class StepResult:
    """One training step: the loss, the gradients by parameter name, the measured peak."""

    loss: float
    grads: dict[str, Any] = field(compare=False)
    peak: int
    extra_recomputes: int
    seconds: float


def _blocks(model: Any, loss_fn: Callable | None) -> list[Any]:
    import torch

    if not isinstance(model, torch.nn.Sequential):
        raise GraphError(f"a block chain needs a torch.nn.Sequential, got "
                         f"{type(model).__name__}")
    blocks = list(model.children())
    if loss_fn is not None:
        blocks.append(_Loss(loss_fn))
    if not blocks:
        raise GraphError("the model has no blocks")
    return blocks


def _Loss(fn: Callable) -> Any:  # noqa: N802 - a module factory
    import torch

    class Loss(torch.nn.Module):
        def forward(self, y: Any) -> Any:
            return fn(y)

    return Loss()


def _storage(t: Any) -> tuple[int, int]:
    s = t.untyped_storage()
    return s.data_ptr(), s.nbytes()


def _move(slots: list[Any], device: Any) -> list[Any]:
    """Copies of ``slots`` on ``device`` that share storage exactly as the originals do.

    Copying tensor by tensor would give two saved tensors of one storage (a ReLU's output
    saved by the ReLU and by the next convolution) two storages, and a store brought back
    from host memory would hold more bytes than it had when it was offloaded.
    """
    import torch

    copies: dict[int, Any] = {}
    out = []
    for t in slots:
        st = t.untyped_storage()
        if st.data_ptr() not in copies:
            flat = torch.empty(0, dtype=torch.uint8, device=t.device).set_(st)
            copies[st.data_ptr()] = flat.to(device, copy=True).untyped_storage()
        new = torch.empty(0, dtype=t.dtype, device=device)
        out.append(new.set_(copies[st.data_ptr()], t.storage_offset(), t.shape, t.stride()))
    return out


def block_graph(model: Any, x: Any, loss_fn: Callable | None = None,
                repeats: int = 3) -> TaskGraph:
    """The block-chain TaskGraph of ``model`` on input ``x``, measured (sizes and times).

    Example
    -------
    >>> import torch
    >>> m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU())
    >>> g = block_graph(m, torch.randn(2, 4), loss_fn=lambda y: y.sum())
    >>> sorted(g.tasks)
    ['B0', 'B1', 'B2', 'F0', 'F1', 'F2']
    """
    import torch

    blocks = _blocks(model, loss_fn)
    params = {_storage(p)[0] for p in model.parameters()}
    out_bytes, saved_bytes, ft, bt = [], [], [], []
    xin = x.detach()
    for blk in blocks:
        fwd_runs, bwd_runs, sizes = [], [], 0
        for _ in range(repeats):
            leaf = xin.detach().requires_grad_(True)
            seen: dict[int, int] = {}
            inp = _storage(leaf)[0]

            def pack(t: Any, seen: dict = seen, inp: int = inp) -> Any:
                ptr, nb = _storage(t)
                if ptr not in params and ptr != inp:
                    seen[ptr] = nb
                return t

            saved = _saved_state(blk)
            t0 = time.perf_counter()
            with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                out = blk(leaf)
            t1 = time.perf_counter()
            grad = torch.ones_like(out)
            torch.autograd.backward(out, grad)
            t2 = time.perf_counter()
            _restore_state(blk, saved)
            fwd_runs.append(t1 - t0)
            bwd_runs.append(t2 - t1)
            sizes = sum(seen.values())
        blk.zero_grad(set_to_none=True)
        out_bytes.append(int(out.numel() * out.element_size()))
        saved_bytes.append(int(sizes))
        ft.append(sorted(fwd_runs)[len(fwd_runs) // 2])
        bt.append(sorted(bwd_runs)[len(bwd_runs) // 2])
        xin = out.detach()
    n = len(blocks)
    tasks, bufs = [], [Buffer("x", int(x.numel() * x.element_size()), None)]

    def a(i: int) -> str:
        return "x" if i < 0 else f"a{i}"

    for i in range(n):
        tasks.append(Task(f"F{i}", reads=(a(i - 1),), writes=(a(i), f"s{i}"), time=ft[i],
                          attrs={"backward": False}))
        bufs += [Buffer(a(i), out_bytes[i], f"F{i}"), Buffer(f"s{i}", saved_bytes[i], f"F{i}")]
    for i in range(n - 1, -1, -1):
        reads = (a(i - 1), a(i), f"s{i}") + ((f"d{i+1}",) if i < n - 1 else ())
        tasks.append(Task(f"B{i}", reads=reads, writes=(f"d{i}",), time=bt[i],
                          attrs={"backward": True}))
        bufs.append(Buffer(f"d{i}", 0, f"B{i}"))
    return TaskGraph(tasks, bufs, results={"d0"}, name=f"blocks({type(model).__name__})")


def _saved_state(module: Any) -> list[tuple[Any, Any]]:
    return [(b, b.detach().clone()) for b in module.buffers()]


def _restore_state(module: Any, saved: list[tuple[Any, Any]]) -> None:
    import torch

    with torch.no_grad():
        for b, v in saved:
            b.copy_(v)


def reference_step(model: Any, x: Any, loss_fn: Callable) -> StepResult:
    """One ordinary training step (forward, loss, backward), the gradients to compare with."""
    t0 = time.perf_counter()
    model.zero_grad(set_to_none=True)
    loss = loss_fn(model(x))
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()
             if p.grad is not None}
    return StepResult(float(loss.detach()), grads, 0, 0, time.perf_counter() - t0)


def train_step(model: Any, x: Any, loss_fn: Callable, plan: Plan,
               g: TaskGraph | None = None) -> StepResult:
    """Run one training step of ``model`` following ``plan`` (made on :func:`block_graph`).

    Returns the loss, the gradients, the measured peak of resident activation bytes and
    the count of recomputations the plan did not ask for (see the module docstring).

    Raises
    ------
    PlanError
        When a step does not fit the block chain (unknown ids, a block's backward before
        its forward, a store used while offloaded, an offloaded block input or output).
    """
    return _Executor(model, x, loss_fn, g).run(plan)


class _Executor:
    def __init__(self, model: Any, x: Any, loss_fn: Callable, g: TaskGraph | None) -> None:
        self.model = model
        self.blocks = _blocks(model, loss_fn)
        self.n = len(self.blocks)
        self.x = x.detach()
        self.params = {_storage(p)[0] for p in model.parameters()}
        self.acts: dict[int, Any] = {-1: self.x}
        self.outs: dict[int, Any] = {}
        self.leaves: dict[int, Any] = {}
        self.store: dict[int, list[Any]] = {}
        self.host: dict[int, list[Any]] = {}
        self.grad_in: dict[int, Any] = {}
        self.rng: dict[int, Any] = {}
        self.state: dict[int, list] = {}
        self.after: dict[int, list] = {}
        self.loss: float | None = None
        self.peak = 0
        self.extra = 0
        self.device = x.device

    # -- accounting ------------------------------------------------------------------------
    def resident(self, pending: Sequence[Any] = ()) -> int:
        seen: dict[int, int] = {}
        tensors = list(self.acts.values()) + list(pending)
        for slots in self.store.values():
            tensors += [t for t in slots if t is not None]
        for t in tensors:
            if t is not None and t.device == self.device:
                ptr, nb = _storage(t)
                if ptr not in self.params:
                    seen[ptr] = nb
        return sum(seen.values())

    def note(self, pending: Sequence[Any] = ()) -> None:
        self.peak = max(self.peak, self.resident(pending))

    # -- steps ------------------------------------------------------------------------------
    def run(self, plan: Plan) -> StepResult:
        t0 = time.perf_counter()
        self.model.zero_grad(set_to_none=True)
        self.note()
        for i, st in enumerate(plan.steps):
            try:
                self.step(st.op, st.target)
            except PlanError as e:
                raise PlanError(f"step {i} ({st.op} {st.target!r}): {e}") from None
            self.note()
        if self.loss is None or 0 not in self.grad_in:
            raise PlanError("the plan did not complete the training step (no B0)")
        grads = {n: p.grad.detach().clone() for n, p in self.model.named_parameters()
                 if p.grad is not None}
        return StepResult(self.loss, grads, self.peak, self.extra, time.perf_counter() - t0)

    def _parse(self, target: Hashable) -> tuple[str, int]:
        s = str(target)
        if s == "x":
            return "x", -1
        try:
            kind, i = s[0], int(s[1:])
        except (ValueError, IndexError):
            raise PlanError(f"unknown id {target!r} for a block chain") from None
        if kind not in "FBasd" or not 0 <= i < self.n:
            raise PlanError(f"unknown id {target!r} for a block chain of {self.n} blocks")
        return kind, i

    def step(self, op: str, target: Hashable) -> None:
        kind, i = self._parse(target)
        if op == "compute":
            if kind == "F":
                self.forward(i)
            elif kind == "B":
                self.backward(i)
            else:
                raise PlanError("only F{i} and B{i} are tasks")
        elif kind in ("a", "x"):
            if op != "free":
                raise PlanError("block inputs and outputs may be freed, not offloaded "
                                "(plan with no_offload=the a{i} buffers)")
            self.acts.pop(i, None)
            self.invalidate(i + 1)  # block i+1's graph holds its input
            self.invalidate(i)      # and block i's graph holds its output
        elif kind == "s":
            if op == "free":
                self.store.pop(i, None)
                self.host.pop(i, None)
            elif op == "offload":
                self.host[i] = _move(self.store.pop(i), "cpu")
            else:
                self.store[i] = _move(self.host.pop(i), self.device)
        elif kind == "d":
            if op == "free":
                self.grad_in.pop(i, None)
        else:
            raise PlanError(f"cannot {op} {target!r}")

    def invalidate(self, i: int) -> None:
        if 0 <= i < self.n:
            self.outs.pop(i, None)
            self.leaves.pop(i, None)

    def forward(self, i: int) -> None:
        import torch

        if i - 1 not in self.acts:
            raise PlanError(f"F{i} needs its input, which is not resident")
        blk = self.blocks[i]
        first = i not in self.rng
        if first:
            self.rng[i] = torch.get_rng_state()
            self.state[i] = _saved_state(blk)
        self.store.pop(i, None)
        self.host.pop(i, None)
        leaf = self.acts[i - 1].detach().requires_grad_(True)
        inp = _storage(leaf)[0]
        slots: list[Any] = []

        def pack(t: Any) -> Any:
            ptr = _storage(t)[0]
            if ptr in self.params:
                return ("keep", t)
            if ptr == inp:
                return ("input", i, tuple(t.shape), t.stride(), t.storage_offset())
            slots.append(t)
            self.note(slots)
            return ("slot", i, len(slots) - 1)

        def unpack(h: Any) -> Any:
            if h[0] == "keep":
                return h[1]
            if h[0] == "input":
                if h[1] - 1 not in self.acts:
                    raise PlanError(f"B{h[1]} needs the block's input, which is not resident")
                return self.acts[h[1] - 1].as_strided(h[2], h[3], h[4])
            slots_now = self.store.get(h[1])
            if slots_now is None:
                raise PlanError(f"B{h[1]} needs s{h[1]}, which is not resident")
            return slots_now[h[2]]

        with torch.random.fork_rng(devices=[]):
            torch.set_rng_state(self.rng[i])
            if not first:
                _restore_state(blk, self.state[i])
            with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, unpack):
                out = blk(leaf)
            end_state = torch.get_rng_state()
        if first:
            torch.set_rng_state(end_state)
            self.after[i] = _saved_state(blk)
        else:
            _restore_state(blk, self.after[i])
        self.store[i] = slots
        self.outs[i] = out
        self.leaves[i] = leaf
        self.acts[i] = out.detach()

    def backward(self, i: int) -> None:
        import torch

        if i not in self.outs:
            # Its graph was dropped with a freed input or output: re-run the block.
            self.extra += 1
            self.forward(i)
        out = self.outs.pop(i)
        leaf = self.leaves.pop(i)
        if i == self.n - 1:
            self.loss = float(out.detach())
            torch.autograd.backward(out)
        else:
            if i + 1 not in self.grad_in:
                raise PlanError(f"B{i} needs the gradient d{i+1}, which B{i+1} has not made")
            torch.autograd.backward(out, self.grad_in.pop(i + 1))
        if i > 0:
            self.grad_in[i] = leaf.grad
        else:
            self.grad_in[0] = leaf.grad
