"""The one training route: a ``RunSpec`` goes in, a run directory comes out (BERT §3.1 MLM + §3.2 NSP pretraining).

Every front end trains through ``train`` (and ``resume``): ``python -m bertcore train``, the app's Train page,
Compare designs and the "Train the default model" buttons. Each caller only drives it: it passes its
``Callbacks`` (``bertcore.training.callbacks``: start, step, eval, checkpoint, end) and a ``StopSignal``; the
service builds config → memory budget → corpus and tokenizer → ``Trainer``, and keeps the run directory current
(layout in ``bertcore.training.runs``): the checkpoint, history.csv, attention snapshots, the weights of every
evaluation (``bertcore.io.steps``), the resume state and run.json are rewritten atomically at every held-out
evaluation and when training ends, never every step. The loop that does it for every kind of training
(``drive``, ``Route``, ``StopSignal``, ``open_run_dir``) is ``bertcore.training.drive``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from bertcore.analysis.live_probe import Probe, read_probe_csv
from bertcore.analysis.records import PROBE_FILE, SKILL_ITEMS_FILE, SKILLS_FILE, TrainingRecords  # noqa: F401
from bertcore.analysis.skills import SkillSuite
from bertcore.config import BertConfig, TrainConfig, check_compatible, estimate
from bertcore.data.corpora import is_builtin_spec
from bertcore.data.corpus import Corpus, suggested_vocab_size
from bertcore.data.corpus_defaults import default_tokenizer
from bertcore.data.pretraining import MaskingRates
from bertcore.data.shard_batches import ShardData
from bertcore.data.shards import ShardReader
from bertcore.data.skill_items import parse_skill_csv, read_items_jsonl
from bertcore.data.tokenization import TOKENIZER_KINDS, canonical_kind, load_tokenizer
from bertcore.errors import ConfigError, InputError
from bertcore.io.checkpoint import ModelBundle, atomic_write, load_checkpoint, save_checkpoint
from bertcore.io.steps import truncate_after
from bertcore.message import Message
from bertcore import settings
from bertcore.training import locks, runs
from bertcore.training.callbacks import Callbacks
from bertcore.training.device import Runtime
from bertcore.training.drive import RunResult, StopSignal, drive, drive_quietly, open_run_dir
from bertcore.training.history import History
from bertcore.training.loop import run_steps
from bertcore.training.resume import RESUME_FILE, load_trainer_state
from bertcore.training.run_corpus import CORPUS_FILE, DOCUMENTS_FILE, SHARDS_PREFIX, load_run_corpus
from bertcore.training.trainer import Trainer


def max_model_mb() -> float:
    """Training-memory budget per run in MB: env BERTCORE_MAX_MODEL_MB (default 1024, at least 1)."""
    return settings.number("BERTCORE_MAX_MODEL_MB")


def check_budget(model_config: BertConfig, train_config: TrainConfig, est: dict | None = None) -> dict:
    """``estimate(...)`` of a pair of configs (``est`` when already computed); ConfigError when it is over
    ``max_model_mb()``. The one place the memory-budget rule is written (the Train page shows it before Start)."""
    est = est if est is not None else estimate(model_config, train_config)
    budget = max_model_mb()
    if est["memory_bytes"] > budget * 2**20:
        raise ConfigError(Message("this configuration needs about {mb} MB to train ({params} parameters), over the "
                                  "server's budget of {budget} MB (BERTCORE_MAX_MODEL_MB); use fewer layers, a smaller "
                                  "hidden/FFN size, a smaller batch or a shorter max length, or raise the budget",
                                  mb=f"{est['memory_bytes'] / 2**20:,.0f}", params=f"{est['params']:,}",
                                  budget=f"{budget:,.0f}"))
    return est


@dataclass(slots=True)  # slots: a misspelt or removed field is an error, never silently ignored
class RunSpec:
    """What to train. ``corpus`` is a ``get_corpus`` spec ("builtin", "builtin:7", "tutorial", a file) or a
    ``Corpus``; give ``corpus_spec`` with a Corpus object that a spec rebuilds (else its pairs are stored in
    the run as corpus.tsv so it can be resumed). ``tokenizer``: "word", "wordpiece", "bert_pytorch" (BERT-pytorch's
    vocabulary, bertcore.data.bert_pytorch_vocab; its older name is read too) or a tokenizer object.
    ``init_from``: a checkpoint directory whose weights and tokenizer start the run (fine-tuning)."""

    model_config: BertConfig
    train_config: TrainConfig
    corpus: Any = "builtin"
    corpus_spec: str | None = None
    tokenizer: Any = "word"
    tokenizer_vocab_size: int | None = 1000  # for "wordpiece"; None: bertcore.data.corpus.suggested_vocab_size
    preset: str | None = None
    name: str = ""
    init_from: str | Path | None = None
    source: str = "bertcore train"
    data: str | Path | None = None  # a folder made by `bertcore prepare`: train from its shards, not `corpus`
    runtime: Any = None  # bertcore.training.device.Runtime: device, bf16, grad_accum, DDP rank (default: CPU, fp32)
    probe: Any = "default"  # the live probe (bertcore.analysis.live_probe.Probe), "default" from the corpus, or None
    model: Any = None  # a prepared initial model (Compare designs: same initial weights), trained in place
    skills: bool = True  # score the built-in grammar's skills at every evaluation (bertcore.analysis.skills)
    skill_csv: tuple[str, bytes] | None = None  # (name, bytes) of a user's own items (text,right,wrong), scored too
    defaults: dict | None = None  # bertcore.data.corpus_defaults.CorpusDefaults.to_dict(): recorded in run.json
    resume_from: str | Path | None = None  # a stopped run directory to continue instead (the configs: for display)
    run_dir: str | Path | None = None  # where the run is written (None: a new folder below the caller's parent)
    evaluate: bool = False  # once finished, score it as the lab does (bertcore.lab.evaluate: evaluation.json)
    checked: str | None = None  # what check() passed for (``check_key``); to_json carries it: not checked again

    def to_json(self, folder: Path, i: int) -> dict:
        """This spec as a JSON object for a training in another process (bertcore.launch.worker); the corpus, a
        tokenizer object, a prepared model and a skills file go into ``folder`` as files (JSON, the tokenizer's
        own files, safetensors: never a pickle), named with ``i``."""
        if self.resume_from is not None:
            return {"resume": str(self.resume_from), "name": self.name, "evaluate": bool(self.evaluate)}
        e = {"run_dir": None if self.run_dir is None else str(self.run_dir), "evaluate": bool(self.evaluate),
             "model_config": self.model_config.to_dict(), "train_config": self.train_config.to_dict(),
             "corpus_spec": self.corpus_spec, "preset": self.preset, "name": self.name, "source": self.source,
             "defaults": self.defaults, "skills": bool(self.skills), "checked": self.checked,
             "runtime": self.runtime.to_dict() if self.runtime is not None else None}
        if isinstance(self.corpus, str):
            e["corpus"] = self.corpus
        else:
            c = self.corpus
            e["corpus"] = {"file": f"corpus_{i}.json"}
            atomic_write(folder / e["corpus"]["file"], json.dumps(
                {"name": c.name, "description": c.description, "meta": c.meta, "pairs": [list(p) for p in c.pairs],
                 "documents": c.documents}, ensure_ascii=False, default=str))
        if self.tokenizer is None or isinstance(self.tokenizer, str):
            e["tokenizer"] = self.tokenizer
        else:
            e["tokenizer"] = {"dir": f"tokenizer_{i}", "kind": getattr(self.tokenizer, "kind", None)}
            (folder / e["tokenizer"]["dir"]).mkdir()
            self.tokenizer.save(folder / e["tokenizer"]["dir"])
        e["probe"] = {"probe": self.probe.to_dict()} if isinstance(self.probe, Probe) else self.probe  # or None
        if self.model is not None:
            if self.tokenizer is None or isinstance(self.tokenizer, str):
                raise ValueError("a prepared model needs its tokenizer object in the RunSpec")
            e["model"] = f"model_{i}"
            save_checkpoint(ModelBundle(model=self.model, tokenizer=self.tokenizer), folder / e["model"])
        if self.skill_csv:
            name, data = self.skill_csv
            e["skill_csv"] = {"name": name, "file": f"skills_{i}.csv"}
            atomic_write(folder / e["skill_csv"]["file"], bytes(data))
        return e

    @classmethod
    def from_json(cls, e: dict, folder: Path, runtime: Runtime | None = None) -> RunSpec:
        """The spec ``to_json`` wrote (``runtime``: where a resume goes on; a new run carries its own)."""
        if "resume" in e:
            return cls(None, None, name=e.get("name") or "", resume_from=e["resume"], runtime=runtime,
                       evaluate=bool(e.get("evaluate")))
        corpus = e["corpus"]
        if isinstance(corpus, dict):
            raw = json.loads((folder / corpus["file"]).read_text(encoding="utf-8"))
            corpus = Corpus(raw["name"], [tuple(p) for p in raw["pairs"]], raw.get("description", ""),
                            raw.get("meta") or {}, raw.get("documents"))
        tok = e.get("tokenizer")
        if isinstance(tok, dict):
            tok = load_tokenizer(folder / tok["dir"], kind=tok.get("kind"))
        probe = e.get("probe")
        if isinstance(probe, dict):
            probe = Probe(**probe["probe"])
        model = load_checkpoint(folder / e["model"]).model.train() if e.get("model") else None
        skill_csv = None
        if e.get("skill_csv"):
            skill_csv = (e["skill_csv"]["name"], (folder / e["skill_csv"]["file"]).read_bytes())
        return cls(BertConfig.from_dict(e["model_config"]), TrainConfig.from_dict(e["train_config"]), corpus=corpus,
                   corpus_spec=e.get("corpus_spec"), tokenizer=tok if tok is not None else "word",
                   preset=e.get("preset"), name=e.get("name") or "", source=e.get("source") or "bertcore train",
                   probe=probe, model=model, skills=bool(e.get("skills", True)),
                   skill_csv=skill_csv, defaults=e.get("defaults"),
                   runtime=Runtime.from_dict(e["runtime"]) if e.get("runtime") else None,
                   run_dir=e.get("run_dir"), evaluate=bool(e.get("evaluate")), checked=e.get("checked"))

    def check(self, est: dict | None = None) -> dict:
        """Check this spec as a whole: the two configs agree, a shards run keeps BERT's own objective, and it fits
        the memory budget at the vocabulary known now (a tokenizer object's, else the config's). Called where a
        spec is built (the Train page, the CLI) and by ``train``; ConfigError says what to change. The estimate,
        or {} for a resume (``resume`` checks it from the run's own files). Sets ``checked``, so ``train`` (in
        this process or in a training process, through the JSON) does not check it again while its configs stay."""
        if self.resume_from is not None:
            return {}
        bert, tc = self.model_config, self.train_config
        check_compatible(bert, tc)
        if self.data is not None and (tc.sentence_task != "nsp" or tc.masking_unit != "token" or bert.causal):
            raise ConfigError(Message("training from prepared shards (--data) supports BERT's own objective only "
                                      "(sentence_task=nsp, masking_unit=token, bidirectional attention); train the "
                                      "other objectives from a corpus (--corpus FILE)"))
        if self.init_from is not None or self.data is not None:
            self.checked = self.check_key()
            return est or {}  # the vocabulary and model come from the checkpoint or the shards: checked there
        if self.known_vocab() != bert.vocab_size:
            bert, est = bert.replace(vocab_size=self.known_vocab()), None
        est = check_budget(bert, tc, est)
        self.checked = self.check_key()
        return est

    def check_key(self) -> str:
        """What ``check`` depends on, as JSON: a spec whose configs changed after its check is checked again."""
        return json.dumps([self.model_config.to_dict(), self.train_config.to_dict(), self.known_vocab(),
                           self.data is None, self.init_from is None], sort_keys=True, default=str)

    def known_vocab(self) -> int:
        """The vocabulary size known before training builds a tokenizer: a tokenizer object's, else the config's."""
        return int(getattr(self.tokenizer, "vocab_size", None) or self.model_config.vocab_size)


def _tokenizer(spec: RunSpec, corpus):
    """The spec's tokenizer object, or a new one of its kind built on ``corpus`` (``default_tokenizer``)."""
    kind = canonical_kind("word" if spec.tokenizer is None else spec.tokenizer)  # a spec saved before a rename too
    if not isinstance(kind, str):
        return spec.tokenizer
    if kind not in TOKENIZER_KINDS:
        raise ConfigError(Message("tokenizer {tokenizer} is unknown; use one of {kinds}",
                                  tokenizer=repr(spec.tokenizer), kinds=", ".join(map(repr, TOKENIZER_KINDS))))
    size = (spec.tokenizer_vocab_size or suggested_vocab_size(corpus)) if kind == "wordpiece" else None  # the app's
    return default_tokenizer(corpus, kind, size)


