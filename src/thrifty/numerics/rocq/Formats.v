(* thrifty: number formats as Flocq FLT formats, and the facts the unit proofs use.
   A format is Flocq's [FLT_exp emin prec]: [emin] is the exponent of the last bit of the
   smallest subnormal (IEEE emin - prec + 1), [prec] the significand width (hidden bit
   included).  Overflow is not modelled: FLT has an unbounded exponent range, so every
   statement holds for the hardware as long as no intermediate result overflows. *)
From Coq Require Import ZArith Reals Lia Lra.
From Flocq Require Import Core.
Open Scope R_scope.

Record fmt := Fmt { f_emin : Z; f_prec : Z; f_prec_pos : (0 < f_prec)%Z }.

Global Instance fmt_prec_gt_0 (f : fmt) : Prec_gt_0 (f_prec f) := f_prec_pos f.

Definition fexp (f : fmt) : Z -> Z := FLT_exp (f_emin f) (f_prec f).
Definition in_format (f : fmt) (x : R) : Prop := generic_format radix2 (fexp f) x.
(* the exponent of the smallest normal value *)
Definition normal_emin (f : fmt) : Z := (f_emin f + f_prec f - 1)%Z.
(* the exponent a unit reads from a value: floor(log2 |x|), at least the normal emin *)
Definition expo (f : fmt) (x : R) : Z := Z.max (mag radix2 x - 1) (normal_emin f).
(* |x|, with nonzero values below the smallest normal counted as the smallest normal *)
Definition pad (f : fmt) (x : R) : R :=
  if Req_EM_T x 0 then 0 else Rmax (Rabs x) (bpow radix2 (normal_emin f)).

Definition binary32 : fmt := Fmt (-149) 24 eq_refl.
Definition binary16 : fmt := Fmt (-24) 11 eq_refl.
Definition bfloat16 : fmt := Fmt (-133) 8 eq_refl.
Definition tensorfloat32 : fmt := Fmt (-136) 11 eq_refl.
Definition float8_e4m3fn : fmt := Fmt (-9) 4 eq_refl.
Definition float8_e5m2 : fmt := Fmt (-16) 3 eq_refl.

Lemma pad_nonneg f x : 0 <= pad f x.
Proof.
  unfold pad; destruct (Req_EM_T x 0); [lra|].
  apply Rle_trans with (Rabs x); [apply Rabs_pos | apply Rmax_l].
Qed.

Lemma abs_le_pad f x : Rabs x <= pad f x.
Proof.
  unfold pad; destruct (Req_EM_T x 0) as [->|]; [rewrite Rabs_R0; lra | apply Rmax_l].
Qed.

Lemma pad_le f x : pad f x <= Rabs x + bpow radix2 (normal_emin f).
Proof.
  unfold pad; destruct (Req_EM_T x 0).
  - pose proof (Rabs_pos x); pose proof (bpow_ge_0 radix2 (normal_emin f)); lra.
  - apply Rmax_lub; pose proof (Rabs_pos x); pose proof (bpow_ge_0 radix2 (normal_emin f));
      lra.
Qed.

Lemma bpow_expo_le_pad f x : x <> 0 -> bpow radix2 (expo f x) <= pad f x.
Proof.
  intros Hx; unfold pad, expo; destruct (Req_EM_T x 0) as [|_]; [contradiction|].
  destruct (Z.max_spec (mag radix2 x - 1) (normal_emin f)) as [[_ ->]|[_ ->]].
  - apply Rmax_r.
  - apply Rle_trans with (Rabs x); [apply bpow_mag_le; exact Hx | apply Rmax_l].
Qed.

