"""What the "Inside the model" page says at each stage: a few sentences with this input's and this model's numbers,
and the seed tutorials' code named by file and class or function (explorer.figures.forward_stages has the table)."""
from __future__ import annotations

import math

import numpy as np

from explorer.figures.forward_stages import TutorialRef
from explorer.i18n import tr


def tutorial_line(ref: TutorialRef, own: bool) -> str:
    """"tutorial 000 · `Attention.forward` (`scores`)", marked when the active model follows that tutorial's design."""
    text = tr("tutorial {n}", n=ref.tutorial) + f" · `{ref.code}`" + (f" (`{ref.part}`)" if ref.part else "")
    return text + (" ← " + tr("this model's design") if own else "")


def _placement(c, sub: str) -> str:
    return {
        "post": tr("The {sub}'s output is added to its input x (the residual connection) and the sum is normalized: "
                   "post-norm, as in BERT and d2l.", sub=sub),
        "pre": tr("x plus the {sub}'s output: the residual sum. There is no LayerNorm here: this pre-norm model "
                  "normalized before the sublayer.", sub=sub),
        "sublayer_output": tr("The {sub}'s output is normalized and then added to x (the blog's Add_Norm).", sub=sub),
    }[c.norm_placement]


def explanation(stage_id: str, model, tok, t, layer: int, head: int, token: int) -> str:
    """A few sentences for ``stage_id``, with this input's and this model's numbers."""
    c = model.config
    T, D, H, dk, F = len(t.tokens), c.hidden_size, c.num_attention_heads, c.head_dim, c.intermediate_size
    tokname = f"`{t.tokens[token]}`"
    p_hidden = c.hidden_dropout_prob
    drop = tr(" In training, dropout (p = {p}) acts on the sublayer's output first; it is off here (eval mode).",
              p=f"{p_hidden:g}") if p_hidden else ""
    if stage_id == "token":
        scale = tr(", multiplied by √D = {s} (Vaswani §3.4)", s=f"{math.sqrt(D):.3g}") if c.embedding_scale else ""
        return tr("Each token id picks its row of the token embedding table ({V} rows × {D} columns){scale}. The "
                  "chosen token {tok} has id {id}.", V=c.vocab_size, D=D, scale=scale, tok=tokname,
                  id=t.input_ids[token])
    if stage_id == "position":
        if c.position_embedding == "sinusoidal":
            return tr("Position t gets the fixed sinusoidal vector (Vaswani §3.5): no parameters, the same in every "
                      "model of this width. {tok} is at position {t}.", tok=tokname, t=token)
        trained = tr("learned in training") if c.train_position_embeddings else \
            tr("drawn at random and never trained (d2l adds pos_embedding.data)")
        return tr("Position t picks row t of the position table ({P} rows, {how}). {tok} is at position {t}.",
                  P=c.max_position_embeddings, how=trained, tok=tokname, t=token)
    if stage_id == "segment":
        rows = sorted(set(t.embedded_segment_ids)) if t.embedded_segment_ids else []
        return tr("Each token gets the vector of its sentence, A or B (BERT §3.2). This input uses the rows {rows} of "
                  "the segment table; {tok} is in sentence {s}.", rows=rows, tok=tokname,
                  s="A" if t.segment_ids[token] == 0 else "B")
    if stage_id == "sum":
        return tr("The vectors are added element by element; the sum has the same shape, {T} × {D}.", T=T, D=D)
    if stage_id in ("emb_norm", "attn_norm_before", "ffn_norm_before"):
        return tr("LayerNorm rescales each token's vector to mean 0 and variance 1 over its {D} dimensions, then "
                  "multiplies by γ and adds β (learned, one value per dimension). Each token is normalized on its "
                  "own, unlike batch normalization.", D=D)
    if stage_id == "qkv":
        x = tr("LN(x), the normalized layer input") if c.norm_placement == "pre" else tr("the layer input x")
        return tr("{x} is projected three times, by W_Q, W_K and W_V ({D} × {D} each). The {H} heads split the {D} "
                  "columns into {H} groups of d_k = {dk}; head {h} is shown, its Q, K and V side by side.", x=x, D=D,
                  H=H, dk=dk, h=head + 1)
    if stage_id == "scores":
        return tr("Row i holds the dot products of query i with every key: how well token i's query matches each "
                  "token's key. Rows are queries, columns are keys.")
    if stage_id == "scaled":
        return tr("Divided by √d_k = {s}: the dot product of two vectors of {dk} unit-variance numbers has variance "
                  "{dk}, and the division keeps the softmax out of its flat regions (Vaswani §3.2.1).",
                  s=f"{math.sqrt(dk):.4g}", dk=dk)
    if stage_id == "masked":
        if c.causal:
            hidden = max(0, T - 1 - token)
            return tr("This model reads left to right (attention_direction = left_to_right, BERT Table 5's LTR): the "
                      "mask is causal. Every score above the diagonal, a key to the right of its query, is set to −∞, "
                      "so the softmax gives it weight 0 and each token sees only itself and the tokens before it. "
                      "Row {tok} hides the {n} keys after it. Padded keys are masked as well (below: this input with "
                      "two [PAD] tokens).", tok=tokname, n=hidden)
        if not c.attention_padding_mask:
            return tr("This model has no padding mask (the blog's BertModel attends to padding): the scores pass "
                      "unchanged, and in a padded batch the [PAD] keys get weight too (below).")
        return tr("This input is one sequence without padding, so no key is masked and the matrix equals the previous "
                  "one. In a batch, shorter inputs are padded; the mask sets the scores of padded keys to −∞, so the "
                  "softmax gives them weight 0 (below: this input with two [PAD] tokens).")
    if stage_id == "softmax":
        probs = np.asarray(t.tensors[f"layer.{layer}.attention.probs"][head][token], dtype=np.float64)
        best = int(np.argmax(probs))
        return tr("Each row becomes a probability distribution over the keys. Row {tok} sums to {s}; it puts most "
                  "weight, {w}, on `{key}`.", tok=tokname, s=f"{probs.sum():.6f}", w=f"{probs[best]:.3f}",
                  key=t.tokens[best])
    if stage_id == "attn_dropout":
        p = c.attention_probs_dropout_prob
        if not p:
            return tr("Dropout is off when the model predicts (eval mode), and this model trains with rate 0, so "
                      "here it never changes anything.")
        return tr("Dropout is off when the model predicts (eval mode): the weights pass unchanged. In training this "
                  "model zeroes each weight with probability {p} and divides the others by 1 − p = {q}; below, one "
                  "draw for the chosen row (seed 0).", p=f"{p:g}", q=f"{1 - p:g}")
    if stage_id == "context":
        return tr("Each token's output of head {h} is the weighted average of the value vectors, with the attention "
                  "weights of its row: row i = Σ_j A_ij V_j ({dk} numbers).", h=head + 1, dk=dk)
    if stage_id == "concat":
        return tr("The {H} heads' outputs ({T} × {dk} each) are put side by side: {T} × {D}. Head {h}'s columns are "
                  "outlined.", H=H, T=T, dk=dk, D=D, h=head + 1)
    if stage_id == "w_o":
        return tr("W^O ({D} × {D}) mixes the heads: every output dimension reads all {H} heads.", D=D, H=H)
    if stage_id == "attn_add_norm":
        return _placement(c, tr("attention")) + drop
    if stage_id == "ffn_w1":
        return tr("Each token is widened from {D} to {F} dimensions, on its own (the FFN is position-wise).", D=D,
                  F=F)
    if stage_id == "ffn_act":
        z = np.asarray(t.tensors[f"layer.{layer}.ffn.pre_activation"][token])
        return tr("The activation acts on each of the {F} numbers separately; {n} of {tok}'s {F} inputs are negative, "
                  "and the activation brings them to or near 0.", F=F, n=int((z < 0).sum()), tok=tokname)
    if stage_id == "ffn_w2":
        return tr("Back from {F} to {D} dimensions.", F=F, D=D)
    if stage_id == "ffn_add_norm":
        block = tr(" BERT-pytorch's blocks end in one more dropout, also off in eval.") if c.block_dropout else ""
        return _placement(c, tr("FFN")) + drop + block
    if stage_id == "next_layer":
        if layer < c.num_hidden_layers - 1:
            return tr("Layer {l}'s output is the input x of layer {n}, which runs the same stages with its own "
                      "weights.", l=layer + 1, n=layer + 2)
        final = tr(" A final LayerNorm follows (pre-norm stacks need one).") if c.final_layer_norm else ""
        return tr("Layer {l} is the last one: its output is the encoder output h that the heads read.{final}",
                  l=layer + 1, final=final)
    if stage_id == "mlm" and c.causal:
        return tr("A left-to-right model's head predicts the next token: the final vector at position t gives a "
                  "probability for every word of the vocabulary ({V} words) as the token at t + 1, from the tokens up "
                  "to t alone (labels[t] = ids[t + 1] in training). It cannot fill a {mask}: it never sees the right "
                  "side.", V=c.vocab_size, mask=tok.mask_token)
    if stage_id == "mlm":
        return tr("The MLM head turns the final vector at each {mask} into a probability for every word of the "
                  "vocabulary ({V} words) (BERT §3.1).", mask=tok.mask_token, V=c.vocab_size)
    if stage_id == "nsp" and c.causal:
        pooled = tr("through the pooler, tanh(W h + b)") if c.nsp_head == "pooler" else tr("directly, without a pooler")
        return tr("Under the causal mask {cls} sees only itself, so this left-to-right model's sentence head reads the "
                  "final vector of the last real token {last} {pooled}, the only one that has seen the whole input.",
                  cls=f"`{t.tokens[0]}`", last=f"`{t.tokens[-1]}`", pooled=pooled)
    if stage_id == "nsp" and getattr(model, "sentence_task", "nsp") == "sop":
        pooled = tr("through the pooler, tanh(W h + b)") if c.nsp_head == "pooler" else tr("directly, without a pooler")
        return tr("This model's sentence head learned sentence order (ALBERT's SOP): it reads the final vector of the "
                  "first token {cls} {pooled}, and gives two logits: the pair in order (label 0) and swapped "
                  "(label 1).", cls=f"`{t.tokens[0]}`", pooled=pooled)
    if stage_id == "nsp":
        pooled = tr("through the pooler, tanh(W h + b)") if c.nsp_head == "pooler" else tr("directly, without a pooler")
        return tr("The NSP head reads the final vector of the first token {cls} {pooled}, and gives two logits: "
                  "IsNext and NotNext (BERT §3.2). It is trained on pairs; with sentence A alone the answer means "
                  "little.", cls=f"`{t.tokens[0]}`", pooled=pooled)
    return ""
