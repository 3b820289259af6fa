"""Model and training configuration.

`BertConfig` uses the field names of HF transformers' ``BertConfig`` so a config.json can be
exchanged with it. On top it carries the explorer's *variant switches*, which mirror the design
choices of the seed tutorials (learned vs sinusoidal positions, post- vs pre-norm, ...).
The defaults are original BERT (Devlin et al. 2019) scaled down until it trains in seconds on a CPU.
"""
from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from bertcore.errors import ConfigError
from bertcore.message import Message

ACTIVATIONS = ("gelu", "gelu_tanh", "relu")
POSITION_EMBEDDINGS = ("learned", "sinusoidal")
NORM_PLACEMENTS = ("post", "pre", "sublayer_output")
MLM_HEADS = ("transform", "linear", "mlp")
NSP_HEADS = ("pooler", "first_token")
LAYER_NORM_STYLES = ("variance", "unbiased_std")
INITS = ("bert", "pytorch", "xavier_uniform")
SEGMENT_IDS = ("0/1", "1/2")
ATTENTION_DIRECTIONS = ("bidirectional", "left_to_right")
SENTENCE_TASKS = ("nsp", "sop", "none")
MASKING_UNITS = ("token", "whole_word", "span")


class JsonConfig:
    """to_dict / from_dict / JSON helpers shared by both configs."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]):
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(Message("unknown {config} field(s) {unknown}; valid fields are: {valid}",
                                      config=cls.__name__, unknown=unknown, valid=", ".join(sorted(known))))
        return cls(**d)

    def replace(self, **kw):
        return self.from_dict({**self.to_dict(), **kw})

    def to_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=2) + "\n", encoding="utf-8")

    @classmethod
    def from_json(cls, path: str | Path):
        try:
            d = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise ConfigError(Message("cannot read config {path}: {err}; it must be a UTF-8 JSON object",
                                      path=path, err=str(e))) from None
        if not isinstance(d, dict):
            raise ConfigError(Message("config {path} must hold a JSON object", path=path))
        return cls.from_dict(d)


def _check_choice(name: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ConfigError(Message("{name}={value} is not valid; choose one of {choices}", name=name, value=repr(value),
                                  choices=", ".join(choices)))


def _check_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ConfigError(Message("{name}={value} must be true or false", name=name, value=repr(value)))


def check_range(name: str, value: Any, lo: float, hi: float, kind: type = float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not float(value).is_integer()):
        if kind is int:
            raise ConfigError(Message("{name}={value} must be a whole number in [{lo}, {hi}]", name=name,
                                      value=repr(value), lo=lo, hi=hi))
        raise ConfigError(Message("{name}={value} must be a number in [{lo}, {hi}]", name=name, value=repr(value),
                                  lo=lo, hi=hi))
    if not (lo <= value <= hi):
        raise ConfigError(Message("{name}={value} is out of range; use a value in [{lo}, {hi}]", name=name,
                                  value=repr(value), lo=lo, hi=hi))


def fan_in_init(hidden_size: int) -> float:
    """LeCun's fan-in std 1/sqrt(hidden_size) (0.125 at hidden 64), 4 decimals: the default init std."""
    return round(1 / math.sqrt(hidden_size), 4)


