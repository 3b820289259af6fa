"""Studies: the paper's ablation tables as lists of variants, each a set of switches on one base configuration.

A study is run over seeds by ``bertcore.launch.study`` and scored by ``bertcore.lab.evaluate``; every variant of one
seed starts from the same initial weights (same seed, same shapes) and sees the same pairs in the same order
(``bertcore.data.pretraining``: every objective advances the data generator alike). Each named study carries the
numbers its source reports beside the rows, with one sentence on what was measured there.

* ``bert-table-5``: BERT §5.1, Table 5: MLM + NSP vs MLM alone vs a left-to-right LM without NSP.
* ``bert-table-8``: BERT Appendix C.2, Table 8: the MASK / SAME / RND mix of the selected 15%.
* ``mask-rate``: Wettig et al. 2023: 15% to 80% of the tokens selected (80/10/10 each).
* ``sentence-task``: NSP (BERT §3.2) vs SOP (ALBERT §4.6) vs none (RoBERTa §4.2), scored on both kinds of pairs.
* ``masking-unit``: token vs whole word vs span (SpanBERT §3.1), on a WordPiece vocabulary that splits words.
* ``custom``: any Train-page switch as the varied dimension (``custom_study``).
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, fields

from bertcore.config import BertConfig, TrainConfig, split_overrides
from bertcore.errors import ConfigError
from bertcore.finetune.tuner import FinetuneConfig
from bertcore.message import Message

# What every pretraining variant is scored on (bertcore.lab.evaluate), in table order: key -> (short label, what)
METRICS: dict[str, tuple[str, str]] = {
    "mlm_acc": (Message("MLM acc"), Message(
        "held-out masked-token accuracy: 15% of the tokens, every one replaced by [MASK], the same batches for every "
        "variant (a left-to-right model has no [MASK] to fill: n/a)")),
    "next_token_acc": (Message("next-token acc"), Message("held-out next-token accuracy of a left-to-right model")),
    "nsp_acc": (Message("NSP acc"), Message(
        "the sentence head on held-out NSP pairs (half with a random B); n/a without a head")),
    "sop_acc": (Message("SOP acc"), Message(
        "the sentence head on held-out SOP pairs (half swapped): ALBERT's cross-evaluation")),
    "ft_same_topic": (Message("fine-tune pairs"), Message(
        "fine-tuned accuracy on same_topic (sentence pairs, 16 labels, 60 steps)")),
    "ft_coherence": (Message("fine-tune single"), Message(
        "fine-tuned accuracy on coherence (single sentences, 256 labels, 60 steps)")),
    "feature_topic": (Message("feature-based"), Message(
        "frozen encoder, a linear probe of each word's sentence topic (context_topic) at its best layer")),
    "skills": (Message("skills"), Message(
        "share of the grammar's word skills passed, mean over skills (the run's last evaluation): P(right) > "
        "P(wrong) at the [MASK]")),
    "skills_lm": (Message("skills (LM rule)"), Message(
        "the same skills for a left-to-right model, which has no [MASK] to read: passed when the sentence with the "
        "right word is the more probable one (not comparable with the MLM rule)")),
    "accuracy": (Message("held-out acc"), Message(
        "a fine-tune's held-out accuracy at its end (the task's fixed held-out split)")),
}
PRETRAINING_COLUMNS = tuple(k for k in METRICS if k != "accuracy")
STUDY_STEPS = 300  # the default steps: the reference (80/10/10, NSP) reaches NSP >= 0.9 on every seed (docs/LAB.md)
MAX_VARIANTS = 12
MAX_SEEDS = 10


@dataclass(frozen=True)
class Variant:
    name: str
    settings: dict  # BertConfig / TrainConfig fields this variant sets on the study's base
    paper: dict = field(default_factory=dict)  # the source's numbers for this row, by the study's paper columns

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Study:
    name: str
    title: str
    source: str  # the paper and table
    variants: tuple[Variant, ...]
    reference: str  # the variant every other is compared with
    base: dict = field(default_factory=dict)  # settings every variant starts from
    tokenizer: str = "word"
    tokenizer_vocab_size: int | None = None
    paper_columns: tuple[str, ...] = ()
    paper_note: str = ""  # one sentence on what the source measured
    found: str = ""  # what the source concluded, in a line
    columns: tuple[str, ...] = PRETRAINING_COLUMNS  # the table's metrics
    kind: str = "pretraining"  # pretraining | finetune (variants of one fine-tune: finetune_study)

    def variant(self, name: str) -> Variant:
        for v in self.variants:
            if v.name == name:
                return v
        raise ConfigError(Message("study {study} has no variant {name}", study=self.name, name=repr(name)))

    def finetune_config(self, variant: Variant, seed: int):
        """A fine-tune study's FinetuneConfig for one cell: the base config, the variant's labels, the seed."""
        kw = {**dict(self.base.get("finetune") or {}), **{k: v for k, v in variant.settings.items() if k != "init"}}
        return FinetuneConfig.from_dict({**kw, "seed": int(seed)})  # an old study.json may hold warmup_frac

    def configs(self, variant: Variant, seed: int, steps: int) -> tuple[BertConfig, TrainConfig]:
        """The configs of one run: defaults, the study's base, the variant's switches, the seed and the steps."""
        bert_kw, train_kw = split_overrides({**self.base, **variant.settings})
        cadence = {"eval_every": max(10, steps // 6), "snapshot_every": max(5, steps // 12)}
        tc = TrainConfig(**{**cadence, **train_kw, "steps": int(steps), "seed": int(seed)})
        return BertConfig(**bert_kw), tc

    def to_dict(self) -> dict:
        d = asdict(self)
        d["variants"] = [v.to_dict() for v in self.variants]
        return d


def slug(name: str) -> str:
    """A variant's name as a folder name ("80/10/10" -> "80-10-10")."""
    return re.sub(r"[^A-Za-z0-9]+", "-", name).strip("-").lower() or "variant"


