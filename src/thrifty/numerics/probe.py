"""Probing a matrix unit's arithmetic with feature tests, and inferring its model.

Policy
------
The tests follow Fasi, Higham, Mikaitis and Pranesh ("Numerical behavior of NVIDIA tensor
cores", PeerJ Comput. Sci. 2021) and Khattak and Mikaitis ("Generalized methodology for
determining numerical features of hardware floating-point matrix multipliers", HPEC 2025;
"Accurate models of NVIDIA tensor cores", ACM TACO 2025): each feature is exposed by a
dot product whose result differs between the candidate behaviours, built from powers of
two so that nothing but the feature can change it. A *black box* is any function
``f(a, b, c) -> d`` over a batch: ``a``, ``b`` of shape ``(N, K)`` with input-format
values, ``c`` of shape ``(N,)`` with output-format values, returning ``(N,)`` values.

* :func:`emulated_black_box` hides a :class:`~thrifty.numerics.units.Unit` (tests recover
  every preset's parameters from it);
* :func:`torch_black_box` runs the dot products on a CUDA GPU through PyTorch, one case per
  16x16 tile (``torch.baddbmm(..., out_dtype=)`` for fp16/bf16/tf32, ``torch._scaled_mm`` for
  FP8). Note that cuBLAS may add ``c`` in its epilogue rather than in the MMA, which the
  ``c``-placement tests then report.

The inferred parameters (:class:`ProbeResult`) use :class:`UnitModel`'s names; the feature
tests are, in order: group structure (windowed / exact, interleaved), alignment window
``F``, treatment of shifted-out bits, group size, ``c`` placement, normaliser width, final
rounding, subnormal inputs and outputs, exact products and carries.

Example
-------
>>> from thrifty.numerics.units import unit
>>> r = probe(emulated_black_box(unit("a100", input="bf16", output="fp32")), "bf16", "fp32")
>>> r.params["fma"], r.params["align_bits"], r.params["rounding"]
(8, 1, 'toward_zero')
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from thrifty.errors import FormatError
from thrifty.numerics.formats import Format, get_format
from thrifty.numerics.units import Unit, UnitModel

BlackBox = Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]

#: Products per probe case (finds group sizes up to K - 1).
PROBE_K = 64


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """Parameters inferred from a black box, with the evidence behind each."""

    input: str
    output: str
    params: dict[str, object]
    evidence: dict[str, str] = field(default_factory=dict)
    calls: int = 0
    unobservable: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {"input": self.input, "output": self.output, "params": self.params,
                "evidence": self.evidence, "calls": self.calls,
                "unobservable": list(self.unobservable)}


class _Prober:
    """Builds probe cases from exact powers of two and runs them in batches."""

    def __init__(self, f: BlackBox, fin: Format, fout: Format, k: int) -> None:
        self.f, self.fin, self.fout, self.k = f, fin, fout, k
        self.calls = 0
        hi = min(2 * fin.emax - 2, fout.emax - 1, 30)
        # the smallest product used: a product of normals that the output holds as a normal
        lo = max(2 * fin.emin, fout.emin)
        self.B = hi
        self.lo = lo
        self.span = hi - lo

    def pair(self, e: int) -> tuple[float, float]:
        """Normal input values ``a, b`` with ``a * b = 2**e``."""
        fin = self.fin
        ea = min(max(math.ceil(e / 2), fin.emin), fin.emax)
        eb = e - ea
        if not fin.emin <= eb <= fin.emax:
            raise FormatError(f"2**{e} is not a product of two normal {fin.name} values")
        return math.ldexp(1.0, ea), math.ldexp(1.0, eb)

    def case(self, terms: dict[int, tuple[float, int]], c: float = 0.0,
             k: int | None = None) -> tuple:
        """A case: ``terms[pos] = (sign * significand, exponent)`` of each product.

        ``k`` shortens the case to one step once the group size is known: later steps
        would realign (and may truncate) a multi-bit result.
        """
        a = np.zeros(k or self.k)
        b = np.zeros(k or self.k)
        for pos, (sig, e) in terms.items():
            x, y = self.pair(e)
            a[pos], b[pos] = sig * x, y
        return a, b, c

    def run(self, cases: list[tuple]) -> np.ndarray:
        self.calls += 1
        a = np.stack([c[0] for c in cases])
        b = np.stack([c[1] for c in cases])
        c = np.array([c[2] for c in cases], dtype=np.float64)
        return np.asarray(self.f(a, b, c), dtype=np.float64).reshape(-1)


def probe(f: BlackBox, input: str, output: str, *, k: int = PROBE_K) -> ProbeResult:
    """Run the feature tests against ``f`` and infer its :class:`UnitModel` parameters.

    Raises
    ------
    FormatError
        When the formats leave too little exponent range for the tests.
    """
    fin, fout = get_format(input), get_format(output)
    P = _Prober(f, fin, fout, k)
    if P.span < 12:
        raise FormatError(f"{fin.name} -> {fout.name}: products span only 2^{P.span}; the "
                          "probe needs at least 2^12")
    found = _Findings()
    windowed, same = _probe_structure(P, found)
    F = _probe_window(P, same, found) if windowed else None
    found.params["align_bits"] = None if F is None else F - 23
    found.evidence.setdefault("window", "exact: nothing below the largest term is lost")
    fma = _probe_group_size(P, windowed, same, found)
    _probe_addend(P, F, same, found)
    peff, k1 = _probe_normaliser_and_rounding(P, F, fma, same, found)
    _probe_subnormals(P, found)
    _probe_products_and_carries(P, F, fma, peff, k1, found)
    return ProbeResult(fin.name, fout.name, found.params, found.evidence, P.calls,
                       tuple(found.unobservable))


@dataclass(slots=True)
class _Findings:
    """What the feature tests found so far: parameters, the evidence, the unobservable."""

    params: dict[str, object] = field(default_factory=dict)
    evidence: dict[str, str] = field(default_factory=dict)
    unobservable: list[str] = field(default_factory=list)


def _probe_structure(P: _Prober, found: _Findings) -> tuple[bool, list[int]]:
    """Test 1, group structure: ``(windowed, positions in the sub-step of position 0)``.

    big - big + tiny; the tiny survives where big and -big cancel in a sub-step of their
    own: (0,1,2) for halves in pairs (j mod 4 < 2 first), (0,2,1) for odd/even halves,
    neither in one aligned window, both when the sum is exact ((0,4,2) tells pairs from a
    chain of 1- or 2-term exact steps, where (0,1,2) too keeps the tiny).
    """
    B, g, k = P.B, P.span, P.k
    big, tiny, neg = (1.0, B), (1.0, B - g), (-1.0, B)
    x_tiny = math.ldexp(1.0, B - g)
    t1, t2, t3 = P.run([P.case({0: big, 1: neg, 2: tiny}), P.case({0: big, 2: neg, 1: tiny}),
                        P.case({0: big, 4: neg, 2: tiny})])
    pairs = t1 == x_tiny and t2 != x_tiny and t3 == x_tiny
    windowed = t1 != x_tiny or pairs
    pattern = "pairs" if pairs else ("odd_even" if windowed and t2 == x_tiny else None)
    interleave = pattern is not None
    found.evidence["structure"] = (
        f"big-big+2^-{g}*big: {t1!r} at (0,1,2), {t2!r} at (0,2,1), {t3!r} at (0,4,2) -> "
        + ("exact accumulation" if not windowed else
           f"interleaved sub-steps ({pattern})" if interleave else "one aligned window"))
    found.params["interleave"] = interleave
    found.params["interleave_pattern"] = pattern
    same = [j for j in range(k) if pattern is None or (
        j % 2 == 0 if pattern == "odd_even" else j % 4 < 2)]
    return windowed, same


def _probe_window(P: _Prober, same: list[int], found: _Findings) -> int:
    """Tests 2 and 3 (windowed units): the alignment window ``F`` and shifted-out bits.

    ``F`` follows from the largest t with big - big + 2^-t big exact, the treatment of
    shifted-out bits from 2^-t two positions beyond the window.
    """
    B, g = P.B, P.span
    big, neg = (1.0, B), (-1.0, B)
    trip = tuple(same[:3])
    ts = list(range(1, g + 1))
    r = P.run([P.case({trip[0]: big, trip[1]: neg, trip[2]: (1.0, B - t)}) for t in ts])
    ok = [t for t, v in zip(ts, r) if v == math.ldexp(1.0, B - t)]
    Fm = max((t for t in ok if all(u in ok for u in range(1, t + 1))), default=0)
    tf = min(Fm + 3, g)
    pos_r, neg_r = P.run([P.case({trip[0]: big, trip[1]: neg, trip[2]: (1.0, B - tf)}),
                          P.case({trip[0]: big, trip[1]: neg, trip[2]: (-1.0, B - tf)})])
    if pos_r > 0:
        mode, F = "sticky", Fm - 1
    elif neg_r < 0:
        mode, F = "round_down", Fm
    else:
        mode, F = "truncate", Fm
    found.params["shifted_out"] = mode
    found.evidence["window"] = (f"2^-t kept below the largest term up to t={Fm}; 2^-{tf}: "
                                f"+ gives {pos_r!r}, - gives {neg_r!r} -> F={F}, {mode}")
    return F


def _probe_group_size(P: _Prober, windowed: bool, same: list[int],
                      found: _Findings) -> int | None:
    """Test 4, the group size: products per fused step (``None`` if above ``k - 1``)."""
    B, g, k, fout = P.B, P.span, P.k, P.fout
    big, tiny, neg = (1.0, B), (1.0, B - g), (-1.0, B)
    x_tiny = math.ldexp(1.0, B - g)
    trip = tuple(same[:3])
    if windowed:
        js = [j for j in same if j > trip[1]]
        first = {0: big, trip[1]: neg}
        cases = []
        for j in js:
            terms = dict(first)
            if j in terms:
                continue
            terms[j] = tiny
            cases.append((j, P.case(terms)))
        r = P.run([c for _, c in cases])
        fma = next((j for (j, _), v in zip(cases, r) if v == x_tiny), None)
        found.evidence["fma"] = f"tiny after big-big survives first at position {fma}"
    else:
        big_c = math.ldexp(1.0, min(B, fout.emax - 1))
        r = P.run([P.case({0: (1.0, B - g), j: (-1.0, int(math.log2(big_c)))}, c=big_c)
                   for j in range(1, k)])
        fma = next((j for j, v in zip(range(1, k), r) if v != x_tiny), None)
        found.evidence["fma"] = (f"c + tiny - c stays exact while -c is within the first "
                                 f"{fma} products")
    found.params["fma"] = fma
    return fma


def _probe_addend(P: _Prober, F: int | None, same: list[int], found: _Findings) -> None:
    """Test 5, ``c`` placement (windowed units only).

    ``c`` lies in the window, after the products' window (late), or is added last to the
    rounded products (2^e + 2^(e-p) rounds to 2^e first).
    """
    B, g, fout = P.B, P.span, P.fout
    params, ev = found.params, found.evidence
    big, neg = (1.0, B), (-1.0, B)
    trip = tuple(same[:3])
    pout = fout.precision
    bb = min(B, fout.emax - 3)
    params["addend_last"] = False
    if F is None:
        params["c_in_alignment"] = True
        return
    xc = math.ldexp(1.0, B - min(F + 3, g))
    r_late, = P.run([P.case({trip[0]: big, trip[1]: neg}, c=xc)])
    late = r_late == xc
    ev["c"] = f"c=2^{B - min(F + 3, g)} with big-big: {r_late!r}"
    if late and F >= pout and bb - pout >= P.lo:
        r_al, = P.run([P.case({trip[0]: (1.0, bb), trip[1]: (1.0, bb - pout)},
                              c=math.ldexp(1.0, bb - pout))])
        params["addend_last"] = bool(r_al == math.ldexp(1.0, bb))
        ev["c"] += f"; 2^{bb} + 2^{bb - pout} + c=2^{bb - pout}: {r_al!r}"
    elif late:
        params["addend_last"] = None
        found.unobservable.append("addend_last")
    late = late and not params["addend_last"]
    params["c_in_alignment"] = not late
    if late:
        bc = min(B, fout.emax - 1)
        et = max(bc - F - 3, P.lo)
        if et < bc - F:
            r_rd, = P.run([P.case({trip[0]: (-1.0, et)}, c=math.ldexp(1.0, bc))])
            params["late_shifted_out"] = "round_down" if r_rd < math.ldexp(1.0, bc) \
                else "truncate"
            ev["late"] = f"2^{bc} - 2^{et}: {r_rd!r}"
        else:
            params["late_shifted_out"] = None
            ev["late"] = "products cannot reach below the late window"


def _probe_normaliser_and_rounding(P: _Prober, F: int | None, fma: int | None,
                                   same: list[int], found: _Findings) -> tuple[int, int]:
    """Tests 6 and 7: the normaliser width and the final rounding.

    Returns the effective precision of the result and the case length of one step.
    """
    B, k, fout = P.B, P.k, P.fout
    params, ev = found.params, found.evidence
    pout = fout.precision
    bb = min(B, fout.emax - 3)
    qmax_lim = min(pout - 1, (F + 1) if F is not None else pout - 1)
    spots = tuple(same[:4])
    qs = list(range(1, qmax_lim + 1))
    k1 = max(fma or k, 4 if not params["interleave"] else 8)
    r = P.run([P.case({spots[0]: (1.0, bb), spots[1]: (1.0, bb), spots[2]: (1.0, bb + 1 - q)},
                      k=k1) for q in qs])
    exact_q = [q for q, v in zip(qs, r) if v == math.ldexp(1.0, bb + 1) + math.ldexp(1.0,
                                                                                  bb + 1 - q)]
    q_ok = max((q for q in exact_q if all(u in exact_q for u in range(1, q + 1))), default=0)
    nb = q_ok + 1 if q_ok < qmax_lim else None
    params["normalize_bits"] = nb
    ev["normalize"] = f"2^(e+1)(1 + 2^-q) exact up to q={q_ok} (limit {qmax_lim})"
    peff = nb if nb is not None else pout
    q = peff - 1
    if F is not None and q > F:
        # the window cannot hold the tie bit: the final rounding never sees extra bits
        params["rounding"] = None
        found.unobservable.append("rounding")
        ev["rounding"] = f"unobservable: the {F}-bit window is narrower than p={peff}"
    else:
        tie = {spots[0]: (1.0, bb), spots[1]: (1.0, bb), spots[2]: (1.0, bb + 1 - q),
               spots[3]: (1.0, bb - q)}
        r_tie, = P.run([P.case(tie, k=k1)])
        lower = math.ldexp(1.0, bb + 1) + math.ldexp(1.0, bb + 1 - q)
        params["rounding"] = "nearest_even" if r_tie > lower else "toward_zero"
        ev["rounding"] = f"tie above an odd last bit at p={peff}: {r_tie!r} (lower {lower!r})"
    return peff, k1


def _probe_subnormals(P: _Prober, found: _Findings) -> None:
    """Test 8: subnormal inputs and outputs (``None`` where the formats cannot show it)."""
    fin, fout, k = P.fin, P.fout, P.k
    sub_in = None
    if fin.smallest_subnormal is not None:
        s = fin.smallest_subnormal
        bmax = math.ldexp(1.0, fin.emax)
        want = s * bmax
        if fout.emin <= math.frexp(want)[1] - 1 <= fout.emax:
            a = np.zeros(k)
            b = np.zeros(k)
            a[0], b[0] = s, bmax
            r_in, = P.run([(a, b, 0.0)])
            sub_in = bool(r_in == want)
            found.evidence["subnormals_in"] = f"{s!r} * {bmax!r} -> {r_in!r}"
    found.params["subnormals_in"] = sub_in
    sub_out = None
    e_sub = fout.emin - 1
    if 2 * fin.emin <= e_sub:
        r_out, = P.run([P.case({0: (1.0, e_sub)})])
        sub_out = bool(r_out == math.ldexp(1.0, e_sub))
        found.evidence["subnormals_out"] = f"2^{e_sub} -> {r_out!r}"
    found.params["subnormals_out"] = sub_out


def _probe_products_and_carries(P: _Prober, F: int | None, fma: int | None, peff: int,
                                k1: int, found: _Findings) -> None:
    """Tests 9 and 10: exact products and carry bits."""
    B, k, fin, fout = P.B, P.k, P.fin, P.fout
    params, ev = found.params, found.evidence
    p = fin.precision
    if 2 * p - 1 <= min(peff, (F + 1) if F is not None else peff):
        v = 1 + math.ldexp(1.0, 1 - p)
        a = np.zeros(k1)
        b = np.zeros(k1)
        a[0] = b[0] = v
        r_p, = P.run([(a, b, 0.0)])
        params["products_exact"] = bool(r_p == v * v)
        ev["products"] = f"(1+2^{1 - p})^2 -> {r_p!r}"
    else:
        params["products_exact"] = None
    n = min(fma or 1, k)
    top = 2 - math.ldexp(1.0, 1 - p)
    a = np.zeros(max(n, k1))
    b = np.zeros(max(n, k1))
    bc = min(B, fout.emax - 2 - max(1, n).bit_length() - 2) // 2
    a[:n] = top * math.ldexp(1.0, bc)
    b[:n] = top * math.ldexp(1.0, bc)
    r_c, = P.run([(a, b, 0.0)])
    total = n * (top * math.ldexp(1.0, bc)) ** 2
    params["carry_bits"] = None if abs(r_c - total) < total / 4 else 0
    ev["carry"] = f"{n} maximal products: {r_c!r} vs {total!r}"


_COMPARED = ("fma", "align_bits", "shifted_out", "interleave", "interleave_pattern",
             "addend_last", "c_in_alignment",
             "late_shifted_out", "normalize_bits", "rounding", "subnormals_in",
             "subnormals_out", "carry_bits")


def compare(result: ProbeResult, model: UnitModel) -> dict[str, tuple[object, object, bool]]:
    """``{parameter: (model's value, inferred value, agree)}`` for the observable ones.

    Parameters the tests cannot observe on this unit (shifted-out bits of an exact
    accumulator, subnormal outputs out of reach of the inputs, a narrower normaliser
    than the window shows) are left out.
    """
    out: dict[str, tuple[object, object, bool]] = {}
    exact = model.align_bits is None
    for name in _COMPARED:
        if name in result.unobservable:
            continue
        if name not in result.params or result.params[name] is None and name in (
                "subnormals_in", "subnormals_out"):
            continue
        if exact and name in ("shifted_out", "interleave", "interleave_pattern",
                              "addend_last", "c_in_alignment", "late_shifted_out"):
            continue
        if name == "late_shifted_out" and model.c_in_alignment:
            continue
        if name == "interleave_pattern" and not model.interleave:
            continue
        expected = getattr(model, name)
        if name == "align_bits" and model.window_bits is not None:
            expected = model.window_bits - 23  # the probe counts F from a binary32 addend
        if name == "normalize_bits" and expected is not None and expected >= get_format(
                model.output).precision:
            expected = None
        got = result.params[name]
        out[name] = (expected, got, expected == got)
    return out


def emulated_black_box(u: Unit) -> BlackBox:
    """A black box computing with the emulated unit ``u`` (its model stays hidden)."""
    def f(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        return u.dot(a, b, c)
    return f


def torch_black_box(input: str, output: str, device: str = "cuda") -> BlackBox:
    """A black box running each case on a GPU matrix unit through PyTorch.

    Each case becomes one 16 x K by K x 16 product (row 0 of A holds ``a``, column 0 of
    B holds ``b``, the rest zeros) so that cuBLAS picks tensor-core kernels; ``d = D[0, 0]``.
    fp16/bf16 inputs use ``torch.baddbmm(C, A, B, out_dtype=)`` (C through cuBLAS's beta
    path); tf32 uses float32 inputs with TF32 enabled; FP8 inputs use ``torch._scaled_mm``
    with unit scales, one case at a time, and ``c`` is added afterwards in float64 (so the
    ``c``-placement tests do not describe the MMA for FP8). cuBLAS chooses the kernel and
    the order of its k-loop: the probe reports what that kernel does.

    Raises
    ------
    FormatError
        When PyTorch or a CUDA device is missing, or the format pair has no PyTorch path.
    """
    try:
        import torch
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise FormatError("torch_black_box needs PyTorch (pip install torch)") from exc
    if not torch.cuda.is_available():
        raise FormatError("torch_black_box needs a CUDA device; none is available "
                          "(use emulated_black_box to probe a model)")
    fin, fout = get_format(input).name, get_format(output).name
    tdt = {"binary16": torch.float16, "bfloat16": torch.bfloat16,
           "tensorfloat32": torch.float32, "float8_e4m3fn": torch.float8_e4m3fn,
           "float8_e5m2": torch.float8_e5m2}
    odt = {"binary32": torch.float32, "binary16": torch.float16}
    if fin not in tdt or fout not in odt:
        raise FormatError(f"no PyTorch path for {fin} -> {fout}; inputs: {', '.join(tdt)}; "
                          f"outputs: {', '.join(odt)}")
    tile = 16

    def f(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        n, k = a.shape
        kp = -(-k // tile) * tile
        A = torch.zeros((n, tile, kp), dtype=torch.float64)
        Bm = torch.zeros((n, kp, tile), dtype=torch.float64)
        A[:, 0, :k] = torch.from_numpy(a)
        Bm[:, :k, 0] = torch.from_numpy(b)
        C = torch.zeros((n, tile, tile), dtype=torch.float64)
        C[:, 0, 0] = torch.from_numpy(np.asarray(c, dtype=np.float64))
        if fin.startswith("float8"):
            out = []
            one = torch.ones((), device=device, dtype=torch.float32)
            for i in range(n):
                Ai = A[i].to(device=device, dtype=torch.float32).to(tdt[fin])
                Bi = Bm[i].T.contiguous().to(device=device, dtype=torch.float32)
                Bi = Bi.to(tdt[fin]).T
                Di = torch._scaled_mm(Ai, Bi, scale_a=one, scale_b=one, out_dtype=odt[fout])
                out.append(Di[0, 0].double().cpu() + C[i, 0, 0])
            return torch.stack(out).numpy()
        if fin == "tensorfloat32":
            prev = torch.backends.cuda.matmul.allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = True
            try:
                D = torch.baddbmm(C.to(device, torch.float32), A.to(device, torch.float32),
                                  Bm.to(device, torch.float32))
            finally:
                torch.backends.cuda.matmul.allow_tf32 = prev
        else:
            Ad, Bd = A.to(device, tdt[fin]), Bm.to(device, tdt[fin])
            Cd = C.to(device, odt[fout])
            if odt[fout] == tdt[fin]:
                D = torch.baddbmm(Cd, Ad, Bd)
            else:  # fp16/bf16 products accumulated into binary32 (aten::baddbmm.dtype)
                D = torch.baddbmm(Cd, Ad, Bd, out_dtype=odt[fout])
        return D[:, 0, 0].double().cpu().numpy()

    return f


def report(result: ProbeResult, model: UnitModel | None = None) -> str:
    """A Markdown report of a probe run, with the comparison to ``model`` when given."""
    lines = [f"# Matrix-unit probe: {result.input} -> {result.output}", "",
             f"{result.calls} black-box calls.", "", "| parameter | inferred | evidence |",
             "|---|---|---|"]
    evid = {"fma": "fma", "align_bits": "window", "shifted_out": "window",
            "interleave": "structure", "interleave_pattern": "structure",
            "addend_last": "c", "c_in_alignment": "c", "late_shifted_out": "late",
            "normalize_bits": "normalize", "rounding": "rounding",
            "subnormals_in": "subnormals_in", "subnormals_out": "subnormals_out",
            "products_exact": "products", "carry_bits": "carry"}
    for name, value in result.params.items():
        lines.append(f"| {name} | {value} | {result.evidence.get(evid.get(name, ''), '')} |")
    if model is not None:
        lines += ["", f"## Compared with preset {model.name} ({model.input} -> "
                  f"{model.output})", "", "| parameter | preset | inferred | agree |",
                  "|---|---|---|---|"]
        for name, (want, got, ok) in compare(result, model).items():
            lines.append(f"| {name} | {want} | {got} | {'yes' if ok else 'NO'} |")
    return "\n".join(lines) + "\n"
