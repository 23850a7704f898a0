"""Block-scaled products of Blackwell ``tcgen05.mma``: the MX and NVFP4 kinds.

Policy (MMA-Sim, Xie et al., arXiv 2511.10909, ``mmasim`` 2.1 ``arithmetic/fdpa.py``):

* ``kind::mxf8f6f4`` (FP8/FP6/FP4 elements, one UE8M0 scale per 32 elements of ``a`` and
  of ``b``): each product ``a_i b_i 2^(s_a + s_b)`` is exact, and the 32 products and ``c``
  form one fused step of the ``tcgen05.mma`` preset (window ``F = 25``, zero terms at
  ``e_zero = -133``, truncation, result rounded toward zero to binary32). The scales only
  move the products' exponents.
* ``kind::mxf4`` and ``kind::mxf4nvf4`` (E2M1 elements, 64 per step; UE8M0 scales per 32
  or 16 elements, or UE4M3 scales per 16 for NVFP4): the products of each group of 16 are
  summed exactly, each group sum is multiplied by its scale pair and aligned by the scales'
  exponent (not by its own magnitude), then the 4 group terms and ``c`` are added in a
  window of ``F = 35`` bits (zero groups at ``e_zero = -139``), rounded toward zero.

NaN and infinite elements, scales and addends follow IEEE rules on the scaled products
(a NaN scale, ``inf * 0`` or ``inf - inf`` give NaN). NVFP4's per-tensor binary32 scale is applied
outside the instruction (on the result), so it is not part of this step.

Example
-------
>>> import numpy as np
>>> a = np.full(32, 1.5); b = np.full(32, 2.0)
>>> float(mx_dot(a, b, 0.0, np.array([2.0]), np.array([0.5]), "e4m3"))
96.0
"""

from __future__ import annotations

import numpy as np

from thrifty.errors import FormatError
from thrifty.numerics.formats import get_format
from thrifty.numerics.units.engine import _specials
from thrifty.numerics.units.exact import decompose, round_scaled
from thrifty.numerics.units.presets import unit

#: ``kind: (block sizes, element formats, scale formats)`` as tcgen05.mma offers them.
KINDS = {
    "mxf8f6f4": ((32,), ("float8_e4m3fn", "float8_e5m2", "float6_e3m2fn", "float6_e2m3fn",
                         "float4_e2m1fn"), ("float8_e8m0fnu",)),
    "mxf4": ((32,), ("float4_e2m1fn",), ("float8_e8m0fnu",)),
    "mxf4nvf4": ((32, 16), ("float4_e2m1fn",), ("float8_e8m0fnu", "float8_e4m3fn")),
}


def _scale_terms(s: np.ndarray, fmt: str) -> tuple[np.ndarray, np.ndarray, int]:
    """``(m, e, f)`` of scales: ``s = m 2^(e - f)``; ``e`` aligns (``floor(log2 s)``,
    clamped at the format's smallest exponent); ``f`` = 3 for UE4M3, 0 for UE8M0."""
    s = np.asarray(s, dtype=np.float64)
    finite = np.isfinite(s)
    if np.any(finite & (s < 0)):
        raise FormatError("block scales are unsigned (UE8M0/UE4M3); got a negative scale")
    if fmt == "float8_e8m0fnu":
        e = np.frexp(np.where(finite, s, 1.0))[1] - 1
        if np.any(finite & ((np.ldexp(1.0, e) != s) | (e < -127) | (e > 127))):
            raise FormatError("UE8M0 scales are powers of two 2^-127 .. 2^127")
        return np.ones_like(e), e, 0
    m, e, _ = decompose(np.where(finite, s, 0.0), get_format("float8_e4m3fn"), True,
                        "UE4M3 scale")
    return m, e, 3


