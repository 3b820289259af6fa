"""Every training path picks its device and precision (issue 43, part 1): ``--device auto|cpu|cuda`` and
``--precision auto|fp32|bf16`` on every CLI train, the app's trainings on the GPU when torch sees one (the Runtime
crosses into the worker's process in the job JSON), where a run trained recorded in run.json and shown by the
Train page and the run's card, weights saved from the CPU. This machine has no GPU: ``--device cuda`` is tested for
its error, the GPU paths by monkeypatching what torch says about CUDA (nothing runs there), bf16 for real on the CPU.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from bertcore import cli
from bertcore.config import BertConfig, TrainConfig
from bertcore.errors import ConfigError
from bertcore.training import runs
from bertcore.launch import service, worker
from bertcore.training.callbacks import Callbacks
from bertcore.training.device import Runtime, resolve_precision, resolve_runtime
from bertcore.training.drive import StopSignal
from bertcore.training.resume import RESUME_FILE
from bertcore.training.trainer import Trainer

APP = str(Path(__file__).resolve().parents[1] / "app.py")
TINY = ["--set", "hidden_size=16", "--set", "num_attention_heads=2", "--set", "intermediate_size=32",
        "--set", "batch_size=8", "--set", "eval_size=16", "--set", "max_seq_len=24"]
no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error of a machine without a GPU")


def fake_gpu(monkeypatch, bf16: bool = True) -> None:
    """torch says it sees one CUDA GPU (with or without bf16); nothing may run on it."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16)


def tiny_configs(steps: int = 4) -> tuple[BertConfig, TrainConfig]:
    return (BertConfig(hidden_size=16, num_attention_heads=2, intermediate_size=32, max_position_embeddings=32),
            TrainConfig(steps=steps, batch_size=8, eval_every=2, eval_size=16, max_seq_len=24, snapshot_every=0))


# ----------------------------------------------------------------------------- resolving
def test_runtime_label_json_and_precision_rules(monkeypatch):
    rt = Runtime("cuda:0", "bf16", grad_accum=2)
    assert rt.label == "cuda:0, bf16" and Runtime().label == "cpu, fp32"
    d = json.loads(json.dumps(rt.to_dict()))
    assert d["device"] == "cuda:0" and d["precision"] == "bf16" and "rank" not in d and "group" not in d
    assert Runtime.from_dict(d) == rt and Runtime.from_dict({**d, "from_the_future": 1}) == rt
    if not torch.cuda.is_available():
        assert resolve_runtime().label == "cpu, fp32"  # a CPU machine's default is the fp32 run it always was
    assert resolve_precision("auto", "cpu") == "fp32" and resolve_precision("bf16", "cpu") == "bf16"
    fake_gpu(monkeypatch, bf16=True)
    assert resolve_runtime("auto", "auto").label == "cuda:0, bf16"
    assert resolve_runtime("auto", "fp32").label == "cuda:0, fp32"
    assert resolve_runtime("cpu", "auto").label == "cpu, fp32"
    fake_gpu(monkeypatch, bf16=False)  # e.g. a V100: auto falls back to fp32, an explicit bf16 is refused
    assert resolve_runtime("cuda", "auto").label == "cuda:0, fp32"
    with pytest.raises(ConfigError, match="--precision fp32"):
        resolve_runtime("cuda", "bf16")


@no_gpu
@pytest.mark.parametrize("argv", [
    ["train", "--device", "cuda"],                                             # the built-in corpus
    ["train", "--corpus", "tutorial", "--device", "cuda", "--precision", "bf16"],
    ["train", "--corpus", "{file}", "--device", "cuda"],                        # an uploaded text file
    ["train", "--preset", "d2l", "--device", "cuda"],                           # a preset
    ["train", "--resume", "{tmp}/run", "--device", "cuda"],
    ["train", "--data", "{tmp}/data", "--device", "cuda"],
    ["finetune", "--from", "scratch", "--task", "coherence", "--device", "cuda"],
    ["finetune", "--from", "scratch", "--task", "coherence", "--sweep", "16", "--device", "cuda"],
    ["sae", "{tmp}/run", "--layer", "0", "--device", "cuda"],
])
def test_device_cuda_without_a_gpu_is_one_error_line(argv, tmp_path, capsys):
    f = tmp_path / "corpus.txt"
    f.write_text("the cat sat on the mat .\tit was warm .\n" * 20, encoding="utf-8")
    argv = [a.format(file=f, tmp=tmp_path) for a in argv]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --device cuda: no CUDA GPU"), err
    assert "use --device cpu" in err[0] and "Traceback" not in err[0]
    assert not (tmp_path / "run").exists() and not (tmp_path / "data").exists()


