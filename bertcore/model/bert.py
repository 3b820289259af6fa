"""BERT for pre-training (Devlin et al. 2019), written to be looked inside.

One forward pass computes the two pre-training objectives of BERT §3.1 (masked LM) and §3.2
(next-sentence prediction) and, on request, every intermediate a teacher points at: the three
embedding parts, the hidden state after each layer and the attention probabilities of every head.

Parameter names follow HF transformers' ``modeling_bert`` (``bert.embeddings.word_embeddings``,
``bert.encoder.layer.0.attention.self.query``, ``cls.predictions.transform`` ...) so importing
and exporting HF weights is a plain copy. The encoder modules live in ``layers.py``; the variant
switches of ``BertConfig`` reproduce the seed designs (see ``bertcore/presets.py``).
"""
from __future__ import annotations

import contextlib
import math
import threading
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from bertcore.config import BertConfig
from bertcore.model.functional import activation, cross_entropy_and_hits
from bertcore.model.attention import Dropout, Rows
from bertcore.model.fast_path import FastPath, Unpadded
from bertcore.model.layers import BertEmbeddings, BertEncoder, UnbiasedStdLayerNorm, layer_norm
from bertcore.model.mlm_loss import mlm_loss_and_hits
from bertcore.model.tap import Tap, tap_or_none


