"""Numerics engine: bit-exact low-precision formats, block formats, matrix-unit models and
error bounds.

``Format``/``get_format``/``FORMATS`` describe formats as data (:mod:`.formats`);
``round``/``encode``/``decode`` convert bit-exactly (:mod:`.rounding`); the block
functions quantize MX, NVFP4 and P3109 blocks (:mod:`.blocks`); ``unit`` builds a
matrix-unit model (:mod:`.units`, imported on first use).

Example
-------
>>> import numpy as np
>>> from thrifty import numerics as nx
>>> nx.round(np.array([3.3]), "e4m3")
array([3.25])
"""

from __future__ import annotations

from typing import Any

from thrifty.numerics.blocks import (
    SCALE_RULES,
    BlockArray,
    block_quantize,
    mx_quantize,
    nvfp4_quantize,
    p3109_block_quantize,
)
from thrifty.numerics.formats import FORMATS, Format, format_names, get_format, p3109
from thrifty.numerics.rounding import (
    ENGINES,
    ROUNDINGS,
    SATURATIONS,
    decode,
    encode,
    native_dtype,
    round,
)

__all__ = [
    "ENGINES",
    "FORMATS",
    "ROUNDINGS",
    "SATURATIONS",
    "SCALE_RULES",
    "BlockArray",
    "Format",
    "block_quantize",
    "decode",
    "encode",
    "format_names",
    "get_format",
    "mx_quantize",
    "native_dtype",
    "nvfp4_quantize",
    "p3109",
    "p3109_block_quantize",
    "round",
    "unit",
]


def __getattr__(name: str) -> Any:
    if name == "unit":
        from thrifty.numerics.units import unit

        return unit
    raise AttributeError(f"module 'thrifty.numerics' has no attribute {name!r}")