@dataclass
class BertConfig(JsonConfig):
    # Set from the tokenizer; the embedding table and (tied) MLM decoder have this many rows.
    vocab_size: int = 512
    # d_model. BERT-base uses 768; 64 is enough for the built-in grammar and trains in seconds.
    hidden_size: int = 64
    # Encoder blocks. BERT-base has 12; 2 already learns agreement and topic.
    num_hidden_layers: int = 2
    # Heads per layer; hidden_size must divide evenly (head dim = hidden/heads).
    num_attention_heads: int = 4
    # FFN width, 4x hidden as in BERT and Vaswani et al.
    intermediate_size: int = 256
    # Rows of the position table: the longest input the model can ever see.
    max_position_embeddings: int = 64
    # Segment (A/B) embedding rows; 2 for sentence pairs, 3 with segment_ids="1/2", 0 = no segment embedding
    # (the Annotated Transformer's embeddings have none).
    type_vocab_size: int = 2
    # Dropout after embeddings, attention output and FFN output. BERT uses 0.1; the tiny default has none: in a
    # one-minute run there is nothing to regularise yet, and 0.1 held NSP at chance for half the run.
    hidden_dropout_prob: float = 0.0
    # Dropout on the attention probabilities (0.1 in BERT; 0 by default for the same reason).
    attention_probs_dropout_prob: float = 0.0
    # BERT uses 1e-12; codertimo's custom LayerNorm used 1e-6.
    layer_norm_eps: float = 1e-12
    # gelu = exact erf GELU (BERT); gelu_tanh = tanh approximation (codertimo); relu (Annotated Transformer).
    hidden_act: str = "gelu"
    # Std of init="bert"'s normal(0, std) weights. BERT uses 0.02 (at hidden 768; the BERT-base preset sets it).
    # None = LeCun's fan-in 1/sqrt(hidden_size), 0.125 at hidden 64: with 0.02 a tiny model starts so quiet that
    # NSP waits at chance for half of a one-minute run (docs/BENCH-HISTORY.md, "Time to skill with the new tiny
    # defaults").
    initializer_range: float | None = None
    # Id of [PAD]; its attention keys are masked out and its embedding row is not special-cased.
    pad_token_id: int = 0
    # learned = a trained table (BERT, d2l, blog); sinusoidal = fixed Vaswani §3.5 table (codertimo, Annotated).
    position_embedding: str = "learned"
    # post = LN(x + Drop(F(x))) as in BERT and d2l; pre = x + Drop(F(LN(x))) (codertimo, Annotated);
    # sublayer_output = x + LN(Drop(F(x))), the norm on the sublayer output only (the blog's Add_Norm).
    norm_placement: str = "post"
    # A LayerNorm after the last block. None = only for pre-norm (the Annotated Transformer has one,
    # BERT-pytorch has none).
    final_layer_norm: bool | None = None
    # variance = (x - mean) / sqrt(biased var + eps), nn.LayerNorm (BERT, d2l, blog);
    # unbiased_std = (x - mean) / (unbiased std + eps), the seeds' own LayerNorm (codertimo, Annotated).
    layer_norm_style: str = "variance"
    # Multiply the token embeddings by sqrt(hidden_size) before adding positions (Vaswani §3.4, Annotated).
    embedding_scale: bool = False
    # LayerNorm on the embedding sum (BERT, blog); codertimo, Annotated and d2l have none.
    embedding_layer_norm: bool = True
    # Dropout on the embedding sum (BERT, codertimo, Annotated, blog); d2l's BERTEncoder has none.
    embedding_dropout: bool = True
    # Train the learned position table (BERT). False = a fixed random table: d2l adds pos_embedding.data,
    # so its N(0, 1) positions never receive a gradient. Only meaningful with position_embedding=learned.
    train_position_embeddings: bool = True
    # Dropout inside the FFN, after the activation (codertimo, Annotated): W2 Drop(act(W1 x)).
    ffn_dropout: bool = False
    # Dropout on each encoder block's output, x <- Drop(x) after both sublayers, at hidden_dropout_prob, on top of
    # the sublayer, attention and FFN dropouts: BERT-pytorch's TransformerBlock ends in self.dropout(x). BERT, HF
    # and the other seeds have none (seed 000's walkthrough does not show the block). Training only: in eval mode
    # dropout is the identity, so outputs, HF export and inference are unchanged.
    block_dropout: bool = False
    # Train the [PAD] row of the word embeddings like any other row. False = nn.Embedding(padding_idx=pad): the row
    # starts at zero and the lookup never sends it a gradient (BERT, BERT-pytorch; BERT's tied decoder still does).
    # True = a plain nn.Embedding (blog, Annotated, d2l): the row is drawn like the others and trains wherever
    # padding reaches the loss (the blog attends to padding; behind a padding mask its gradient is zero).
    train_pad_embedding: bool = False
    # Mask padded keys out of attention (BERT, codertimo, Annotated, d2l); the blog attends to padding.
    attention_padding_mask: bool = True
    # "0/1": segment A = 0, B = 1 (BERT, d2l). "1/2": A = 1, B = 2, padding = 0 with a zero, untrained row 0
    # (BERT-pytorch); needs type_vocab_size=3. The API always takes 0/1 token_type_ids; the model maps them.
    segment_ids: str = "0/1"
    # bert = normal(0, initializer_range) (BERT); pytorch = torch's module defaults (codertimo, blog, d2l);
    # xavier_uniform = Glorot-uniform on every matrix over torch's defaults (Annotated).
    init: str = "bert"
    # transform = dense+act+LayerNorm then decoder tied to word embeddings (BERT); linear = one untied Linear
    # (codertimo, blog); mlp = the same transform with an untied decoder (d2l's MaskLM: Linear, ReLU, LN, Linear).
    mlm_head: str = "transform"
    # pooler = tanh(dense(h_CLS)) then classifier (BERT, d2l); first_token = classifier on h_CLS directly (codertimo).
    nsp_head: str = "pooler"
    # bidirectional = every token attends to every token (BERT). left_to_right = a causal mask, each token sees
    # itself and its left (BERT Table 5's "LTR": a next-token LM like OpenAI GPT); it trains on the next token
    # instead of masked ones, and the sentence heads read the last real token, the only one that sees the whole
    # input (under a causal mask [CLS] sees only itself). Also applied when fine-tuning.
    attention_direction: str = "bidirectional"

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        check_range("vocab_size", self.vocab_size, 6, 250_000, int)
        check_range("hidden_size", self.hidden_size, 1, 4096, int)
        check_range("num_hidden_layers", self.num_hidden_layers, 1, 48, int)
        check_range("num_attention_heads", self.num_attention_heads, 1, 64, int)
        check_range("intermediate_size", self.intermediate_size, 1, 16384, int)
        check_range("max_position_embeddings", self.max_position_embeddings, 4, 8192, int)
        check_range("type_vocab_size", self.type_vocab_size, 0, 16, int)
        check_range("hidden_dropout_prob", self.hidden_dropout_prob, 0.0, 0.9)
        check_range("attention_probs_dropout_prob", self.attention_probs_dropout_prob, 0.0, 0.9)
        check_range("layer_norm_eps", self.layer_norm_eps, 1e-15, 1e-2)
        if self.initializer_range is None:  # hidden_size is already checked above
            self.initializer_range = fan_in_init(self.hidden_size)
        check_range("initializer_range", self.initializer_range, 1e-6, 1.0)
        check_range("pad_token_id", self.pad_token_id, 0, self.vocab_size - 1, int)
        _check_choice("hidden_act", self.hidden_act, ACTIVATIONS)
        _check_choice("position_embedding", self.position_embedding, POSITION_EMBEDDINGS)
        _check_choice("norm_placement", self.norm_placement, NORM_PLACEMENTS)
        _check_choice("mlm_head", self.mlm_head, MLM_HEADS)
        _check_choice("nsp_head", self.nsp_head, NSP_HEADS)
        _check_choice("layer_norm_style", self.layer_norm_style, LAYER_NORM_STYLES)
        _check_choice("init", self.init, INITS)
        _check_choice("segment_ids", self.segment_ids, SEGMENT_IDS)
        _check_choice("attention_direction", self.attention_direction, ATTENTION_DIRECTIONS)
        if self.final_layer_norm is None:
            self.final_layer_norm = self.norm_placement == "pre"
        for name in ("final_layer_norm", "embedding_scale", "embedding_layer_norm", "embedding_dropout",
                     "train_position_embeddings", "ffn_dropout", "block_dropout", "train_pad_embedding",
                     "attention_padding_mask"):
            _check_bool(name, getattr(self, name))
        if not self.train_position_embeddings and self.position_embedding != "learned":
            raise ConfigError(Message(
                "train_position_embeddings=false freezes a learned position table, but position_embedding="
                "{kind} has no trained table; use position_embedding=learned or leave "
                "train_position_embeddings=true", kind=self.position_embedding
            ))
        if self.segment_ids == "1/2" and self.type_vocab_size != 3:
            raise ConfigError(Message(
                "segment_ids=1/2 needs type_vocab_size=3 (rows: padding, A, B), not {n}; "
                "set type_vocab_size=3 or use segment_ids=0/1", n=self.type_vocab_size
            ))
        if self.hidden_size % self.num_attention_heads:
            ok = [h for h in range(1, min(self.hidden_size, 64) + 1) if self.hidden_size % h == 0]
            raise ConfigError(Message(
                "hidden_size={hidden} is not divisible by num_attention_heads={heads}; "
                "pick num_attention_heads from {ok} or change hidden_size",
                hidden=self.hidden_size, heads=self.num_attention_heads, ok=ok
            ))
        if self.position_embedding == "sinusoidal" and self.hidden_size % 2:
            raise ConfigError(Message(
                "hidden_size={hidden} is odd; sinusoidal position encoding pairs sin/cos dimensions, "
                "so use an even hidden_size or position_embedding=learned", hidden=self.hidden_size
            ))

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads

    @property
    def causal(self) -> bool:
        """A left-to-right model (BERT Table 5's LTR): a causal mask and a next-token objective."""
        return self.attention_direction == "left_to_right"


