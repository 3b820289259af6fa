"""BERT for pre-training (Devlin et al. 2019), written to be looked inside.

One forward pass computes the two pre-training objectives of BERT §3.1 (masked LM) and §3.2
(next-sentence prediction) and, on request, every intermediate a teacher points at: the three
embedding parts, the hidden state after each layer and the attention probabilities of every head.

Parameter names follow HF transformers' ``modeling_bert`` (``bert.embeddings.word_embeddings``,
``bert.encoder.layer.0.attention.self.query``, ``cls.predictions.transform`` ...) so importing
and exporting HF weights is a plain copy. Variant switches (see ``BertConfig``) reproduce the
seed designs: sinusoidal positions (Vaswani §3.5), pre-norm blocks, a linear MLM head and an NSP
classifier on the first token.

Attention runs through ``F.scaled_dot_product_attention`` unless the probabilities are asked for
(or attention dropout must draw from a private generator); then an explicit softmax path runs.
The two agree to 1e-5 (tests/test_model.py).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertcore.config import BertConfig
from bertcore.model.functional import _activation, _dropout, sinusoidal_table  # noqa: F401 (sinusoidal_table re-exported)


class BertEmbeddings(nn.Module):
    """Token + position + segment embeddings, summed, then LayerNorm and dropout (BERT §3, Fig. 2)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size, padding_idx=config.pad_token_id)
        if config.position_embedding == "learned":
            self.position_embeddings = nn.Embedding(config.max_position_embeddings, config.hidden_size)
        else:  # fixed table, not trained and not saved: it is a function of the config
            self.register_buffer(
                "sinusoidal", sinusoidal_table(config.max_position_embeddings, config.hidden_size), persistent=False
            )
        self.token_type_embeddings = nn.Embedding(config.type_vocab_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def position_table(self) -> Tensor:
        """(max_position_embeddings, D): the learned weights or the sinusoidal table."""
        if self.config.position_embedding == "learned":
            return self.position_embeddings.weight
        return self.sinusoidal

    def forward(self, input_ids: Tensor, token_type_ids: Tensor, gen, parts: dict | None) -> Tensor:
        T = input_ids.shape[1]
        tok = self.word_embeddings(input_ids)  # (B, T, D)
        pos = self.position_table()[:T].unsqueeze(0)  # (1, T, D)
        seg = self.token_type_embeddings(token_type_ids)  # (B, T, D)
        x = tok + pos + seg
        normed = self.LayerNorm(x)
        if parts is not None:
            parts.update(token=tok, position=pos.expand_as(tok), segment=seg, sum=x, normed=normed)
        return _dropout(normed, self.config.hidden_dropout_prob, self.training, gen)


class BertSelfAttention(nn.Module):
    """Multi-head scaled dot-product attention: softmax(Q K^T / sqrt(d_k)) V (Vaswani §3.2.1-3.2.2)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        d = config.hidden_size
        self.n_heads = config.num_attention_heads
        self.head_dim = config.head_dim
        self.p_drop = config.attention_probs_dropout_prob
        self.query = nn.Linear(d, d)
        self.key = nn.Linear(d, d)
        self.value = nn.Linear(d, d)

    def forward(self, x: Tensor, bool_mask: Tensor | None, add_mask: Tensor | None, gen, want_probs: bool,
                head_mask: Tensor | None = None):
        B, T, D = x.shape
        # One fused projection instead of three small matmuls (same weights, HF names kept).
        w = torch.cat([self.query.weight, self.key.weight, self.value.weight])  # (3D, D)
        b = torch.cat([self.query.bias, self.key.bias, self.value.bias])
        qkv = F.linear(x, w, b).view(B, T, 3, self.n_heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B, H, T, Dh)
        drop = self.p_drop if self.training else 0.0
        if not want_probs and not (drop and gen is not None):
            ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=bool_mask, dropout_p=drop)
            probs = None
        else:
            scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))  # (B, H, T, T)
            if add_mask is not None:
                scores = scores + add_mask
            probs = scores.softmax(dim=-1)  # (B, H, T, T), rows sum to 1
            if head_mask is not None:  # HF semantics: a masked head's probabilities (and context) become 0
                probs = probs * head_mask[None, :, None, None]
                head_mask = None
            ctx = _dropout(probs, drop, self.training, gen) @ v  # (B, H, T, Dh)
        if head_mask is not None:  # (m P) V = m (P V): the SDPA path scales each head's context instead
            ctx = ctx * head_mask[None, :, None, None]
        return ctx.transpose(1, 2).reshape(B, T, D), probs

    def forward_queries(self, xq: Tensor, x: Tensor, bool_mask, add_mask, gen, head_mask=None) -> Tensor:
        """Attention output only for the query rows ``xq`` (B, M, D); keys and values from all of ``x`` (B, T, D)."""
        B, T, D = x.shape
        M = xq.shape[1]
        q = self.query(xq).view(B, M, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, M, Dh)
        w = torch.cat([self.key.weight, self.value.weight])  # (2D, D)
        b = torch.cat([self.key.bias, self.value.bias])
        k, v = F.linear(x, w, b).view(B, T, 2, self.n_heads, self.head_dim).permute(2, 0, 3, 1, 4).unbind(0)
        drop = self.p_drop if self.training else 0.0
        if not (drop and gen is not None):
            ctx = F.scaled_dot_product_attention(q, k, v, attn_mask=bool_mask, dropout_p=drop)
        else:
            scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_dim))  # (B, H, M, T)
            if add_mask is not None:
                scores = scores + add_mask
            ctx = _dropout(scores.softmax(dim=-1), drop, self.training, gen) @ v
        if head_mask is not None:
            ctx = ctx * head_mask[None, :, None, None]  # (B, H, M, Dh)
        return ctx.transpose(1, 2).reshape(B, M, D)


class BertSelfOutput(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)


class BertAttention(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.self = BertSelfAttention(config)
        self.output = BertSelfOutput(config)


class BertIntermediate(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.intermediate_size)


class BertOutput(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.intermediate_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)


class BertLayer(nn.Module):
    """One encoder block: self-attention and a position-wise FFN, each in a residual connection.

    post-norm (BERT):  x = LN(x + Drop(Attn(x)));  x = LN(x + Drop(FFN(x)))
    pre-norm (seeds):  x = x + Drop(Attn(LN(x))); x = x + Drop(FFN(LN(x)))
    In pre-norm the two LayerNorms keep their HF names (attention.output.LayerNorm, output.LayerNorm).
    """

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.attention = BertAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = BertOutput(config)
        self.act = _activation(config.hidden_act)

    def _ffn(self, x: Tensor) -> Tensor:
        return self.output.dense(self.act(self.intermediate.dense(x)))  # (B, T, D)

    def forward(self, x, bool_mask, add_mask, gen, want_probs, head_mask=None):
        p = self.config.hidden_dropout_prob
        attn_ln, ffn_ln = self.attention.output.LayerNorm, self.output.LayerNorm
        if self.config.norm_placement == "post":
            ctx, probs = self.attention.self(x, bool_mask, add_mask, gen, want_probs, head_mask)
            x = attn_ln(x + _dropout(self.attention.output.dense(ctx), p, self.training, gen))
            x = ffn_ln(x + _dropout(self._ffn(x), p, self.training, gen))
        else:
            ctx, probs = self.attention.self(attn_ln(x), bool_mask, add_mask, gen, want_probs, head_mask)
            x = x + _dropout(self.attention.output.dense(ctx), p, self.training, gen)
            x = x + _dropout(self._ffn(ffn_ln(x)), p, self.training, gen)
        return x, probs

    def forward_rows(self, x, slots, valid, bool_mask, add_mask, gen, head_mask=None) -> Tensor:
        """This block's output only at the positions ``slots`` (B, M) where ``valid`` (B, M): (N, D) rows.

        Every position still serves as a key/value, so the rows equal those of ``forward`` (same math);
        the query projection, attention output, FFN and LayerNorms run for N rows instead of B*T.
        """
        p = self.config.hidden_dropout_prob
        attn_ln, ffn_ln = self.attention.output.LayerNorm, self.output.LayerNorm
        idx = slots[..., None].expand(-1, -1, x.shape[-1])
        if self.config.norm_placement == "post":
            ctx = self.attention.self.forward_queries(x.gather(1, idx), x, bool_mask, add_mask, gen,
                                                     head_mask)[valid]
            h = attn_ln(x.gather(1, idx)[valid] + _dropout(self.attention.output.dense(ctx), p, self.training, gen))
            return ffn_ln(h + _dropout(self._ffn(h), p, self.training, gen))
        xn = attn_ln(x)
        ctx = self.attention.self.forward_queries(xn.gather(1, idx), xn, bool_mask, add_mask, gen, head_mask)[valid]
        h = x.gather(1, idx)[valid] + _dropout(self.attention.output.dense(ctx), p, self.training, gen)
        return h + _dropout(self._ffn(ffn_ln(h)), p, self.training, gen)


class BertEncoder(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(config) for _ in range(config.num_hidden_layers))
        if config.norm_placement == "pre":  # a pre-norm stack needs one last LayerNorm on its output
            self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)


class BertPooler(nn.Module):
    """tanh(W h_[CLS] + b): the sentence-level representation fed to NSP (BERT §3.2)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)