# ----------------------------------------------------------------------------- training and recording
def test_bf16_on_the_cpu_trains_records_its_runtime_and_saves_float32(tmp_path, capsys):
    out = tmp_path / "bf16"
    assert cli.main(["train", "--corpus", "tutorial", "--steps", "3", "--device", "cpu", "--precision", "bf16",
                     "--out", str(out), "--quiet", *TINY]) == 0
    assert "(cpu, bf16)" in capsys.readouterr().err
    meta = json.loads((out / "run.json").read_text())
    assert meta["runtime"] == "cpu, bf16" and meta["status"] == "finished"
    weights = load_file(str(out / "model.safetensors"))
    assert weights and all(v.dtype == torch.float32 for v in weights.values())
    assert runs.read_run(out).runtime == "cpu, bf16" and "cpu, bf16" in runs.read_run(out).summary()
    hist = json.loads(json.dumps(list(runs.read_run(out).metrics.values())))
    assert all(v == v for v in hist)  # finite held-out numbers, no NaN from bf16


def test_cpu_default_is_bit_identical_to_an_explicit_fp32_runtime(tmp_path):
    """``auto`` on a CPU machine is exactly Runtime() (fp32): the curves other tests compare do not move."""
    from bertcore.data.corpus import builtin_corpus

    corpus = builtin_corpus(seed=0, n_pairs=200)
    b, t = tiny_configs()
    plain = Trainer(b, t, corpus)
    plain.run()
    auto = Trainer(b, t, corpus, runtime=resolve_runtime("cpu", "auto"))
    auto.run()
    assert plain.history.frame().drop(columns="tokens_per_s").equals(auto.history.frame().drop(columns="tokens_per_s"))
    half = Trainer(b, t, corpus, runtime=Runtime("cpu", "bf16"))
    half.run()
    assert half.history.last()["mlm_loss"] != plain.history.last()["mlm_loss"]  # bf16 really ran


def test_finetune_cli_records_its_runtime(tmp_path, capsys):
    out = tmp_path / "ft"
    assert cli.main(["finetune", "--from", "scratch", "--task", "coherence", "--steps", "3", "--labels", "16",
                     "--device", "cpu", "--precision", "bf16", "--out", str(out), "--json"]) == 0
    assert "(cpu, bf16)" in capsys.readouterr().err
    assert json.loads((out / "run.json").read_text())["runtime"] == "cpu, bf16"
    assert all(v.dtype == torch.float32 for v in load_file(str(out / "model.safetensors")).values())


def test_sae_on_a_runtime_matches_the_default_and_comes_back_on_the_cpu():
    from bertcore.analysis.sae import SAETrainConfig, train_sae

    x = torch.randn(300, 8, generator=torch.Generator().manual_seed(0))
    cfg = SAETrainConfig(d_in=8, d_sae=16, architecture="topk", k=2, steps=30, batch_size=64, seed=1)
    a, _ = train_sae(x, cfg)
    b, _ = train_sae(x, cfg, runtime=Runtime())
    assert all(torch.equal(p, q) for p, q in zip(a.state_dict().values(), b.state_dict().values()))
    c, log = train_sae(x, cfg, runtime=Runtime("cpu", "bf16"))
    assert {p.device.type for p in c.parameters()} == {"cpu"} and {p.dtype for p in c.parameters()} == {torch.float32}
    assert log["steps_done"] == 30 and not torch.equal(a.W_enc, c.W_enc)


# ----------------------------------------------------------------------------- weights leave the GPU
class Marked(torch.Tensor):
    """A weight that records being copied to the CPU (as a CUDA tensor must be before it is saved)."""

    moved: list = []

    def cpu(self, *args, **kwargs):
        Marked.moved.append(tuple(self.shape))
        return self.as_subclass(torch.Tensor).clone()


def test_every_saved_weight_goes_through_cpu(tmp_path, monkeypatch):
    from bertcore.finetune.models import start_model
    from bertcore.finetune.route import save_finetune_run
    from bertcore.finetune.tuner import FinetuneConfig, FineTuner
    from bertcore.data.tasks import get_task
    from bertcore.io.checkpoint import unique_state_dict

    task = get_task("coherence", seed=0)
    model, tok, _ = start_model("scratch", task, seed=0)
    real = model.state_dict
    monkeypatch.setattr(model, "state_dict", lambda *a, **k: {n: v.detach().as_subclass(Marked)
                                                               for n, v in real(*a, **k).items()})
    Marked.moved.clear()
    weights = unique_state_dict(model)  # what save_checkpoint, save_step and the resume file write
    assert Marked.moved and len(Marked.moved) == len(weights)
    assert all(type(v) is torch.Tensor for v in weights.values())
    tuner = FineTuner(model, tok, task, FinetuneConfig(steps=1, labels=8))
    Marked.moved.clear()
    save_finetune_run(tmp_path / "ft", tuner, "scratch")  # the fine-tune route's own writer
    assert len(Marked.moved) == len(real())