def _mix(mask: float, same: float, rnd: float, paper: tuple[float, float, float]) -> Variant:
    name = f"{round(mask * 100)}/{round(same * 100)}/{round(rnd * 100)}"
    return Variant(name, {"mask_token_frac": mask, "random_token_frac": rnd},
                   dict(zip(("MNLI fine-tune", "NER fine-tune", "NER feature-based"), paper)))


STUDIES: dict[str, Study] = {
    "bert-table-5": Study(
        "bert-table-5", Message("Why bidirectional, why NSP"), Message("BERT (Devlin et al. 2019) §5.1, Table 5"),
        (Variant("BERT (MLM + NSP)", {}, {"MNLI-m": 84.4, "QNLI": 88.4, "MRPC": 86.7, "SST-2": 92.7,
                                           "SQuAD F1": 88.5}),
         Variant("No NSP", {"sentence_task": "none"},
                 {"MNLI-m": 83.9, "QNLI": 84.9, "MRPC": 86.5, "SST-2": 92.6, "SQuAD F1": 87.9}),
         Variant("LTR & No NSP", {"attention_direction": "left_to_right", "sentence_task": "none"},
                 {"MNLI-m": 82.1, "QNLI": 84.3, "MRPC": 77.5, "SST-2": 92.1, "SQuAD F1": 77.8})),
        "BERT (MLM + NSP)", paper_columns=("MNLI-m", "QNLI", "MRPC", "SST-2", "SQuAD F1"),
        paper_note=Message(
            "BERT-base (110M parameters) pretrained once per row on BooksCorpus and Wikipedia, then fine-tuned; "
            "dev-set accuracy (F1 for SQuAD), no spread reported. The paper's fourth row (+ BiLSTM on top of the LTR "
            "model while fine-tuning) is not rerun here."),
        found=Message("Removing NSP hurt QNLI, MNLI and SQuAD; the left-to-right model was worse on every task, most "
                      "on MRPC and SQuAD.")),
    "bert-table-8": Study(
        "bert-table-8", Message("Why 80/10/10"), Message("BERT (Devlin et al. 2019) Appendix C.2, Table 8"),
        (_mix(0.8, 0.1, 0.1, (84.2, 95.4, 94.9)), _mix(1.0, 0.0, 0.0, (84.3, 94.9, 94.0)),
         _mix(0.8, 0.0, 0.2, (84.1, 95.2, 94.6)), _mix(0.8, 0.2, 0.0, (84.4, 95.2, 94.7)),
         _mix(0.0, 0.2, 0.8, (83.7, 94.8, 94.6)), _mix(0.0, 0.0, 1.0, (83.6, 94.9, 94.6))),
        "80/10/10", paper_columns=("MNLI fine-tune", "NER fine-tune", "NER feature-based"),
        paper_note=Message(
            "BERT-base with each MASK/SAME/RND mix of the selected 15%, dev-set results of fine-tuning (MNLI, NER) "
            "and of a feature-based NER model on the concatenated last four layers; one run per row."),
        found=Message("Fine-tuning was robust to the mix; [MASK] alone (100/0/0) hurt the feature-based NER most, "
                      "and RND alone was worse than BERT's mix too.")),
    "mask-rate": Study(
        "mask-rate", Message("Why 15%"),
        Message("Wettig et al. 2023, \"Should You Mask 15% in Masked Language Modeling?\""),
        tuple(Variant(f"{round(p * 100)}%", {"mlm_probability": p}, paper) for p, paper in (
            (0.15, {"MNLI": 84.2, "QNLI": 90.9, "QQP": 87.8, "SST-2": 93.3}),
            (0.30, {"MNLI": 84.2, "QNLI": 91.6, "QQP": 88.0, "SST-2": 93.0}),
            (0.40, {"MNLI": 84.5, "QNLI": 91.6, "QQP": 88.1, "SST-2": 92.8}),
            (0.60, {"MNLI": 83.2, "QNLI": 90.7, "QQP": 87.8, "SST-2": 92.6}),
            (0.80, {"MNLI": 80.8, "QNLI": 87.9, "QQP": 87.1, "SST-2": 90.5}))),
        "15%", paper_columns=("MNLI", "QNLI", "QQP", "SST-2"),
        paper_note=Message(
            "24-layer models (the checkpoints efficient_mlm_m0.15 ... m0.80 of the authors' DinkyTrain README), "
            "dev-set accuracy after fine-tuning; the README lists 80-10-10 versions only at 15% and 40% (MNLI 83.7 "
            "and 84.3). Here every rate keeps BERT's 80/10/10."),
        found=Message("40% beat 15% for large models on GLUE and SQuAD, and even 80% kept about 95% of the "
                      "fine-tuning performance.")),
    "sentence-task": Study(
        "sentence-task", Message("Why a sentence task, and which"),
        Message("ALBERT (Lan et al. 2020) §4.6, Table 5; RoBERTa §4.2"),
        (Variant("NSP", {}, {"MLM": 54.5, "NSP": 90.5, "SOP": 52.0, "MNLI": 81.6, "SST-2": 91.1, "Avg": 79.2}),
         Variant("SOP", {"sentence_task": "sop"},
                 {"MLM": 54.0, "NSP": 78.9, "SOP": 86.5, "MNLI": 82.0, "SST-2": 90.3, "Avg": 80.1}),
         Variant("none", {"sentence_task": "none"},
                 {"MLM": 54.9, "NSP": 52.4, "SOP": 53.3, "MNLI": 81.5, "SST-2": 89.9, "Avg": 79.0})),
        "NSP", paper_columns=("MLM", "NSP", "SOP", "MNLI", "SST-2", "Avg"),
        paper_note=Message(
            "ALBERT-base: intrinsic accuracy on the MLM, NSP and SOP tasks (each model scored on both kinds of pairs) "
            "and dev-set downstream results; Avg over SQuAD1.1/2.0, MNLI, SST-2 and RACE. RoBERTa (Table 2) found "
            "that dropping NSP matched or slightly improved downstream results."),
        found=Message("NSP learned only topic shift (52% on SOP pairs); SOP also solved NSP pairs (78.9%) and helped "
                      "downstream by about 1 point.")),
    "masking-unit": Study(
        "masking-unit", Message("Why mask whole words or spans"),
        Message("SpanBERT (Joshi et al. 2020) §6.1, Table 6"),
        (Variant("token", {}, {"SQuAD 2.0": 83.8, "MNLI-m": 86.7, "QNLI": 92.5, "GLUE avg": 83.2}),
         Variant("whole word", {"masking_unit": "whole_word"},
                 {"SQuAD 2.0": 84.3, "MNLI-m": 86.3, "QNLI": 92.8, "GLUE avg": 82.9}),
         Variant("span", {"masking_unit": "span"},
                 {"SQuAD 2.0": 85.4, "MNLI-m": 87.0, "QNLI": 93.3, "GLUE avg": 83.4})),
        "token", tokenizer="wordpiece", tokenizer_vocab_size=300,
        paper_columns=("SQuAD 2.0", "MNLI-m", "QNLI", "GLUE avg"),
        paper_note=Message(
            "SpanBERT's ablation at 1.2M steps with NSP: subword tokens vs whole words vs geometric spans (p = 0.2, "
            "at most 10 words, mean 3.8), dev-set F1 for SQuAD and accuracy for MNLI and QNLI."),
        found=Message("Random spans beat single subword tokens on QA and most other tasks; whole words were in "
                      "between.")),
}
NAMES = (*STUDIES, "custom")


