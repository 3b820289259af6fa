"""`python -m bertcore probe`: the JSON shape (0-based layers, one entry per layer and step), the numbers equal
the library's, and bad input gives `error: ...` with exit status 2."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
import torch

from bertcore.analysis.probing import probe_step
from bertcore.io import derived
from bertcore.cli import main
from bertcore.config import BertConfig, TrainConfig
from bertcore.launch import service

torch.set_num_threads(1)
LAYER_KEYS = {"layer", "accuracy", "control_accuracy", "selectivity", "chance", "control_chance"}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    tc = TrainConfig(steps=20, batch_size=16, eval_every=10, eval_size=32, warmup_steps=2, seed=1)
    cfg = BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                     max_position_embeddings=48)
    return service.train(service.RunSpec(cfg, tc, name="cli probes"), tmp_path_factory.mktemp("r") / "run").run_dir


def _json(capsys, *argv) -> dict:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_one_step_json(tiny_run, capsys):
    d = _json(capsys, "probe", str(tiny_run), "--property", "position", "--step", "10", "--json", "--no-cache")
    assert d["property"] == "position" and d["step"] == 10
    assert [lp["layer"] for lp in d["layers"]] == [0, 1, 2] and set(d["layers"][0]) == LAYER_KEYS
    assert d["n_train"] > d["n_test"] > 0
    want = probe_step(tiny_run, 10, "position", disk=False)
    assert [lp["accuracy"] for lp in d["layers"]] == [lp.accuracy for lp in want.layers]
    assert not derived.root().exists()  # --no-cache writes nothing


def test_all_steps_json_is_a_layer_by_step_matrix(tiny_run, capsys):
    d = _json(capsys, "probe", str(tiny_run), "--property", "number", "--all-steps", "--json")
    assert d["steps"] == [0, 10, 20]
    assert len(d["accuracy"]) == 3 and all(len(row) == 3 for row in d["accuracy"])  # layers x steps
    assert d["accuracy"][1][2] == d["results"][2]["layers"][1]["accuracy"]
    assert len(list(derived.root().glob("*/probe_v*_number.json"))) == 3  # one per step's weights, outside the run
    assert not (tiny_run / "probes").exists()


def test_labels_csv(tiny_run, tmp_path, capsys):
    f = tmp_path / "tags.csv"
    f.write_text("text,labels\n" + "the cow eats hay .,D N V N P\nthe cows eat hay .,D N V N P\n" * 6)
    d = _json(capsys, "probe", str(tiny_run), "--property", "labels", "--labels", str(f), "--json")
    assert d["classes"] == ["D", "N", "P", "V"] and len(d["layers"]) == 3


@pytest.mark.parametrize("argv, msg", [
    (["--property", "colour"], "--property 'colour' is unknown"),
    (["--property", "labels"], "give one (--labels FILE.csv)"),
    (["--property", "number", "--step", "7"], "step 7 is not saved"),
])
def test_bad_input_exits_2(tiny_run, capsys, argv, msg):
    assert main(["probe", str(tiny_run), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and msg in err and "Traceback" not in err


def test_bad_csv_and_missing_run_in_a_subprocess(tiny_run, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("word,tag\ncow,N\n")
    for argv in (["probe", str(tiny_run), "--property", "labels", "--labels", str(bad)],
                 ["probe", str(tmp_path / "nope"), "--property", "position"]):
        p = subprocess.run([sys.executable, "-m", "bertcore", *argv], capture_output=True, text=True, timeout=120)
        assert p.returncode == 2 and p.stderr.startswith("error: ") and "Traceback" not in p.stderr, p.stderr


def test_a_run_without_saved_steps_probes_its_checkpoint(tiny_run, tmp_path, capsys):
    old = tmp_path / "old"
    shutil.copytree(tiny_run, old)
    shutil.rmtree(old / "steps")  # a run made before replay existed
    d = _json(capsys, "probe", str(old), "--property", "topic", "--all-steps", "--json")
    assert d["steps"] == [-1] and d["results"][0]["step"] is None
    final = _json(capsys, "probe", str(old), "--property", "topic", "--json")
    assert final["layers"] == d["results"][0]["layers"]