def _shard_trainer(data_dir, bert: BertConfig, tc: TrainConfig, runtime, model=None, callbacks=None,
                   checked: bool = False) -> Trainer:
    """A Trainer over the shards in ``data_dir`` (bertcore.data.shards); this process's slice when distributed.
    ``checked``: the two configs were checked together (``RunSpec.check``)."""
    rt = runtime if runtime is not None else Runtime()
    reader = ShardReader.open(data_dir)
    tok = reader.tokenizer()
    if model is None:
        bert = bert.replace(vocab_size=tok.vocab_size)
    elif model.config.vocab_size != tok.vocab_size:
        raise InputError(Message("this run's model has a {vocab}-token vocabulary but {data_dir} has {n}; resume with "
                                 "the --data folder the run was trained on", vocab=model.config.vocab_size,
                                 data_dir=str(data_dir), n=tok.vocab_size))
    check_budget(bert, tc)
    data = ShardData(reader, tok, tc.max_seq_len, MaskingRates.from_train_config(tc), tc.nsp_positive_prob,
                     tc.held_out_frac, tc.seed, tc.batch_size, rt.grad_accum, rt.rank, rt.world_size)
    return Trainer(bert, tc, data=data, runtime=rt, model=model, callbacks=callbacks, checked=checked)


def prepare(spec: RunSpec, callbacks: Callbacks | None = None, records: TrainingRecords | None = None):
    """Check ``spec`` (``RunSpec.check``) and build (trainer, corpus spec to record, corpus, records); the records
    (live probe, skills, attention snapshots: bertcore.analysis.records; ``records`` when the caller keeps them)
    listen on the main process only, ``callbacks`` to the trainer. Raises BertcoreError on bad input before
    anything is loaded. Each check runs once per training: ``check()`` unless the spec was checked where it was
    built, the budget again only for a vocabulary other than the one checked (a checkpoint's, one built here)."""
    if spec.resume_from is None and spec.checked != spec.check_key():
        spec.check()
    bert, tc = spec.model_config, spec.train_config
    if spec.data is not None:
        trainer = _shard_trainer(spec.data, bert, tc, spec.runtime, callbacks=callbacks, checked=True)
        return trainer, SHARDS_PREFIX + str(Path(spec.data).resolve()), None, _attach(trainer, records, None, None)
    corpus = load_run_corpus(spec.corpus) if isinstance(spec.corpus, str) else spec.corpus
    corpus_spec = spec.corpus if isinstance(spec.corpus, str) else spec.corpus_spec
    model = None
    if spec.init_from is not None:
        init = load_checkpoint(spec.init_from)
        model, tokenizer, bert = init.model, init.tokenizer, init.model.config
        model.train()
    else:
        tokenizer = _tokenizer(spec, corpus)
        bert = bert.replace(vocab_size=tokenizer.vocab_size)
    if spec.init_from is not None or bert.vocab_size != spec.known_vocab():
        check_budget(bert, tc)  # a checkpoint's model, or a vocabulary built from the corpus: not what check() saw
    if model is None and spec.model is not None:
        model = spec.model
    own = parse_skill_csv(spec.skill_csv[1], spec.skill_csv[0], tokenizer) if spec.skill_csv else None
    suite = SkillSuite.for_run(corpus, tokenizer, tc.max_seq_len, own, builtin=spec.skills)
    trainer = Trainer(bert, tc, corpus, tokenizer=tokenizer, model=model, callbacks=callbacks,
                      runtime=spec.runtime, checked=spec.init_from is None)  # a checkpoint's config: not checked
    return trainer, corpus_spec, corpus, _attach(trainer, records, spec.probe, suite)


