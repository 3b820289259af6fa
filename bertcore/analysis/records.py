"""What a pretraining run records besides its loss curve, each kept by a listener on the trainer's ``Callbacks``
(bertcore.training.callbacks), so the trainer only trains:

* the live probe (bertcore.analysis.live_probe): at step 0 and at every held-out evaluation, the top-3 fill-mask
  candidates for a sentence with one [MASK] (BERT §3.1) and P(IsNext) for a pair (§3.2), one dict row per step;
* the skills (bertcore.analysis.skills): at step 0 and at every evaluation, the share of each skill's items passed
  and the training seconds so far (a History: step, seconds, one column per skill);
* attention snapshots: the attention probabilities of every layer and head on one fixed sentence pair at step 0,
  every ``snapshot_every`` steps and when training ends (the Attention page's "over training" view).

A second evaluation at the same step (a stop right after an evaluated step) replaces that step's row. Whoever
wants the records attaches them (the pretraining route, bertcore.launch.service; a notebook)::

    trainer = Trainer(model_config, train_config, corpus)
    records = TrainingRecords.attach(trainer)        # step 0 recorded now
    trainer.run()
    records.probe_history[-1]["top1"], records.snapshots[-1].attentions.shape   # (L, H, T, T)

Every record is taken in eval mode and draws no random numbers, so attaching them never changes the curve.

The records are also what a pretraining run keeps in its folder: ``drive`` (bertcore.training.drive) calls their
``save``, ``metrics`` and ``bundle``, as it calls a fine-tuning ``Route``'s.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from bertcore.analysis.inference import encode_pair
from bertcore.analysis.live_probe import Probe, default_probe, run_probe, write_probe_csv
from bertcore.analysis.skills import SkillSuite
from bertcore.data.skill_items import write_items_jsonl
from bertcore.io.checkpoint import AttentionSnapshot, ModelBundle, atomic_write, save_checkpoint
from bertcore.io.steps import save_step
from bertcore.model.modes import eval_mode
from bertcore.training.history import History
from bertcore.training.resume import RESUME_FILE, save_trainer_state

PROBE_FILE = "probe.csv"  # the live probe's rows (bertcore.analysis.live_probe)
SKILLS_FILE = "skills.csv"  # step x skill: the share of items passed at every evaluation (bertcore.analysis.skills)
SKILL_ITEMS_FILE = "skills_items.jsonl"  # the items scored (skill, text, right, wrong[, text_b]), to recompute them


class TrainingRecords:
    """The live probe's rows, the skills' history and the attention snapshots of one trainer.

    Made by ``attach``: ``probe`` is a ``Probe``, "default" (one taken from the trainer's corpus; none for shard
    training) or None (off); ``skills`` a ``SkillSuite`` or None. A resumed run fills the lists from its files
    first and attaches them with ``first=False``.
    """

    def __init__(self):
        self.probe: Probe | None = None
        self.probe_history: list[dict] = []
        self.skills: SkillSuite | None = None
        self.skills_history: History | None = None  # step, seconds, one column per skill
        self.snapshots: list[AttentionSnapshot] = []
        self.probe_tokens: list[str] = []
        self._trainer = None
        self._pair = None  # (ids, type ids) of the snapshot pair, (1, T) each

    @classmethod
    def attach(cls, trainer, probe="default", skills: SkillSuite | None = None, *, first: bool = True,
               records: TrainingRecords | None = None) -> TrainingRecords:
        """Listen to ``trainer`` (into ``records``, e.g. a resumed run's restored rows, else new ones); ``first``:
        record step 0 (the trainer's current weights) at once."""
        rec = records if records is not None else cls()
        if probe == "default":
            probe = default_probe(trainer.corpus, trainer.tokenizer) if trainer.corpus is not None else None
        rec.probe, rec.skills = probe, skills
        if skills is not None and rec.skills_history is None:
            rec.skills_history = History(("step", "seconds", *skills.names), ("seconds",))
        rec._trainer = trainer
        rec._pair = _snapshot_pair(trainer)
        rec.probe_tokens = list(trainer.tokenizer.convert_ids_to_tokens(rec._pair[0][0].tolist()))
        cb = trainer.callbacks
        cb.on("evaluated", lambda ev: rec._evaluated())
        cb.on("step", lambda ev: rec._stepped())
        cb.on("done", lambda ev: rec._ended())
        if first:
            if trainer.config.snapshot_every:
                rec._snapshot()
            rec._evaluated()
        return rec

    # ------------------------------------------------------------------ listeners
    # -- what drive (bertcore.training.drive) keeps of a pretraining run: its route --
    def save(self, trainer, run_dir: Path, meta: dict) -> None:
        """The run's files (all but run.json): checkpoint, the weights of this step (replay), probe.csv, the skills
        scored so far (skills.csv) and their items (skills_items.jsonl), the resume state."""
        save_checkpoint(self.bundle(trainer, meta), run_dir)
        save_step(trainer.model, run_dir, trainer.step_count)
        if self.probe_history:
            write_probe_csv(self.probe_history, run_dir / PROBE_FILE)
        if self.skills is not None:
            if not (run_dir / SKILL_ITEMS_FILE).is_file():
                atomic_write(run_dir / SKILL_ITEMS_FILE, write_items_jsonl(self.skills.items))
            atomic_write(run_dir / SKILLS_FILE, self.skills_history.to_csv())
        save_trainer_state(trainer, run_dir / RESUME_FILE)

    def metrics(self, trainer) -> dict:
        """run.json's "metrics": the last held-out evaluation."""
        return trainer.history.last_eval()

    def bundle(self, trainer, meta: dict) -> ModelBundle:
        """The trained model with everything recorded (RunResult.bundle)."""
        return ModelBundle(model=trainer.model, tokenizer=trainer.tokenizer, history=trainer.history.frame(),
                           name=meta.get("name", ""), source=meta.get("source", ""), snapshots=list(self.snapshots),
                           probe_tokens=list(self.probe_tokens), train_config=trainer.config.to_dict())

    # -- the listeners --
    def _evaluated(self) -> None:
        """Ask the probe and score the skills at the trainer's current step (one row per step)."""
        tr = self._trainer
        if self.probe is not None:
            row = run_probe(tr.model, tr.tokenizer, self.probe, tr.step_count)
            if self.probe_history and self.probe_history[-1]["step"] == row["step"]:
                self.probe_history[-1] = row
            else:
                self.probe_history.append(row)
        if self.skills is not None:
            row = {"step": tr.step_count, "seconds": tr.train_seconds, **self.skills.score(tr.model)}
            if len(self.skills_history) and self.skills_history.last_step == tr.step_count:
                self.skills_history.update_last(row)
            else:
                self.skills_history.append(row)

    def _stepped(self) -> None:
        every = self._trainer.config.snapshot_every
        if every and self._trainer.step_count % every == 0:
            self._snapshot()

    def _ended(self) -> None:
        if self._trainer.config.snapshot_every:
            self._snapshot()

    @torch.no_grad()
    def _snapshot(self) -> None:
        """The attention probabilities (L, H, T, T) on the snapshot pair at this step (once per step)."""
        tr = self._trainer
        if self.snapshots and self.snapshots[-1].step == tr.step_count:
            return
        with eval_mode(tr.model):
            ids, types = (t.to(tr.device) for t in self._pair)
            out = tr.model(ids, token_type_ids=types, attention_mask=torch.ones_like(ids), output_attentions=True)
            att = torch.stack([a[0] for a in out.attentions]).float().cpu().numpy().astype(np.float32, copy=True)
        self.snapshots.append(AttentionSnapshot(tr.step_count, att))


def _snapshot_pair(trainer) -> tuple[torch.Tensor, torch.Tensor]:
    """The first held-out pair with its true B (falls back to the first corpus pair); shard data names its own."""
    data = trainer.data
    if hasattr(data, "probe_ids"):
        ids, types = data.probe_ids()
        return torch.tensor([ids]), torch.tensor([types])
    pairs = trainer.corpus.pairs
    held = getattr(data, "splits", {}).get("held_out")
    pair = pairs[int(held[0]) if held is not None and len(held) else 0]
    ids, types, _ = encode_pair(trainer.tokenizer, pair[0], pair[1], trainer.config.max_seq_len)
    return torch.tensor([ids]), torch.tensor([types])
