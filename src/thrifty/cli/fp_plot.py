"""``thrifty fp bound --plot``: observed errors of random dot products against the bounds."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from thrifty.errors import FormatError

#: Largest dot-product length ``--plot`` samples (the bounds themselves have no limit).
MAX_PLOT_K = 1 << 16


def error_histogram(model: Any, k: int, bounds: list[Any], path: str, samples: int = 2000,
                    seed: int = 0) -> dict[str, float]:
    """Run random length-``k`` dot products on ``model``'s unit, and save the histogram of
    their errors relative to ``sum |a_i b_i|`` (log-spaced bins) with each bound as a line.

    The reference is :func:`math.fsum` of the products, exact in float64 for inputs of at
    most 26 significand bits (their products are exact), so the error measured is the
    unit's. Returns the largest observed relative error and the number of samples.
    """
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    from thrifty.cli.common import log_bins
    from thrifty.numerics import round as round_to
    from thrifty.numerics.units import unit

    if not 1 <= k <= MAX_PLOT_K:
        raise FormatError(f"--plot samples dot products of length k <= {MAX_PLOT_K}; "
                          f"k = {k} (the bounds alone have no limit: drop --plot)")
    u = unit(model)
    rng = np.random.default_rng(seed)
    n = max(20, min(samples, 2_000_000 // k))
    a = round_to(rng.standard_normal((n, k)), model.input)
    b = round_to(rng.standard_normal((n, k)), model.input)
    got = np.asarray(u.dot(a, b, 0.0), dtype=np.float64)
    prods = a * b
    ref = np.array([math.fsum(row) for row in prods])
    scale = np.abs(prods).sum(axis=1)
    rel = np.abs(got - ref) / np.where(scale > 0, scale, 1.0)
    fig, ax = plt.subplots(figsize=(7, 4), layout="constrained")
    positive = rel[rel > 0]
    if positive.size:
        ax.hist(positive, bins=log_bins(positive), color="tab:blue",
                label=f"{positive.size} of {n} dot products with an error")
    colors = ("tab:red", "tab:orange", "tab:green", "tab:purple")
    for bound, color in zip(bounds, colors):
        if math.isfinite(bound.relative) and bound.relative > 0:
            ax.axvline(bound.relative, color=color, ls="--",
                       label=f"{bound.kind} {bound.relative:.3g}")
    ax.set_xscale("log")
    ax.set_xlabel("|unit result - exact| / sum |a_i b_i|")
    ax.set_ylabel("dot products")
    ax.set_title(f"{model.name} {model.input} -> {model.output}, k = {k}")
    ax.legend(fontsize="small")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return {"max_observed_relative": float(rel.max()), "samples": float(n)}
