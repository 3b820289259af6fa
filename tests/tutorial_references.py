"""The seeds' models in plain torch, written from each seed's own code (shared/seeds/000-004 and the packages they
walk through), for tests/test_tutorial_presets.py (eval mode) and tests/test_tutorial_training.py (train mode).

Nothing here uses bertcore's modules. Every forward reads its weights from a dict ``W`` by bertcore's parameter
names, except ``bert_pytorch_lm``, which reads BERT-pytorch's own names (``to_bert_pytorch`` / ``to_bertcore``
rename a state dict between the two), and takes ``drop(x, place)``: the seed's ``nn.Dropout`` at ``place``
(``no_drop`` in eval mode). Places are named as in ``PLACES``. Each returns a dict: ``mlm`` and ``nsp`` (logits, or
log-probabilities where the seed's heads end in LogSoftmax), ``attentions`` (per layer, before dropout) and
``hidden`` (the embedding output, then each block's output).
"""
from __future__ import annotations

import math
import re

import torch
import torch.nn.functional as F

# Where a dropout sits, in the order a forward meets them (one embedding place, then per block).
PLACES = ("embeddings", "attention probs", "attention output", "FFN inner", "FFN output", "block output")


def no_drop(x, place):
    """Every nn.Dropout in eval mode."""
    return x


def linear(x, W, name):
    return F.linear(x, W[name + ".weight"], W[name + ".bias"])


def tutorial_ln(x, a, b, eps=1e-6):
    """BERT-pytorch / Annotated Transformer LayerNorm: a_2 * (x - mean) / (std + eps) + b_2, torch's std (unbiased)."""
    mean = x.mean(-1, keepdim=True)
    std = x.std(-1, keepdim=True)
    return a * (x - mean) / (std + eps) + b


def nn_ln(x, W, name, eps):
    return F.layer_norm(x, x.shape[-1:], W[name + ".weight"], W[name + ".bias"], eps)


def tutorial_pe(max_len, d):
    """PositionalEmbedding as seeds 000/002/003 write it (log-space div_term)."""
    pe = torch.zeros(max_len, d).float()
    position = torch.arange(0, max_len).float().unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d, 2).float() * -(math.log(10000.0) / d))
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def gelu_tanh(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * torch.pow(x, 3))))


