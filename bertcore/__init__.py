"""bertcore: a from-scratch BERT (Devlin et al. 2019) that trains, predicts and explains itself.

The front door: ``from bertcore import ...`` gives the names a notebook needs. This docstring is their one
list; every other name is imported from the module that defines it (docs/CONTRACT.md maps the modules).

Build and train (BERT §3: pre-training on MLM §3.1 + NSP §3.2)
    BertConfig          the model's sizes and design switches (bertcore.config)
    TrainConfig         steps, batch, learning rate, masking rates, seed (bertcore.config)
    BertForPreTraining  the encoder with its MLM and NSP heads, HF modeling_bert names (bertcore.model.bert)
    init_model          a fresh BertForPreTraining whose init depends only on a seed (bertcore.model.bert)
    Trainer             step() / run(n) / stop(); history, attention snapshots (bertcore.training.trainer)
    preset              (BertConfig overrides, TrainConfig overrides) of a seed design at a size (bertcore.presets)
    PRESETS             every preset's tiny pair, by name (bertcore.presets)

Runs (what the CLI and the app write and read)
    RunSpec             what to train: configs, corpus, tokenizer, preset (bertcore.launch.service)
    train               train a RunSpec into a run directory, the route of the CLI and the app
                        (bertcore.launch.service)
    load_checkpoint     open a run or checkpoint directory: a ModelBundle with .model and .tokenizer
                        (bertcore.io.checkpoint)

Data (the built-in corpora: generated grammars whose right answers are known)
    builtin_corpus      the English grammar, about 24,000 sentence pairs (bertcore.data.corpus)
    builtin_zh_corpus   the Chinese grammar (bertcore.data.corpus_zh)
    tutorial_corpus     the two-line corpus of the BERT-pytorch tutorial (bertcore.data.corpus)
    get_corpus          a corpus by spec: "builtin", "builtin-zh", "tutorial", "builtin:7" or a file
                        (bertcore.data.corpora)

Ask and look inside
    fill_mask           top-k words for each [MASK] (bertcore.analysis.inference)
    nsp_probability     P(IsNext) of a sentence pair (bertcore.analysis.inference)
    inspect_pair        tokens, segment ids and every head's attention [layers, heads, T, T]
                        (bertcore.analysis.inference)
    trace               the glass box: every named tensor of one layer for one input (Q, K, V, scores,
                        softmax, context, W^O, residual, LayerNorm, FFN; docs/TENSORS.md)
                        (bertcore.analysis.trace)

Example (the README's)::

    from bertcore import BertConfig, TrainConfig, Trainer, builtin_corpus, fill_mask, inspect_pair
    trainer = Trainer(BertConfig(), TrainConfig(steps=300), builtin_corpus())
    trainer.run()
    fill_mask(trainer.model, trainer.tokenizer, "the cows [MASK] muddy .").masks[0].candidates

The names load on first use (PEP 562), so ``import bertcore`` and ``python -m bertcore --help`` stay quick.
"""
import importlib as _importlib
import os as _os

# OpenMP's active spin-wait keeps a core busy while it waits, which starves the UI's process beside a training.
# It must be set before torch is imported to take effect.
_os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"

# name -> the module that defines it. The one place that hands names on from other modules (the front door);
# tests/test_front_door.py checks that each module here defines its name and that the docstring lists them all.
_FRONT_DOOR = {
    "BertConfig": "bertcore.config",
    "TrainConfig": "bertcore.config",
    "BertForPreTraining": "bertcore.model.bert",
    "init_model": "bertcore.model.bert",
    "Trainer": "bertcore.training.trainer",
    "preset": "bertcore.presets",
    "PRESETS": "bertcore.presets",
    "RunSpec": "bertcore.launch.service",
    "train": "bertcore.launch.service",
    "load_checkpoint": "bertcore.io.checkpoint",
    "builtin_corpus": "bertcore.data.corpus",
    "builtin_zh_corpus": "bertcore.data.corpus_zh",
    "tutorial_corpus": "bertcore.data.corpus",
    "get_corpus": "bertcore.data.corpora",
    "fill_mask": "bertcore.analysis.inference",
    "nsp_probability": "bertcore.analysis.inference",
    "inspect_pair": "bertcore.analysis.inference",
    "trace": "bertcore.analysis.trace",
}

__all__ = list(_FRONT_DOOR)


def __getattr__(name: str):
    module = _FRONT_DOOR.get(name)
    if module is None:
        raise AttributeError(f"module 'bertcore' has no attribute {name!r}; the front door has {', '.join(__all__)} "
                             "(every other name is imported from its module, e.g. bertcore.analysis.lens)")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
