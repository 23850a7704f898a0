(* thrifty: a dot product as the unit computes it (a chain of fused steps over blocks of
   at most [n] products, the result of each step the addend of the next) and its a priori
   error bound: ((1+eps)^S - 1) (|c| + sum pad(a_i) pad(b_i)) + S eta (1+eps)^S for S
   steps, from a per-step bound eps (|c| + block magnitude) + eta. *)
From Coq Require Import ZArith Reals List Lia Lra.
Import ListNotations.
Open Scope R_scope.

Section Chain.
Variable X : Type.
Variable step : R -> list X -> R.
Variable ex : list X -> R.
Variable P : list X -> R.
Variable okc : R -> Prop.
Variable okb : list X -> Prop.
Variables eps eta : R.
Hypothesis eps_pos : 0 <= eps.
Hypothesis eta_pos : 0 <= eta.
Hypothesis ex_le : forall b, okb b -> Rabs (ex b) <= P b.
Hypothesis step_ok : forall c b, okc c -> okb b -> okc (step c b).
Hypothesis step_err :
  forall c b, okc c -> okb b -> Rabs (step c b - (c + ex b)) <= eps * (Rabs c + P b) + eta.

Fixpoint dot (c : R) (bs : list (list X)) : R :=
  match bs with nil => c | b :: t => dot (step c b) t end.
Fixpoint exact_dot (c : R) (bs : list (list X)) : R :=
  match bs with nil => c | b :: t => exact_dot (c + ex b) t end.
Fixpoint magn (bs : list (list X)) : R :=
  match bs with nil => 0 | b :: t => P b + magn t end.

Lemma exact_dot_shift c bs : exact_dot c bs = c + exact_dot 0 bs.
Proof.
  revert c; induction bs as [|b t IH]; intros c; simpl; [ring|].
  rewrite IH, (IH (0 + ex b)); ring.
Qed.

Lemma magn_nonneg bs : Forall okb bs -> 0 <= magn bs.
Proof.
  induction 1 as [|b t Hb _ IH]; simpl; [lra|].
  pose proof (ex_le b Hb); pose proof (Rabs_pos (ex b)); lra.
Qed.

Theorem chain_bound bs : forall c, okc c -> Forall okb bs ->
  Rabs (dot c bs - exact_dot c bs)
    <= ((1 + eps) ^ length bs - 1) * (Rabs c + magn bs)
       + INR (length bs) * eta * (1 + eps) ^ length bs.