def mx_dot(a: object, b: object, c: object, scale_a: object, scale_b: object,
           input: str, kind: str = "mxf8f6f4", block: int = 32,
           scale_format: str = "e8m0") -> np.ndarray:
    """One ``tcgen05.mma`` block-scaled step per row: ``c + sum_i a_i b_i sa_blk sb_blk``.

    ``a``, ``b``: shape ``(..., K)`` with values of ``input`` (``K`` = 32 for mxf8f6f4, 64
    for the FP4 kinds); ``scale_a``, ``scale_b``: ``(..., K // block)`` scale values
    (``scale_format`` e8m0, or e4m3 read as UE4M3 for NVFP4); ``c``: ``(...)`` binary32.
    Returns binary32 values as float64.

    Raises
    ------
    FormatError
        For a kind, block size, element or scale format the instruction does not offer,
        wrong shapes, or values outside their formats.
    """
    if kind not in KINDS:
        raise FormatError(f"kind {kind!r}; valid: {', '.join(KINDS)}")
    blocks, elems, scales = KINDS[kind]
    fin, sfmt = get_format(input).name, get_format(scale_format).name
    if fin not in elems or sfmt not in scales or block not in blocks:
        raise FormatError(f"tcgen05.mma kind::{kind} takes {', '.join(elems)} elements, "
                          f"{', '.join(scales)} scales, blocks of {blocks}; got {fin}, {sfmt}, "
                          f"{block}")
    if sfmt == "float8_e4m3fn" and block != 16:
        raise FormatError("UE4M3 scales (NVFP4) come in blocks of 16")
    K = 32 if kind == "mxf8f6f4" else 64
    A, B = np.broadcast_arrays(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
    if A.ndim == 0 or A.shape[-1] != K:
        raise FormatError(f"kind::{kind} multiplies {K} elements per step; got shape {A.shape}")
    lead = A.shape[:-1]
    SA = np.broadcast_to(np.asarray(scale_a, dtype=np.float64), lead + (K // block,))
    SB = np.broadcast_to(np.asarray(scale_b, dtype=np.float64), lead + (K // block,))
    C = np.broadcast_to(np.asarray(c, dtype=np.float64), lead).copy()
    with np.errstate(invalid="ignore", over="ignore"):  # IEEE specials of the scaled products
        P = A * B * np.repeat(SA, block, -1) * np.repeat(SB, block, -1)
    special, value = _specials(P, np.ones_like(P), C)
    A = np.where(special[..., None], 0.0, A)
    B = np.where(special[..., None], 0.0, B)
    SA = np.where(special[..., None], 1.0, SA)
    SB = np.where(special[..., None], 1.0, SB)
    C = np.where(special, 0.0, C)
    ma, ea, na = decompose(A, get_format(fin), True, "a")
    mb, eb, nb = decompose(B, get_format(fin), True, "b")
    msa, esa, fs = _scale_terms(SA, sfmt)
    msb, esb, _ = _scale_terms(SB, sfmt)
    if kind == "mxf8f6f4":
        out = _st_step(fin, (ma, ea, na), (mb, eb, nb), esa + esb, C)
    else:
        out = _gst_step(fin, block, (ma, ea, na), (mb, eb, nb), (msa * msb, esa + esb, 2 * fs),
                        C)
    return np.where(special, value, out)


def _st_step(fin: str, pa: tuple[np.ndarray, ...], pb: tuple[np.ndarray, ...],
             es: np.ndarray, C: np.ndarray) -> np.ndarray:
    """kind::mxf8f6f4: the tcgen05.mma step with the scale exponents added to the products'."""
    u = unit("b200", fin, "fp32", instruction="tcgen05.mma")
    shift = np.repeat(es, 32 // es.shape[-1], axis=-1)
    return u._step((pa[0], pa[1] + shift, pa[2]), pb, C)


#: MMA-Sim's window and zero exponent of the FP4 kinds (``MMA_GST_FDPA(G=16, F=35, ...)``).
_GST_F, _GST_ZERO = 35, -139


def _gst_step(fin: str, block: int, pa: tuple[np.ndarray, ...], pb: tuple[np.ndarray, ...],
              scale: tuple[np.ndarray, np.ndarray, int], C: np.ndarray) -> np.ndarray:
    """kind::mxf4 / mxf4nvf4: exact sums of 16 products, scaled, in a 35-bit window."""
    fmt = get_format(fin)
    (ma, ea, na), (mb, eb, nb) = pa, pb
    sm, se, sf = scale
    lo = 2 * fmt.emin - 2 * (fmt.precision - 1)  # every product is a multiple of 2^lo
    x = (ea + eb - 2 * (fmt.precision - 1) - lo).astype(object)
    prod = np.where(na ^ nb, -1, 1).astype(object) * (ma * mb).astype(object) * (2 ** x)
    shape = prod.shape[:-1] + (-1, 16)
    G = prod.reshape(shape).sum(-1)
    live = (ma * mb != 0).reshape(shape).any(-1)
    per = block // 16  # scale blocks of 32 cover two groups
    sm = np.repeat(sm, per, axis=-1)
    se = np.repeat(se, per, axis=-1)
    live &= sm != 0
    e = np.where(live, se, _GST_ZERO)
    cm, ce, cn = decompose(C, get_format("binary32"), True, "addend c")
    ec = np.where(cm == 0, _GST_ZERO, ce)
    E = np.maximum(e.max(-1), ec)
    L = E - _GST_F
    # group g: |G| sm 2^(lo + se - sf), truncated toward zero at 2^L
    terms = np.abs(G) * sm.astype(object)
    sh = (lo + se - sf - L[..., None]).astype(object)
    T = np.where(sh >= 0, terms * 2 ** np.maximum(sh, 0), terms // 2 ** np.maximum(-sh, 0))
    S = np.where(G < 0, -T, T).sum(-1)
    shc = (ce - 23 - L).astype(object)
    cm = cm.astype(object)
    Tc = np.where(shc >= 0, cm * 2 ** np.maximum(shc, 0), cm // 2 ** np.maximum(-shc, 0))
    S = S + np.where(cn, -Tc, Tc)
    return round_scaled(S, L.astype(np.int64), get_format("binary32"), "toward_zero") + 0.0
