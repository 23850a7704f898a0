(* thrifty: a unit's dot product and matrix product, and their a priori bounds.
   [udot n c l]: the vector l of pairs (a_i, b_i) cut into blocks of n products, one fused
   step per block (Step.v), each step's result the addend of the next (Chain.v).
   [matmul n A B C k i j]: entry (i, j) of C + A B, A B of inner dimension k, computed as
   [udot n (C i j) [(A i 0, B 0 j); ...; (A i (k-1), B (k-1) j)]]. *)
From Coq Require Import ZArith Reals List Lia Lra QArith Qreals.
From Flocq Require Import Core.
From Thrifty Require Import Formats Align Step Chain.
Import ListNotations.
Open Scope R_scope.

Lemma psum_app l1 l2 : psum (l1 ++ l2) = psum l1 + psum l2.
Proof. induction l1 as [|ab l IH]; simpl; [ring | rewrite IH; ring]. Qed.

Lemma pmag_app fi l1 l2 : pmag fi (l1 ++ l2) = pmag fi l1 + pmag fi l2.
Proof. induction l1 as [|ab l IH]; simpl; [ring | rewrite IH; ring]. Qed.

Lemma Forall_concat_inv {A : Type} (Q : A -> Prop) bs :
  Forall Q (concat bs) -> Forall (Forall Q) bs.
Proof.
  induction bs as [|b t IH]; simpl; intros H; [constructor|].
  apply Forall_app in H; destruct H; constructor; auto.
Qed.

(* the per-step constants: eps = n 2^-F + u (1 + n 2^-F), eta = eps 2^emin_normal(fc) + s *)
Definition eps_R (n : nat) (F : Z) (u : R) : R :=
  INR n * bpow radix2 (- F) + u * (1 + INR n * bpow radix2 (- F)).
Definition eta_R (fc : fmt) (eps s : R) : R := eps * bpow radix2 (normal_emin fc) + s.

Lemma eps_R_nonneg n F u : 0 <= u -> 0 <= eps_R n F u.
Proof.
  intros Hu; unfold eps_R; pose proof (pos_INR n); pose proof (bpow_ge_0 radix2 (- F)).
  assert (0 <= INR n * bpow radix2 (- F)) by (apply Rmult_le_pos; lra).
  assert (0 <= u * (1 + INR n * bpow radix2 (- F))) by (apply Rmult_le_pos; lra).
  lra.
Qed.

Section Dot.
Variables (fi fc fo : fmt) (F : Z).
Variable ze : option Z.
Variable rnd_al : R -> Z.
Context {V_al : Valid_rnd rnd_al}.
Variable final : R -> R.
Variables (u s : R).
Hypothesis u_pos : 0 <= u.
Hypothesis s_pos : 0 <= s.
Hypothesis round_err :
  forall x, Rabs (final x - x) <= u * Rabs x + s.
Hypothesis final_format : forall x, in_format fo (final x).

Definition ustep : R -> list (R * R) -> R := step fi fc F ze rnd_al final.
Definition udot (n : nat) (c : R) (l : list (R * R)) : R := dot _ ustep c (chunks n l).

Definition mat := nat -> nat -> R.
Definition row_col (A B : mat) (k i j : nat) : list (R * R) :=
  map (fun p => (A i p, B p j)) (seq 0 k).
Definition matmul (n : nat) (A B C : mat) (k i j : nat) : R :=
  udot n (C i j) (row_col A B k i j).

Let inputs (l : list (R * R)) : Prop :=
  Forall (fun ab => in_format fi (fst ab) /\ in_format fi (snd ab)) l.

Lemma exact_dot_chunks n c l : (0 < n)%nat ->
  exact_dot _ psum c (chunks n l) = c + psum l.
Proof.
  intros Hn; rewrite exact_dot_shift; f_equal.
  rewrite <- (chunks_concat n l Hn) at 2.
  induction (chunks n l) as [|b t IH]; simpl; [reflexivity|].
  rewrite exact_dot_shift, IH, psum_app; ring.
Qed.

Lemma magn_chunks n l : (0 < n)%nat -> magn _ (pmag fi) (chunks n l) = pmag fi l.
Proof.
  intros Hn; rewrite <- (chunks_concat n l Hn) at 2.
  induction (chunks n l) as [|b t IH]; simpl; [reflexivity|].
  rewrite IH, pmag_app; reflexivity.