def check_optimizer_fields(cfg) -> None:
    """The fields pretraining (``TrainConfig``) and fine-tuning (``FinetuneConfig``) share, with one meaning and one
    range each: peak ``lr``, ``warmup_steps`` (a count of steps; None where a config allows a default share),
    AdamW ``weight_decay``, ``grad_clip`` and ``seed`` (BERT §A.2, §A.3: the same recipe for both)."""
    check_range("lr", cfg.lr, 0.0, 100.0)
    if cfg.warmup_steps is not None:
        check_range("warmup_steps", cfg.warmup_steps, 0, 1_000_000, int)
    check_range("weight_decay", cfg.weight_decay, 0.0, 1.0)
    check_range("grad_clip", cfg.grad_clip, 0.0, 1e6)
    check_range("seed", cfg.seed, 0, 2**63 - 1, int)


@dataclass
class TrainConfig(JsonConfig):
    # Optimizer steps to run.
    steps: int = 600
    # Sequences per step; batches are padded only to their own longest sequence. NSP needs ~100k
    # examples before it leaves chance level on the built-in corpus, so 600 steps need a large batch.
    batch_size: int = 256
    # Peak AdamW learning rate, reached after warmup (BERT: 1e-4 at base size with batch 256; a
    # 140k-parameter model tolerates and needs far more).
    lr: float = 8e-3
    # Linear warmup steps, then linear decay to 0 at `steps` (BERT §A.2).
    warmup_steps: int = 100
    # AdamW decoupled weight decay (BERT: 0.01), not applied to biases and LayerNorm.
    weight_decay: float = 0.01
    # Clip the global gradient norm to this (BERT: 1.0).
    grad_clip: float = 1.0
    # Longest [CLS] A [SEP] B [SEP]; pairs are truncated longest-first to fit.
    max_seq_len: int = 48
    # 0 = pad each batch to its longest pair (fast); N >= max_seq_len = pad every batch to N, as BERT-pytorch
    # pads to its seq_len (seed 003: 20). Only a model without a padding mask sees the difference.
    pad_to: int = 0
    # Share of non-special tokens selected for MLM (BERT §3.1: 15%).
    mlm_probability: float = 0.15
    # Of the selected: share replaced by [MASK] (80%).
    mask_token_frac: float = 0.8
    # Of the selected: share replaced by a random non-special token (10%); the rest are kept.
    random_token_frac: float = 0.1
    # Share of pairs whose B is the true next sentence (BERT §3.2: 50%); with sentence_task=sop the share in order.
    nsp_positive_prob: float = 0.5
    # The sentence-level task: nsp = is B the next sentence or a random one (BERT §3.2); sop = is the true pair in
    # order or swapped (ALBERT §4.6, sentence-order prediction); none = MLM alone, every pair still packed as
    # [CLS] A [SEP] B [SEP] with its true B (RoBERTa §4.2 found NSP unnecessary).
    sentence_task: str = "nsp"
    # What MLM selects: token = each token on its own (BERT §3.1); whole_word = every piece of a WordPiece word
    # together (BERT's 2019 whole-word masking); span = runs of whole words with geometric lengths (SpanBERT §3.1).
    # With a word-level vocabulary whole_word equals token.
    masking_unit: str = "token"
    # SpanBERT's span lengths: geometric with this p (0.2: mean 3.8 words once clipped at span_max_length).
    span_p: float = 0.2
    # The longest span, in words (SpanBERT: 10).
    span_max_length: int = 10
    # Seeds the init, the data order, masking and dropout: same seed, same loss curve.
    seed: int = 0
    # Evaluate on the held-out pairs every N steps (0 = never).
    eval_every: int = 50
    # Held-out examples per evaluation (fixed masks, so curves are comparable).
    eval_size: int = 256
    # Snapshot the probe pair's attention every N steps for the attention-over-training view (0 = never).
    snapshot_every: int = 25
    # torch threads for training; 1 keeps the UI responsive on a 2-core machine.
    num_threads: int = 1
    # Share of corpus pairs held out for evaluation.
    held_out_frac: float = 0.05

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        check_range("steps", self.steps, 1, 1_000_000, int)
        check_range("batch_size", self.batch_size, 1, 4096, int)
        check_optimizer_fields(self)
        check_range("max_seq_len", self.max_seq_len, 4, 8192, int)
        check_range("pad_to", self.pad_to, 0, 8192, int)
        if self.pad_to and self.pad_to < self.max_seq_len:
            raise ConfigError(Message(
                "pad_to={pad_to} is shorter than max_seq_len={max_len}; every batch is padded to "
                "pad_to, so set it to at least {max_len}, or 0 to pad each batch to its longest pair",
                pad_to=self.pad_to, max_len=self.max_seq_len
            ))
        check_range("mlm_probability", self.mlm_probability, 0.0, 1.0)
        check_range("mask_token_frac", self.mask_token_frac, 0.0, 1.0)
        check_range("random_token_frac", self.random_token_frac, 0.0, 1.0)
        check_range("nsp_positive_prob", self.nsp_positive_prob, 0.0, 1.0)
        _check_choice("sentence_task", self.sentence_task, SENTENCE_TASKS)
        _check_choice("masking_unit", self.masking_unit, MASKING_UNITS)
        check_range("span_p", self.span_p, 0.01, 1.0)
        check_range("span_max_length", self.span_max_length, 1, 64, int)
        check_range("eval_every", self.eval_every, 0, 1_000_000, int)
        check_range("eval_size", self.eval_size, 1, 100_000, int)
        check_range("snapshot_every", self.snapshot_every, 0, 1_000_000, int)
        check_range("num_threads", self.num_threads, 1, 256, int)
        check_range("held_out_frac", self.held_out_frac, 0.0, 0.5)
        if self.mask_token_frac + self.random_token_frac > 1.0 + 1e-9:
            raise ConfigError(Message(
                "mask_token_frac + random_token_frac = {total} > 1; "
                "they are shares of the selected tokens (the rest are kept), so lower one of them",
                total=f"{self.mask_token_frac + self.random_token_frac:.3f}"
            ))

    @property
    def keep_frac(self) -> float:
        return max(0.0, 1.0 - self.mask_token_frac - self.random_token_frac)


