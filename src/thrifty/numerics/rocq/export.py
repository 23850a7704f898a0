"""Export a matrix unit's formats, fused step and a priori bound as a Rocq (Coq) file.

Policy
------
An exported file requires thrifty's proof library (the ``*.v`` files of this package,
logical name ``Thrifty``; :mod:`thrifty.numerics.rocq.coqc` compiles it) and states, over
Coq's reals in the terms of Flocq (Boldo and Melquiond, ARITH 2011):

* each format as a Flocq ``FLT_exp emin prec`` (:func:`format_section`), with its largest
  finite value, saturation and rounding, and those facts *proved*;
* for a unit whose step the library models (:func:`proof_gap` is ``None``: products
  exact, every term aligned to the largest exponent (at least ``zero_exp`` when a term is
  zero) and kept to ``F`` fraction bits by truncation or rounding down, or an exact sum;
  then a normaliser (toward zero) if the unit has one, one final rounding of any mode,
  and flushing to zero if the unit flushes; no interleaving, late addend or carry
  limit), the unit's dot product of length ``k`` and its matrix product as instances of
  the library's definitions, and the bound :func:`thrifty.numerics.bounds.a_priori_bound`
  reports as two theorems, ``dot_a_priori_bound`` and ``matmul_a_priori_bound``, proved:
  the library proves ``((1+eps)^S - 1) mu + S eta (1+eps)^S`` and the file checks, by
  exact rational computation, that the numbers thrifty reports are at least that;
* for other units, the step as a function on reals and the bound as a statement left
  ``Admitted`` (a specification, not a proof), with the reason in the header.

The header says how many proofs are ``Admitted`` (:func:`admitted_count` counts them).
Overflow is outside the model (Flocq's FLT formats have no largest exponent): every
theorem speaks of computations whose intermediate results stay finite.

Example
-------
>>> from thrifty.numerics.units import preset
>>> text = export_unit(preset("h100", "bf16", "fp32"), k=32)
>>> "Theorem dot_a_priori_bound" in text and admitted_count(text) == 0
True
"""

from __future__ import annotations

import re
from fractions import Fraction

from thrifty.errors import FormatError
from thrifty.numerics.bounds import a_priori_bound, step_error_model
from thrifty.numerics.formats import Format, get_format
from thrifty.numerics.rocq.coqc import admitted_count
from thrifty.numerics.units import UnitModel

_IMPORTS = """From Coq Require Import ZArith Reals List QArith Qreals.
From Flocq Require Import Core.
From Thrifty Require Import Formats Step Dot Rational.
Import ListNotations.
Open Scope R_scope.
"""

_RND = {"toward_zero": "Ztrunc", "nearest_even": "ZnearestE", "up": "Zceil",
        "down": "Zfloor"}
#: Coq's integer rounding of a term's shifted-out bits, by ``UnitModel.shifted_out``.
_SHIFTED = {"truncate": "Ztrunc", "round_down": "Zfloor", "sticky": "Ztrunc"}