(* the canonical exponent of a format's value is its read exponent minus (prec - 1) *)
Lemma cexp_expo f x : cexp radix2 (fexp f) x = (expo f x - (f_prec f - 1))%Z.
Proof. unfold cexp, fexp, FLT_exp, expo, normal_emin; lia. Qed.

Lemma format_as_float f x :
  in_format f x -> x = F2R (Float radix2 (Ztrunc (scaled_mantissa radix2 (fexp f) x))
                                     (expo f x - (f_prec f - 1))).
Proof. intros Hx; rewrite <- cexp_expo; exact Hx. Qed.

(* A product of two values of formats f and g is exact in FLT (emin_f + emin_g)
   (prec_f + prec_g): e.g. two bfloat16 values multiply exactly into 16 bits. *)
Lemma product_format f g a b :
  in_format f a -> in_format g b ->
  generic_format radix2 (FLT_exp (f_emin f + f_emin g) (f_prec f + f_prec g)) (a * b).
Proof.
  intros Ha Hb.
  apply FLT_format_generic in Ha; [|apply f_prec_pos].
  apply FLT_format_generic in Hb; [|apply f_prec_pos].
  destruct Ha as [[ma ea] -> Hma Hea]; destruct Hb as [[mb eb] -> Hmb Heb].
  simpl in *.
  apply generic_format_FLT.
  exists (Float radix2 (ma * mb) (ea + eb)).
  - unfold F2R; simpl; rewrite mult_IZR, bpow_plus; ring.
  - simpl; rewrite Z.abs_mul, Zpower_plus by (pose proof (f_prec_pos f);
      pose proof (f_prec_pos g); lia).
    apply Z.mul_lt_mono_nonneg; try apply Z.abs_nonneg; assumption.
  - simpl; lia.
Qed.

Lemma product_format_FLX f g a b :
  in_format f a -> in_format g b ->
  generic_format radix2 (FLX_exp (f_prec f + f_prec g)) (a * b).
Proof.
  intros Ha Hb.
  apply generic_format_FLX_FLT with (f_emin f + f_emin g)%Z.
  apply product_format; assumption.
Qed.

Corollary bfloat16_product_exact a b :
  in_format bfloat16 a -> in_format bfloat16 b ->
  generic_format radix2 (FLX_exp 16) (a * b) /\
  generic_format radix2 (FLT_exp (-266) 16) (a * b).
Proof.
  intros Ha Hb; split; [apply (product_format_FLX bfloat16 bfloat16) |
                        apply (product_format bfloat16 bfloat16)]; assumption.
Qed.

(* ulp in an FLT format: at most 2^(1-prec) |x| + 2^emin *)
Lemma ulp_le_rel f x :
  ulp radix2 (fexp f) x <= bpow radix2 (1 - f_prec f) * Rabs x + bpow radix2 (f_emin f).
Proof.
  pose proof (bpow_ge_0 radix2 (1 - f_prec f)); pose proof (Rabs_pos x).
  pose proof (bpow_ge_0 radix2 (f_emin f)).
  destruct (Rle_or_lt (bpow radix2 (f_emin f + f_prec f - 1)) (Rabs x)) as [Hx|Hx].
  - pose proof (ulp_FLT_le radix2 (f_emin f) (f_prec f) x Hx).
    unfold fexp; nra.
  - unfold fexp; rewrite ulp_FLT_small.
    all: try apply f_prec_pos.
    + nra.
    + apply Rlt_le_trans with (1 := Hx); apply bpow_le; lia.
Qed.

(* any (directed or not) rounding: |round x - x| <= 2^(1-prec) |x| + 2^emin *)
Lemma round_err_any f (rnd : R -> Z) {V : Valid_rnd rnd} x :
  Rabs (round radix2 (fexp f) rnd x - x)
    <= bpow radix2 (1 - f_prec f) * Rabs x + bpow radix2 (f_emin f).
Proof.
  apply Rle_trans with (ulp radix2 (fexp f) x).
  - apply error_le_ulp; [unfold fexp; apply FLT_exp_valid; apply f_prec_pos | exact V].
  - apply ulp_le_rel.
Qed.

(* rounding to nearest (any tie): |round x - x| <= 2^(-prec) |x| + 2^emin / 2 *)
Lemma round_err_nearest f choice x :
  Rabs (round radix2 (fexp f) (Znearest choice) x - x)
    <= bpow radix2 (- f_prec f) * Rabs x + bpow radix2 (f_emin f) / 2.
Proof.
  apply Rle_trans with (/2 * ulp radix2 (fexp f) x).
  - apply error_le_half_ulp; unfold fexp; apply FLT_exp_valid; apply f_prec_pos.
  - pose proof (ulp_le_rel f x).
    replace (bpow radix2 (1 - f_prec f)) with (2 * bpow radix2 (- f_prec f)) in H
      by (replace (1 - f_prec f)%Z with (1 + - f_prec f)%Z by lia; rewrite bpow_plus;
          reflexivity).
    lra.
Qed.

Lemma round_err_ne f x :
  Rabs (round radix2 (fexp f) ZnearestE x - x)
    <= bpow radix2 (- f_prec f) * Rabs x + bpow radix2 (f_emin f) / 2.
Proof. apply round_err_nearest. Qed.

(* flush to zero: results below the smallest normal become 0 *)
Definition flush (f : fmt) (x : R) : R :=
  if Rlt_dec (Rabs x) (bpow radix2 (normal_emin f)) then 0 else x.

Lemma flush_err f x : Rabs (flush f x - x) <= 0 * Rabs x + bpow radix2 (normal_emin f).
Proof.
  unfold flush; destruct (Rlt_dec (Rabs x) (bpow radix2 (normal_emin f))).
  - rewrite Rminus_0_l, Rabs_Ropp; lra.
  - replace (x - x) with 0 by ring; rewrite Rabs_R0;
      pose proof (bpow_ge_0 radix2 (normal_emin f)); lra.
Qed.

Lemma flush_format f g x : in_format g x -> in_format g (flush f x).
Proof.
  intros H; unfold flush; destruct (Rlt_dec _ _); [apply generic_format_0 | exact H].
Qed.

(* the largest finite value of a format with [emax] (IEEE) and saturation to it *)
Definition max_finite (f : fmt) (m e : Z) : R := F2R (Float radix2 m e).
Lemma max_finite_format f m e :
  (Z.abs m < Zpower radix2 (f_prec f))%Z -> (f_emin f <= e)%Z ->
  in_format f (max_finite f m e).
Proof.
  intros Hm He; apply generic_format_FLT.
  exists (Float radix2 m e); auto.
Qed.
Lemma max_finite_nonneg f m e : (0 <= m)%Z -> 0 <= max_finite f m e.
Proof. intros Hm; apply F2R_ge_0; exact Hm. Qed.
Definition saturate (mx x : R) : R := Rmax (- mx) (Rmin mx x).
Lemma saturate_in_range mx x : 0 <= mx -> Rabs (saturate mx x) <= mx.
Proof.
  intros H; unfold saturate; apply Rabs_le; split.
  - apply Rmax_l.
  - apply Rmax_lub; [lra | apply Rmin_l].
Qed.
Lemma round_monotone f (rnd : R -> Z) {V : Valid_rnd rnd} x y :
  x <= y -> round radix2 (fexp f) rnd x <= round radix2 (fexp f) rnd y.
Proof.
  apply round_le; [unfold fexp; apply FLT_exp_valid; apply f_prec_pos | exact V].
Qed.
