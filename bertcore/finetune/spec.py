"""One fine-tune as a training process runs it: where it starts, the task, the config (BERT §4.1).

``FinetuneSpec`` is to a fine-tune what ``bertcore.launch.service.RunSpec`` is to a pretraining: the study runner
(``bertcore.launch.study``) writes it as JSON into a launch folder and the training process (``bertcore.launch.worker``)
builds the ``FineTuner`` from it and drives it through the fine-tuning route (``bertcore.finetune.route``). Two specs
that differ only in ``init`` ("pretrained" or "random") give the comparison of what pretraining buys: both draw the
same labelled examples, batch order, dropout masks and classifier layer from the one seed.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bertcore.data.tasks import get_task
from bertcore.errors import InputError
from bertcore.finetune.models import scratch_twin, start_model
from bertcore.finetune.tuner import FinetuneConfig, FineTuner
from bertcore.message import Message

INITS = ("pretrained", "random")


@dataclass
class FinetuneSpec:
    start: str  # a checkpoint / run folder, "minilm" or "scratch" (bertcore.finetune.models.start_model)
    task: str  # a built-in task name or a CSV file (bertcore.data.tasks.get_task)
    config: FinetuneConfig = field(default_factory=FinetuneConfig)
    init: str = "pretrained"  # pretrained: start's weights; random: the same architecture, random initial weights
    run_dir: str | Path | None = None
    name: str = ""
    source: str = ""  # the starting model as the user knows it (run.json "source")
    runtime: object = None  # bertcore.training.device.Runtime (None: the CPU at fp32); the launch folder carries it

    def __post_init__(self) -> None:
        if self.init not in INITS:
            raise InputError(Message("init={value} is not valid; choose one of {choices}", value=repr(self.init),
                                     choices=", ".join(INITS)))

    def tuner(self, callbacks=None, runtime=None) -> FineTuner:
        """The FineTuner this spec describes (the task and the starting weights loaded now)."""
        task = get_task(self.task)
        model, tok, _ = start_model(self.start, task, seed=int(self.config.seed))  # seeded alone (model.bert.seeded)
        if self.init == "random":
            model = scratch_twin(model, int(self.config.seed))
        return FineTuner(model, tok, task, self.config, label=self.init, callbacks=callbacks,
                         runtime=runtime if runtime is not None else self.runtime)

    def to_json(self, folder=None, i: int = 0) -> dict:
        """This spec as JSON for a training process (``folder`` and ``i``: RunSpec's signature; nothing to write)."""
        return {"finetune": {"start": str(self.start), "task": str(self.task), "config": self.config.to_dict(),
                             "init": self.init, "run_dir": None if self.run_dir is None else str(self.run_dir),
                             "name": self.name, "source": self.source}}

    @classmethod
    def from_json(cls, e: dict, runtime=None) -> "FinetuneSpec":
        f = e["finetune"]
        return cls(f["start"], f["task"], FinetuneConfig.from_dict(f["config"]), f.get("init", "pretrained"),
                   f.get("run_dir"), f.get("name") or "", f.get("source") or "", runtime)