# ----------------------------------------------------------------------------- resume
def _stopped_run(tmp_path) -> Path:
    b, t = tiny_configs(steps=6)
    stop = StopSignal()
    spec = service.RunSpec(b, t, corpus="tutorial", skills=False, runtime=Runtime())
    res = service.train(spec, tmp_path / "run", stop=stop,
                         callbacks=Callbacks(step=lambda ev: stop.request() if ev.trainer.step_count == 2 else None))
    assert res.status == "stopped" and json.loads((res.run_dir / "run.json").read_text())["runtime"] == "cpu, fp32"
    return res.run_dir


def test_resume_goes_on_where_asked_now_and_reads_a_gpu_runs_rng_state(tmp_path):
    d = _stopped_run(tmp_path)
    path = d / RESUME_FILE
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        meta, tensors = f.metadata(), {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
    tensors["rng.dropout"] = torch.zeros(16, dtype=torch.uint8)  # a CUDA generator's state (seed + offset)
    save_file(tensors, str(path), metadata=meta)
    res = service.resume(d, runtime=Runtime("cpu", "bf16"))
    assert res.status == "finished" and res.trainer.step_count == 6
    assert json.loads((d / "run.json").read_text())["runtime"] == "cpu, bf16"


# ----------------------------------------------------------------------------- the app's trainings
def test_app_trainings_resolve_to_the_gpu_and_the_job_json_carries_it(tmp_path, monkeypatch):
    from bertcore.data.corpus import tutorial_corpus
    from explorer.launch import launcher, training_run
    from explorer.launch.training_slots import training_runtime

    fake_gpu(monkeypatch)
    monkeypatch.delenv("BERTCORE_TRAINING_DEVICE", raising=False)
    assert training_runtime().label == "cuda:0, bf16"
    b, t = tiny_configs()
    spec = launcher.app_spec(b, t, tutorial_corpus(), name="gpu job")  # the app's spec is complete where it is built
    run = training_run.TrainingRun([spec], runs_dir=tmp_path)
    assert (spec.corpus_spec, spec.source) == ("tutorial", training_run.TRAINED_LABEL)
    assert spec.runtime.label == "cuda:0, bf16" and run.snapshot().runtime == "cuda:0, bf16"
    worker.write_job(tmp_path / "job", [spec, service.RunSpec(None, None, resume_from=tmp_path / "stopped-run")], tmp_path,
                     runtime=run.runtime)
    job = json.loads((tmp_path / "job" / worker.LAUNCH_FILE).read_text())
    assert (job["jobs"][0]["runtime"]["device"], job["jobs"][0]["runtime"]["precision"]) == ("cuda:0", "bf16")
    assert Runtime.from_dict(job["jobs"][0]["runtime"]) == spec.runtime == Runtime.from_dict(job["runtime"])
    monkeypatch.setenv("BERTCORE_TRAINING_DEVICE", "cpu")  # a server can keep its trainings off the GPU
    assert training_runtime().label == "cpu, fp32"
    monkeypatch.setenv("BERTCORE_TRAINING_DEVICE", "tpu")
    with pytest.raises(ConfigError, match="BERTCORE_TRAINING_DEVICE"):
        training_runtime()


def test_the_worker_process_trains_with_the_runtime_of_the_job_json(tmp_path):
    b, t = tiny_configs(steps=3)
    spec = service.RunSpec(b, t, corpus="tutorial", skills=False, name="bf16 child",
                           runtime=Runtime("cpu", "bf16"))
    folder = worker.write_job(tmp_path / "job", [spec], tmp_path / "runs")
    proc = worker.spawn(folder)
    events = list(worker.events(proc))
    assert worker.finish(proc, 60) == 0, worker.crash_text(folder)
    start = next(e for e in events if e["ev"] == "start")
    end = next(e for e in events if e["ev"] == "job_end")
    assert start["runtime"] == "cpu, bf16" and end["status"] == "finished"
    assert json.loads((Path(end["run_dir"]) / "run.json").read_text())["runtime"] == "cpu, bf16"


def test_train_page_says_where_it_trains(monkeypatch):
    from streamlit.testing.v1 import AppTest

    monkeypatch.delenv("BERTCORE_TRAINING_DEVICE", raising=False)
    at = AppTest.from_file(APP, default_timeout=60).run()
    at.switch_page("app_pages/train.py").run()
    assert not at.exception, [e.value for e in at.exception]
    here = resolve_runtime().label
    assert [c.value for c in at.caption if c.value.startswith("Trains on")] == [f"Trains on {here}"]
    fake_gpu(monkeypatch)  # the same page on a GPU machine (nothing is trained)
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert [c.value for c in at.caption if c.value.startswith("Trains on")] == ["Trains on cuda:0, bf16"]
