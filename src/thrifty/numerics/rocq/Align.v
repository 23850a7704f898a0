(* thrifty: the aligned sum of a fused step.  Every term is kept to a multiple of
   2^(E - F), where E is the largest alignment exponent of a nonzero term and F the window
   (fraction bits kept below E); the bits shifted out are dropped by any integer rounding
   [rnd_al] (Ztrunc: truncation of the magnitude, Zfloor: round down).  The kept terms are
   added exactly. *)
From Coq Require Import ZArith Reals List Lia Lra.
From Flocq Require Import Core.
Import ListNotations.
Open Scope R_scope.

(* a term: its value and its alignment exponent *)
Definition term := (R * Z)%type.

Fixpoint top (l : list term) : option Z :=
  match l with
  | nil => None
  | t :: l' =>
      if Req_EM_T (fst t) 0 then top l'
      else Some (match top l' with None => snd t | Some e => Z.max (snd t) e end)
  end.

Fixpoint sumv (l : list term) : R :=
  match l with nil => 0 | t :: l' => fst t + sumv l' end.

Section Align.
Variable F : Z.
Variable rnd_al : R -> Z.
Context {V_al : Valid_rnd rnd_al}.

(* x kept to a multiple of 2^q: IZR (rnd_al (x * 2^-q)) * 2^q *)
Definition keep (q : Z) (x : R) : R := round radix2 (FIX_exp q) rnd_al x.

Fixpoint sumk (q : Z) (l : list term) : R :=
  match l with nil => 0 | t :: l' => keep q (fst t) + sumk q l' end.

Definition shift (l : list term) : Z :=
  match top l with None => 0%Z | Some e => (e - F)%Z end.

Definition aligned (l : list term) : R := sumk (shift l) l.

Lemma keep_def q x :
  keep q x = IZR (rnd_al (x * bpow radix2 (- q))) * bpow radix2 q.
Proof. reflexivity. Qed.

Lemma keep_err q x : Rabs (keep q x - x) <= bpow radix2 q.
Proof.
  unfold keep; rewrite <- (ulp_FIX radix2 q x).
  apply error_le_ulp; [apply FIX_exp_valid | exact V_al].
Qed.

Lemma keep_0 q : keep q 0 = 0.
Proof. unfold keep; apply round_0; exact V_al. Qed.

Lemma keep_exact q x : generic_format radix2 (FIX_exp q) x -> keep q x = x.
Proof. intros H; unfold keep; apply round_generic; [exact V_al | exact H]. Qed.

Lemma sumk_err q l : Rabs (sumk q l - sumv l) <= INR (length l) * bpow radix2 q.
Proof.
  induction l as [|t l IH]; cbn [sumk sumv length].
  - rewrite Rminus_0_r, Rabs_R0; simpl; lra.
  - pose proof (keep_err q (fst t)).
    replace (keep q (fst t) + sumk q l - (fst t + sumv l))
      with ((keep q (fst t) - fst t) + (sumk q l - sumv l)) by ring.
    eapply Rle_trans; [apply Rabs_triang|].
    rewrite S_INR, Rmult_plus_distr_r, Rmult_1_l, Rplus_comm.
    apply Rplus_le_compat; assumption.
Qed.

Lemma sumk_err_exact q l :
  Exists (fun t => keep q (fst t) = fst t) l ->
  Rabs (sumk q l - sumv l) <= (INR (length l) - 1) * bpow radix2 q.
Proof.
  induction 1 as [t l Ht|t l _ IH]; cbn [sumk sumv length]; rewrite S_INR.
  - rewrite Ht; replace (fst t + sumk q l - (fst t + sumv l)) with (sumk q l - sumv l)
      by ring.
    replace (INR (length l) + 1 - 1) with (INR (length l)) by ring; apply sumk_err.
  - pose proof (keep_err q (fst t)).
    replace (keep q (fst t) + sumk q l - (fst t + sumv l))
      with ((keep q (fst t) - fst t) + (sumk q l - sumv l)) by ring.
    eapply Rle_trans; [apply Rabs_triang|].
    replace ((INR (length l) + 1 - 1) * bpow radix2 q)
      with (bpow radix2 q + (INR (length l) - 1) * bpow radix2 q) by ring.
    apply Rplus_le_compat; assumption.
Qed.

Lemma top_none l : top l = None -> Forall (fun t => fst t = 0) l.
Proof.
  induction l as [|t l IH]; simpl; [constructor|].
  destruct (Req_EM_T (fst t) 0) as [H|H]; [intros Ht; constructor; auto|discriminate].
Qed.

Lemma top_some l e :
  top l = Some e -> Exists (fun t => fst t <> 0 /\ snd t = e) l.
Proof.
  revert e; induction l as [|t l IH]; simpl; intros e; [discriminate|].
  destruct (Req_EM_T (fst t) 0) as [H|H].
  - intros Ht; apply Exists_cons_tl; auto.
  - destruct (top l) as [e'|] eqn:Hl; intros Ht; injection Ht as <-.
    + destruct (Z.max_spec (snd t) e') as [[_ ->]|[_ ->]].
      * apply Exists_cons_tl; auto.
      * apply Exists_cons_hd; auto.
    + apply Exists_cons_hd; auto.
Qed.

Lemma sumk_zero q l : Forall (fun t => fst t = 0) l -> sumk q l = 0 /\ sumv l = 0.
Proof.
  induction 1 as [|t l Ht _ [IH1 IH2]]; simpl; [auto|].
  rewrite Ht, keep_0, IH1, IH2; split; ring.
Qed.

(* The aligned sum loses at most one window ulp 2^(E-F) per term, and nothing on a term
   whose last bit lies inside the window; [mu] bounds 2^E. *)
Theorem aligned_err_all (mu : R) (l : list term) :
  0 <= mu ->
  Forall (fun t => fst t <> 0 -> bpow radix2 (snd t) <= mu) l ->
  Rabs (aligned l - sumv l) <= INR (length l) * bpow radix2 (- F) * mu.
Proof.
  intros Hmu Hl; unfold aligned, shift.
  destruct (top l) as [e|] eqn:Ht.
  - apply top_some in Ht.
    apply Exists_exists in Ht; destruct Ht as [t [Hin [Hnz He]]].
    rewrite Forall_forall in Hl; specialize (Hl t Hin Hnz); rewrite He in Hl.
    eapply Rle_trans; [apply sumk_err|].
    rewrite Rmult_assoc; apply Rmult_le_compat_l; [apply pos_INR|].
    replace (e - F)%Z with (- F + e)%Z by ring; rewrite bpow_plus.
    apply Rmult_le_compat_l; [apply bpow_ge_0 | exact Hl].
  - apply top_none in Ht; destruct (sumk_zero 0 l Ht) as [-> ->].
    rewrite Rminus_0_r, Rabs_R0.
    apply Rmult_le_pos; [apply Rmult_le_pos; [apply pos_INR | apply bpow_ge_0]|exact Hmu].
Qed.

Theorem aligned_err_top (mu : R) (l : list term) :
  l <> nil -> 0 <= mu ->
  Forall (fun t => fst t <> 0 -> bpow radix2 (snd t) <= mu /\
                   generic_format radix2 (FIX_exp (snd t - F)) (fst t)) l ->
  Rabs (aligned l - sumv l) <= (INR (length l) - 1) * bpow radix2 (- F) * mu.
Proof.
  intros Hne Hmu Hl; unfold aligned, shift.
  destruct (top l) as [e|] eqn:Ht.
  - apply top_some in Ht.
    apply Exists_exists in Ht; destruct Ht as [t [Hin [Hnz He]]].
    rewrite Forall_forall in Hl; destruct (Hl t Hin Hnz) as [Hb Hf]; rewrite He in Hb, Hf.
    eapply Rle_trans; [apply sumk_err_exact|].
    + apply Exists_exists; exists t; split; [exact Hin|apply keep_exact; exact Hf].
    + rewrite Rmult_assoc; apply Rmult_le_compat_l.
      * destruct l; [contradiction|]; simpl length; rewrite S_INR; pose proof (pos_INR (length l)); lra.
      * replace (e - F)%Z with (- F + e)%Z by ring; rewrite bpow_plus.
        apply Rmult_le_compat_l; [apply bpow_ge_0 | exact Hb].
  - apply top_none in Ht; destruct (sumk_zero 0 l Ht) as [-> ->].
    rewrite Rminus_0_r, Rabs_R0.
    destruct l; [contradiction|]; simpl length; rewrite S_INR.
    pose proof (pos_INR (length l)); pose proof (bpow_ge_0 radix2 (- F)).
    replace (INR (length l) + 1 - 1) with (INR (length l)) by ring.
    apply Rmult_le_pos; [apply Rmult_le_pos|]; assumption.
Qed.

(* With a zero-term exponent [ze] (MMA-Sim's e_zero): when a term is zero, the alignment
   exponent is at least [ze]; every term then loses at most 2^(ze - F) more. *)
Definition is_zero (t : term) : bool := if Req_EM_T (fst t) 0 then true else false.
Definition shift_z (ze : option Z) (l : list term) : Z :=
  match ze with
  | Some z => if existsb is_zero l then Z.max (shift l) (z - F) else shift l
  | None => shift l
  end.
Definition aligned_z (ze : option Z) (l : list term) : R := sumk (shift_z ze l) l.
Definition zterm (ze : option Z) (m : nat) : R :=
  match ze with None => 0 | Some z => INR m * bpow radix2 (z - F) end.

Lemma zterm_nonneg ze m : 0 <= zterm ze m.
Proof.
  destruct ze; simpl; [apply Rmult_le_pos; [apply pos_INR | apply bpow_ge_0] | lra].
Qed.

Lemma zterm_mono ze m m' : (m <= m')%nat -> zterm ze m <= zterm ze m'.
Proof.
  intros H; destruct ze; simpl; [|lra].
  apply Rmult_le_compat_r; [apply bpow_ge_0 | apply le_INR; exact H].
Qed.

Lemma aligned_z_cases ze l (B : R) :
  0 <= B -> Rabs (aligned l - sumv l) <= B ->
  Rabs (aligned_z ze l - sumv l) <= B + zterm ze (length l).
Proof.
  intros HB Ha; pose proof (zterm_nonneg ze (length l)).
  unfold aligned_z, shift_z; destruct ze as [z|].
  - destruct (existsb is_zero l); [|fold (aligned l); lra].
    destruct (Z.max_spec (shift l) (z - F)) as [[_ ->]|[_ ->]]; [|fold (aligned l); lra].
    pose proof (sumk_err (z - F) l); simpl; lra.
  - fold (aligned l); simpl; lra.
Qed.

Theorem aligned_z_err_all ze (mu : R) (l : list term) :
  0 <= mu ->
  Forall (fun t => fst t <> 0 -> bpow radix2 (snd t) <= mu) l ->
  Rabs (aligned_z ze l - sumv l)
    <= INR (length l) * bpow radix2 (- F) * mu + zterm ze (length l).
Proof.
  intros Hmu Hl; apply aligned_z_cases; [|apply aligned_err_all; assumption].
  apply Rmult_le_pos; [apply Rmult_le_pos; [apply pos_INR | apply bpow_ge_0]|exact Hmu].
Qed.

Theorem aligned_z_err_top ze (mu : R) (l : list term) :
  l <> nil -> 0 <= mu ->
  Forall (fun t => fst t <> 0 -> bpow radix2 (snd t) <= mu /\
                   generic_format radix2 (FIX_exp (snd t - F)) (fst t)) l ->
  Rabs (aligned_z ze l - sumv l)
    <= (INR (length l) - 1) * bpow radix2 (- F) * mu + zterm ze (length l).
Proof.
  intros Hne Hmu Hl; apply aligned_z_cases; [|apply aligned_err_top; assumption].
  destruct l; [contradiction|]; simpl length; rewrite S_INR.
  replace (INR (length l) + 1 - 1) with (INR (length l)) by ring.
  apply Rmult_le_pos; [apply Rmult_le_pos; [apply pos_INR | apply bpow_ge_0]|exact Hmu].
Qed.
End Align.