def _ident(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


def _z(n: int) -> str:
    return f"({n})%Z"


def _r_of_fraction(x: Fraction) -> str:
    return f"(IZR {_z(x.numerator)} / IZR {_z(x.denominator)})"


def _q(x: Fraction) -> str:
    return f"({x.numerator} # {x.denominator})"


def _dyadic(x: float) -> tuple[int, int]:
    """``x = m * 2**e`` with odd ``m`` (or ``x = 0``)."""
    fr = Fraction(x)
    m, d = fr.numerator, fr.denominator
    e = 0
    while d > 1:
        d //= 2
        e -= 1
    while m and m % 2 == 0:
        m //= 2
        e += 1
    return m, e


def format_section(fmt: Format | str) -> str:
    """Coq definitions for one format (a Flocq FLT format) and its facts, proved.

    Example
    -------
    >>> "Fmt (-9) 4" in format_section("e4m3")
    True
    """
    f = get_format(fmt)
    if not f.signed or f.twos_complement or f.exponent_bits == 0:
        raise FormatError(f"{f.name}: only signed sign-magnitude floating-point formats are "
                          "exported (Flocq's FLT model)")
    n = _ident(f.name)
    m, e = _dyadic(f.max_finite)
    overflow = ("rounds to infinity (IEEE)" if f.has_inf else
                "has no infinity: out-of-range results are NaN or saturate (OCP/P3109)")
    return f"""(* ---- format {f.name}: precision {f.precision}, emin {f.emin}, emax {f.emax}, \
max {f.max_finite!r}; overflow {overflow} ---- *)
Definition {n}_fmt : fmt := Fmt ({f.emin - f.precision + 1}) {f.precision} eq_refl.
Definition {n}_prec : Z := f_prec {n}_fmt.
Definition {n}_emin : Z := f_emin {n}_fmt.  (* last bit of the smallest subnormal *)
Definition {n}_fexp : Z -> Z := fexp {n}_fmt.
Definition {n}_format (x : R) : Prop := in_format {n}_fmt x.
Definition {n}_round_ne (x : R) : R := round radix2 {n}_fexp ZnearestE x.
Definition {n}_round_tz (x : R) : R := round radix2 {n}_fexp Ztrunc x.
Definition {n}_max : R := max_finite {n}_fmt {_z(m)} {_z(e)}.
Definition {n}_has_inf : bool := {'true' if f.has_inf else 'false'}.
Definition {n}_in_range (x : R) : Prop := Rabs x <= {n}_max.
Definition {n}_saturate (x : R) : R := saturate {n}_max x.
Lemma {n}_max_in_format : {n}_format {n}_max.
Proof. apply max_finite_format; check_goal. Qed.
Lemma {n}_saturate_in_range : forall x, {n}_in_range ({n}_saturate x).
Proof. intros x; apply saturate_in_range, max_finite_nonneg; check_goal. Qed.
Lemma {n}_round_ne_monotone : forall x y, x <= y -> {n}_round_ne x <= {n}_round_ne y.
Proof. intros x y H; exact (round_monotone {n}_fmt _ x y H). Qed.
"""


def proof_gap(model: UnitModel) -> str | None:
    """Why the library does not prove ``model``'s bound (``None``: it does)."""
    gaps = [(model.shifted_out == "sticky" and model.window_bits is not None, "a sticky bit"),
            (model.carry_bits is not None, "a carry limit"),
            (not model.c_in_alignment, "c added after the products"),
            (model.interleave, "interleaved halves"),
            (model.addend_last, "c added last"),
            (model.normalize_bits is not None
             and model.normalize_bits >= get_format(model.output).precision,
             "a normaliser as wide as the output")]
    named = [why for bad, why in gaps if bad]
    return None if not named else "the proof library does not model " + ", ".join(named)


def export_unit(model: UnitModel, k: int = 64) -> str:
    """A Coq file: the model's formats, its dot and matrix products, and the bound theorems.

    Proved (no ``Admitted``) when :func:`proof_gap` is ``None``; otherwise the step and
    the bound as statements, ``Admitted``. The header records the ``Admitted`` count.

    Raises
    ------
    FormatError
        For a model the statement-only export does not describe either: halves in pairs,
        ``c`` added last, or zero terms in the alignment (``zero_exp``).
    """
    bnd = a_priori_bound(model, k)  # validates k
    fin, facc, fout = (get_format(model.input), get_format(model.accumulator),
                       get_format(model.output))
    formats = "\n".join(format_section(nm) for nm in dict.fromkeys(
        [fin.name, facc.name, fout.name]))
    gap = proof_gap(model)
    if gap is None:
        body = _proved_instance(model, k, bnd.relative, bnd.absolute)
    else:
        _check_exportable(model)
        i, a, o = _ident(fin.name), _ident(facc.name), _ident(fout.name)
        body = "\n".join([_unit_definitions(model, fin, fout, i, a), _aligned_sum(model),
                          _step_and_dot(model, i, a, o), _bound_lemma(model, k, i, o)])
    text = "\n".join([_IMPORTS, formats, body])
    n = admitted_count(text)
    status = ("The bound theorems are proved from thrifty's library (for results that do "
              "not overflow);\n   Print Assumptions lists the axioms they use" if gap is None else
              f"statements only: {gap}; the bound is a specification")
    header = (f"(* Generated by thrifty (thrifty.numerics.rocq) for unit {model.name} "
              f"({model.instruction or 'user model'}), {fin.name} -> {fout.name}, k = {k}.\n"
              f"   Admitted: {n}. {status}.\n"
              "   Compile: coqc -Q LIB Thrifty FILE.v, with LIB holding thrifty's library "
              "compiled\n   (thrifty fp export-rocq --library LIB writes it). *)\n")
    return header + text


def _check_exportable(model: UnitModel) -> None:
    """Refuse a model whose step the statement-only export does not describe."""
    if (model.interleave and model.interleave_pattern != "odd_even") or model.addend_last \
            or model.zero_exp is not None:
        raise FormatError(f"unit {model.name!r} ({model.instruction or 'user model'}): the "
                          "Rocq export describes steps with odd/even halves, c in the "
                          "window and zero terms outside the alignment; this model has "
                          "pairs halves, c added last or zero_exp")


_POS = "ltac:(apply Q2R_nonneg_check; vm_compute; reflexivity)"


def _final_map(model: UnitModel) -> tuple[str, str, str, str, str, str]:
    """The step's final operation: (definitions, Coq map, u, s, proof of its error bound
    ``|final x - x| <= u |x| + s``, proof that its results are in the output format)."""
    rnd = _RND[model.rounding]
    if model.rounding == "nearest_even":
        u, s, err = ("two_pow (- f_prec fo)", "two_pow (f_emin fo) / inject_Z 2",
                     "(round_err_ne_Q fo)")
    else:
        u, s, err = "two_pow (1 - f_prec fo)", "two_pow (f_emin fo)", f"(round_err_any_Q fo {rnd})"
    defs, inner = "", "x"
    nb = model.normalize_bits
    if nb is not None:  # a normaliser keeping nb bits toward zero, then the rounding
        emin_n = get_format(model.output).emin - nb + 1
        defs = (f"(* the normaliser: {nb} bits, toward zero *)\n"
                f"Definition fn : fmt := Fmt ({emin_n}) {nb} eq_refl.\n")
        inner = "(round radix2 (fexp fn) Ztrunc x)"
        err = (f"(compose_err_Q _ _ (two_pow (1 - f_prec fn)) (two_pow (f_emin fn)) ({u}) "
               f"({s}) {_POS} (round_err_any_Q fn Ztrunc) {err})")
        u, s = (f"(1 + two_pow (1 - f_prec fn)) * (1 + {u}) - 1",
                f"{s} + (1 + {u}) * two_pow (f_emin fn)")
    final = f"round radix2 (fexp fo) {rnd} {inner}"
    in_fmt = f"(round_in_format fo {rnd} _)"
    if not model.subnormals_out:  # results below the smallest normal flushed to zero
        err = (f"(compose_err_Q _ _ ({u}) ({s}) 0 (two_pow (normal_emin fo)) {_POS} {err} "
               "(flush_err_Q fo))")
        u, s = f"(1 + ({u})) * (1 + 0) - 1", f"two_pow (normal_emin fo) + (1 + 0) * ({s})"
        final, in_fmt = f"flush fo ({final})", f"(flush_format fo fo _ {in_fmt})"
    return defs, f"fun x => {final}", u, s, err, f"(fun x => {in_fmt})"


def _proved_instance(model: UnitModel, k: int, rel: float, ab: float) -> str:
    """The unit as an instance of the library and its bound theorems, proved."""
    st = step_error_model(model)
    steps = -(-k // model.fma)
    exact = model.window_bits is None
    top = st.truncated_terms == model.fma and not exact
    ze = "None" if model.zero_exp is None else f"(Some {_z(model.zero_exp)})"
    if model.zero_exp is not None:  # zeros pad the last block: state it for whole blocks
        k = steps * model.fma
    i, a, o = (_ident(get_format(f).name) for f in (model.input, model.accumulator,
                                                    model.output))
    rnd, al = _RND[model.rounding], _SHIFTED[model.shifted_out]
    norm, final, u, s, err, in_fmt = _final_map(model)
    common = f"unit_final u_q s_q {_POS} {_POS} {err}"
    if exact:
        args = f"fi fc {common} fma steps k"
        dot, mm = "udot_exact unit_final", "matmul_exact unit_final"
    else:
        dot = f"udot fi fc window {ze} {al} unit_final"
        mm = f"matmul fi fc window {ze} {al} unit_final"
        args = (f"fi fc fo window {ze} {al} {common} {in_fmt} fma steps k" if top else
                f"fi fc window {ze} {al} {common} fma steps k")
    which = "exact" if exact else ("top" if top else "all")
    zero_note = ("" if model.zero_exp is None else
                 f"\n   Zero terms align at 2^{model.zero_exp}: the unit pads the last block "
                 "with zero products, so vectors are stated padded to whole blocks.")
    hyp_dot = ("in_format fo c ->\n  Forall (fun ab => in_format fi (fst ab) /\\ "
               "in_format fi (snd ab)) l ->\n  " if top else "")
    hyp_mm = ("in_format fo (C i j) ->\n  (forall p, (p < k)%nat -> in_format fi (A i p) "
              "/\\ in_format fi (B p j)) ->\n  " if top else "")
    window = ("exact sums (no window)" if exact else
              f"window F = {model.window_bits} bits below the largest exponent, shifted-out "
              f"bits {model.shifted_out} ({al})")
    flushed = ("" if model.subnormals_in else
               "\n   The unit flushes subnormal inputs: the theorems speak of inputs that are "
               "normal or zero.")
    return f"""(* ---- unit {model.name}: {model.fma} products per step, {window}, final \
rounding {model.rounding} ({rnd}){'' if model.subnormals_out else ', then flushed to zero'}.
   Source: {model.source or 'user model'}.
   Per step at most {st.truncated_terms} terms lose one window ulp ({'the top term is exact'
   if top else 'every term may'}): eps = {float(st.eps):.6g}, eta = {float(st.eta):.6g};
   a dot product of length k <= {k} takes S = {steps} steps.{zero_note}{flushed} ---- *)
Definition fi : fmt := {i}_fmt.
Definition fc : fmt := {a}_fmt.
Definition fo : fmt := {o}_fmt.
Definition window : Z := {_z(model.window_bits or 0)}.
Definition fma : nat := {model.fma}.
Definition steps : nat := {steps}.
Definition k : nat := {k}.
{norm}Definition unit_final : R -> R := {final}.
Definition u_q : Q := {u}.
Definition s_q : Q := {s}.
(* thrifty.numerics.bounds.a_priori_bound(model, {k}): relative {rel!r}, absolute {ab!r} *)
Definition bound_rel : R := Q2R {_q(Fraction(rel))}.
Definition bound_abs : R := Q2R {_q(Fraction(ab))}.
Definition unit_dot : R -> list (R * R) -> R := {dot} fma.
Definition unit_matmul : mat -> mat -> mat -> nat -> nat -> nat -> R :=
  {mm} fma.

(* |c + sum a_i b_i computed - exact| <= bound_rel (|c| + sum pad a_i pad b_i) + bound_abs *)
Theorem dot_a_priori_bound : forall c l,
  (length l <= k)%nat ->
  {hyp_dot}Rabs (unit_dot c l - (c + psum l)) <= bound_rel * (Rabs c + pmag fi l) + bound_abs.
Proof. apply (dot_bound_{which}_checked {args}); check_goal. Qed.

(* every entry (i, j) of C + A B with inner dimension k *)
Theorem matmul_a_priori_bound : forall (A B C : mat) i j,
  {hyp_mm}Rabs (unit_matmul A B C k i j - (C i j + psum (row_col A B k i j)))
    <= bound_rel * (Rabs (C i j) + pmag fi (row_col A B k i j)) + bound_abs.
Proof. apply (matmul_bound_{which}_checked {args}); check_goal. Qed.

Print Assumptions dot_a_priori_bound.
Print Assumptions matmul_a_priori_bound.
"""


def _unit_definitions(model: UnitModel, fin: Format, fout: Format, i: str, a: str) -> str:
    """The unit's banner and the definitions of alignment: exponents, window, keep."""
    F = model.window_bits
    return f"""(* ---- unit {model.name}: {fin.name} x {fin.name} + {fout.name} -> {fout.name};
   {model.fma} products per step; window {'exact' if F is None else f'F = {F} bits'};
   shifted-out bits {model.shifted_out}; c {'in the alignment' if model.c_in_alignment
                                           else 'added after the products'};
   interleave {model.interleave}; normaliser {model.normalize_bits}; final rounding
   {model.rounding}. Source: {model.source or 'user model'} ---- *)
Definition in_expo (x : R) : Z := Z.max (mag radix2 x - 1) ({i}_emin + {i}_prec - 1).
Definition acc_expo (x : R) : Z := Z.max (mag radix2 x - 1) ({a}_emin + {a}_prec - 1).
(* the exponent a product is aligned by: e_a + e_b (its significand lies in [0, 4)) *)
Definition prod_expo (ab : R * R) : Z := (in_expo (fst ab) + in_expo (snd ab))%Z.
Definition no_term : Z := {_z(-(1 << 20))}.
Definition top (c : R) (l : list (R * R)) : Z :=
  fold_right (fun ab e => if Req_EM_T (fst ab * snd ab) 0 then e else Z.max e (prod_expo ab))
             (if Req_EM_T c 0 then no_term else acc_expo c) l.
Definition window : Z := {_z(F if F is not None else 0)}.
(* a term kept to multiples of 2^q: {model.shifted_out} *)
Definition keep (q : Z) (x : R) : R :=
  IZR ({_SHIFTED[model.shifted_out]} (x * bpow radix2 (- q))) * bpow radix2 q.
Definition exact_sum (c : R) (l : list (R * R)) : R :=
  fold_right (fun ab s => s + fst ab * snd ab) c l.
"""


def _aligned_sum(model: UnitModel) -> str:
    """``aligned_sum``: exact, with ``c`` in the window, or with ``c`` after the products."""
    F = model.window_bits
    if F is None:
        return "Definition aligned_sum (c : R) (l : list (R * R)) : R := exact_sum c l.\n"
    if model.c_in_alignment:
        return """Definition aligned_sum (c : R) (l : list (R * R)) : R :=
  let q := (top c l - window)%Z in
  fold_right (fun ab s => s + keep q (fst ab * snd ab)) (keep q c) l.
"""
    return f"""Definition products_sum (l : list (R * R)) : R :=
  let q := (top 0 l - window)%Z in
  fold_right (fun ab s => s + keep q (fst ab * snd ab)) 0 l.
Definition keep_late (q : Z) (x : R) : R :=
  IZR ({_SHIFTED[model.late_shifted_out]} (x * bpow radix2 (- q))) * bpow radix2 q.
Definition aligned_sum (c : R) (l : list (R * R)) : R :=
  let p := products_sum l in
  let e := Z.max (if Req_EM_T p 0 then no_term else (mag radix2 p - 1)%Z)
                 (if Req_EM_T c 0 then no_term else acc_expo c) in
  keep_late (e - window)%Z p + keep_late (e - window)%Z c.
"""


def _step_and_dot(model: UnitModel, i: str, a: str, o: str) -> str:
    """The normaliser, the fused step, the dot product over steps, and its magnitude."""
    rnd = _RND[model.rounding]
    norm = ("(fun s => s)" if model.normalize_bits is None else
            f"(round radix2 (FLT_exp ({o}_emin + {o}_prec - {model.normalize_bits}) "
            f"{_z(model.normalize_bits)}) Ztrunc)")
    return f"""Definition normalise : R -> R := {norm}.
(* one fused step: d = c + sum of the products of l (|l| <= {model.fma}) *)
Definition step (c : R) (l : list (R * R)) : R :=
  round radix2 {o}_fexp {rnd} (normalise (aligned_sum c l)).
(* a dot product: the recursive sequence of steps over blocks of {model.fma} products
   {'(an interleaved step is two steps, on its even then its odd products)'
    if model.interleave else ''} *)
Fixpoint dot (c : R) (blocks : list (list (R * R))) : R :=
  match blocks with nil => c | b :: t => dot (step c b) t end.
Fixpoint exact_dot (c : R) (blocks : list (list (R * R))) : R :=
  match blocks with nil => c | b :: t => exact_dot (exact_sum c b) t end.
Definition pad_at (x : R) (emin : Z) : R :=
  if Req_EM_T x 0 then 0 else Rmax (Rabs x) (bpow radix2 emin).
Definition magnitude (c : R) (blocks : list (list (R * R))) : R :=
  pad_at c ({a}_emin + {a}_prec - 1) + fold_right (fun b s => s + fold_right
    (fun ab t => t + pad_at (fst ab) ({i}_emin + {i}_prec - 1)
                     * pad_at (snd ab) ({i}_emin + {i}_prec - 1)) 0 b) 0 blocks.
"""


def _bound_lemma(model: UnitModel, k: int, i: str, o: str) -> str:
    """The a priori bound of ``k``-long dot products as a lemma (``Admitted``)."""
    bnd = a_priori_bound(model, k)
    st = step_error_model(model)
    steps = -(-k // model.fma) * (2 if model.interleave else 1)
    per = -(-model.fma // 2) if model.interleave else model.fma
    return f"""(* a priori bound (thrifty.numerics.bounds.a_priori_bound), k = {k}:
   {bnd.detail}
   per step eps = {float(st.eps):.6g}, eta = {float(st.eta):.6g} *)
Definition bound_rel : R := {_r_of_fraction(Fraction(bnd.relative))}.
Definition bound_abs : R := {_r_of_fraction(Fraction(bnd.absolute))}.
Lemma dot_a_priori_bound :
  forall (c : R) (blocks : list (list (R * R))),
    (length blocks <= {steps})%nat ->
    Forall (fun b => (length b <= {per})%nat /\\
             Forall (fun ab => {i}_format (fst ab) /\\ {i}_format (snd ab)) b) blocks ->
    {o}_format c ->
    Rabs (dot c blocks - exact_dot c blocks) <= bound_rel * magnitude c blocks + bound_abs.
Admitted.
"""
