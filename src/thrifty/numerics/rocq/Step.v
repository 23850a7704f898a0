(* thrifty: one fused step of a matrix unit and its error.
   d = round_out (aligned sum of c and the products a_i b_i), where
   - a product a b is exact, aligned by expo a + expo b (input format [fi]),
   - c is aligned by expo c (accumulator format [fc]),
   - the terms are kept to 2^(E - F) below the largest exponent E (Align.v),
   - the sum goes through [final]: one rounding to the output format [fo], or a
     normaliser then that rounding; all the proofs use is its error bound [round_err]. *)
From Coq Require Import ZArith Reals List Lia Lra.
From Flocq Require Import Core.
From Thrifty Require Import Formats Align.
Import ListNotations.
Open Scope R_scope.

Fixpoint psum (l : list (R * R)) : R :=
  match l with nil => 0 | ab :: l' => fst ab * snd ab + psum l' end.

Section Step.
Variables (fi fc fo : fmt).
Variable F : Z.
Variable ze : option Z.  (* the exponent zero terms align at (None: they do not) *)
Variable rnd_al : R -> Z.
Context {V_al : Valid_rnd rnd_al}.
Variable final : R -> R.
Variables (u s : R).
Hypothesis u_pos : 0 <= u.
Hypothesis round_err :
  forall x, Rabs (final x - x) <= u * Rabs x + s.

Definition prod_term (ab : R * R) : term :=
  (fst ab * snd ab, (expo fi (fst ab) + expo fi (snd ab))%Z).
Definition terms (c : R) (l : list (R * R)) : list term := (c, expo fc c) :: map prod_term l.
Definition step (c : R) (l : list (R * R)) : R :=
  final (aligned_z F rnd_al ze (terms c l)).

Fixpoint pmag (l : list (R * R)) : R :=
  match l with nil => 0 | ab :: l' => pad fi (fst ab) * pad fi (snd ab) + pmag l' end.

Lemma pmag_nonneg l : 0 <= pmag l.
Proof.
  induction l as [|ab l IH]; simpl; [lra|].
  pose proof (pad_nonneg fi (fst ab)); pose proof (pad_nonneg fi (snd ab)); nra.
Qed.

Lemma sumv_terms c l : sumv (terms c l) = c + psum l.
Proof.
  unfold terms; simpl; f_equal.
  induction l as [|ab l IH]; simpl; [reflexivity|]; rewrite IH; reflexivity.
Qed.

Lemma psum_le_pmag l : Rabs (psum l) <= pmag l.
Proof.
  induction l as [|ab l IH]; simpl; [rewrite Rabs_R0; lra|].
  eapply Rle_trans; [apply Rabs_triang|]; apply Rplus_le_compat; [|exact IH].
  rewrite Rabs_mult; apply Rmult_le_compat; try apply Rabs_pos; apply abs_le_pad.
Qed.

Definition mu (c : R) (l : list (R * R)) : R := pad fc c + pmag l.

Lemma mu_nonneg c l : 0 <= mu c l.
Proof. unfold mu; pose proof (pad_nonneg fc c); pose proof (pmag_nonneg l); lra. Qed.

Lemma exact_le_mu c l : Rabs (c + psum l) <= mu c l.
Proof.
  unfold mu; eapply Rle_trans; [apply Rabs_triang|].
  apply Rplus_le_compat; [apply abs_le_pad | apply psum_le_pmag].
Qed.

Lemma prod_expo_le ab :
  fst ab * snd ab <> 0 -> bpow radix2 (snd (prod_term ab)) <= pad fi (fst ab) * pad fi (snd ab).
Proof.
  intros H; simpl; rewrite bpow_plus.
  assert (fst ab <> 0) by (intros E; apply H; rewrite E; ring).
  assert (snd ab <> 0) by (intros E; apply H; rewrite E; ring).
  apply Rmult_le_compat; try apply bpow_ge_0; apply bpow_expo_le_pad; assumption.
Qed.

Lemma terms_bpow c l :
  Forall (fun t => fst t <> 0 -> bpow radix2 (snd t) <= mu c l) (terms c l).
Proof.
  unfold terms, mu; constructor.
  - simpl; intros Hc; pose proof (bpow_expo_le_pad fc c Hc); pose proof (pmag_nonneg l); lra.
  - pose proof (pad_nonneg fc c).
    assert (Forall (fun t => fst t <> 0 -> bpow radix2 (snd t) <= pmag l) (map prod_term l)).
    { induction l as [|ab l IH]; simpl; constructor.
      - intros Hab; pose proof (prod_expo_le ab Hab); pose proof (pmag_nonneg l); lra.
      - eapply Forall_impl; [|apply IH].
        intros t Ht Hz; specialize (Ht Hz).
        pose proof (pad_nonneg fi (fst ab)); pose proof (pad_nonneg fi (snd ab)); nra. }
    eapply Forall_impl; [|exact H0]; intros t Ht Hz; specialize (Ht Hz); lra.
