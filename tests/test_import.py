"""``import thrifty`` loads no heavy dependency; each loads when its feature is used."""

from __future__ import annotations

import json
import subprocess
import sys

_HEAVY = ("scipy", "scipy.io", "scipy.sparse", "dask", "distributed", "torch", "rich",
          "matplotlib", "numba", "networkx", "click")


def _modules_after(code: str) -> set[str]:
    probe = f"import sys, json\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True, timeout=300).stdout
    return set(json.loads(out.splitlines()[-1]))


def test_import_thrifty_loads_no_heavy_dependency():
    loaded = _modules_after("import thrifty")
    assert not loaded & set(_HEAVY), sorted(loaded & set(_HEAVY))


def test_programs_and_task_graphs_need_neither_scipy_io_nor_dask_nor_torch():
    loaded = _modules_after("import thrifty as th\nth.program, th.TaskGraph, th.memory, "
                            "th.numerics")
    assert not loaded & {"scipy.io", "dask", "distributed", "torch", "matplotlib", "rich"}


def test_lazy_names_resolve_to_the_defining_modules():
    loaded = _modules_after("import thrifty as th\nassert th.load_matrix.__module__ == "
                            "'thrifty.front.matrices'\nassert th.__version__\n"
                            "assert 'program' in dir(th)\nfrom thrifty import *")
    assert "scipy.sparse" in loaded and "scipy.io" not in loaded