Proof.
  induction bs as [|b t IH]; intros c Hc Hbs; cbn [dot exact_dot magn length].
  - replace (c - c) with 0 by ring; rewrite Rabs_R0; simpl; lra.
  - inversion Hbs as [|? ? Hb Ht]; subst.
    set (d := step c b).
    set (e1 := d - (c + ex b)).
    assert (He1 : Rabs e1 <= eps * (Rabs c + P b) + eta) by (apply step_err; assumption).
    assert (Hd : okc d) by (apply step_ok; assumption).
    specialize (IH d Hd Ht).
    rewrite (exact_dot_shift (c + ex b)), (exact_dot_shift d) in *.
    replace (dot d t - (c + ex b + exact_dot 0 t))
      with ((dot d t - (d + exact_dot 0 t)) + e1) by (unfold e1; ring).
    set (g := (1 + eps) ^ length t) in *.
    assert (Hg : 1 <= g) by (apply pow_R1_Rle; lra).
    assert (HM : 0 <= magn t) by (apply magn_nonneg; exact Ht).
    assert (HP : Rabs (ex b) <= P b) by (apply ex_le; exact Hb).
    assert (Hdc : Rabs d <= Rabs c + P b + Rabs e1).
    { replace d with (c + ex b + e1) by (unfold e1; ring).
      eapply Rle_trans; [apply Rabs_triang|].
      pose proof (Rabs_triang c (ex b)); lra. }
    pose proof (Rabs_pos c); pose proof (Rabs_pos e1); pose proof (pos_INR (length t)).
    eapply Rle_trans; [apply Rabs_triang|].
    rewrite S_INR, <- tech_pow_Rmult; fold g.
    (* IH: (g-1)(|d| + M) + S' eta g;  total <= ((1+eps) g - 1)(|c| + P + M)
       + (S'+1) eta (1+eps) g *)
    assert (A : Rabs (dot d t - (d + exact_dot 0 t))
                <= (g - 1) * (Rabs c + P b + Rabs e1 + magn t) + INR (length t) * eta * g).
    { eapply Rle_trans; [exact IH|].
      apply Rplus_le_compat_r; apply Rmult_le_compat_l; lra. }
    assert (B : g * Rabs e1 <= g * (eps * (Rabs c + P b) + eta))
      by (apply Rmult_le_compat_l; lra).
    assert (C : g * eps * (Rabs c + P b) <= g * eps * (Rabs c + (P b + magn t))).
    { apply Rmult_le_compat_l; [apply Rmult_le_pos; lra | lra]. }
    assert (D : INR (length t) * eta * g + g * eta
                <= (INR (length t) + 1) * eta * ((1 + eps) * g)).
    { assert (0 <= eta * g * eps) by (apply Rmult_le_pos; [apply Rmult_le_pos|]; lra).
      assert (0 <= INR (length t) * (eta * g * eps)) by (apply Rmult_le_pos; lra).
      nra. }
    nra.
Qed.

Theorem chain_bound_le (S : nat) bs c : okc c -> Forall okb bs -> (length bs <= S)%nat ->
  Rabs (dot c bs - exact_dot c bs)
    <= ((1 + eps) ^ S - 1) * (Rabs c + magn bs) + INR S * eta * (1 + eps) ^ S.
Proof.
  intros Hc Hbs HS.
  eapply Rle_trans; [apply chain_bound; assumption|].
  assert (G : (1 + eps) ^ length bs <= (1 + eps) ^ S) by (apply Rle_pow; [lra | exact HS]).
  assert (G1 : 1 <= (1 + eps) ^ length bs) by (apply pow_R1_Rle; lra).
  pose proof (magn_nonneg bs Hbs); pose proof (Rabs_pos c).
  assert (I : INR (length bs) <= INR S) by (apply le_INR; exact HS).
  pose proof (pos_INR (length bs)).
  apply Rplus_le_compat.
  - apply Rmult_le_compat_r; lra.
  - apply Rmult_le_compat; try lra.
    + apply Rmult_le_pos; lra.
    + apply Rmult_le_compat_r; lra.
Qed.
End Chain.

(* blocks of at most n elements, in order *)
Fixpoint chunks_aux {A : Type} (fuel n : nat) (l : list A) : list (list A) :=
  match fuel with
  | O => nil
  | S f => match l with nil => nil | _ => firstn n l :: chunks_aux f n (skipn n l) end
  end.
Definition chunks {A : Type} (n : nat) (l : list A) : list (list A) :=
  chunks_aux (length l) n l.

Lemma chunks_aux_concat {A : Type} n (l : list A) fuel :
  (0 < n)%nat -> (length l <= fuel)%nat -> concat (chunks_aux fuel n l) = l.
Proof.
  revert l; induction fuel as [|f IH]; intros l Hn Hl.
  - destruct l; [reflexivity | simpl in Hl; lia].
  - destruct l as [|x l']; [reflexivity|].
    cbn [chunks_aux concat]; rewrite IH; [apply firstn_skipn | exact Hn |].
    rewrite skipn_length; cbn [length] in *; lia.
Qed.

Lemma chunks_concat {A : Type} n (l : list A) : (0 < n)%nat -> concat (chunks n l) = l.
Proof. intros Hn; apply chunks_aux_concat; auto. Qed.

Lemma chunks_aux_small {A : Type} n (l : list A) fuel :
  Forall (fun b => (length b <= n)%nat) (chunks_aux fuel n l).
Proof.
  revert l; induction fuel as [|f IH]; intros l; [constructor|].
  destruct l as [|x l']; [constructor|]; cbn [chunks_aux].
  constructor; [apply firstn_le_length | apply IH].
Qed.

Lemma chunks_small {A : Type} n (l : list A) : Forall (fun b => (length b <= n)%nat) (chunks n l).
Proof. apply chunks_aux_small. Qed.

Lemma chunks_aux_count {A : Type} n (l : list A) fuel S :
  (0 < n)%nat -> (length l <= fuel)%nat -> (length l <= S * n)%nat ->
  (length (chunks_aux fuel n l) <= S)%nat.
Proof.
  revert l S; induction fuel as [|f IH]; intros l S Hn Hl HS; [simpl; lia|].
  destruct l as [|x l']; [simpl; lia|]; cbn [chunks_aux length].
  destruct S as [|S']; [cbn [length] in HS; lia|].
  apply le_n_S, IH; [exact Hn | |]; rewrite skipn_length; cbn [length] in *; lia.
Qed.

Lemma chunks_count {A : Type} n (l : list A) S :
  (0 < n)%nat -> (length l <= S * n)%nat -> (length (chunks n l) <= S)%nat.
Proof. intros; apply chunks_aux_count; auto. Qed.
