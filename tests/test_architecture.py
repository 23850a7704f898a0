"""The architecture's rules that a linter of imports cannot see (docs/architecture.md).

The layer contract itself is checked by ``lint-imports`` (pyproject's
``[tool.importlinter]``), which ``make test`` runs before this suite; here, the rule that no
package reaches into another's private names, and the size limits of modules and functions.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "thrifty"


def _package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        out.append((".".join(parts), path))
    return out


def private_imports_across_packages() -> list[str]:
    """``from thrifty.a... import _x`` (or ``import thrifty.a._m``) written in package b != a."""
    bad = []
    for module, path in _modules():
        here = _package_of(module)
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 and \
                    node.module.startswith("thrifty."):
                there = _package_of(node.module)
                if there == here:
                    continue
                private_mod = any(p.startswith("_") for p in node.module.split(".")[1:])
                names = [a.name for a in node.names if a.name.startswith("_")]
                if private_mod or names:
                    bad.append(f"{path.relative_to(SRC.parent)}:{node.lineno}: from "
                               f"{node.module} import {', '.join(names) or '...'}")
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.startswith("thrifty.") and _package_of(a.name) != here and \
                            any(p.startswith("_") for p in a.name.split(".")[1:]):
                        bad.append(f"{path.relative_to(SRC.parent)}:{node.lineno}: import "
                                   f"{a.name}")
    return bad


def test_no_package_imports_another_packages_private_names() -> None:
    assert private_imports_across_packages() == []


def test_the_scan_sees_a_private_import(tmp_path: Path) -> None:
    # the checker itself: a private name imported across packages is found
    tree = ast.parse("from thrifty.sparse.tasks import _SpmmPanel\n")
    node = tree.body[0]
    assert isinstance(node, ast.ImportFrom) and node.module is not None
    assert _package_of(node.module) == "sparse" and node.names[0].name.startswith("_")
    assert _package_of("thrifty.runtime.emulate") == "runtime"


@pytest.mark.parametrize("module,path", _modules(), ids=[m for m, _ in _modules()])
def test_modules_stay_below_the_size_limit(module: str, path: Path) -> None:
    # docs/architecture.md: no module above ~600 lines (data tables excepted)
    lines = len(path.read_text().splitlines())
    assert lines <= 650, f"{module} has {lines} lines; split it by job"


#: Lines a function may have, from its ``def`` to its end, its docstring not counted.
FUNCTION_LINES = 80

#: Functions still above the limit, to be split by job; each entry leaves this list as soon
#: as its function is within the limit (a test below fails on a stale entry).
OVERSIZED: set[tuple[str, str]] = set()


def _function_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from ``def`` to the function's end, less those of its docstring."""
    lines = node.end_lineno - node.lineno + 1 if node.end_lineno is not None else 1
    first = node.body[0]
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and \
            isinstance(first.value.value, str) and first.end_lineno is not None:
        lines -= first.end_lineno - first.lineno + 1
    return lines


def oversized_functions(source: str) -> dict[str, int]:
    """Every function (methods and nested ones included) above the limit: name -> lines."""
    return {node.name: _function_lines(node) for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and _function_lines(node) > FUNCTION_LINES}


def _oversized_in_src() -> dict[tuple[str, str], int]:
    return {(path.relative_to(SRC).as_posix(), name): lines
            for _, path in _modules()
            for name, lines in oversized_functions(path.read_text()).items()}


def test_functions_stay_below_the_size_limit() -> None:
    # docs/architecture.md: no function above ~80 lines (data tables excepted)
    over = {f"{path}: {name} has {lines} lines"
            for (path, name), lines in _oversized_in_src().items()
            if (path, name) not in OVERSIZED}
    assert not over, f"split these functions by job: {sorted(over)}"


def test_the_oversized_list_names_only_functions_still_over_the_limit() -> None:
    stale = OVERSIZED - set(_oversized_in_src())
    assert not stale, f"within the limit now, remove from OVERSIZED: {sorted(stale)}"


def test_the_size_check_counts_code_not_docstrings() -> None:
    doc = "\n".join(["    '''Doc."] + ["    more"] * 100 + ["    '''"])
    long_doc = "def f():\n" + doc + "\n" + "    x = 1\n" * 70
    assert oversized_functions(long_doc) == {}
    long_code = "class C:\n    def g(self):\n" + "        x = 1\n" * FUNCTION_LINES
    assert oversized_functions(long_code) == {"g": FUNCTION_LINES + 1}