def mha(x, W, names, h, drop, mask=None, fill=-1e9):
    """Q, K, V linears, view(B, -1, h, d_k).transpose(1, 2), softmax(QK^T / sqrt(d_k)) with masked_fill(mask == 0,
    fill), dropout on the probabilities, concat, output linear (seed 000's MultiHeadedAttention and Attention;
    d2l's MultiHeadAttention and DotProductAttention are the same computation). ``names``: q, k, v, output."""
    B, D = x.shape[0], x.shape[-1]
    q, k, v = [linear(x, W, n).view(B, -1, h, D // h).transpose(1, 2) for n in names[:3]]
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(mask == 0, fill)
    p = F.softmax(scores, dim=-1)
    out = torch.matmul(drop(p, "attention probs"), v).transpose(1, 2).contiguous().view(B, -1, D)
    return linear(out, W, names[3]), p


def _bertcore_attention(pre):
    return (f"{pre}.attention.self.query", f"{pre}.attention.self.key", f"{pre}.attention.self.value",
            f"{pre}.attention.output.dense")


# --------------------------------------------------------------------------------- BERT-pytorch (seeds 000, 003)

# BERT-pytorch's BERTLM parameter names (bert-pytorch 0.0.1a4) -> bertcore's; the sinusoidal buffer
# (bert.embedding.position.pe) is a function of the sizes in both and is not a parameter.
_BERT_PYTORCH_NAMES = [
    (r"bert\.embedding\.token\.weight", "bert.embeddings.word_embeddings.weight"),
    (r"bert\.embedding\.segment\.weight", "bert.embeddings.token_type_embeddings.weight"),
    (r"bert\.transformer_blocks\.(\d+)\.attention\.linear_layers\.0\.", r"bert.encoder.layer.\1.attention.self.query."),
    (r"bert\.transformer_blocks\.(\d+)\.attention\.linear_layers\.1\.", r"bert.encoder.layer.\1.attention.self.key."),
    (r"bert\.transformer_blocks\.(\d+)\.attention\.linear_layers\.2\.", r"bert.encoder.layer.\1.attention.self.value."),
    (r"bert\.transformer_blocks\.(\d+)\.attention\.output_linear\.", r"bert.encoder.layer.\1.attention.output.dense."),
    (r"bert\.transformer_blocks\.(\d+)\.input_sublayer\.norm\.a_2",
     r"bert.encoder.layer.\1.attention.output.LayerNorm.weight"),
    (r"bert\.transformer_blocks\.(\d+)\.input_sublayer\.norm\.b_2",
     r"bert.encoder.layer.\1.attention.output.LayerNorm.bias"),
    (r"bert\.transformer_blocks\.(\d+)\.feed_forward\.w_1\.", r"bert.encoder.layer.\1.intermediate.dense."),
    (r"bert\.transformer_blocks\.(\d+)\.feed_forward\.w_2\.", r"bert.encoder.layer.\1.output.dense."),
    (r"bert\.transformer_blocks\.(\d+)\.output_sublayer\.norm\.a_2", r"bert.encoder.layer.\1.output.LayerNorm.weight"),
    (r"bert\.transformer_blocks\.(\d+)\.output_sublayer\.norm\.b_2", r"bert.encoder.layer.\1.output.LayerNorm.bias"),
    (r"next_sentence\.linear\.", "cls.seq_relationship."),
    (r"mask_lm\.linear\.", "cls.predictions.decoder."),
]


def _rename(name, table):
    for pat, rep in table:
        new, n = re.subn("^" + pat, rep, name)
        if n:
            return new
    raise KeyError(f"no counterpart for {name}")


def to_bertcore(Wp: dict) -> dict:
    """A BERT-pytorch BERTLM state dict under bertcore's names."""
    return {_rename(k, _BERT_PYTORCH_NAMES): v for k, v in Wp.items()}


def bert_pytorch_names(layers: int) -> list[str]:
    """Every parameter name of a BERTLM with ``layers`` TransformerBlocks."""
    names = ["bert.embedding.token.weight", "bert.embedding.segment.weight"]
    for i in range(layers):
        p = f"bert.transformer_blocks.{i}."
        for mod in [f"attention.linear_layers.{j}" for j in range(3)] + ["attention.output_linear",
                                                                          "feed_forward.w_1", "feed_forward.w_2"]:
            names += [p + mod + ".weight", p + mod + ".bias"]
        names += [p + s + n for s in ("input_sublayer", "output_sublayer") for n in (".norm.a_2", ".norm.b_2")]
    return names + [m + ".linear." + n for m in ("next_sentence", "mask_lm") for n in ("weight", "bias")]


def to_bert_pytorch(W: dict) -> dict:
    """bertcore's codertimo-preset weights under BERT-pytorch's names (the inverse of ``to_bertcore``)."""
    layers = 1 + max(int(k.split(".")[3]) for k in W if k.startswith("bert.encoder.layer."))
    inverse = {_rename(n, _BERT_PYTORCH_NAMES): n for n in bert_pytorch_names(layers)}
    return {inverse[k]: v for k, v in W.items()}


def bert_pytorch_weights(vocab_size, hidden, layers, ffn, gen) -> dict:
    """A BERTLM state dict with BERT-pytorch's names, drawn as its modules draw them (nn.Embedding N(0, 1) with a zero
    padding row 0, nn.Linear U(+-1/sqrt(fan_in))); LayerNorm gains and biases moved away from 1 / 0 so that a
    misplaced norm shows."""
    W = {}
    for name in bert_pytorch_names(layers):
        if name.endswith((".a_2", ".b_2")):
            W[name] = (1.0 if name.endswith(".a_2") else 0.0) + 0.3 * torch.randn(hidden, generator=gen)
        elif name.startswith("bert.embedding."):
            W[name] = torch.randn(vocab_size if ".token." in name else 3, hidden, generator=gen)
            W[name][0] = 0.0  # TokenEmbedding / SegmentEmbedding: padding_idx=0
        else:
            n_in = ffn if ".w_2." in name else hidden
            n_out = {".w_1.": ffn, "next_sentence": 2, "mask_lm": vocab_size}
            rows = next((v for k, v in n_out.items() if k in name), hidden)
            shape = (rows, n_in) if name.endswith(".weight") else (rows,)
            W[name] = (torch.rand(shape, generator=gen) * 2 - 1) / math.sqrt(n_in)
    return W


def bert_pytorch_lm(Wp, ids, segment_label, heads, drop=no_drop):
    """BERTLM.forward of bert-pytorch 0.0.1a4 (seed 000 walks through it; seed 003 feeds it): BERTEmbedding
    (token + PositionalEmbedding(max_len=512) + SegmentEmbedding, dropout), then each TransformerBlock:
    input_sublayer x + dropout(attention(norm(x))), output_sublayer x + dropout(w_2(dropout(GELU(w_1 norm(x))))),
    then ``return self.dropout(x)``; NextSentencePrediction and MaskedLanguageModel end in LogSoftmax.
    Inputs in the seed's convention: ``segment_label`` 1/2 with 0 at padding, padding mask (x > 0)."""
    T, D = ids.shape[1], Wp["bert.embedding.token.weight"].shape[1]
    layers = 1 + max(int(k.split(".")[2]) for k in Wp if k.startswith("bert.transformer_blocks."))
    mask = (ids > 0).unsqueeze(1).repeat(1, T, 1).unsqueeze(1)
    x = (Wp["bert.embedding.token.weight"][ids] + tutorial_pe(512, D)[:T]
         + Wp["bert.embedding.segment.weight"][segment_label])
    x = drop(x, "embeddings")
    hidden, attns = [x], []
    for i in range(layers):
        p = f"bert.transformer_blocks.{i}."
        h = tutorial_ln(x, Wp[p + "input_sublayer.norm.a_2"], Wp[p + "input_sublayer.norm.b_2"])
        names = [p + f"attention.linear_layers.{j}" for j in range(3)] + [p + "attention.output_linear"]
        a, probs = mha(h, Wp, names, heads, drop, mask)
        x = x + drop(a, "attention output")
        h = tutorial_ln(x, Wp[p + "output_sublayer.norm.a_2"], Wp[p + "output_sublayer.norm.b_2"])
        f = linear(drop(gelu_tanh(linear(h, Wp, p + "feed_forward.w_1")), "FFN inner"), Wp, p + "feed_forward.w_2")
        x = x + drop(f, "FFN output")
        x = drop(x, "block output")  # TransformerBlock.forward: return self.dropout(x)
        hidden.append(x)
        attns.append(probs)
    return dict(nsp=F.log_softmax(linear(x[:, 0], Wp, "next_sentence.linear"), dim=-1),
                mlm=F.log_softmax(linear(x, Wp, "mask_lm.linear"), dim=-1), attentions=attns, hidden=hidden)


# --------------------------------------------------------------------------------- the blog's BertModel (seed 001)

def blog_model(W, ids, seg, heads, drop=no_drop):
    """Seed 001's Model: BertEmbedding (word + the full position table + token type, LayerNorm, dropout), then per
    BertEncoder x + Add_Norm(Multi_Head_Att(x)) and the same around Feed_Forward, BertPooler, two Linears. The seed
    does not show Multi_Head_Att, Add_Norm or Feed_Forward: BERT's are assumed (attention without a padding mask,
    its dropout on the probabilities; Add_Norm as LN(Dropout(F(x))); Linear-GELU-Linear), as the preset notes say."""
    layers = 1 + max(int(k.split(".")[3]) for k in W if k.startswith("bert.encoder.layer."))
    pos_w = W["bert.embeddings.position_embeddings.weight"]
    pos_idx = torch.arange(0, pos_w.shape[0]).repeat(ids.shape[0], 1)  # the seed indexes the whole table
    emb = (W["bert.embeddings.word_embeddings.weight"][ids] + pos_w[pos_idx]
           + W["bert.embeddings.token_type_embeddings.weight"][seg])
    x = drop(nn_ln(emb, W, "bert.embeddings.LayerNorm", 1e-5), "embeddings")
    hidden, attns = [x], []
    for i in range(layers):
        pre = f"bert.encoder.layer.{i}"
        a, p = mha(x, W, _bertcore_attention(pre), heads, drop)  # no padding mask
        add_norm1_out = x + nn_ln(drop(a, "attention output"), W, f"{pre}.attention.output.LayerNorm", 1e-5)
        ff = linear(F.gelu(linear(add_norm1_out, W, f"{pre}.intermediate.dense")), W, f"{pre}.output.dense")
        x = add_norm1_out + nn_ln(drop(ff, "FFN output"), W, f"{pre}.output.LayerNorm", 1e-5)
        hidden.append(x)
        attns.append(p)
    pooled = torch.tanh(linear(x[:, 0], W, "bert.pooler.dense"))
    return dict(mlm=linear(x, W, "cls.predictions.decoder"), nsp=linear(pooled, W, "cls.seq_relationship"),
                attentions=attns, hidden=hidden)


# --------------------------------------------------------------------------------- the Annotated Transformer (seed 002)

def annotated_encoder(W, ids, heads, drop=no_drop):
    """Seed 002's encoder under BERT's two heads: Embeddings lut(x) * sqrt(d_model), PositionalEncoding (+ PE,
    dropout), EncoderLayers with SublayerConnection x + dropout(sublayer(norm(x))), PositionwiseFeedForward
    w_2(dropout(relu(w_1 x))), attention(..., dropout=self.dropout), the Encoder's final norm; the Generator
    (Linear, log_softmax) as the MLM head and the first position for NSP (as BERT-pytorch)."""
    D = W["bert.embeddings.word_embeddings.weight"].shape[1]
    T = ids.shape[1]
    layers = 1 + max(int(k.split(".")[3]) for k in W if k.startswith("bert.encoder.layer."))
    src_mask = (ids != 0).unsqueeze(-2).unsqueeze(1)  # (B, 1, 1, T): make_std_mask's src part, then unsqueeze(1)
    x = drop(W["bert.embeddings.word_embeddings.weight"][ids] * math.sqrt(D) + tutorial_pe(5000, D)[:T], "embeddings")
    hidden, attns = [x], []
    for i in range(layers):
        pre = f"bert.encoder.layer.{i}"
        h = tutorial_ln(x, W[f"{pre}.attention.output.LayerNorm.weight"], W[f"{pre}.attention.output.LayerNorm.bias"])
        a, p = mha(h, W, _bertcore_attention(pre), heads, drop, src_mask)
        x = x + drop(a, "attention output")
        h = tutorial_ln(x, W[f"{pre}.output.LayerNorm.weight"], W[f"{pre}.output.LayerNorm.bias"])
        f = linear(drop(F.relu(linear(h, W, f"{pre}.intermediate.dense")), "FFN inner"), W, f"{pre}.output.dense")
        x = x + drop(f, "FFN output")
        hidden.append(x)
        attns.append(p)
    x = tutorial_ln(x, W["bert.encoder.LayerNorm.weight"], W["bert.encoder.LayerNorm.bias"])  # Encoder: self.norm(x)
    hidden[-1] = x
    return dict(mlm=F.log_softmax(linear(x, W, "cls.predictions.decoder"), dim=-1),
                nsp=F.log_softmax(linear(x[:, 0], W, "cls.seq_relationship"), dim=-1), attentions=attns, hidden=hidden)


# --------------------------------------------------------------------------------- d2l's BERTModel (seed 004)

def d2l_model(W, ids, seg, valid_lens, pred_positions, heads, drop=no_drop, train_positions=False):
    """Seed 004's BERTModel: token + segment embedding, plus ``pos_embedding.data`` (the seed's text: no gradient
    reaches the table; ``train_positions`` = the published d2l 1.0.3, which adds ``pos_embedding`` itself), no
    dropout on the sum; d2l's EncoderBlock: AddNorm ln(dropout(Y) + X) around MultiHeadAttention (masked_softmax by
    valid_lens, dropout on the weights) and around the PositionWiseFFN (no dropout inside); MaskLM at
    pred_positions (Linear, ReLU, LayerNorm, Linear); NSP from hidden = Linear + Tanh over <cls>."""
    T = ids.shape[1]
    layers = 1 + max(int(k.split(".")[3]) for k in W if k.startswith("bert.encoder.layer."))
    pos = W["bert.embeddings.position_embeddings.weight"]
    X = W["bert.embeddings.word_embeddings.weight"][ids] + W["bert.embeddings.token_type_embeddings.weight"][seg]
    X = X + (pos if train_positions else pos.detach())[None, :T]
    key_ok = (torch.arange(T)[None, :] < valid_lens[:, None])[:, None, None, :]
    hidden, attns = [X], []
    for i in range(layers):
        pre = f"bert.encoder.layer.{i}"
        a, p = mha(X, W, _bertcore_attention(pre), heads, drop, key_ok, fill=-1e6)
        Y = nn_ln(drop(a, "attention output") + X, W, f"{pre}.attention.output.LayerNorm", 1e-5)
        ffn = linear(F.relu(linear(Y, W, f"{pre}.intermediate.dense")), W, f"{pre}.output.dense")
        X = nn_ln(drop(ffn, "FFN output") + Y, W, f"{pre}.output.LayerNorm", 1e-5)
        hidden.append(X)
        attns.append(p)
    B, P = pred_positions.shape
    masked_X = X[torch.repeat_interleave(torch.arange(B), P), pred_positions.reshape(-1)]
    h = nn_ln(F.relu(linear(masked_X, W, "cls.predictions.transform.dense")), W,
              "cls.predictions.transform.LayerNorm", 1e-5)
    return dict(mlm=linear(h, W, "cls.predictions.decoder"),
                nsp=linear(torch.tanh(linear(X[:, 0], W, "bert.pooler.dense")), W, "cls.seq_relationship"),
                attentions=attns, hidden=hidden)