Qed.

(* the step from a bound [a * mu + z] on the alignment error *)
Lemma step_from_aligned a z c l :
  0 <= a -> 0 <= z ->
  Rabs (aligned_z F rnd_al ze (terms c l) - (c + psum l)) <= a * mu c l + z ->
  Rabs (step c l - (c + psum l)) <= (a + u * (1 + a)) * mu c l + (s + (1 + u) * z).
Proof.
  intros Ha Hz Hal; unfold step.
  set (x := aligned_z F rnd_al ze (terms c l)) in *.
  pose proof (round_err x) as Hr.
  pose proof (exact_le_mu c l) as Hex.
  pose proof (mu_nonneg c l).
  assert (Rabs x <= mu c l + a * mu c l + z).
  { replace x with ((x - (c + psum l)) + (c + psum l)) by ring.
    eapply Rle_trans; [apply Rabs_triang|]; lra. }
  replace (final x - (c + psum l)) with ((final x - x) + (x - (c + psum l))) by ring.
  eapply Rle_trans; [apply Rabs_triang|].
  assert (u * Rabs x <= u * (mu c l + a * mu c l + z)) by (apply Rmult_le_compat_l; assumption).
  nra.
Qed.

(* Any inputs: every one of the n + 1 terms may lose one window ulp. *)
Theorem step_err_all (n : nat) c l :
  (length l <= n)%nat ->
  Rabs (step c l - (c + psum l))
    <= (INR (S n) * bpow radix2 (- F) + u * (1 + INR (S n) * bpow radix2 (- F))) * mu c l
       + (s + (1 + u) * zterm F ze (S n)).
Proof.
  intros Hn; apply step_from_aligned; [| apply zterm_nonneg |].
  - apply Rmult_le_pos; [apply pos_INR | apply bpow_ge_0].
  - rewrite <- sumv_terms.
    eapply Rle_trans;
      [apply (@aligned_z_err_all F rnd_al V_al ze (mu c l)); [apply mu_nonneg | apply terms_bpow]|].
    assert (Hlen : (length (terms c l) <= S n)%nat)
      by (unfold terms; simpl; rewrite map_length; lia).
    apply Rplus_le_compat; [|apply zterm_mono; exact Hlen].
    apply Rmult_le_compat_r; [apply mu_nonneg|].
    apply Rmult_le_compat_r; [apply bpow_ge_0|].
    apply le_INR; exact Hlen.
Qed.

(* The top term is exact: a product is a multiple of 2^(expo a + expo b - 2(prec_i - 1)),
   c (in the output format) a multiple of 2^(expo c - F) when prec_o - 1 <= F. *)
Lemma prod_exact ab :
  (2 * (f_prec fi - 1) <= F)%Z -> in_format fi (fst ab) -> in_format fi (snd ab) ->
  generic_format radix2 (FIX_exp (snd (prod_term ab) - F)) (fst (prod_term ab)).
Proof.
  intros HF Ha Hb; destruct ab as [a b]; unfold prod_term; cbn [fst snd] in *.
  set (ea := expo fi a); set (eb := expo fi b).
  set (ma := Ztrunc (scaled_mantissa radix2 (fexp fi) a)).
  set (mb := Ztrunc (scaled_mantissa radix2 (fexp fi) b)).
  assert (Ea : a = F2R (Float radix2 ma (ea - (f_prec fi - 1))))
    by exact (format_as_float fi a Ha).
  assert (Eb : b = F2R (Float radix2 mb (eb - (f_prec fi - 1))))
    by exact (format_as_float fi b Hb).
  assert (Hab : a * b = F2R (Float radix2 (ma * mb) (ea + eb - 2 * (f_prec fi - 1)))).
  { rewrite Ea at 1; rewrite Eb at 1; unfold F2R; cbn [Fnum Fexp]; rewrite mult_IZR.
    replace (ea + eb - 2 * (f_prec fi - 1))%Z
      with ((ea - (f_prec fi - 1)) + (eb - (f_prec fi - 1)))%Z by ring.
    rewrite bpow_plus; ring. }
  rewrite Hab; apply generic_format_F2R; intros _; unfold cexp, FIX_exp; cbv beta; lia.
