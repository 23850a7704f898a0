"""Benchmark of the sparse engine against scipy, dense numpy, pydata sparse and graphblas.

Usage: ``python benchmarks/sparse_bench.py [--quick] [--repeat N] [--kernel K ...]``.
Prints a rich table and writes ``benchmarks/results/sparse_bench.json``.
"""

from __future__ import annotations

import sys

from thrifty.cli.sparse import bench

if __name__ == "__main__":
    sys.exit(bench.main(standalone_mode=True))
