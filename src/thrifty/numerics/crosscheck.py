"""Cross-checking the unit presets against MMA-Sim, an independent simulator.

Policy
------
MMA-Sim (Peichen Xie et al., "MMA-Sim: bit-accurate reference model of tensor cores and
matrix cores", arXiv 2511.10909; PyPI ``mmasim``) models NVIDIA ``mma.sync``, ``wgmma``
and ``tcgen05.mma`` and AMD ``mfma`` instructions from its own hardware experiments. It
shares no code with thrifty's models (which follow Khattak and Mikaitis's MATLAB models
for ``mma.sync``), so equal bits on many cases is evidence for both, and every
difference points at a parameter one of the two sources states differently.

:data:`CONFIGS` pairs a thrifty preset (unit, input, output, instruction) with the MMA-Sim
operation of the same instruction; :func:`cases` generates random and adversarial dot
products (cancellation, exponent spread beyond the alignment window, subnormals, signed
zeros, Inf/NaN, overflow); :func:`compare` runs both and counts bit-equal results.
``torch`` and ``mmasim`` are imported on first use (``pip install thrifty[bench]``).

Example
-------
>>> cfg = CONFIGS["a100/bf16/fp32"]
>>> cfg.instruction, cfg.shape
('mma.sync', 'm16n8k16.f32.bf16.bf16.f32')
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from thrifty.errors import FormatError
from thrifty.numerics.formats import Format, get_format
from thrifty.numerics.rounding import round as fround

#: Case families of :func:`cases`, in order.
FAMILIES = ("random", "cancellation", "spread", "subnormal", "signed_zero", "special",
            "overflow", "underflow")


@dataclass(frozen=True, slots=True)
class Config:
    """One instruction modelled by both thrifty and MMA-Sim."""

    unit: str
    input: str
    output: str
    instruction: str
    sim: str  # MMA-Sim class: MMA, WGMMA, TCGen05MMA, MFMA
    sim_arch: str
    shape: str
    k: int  # products per MMA-Sim call (the instruction's k)
    note: str = field(default="")

    @property
    def key(self) -> str:
        return f"{self.unit}/{_short(self.input)}/{_short(self.output)}" + (
            "" if self.instruction in ("mma.sync", "mfma") else f"/{self.instruction}")


_SHORT = {"binary16": "fp16", "bfloat16": "bf16", "tensorfloat32": "tf32",
          "binary32": "fp32", "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2",
          "float8_e4m3fnuz": "e4m3fnuz", "float8_e5m2fnuz": "e5m2fnuz",
          "float6_e3m2fn": "e3m2", "float6_e2m3fn": "e2m3", "float4_e2m1fn": "e2m1"}
_PTX = {"binary16": "f16", "bfloat16": "bf16", "tensorfloat32": "tf32", "binary32": "f32",
        "float8_e4m3fn": "e4m3", "float8_e5m2": "e5m2", "float6_e3m2fn": "e3m2",
        "float6_e2m3fn": "e2m3", "float4_e2m1fn": "e2m1"}


def _short(name: str) -> str:
    return _SHORT.get(get_format(name).name, name)


def _configs() -> dict[str, Config]:
    out: list[Config] = []
    Row = tuple[str, str, int, tuple[str, ...]]
    nv: list[tuple[str, str, list[Row]]] = [
          ("v100", "Volta", [("binary16", "m8n8k4", 4, ("binary32", "binary16"))]),
          ("a100", "Ampere", [("binary16", "m16n8k16", 16, ("binary32", "binary16")),
                              ("bfloat16", "m16n8k16", 16, ("binary32",)),
                              ("tensorfloat32", "m16n8k8", 8, ("binary32",))]),
          ("ada", "Ada Lovelace", [("binary16", "m16n8k16", 16, ("binary32", "binary16")),
                                   ("bfloat16", "m16n8k16", 16, ("binary32",)),
                                   ("tensorfloat32", "m16n8k8", 8, ("binary32",)),
                                   ("float8_e4m3fn", "m16n8k32", 32, ("binary32", "binary16")),
                                   ("float8_e5m2", "m16n8k32", 32, ("binary32", "binary16"))]),
          ("h100", "Hopper", [("binary16", "m16n8k16", 16, ("binary32", "binary16")),
                              ("bfloat16", "m16n8k16", 16, ("binary32",)),
                              ("tensorfloat32", "m16n8k8", 8, ("binary32",))]),
          ("b200", "Blackwell", [("binary16", "m16n8k16", 16, ("binary32", "binary16")),
                                 ("bfloat16", "m16n8k16", 16, ("binary32",)),
                                 ("tensorfloat32", "m16n8k8", 8, ("binary32",))])]
    for unit, arch, rows in nv:
        for fin, shape, k, outs in rows:
            for fout in outs:
                p, o = _PTX[fin], _PTX[fout]
                out.append(Config(unit, fin, fout, "mma.sync", "MMA", arch,
                                  f"{shape}.{o}.{p}.{p}.{o}", k))
    for fin, k in (("tensorfloat32", 8), ("binary16", 16), ("bfloat16", 16),
                   ("float8_e4m3fn", 32), ("float8_e5m2", 32)):
        for fout in ("binary32", "binary16"):
            if fout == "binary16" and fin in ("tensorfloat32", "bfloat16"):
                continue
            p, o = _PTX[fin], _PTX[fout]
            out.append(Config("h100", fin, fout, "wgmma", "WGMMA", "Hopper",
                              f"m64n8k{k}.{o}.{p}.{p}", k))
    tc = [("tensorfloat32", 8, "tf32"), ("binary16", 16, "f16"), ("bfloat16", 16, "f16")] + [
        (f, 32, "f8f6f4") for f in ("float8_e4m3fn", "float8_e5m2", "float6_e3m2fn",
                                    "float6_e2m3fn", "float4_e2m1fn")]
    for fin, k, kind in tc:
        for fout in ("binary32", "binary16"):
            if fout == "binary16" and fin in ("tensorfloat32", "bfloat16"):
                continue
            p, o = _PTX[fin], _PTX[fout]
            out.append(Config("b200", fin, fout, "tcgen05.mma", "TCGen05MMA", "Blackwell",
                              f"m64n8k{k}.kind::{kind}.{o}.{p}.{p}", k))
    amd = [("cdna1", "CDNA1", "binary16", "f32_32x32x8f16", 8),
           ("cdna1", "CDNA1", "bfloat16", "f32_32x32x4bf16", 4),
           ("cdna2", "CDNA2", "binary16", "f32_32x32x8f16", 8),
           ("cdna2", "CDNA2", "bfloat16", "f32_32x32x8bf16_1k", 8),
           ("cdna3", "CDNA3", "binary16", "f32_32x32x8_f16", 8),
           ("cdna3", "CDNA3", "bfloat16", "f32_32x32x8_bf16", 8),
           ("cdna3", "CDNA3", "tensorfloat32", "f32_32x32x4_xf32", 4),
           ("cdna3", "CDNA3", "float8_e4m3fnuz", "f32_32x32x16_fp8_fp8", 16),
           ("cdna3", "CDNA3", "float8_e5m2fnuz", "f32_32x32x16_bf8_bf8", 16)]
    for unit, arch, fin, suffix, k in amd:
        out.append(Config(unit, fin, "binary32", "mfma", "MFMA", arch, suffix, k))
    return {c.key: c for c in out}


#: Every configuration both thrifty and MMA-Sim model, by key ``unit/input/output[/instr]``.
CONFIGS: dict[str, Config] = _configs()


# ---------------------------------------------------------------------------------------
# Cases
# ---------------------------------------------------------------------------------------

def _values(rng: np.random.Generator, fmt: Format, shape: tuple[int, ...],
            lo: int, hi: int) -> np.ndarray:
    """Random values of ``fmt`` with exponents uniform in ``[lo, hi]`` and random signs."""
    e = rng.integers(lo, hi + 1, size=shape)
    x = np.ldexp(rng.uniform(1.0, 2.0, size=shape), e) * rng.choice([-1.0, 1.0], size=shape)
    return fround(x, fmt, saturation="finite")


def cases(cfg: Config, n: int, K: int | None = None, seed: int = 0
          ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``n`` dot products ``(a, b, c, family)`` for ``cfg``: every family of :data:`FAMILIES`.

    ``a``, ``b`` have shape ``(n, K)`` (``K`` defaults to twice the instruction's ``k``,
    so the recursive chain of steps is exercised), ``c`` shape ``(n,)``; values are exact
    in the input/output formats. ``family`` holds each case's index into :data:`FAMILIES`.
    """
    rng = np.random.default_rng(seed)
    fin, fout = get_format(cfg.input), get_format(cfg.output)
    K = 2 * cfg.k if K is None else K
    fam = np.arange(n) % len(FAMILIES)
    emid = max(min(fin.emax, fout.emax // 2), 0)
    span = min(fin.emax - fin.emin, 12)
    a = _values(rng, fin, (n, K), -span // 2, span // 2)
    b = _values(rng, fin, (n, K), -span // 2, span // 2)
    c = _values(rng, fout, (n,), -span, span)
    c[rng.random(n) < 0.2] = 0.0
    # cancellation: pairs of equal and opposite products plus a small remainder
    m = fam == 1
    a[m, 1::2] = -a[m, 0::2][:, : a[m, 1::2].shape[1]]
    b[m, 1::2] = b[m, 0::2][:, : b[m, 1::2].shape[1]]
    half = K // 2
    a[m, half] = fround(a[m, half] * 2.0 ** -(fin.precision + 1), fin, saturation="finite")
    # spread: one large product, the rest far below the alignment window
    m = fam == 2
    big = _values(rng, fin, (int(m.sum()), K), max(fin.emin, 0), min(fin.emax, emid))
    small = _values(rng, fin, (int(m.sum()), K), fin.emin, fin.emin + 4)
    pick = rng.random((int(m.sum()), K)) < 0.15
    a[m] = np.where(pick, big, small)
    # subnormal inputs (and subnormal addends)
    m = fam == 3
    sub = fin.smallest_subnormal or 0.0
    nsub = rng.integers(1, 2 ** max(fin.precision - 1, 1), size=(int(m.sum()), K))
    a[m] = np.where(rng.random((int(m.sum()), K)) < 0.5, nsub * sub * rng.choice(
        [-1.0, 1.0], size=(int(m.sum()), K)), a[m])
    c[m] = np.where(rng.random(int(m.sum())) < 0.5,
                    (fout.smallest_subnormal or 0.0) * rng.integers(0, 64, int(m.sum())), c[m])
    # signed zeros: products that are zero or cancel exactly, addend +-0
    m = fam == 4
    a[m] = np.where(rng.random((int(m.sum()), K)) < 0.7, 0.0, a[m]) * rng.choice(
        [-1.0, 1.0], size=(int(m.sum()), K))
    c[m] = rng.choice([0.0, -0.0], size=int(m.sum()))
    # specials: Inf/NaN where the formats have them
    m = np.flatnonzero(fam == 5)
    specials = [np.nan] + ([np.inf, -np.inf] if fin.has_inf else [])
    if fin.has_nan or fin.has_inf:
        j = rng.integers(0, K, len(m))
        a[m, j] = rng.choice(specials, len(m))
    if fout.has_inf:
        c[m[::3]] = rng.choice([np.inf, -np.inf, np.nan], len(m[::3]))
    # overflow: products near the top of the range, same signs
    m = fam == 6
    top = _values(rng, fin, (int(m.sum()), K), fin.emax - 2, fin.emax)
    a[m] = np.abs(top)
    b[m] = np.abs(_values(rng, fin, (int(m.sum()), K), fin.emax - 2, fin.emax))
    if fout.emax < 2 * fin.emax - 2:
        c[m] = np.abs(_values(rng, fout, (int(m.sum()),), fout.emax - 1, fout.emax))
    # underflow: tiny products (some zero) around the output's subnormal range, c = 0
    m = fam == 7
    lo_e = max(fin.emin, (fout.emin - fout.precision - 8) // 2)
    a[m] = _values(rng, fin, (int(m.sum()), K), lo_e, lo_e + 6)
    b[m] = _values(rng, fin, (int(m.sum()), K), lo_e, lo_e + 6)
    a[m] = np.where(rng.random((int(m.sum()), K)) < 0.3, 0.0, a[m])
    c[m] = 0.0
    if not fin.has_negative_zero:
        a, b = a + 0.0, b + 0.0
    return a, b, c, fam


# ---------------------------------------------------------------------------------------
# MMA-Sim
# ---------------------------------------------------------------------------------------

def mmasim_available() -> str | None:
    """``None`` when MMA-Sim can run here, else the reason it cannot."""
    try:
        import mmasim  # noqa: F401

        import torch  # noqa: F401
    except ImportError as e:
        return f"mmasim is not installed ({e}); pip install 'thrifty[bench]'"
    return None


def _to_torch(x: np.ndarray, fmt: Format, sim_dtype: object) -> object:
    import torch
    if sim_dtype == torch.uint8:  # FP6/FP4: codes in the low bits MMA-Sim decodes
        from thrifty.numerics.rounding import encode
        E, M = fmt.exponent_bits, fmt.mantissa_bits
        codes = encode(x, fmt).astype(np.int64) << (5 - E - M)
        return torch.from_numpy(codes.astype(np.uint8))
    t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float64))
    if fmt.name == "tensorfloat32":
        return t.to(torch.float32)
    return t.to(sim_dtype)  # type: ignore[call-overload]  # exact: values in the format


def run_mmasim(cfg: Config, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """The results of MMA-Sim's model of ``cfg``'s instruction, as float64."""
    reason = mmasim_available()
    if reason is not None:
        raise FormatError(reason)
    from mmasim import amd, nv_ptx

    import torch
    cls = getattr(nv_ptx if cfg.sim != "MFMA" else amd, cfg.sim)
    op = cls(cfg.sim_arch, cfg.shape)
    fin, fout = get_format(cfg.input), get_format(cfg.output)
    with torch.no_grad():
        A = _to_torch(a, fin, op.a_type)
        B = _to_torch(b, fin, op.b_type)
        C = _to_torch(c, fout, op.c_type)
        D = op.dpa(A, B, C)
    return D.double().numpy()


def run_thrifty(cfg: Config, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """The results of thrifty's preset for ``cfg``."""
    from thrifty.numerics.units import unit
    u = unit(cfg.unit, input=cfg.input, output=cfg.output, instruction=cfg.instruction)
    return u.dot(a, b, c, engine="numpy")


@dataclass(frozen=True, slots=True)
class Agreement:
    """Bit-equal results of thrifty and MMA-Sim on one configuration."""

    config: Config
    cases: int
    equal: int
    per_family: dict[str, tuple[int, int]]
    first: tuple[int, ...]

    def to_json(self) -> dict[str, object]:
        return {"config": self.config.key, "instruction": self.config.instruction,
                "mmasim": f"{self.config.sim}({self.config.sim_arch!r}, "
                          f"{self.config.shape!r})",
                "cases": self.cases, "equal": self.equal,
                "per_family": {k: list(v) for k, v in self.per_family.items()},
                "first_differences": list(self.first)}


def same_bits(x: np.ndarray, y: np.ndarray, output: str) -> np.ndarray:
    """Elementwise: equal bits in the output format (every NaN equals every NaN)."""
    dt = np.float16 if get_format(output).name == "binary16" else np.float32
    xi = np.asarray(x, dtype=dt).view(np.uint16 if dt == np.float16 else np.uint32)
    yi = np.asarray(y, dtype=dt).view(np.uint16 if dt == np.float16 else np.uint32)
    return (xi == yi) | (np.isnan(x) & np.isnan(y))


def compare(cfg: Config, n: int, K: int | None = None, seed: int = 0) -> Agreement:
    """Run ``n`` cases of :func:`cases` through both models and count equal bits."""
    a, b, c, fam = cases(cfg, n, K, seed)
    ours = run_thrifty(cfg, a, b, c)
    theirs = run_mmasim(cfg, a, b, c)
    eq = same_bits(ours, theirs, cfg.output)
    per = {name: (int(eq[fam == i].sum()), int((fam == i).sum()))
           for i, name in enumerate(FAMILIES)}
    return Agreement(cfg, n, int(eq.sum()), per, tuple(int(i) for i in np.flatnonzero(~eq)[:20]))


# ---------------------------------------------------------------------------------------
# Block-scaled tcgen05.mma kinds (thrifty.numerics.units.scaled.mx_dot)
# ---------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class ScaledConfig:
    """One block-scaled ``tcgen05.mma`` kind both thrifty and MMA-Sim model."""

    kind: str
    input: str
    block: int
    scale: str  # "e8m0" or "e4m3" (UE4M3)

    @property
    def k(self) -> int:
        return 32 if self.kind == "mxf8f6f4" else 64

    @property
    def key(self) -> str:
        return f"b200/{self.kind}/{self.input}/block{self.block}/u{self.scale}/tcgen05.mma"

    @property
    def shape(self) -> str:
        s = "ue8m0" if self.scale == "e8m0" else "ue4m3"
        return (f"m128n8k{self.k}.kind::{self.kind}.block{self.block}.f32.{self.input}."
                f"{self.input}.{s}")


SCALED_CONFIGS: dict[str, ScaledConfig] = {c.key: c for c in [
    *(ScaledConfig("mxf8f6f4", f, 32, "e8m0") for f in ("e4m3", "e5m2", "e3m2", "e2m3",
                                                        "e2m1")),
    ScaledConfig("mxf4", "e2m1", 32, "e8m0"),
    ScaledConfig("mxf4nvf4", "e2m1", 32, "e8m0"),
    ScaledConfig("mxf4nvf4", "e2m1", 16, "e8m0"),
    ScaledConfig("mxf4nvf4", "e2m1", 16, "e4m3")]}


def scaled_cases(cfg: ScaledConfig, n: int, seed: int = 0
                 ) -> tuple[np.ndarray, ...]:
    """``(a, b, c, scale_a, scale_b, family)``: the families of :func:`cases` (one
    instruction step, ``K = k``) with random block scales (UE8M0 from 2^-20 to 2^20; UE4M3
    over its range, zero included)."""
    base = Config("b200", cfg.input, "binary32", "tcgen05.mma", "", "", "", cfg.k)
    a, b, c, fam = cases(base, n, K=cfg.k, seed=seed)
    rng = np.random.default_rng(seed + 1)
    nb = cfg.k // cfg.block
    if cfg.scale == "e8m0":
        sa = np.ldexp(1.0, rng.integers(-20, 21, (n, nb)))
        sb = np.ldexp(1.0, rng.integers(-20, 21, (n, nb)))
    else:
        fmt = get_format("e4m3")
        sa = np.abs(_values(rng, fmt, (n, nb), fmt.emin - 2, fmt.emax))
        sb = np.abs(_values(rng, fmt, (n, nb), fmt.emin - 2, fmt.emax))
    return a, b, c, sa, sb, fam


def run_mmasim_scaled(cfg: ScaledConfig, a: np.ndarray, b: np.ndarray, c: np.ndarray,
                      sa: np.ndarray, sb: np.ndarray) -> np.ndarray:
    """MMA-Sim's ``TCGen05MMABlockScale`` on the cases, as float64."""
    reason = mmasim_available()
    if reason is not None:
        raise FormatError(reason)
    from mmasim.nv_ptx import TCGen05MMABlockScale

    import torch
    from thrifty.numerics.rounding import encode
    op = TCGen05MMABlockScale("Blackwell", cfg.shape)
    fin = get_format(cfg.input)

    def elems(x: np.ndarray) -> object:
        if fin.bits == 8:
            return _to_torch(x, fin, op.a_type)
        codes = encode(x, fin).astype(np.int64)
        if cfg.kind != "mxf8f6f4":  # two E2M1 per byte, the first in the high nibble
            return torch.from_numpy(((codes[:, 0::2] << 4) | codes[:, 1::2]).astype(np.uint8))
        return _to_torch(x, fin, torch.uint8)

    st = torch.float8_e8m0fnu if cfg.scale == "e8m0" else torch.float8_e4m3fn
    with torch.no_grad():
        D = op.dpa(elems(a), elems(b), torch.from_numpy(c).float(),
                   torch.from_numpy(sa).float().to(st), torch.from_numpy(sb).float().to(st))
    return D.double().numpy()


def compare_scaled(cfg: ScaledConfig, n: int, seed: int = 0) -> Agreement:
    """:func:`compare` for a block-scaled kind: thrifty's ``mx_dot`` against MMA-Sim."""
    from thrifty.numerics.units.scaled import mx_dot
    a, b, c, sa, sb, fam = scaled_cases(cfg, n, seed)
    ours = mx_dot(a, b, c, sa, sb, cfg.input, kind=cfg.kind, block=cfg.block,
                  scale_format=cfg.scale)
    theirs = run_mmasim_scaled(cfg, a, b, c, sa, sb)
    eq = same_bits(ours, theirs, "binary32")
    per = {name: (int(eq[fam == i].sum()), int((fam == i).sum()))
           for i, name in enumerate(FAMILIES)}
    pseudo = Config("b200", cfg.input, "binary32", "tcgen05.mma", "TCGen05MMABlockScale",
                    "Blackwell", cfg.shape, cfg.k)
    return Agreement(pseudo, n, int(eq.sum()), per,
                     tuple(int(i) for i in np.flatnonzero(~eq)[:20]))