Qed.

Lemma c_exact c :
  (f_prec fo - 1 <= F)%Z -> (normal_emin fc - F <= f_emin fo)%Z -> in_format fo c ->
  generic_format radix2 (FIX_exp (expo fc c - F)) c.
Proof.
  intros H1 H2 Hc; unfold in_format, generic_format in Hc.
  set (e := cexp radix2 (fexp fo) c) in *.
  assert (He : e = Z.max (mag radix2 c - f_prec fo) (f_emin fo)) by reflexivity.
  rewrite Hc at 2; apply generic_format_F2R; intros _.
  unfold cexp, FIX_exp; cbv beta; rewrite He; unfold expo, normal_emin in *; lia.
Qed.

Lemma prods_exact (M : R) l :
  (2 * (f_prec fi - 1) <= F)%Z ->
  Forall (fun ab => in_format fi (fst ab) /\ in_format fi (snd ab)) l ->
  Forall (fun t => fst t <> 0 -> bpow radix2 (snd t) <= M) (map prod_term l) ->
  Forall (fun t => fst t <> 0 -> bpow radix2 (snd t) <= M /\
                   generic_format radix2 (FIX_exp (snd t - F)) (fst t)) (map prod_term l).
Proof.
  intros HF; induction 1 as [|ab l [Ha Hb] _ IH]; simpl; intros H; [constructor|].
  inversion H as [|? ? H1 H2]; subst; constructor.
  - intros Hz; split; [auto | apply prod_exact; assumption].
  - apply IH; exact H2.
Qed.

Theorem step_err_top (n : nat) c l :
  (2 * (f_prec fi - 1) <= F)%Z -> (f_prec fo - 1 <= F)%Z ->
  (normal_emin fc - F <= f_emin fo)%Z ->
  (length l <= n)%nat -> in_format fo c ->
  Forall (fun ab => in_format fi (fst ab) /\ in_format fi (snd ab)) l ->
  Rabs (step c l - (c + psum l))
    <= (INR n * bpow radix2 (- F) + u * (1 + INR n * bpow radix2 (- F))) * mu c l
       + (s + (1 + u) * zterm F ze (S n)).
Proof.
  intros HFi HFo HFc Hn Hc Hl; apply step_from_aligned; [| apply zterm_nonneg |].
  - apply Rmult_le_pos; [apply pos_INR | apply bpow_ge_0].
  - rewrite <- sumv_terms.
    assert (Hlen : (length (terms c l) <= S n)%nat)
      by (unfold terms; simpl; rewrite map_length; lia).
    eapply Rle_trans;
      [apply (@aligned_z_err_top F rnd_al V_al ze (mu c l)); [discriminate | apply mu_nonneg |]|].
    + pose proof (terms_bpow c l) as Hb; unfold terms in *.
      inversion Hb as [|t0 l0 Hb0 Hbl]; subst; constructor.
      * intros Hz; split; [apply Hb0; exact Hz | apply c_exact; assumption].
      * apply prods_exact; assumption.
    + apply Rplus_le_compat; [|apply zterm_mono; exact Hlen].
      apply Rmult_le_compat_r; [apply mu_nonneg|].
      apply Rmult_le_compat_r; [apply bpow_ge_0|].
      unfold terms; cbn [length]; rewrite map_length, S_INR.
      replace (INR (length l) + 1 - 1) with (INR (length l)) by ring.
      apply le_INR; exact Hn.
Qed.

(* The same bounds with |c| in place of pad c (pad c <= |c| + 2^emin_normal(fc)). *)
Lemma to_abs_c (e s' d : R) c l :
  0 <= e ->
  Rabs (d - (c + psum l)) <= e * mu c l + s' ->
  Rabs (d - (c + psum l))
    <= e * (Rabs c + pmag l) + (e * bpow radix2 (normal_emin fc) + s').
Proof.
  intros He H; eapply Rle_trans; [exact H|]; unfold mu.
  pose proof (pad_le fc c); nra.
Qed.

(* A unit that adds exactly (align_bits = None): only the final operation errs. *)
Definition step_exact (c : R) (l : list (R * R)) : R := final (c + psum l).

Theorem step_exact_err c l :
  Rabs (step_exact c l - (c + psum l)) <= u * mu c l + s.
Proof.
  unfold step_exact; pose proof (round_err (c + psum l)); pose proof (exact_le_mu c l).
  assert (u * Rabs (c + psum l) <= u * mu c l) by (apply Rmult_le_compat_l; assumption).
  lra.
Qed.
End Step.