class BertPooler(nn.Module):
    """tanh(W h_[CLS] + b): the sentence-level representation fed to NSP (BERT §3.2; d2l's ``hidden``)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)

    def forward(self, cls_h: Tensor) -> Tensor:
        return torch.tanh(self.dense(cls_h))  # (B, D)


class BertModel(nn.Module):
    """The encoder BERT's heads share (BERT §3): embeddings -> L layers -> pooled [CLS]. One forward for every
    head and every analysis: pre-training, classification, the lens, patching, ablation, probes, explain."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)
        self.pooler = BertPooler(config) if config.nsp_head == "pooler" else None
        self.fast = FastPath()  # the GPU fast path's switches (bertcore.model.fast_path), off

    def attention_mask(self, attention_mask: Tensor | None, T: int | None = None) -> Tensor | None:
        """(B, T) 1/0 -> (B, 1, 1, T) bool, True = a key that may be attended; None when nothing is padded or
        the config has no padding mask (the blog's BertModel). A left-to-right model (``config.causal``) gets
        (B or 1, 1, T, T): query i may attend key j <= i (and a real one)."""
        keys = None
        if attention_mask is not None and self.config.attention_padding_mask and not bool(attention_mask.all()):
            keys = attention_mask[:, None, None, :].bool()
        if not self.config.causal:
            return keys
        T = attention_mask.shape[1] if T is None else T
        dev = attention_mask.device if attention_mask is not None else None
        tri = torch.ones(T, T, dtype=torch.bool, device=dev).tril()[None, None]  # (1, 1, T, T)
        return tri if keys is None else tri & keys

    def sentence_rows(self, attention_mask: Tensor | None, B: int, T: int, device) -> Tensor:
        """Where the sentence heads read (B,): [CLS] (0), or for a left-to-right model the last real token,
        the only one whose causal context is the whole input."""
        if not self.config.causal:
            return torch.zeros(B, dtype=torch.long, device=device)
        if attention_mask is None:
            return torch.full((B,), T - 1, dtype=torch.long, device=device)
        return (attention_mask.long().sum(1) - 1).clamp(min=0)

    def head_mask(self, head_mask: Tensor | None) -> Tensor | None:
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

    def forward(self, input_ids: Tensor | None, token_type_ids: Tensor | None = None,
                attention_mask: Tensor | None = None, head_mask: Tensor | None = None, tap: Tap | None = None,
                last_layer_rows: Rows | None = None, word_embeds: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """input_ids, token_type_ids (0/1), attention_mask: (B, T). Returns the last hidden state (B, T, D) and
        the pooled [CLS] (B, D): tanh(W h_[CLS] + b) with a pooler, h_[CLS] without.

        ``tap`` reads or replaces named tensors (``bertcore.model.tap``). ``last_layer_rows`` (slots, valid) runs
        the last layer only at those rows (slot 0 of every sequence must be position 0, [CLS]); the hidden state is
        then (N, D). ``word_embeds`` (B, T, D) replaces the word-embedding lookup (attribution methods).
        ``head_mask`` (L, H) or (H,): each head's probabilities times its entry (0 = head off)."""
        ref = input_ids if input_ids is not None else word_embeds[..., 0]
        B, T = ref.shape
        if T > self.config.max_position_embeddings:
            raise ValueError(f"input has {T} tokens but max_position_embeddings={self.config.max_position_embeddings};"
                             " truncate the input")
        if token_type_ids is None:
            token_type_ids = torch.zeros(B, T, dtype=torch.long, device=ref.device)
        x = self.embeddings(input_ids, token_type_ids, attention_mask, tap, word_embeds)  # (B, T, D)
        mask = self.attention_mask(attention_mask, T)
        if self.config.causal:
            last_layer_rows = None  # the next-token loss reads every row anyway
        unpad = None
        if (self.fast.unpad_above is not None and tap is None and mask is not None and last_layer_rows is not None
                and Unpadded.share(attention_mask) > self.fast.unpad_above):
            # the loss path (only real rows come out): the dense parts run on the real tokens only
            unpad = Unpadded(attention_mask, mask)
        h = self.encoder(x, mask, self.head_mask(head_mask), tap, last_layer_rows, unpad)
        if self.config.causal:  # the last real token (sentence_rows)
            cls_h = h[torch.arange(B, device=h.device), self.sentence_rows(attention_mask, B, T, h.device)]
        elif last_layer_rows is None:
            cls_h = h[:, 0]  # (B, D)
        else:  # h: (N, D) in (sequence, slot) order; slot 0 of each sequence is [CLS]
            counts = last_layer_rows[1].sum(1)
            cls_h = h[torch.cumsum(counts, 0) - counts]
        pooled = self.pooler(cls_h) if self.pooler is not None else cls_h
        return h, tap_or_none(tap, "pooler.output", pooled)


class BertPredictionHeadTransform(nn.Module):
    """LN(act(W h + b)): the MLM head's transform (BERT; d2l's MaskLM MLP up to its last Linear)."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act = activation(config.hidden_act)
        self.LayerNorm = layer_norm(config)

    def forward(self, h: Tensor) -> Tensor:
        return self.LayerNorm(self.act(self.dense(h)))


class BertLMPredictionHead(nn.Module):
    """MLM head (BERT §3.1), by ``config.mlm_head``:
    transform: E LN(act(W h)) + b, the decoder tied to the word embeddings E (BERT);
    linear: W h + b, one untied Linear (BERT-pytorch, the blog);
    mlp: W2 LN(act(W1 h)) + b2, untied (d2l's MaskLM)."""

    def __init__(self, config: BertConfig, word_embeddings: nn.Embedding):
        super().__init__()
        self.kind = config.mlm_head
        if self.kind in ("transform", "mlp"):
            self.transform = BertPredictionHeadTransform(config)
        if self.kind == "transform":
            self.bias = nn.Parameter(torch.zeros(config.vocab_size))
            self._tied = [word_embeddings]  # a list, so the shared weight is not registered (or saved) twice
        else:
            self.decoder = nn.Linear(config.hidden_size, config.vocab_size)

    def forward(self, h: Tensor, tap: Tap | None = None) -> Tensor:
        """(..., D) -> (..., V) logits."""
        if self.kind == "linear":
            return tap_or_none(tap, "mlm.logits", self.decoder(h))
        h = tap_or_none(tap, "mlm.transform", self.transform(h))
        if self.kind == "mlp":
            return tap_or_none(tap, "mlm.logits", self.decoder(h))
        return tap_or_none(tap, "mlm.logits", F.linear(h, self._tied[0].weight, self.bias))


class BertPreTrainingHeads(nn.Module):
    def __init__(self, config: BertConfig, word_embeddings: nn.Embedding):
        super().__init__()
        self.predictions = BertLMPredictionHead(config, word_embeddings)
        self.seq_relationship = nn.Linear(config.hidden_size, 2)  # index 0 = IsNext, 1 = NotNext (HF convention)

    def forward(self, sequence_output: Tensor | None, pooled_output: Tensor,
                tap: Tap | None = None) -> tuple[Tensor | None, Tensor]:
        mlm = self.predictions(sequence_output, tap) if sequence_output is not None else None
        return mlm, tap_or_none(tap, "nsp.logits", self.seq_relationship(pooled_output))


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
    mlm_hits: Tensor | None = None  # with mlm_labels: how many selected rows have the target as top logit (0-d)


class BertForPreTraining(nn.Module):
    """BERT with the MLM and NSP heads. ``has_mlm_head``/``has_nsp_head`` are False when imported
    weights lacked them (e.g. a bare BertModel such as all-MiniLM-L6-v2): the heads then hold random
    weights that inference refuses to use, and without ``mlm_labels`` ``mlm_logits`` is None."""

    def __init__(self, config: BertConfig):
        super().__init__()
        self.config = config
        self.bert = BertModel(config)
        self.cls = BertPreTrainingHeads(config, self.bert.embeddings.word_embeddings)
        self.has_mlm_head = True
        self.has_nsp_head = True
        self.sentence_task = "nsp"  # what the sentence head learned (TrainConfig.sentence_task): nsp | sop | none
        self.dropout_generator: torch.Generator | None = None
        self.fast = FastPath()  # set_fast_path
        self._init_all()

    def _init_all(self) -> None:
        """bert: normal(0, initializer_range), zero biases, unit LayerNorms (BERT's TF code); pytorch: the
        modules' own defaults; xavier_uniform: Glorot-uniform on every matrix (Annotated Transformer)."""
        kind = self.config.init
        if kind == "bert":
            self.apply(self._init_bert)
        elif kind == "xavier_uniform":
            for p in self.parameters():
                if p.dim() > 1:
                    nn.init.xavier_uniform_(p)

    def _init_bert(self, m: nn.Module) -> None:
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
        elif isinstance(m, (nn.LayerNorm, UnbiasedStdLayerNorm)):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)

    def set_dropout_generator(self, gen: torch.Generator | None) -> None:
        """Draw all dropout masks from ``gen`` (per-trainer determinism, even across threads)."""
        self.dropout_generator = gen
        for m in self.modules():
            if isinstance(m, Dropout):
                m.generator = gen

    def set_fast_path(self, fast: FastPath) -> None:
        """Switch the training fast path's parts (``bertcore.model.fast_path``; ``FastPath.for_device``). With
        ``fused_dropout`` the private dropout generator is dropped: dropout draws from the device's default
        generator, which the trainer reseeds every step (``seed_device_dropout``)."""
        self.fast = self.bert.fast = fast
        for layer in self.bert.encoder.layer:
            layer.compile_backend = fast.compile_backend if fast.compile_layers else None
        if fast.fused_dropout:
            self.set_dropout_generator(None)

    @staticmethod
    def _loss_rows(selected: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The rows the losses read: [CLS] (NSP) and the selected positions (MLM) of each sequence.

        Returns slots (B, M) with the needed positions first, in position order (slot 0 = [CLS]),
        valid (B, M) and counts (B,)."""
        B, T = selected.shape
        need = selected.clone()
        need[:, 0] = True
        counts = need.sum(1)  # (B,)
        M = int(counts.max())
        key = (~need).to(torch.int64) * T + torch.arange(T, device=selected.device)
        slots = key.argsort(dim=1)[:, :M]  # (B, M)
        valid = torch.arange(M, device=selected.device)[None, :] < counts[:, None]  # (B, M)
        return slots, valid, counts

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
        tap: Tap | None = None,
        return_mlm_logits: bool = True,
    ) -> PreTrainingOutput:
        """input_ids, token_type_ids (0/1), attention_mask: (B, T). With ``mlm_labels`` (B, T; -100 = not
        selected) ``mlm_logits`` holds only the selected rows (N, V), and unless something is read, the last layer
        runs only at [CLS] and those rows (same numbers, less work).
        ``head_mask``: float (L, H) or (H,) for every layer; each head's attention probabilities are multiplied
        by its entry, so 0 removes that head's context vector (head ablation, Michel et al. 2019; HF semantics).
        ``tap``: named tensors to read or replace (``bertcore.model.tap``); ``output_attentions``,
        ``output_hidden_states`` and ``output_embeddings`` read the usual ones through it.
        ``return_mlm_logits=False`` with ``mlm_labels``: the loss and hits only, the decoder fused with the loss
        (``bertcore.model.mlm_loss``; a training step), ``mlm_logits`` None."""
        tap = _with_outputs(tap, output_attentions, output_hidden_states, output_embeddings)
        selected = mlm_labels != -100 if mlm_labels is not None else None  # (B, T)
        rows = None
        if selected is not None and tap is None and not self.config.causal:
            slots, valid, counts = self._loss_rows(selected)
            rows = (slots, valid)
        h, pooled = self.bert(input_ids, token_type_ids, attention_mask, head_mask, tap, rows)
        if rows is None:  # h: (B, T, D)
            positions = selected.nonzero(as_tuple=True) if selected is not None else None
            seq_out = h[positions] if positions is not None else (h if self.has_mlm_head else None)
        else:  # h: (N, D), row-major (sequence, slot)
            B = input_ids.shape[0]
            rb = torch.arange(B, device=slots.device)[:, None].expand_as(slots)[valid]
            rp = slots[valid]
            is_mlm = selected[rb, rp]
            positions = (rb[is_mlm], rp[is_mlm])  # same order as selected.nonzero(): by sequence, then position
            seq_out = h[is_mlm]
        # Without MLM weights (e.g. all-MiniLM-L6-v2) logits would be random, and for a 30522-word vocabulary
        # most of an inspect call, so they are not computed.
        fused = selected is not None and not return_mlm_logits and tap is None
        mlm_logits, nsp_logits = self.cls(None if fused else seq_out, pooled, tap)  # (B, T, V) or (N, V); (B, 2)

        out = PreTrainingOutput(mlm_logits=mlm_logits, nsp_logits=nsp_logits)
        if selected is not None:
            targets = mlm_labels[positions]
            out.mlm_loss, out.mlm_hits = (mlm_loss_and_hits(self.cls.predictions, seq_out, targets,
                                                            self.fast.vocab_multiple) if fused
                                          else cross_entropy_and_hits(mlm_logits, targets))
            out.mlm_positions = positions
        if nsp_labels is not None:  # cross-entropy over both labels: -log p(y | x), y in {IsNext, NotNext}
            out.nsp_loss = F.cross_entropy(nsp_logits, nsp_labels)
        losses = [v for v in (out.mlm_loss, out.nsp_loss) if v is not None]
        if losses:
            out.loss = sum(losses)
        if tap is not None:
            c, L = tap.cache, self.config.num_hidden_layers
            if output_attentions:
                out.attentions = tuple(c[f"layer.{i}.attention.probs"] for i in range(L))
            if output_hidden_states:
                out.hidden_states = (c["embeddings.output"], *(c[f"layer.{i}.output"] for i in range(L - 1)),
                                     c["encoder.output"])
            if output_embeddings:
                tok = c["embeddings.token"]
                out.embeddings = {"token": tok, "position": c["embeddings.position"],
                                  "segment": c.get("embeddings.segment", torch.zeros_like(tok)),
                                  "sum": c["embeddings.sum"], "normed": c["embeddings.output"]}
        return out

    def run_with_cache(self, input_ids: Tensor, token_type_ids: Tensor | None = None,
                       attention_mask: Tensor | None = None, names="*", **kw) -> tuple[PreTrainingOutput, dict]:
        """One forward pass that keeps the named tensors ``names`` (names or glob patterns; all by default):
        ``(output, {name: tensor})``. Run it in eval mode (``eval_mode``) to read the model as it predicts."""
        tap = Tap(names, kw.pop("edit", None))
        out = self(input_ids, token_type_ids, attention_mask, tap=tap, **kw)
        return out, tap.cache

    def mlm_logits_from(self, h: Tensor) -> Tensor:
        """Apply the MLM head to hidden states (..., D) -> (..., V)."""
        return self.cls.predictions(h)


def _with_outputs(tap: Tap | None, attentions: bool, hidden_states: bool, embeddings: bool) -> Tap | None:
    """``tap`` reading also what the ``output_*`` flags ask for (a new Tap when there was none)."""
    want = []
    if attentions:
        want.append("layer.*.attention.probs")
    if hidden_states:
        want += ["embeddings.output", "layer.*.output", "encoder.output"]
    if embeddings:
        want.append("embeddings.*")
    if not want:
        return tap
    return (tap if tap is not None else Tap()).read_also(want)


def embedding_init(config: BertConfig, rows: int) -> str:
    """How ``BertForPreTraining`` draws a ``rows`` x hidden_size embedding table under ``config.init``, in words for a
    page: normal(0, initializer_range) (bert), torch's nn.Embedding default N(0, 1) (pytorch), or Glorot-uniform
    U(+-sqrt(6 / (rows + hidden_size))) (xavier_uniform, Glorot & Bengio 2010)."""
    if config.init == "bert":
        return f"normal(0, {config.initializer_range:g})"
    if config.init == "xavier_uniform":
        return f"Xavier-uniform U(±{math.sqrt(6 / (rows + config.hidden_size)):.3g})"
    return "normal(0, 1), nn.Embedding's default"


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


# Building a model draws its init from the global RNG; this lock + fork_rng makes that deterministic per seed
# even when several sessions (or a study's lanes in threads) build models at once, and leaves the caller's RNG
# state untouched.
_INIT_LOCK = threading.RLock()


@contextlib.contextmanager
def seeded(seed: int):
    """Draw from torch's global RNG seeded with ``seed``, alone: every module built inside gets the numbers a solo
    build with that seed gets, whatever other threads do (the caller's RNG state comes back afterwards)."""
    with _INIT_LOCK, torch.random.fork_rng(devices=[]):
        torch.manual_seed(int(seed))
        yield


def init_model(config: BertConfig, seed: int = 0) -> BertForPreTraining:
    """A fresh ``BertForPreTraining(config)`` whose init depends only on ``seed`` (global RNG untouched)."""
    with seeded(seed):
        return BertForPreTraining(config)
