"""``thrifty info``: versions, thread counts and the BLAS in use."""

from __future__ import annotations

import os
import platform
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import click

from thrifty.cli.common import emit_json, kv_table, table

PACKAGES = ("thrifty", "numpy", "scipy", "dask", "distributed", "ml_dtypes", "torch", "numba")


def collect() -> dict[str, Any]:
    """Everything ``thrifty info`` reports, as data."""
    from threadpoolctl import threadpool_info

    versions: dict[str, str | None] = {}
    for p in PACKAGES:
        try:
            versions[p] = version(p)
        except PackageNotFoundError:
            versions[p] = None
    pools = [{"api": p.get("internal_api"), "library": os.path.basename(p.get("filepath", "")),
              "version": p.get("version"), "threads": p.get("num_threads"),
              "architecture": p.get("architecture")} for p in threadpool_info()]
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "versions": versions,
        "threadpools": pools,
    }


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def info(as_json: bool) -> None:
    """Versions, thread counts and the BLAS in use."""
    data = collect()
    if as_json:
        emit_json(data)
        return
    kv_table("thrifty info", {"python": data["python"], "platform": data["platform"],
                              "cpus": f"{data['cpu_count']} (usable: {data['affinity']})",
                              **{k: v or "not installed" for k, v in data["versions"].items()}})
    table("thread pools (threadpoolctl)", ["api", "library", "version", "threads", "arch"],
          [(p["api"], p["library"], p["version"], p["threads"], p["architecture"])
           for p in data["threadpools"]])
