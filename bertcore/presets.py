"""Named presets: one per seed tutorial's design (the seed documents; docs/PRESETS.md), each in two sizes.

``preset(name, size)`` returns ``(BertConfig overrides, TrainConfig overrides)``. ``size="paper"`` is the model
size the seed's own code or paper uses (original BERT: BERT-base), ``size="tiny"`` the same design at the size that
trains on the built-in corpus in about a minute. ``resolve_preset`` also reads the names used before presets and
sizes were renamed ("original BERT (tiny)", size "seed") and says what they are now.
``PRESETS[name]`` is the tiny pair (what the Train page offers). Each preset sets every design switch of
``BertConfig`` explicitly, so two presets differ exactly where their seeds do; tests/test_tutorial_presets.py
rebuilds each seed's model from the seed's own equations and checks bertcore's forward against it.

Where a seed leaves something out, the preset fills it with BERT's choice and says so in ``PRESET_NOTES``.
Where a seed has a known defect, the preset keeps the fix: NSP is a cross-entropy over both labels
(BERT-pytorch's NLLLoss(ignore_index=0) dropped every NotNext example), a random "next" sentence is never the
true one, and learned positions are sliced to the input's length (the blog's embedding needed inputs padded to
the full table).
"""
from __future__ import annotations

from typing import Any

from bertcore.message import Message

# The design switches, by seed. Sizes are added by SIZES below.
_DESIGNS: dict[str, dict[str, Any]] = {
    "original BERT": dict(  # Devlin et al. 2019 / HF transformers' modeling_bert
        position_embedding="learned", train_position_embeddings=True, norm_placement="post",
        final_layer_norm=False, layer_norm_style="variance", layer_norm_eps=1e-12, embedding_scale=False,
        embedding_layer_norm=True, embedding_dropout=True, hidden_act="gelu", ffn_dropout=False,
        block_dropout=False, train_pad_embedding=False, attention_padding_mask=True, segment_ids="0/1",
        type_vocab_size=2, init="bert", mlm_head="transform", nsp_head="pooler",
        hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1),
    "BERT-pytorch (codertimo)": dict(  # seeds 000 and 003, and the published package (bert-pytorch 0.0.1a4)
        position_embedding="sinusoidal", train_position_embeddings=True, norm_placement="pre",
        final_layer_norm=False, layer_norm_style="unbiased_std", layer_norm_eps=1e-6, embedding_scale=False,
        embedding_layer_norm=False, embedding_dropout=True, hidden_act="gelu_tanh", ffn_dropout=True,
        block_dropout=True, train_pad_embedding=False, attention_padding_mask=True, segment_ids="1/2",
        type_vocab_size=3, init="pytorch", mlm_head="linear", nsp_head="first_token",
        hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1),
    "blog BertModel": dict(  # seed 001
        position_embedding="learned", train_position_embeddings=True, norm_placement="sublayer_output",
        final_layer_norm=False, layer_norm_style="variance", layer_norm_eps=1e-5, embedding_scale=False,
        embedding_layer_norm=True, embedding_dropout=True, hidden_act="gelu", ffn_dropout=False,
        block_dropout=False, train_pad_embedding=True, attention_padding_mask=False, segment_ids="0/1",
        type_vocab_size=2, init="pytorch", mlm_head="linear", nsp_head="pooler",
        hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1),
    "Annotated Transformer": dict(  # seed 002: its encoder and embeddings under BERT's two heads
        position_embedding="sinusoidal", train_position_embeddings=True, norm_placement="pre",
        final_layer_norm=True, layer_norm_style="unbiased_std", layer_norm_eps=1e-6, embedding_scale=True,
        embedding_layer_norm=False, embedding_dropout=True, hidden_act="relu", ffn_dropout=True,
        block_dropout=False, train_pad_embedding=True, attention_padding_mask=True, segment_ids="0/1",
        type_vocab_size=0, init="xavier_uniform", mlm_head="linear", nsp_head="first_token",
        hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1),
    "d2l": dict(  # seed 004: pos_embedding.data (a fixed N(0, 1) table) and no dropout on the embedding sum
        position_embedding="learned", train_position_embeddings=False, norm_placement="post",
        final_layer_norm=False, layer_norm_style="variance", layer_norm_eps=1e-5, embedding_scale=False,
        embedding_layer_norm=False, embedding_dropout=False, hidden_act="relu", ffn_dropout=False,
        block_dropout=False, train_pad_embedding=True, attention_padding_mask=True, segment_ids="0/1",
        type_vocab_size=2, init="pytorch", mlm_head="mlp", nsp_head="pooler",
        hidden_dropout_prob=0.2, attention_probs_dropout_prob=0.2),
}

_TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=256,
             max_position_embeddings=64)
_BERT_BASE = dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
                  max_position_embeddings=512)

# name -> size -> (model sizes, train overrides). Vocabulary sizes always come from the tokenizer.
SIZES: dict[str, dict[str, tuple[dict[str, Any], dict[str, Any]]]] = {
    "original BERT": {
        # no dropout at tiny size: in a one-minute run it held NSP at chance for half the run (docs/BENCH-HISTORY.md)
        "tiny": (dict(_TINY, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0), {}),
        # BERT-base (§3, §A.2): 110M parameters with the 30522-word vocabulary; lr 1e-4, sequences of 128
        "paper": (dict(_BERT_BASE, initializer_range=0.02), dict(lr=1e-4, max_seq_len=128, batch_size=32,
                                                                warmup_steps=1000)),
    },
    "BERT-pytorch (codertimo)": {
        "tiny": (_TINY, {}),
        # hidden 768, 12 layers, 12 heads, FFN 4 x hidden, PositionalEmbedding(max_len=512); seq_len 20, every
        # example padded to it (seed 003)
        "paper": (dict(_BERT_BASE), dict(lr=1e-4, max_seq_len=20, pad_to=20, batch_size=64, warmup_steps=1000)),
    },
    "blog BertModel": {
        "tiny": (_TINY, {}),
        # the seed's config dict shows no values; its keys are BERT's, so BERT-base is assumed
        "paper": (_BERT_BASE, dict(lr=1e-4, max_seq_len=128, batch_size=32, warmup_steps=1000)),
    },
    "Annotated Transformer": {
        "tiny": (_TINY, {}),
        # make_model: N=6, d_model=512, d_ff=2048, h=8, dropout 0.1, PositionalEncoding(max_len=5000)
        "paper": (dict(hidden_size=512, num_hidden_layers=6, num_attention_heads=8, intermediate_size=2048,
                      max_position_embeddings=5000), dict(lr=1e-4, max_seq_len=128, batch_size=32, warmup_steps=1000)),
    },
    "d2l": {
        "tiny": (_TINY, {}),
        # num_hiddens=768, ffn_num_hiddens=1024, num_heads=4, num_layers=2, dropout=0.2, max_len=1000
        "paper": (dict(hidden_size=768, num_hidden_layers=2, num_attention_heads=4, intermediate_size=1024,
                      max_position_embeddings=1000), dict(lr=1e-4, max_seq_len=64, batch_size=64, warmup_steps=100)),
    },
}

TUTORIAL_FILES = {"original BERT": None, "BERT-pytorch (codertimo)": ("000", "003"), "blog BertModel": ("001",),
              "Annotated Transformer": ("002",), "d2l": ("004",)}

