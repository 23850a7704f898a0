"""PyTorch in and out: training any ``nn.Module`` within an activation-memory budget.

* :func:`backend` returns a ``torch.compile`` backend: AOTAutograd's joint forward/backward
  graph is planned by thrifty at op level (what to save, what to recompute, what to offload
  to host memory or to disk: :mod:`thrifty.torch.offload`), and PyTorch runs the forward
  and backward graphs the plan gives (:mod:`thrifty.torch.compile`);
* :func:`from_torch` builds the op-level TaskGraph of a model's forward and backward
  (:mod:`thrifty.torch.importer`); :func:`joint_taskgraph` the activation-memory TaskGraph
  of an AOTAutograd joint graph (:mod:`thrifty.torch.joint`);
* :func:`block_graph` and :func:`train_step` plan and run an ``nn.Sequential`` block by
  block, recomputing and offloading through ``saved_tensors_hooks``
  (:mod:`thrifty.torch.blocks`).
"""

from __future__ import annotations

from thrifty.torch.blocks import StepResult, block_graph, reference_step, train_step
from thrifty.torch.compile import PARTITIONERS, Backend, GraphReport, backend, eager_saved_bytes
from thrifty.torch.importer import from_torch
from thrifty.torch.joint import JointGraph, joint_taskgraph

__all__ = ["PARTITIONERS", "Backend", "GraphReport", "JointGraph", "StepResult", "backend",
           "block_graph", "eager_saved_bytes", "from_torch", "joint_taskgraph",
           "reference_step", "train_step"]