def get_study(name: str) -> Study:
    if name in STUDIES:
        return STUDIES[name]
    raise ConfigError(Message("unknown study {name}; choose one of {names} (custom needs --vary KEY=V1,V2,...)",
                              name=repr(name), names=", ".join(NAMES)))


def custom_study(vary: str, base: dict | None = None, tokenizer: str = "word") -> Study:
    """A study over one switch: ``vary`` = "KEY=V1,V2,..." (any BertConfig / TrainConfig field, the first value the
    reference), on ``base`` settings (KEY -> value). Every value is checked as a config now."""
    if not isinstance(vary, str) or "=" not in vary:
        raise ConfigError(Message("--vary {value}: give KEY=V1,V2,... with a BertConfig or TrainConfig field, e.g. "
                                  "--vary mlm_probability=0.15,0.4", value=repr(vary)))
    key, _, values = vary.partition("=")
    key = key.strip()
    vals = [v.strip() for v in values.split(",") if v.strip()]
    if len(vals) < 2 or len(set(vals)) != len(vals):
        raise ConfigError(Message("--vary {key}=...: give at least two different values separated by commas",
                                  key=key))
    if len(vals) > MAX_VARIANTS:
        raise ConfigError(Message("--vary takes at most {n} values", n=MAX_VARIANTS))
    if key in ("seed", "steps"):
        raise ConfigError(Message("--vary {key}: seeds and steps are the study's own (--seeds, --steps); vary a "
                                  "design switch", key=key))
    known = {f.name for f in fields(BertConfig)} | {f.name for f in fields(TrainConfig)}
    if key not in known:
        raise ConfigError(Message("unknown setting {key}; valid keys are: {valid}", key=repr(key),
                                  valid=", ".join(sorted(known))))
    base = dict(base or {})
    variants = []
    for v in vals:
        b, t = split_overrides({**base, key: v})
        BertConfig(**b), TrainConfig(**{**t, "steps": STUDY_STEPS})  # a bad value says so now
        variants.append(Variant(f"{key}={v}", {key: v}))
    return Study("custom", Message("Custom: {key}", key=key), Message("your own study"), tuple(variants),
                 variants[0].name, base=base,
                 tokenizer=tokenizer, found="", paper_note="")


