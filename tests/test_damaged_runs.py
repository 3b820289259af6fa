"""Fourteen kinds of damaged run folders, tried as a new user would: through eight CLI commands each (every call
works or says `error: ...` with exit 2, never a traceback) and in the app with the damaged run active (Overview,
Predict and Attention show no exception; a run that cannot load is named in the sidebar with its reason and the
untrained model is shown instead). The good run beside them is untouched and still loads."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from bertcore.cli import main
from bertcore.config import BertConfig, TrainConfig
from bertcore.io.checkpoint import load_checkpoint
from bertcore.io.steps import list_steps, step_path
from bertcore.training import runs
from bertcore.launch import service
from bertcore.training.callbacks import Callbacks
from bertcore.training.drive import StopSignal

ROOT = Path(__file__).resolve().parents[1]
APP = str(ROOT / "app.py")
TEXT = "the cat [MASK] the fish ."


def _rewrite_config(d: Path, **changes) -> None:
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(changes)
    (d / "config.json").write_text(json.dumps(cfg))


def _poison(d: Path, value: float) -> None:
    w = load_file(str(d / "model.safetensors"))
    k = sorted(n for n, v in w.items() if v.dim() == 2)[0]
    w[k] = w[k].clone()
    w[k].view(-1)[0] = value
    save_file(w, str(d / "model.safetensors"), metadata={"format": "pt"})


def _cut(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


# kind -> (how to damage a copy of the good run, what `fill-mask` says: an error phrase, or None when it works)
KINDS = {
    "history-truncated": (lambda d: _cut(d / "history.csv"), None),
    "run-json-invalid": (lambda d: (d / "run.json").write_bytes(b"{not json"), None),
    "weights-half": (lambda d: _cut(d / "model.safetensors"), "not a valid safetensors file"),
    "config-missing": (lambda d: (d / "config.json").unlink(), "has no config.json"),
    "config-negative": (lambda d: _rewrite_config(d, hidden_size=-16), "config.json is invalid"),
    "config-mismatch": (lambda d: _rewrite_config(d, num_hidden_layers=2), "lacks"),
    "vocab-empty": (lambda d: (d / "vocab.txt").write_bytes(b""), "vocabulary"),
    "weights-missing": (lambda d: (d / "model.safetensors").unlink(), "has no model.safetensors"),
    "weights-symlink": (lambda d: ((d / "model.safetensors").unlink(), (d / "model.safetensors").symlink_to(
        "/etc/passwd")), "not a valid safetensors file"),
    "weights-nan": (lambda d: _poison(d, float("nan")), "NaN values"),
    "weights-inf": (lambda d: _poison(d, float("inf")), "infinite values"),
    "snapshots-garbage": (lambda d: (d / "snapshots.safetensors").write_bytes(os.urandom(4000)),
                          "attention snapshots"),
    "steps-garbage": (lambda d: step_path(d, 2).write_bytes(os.urandom(3000)), None),
    "resume-zero-byte": (lambda d: (d / "resume.safetensors").write_bytes(b""), None),
}
# what the run list says (read_run never raises): damaged with this phrase, or listed as loadable
LISTED_DAMAGED = {"run-json-invalid": "run.json cannot be read", "weights-half": "not a valid safetensors file",
                  "config-missing": "config.json missing", "weights-missing": "model.safetensors missing",
                  "weights-symlink": "not a valid safetensors file", "weights-nan": "NaN values",
                  "weights-inf": "infinite values"}


def commands(d: Path, out: Path) -> list[list[str]]:
    """Eight commands a user points at a run folder."""
    return [["fill-mask", str(d), TEXT], ["nsp", str(d), "a cat eats .", "it sleeps ."],
            ["inspect", str(d), "the cat eats the fish ."], ["export-hf", str(d), str(out)],
            ["heads", str(d), "--examples", "8"], ["lens", str(d), TEXT, "--step", "2"],
            ["explain", str(d), TEXT, "--method", "rollout"], ["train", "--resume", str(d), "--quiet"]]


def _digest(d: Path) -> dict[str, str]:
    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.rglob("*"))
            if p.is_file() and p.name != ".lock"}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """A runs root with one workspace: one good run (stopped at step 4 of 8: resumable, steps 0, 2, 4 saved) and
    one damaged copy of it per kind. Returns (runs root, ws id, good run dir, kind -> run dir, the good run's
    digest)."""
    root = tmp_path_factory.mktemp("damaged")
    ws = runs.new_workspace_id()
    parent = root / "workspaces" / ws
    bert = BertConfig(hidden_size=16, num_attention_heads=2, intermediate_size=32, num_hidden_layers=1,
                      max_position_embeddings=32)
    tc = TrainConfig(steps=8, batch_size=4, eval_every=2, eval_size=4, snapshot_every=2, max_seq_len=16,
                     warmup_steps=1, seed=1)
    stop = StopSignal()
    spec = service.RunSpec(bert, tc, corpus="tutorial", name="good run")
    good = service.train(spec, parent=parent, stop=stop,
                         callbacks=Callbacks(step=lambda ev: stop.request() if ev.trainer.step_count == 4 else None)).run_dir
    assert runs.read_run(good).resumable and list_steps(good) == [0, 2, 4]
    damaged = {}
    for kind, (damage, _) in KINDS.items():
        d = parent / kind
        shutil.copytree(good, d)
        runs.update_run_json(d, name=kind)
        damage(d)
        damaged[kind] = d
    return root, ws, good, damaged, _digest(good)


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_damaged_run_through_the_cli(kind, workspace, tmp_path, capsys):
    _, _, good, damaged, digest = workspace
    d = tmp_path / kind  # a copy: `train --resume` may change it, the app test below reads the originals
    shutil.copytree(damaged[kind], d, symlinks=True)
    info = runs.read_run(d)
    if kind in LISTED_DAMAGED:
        assert info.damaged and LISTED_DAMAGED[kind] in info.damaged and not info.loadable, info
    else:
        assert info.damaged is None and info.loadable, info
    results = []
    for argv in commands(d, tmp_path / "hf"):
        code = main(argv)
        out, err = capsys.readouterr()
        assert code in (0, 2), (argv, code, err)
        assert "Traceback" not in err + out and "unexpected" not in err, (argv, err)
        if code == 2:
            assert err.startswith("error: "), (argv, err)
        results.append((argv[0], code, err))
    phrase = KINDS[kind][1]
    fill = results[0]
    if phrase is None:
        assert fill[1] == 0, fill
    else:
        assert fill[1] == 2 and phrase in fill[2], fill
    if kind == "steps-garbage":  # the final model works; the damaged step is named
        assert results[5][1] == 2 and "step 2" in results[5][2], results[5]
    if kind == "resume-zero-byte":  # everything reads, it just cannot be resumed
        assert [c for _, c, _ in results[:7]] == [0] * 7 and "no resume state" in results[7][2], results
    assert _digest(good) == digest  # the good run beside it is untouched


def test_each_damaged_run_active_in_the_app(workspace, monkeypatch):
    """With each damaged run as the workspace's active model: Overview, Predict and Attention draw without an
    exception; a run that cannot load is named in the sidebar with its reason; the good run stays usable."""
    from streamlit.testing.v1 import AppTest

    from explorer.session import workspace as wsp

    root, ws, good, damaged, digest = workspace
    monkeypatch.setenv("BERTCORE_RUNS_DIR", str(root))
    at = AppTest.from_file(APP, default_timeout=120)
    at.query_params["ws"] = ws
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    for kind, d in damaged.items():
        loads = KINDS[kind][1] is None and kind not in LISTED_DAMAGED
        at.session_state[wsp.ACTIVE_KEY] = f"run:{d.name}"
        for page in ("app_pages/overview.py", "app_pages/predict.py", "app_pages/attention.py"):
            at.switch_page(page).run()
            assert not at.exception, (kind, page, [e.value for e in at.exception])
            active = at.sidebar.markdown[0].value
            if loads:
                assert active == f"**Active model:** {kind}", (kind, page, active)
            else:
                assert "fresh untrained" in active, (kind, page, active)
                if page.endswith("overview.py"):  # said once, on the first page it could not load
                    note = " ".join(w.value for w in at.sidebar.warning)
                    want = LISTED_DAMAGED.get(kind) or KINDS[kind][1]
                    assert "could not be loaded" in note and want in note, (kind, note)
    at.session_state[wsp.ACTIVE_KEY] = f"run:{good.name}"
    at.switch_page("app_pages/predict.py").run()
    assert not at.exception and at.sidebar.markdown[0].value == "**Active model:** good run"
    assert _digest(good) == digest
    assert load_checkpoint(good).model is not None