PRESET_NOTES: dict[str, list[Message]] = {
    "original BERT": [
        Message("matches HF transformers' BertForPreTraining (tests/test_model.py)"),
        Message("at tiny size: no dropout (BERT: 0.1) and init std 1/√hidden = 0.125 (BERT: 0.02 at hidden 768), "
                "so NSP leaves chance in the first third of a one-minute run instead of after half of it; the paper "
                "size (BERT-base) uses BERT's 0.1 and 0.02"),
    ],
    "BERT-pytorch (codertimo)": [
        Message("segment ids 1/2 with 0 for padding; token_type_ids stay 0/1 at the API and are mapped inside the model"),
        Message("MLM and NSP heads return logits; the seed's LogSoftmax + NLLLoss is the same loss as cross-entropy"),
        Message("NSP loss counts both labels (the seed's NLLLoss(ignore_index=0) dropped every NotNext example)"),
        Message("block_dropout=true: BERT-pytorch's TransformerBlock ends in a dropout of its output, on top of the "
                "attention, sublayer and FFN dropouts (the package has it; seed 000's walkthrough does not show the block)"),
        Message("BERT-pytorch passes its dropout rate only to the sublayers, the FFN and the block; its embedding and "
                "attention dropouts are fixed at 0.1, the preset's rate for all of them"),
        Message("vocabulary: at paper size BERT-pytorch's own (tokenizer bert_pytorch: <pad> <unk> <eos> <sos> <mask> "
                "at ids 0-4, then whitespace words, case kept, by frequency; inputs <sos> A <eos> B <eos>); at tiny "
                "size the project's word-level one ([PAD] [UNK] [CLS] [SEP] [MASK], lowercased, punctuation split off); "
                "either can be chosen"),
    ],
    "blog BertModel": [
        Message("Multi_Head_Att, Feed_Forward and BertPooler are not shown in the seed: BERT's (Q/K/V/O projections, "
                "Linear-GELU-Linear, tanh pooler) are assumed; Add_Norm is taken as a LayerNorm of the sublayer output"),
        Message("sizes are not shown in the seed: BERT-base is assumed for size=paper"),
        Message("positions are sliced to the input length (the seed indexed the full table, so inputs had to be padded "
                "to max_position_embeddings)"),
        Message("its word embedding has no padding_idx and it attends to padding, so the [PAD] row trains: "
                "train_pad_embedding=true"),
    ],
    "Annotated Transformer": [
        Message("the notebook stops before BERT's heads: the MLM head is its Generator (one Linear, log-softmax) and NSP "
                "reads the first position, as in BERT-pytorch"),
        Message("no segment embeddings: the seed's Embeddings are lut(x) * sqrt(d_model) + PE"),
        Message("lut is a plain nn.Embedding (xavier-initialised, no padding_idx): train_pad_embedding=true"),
    ],
    "d2l": [
        Message("seed 004 adds pos_embedding.data, so its N(0, 1) position table never trains: "
                "train_position_embeddings=false; the published d2l package (1.0.3) adds pos_embedding itself, so there the "
                "table trains: train_position_embeddings=true gives the package's model (CLI: --set "
                "train_position_embeddings=true)"),
        Message("d2l has no dropout on the embedding sum: embedding_dropout=false"),
        Message("its token embedding is a plain nn.Embedding (no padding_idx): train_pad_embedding=true"),
    ],
}

PRESET_SIZES = ("tiny", "paper")
# names accepted for compatibility (runs and scripts made before the rename) -> today's name
OLD_PRESET_NAMES = {"original BERT (tiny)": "original BERT"}
OLD_PRESET_SIZES = {"seed": "paper"}

# The vocabulary each preset trains with by default, where it is not the project's word-level one ("word").
_TOKENIZERS: dict[tuple[str, str], str] = {("BERT-pytorch (codertimo)", "paper"): "bert_pytorch"}


def preset_tokenizer(name: str | None, size: str = "tiny") -> str:
    """The tokenizer kind (bertcore.data.tokenization.TOKENIZER_KINDS) preset ``name`` at ``size`` trains with by
    default: the tutorial's own vocabulary where the preset reproduces it, else "word" (also for no preset)."""
    return _TOKENIZERS.get((name or "", size), "word")


def preset(name: str, size: str = "tiny") -> tuple[dict[str, Any], dict[str, Any]]:
    """(BertConfig overrides, TrainConfig overrides) of preset ``name`` at ``size`` ("tiny" or "paper").

    Raises KeyError with the valid names; the CLI and the pages turn it into a message."""
    if name not in _DESIGNS:
        raise KeyError(f"unknown preset {name!r}; choose one of: {', '.join(_DESIGNS)}")
    if size not in PRESET_SIZES:
        raise KeyError(f"unknown preset size {size!r}; choose one of: {', '.join(PRESET_SIZES)}")
    dims, train = SIZES[name][size]
    return {**_DESIGNS[name], **dims}, dict(train)


PRESETS: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {n: preset(n, "tiny") for n in _DESIGNS}


def resolve_preset(name: str | None, size: str = "tiny") -> tuple[str | None, str, str | None]:
    """(today's preset name, today's size, a notice or None) for a name or size from before the rename."""
    new_name, new_size = OLD_PRESET_NAMES.get(name, name), OLD_PRESET_SIZES.get(size, size)
    changed = [f"preset {name!r} is now {new_name!r}"] if new_name != name else []
    changed += [f"size {size!r} is now {new_size!r}"] if new_size != size else []
    return new_name, new_size, ("; ".join(changed) + "; using it") if changed else None