def finetune_study(start: str, source: str, task: str, config: dict, points=None, name: str = "") -> Study:
    """What pretraining buys (BERT §4; d2l §14.8): the same fine-tune from ``start``'s weights and from random
    initial weights of the same architecture; with ``points`` (label counts, 0 = all) the label sweep, both at each
    count. ``config``: FinetuneConfig fields; ``start``: a checkpoint folder or "minilm"."""
    inits = (("pretrained", "from pretrained weights"), ("random", "from random init weights"))
    if points is None:
        variants = tuple(Variant(label, {"init": init}) for init, label in inits)
        title, kind_name = Message("What pretraining buys"), "finetune-comparison"
    else:
        variants = tuple(Variant(f"{label}, {int(n) or 'all'} labels", {"init": init, "labels": int(n)})
                         for n in points for init, label in inits)
        title, kind_name = Message("The label sweep"), "label-sweep"
    return Study(name or kind_name, title, Message("BERT §4 / §5: pretraining transfers with few labels"), variants,
                 variants[0].name, base={"start": str(start), "source": source, "task": task, "finetune": dict(config)},
                 columns=("accuracy",), kind="finetune")


def study_from_dict(d: dict) -> Study:
    """The study a study.json holds (named studies come back from the table above, custom ones from the file)."""
    if d.get("name") in STUDIES:
        return STUDIES[d["name"]]
    vs = tuple(Variant(str(v["name"]), dict(v.get("settings") or {}), dict(v.get("paper") or {}))
               for v in d.get("variants") or [])
    if not vs:
        raise ConfigError(Message("the study file lists no variants"))
    return Study(str(d.get("name") or "custom"), str(d.get("title") or "custom"), str(d.get("source") or ""), vs,
                 str(d.get("reference") or vs[0].name), dict(d.get("base") or {}), str(d.get("tokenizer") or "word"),
                 d.get("tokenizer_vocab_size"), tuple(d.get("paper_columns") or ()), str(d.get("paper_note") or ""),
                 str(d.get("found") or ""), tuple(d.get("columns") or PRETRAINING_COLUMNS),
                 str(d.get("kind") or "pretraining"))