Qed.

(* The bound when the top term is exact (2 (p_i - 1) <= F, p_o - 1 <= F): n truncated
   terms per step at most. *)
Theorem dot_bound_top (n steps : nat) c l :
  (2 * (f_prec fi - 1) <= F)%Z -> (f_prec fo - 1 <= F)%Z ->
  (normal_emin fc - F <= f_emin fo)%Z ->
  (0 < n)%nat -> (length l <= steps * n)%nat -> in_format fo c -> inputs l ->
  let eps := eps_R n F u in let eta := eta_R fc eps (s + (1 + u) * zterm F ze (S n)) in
  Rabs (udot n c l - (c + psum l))
    <= ((1 + eps) ^ steps - 1) * (Rabs c + pmag fi l) + INR steps * eta * (1 + eps) ^ steps.
Proof.
  intros HFi HFo HFc Hn HS Hc Hl eps eta.
  assert (He : 0 <= eps) by (apply eps_R_nonneg; exact u_pos).
  assert (Heta : 0 <= eta)
    by (unfold eta, eta_R; pose proof (bpow_ge_0 radix2 (normal_emin fc));
        pose proof (zterm_nonneg F ze (S n));
        apply Rplus_le_le_0_compat; [apply Rmult_le_pos|]; [assumption|assumption|];
        apply Rplus_le_le_0_compat; [|apply Rmult_le_pos]; lra).
  unfold udot; rewrite <- (exact_dot_chunks n c l Hn), <- (magn_chunks n l Hn).
  apply (chain_bound_le _ ustep psum (pmag fi) (in_format fo)
           (fun b => (length b <= n)%nat /\ inputs b)); auto.
  - intros b _; apply psum_le_pmag.
  - intros c' b _ _; unfold ustep, step.
    apply final_format.
  - intros c' b Hc' [Hb Hbi].
    apply to_abs_c; [exact He|].
    apply (step_err_top fi fc fo); assumption.
  - pose proof (chunks_small n l) as Hsm.
    assert (Hin : Forall (Forall (fun ab => in_format fi (fst ab) /\ in_format fi (snd ab)))
                         (chunks n l)).
    { apply Forall_concat_inv; rewrite chunks_concat; assumption. }
    clear -Hsm Hin; induction (chunks n l) as [|b t IH]; [constructor|].
    inversion Hsm; inversion Hin; subst; constructor; auto.
  - apply chunks_count; assumption.
Qed.

(* Any inputs: n + 1 truncated terms per step at most. *)
Theorem dot_bound_all (n steps : nat) c l :
  (0 < n)%nat -> (length l <= steps * n)%nat ->
  let eps := eps_R (n + 1) F u in let eta := eta_R fc eps (s + (1 + u) * zterm F ze (S n)) in
  Rabs (udot n c l - (c + psum l))
    <= ((1 + eps) ^ steps - 1) * (Rabs c + pmag fi l) + INR steps * eta * (1 + eps) ^ steps.
Proof.
  intros Hn HS eps eta.
  assert (He : 0 <= eps) by (apply eps_R_nonneg; exact u_pos).
  assert (Heta : 0 <= eta)
    by (unfold eta, eta_R; pose proof (bpow_ge_0 radix2 (normal_emin fc));
        pose proof (zterm_nonneg F ze (S n));
        apply Rplus_le_le_0_compat; [apply Rmult_le_pos|]; [assumption|assumption|];
        apply Rplus_le_le_0_compat; [|apply Rmult_le_pos]; lra).
  unfold udot; rewrite <- (exact_dot_chunks n c l Hn), <- (magn_chunks n l Hn).
  apply (chain_bound_le _ ustep psum (pmag fi) (fun _ => True)
           (fun b => (length b <= n)%nat)); auto.
  - intros b _; apply psum_le_pmag.
  - intros c' b _ Hb.
    apply to_abs_c; [exact He|].
    unfold eps, eps_R; replace (n + 1)%nat with (S n) by lia.
    apply step_err_all; assumption.
  - apply chunks_small.
  - apply chunks_count; assumption.
Qed.

Lemma row_col_length A B k i j : length (row_col A B k i j) = k.
Proof. unfold row_col; rewrite map_length, seq_length; reflexivity. Qed.

Lemma row_col_inputs (A B : mat) k i j :
  (forall p, (p < k)%nat -> in_format fi (A i p) /\ in_format fi (B p j)) ->
  inputs (row_col A B k i j).