def _attach(trainer, records: TrainingRecords | None, probe, skills, first: bool = True) -> TrainingRecords:
    """The run's records listening to ``trainer`` (``records`` when the caller keeps them); a distributed run's
    other processes record nothing."""
    if not trainer.runtime.is_main:
        return TrainingRecords()
    return TrainingRecords.attach(trainer, probe, skills, first=first, records=records)


def train(spec: RunSpec, run_dir: str | Path | None = None, *, parent: str | Path | None = None,
          stop: StopSignal | None = None, callbacks: Callbacks | None = None,
          records: TrainingRecords | None = None) -> RunResult:
    """Train ``spec`` into ``run_dir`` (or a new folder below ``parent``, default ``runs.cli_runs_dir()``).

    Bad input raises BertcoreError before any folder is created. NaN/divergence ends with status "failed"
    and the last good weights saved; ``stop`` ends with "stopped" and a resumable checkpoint."""
    trainer, corpus_spec, corpus, records = prepare(spec, callbacks, records)
    tc = spec.train_config
    if not trainer.runtime.is_main:  # a distributed run's other processes train, rank 0 writes
        return drive_quietly(trainer, stop)
    name = " ".join((spec.name or f"{spec.preset or 'custom'}, seed {tc.seed}").split())[:runs.MAX_NAME_LEN]
    d = open_run_dir(run_dir, parent, name)
    locks.hold(d)  # RunBusy, before anything is written, when another process trains this folder
    try:
        with drive(trainer, d, _new_run_files(spec, d, trainer, corpus, corpus_spec, name), stop, records,
                   held=True) as result:
            run_steps(trainer)
        return result
    finally:
        locks.release(d)