def measure_cadence(steps: int) -> dict[str, int]:
    """How often a run measures itself, from its length: about 20 held-out evaluations and 40 attention snapshots
    whatever the step count, so a live chart has the same density for a short run and a long one. The Train page
    and ``bertcore train`` both use it (unless ``--set eval_every=...`` / ``snapshot_every=...`` says otherwise), so
    the same corpus and settings give the same run in both."""
    return {"eval_every": max(10, int(steps) // 20), "snapshot_every": max(5, int(steps) // 40)}


def check_compatible(model: BertConfig, train: TrainConfig) -> None:
    """Cross-checks between the two configs (raises ConfigError with the fix)."""
    if train.max_seq_len > model.max_position_embeddings:
        raise ConfigError(Message(
            "max_seq_len={max_len} exceeds max_position_embeddings={max_pos}; "
            "lower max_seq_len or raise max_position_embeddings to at least {max_len}",
            max_len=train.max_seq_len, max_pos=model.max_position_embeddings
        ))
    if train.pad_to > model.max_position_embeddings:
        raise ConfigError(Message(
            "pad_to={pad_to} exceeds max_position_embeddings={max_pos}; "
            "lower pad_to (0 = pad to the longest pair) or raise max_position_embeddings to at least {pad_to}",
            pad_to=train.pad_to, max_pos=model.max_position_embeddings
        ))


def _parse_value(field_type: Any, key: str, raw: Any) -> Any:
    if not isinstance(raw, str):
        return raw
    t = field_type if isinstance(field_type, str) else getattr(field_type, "__name__", str(field_type))
    if t in ("bool", "bool | None"):
        low = raw.strip().lower()
        if low in ("none", "auto") and t == "bool | None":
            return None
        if low not in ("true", "false", "1", "0", "yes", "no"):
            raise ConfigError(Message("{name}={value} must be true or false", name=key, value=repr(raw)))
        return low in ("true", "1", "yes")
    try:
        if t == "int":
            v = float(raw)
            if not v.is_integer():
                raise ValueError
            return int(v)
        if t == "float":
            return float(raw)
        if t == "float | None":
            return None if raw.strip().lower() in ("none", "auto") else float(raw)
    except ValueError:
        if t == "int":
            raise ConfigError(Message("{name}={value} must be a whole number", name=key, value=repr(raw))) from None
        raise ConfigError(Message("{name}={value} must be a number", name=key, value=repr(raw))) from None
    return raw


def split_overrides(overrides: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Route KEY=VALUE overrides to BertConfig or TrainConfig, parsing strings to the field's type."""
    bert_fields = {f.name: f.type for f in fields(BertConfig)}
    train_fields = {f.name: f.type for f in fields(TrainConfig)}
    bert_kw: dict[str, Any] = {}
    train_kw: dict[str, Any] = {}
    for key, raw in overrides.items():
        if key in bert_fields:
            bert_kw[key] = _parse_value(bert_fields[key], key, raw)
        elif key in train_fields:
            train_kw[key] = _parse_value(train_fields[key], key, raw)
        else:
            valid = sorted(set(bert_fields) | set(train_fields))
            raise ConfigError(Message("unknown setting {key}; valid keys are: {valid}", key=repr(key),
                                      valid=", ".join(valid)))
    return bert_kw, train_kw


def estimate(model: BertConfig, train: TrainConfig | None = None) -> dict[str, Any]:
    """Parameter count per part and a rough training-memory estimate (bytes) before building anything.

    Memory = fp32 weights + grads + 2 AdamW moments (4 copies) + activations of one batch
    (per layer ~ B*T*(8*D + 2*F) floats plus B*H*T*T for attention probabilities).
    """
    d, f, v, L = model.hidden_size, model.intermediate_size, model.vocab_size, model.num_hidden_layers
    emb = v * d + model.type_vocab_size * d + (2 * d if model.embedding_layer_norm else 0)
    if model.position_embedding == "learned":
        emb += model.max_position_embeddings * d
    layer = 4 * (d * d + d) + 2 * d + (d * f + f) + (f * d + d) + 2 * d
    encoder = L * layer + (2 * d if model.final_layer_norm else 0)
    pooler = d * d + d if model.nsp_head == "pooler" else 0
    if model.mlm_head == "transform":
        mlm = d * d + d + 2 * d + v  # transform + LayerNorm + decoder bias (decoder weight tied)
    elif model.mlm_head == "mlp":
        mlm = d * d + d + 2 * d + d * v + v  # the same transform + an untied decoder
    else:
        mlm = d * v + v
    nsp = 2 * d + 2
    parts = {"embeddings": emb, "encoder": encoder, "pooler": pooler, "mlm_head": mlm, "nsp_head": nsp}
    total = sum(parts.values())
    mem = 4 * total * 4
    if train is not None:
        b, t = train.batch_size, train.max_seq_len
        act = L * (b * t * (8 * d + 2 * f) + 2 * b * model.num_attention_heads * t * t)
        act += b * t * 4 * d + int(b * t * train.mlm_probability + 1) * v * 2
        mem += 4 * act
    return {"params": total, "params_by_part": parts, "memory_bytes": int(mem)}