class BertModel(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config) if config.nsp_head == "pooler" else None


class PredictionHeadTransform(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.LayerNorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)


class MLMPredictions(nn.Module):
    """MLM head (BERT §3.1). transform: LN(act(W h)) then the word-embedding matrix transposed + bias.
    linear: one untied Linear(hidden, vocab), as in BERT-pytorch."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.kind = config.mlm_head
        if self.kind == "transform":
            self.transform = PredictionHeadTransform(config)
            self.bias = nn.Parameter(torch.zeros(config.vocab_size))
        else:
            self.decoder = nn.Linear(config.hidden_size, config.vocab_size)
        self.act = _activation(config.hidden_act)


class PreTrainingHeads(nn.Module):
    def __init__(self, config: BertConfig):
        super().__init__()
        self.predictions = MLMPredictions(config)
        self.seq_relationship = nn.Linear(config.hidden_size, 2)  # index 0 = IsNext, 1 = NotNext (HF convention)


@dataclass
class PreTrainingOutput:
    """What one forward pass returns. Optional fields are None unless requested."""

    loss: Tensor | None = None
    mlm_loss: Tensor | None = None
    nsp_loss: Tensor | None = None
    mlm_logits: Tensor | None = None  # (B, T, V), or (N_selected, V) with mlm_labels; None if has_mlm_head is False
    nsp_logits: Tensor | None = None  # (B, 2)
    attentions: tuple[Tensor, ...] | None = None  # per layer (B, H, T, T)
    hidden_states: tuple[Tensor, ...] | None = None  # embeddings output + each layer: L+1 x (B, T, D)
    embeddings: dict[str, Tensor] | None = None  # token, position, segment, sum, normed: (B, T, D)
    mlm_positions: tuple[Tensor, Tensor] | None = field(default=None)  # (batch_idx, pos_idx) of mlm_logits rows


class BertForPreTraining(nn.Module):
    """BERT with the MLM and NSP heads. ``has_mlm_head``/``has_nsp_head`` are False when imported
    weights lacked them (e.g. a bare BertModel such as all-MiniLM-L6-v2): the heads then hold random
    weights that inference refuses to use, and without ``mlm_labels`` ``mlm_logits`` is None."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.bert = BertModel(config)
        self.cls = PreTrainingHeads(config)
        self.has_mlm_head = True
        self.has_nsp_head = True
        self.dropout_generator: torch.Generator | None = None
        self.apply(self._init_weights)

    def _init_weights(self, m: nn.Module) -> None:
        std = self.config.initializer_range
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, 0.0, std)
            if m.padding_idx is not None:
                with torch.no_grad():
                    m.weight[m.padding_idx].zero_()
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)

    def set_dropout_generator(self, gen: torch.Generator | None) -> None:
        """Draw all dropout masks from ``gen`` (per-trainer determinism, even across threads)."""
        self.dropout_generator = gen

    def _forward_loss_rows(self, x, mlm_labels, nsp_labels, bool_mask, add_mask, gen, parts,
                           head_mask) -> PreTrainingOutput:
        """Training / evaluation path (``mlm_labels`` given, no attentions or hidden states requested).

        The losses read the last layer only at [CLS] (NSP) and at the selected positions (MLM), so the last
        block runs its query projection, attention output, FFN and LayerNorms on those rows only (keys and
        values still come from every position). Same math as the full path; measured 1.13x (tiny), 1.27x
        (small) and 1.17x (base4) more training steps/s on 2 cores.
        """
        cfg = self.config
        layers = self.bert.encoder.layer
        hm = head_mask if head_mask is not None else [None] * len(layers)
        for layer, m in zip(layers[:-1], hm):
            x, _ = layer(x, bool_mask, add_mask, gen, False, m)
        B, T, _ = x.shape
        sel = mlm_labels != -100  # (B, T)
        need = sel.clone()
        need[:, 0] = True  # [CLS], for NSP
        counts = need.sum(1)  # (B,)
        M = int(counts.max())
        # needed positions first, in position order; slot 0 of every row is position 0 ([CLS])
        key = (~need).to(torch.int64) * T + torch.arange(T)
        slots = key.argsort(dim=1)[:, :M]  # (B, M)
        valid = torch.arange(M)[None, :] < counts[:, None]  # (B, M)
        h = layers[-1].forward_rows(x, slots, valid, bool_mask, add_mask, gen, hm[-1])  # (N, D), row-major (b, pos)
        if cfg.norm_placement == "pre":
            h = self.bert.encoder.LayerNorm(h)
        rb = torch.arange(B)[:, None].expand(B, M)[valid]
        rp = slots[valid]
        cls_h = h[torch.cumsum(counts, 0) - counts]  # (B, D): slot 0 of each sequence
        if self.bert.pooler is not None:
            cls_h = torch.tanh(self.bert.pooler.dense(cls_h))
        out = PreTrainingOutput(nsp_logits=self.cls.seq_relationship(cls_h))
        is_mlm = sel[rb, rp]
        positions = (rb[is_mlm], rp[is_mlm])  # same order as sel.nonzero(): by sequence, then position
        logits = self.mlm_logits_from(h[is_mlm])  # (N_selected, V)
        targets = mlm_labels[positions]
        out.mlm_loss = F.cross_entropy(logits, targets) if targets.numel() else logits.sum() * 0.0
        out.mlm_logits, out.mlm_positions = logits, positions
        if nsp_labels is not None:
            out.nsp_loss = F.cross_entropy(out.nsp_logits, nsp_labels)
        losses = [v for v in (out.mlm_loss, out.nsp_loss) if v is not None]
        out.loss = sum(losses)
        out.embeddings = parts
        return out

    def _check_head_mask(self, head_mask: Tensor | None) -> Tensor | None:
        """(H,) or (L, H) -> (L, H) float; None stays None."""
        if head_mask is None:
            return None
        L, H = self.config.num_hidden_layers, self.config.num_attention_heads
        head_mask = torch.as_tensor(head_mask, dtype=torch.float32)
        if head_mask.shape == (H,):
            head_mask = head_mask.expand(L, H)
        if head_mask.shape != (L, H):
            raise ValueError(f"head_mask has shape {tuple(head_mask.shape)}; give ({L}, {H}) (layers, heads) or ({H},)")
        return head_mask

    def mlm_logits_from(self, h: Tensor) -> Tensor:
        """Apply the MLM head to hidden states (..., D) -> (..., V)."""
        pred = self.cls.predictions
        if pred.kind == "linear":
            return pred.decoder(h)
        t = pred.transform
        h = t.LayerNorm(pred.act(t.dense(h)))
        return F.linear(h, self.bert.embeddings.word_embeddings.weight, pred.bias)  # decoder tied to embeddings

    def forward(
        self,
        input_ids: Tensor,
        token_type_ids: Tensor | None = None,
        attention_mask: Tensor | None = None,
        mlm_labels: Tensor | None = None,
        nsp_labels: Tensor | None = None,
        output_attentions: bool = False,
        output_hidden_states: bool = False,
        output_embeddings: bool = False,
        head_mask: Tensor | None = None,
    ) -> PreTrainingOutput:
        """``head_mask``: float (L, H) or (H,) for every layer; each head's attention probabilities are multiplied
        by its entry, so 0 removes that head's context vector (head ablation, Michel et al. 2019; HF semantics)."""
        cfg = self.config
        B, T = input_ids.shape
        if T > cfg.max_position_embeddings:
            raise ValueError(
                f"input has {T} tokens but max_position_embeddings={cfg.max_position_embeddings}; truncate the input"
            )
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        gen = self.dropout_generator if self.training else None
        bool_mask = add_mask = None
        if attention_mask is not None and not bool(attention_mask.all()):
            keep = attention_mask[:, None, None, :].bool()  # (B, 1, 1, T): padded keys get no attention
            bool_mask = keep
            add_mask = torch.zeros(keep.shape, dtype=torch.float32).masked_fill(~keep, torch.finfo(torch.float32).min)
        head_mask = self._check_head_mask(head_mask)
        parts: dict | None = {} if output_embeddings else None
        x = self.bert.embeddings(input_ids, token_type_ids, gen, parts)  # (B, T, D)
        if mlm_labels is not None and not output_attentions and not output_hidden_states:
            return self._forward_loss_rows(x, mlm_labels, nsp_labels, bool_mask, add_mask, gen, parts, head_mask)
        hidden = [x] if output_hidden_states else None
        attns = [] if output_attentions else None
        for i, layer in enumerate(self.bert.encoder.layer):
            x, probs = layer(x, bool_mask, add_mask, gen, output_attentions,
                             None if head_mask is None else head_mask[i])
            if hidden is not None:
                hidden.append(x)
            if attns is not None:
                attns.append(probs)
        if cfg.norm_placement == "pre":
            x = self.bert.encoder.LayerNorm(x)
            if hidden is not None:
                hidden[-1] = x

        cls_h = x[:, 0]  # (B, D): the [CLS] position
        if self.bert.pooler is not None:
            cls_h = torch.tanh(self.bert.pooler.dense(cls_h))
        nsp_logits = self.cls.seq_relationship(cls_h)  # (B, 2)

        out = PreTrainingOutput(nsp_logits=nsp_logits)
        if mlm_labels is not None:
            sel = mlm_labels != -100  # (B, T)
            positions = sel.nonzero(as_tuple=True)
            logits = self.mlm_logits_from(x[positions])  # (N, V): only the selected positions (BERT §3.1)
            targets = mlm_labels[positions]
            out.mlm_loss = F.cross_entropy(logits, targets) if targets.numel() else logits.sum() * 0.0
            out.mlm_logits, out.mlm_positions = logits, positions
        elif self.has_mlm_head:
            out.mlm_logits = self.mlm_logits_from(x)  # (B, T, V)
        # else None: an imported model without MLM weights (e.g. all-MiniLM-L6-v2) would only give random
        # logits, and for its 30522-word vocabulary they were ~80% of an inspect call (20 ms of 25 ms).
        if nsp_labels is not None:
            out.nsp_loss = F.cross_entropy(nsp_logits, nsp_labels)
        losses = [v for v in (out.mlm_loss, out.nsp_loss) if v is not None]
        if losses:
            out.loss = sum(losses)
        out.attentions = tuple(attns) if attns is not None else None
        out.hidden_states = tuple(hidden) if hidden is not None else None
        out.embeddings = parts
        return out


def count_parameters(model: BertForPreTraining) -> dict[str, int]:
    """Trainable parameters per part (a tied decoder is counted once, in the embeddings)."""
    def n(mod):
        return sum(p.numel() for p in mod.parameters()) if mod is not None else 0

    parts = {
        "embeddings": n(model.bert.embeddings),
        "encoder": n(model.bert.encoder),
        "pooler": n(model.bert.pooler),
        "mlm_head": n(model.cls.predictions),
        "nsp_head": n(model.cls.seq_relationship),
    }
    parts["total"] = sum(parts.values())
    return parts