def _new_run_files(spec: RunSpec, d: Path, trainer, corpus, corpus_spec, name: str) -> dict:
    """A new run's corpus.tsv (when its corpus cannot be rebuilt from a spec) and its run.json fields."""
    tc = spec.train_config
    if corpus is not None and (corpus_spec is None or not is_builtin_spec(corpus_spec)):
        atomic_write(d / CORPUS_FILE, "".join(f"{a}\t{b}\n" for a, b in corpus.pairs))
        if getattr(corpus, "documents", None) is not None:  # NotNext comes from another document (BERT §A.1)
            atomic_write(d / DOCUMENTS_FILE, "".join(f"{int(k)}\n" for k in corpus.documents))
        corpus_spec = f"run:{CORPUS_FILE}"
    return runs.run_meta(name, total_steps=tc.steps, seed=int(tc.seed), preset=spec.preset,
                         corpus=corpus.name if corpus is not None else f"shards {Path(spec.data).resolve().name}",
                         source=spec.source, corpus_spec=corpus_spec,
                         tokenizer=getattr(trainer.tokenizer, "kind", "word"),
                         init_from=str(spec.init_from) if spec.init_from is not None else None,
                         corpus_defaults=spec.defaults, runtime=trainer.runtime.label)


def resume(run_dir: str | Path, *, stop: StopSignal | None = None, callbacks: Callbacks | None = None,
           runtime=None, records: TrainingRecords | None = None) -> RunResult:
    """Continue a stopped run from its last checkpoint: same weights, AdamW moments, LR schedule position,
    data order and masking/dropout RNG streams, so the losses match an uninterrupted run. ``runtime``: where it
    goes on now (default CPU, fp32), whatever the run was trained on before; run.json's ``runtime`` says so. The run's lock is held
    from the checks on, so two processes (or server replicas) never resume the same run: the second gets RunBusy."""
    d = Path(run_dir).expanduser()
    if runtime is not None and not runtime.is_main:  # a distributed run's other ranks: rank 0 checks and locks
        return _resume(d, stop, callbacks, runtime, None, records)
    _check_resumable(d, runs.read_run(d))
    locks.hold(d)
    try:
        _check_resumable(d, runs.read_run(d))  # again under the lock: another process may have resumed it
        return _resume(d, stop, callbacks, runtime, records)
    finally:
        locks.release(d)


