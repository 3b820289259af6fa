"""The study runner: a study's variants × seeds as normal run directories, trained side by side and scored.

``plan`` reads the study folder: which runs (cells) are scored, trained but not scored, stopped part-way
(resumable) or missing; ``run`` finishes what is missing. The cells are dealt round-robin to ``lanes`` training
processes (``bertcore.launch.worker``, one torch thread each, so two lanes keep a 2-core machine busy), every lane
trains its runs one after the other through the one training route and scores each once finished
(``bertcore.lab.evaluate``). One corpus and one tokenizer serve every run; the runs of one seed start from the
same initial weights and see the same pairs in the same order (the same seed, the same shapes).

The study folder::

    study.json                 the plan, every run's scores and the table (mean, sd, tests), rewritten atomically
                               at each run's end and score; "status": running | finished | stopped | failed
    runs/<variant>-seed<k>/    one run directory per cell (run.json, history.csv, ..., evaluation.json)
    table.csv, curves.svg      written at the end (``bertcore.lab.table``)

A reload, a closed tab or a restart loses nothing: the finished runs and their scores are on disk, a stopped run
resumes where it stopped, and starting the study again trains only what is missing.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from bertcore.data.corpora import is_builtin_spec
from bertcore.data.corpus import suggested_vocab_size
from bertcore.data.tokenization import WordPieceTokenizer, WordTokenizer
from bertcore.errors import InputError
from bertcore.finetune.spec import FinetuneSpec
from bertcore.io.checkpoint import atomic_write
from bertcore.launch import worker
from bertcore.launch.service import RunSpec
from bertcore.lab import table as T
from bertcore.lab.evaluate import read_evaluation
from bertcore.lab.studies import MAX_SEEDS, STUDY_STEPS, Study, slug, study_from_dict
from bertcore.message import Message
from bertcore.model.bert import init_model
from bertcore.training import runs
from bertcore.training.same_init import same_init
from bertcore.training.drive import StopSignal
from bertcore.training.run_corpus import load_run_corpus

STUDY_FILE = "study.json"
RUNS_DIR = "runs"
CELL_STATES = ("missing", "stopped", "trained", "training", "evaluating", "scored", "failed")


@dataclass
class Cell:
    variant: str
    seed: int
    dir: Path
    state: str = "missing"  # CELL_STATES
    metrics: dict | None = None
    error: str | None = None

    def to_dict(self) -> dict:
        return {"seed": self.seed, "dir": str(self.dir), "status": self.state, "metrics": self.metrics,
                "error": self.error}


@dataclass
class Plan:
    study: Study
    out: Path
    seeds: int
    steps: int
    corpus: str
    cells: list[Cell] = field(default_factory=list)
    created: str = ""
    first_seed: int = 0  # the cells' seeds are first_seed, first_seed + 1, ...
    name: str = ""  # the study folder's name in a run list (run.json; default: the study's title)

    def cell(self, variant: str, seed: int) -> Cell:
        return next(c for c in self.cells if c.variant == variant and c.seed == seed)

    @property
    def todo(self) -> list[Cell]:
        return [c for c in self.cells if c.state in ("missing", "stopped", "trained")]


def read_study(out: str | Path) -> dict | None:
    """study.json of a study folder (None when missing or damaged). A "running" study whose process is gone reads as
    "stopped"."""
    try:
        data = json.loads((Path(out) / STUDY_FILE).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("variants"), list):
        return None
    if data.get("status") == "running":
        pid = data.get("pid")
        if not (pid == os.getpid() or (isinstance(pid, int) and runs.pid_alive(pid))):
            data.update(status="stopped", reason=Message("interrupted (the process ended); start it again to "
                                                            "finish it"))
    return data


def _cell_state(d: Path) -> tuple[str, dict | None, str | None]:
    if not (d / "run.json").is_file():
        return "missing", None, None
    info = runs.read_run(d)
    if info.damaged:
        return "missing", None, None
    if info.status == "finished":
        ev = read_evaluation(d)
        return ("scored", ev["metrics"], None) if ev is not None else ("trained", None, None)
    if info.status == "failed" and not info.resumable:
        return "failed", None, info.reason
    if info.live:
        return "training", None, None
    return ("stopped", None, None) if info.resumable else ("missing", None, None)


def plan(study: Study, out: str | Path, seeds: int = 3, steps: int | None = None, corpus: str = "builtin",
         first_seed: int = 0) -> Plan:
    """The cells of ``study`` in folder ``out`` with their state on disk. A folder that already holds a study must
    hold this one, at the same steps and corpus (InputError otherwise); its seeds are kept if it has more. A
    fine-tune study's steps are its FinetuneConfig's."""
    if isinstance(seeds, bool) or not isinstance(seeds, int) or not 1 <= seeds <= MAX_SEEDS:
        raise InputError(Message("--seeds {n}: give 1 to {max} seeds", n=repr(seeds), max=MAX_SEEDS))
    out = Path(out).expanduser()
    if out.exists() and not out.is_dir():
        raise InputError(Message("{path} exists and is a file; give a folder for the study", path=str(out)))
    old = read_study(out)
    if study.kind == "finetune":
        steps = int(study.finetune_config(study.variants[0], first_seed).steps)
    steps = int(steps) if steps is not None else int((old or {}).get("steps") or STUDY_STEPS)
    created = runs.now()
    if old is not None:
        for key, mine in (("name", study.name), ("steps", steps), ("corpus", corpus),
                          ("first_seed", int(first_seed))):
            if old.get(key) != mine:
                raise InputError(Message("{path} holds study {name} with {key}={theirs}, not {mine}; give another "
                                         "--out folder, or the same settings to finish it", path=str(out),
                                         name=old.get("name"), key=key, theirs=old.get(key), mine=mine))
        if [v["name"] for v in old["variants"]] != [v.name for v in study.variants]:
            raise InputError(Message("{path} holds study {name} with other variants; give another --out folder",
                                     path=str(out), name=old.get("name")))
        seeds = max(seeds, int(old.get("seeds") or 0))
        created = str(old.get("created") or created)
    p = Plan(study, out, seeds, steps, corpus, created=created, first_seed=int(first_seed))
    for v in study.variants:
        for s in range(first_seed, first_seed + seeds):
            d = out / RUNS_DIR / f"{slug(v.name)}-seed{s}"
            state, metrics, error = _cell_state(d)
            p.cells.append(Cell(v.name, s, d, state, metrics, error))
    return p


def study_data(p: Plan, status: str = "running", reason: str | None = None) -> dict:
    """The study as study.json and ``lab --json`` hold it: {study, variants: [{name, settings, runs: [{seed, dir,
    status, metrics}], mean, sd, tests}], ...}."""
    s = p.study
    variants = [{"name": v.name, "settings": dict(v.settings), "paper": dict(v.paper),
                 "runs": [c.to_dict() for c in p.cells if c.variant == v.name]} for v in s.variants]
    T.summarise(s, variants)
    return {"format": 1, "study": s.name, "name": s.name, "title": s.title, "source": s.source,
            "reference": s.reference, "base": dict(s.base), "tokenizer": s.tokenizer,
            "tokenizer_vocab_size": s.tokenizer_vocab_size, "paper_columns": list(s.paper_columns),
            "paper_note": s.paper_note, "found": s.found, "kind": s.kind, "columns": list(s.columns),
            "seeds": p.seeds, "first_seed": p.first_seed, "steps": p.steps, "corpus": p.corpus,
            "path": str(p.out), "status": status, "reason": reason, "created": p.created, "updated": runs.now(),
            "pid": os.getpid(), "test": T.TEST,
            "metrics": {k: {"label": lab, "what": what} for k, (lab, what) in T.METRICS.items()},
            "variants": variants,
            "done": sum(c.state in ("scored", "failed") for c in p.cells), "total": len(p.cells)}


def write_study(p: Plan, status: str = "running", reason: str | None = None) -> dict:
    """study.json, then the folder's run.json (kind "study": one entry in a workspace's run list, its runs
    counted as its steps)."""
    data = study_data(p, status, reason)
    p.out.mkdir(parents=True, exist_ok=True)
    atomic_write(p.out / STUDY_FILE, json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n")
    try:
        meta = runs.read_run_json(p.out)
    except InputError:
        meta = runs.run_meta(p.name or f"{p.study.title} ({p.study.name})", kind="study", source=p.study.source)
        meta["created"] = p.created or meta["created"]
    meta.update(status=status, reason=reason, steps_done=data["done"], total_steps=data["total"], pid=os.getpid(),
                updated=runs.now(), study=p.study.name)
    runs.write_run_json(p.out, meta)
    return data


def write_exports(p: Plan, data: dict) -> None:
    """table.csv and the held-out curves (curves.svg: NSP accuracy, or MLM accuracy without a sentence task, or a
    fine-tune's accuracy)."""
    atomic_write(p.out / "table.csv", T.to_csv(data, p.study))
    column = "eval_nsp_acc" if any(v["mean"].get("nsp_acc") is not None for v in data["variants"]) else "eval_mlm_acc"
    column = "eval_accuracy" if p.study.kind == "finetune" else column
    curves = T.mean_curves(data, column)
    label = {"eval_nsp_acc": "held-out NSP accuracy", "eval_mlm_acc": "held-out MLM accuracy",
             "eval_accuracy": "held-out accuracy"}[column]
    atomic_write(p.out / "curves.svg", T.curves_svg(curves, f"{p.study.title}: {label} (mean over seeds)", label))


def shared_tokenizer(study: Study, corpus):
    """The one vocabulary every run of the study trains with."""
    if study.tokenizer == "wordpiece":
        size = study.tokenizer_vocab_size or suggested_vocab_size(corpus)
        return WordPieceTokenizer.train(corpus.texts(), vocab_size=int(size))
    return WordTokenizer.build(corpus.texts())


INIT_KEYS = ("init", "initializer_range")  # switches of the initial weights themselves: never copied over


def initial_model(study: Study, variant: str, seed: int, vocab_size: int):
    """(model, InitReport or None): the variant's initial weights for ``seed``. Where its tensors differ from the
    reference's (another head, a final LayerNorm, no position table), building it from the seed alone would draw
    different numbers for the tensors both have, so those are copied from the reference's (``same_init``); a variant
    whose initial weights themselves differ from the reference's (INIT_KEYS: another scheme or scale) keeps its own."""
    v, ref = study.variant(variant), study.variant(study.reference)
    cfg = study.configs(v, seed, 1)[0].replace(vocab_size=vocab_size)
    ref_cfg = study.configs(ref, seed, 1)[0].replace(vocab_size=vocab_size)
    model = init_model(cfg, seed)
    if v is ref or any(getattr(cfg, k) != getattr(ref_cfg, k) for k in INIT_KEYS):
        return model, None
    ref_model = init_model(ref_cfg, seed)
    shapes = {k: t.shape for k, t in model.named_parameters()}
    if shapes == {k: t.shape for k, t in ref_model.named_parameters()}:
        return model, None  # the same tensors: the seed alone gives the same numbers
    return model, same_init(ref_model, model)


def specs(p: Plan, cells: list[Cell], tokenizer, runtime=None) -> list[RunSpec]:
    """One RunSpec per cell: a new training into its folder, the resume of a stopped one, or only its scores."""
    out = []
    for c in cells:
        name = f"{p.study.name} · {c.variant} · seed {c.seed}"
        if p.study.kind == "finetune":
            if c.dir.exists():  # a fine-tune is not resumable (a minute-long run): a stopped one begins again
                shutil.rmtree(c.dir, ignore_errors=True)
            v, base = p.study.variant(c.variant), p.study.base
            out.append(FinetuneSpec(str(base["start"]), str(base["task"]), p.study.finetune_config(v, c.seed),
                                    v.settings.get("init", "pretrained"), c.dir, name, str(base.get("source") or ""),
                                    runtime))
            continue
        if c.state in ("stopped", "trained"):
            out.append(RunSpec(None, None, name=name, resume_from=c.dir, evaluate=True, runtime=runtime))
            continue
        if c.dir.exists():  # a damaged or never-started folder: begin again
            shutil.rmtree(c.dir, ignore_errors=True)
        bert, tc = p.study.configs(p.study.variant(c.variant), c.seed, p.steps)
        model, _ = initial_model(p.study, c.variant, c.seed, tokenizer.vocab_size)
        out.append(RunSpec(bert, tc, corpus=p.corpus, corpus_spec=p.corpus if is_builtin_spec(p.corpus) else None,
                           tokenizer=tokenizer, name=name, source=f"lab {p.study.name}", run_dir=c.dir,
                           evaluate=True, runtime=runtime, model=model))
    return out


class _Lane:
    """One training process (or thread) with its share of the cells."""

    def __init__(self, cells: list[Cell], jobs: list[RunSpec]):
        self.cells, self.jobs = cells, jobs
        self.proc = None
        self.folder: Path | None = None
        self.current: dict = {}
        self.error: str | None = None


def run(p: Plan, lanes: int = 2, stop: StopSignal | None = None, on_event=None, in_process: bool = False,
        nice: int = 0, runtime=None) -> dict:
    """Finish ``p``'s missing cells in ``lanes`` training processes (threads with ``in_process``); ``on_event(ev)``
    hears every worker event with its cell's "variant" and "seed" added, and {"ev": "study", "data": ...} at each
    rewrite of study.json. ``stop`` ends the runs under way (resumable) and skips the rest. Returns the study data."""
    stop = stop if stop is not None else StopSignal()
    lock = threading.Lock()
    todo = p.todo
    runs.mark_active(p.out, True)  # the study reads as running in this process (and cannot be deleted meanwhile)
    try:
        return _run(p, todo, lanes, stop, lock, on_event, in_process, nice, runtime)
    finally:
        runs.mark_active(p.out, False)


def _run(p: Plan, todo: list[Cell], lanes: int, stop: StopSignal, lock, on_event, in_process: bool, nice: int,
         runtime) -> dict:
    write_study(p)
    tell = on_event or (lambda ev: None)
    if not todo:
        data = write_study(p, "finished")
        write_exports(p, data)
        tell({"ev": "study", "data": data})
        return data
    tok = None if p.study.kind == "finetune" else shared_tokenizer(p.study, load_run_corpus(p.corpus))
    n = max(1, min(int(lanes), len(todo)))
    lane_cells = [todo[k::n] for k in range(n)]
    work = [_Lane(cs, specs(p, cs, tok, runtime)) for cs in lane_cells]

    def handle(lane: _Lane, ev: dict) -> None:
        i = int(ev.get("job", 0) or 0)
        c = lane.cells[i] if i < len(lane.cells) else None
        kind = ev.get("ev")
        if c is not None:
            ev = {**ev, "variant": c.variant, "seed": c.seed}
        rewrite = False
        with lock:
            if kind == "start" and c is not None:
                c.state = "training"
            elif kind == "job_end" and c is not None:
                status = ev.get("status")
                c.state = {"finished": "trained", "failed": "failed"}.get(status, "stopped")
                c.error = ev.get("error") if status == "failed" else None
                rewrite = True
            elif kind == "evaluating" and c is not None:
                c.state = "evaluating"
            elif kind == "evaluated" and c is not None:
                if ev.get("error"):
                    c.state, c.error = "trained", ev["error"]
                else:
                    c.state, c.metrics, c.error = "scored", ev["evaluation"]["metrics"], None
                rewrite = True
            elif kind == "error":
                lane.error = str(ev.get("message"))
            if rewrite:
                data = write_study(p)
        tell(ev)
        if rewrite:
            tell({"ev": "study", "data": data})

    def lane_thread(lane: _Lane) -> None:
        try:
            if in_process:
                worker.run_jobs(lane.jobs, p.out / RUNS_DIR, lambda ev: handle(lane, ev), stop, lane.current)
                return
            said = False
            for ev in worker.events(lane.proc):
                handle(lane, ev)
                said = said or ev.get("ev") in ("done", "error")
            rc = worker.finish(lane.proc)
            if not said and lane.error is None:
                why = worker.crash_text(lane.folder)
                lane.error = f"a training process ended unexpectedly (exit code {rc})" + (f": {why}" if why else "")
        except Exception as e:  # noqa: BLE001 - the study reports it as its reason, never a traceback
            lane.error = str(e) if isinstance(e, InputError) else f"{type(e).__name__}: {e}"
        finally:
            if lane.folder is not None:
                shutil.rmtree(lane.folder, ignore_errors=True)

    if not in_process:
        for lane in work:
            lane.folder = Path(tempfile.mkdtemp(prefix="bertx-study-"))
            worker.write_job(lane.folder, lane.jobs, p.out / RUNS_DIR, nice=nice, runtime=runtime)
            lane.proc = worker.spawn(lane.folder)
    ended = threading.Event()  # the lanes are done: the stopper thread goes too (it holds every lane's jobs)
    stopper = threading.Thread(target=_relay_stop, args=(stop, work, in_process, ended), daemon=True)
    stopper.start()
    threads = [threading.Thread(target=lane_thread, args=(lane,), name=f"bx-study-lane-{k}", daemon=True)
               for k, lane in enumerate(work)]
    for t in threads:
        t.start()
    try:
        for t in threads:
            while t.is_alive():
                t.join(0.5)
    except KeyboardInterrupt:  # Ctrl-C in the CLI: every run under way stops with a resumable checkpoint
        stop.request("stopped by Ctrl-C")
        for t in threads:
            t.join()
    ended.set()
    errors = [lane.error for lane in work if lane.error]
    with lock:
        for c in p.cells:  # whatever a lane left half-done is stopped (resumable) or missing
            if c.state in ("training", "evaluating"):
                c.state = _cell_state(c.dir)[0]
        done = not p.todo
        status = "finished" if done else ("stopped" if stop.is_set() else "failed")
        reason = None if done else (stop.reason if stop.is_set() else "; ".join(errors) or "some runs did not finish")
        data = write_study(p, status, reason)
    write_exports(p, data)
    tell({"ev": "study", "data": data})
    return data


def _relay_stop(stop: StopSignal, work: list[_Lane], in_process: bool, ended: threading.Event) -> None:
    """Pass a stop request on to every lane (a child's stdin; a thread's trainer through its ``current``); without
    one, end with the lanes."""
    while not stop.wait(0.5):
        if ended.is_set():
            return
    for lane in work:
        if in_process:
            worker.note_stop(lane.current, stop, stop.reason or "stopped")
        elif lane.proc is not None:
            worker.tell_stop(lane.proc, stop.reason or "stopped")


def open_study(out: str | Path) -> Plan:
    """The plan of an existing study folder (its own study, seeds, steps and corpus)."""
    data = read_study(out)
    if data is None:
        raise InputError(Message("{path} holds no study (study.json); run `bertcore lab --study NAME --out {path}`",
                                 path=str(out)))
    return plan(study_from_dict(data), out, int(data.get("seeds") or 1), int(data["steps"]),
                str(data.get("corpus") or "builtin"), int(data.get("first_seed") or 0))