Proof.
  intros H; unfold inputs, row_col; apply Forall_map, Forall_forall.
  intros p Hp; apply in_seq in Hp; apply H; lia.
Qed.

(* Every entry of C + A B (inner dimension k <= S n) obeys the dot product bound. *)
Theorem matmul_bound_top (n steps : nat) (A B C : mat) k :
  (2 * (f_prec fi - 1) <= F)%Z -> (f_prec fo - 1 <= F)%Z ->
  (normal_emin fc - F <= f_emin fo)%Z ->
  (0 < n)%nat -> (k <= steps * n)%nat ->
  forall i j, in_format fo (C i j) ->
  (forall p, (p < k)%nat -> in_format fi (A i p) /\ in_format fi (B p j)) ->
  let eps := eps_R n F u in let eta := eta_R fc eps (s + (1 + u) * zterm F ze (S n)) in
  Rabs (matmul n A B C k i j - (C i j + psum (row_col A B k i j)))
    <= ((1 + eps) ^ steps - 1) * (Rabs (C i j) + pmag fi (row_col A B k i j))
       + INR steps * eta * (1 + eps) ^ steps.
Proof.
  intros HFi HFo HFc Hn Hk i j Hc Hab; unfold matmul.
  apply dot_bound_top; auto; [rewrite row_col_length; exact Hk | apply row_col_inputs; auto].
Qed.

Theorem matmul_bound_all (n steps : nat) (A B C : mat) k :
  (0 < n)%nat -> (k <= steps * n)%nat ->
  forall i j,
  let eps := eps_R (n + 1) F u in let eta := eta_R fc eps (s + (1 + u) * zterm F ze (S n)) in
  Rabs (matmul n A B C k i j - (C i j + psum (row_col A B k i j)))
    <= ((1 + eps) ^ steps - 1) * (Rabs (C i j) + pmag fi (row_col A B k i j))
       + INR steps * eta * (1 + eps) ^ steps.
Proof.
  intros Hn Hk i j; unfold matmul.
  apply dot_bound_all; auto; rewrite row_col_length; exact Hk.
Qed.

(* Exact alignment (align_bits = None). *)
Definition udot_exact (n : nat) (c : R) (l : list (R * R)) : R :=
  dot _ (step_exact final) c (chunks n l).
Definition matmul_exact (n : nat) (A B C : mat) (k i j : nat) : R :=
  udot_exact n (C i j) (row_col A B k i j).

Theorem dot_bound_exact (n steps : nat) c l :
  (0 < n)%nat -> (length l <= steps * n)%nat ->
  let eta := eta_R fc u s in
  Rabs (udot_exact n c l - (c + psum l))
    <= ((1 + u) ^ steps - 1) * (Rabs c + pmag fi l) + INR steps * eta * (1 + u) ^ steps.
Proof.
  intros Hn HS eta.
  assert (Heta : 0 <= eta)
    by (unfold eta, eta_R; pose proof (bpow_ge_0 radix2 (normal_emin fc));
        apply Rplus_le_le_0_compat; [apply Rmult_le_pos|]; assumption).
  unfold udot_exact; rewrite <- (exact_dot_chunks n c l Hn), <- (magn_chunks n l Hn).
  apply (chain_bound_le _ (step_exact final) psum (pmag fi) (fun _ => True)
           (fun b => (length b <= n)%nat)); auto.
  - intros b _; apply psum_le_pmag.
  - intros c' b _ _.
    apply (to_abs_c fi fc); [exact u_pos|].
    apply (step_exact_err fi fc final u s u_pos round_err).
  - apply chunks_small.
  - apply chunks_count; assumption.
Qed.

Theorem matmul_bound_exact (n steps : nat) (A B C : mat) k :
  (0 < n)%nat -> (k <= steps * n)%nat ->
  forall i j, let eta := eta_R fc u s in
  Rabs (matmul_exact n A B C k i j - (C i j + psum (row_col A B k i j)))
    <= ((1 + u) ^ steps - 1) * (Rabs (C i j) + pmag fi (row_col A B k i j))
       + INR steps * eta * (1 + u) ^ steps.
Proof.
  intros Hn Hk i j; unfold matmul_exact.
  apply dot_bound_exact; auto; rewrite row_col_length; exact Hk.
Qed.
End Dot.