def _check_resumable(d: Path, info) -> None:
    if not info.damaged and info.status == "running":
        raise InputError(Message("{name} is still training; stop it before resuming", name=info.name))
    if info.damaged:
        raise InputError(Message("{run} cannot be resumed: {reason}", run=str(d), reason=info.damaged))
    if info.status == "failed" and not info.resumable:
        raise InputError(Message("{name} failed ({reason}); start a new run with a lower lr instead", name=info.name,
                                 reason=info.reason))
    if info.steps_done >= info.total_steps:
        raise InputError(Message("{name} already finished all {total} steps; there is nothing to resume",
                                 name=info.name, total=info.total_steps))
    if not info.resumable:
        raise InputError(Message("{name} has no resume state ({file}); start a new run", name=info.name,
                                 file=RESUME_FILE))


def _resume(d: Path, stop, callbacks, runtime, records) -> RunResult:
    meta = runs.read_run_json(d)
    bundle = load_checkpoint(d)
    if bundle.train_config is None:
        raise InputError(Message("{run} has no train_config.json; this run cannot be resumed", run=str(d)))
    tc = TrainConfig.from_dict(bundle.train_config)
    model = bundle.model.train()
    spec_str = str(meta.get("corpus_spec") or "")
    if spec_str.startswith(SHARDS_PREFIX):
        trainer = _shard_trainer(spec_str[len(SHARDS_PREFIX):], model.config, tc, runtime, model=model,
                                 callbacks=callbacks)
    else:
        corpus = load_run_corpus(spec_str, d, meta.get("corpus"))
        trainer = Trainer(model.config, tc, corpus, tokenizer=bundle.tokenizer, model=model, callbacks=callbacks,
                          runtime=runtime)
    step = load_trainer_state(trainer, d / RESUME_FILE)
    truncate_after(d, step)
    trainer.history = History.read_frame(bundle.history)
    trainer.history.truncate(step)
    if not trainer.runtime.is_main:
        return drive_quietly(trainer, stop)
    skills = run_skills(d, bundle.tokenizer, tc.max_seq_len) if trainer.corpus is not None else None
    records = _restored_records(trainer, bundle, d, step, skills, records)
    meta["runtime"] = trainer.runtime.label  # where it goes on now (docs/TRAINING.md, "Resume on another device")
    with drive(trainer, d, meta, stop, records, held=True) as result:
        run_steps(trainer)
    return result


