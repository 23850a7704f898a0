(* thrifty: the bound's constants computed exactly in Q, to compare them with the
   numbers thrifty's Python side reports (vm_compute on exact rationals). *)
From Coq Require Import ZArith Reals QArith Qpower Qreals Lia Lra.
From Flocq Require Import Core.
From Thrifty Require Import Formats Dot.
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
