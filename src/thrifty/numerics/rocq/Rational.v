(* thrifty: the bound's constants computed exactly in Q, to compare them with the
   numbers thrifty's Python side reports (vm_compute on exact rationals). *)
From Coq Require Import ZArith Reals List QArith Qpower Qreals Lia Lra.
From Flocq Require Import Core.
From Thrifty Require Import Formats Align Step Chain Dot.
Open Scope R_scope.

Fixpoint qpow (q : Q) (n : nat) : Q :=
  match n with O => 1%Q | S m => (q * qpow q m)%Q end.

Lemma Q2R_1 : Q2R 1 = 1.
Proof. unfold Q2R; simpl; field. Qed.

Lemma Q2R_inject_Z z : Q2R (inject_Z z) = IZR z.
Proof. unfold Q2R; simpl; field. Qed.

Lemma qpow_Q2R q n : Q2R (qpow q n) = Q2R q ^ n.
Proof. induction n as [|n IH]; simpl; [apply Q2R_1 | rewrite Q2R_mult, IH; reflexivity]. Qed.

Lemma bpow_Q2R z : bpow radix2 z = Q2R (Qpower (inject_Z 2) z).
Proof.
  destruct z as [|p|p]; simpl.
  - rewrite Q2R_1; reflexivity.
  - rewrite <- (Q2R_inject_Z (Z.pow_pos 2 p)); apply Qeq_eqR.
    rewrite <- (Zpower_Qpower 2 (Zpos p)) by lia; reflexivity.
  - rewrite Q2R_inv.
    + f_equal; rewrite <- (Q2R_inject_Z (Z.pow_pos 2 p)); apply Qeq_eqR.
      rewrite <- (Zpower_Qpower 2 (Zpos p)) by lia; reflexivity.
    + apply Qpower_not_0_positive; intros H; discriminate H.
Qed.

Lemma INR_Q2R n : INR n = Q2R (inject_Z (Z.of_nat n)).
Proof. rewrite Q2R_inject_Z, INR_IZR_INZ; reflexivity. Qed.

Definition two_pow (z : Z) : Q := Qpower (inject_Z 2) z.
Definition eps_Q (n : nat) (F : Z) (u : Q) : Q :=
  (inject_Z (Z.of_nat n) * two_pow (- F) + u * (1 + inject_Z (Z.of_nat n) * two_pow (- F)))%Q.
Definition eta_Q (emin_normal : Z) (eps s : Q) : Q := (eps * two_pow emin_normal + s)%Q.
Definition rel_Q (steps : nat) (eps : Q) : Q := (qpow (1 + eps) steps - 1)%Q.
Definition abs_Q (steps : nat) (eps eta : Q) : Q :=
  (inject_Z (Z.of_nat steps) * eta * qpow (1 + eps) steps)%Q.

Lemma eps_R_Q n F u : eps_R n F (Q2R u) = Q2R (eps_Q n F u).
Proof.
  unfold eps_R, eps_Q, two_pow.
  rewrite Q2R_plus, !Q2R_mult, Q2R_plus, Q2R_mult, Q2R_1, <- !bpow_Q2R, <- INR_Q2R.
  reflexivity.
Qed.

Lemma eta_R_Q fc e s : eta_R fc (Q2R e) (Q2R s) = Q2R (eta_Q (normal_emin fc) e s).
Proof. unfold eta_R, eta_Q, two_pow; rewrite Q2R_plus, Q2R_mult, <- bpow_Q2R; reflexivity. Qed.

Lemma rel_R_Q steps e : (1 + Q2R e) ^ steps - 1 = Q2R (rel_Q steps e).
Proof. unfold rel_Q; rewrite Q2R_minus, qpow_Q2R, Q2R_plus, Q2R_1; reflexivity. Qed.

Lemma abs_R_Q steps e h :
  INR steps * Q2R h * (1 + Q2R e) ^ steps = Q2R (abs_Q steps e h).
Proof.
  unfold abs_Q; rewrite !Q2R_mult, qpow_Q2R, Q2R_plus, Q2R_1, <- INR_Q2R; reflexivity.
Qed.

Lemma Q2R_0 : Q2R 0 = 0.
Proof. unfold Q2R; simpl; field. Qed.

(* q <= r decided by computation *)
Lemma Q2R_le_check q r : Qle_bool q r = true -> Q2R q <= Q2R r.
Proof. intros H; apply Qle_Rle, Qle_bool_imp_le, H. Qed.

(* the final rounding constants (u, s) as rationals *)
Lemma round_err_any_Q f (rnd : R -> Z) {V : Valid_rnd rnd} x :
  Rabs (round radix2 (fexp f) rnd x - x)
    <= Q2R (two_pow (1 - f_prec f)) * Rabs x + Q2R (two_pow (f_emin f)).
Proof. unfold two_pow; rewrite <- !bpow_Q2R; apply round_err_any; exact V. Qed.

Lemma round_err_ne_Q f x :
  Rabs (round radix2 (fexp f) ZnearestE x - x)
    <= Q2R (two_pow (- f_prec f)) * Rabs x + Q2R (two_pow (f_emin f) / inject_Z 2).
Proof.
  unfold two_pow; rewrite Q2R_div, Q2R_inject_Z, <- !bpow_Q2R; [apply round_err_ne|].
  intros H; discriminate H.
Qed.

Lemma two_pow_nonneg z : 0 <= Q2R (two_pow z).
Proof. unfold two_pow; rewrite <- bpow_Q2R; apply bpow_ge_0. Qed.

Lemma two_pow_half_nonneg z : 0 <= Q2R (two_pow z / inject_Z 2).
Proof.
  rewrite Q2R_div, Q2R_inject_Z; [|intros H; discriminate H].
  pose proof (two_pow_nonneg z); unfold Rdiv; apply Rmult_le_pos; [lra|].
  apply Rlt_le, Rinv_0_lt_compat; lra.
Qed.

Lemma Q2R_nonneg_check q : Qle_bool 0 q = true -> 0 <= Q2R q.
Proof. intros H; rewrite <- Q2R_0; apply Q2R_le_check, H. Qed.

(* The bounds of Dot.v with rational constants [rel] and [abs] that are checked, by
   computation, to be at least the proven ones: the form the exported instances use. *)
Section Checked.
Variables (fi fc fo : fmt) (F : Z).
Variable ze : option Z.
Variable rnd_al : R -> Z.
Context {V_al : Valid_rnd rnd_al}.
Variable final : R -> R.
Variables (uq sq : Q).
Hypothesis u_pos : 0 <= Q2R uq.
Hypothesis s_pos : 0 <= Q2R sq.
Hypothesis round_err :
  forall x, Rabs (final x - x) <= Q2R uq * Rabs x + Q2R sq.
Hypothesis final_format : forall x, in_format fo (final x).
Variables (n steps k : nat) (rel abs : Q).
Hypothesis Hn : (0 < n)%nat.
Hypothesis Hk : (k <= steps * n)%nat.

Definition zterm_Q : Q :=
  match ze with None => 0%Q | Some z => (inject_Z (Z.of_nat (S n)) * two_pow (z - F))%Q end.

Lemma s_total_Q :
  Q2R sq + (1 + Q2R uq) * zterm F ze (S n) = Q2R (sq + (1 + uq) * zterm_Q)%Q.
Proof.
  rewrite Q2R_plus, Q2R_mult, Q2R_plus, Q2R_1; f_equal; f_equal.
  unfold zterm_Q, zterm; destruct ze as [z|].
  - rewrite Q2R_mult, <- INR_Q2R; unfold two_pow; rewrite <- bpow_Q2R; reflexivity.
  - rewrite Q2R_0; reflexivity.
Qed.

Let checked (terms : nat) : Prop :=
  let eps := eps_Q terms F uq in
  Qle_bool 0 (rel_Q steps eps) = true /\ Qle_bool (rel_Q steps eps) rel = true /\
  Qle_bool (abs_Q steps eps (eta_Q (normal_emin fc) eps (sq + (1 + uq) * zterm_Q))) abs
    = true.

Lemma checked_bound (terms : nat) (c m : R) (x : R) :
  checked terms -> 0 <= m ->
  x <= ((1 + eps_R terms F (Q2R uq)) ^ steps - 1) * m
       + INR steps * eta_R fc (eps_R terms F (Q2R uq))
                             (Q2R sq + (1 + Q2R uq) * zterm F ze (S n))
         * (1 + eps_R terms F (Q2R uq)) ^ steps ->
  x <= Q2R rel * m + Q2R abs.
Proof.
  intros [H0 [H1 H2]] Hm Hx.
  rewrite s_total_Q, eps_R_Q, eta_R_Q, rel_R_Q, abs_R_Q in Hx.
  apply Q2R_nonneg_check in H0; apply Q2R_le_check in H1; apply Q2R_le_check in H2.
  eapply Rle_trans; [exact Hx|].
  apply Rplus_le_compat; [apply Rmult_le_compat_r|]; assumption.
Qed.

Theorem dot_bound_top_checked :
  (2 * (f_prec fi - 1) <= F)%Z -> (f_prec fo - 1 <= F)%Z ->
  (normal_emin fc - F <= f_emin fo)%Z -> checked n ->
  forall c l, (length l <= k)%nat -> in_format fo c ->
  Forall (fun ab => in_format fi (fst ab) /\ in_format fi (snd ab)) l ->
  Rabs (udot fi fc F ze rnd_al final n c l - (c + psum l))
    <= Q2R rel * (Rabs c + pmag fi l) + Q2R abs.
Proof.
  intros H1 H2 H3 Hc c l Hl Hcf Hin.
  apply (checked_bound n c); [exact Hc | |].
  - pose proof (Rabs_pos c); pose proof (Step.pmag_nonneg fi l); lra.
  - apply (dot_bound_top fi fc fo); auto; lia.
Qed.

Theorem dot_bound_all_checked :
  checked (n + 1) ->
  forall c l, (length l <= k)%nat ->
  Rabs (udot fi fc F ze rnd_al final n c l - (c + psum l))
    <= Q2R rel * (Rabs c + pmag fi l) + Q2R abs.
Proof.
  intros Hc c l Hl.
  apply (checked_bound (n + 1) c); [exact Hc | |].
  - pose proof (Rabs_pos c); pose proof (Step.pmag_nonneg fi l); lra.
  - apply dot_bound_all; auto; lia.
Qed.

Theorem matmul_bound_top_checked :
  (2 * (f_prec fi - 1) <= F)%Z -> (f_prec fo - 1 <= F)%Z ->
  (normal_emin fc - F <= f_emin fo)%Z -> checked n ->
  forall (A B C : mat) i j, in_format fo (C i j) ->
  (forall p, (p < k)%nat -> in_format fi (A i p) /\ in_format fi (B p j)) ->
  Rabs (matmul fi fc F ze rnd_al final n A B C k i j - (C i j + psum (row_col A B k i j)))
    <= Q2R rel * (Rabs (C i j) + pmag fi (row_col A B k i j)) + Q2R abs.
Proof.
  intros H1 H2 H3 Hc A B C i j Hcf Hin.
  apply (checked_bound n (C i j)); [exact Hc | |].
  - pose proof (Rabs_pos (C i j)); pose proof (Step.pmag_nonneg fi (row_col A B k i j)); lra.
  - apply (matmul_bound_top fi fc fo); auto.
Qed.

Theorem matmul_bound_all_checked :
  checked (n + 1) ->
  forall (A B C : mat) i j,
  Rabs (matmul fi fc F ze rnd_al final n A B C k i j - (C i j + psum (row_col A B k i j)))
    <= Q2R rel * (Rabs (C i j) + pmag fi (row_col A B k i j)) + Q2R abs.
Proof.
  intros Hc A B C i j.
  apply (checked_bound (n + 1) (C i j)); [exact Hc | |].
  - pose proof (Rabs_pos (C i j)); pose proof (Step.pmag_nonneg fi (row_col A B k i j)); lra.
  - apply matmul_bound_all; auto.
Qed.
Let checked_exact : Prop :=
  Qle_bool 0 (rel_Q steps uq) = true /\ Qle_bool (rel_Q steps uq) rel = true /\
  Qle_bool (abs_Q steps uq (eta_Q (normal_emin fc) uq sq)) abs = true.

Lemma checked_exact_bound (m x : R) :
  checked_exact -> 0 <= m ->
  x <= ((1 + Q2R uq) ^ steps - 1) * m
       + INR steps * eta_R fc (Q2R uq) (Q2R sq) * (1 + Q2R uq) ^ steps ->
  x <= Q2R rel * m + Q2R abs.
Proof.
  intros [H0 [H1 H2]] Hm Hx.
  rewrite eta_R_Q, rel_R_Q, abs_R_Q in Hx.
  apply Q2R_nonneg_check in H0; apply Q2R_le_check in H1; apply Q2R_le_check in H2.
  eapply Rle_trans; [exact Hx|].
  apply Rplus_le_compat; [apply Rmult_le_compat_r|]; assumption.
Qed.

Theorem dot_bound_exact_checked :
  checked_exact ->
  forall c l, (length l <= k)%nat ->
  Rabs (udot_exact final n c l - (c + psum l))
    <= Q2R rel * (Rabs c + pmag fi l) + Q2R abs.
Proof.
  intros Hc c l Hl.
  apply checked_exact_bound; [exact Hc | |].
  - pose proof (Rabs_pos c); pose proof (Step.pmag_nonneg fi l); lra.
  - apply dot_bound_exact; auto; lia.
Qed.

Theorem matmul_bound_exact_checked :
  checked_exact ->
  forall (A B C : mat) i j,
  Rabs (matmul_exact final n A B C k i j - (C i j + psum (row_col A B k i j)))
    <= Q2R rel * (Rabs (C i j) + pmag fi (row_col A B k i j)) + Q2R abs.
Proof.
  intros Hc A B C i j.
  apply checked_exact_bound; [exact Hc | |].
  - pose proof (Rabs_pos (C i j)); pose proof (Step.pmag_nonneg fi (row_col A B k i j)); lra.
  - apply matmul_bound_exact; auto.
Qed.
End Checked.

(* a normaliser [g] then a rounding [h]: their errors compose *)
Lemma compose_err_Q (g h : R -> R) (u1 s1 u2 s2 : Q) :
  0 <= Q2R u2 ->
  (forall x, Rabs (g x - x) <= Q2R u1 * Rabs x + Q2R s1) ->
  (forall x, Rabs (h x - x) <= Q2R u2 * Rabs x + Q2R s2) ->
  forall x, Rabs (h (g x) - x)
    <= Q2R ((1 + u1) * (1 + u2) - 1) * Rabs x + Q2R (s2 + (1 + u2) * s1).
Proof.
  intros Hu2 Hg Hh x.
  rewrite Q2R_minus, !Q2R_mult, !Q2R_plus, Q2R_mult, Q2R_plus, Q2R_1.
  pose proof (Hg x) as G; pose proof (Hh (g x)) as H.
  assert (Hgx : Rabs (g x) <= Rabs x + (Q2R u1 * Rabs x + Q2R s1)).
  { replace (g x) with ((g x - x) + x) by ring.
    eapply Rle_trans; [apply Rabs_triang|]; lra. }
  replace (h (g x) - x) with ((h (g x) - g x) + (g x - x)) by ring.
  eapply Rle_trans; [apply Rabs_triang|].
  assert (Q2R u2 * Rabs (g x) <= Q2R u2 * (Rabs x + (Q2R u1 * Rabs x + Q2R s1)))
    by (apply Rmult_le_compat_l; assumption).
  nra.
Qed.

Lemma round_in_format f (rnd : R -> Z) {V : Valid_rnd rnd} x :
  in_format f (round radix2 (fexp f) rnd x).
Proof.
  apply generic_format_round; [unfold fexp; apply FLT_exp_valid; apply f_prec_pos | exact V].
Qed.

Lemma flush_err_Q f x :
  Rabs (flush f x - x) <= Q2R 0 * Rabs x + Q2R (two_pow (normal_emin f)).
Proof. rewrite Q2R_0; unfold two_pow; rewrite <- bpow_Q2R; apply flush_err. Qed.

(* the side conditions of an instance, decided by computation *)
Ltac check_goal :=
  match goal with
  | |- let _ := _ in _ => cbv zeta; check_goal
  | |- _ /\ _ => split; check_goal
  | |- (_ < _)%nat => apply Nat.ltb_lt; vm_compute; reflexivity
  | |- (_ <= _)%nat => apply Nat.leb_le; vm_compute; reflexivity
  | |- (_ <= _)%Z => apply Z.leb_le; vm_compute; reflexivity
  | |- (_ < _)%Z => apply Z.ltb_lt; vm_compute; reflexivity
  | |- _ => vm_compute; reflexivity
  end.