def _restored_records(trainer: Trainer, bundle: ModelBundle, run_dir: Path, step: int, skills,
                      records: TrainingRecords | None) -> TrainingRecords:
    """The attention snapshots, probe rows and skills of a resumed run up to ``step``, listening from there on."""
    rec = records if records is not None else TrainingRecords()
    rec.snapshots = [s for s in bundle.snapshots if s.step <= step]
    rec.probe_history = [r for r in read_probe_csv(run_dir / PROBE_FILE) if int(r.get("step", 0)) <= step]
    done = read_skills_csv(run_dir, skills.names) if skills is not None else None
    if done is not None:
        done.truncate(step)
        rec.skills_history = done
        trainer.train_seconds = float(done.last().get("seconds") or 0.0)
    return TrainingRecords.attach(trainer, "default", skills, first=False, records=rec)


def run_skills(run_dir: str | Path, tokenizer, max_len: int) -> SkillSuite | None:
    """The skills a run scores, from the items it saved (skills_items.jsonl); None for a run without them."""
    path = Path(run_dir) / SKILL_ITEMS_FILE
    if not path.is_file():
        return None
    return SkillSuite(read_items_jsonl(path.read_text(encoding="utf-8")), tokenizer, max_len)


def read_skills_csv(run_dir: str | Path, names: list[str] | None = None) -> History | None:
    """skills.csv of a run as a History (step, seconds, one column per skill); None when the run has none."""
    path = Path(run_dir) / SKILLS_FILE
    if not path.is_file():
        return None
    frame = pd.read_csv(path)
    cols = names if names is not None else [c for c in frame.columns if c not in ("step", "seconds")]
    return History.read_frame(frame, ("step", "seconds", *cols), ("seconds",))
