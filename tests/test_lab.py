"""The lab (issue 55): named studies, the table's statistics, and the one study runner (bertcore.launch.study).

The runner's tests train a tiny custom study end to end in training processes: every run a normal run directory
with its scores, study.json holding the table, and a second start finishing only what is missing."""
from __future__ import annotations

import json
import math

import pytest
import torch

from bertcore.errors import ConfigError, InputError
from bertcore.launch import study as S
from bertcore.lab import table as T
from bertcore.lab.studies import STUDIES, custom_study, get_study, slug
from bertcore.training import runs

TINY = {"hidden_size": 32, "num_attention_heads": 2, "intermediate_size": 64, "num_hidden_layers": 1,
        "batch_size": 16, "eval_size": 32}


# ------------------------------------------------------------------ the table's statistics
def test_mean_and_sample_sd():
    m, sd = T.mean_sd([0.5, 0.6, 0.7])
    assert m == pytest.approx(0.6) and sd == pytest.approx(0.1)
    assert T.mean_sd([0.4]) == (0.4, None) and T.mean_sd([]) == (None, None)


def test_a_difference_is_marked_only_when_the_paired_test_finds_it():
    ref = {0: 0.50, 1: 0.60, 2: 0.70}
    steady = {s: v + 0.05 for s, v in ref.items()}  # the same gain on every seed: consistent
    t = T.paired_test(ref, steady)
    assert t["marked"] and t["diff"] == pytest.approx(0.05) and t["n"] == 3
    noisy = {0: 0.58, 1: 0.55, 2: 0.72}  # +0.08, -0.05, +0.02: within the seeds' spread
    t = T.paired_test(ref, noisy)
    assert not t["marked"] and t["p"] > 0.05
    two = T.paired_test({0: 0.5, 1: 0.6}, {0: 0.9, 1: 1.0})  # two seeds: no test, no mark
    assert two["p"] is None and not two["marked"] and two["diff"] == pytest.approx(0.4)
    from scipy import stats

    big = {0: 0.60, 1: 0.66, 2: 0.80}
    assert T.paired_test(ref, big)["p"] == pytest.approx(stats.ttest_rel(list(big.values()), list(ref.values())).pvalue)


# ------------------------------------------------------------------ the studies
def test_table_8_has_the_papers_six_mixes_and_numbers():
    s = get_study("bert-table-8")
    assert [v.name for v in s.variants] == ["80/10/10", "100/0/0", "80/0/20", "80/20/0", "0/20/80", "0/0/100"]
    for v in s.variants:
        _, tc = s.configs(v, 0, 300)
        mask, same, rnd = (int(x) / 100 for x in v.name.split("/"))
        assert (tc.mask_token_frac, tc.random_token_frac) == pytest.approx((mask, rnd))
        assert tc.keep_frac == pytest.approx(same) and tc.mlm_probability == 0.15 and tc.steps == 300
    assert s.variant("80/10/10").paper == {"MNLI fine-tune": 84.2, "NER fine-tune": 95.4, "NER feature-based": 94.9}
    assert s.variant("100/0/0").paper["NER feature-based"] == 94.0


def test_table_5_and_the_other_studies_set_their_switches():
    t5 = get_study("bert-table-5")
    bert, tc = t5.configs(t5.variant("LTR & No NSP"), 1, 50)
    assert bert.causal and tc.sentence_task == "none" and tc.seed == 1
    assert t5.configs(t5.variant("No NSP"), 0, 50)[1].sentence_task == "none"
    assert [t5.configs(v, 0, 10)[1].sentence_task for v in get_study("sentence-task").variants] == ["nsp", "sop", "none"]
    mu = get_study("masking-unit")
    assert mu.tokenizer == "wordpiece" and [mu.configs(v, 0, 10)[1].masking_unit for v in mu.variants] == \
        ["token", "whole_word", "span"]
    assert [round(get_study("mask-rate").configs(v, 0, 10)[1].mlm_probability, 2)
            for v in get_study("mask-rate").variants] == [0.15, 0.3, 0.4, 0.6, 0.8]
    assert all(s.reference in [v.name for v in s.variants] and s.paper_note for s in STUDIES.values())


def test_custom_study_checks_its_switch_now():
    s = custom_study("mlm_probability=0.15,0.4", {"hidden_size": 32})
    assert [v.name for v in s.variants] == ["mlm_probability=0.15", "mlm_probability=0.4"]
    assert s.configs(s.variants[1], 0, 10)[1].mlm_probability == 0.4
    for bad in ("nope=1,2", "mlm_probability=0.15", "mlm_probability=0.15,7", "seed=1,2", "hidden"):
        with pytest.raises(ConfigError):
            custom_study(bad)


def test_the_same_seed_gives_the_same_initial_weights_where_shapes_allow():
    s = custom_study("norm_placement=post,pre", TINY)
    ref, none = S.initial_model(s, s.reference, 3, 100)
    pre, report = S.initial_model(s, "norm_placement=pre", 3, 100)
    assert none is None and report is not None and report.copied
    shared = dict(ref.named_parameters())
    for name in report.copied:
        assert torch.equal(dict(pre.named_parameters())[name], shared[name])
    assert any("LayerNorm" in name for name, _ in report.own)  # pre-norm's final LayerNorm is its own
    t8 = get_study("bert-table-8")  # same shapes: the seed alone gives the same weights
    a, _ = S.initial_model(t8, "80/10/10", 0, 100)
    b, r = S.initial_model(t8, "0/0/100", 0, 100)
    assert r is None and all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


# ------------------------------------------------------------------ the runner
def _metrics_ok(m: dict) -> bool:
    return all(v is None or (0.0 <= v <= 1.0) for v in m.values()) and m["mlm_acc"] is not None


def test_a_study_trains_scores_and_finishes_only_what_is_missing(tmp_path):
    s = custom_study("mlm_probability=0.15,0.3", TINY)
    out = tmp_path / "study"
    p = S.plan(s, out, seeds=2, steps=6)
    assert len(p.cells) == 4 and len(p.todo) == 4
    seen = []
    data = S.run(p, lanes=2, on_event=seen.append)
    assert data["status"] == "finished" and data["done"] == data["total"] == 4
    on_disk = json.loads((out / S.STUDY_FILE).read_text())
    assert on_disk["variants"] == data["variants"] and on_disk["study"] == "custom"
    assert runs.read_run(out).kind == "study" and runs.read_run(out).summary().endswith("4/4 runs scored")
    for v in data["variants"]:
        assert [r["seed"] for r in v["runs"]] == [0, 1]
        for r in v["runs"]:
            d = out / "runs" / f"{slug(v['name'])}-seed{r['seed']}"
            assert str(d) == r["dir"] and r["status"] == "scored" and _metrics_ok(r["metrics"])
            assert (d / "train_config.json").is_file() and (d / "history.csv").is_file()
            assert json.loads((d / "train_config.json").read_text())["mlm_probability"] == float(v["name"].split("=")[1])
            assert runs.read_run(d).status == "finished"
        vals = [r["metrics"]["mlm_acc"] for r in v["runs"]]
        assert v["mean"]["mlm_acc"] == pytest.approx(sum(vals) / 2)
        assert v["sd"]["mlm_acc"] == pytest.approx(abs(vals[0] - vals[1]) / math.sqrt(2))
    assert {ev["ev"] for ev in seen} >= {"start", "rows", "job_end", "evaluated", "study"}
    assert (out / "table.csv").read_text().startswith("variant,seeds,mlm_acc_mean")
    assert (out / "curves.svg").read_text().startswith("<svg")

    # one run lost its scores, another was never trained: a second start does only those two
    kept = out / "runs" / "mlm-probability-0-3-seed1" / "model.safetensors"
    stamp = kept.stat().st_mtime_ns
    (out / "runs" / "mlm-probability-0-15-seed0" / "evaluation.json").unlink()
    import shutil

    shutil.rmtree(out / "runs" / "mlm-probability-0-15-seed1")
    again = S.plan(s, out, seeds=2, steps=6)
    assert sorted((c.variant, c.seed, c.state) for c in again.todo) == [
        ("mlm_probability=0.15", 0, "trained"), ("mlm_probability=0.15", 1, "missing")]
    data2 = S.run(again, lanes=2)
    assert data2["status"] == "finished" and kept.stat().st_mtime_ns == stamp
    assert data2["variants"][1]["runs"] == data["variants"][1]["runs"]  # the untouched variant: the same numbers


def test_a_stopped_study_keeps_its_runs_and_is_finished_later(tmp_path):
    from bertcore.training.drive import StopSignal

    s = custom_study("mask_token_frac=0.8,0.9", TINY)
    out = tmp_path / "s"
    p = S.plan(s, out, seeds=1, steps=40)
    stop = StopSignal()

    def stop_at_first_rows(ev):
        if ev.get("ev") == "rows" and ev["history"]["rows"] and ev["history"]["rows"][-1]["step"] >= 3:
            stop.request("stopped by the test")

    data = S.run(p, lanes=1, stop=stop, on_event=stop_at_first_rows)
    assert data["status"] == "stopped" and data["reason"] == "stopped by the test"
    states = sorted(c.state for c in S.plan(s, out, seeds=1, steps=40).cells)
    assert states == ["missing", "stopped"]  # the first stopped resumable, the second never began
    assert S.read_study(out)["status"] == "stopped"
    done = S.run(S.plan(s, out, seeds=1, steps=40), lanes=2)
    assert done["status"] == "finished" and done["done"] == 2


def test_a_folder_that_holds_another_study_is_refused(tmp_path):
    s = custom_study("mlm_probability=0.15,0.3", TINY)
    p = S.plan(s, tmp_path, seeds=1, steps=6)
    S.write_study(p)
    with pytest.raises(InputError, match="steps=6, not 7"):
        S.plan(s, tmp_path, seeds=1, steps=7)
    with pytest.raises(InputError, match="holds study custom"):
        S.plan(get_study("bert-table-5"), tmp_path, seeds=1, steps=6)
    assert S.plan(s, tmp_path, seeds=3, steps=6).seeds == 3
    with pytest.raises(InputError):
        S.plan(s, tmp_path / "x", seeds=0)


def test_cli_lab_json_is_the_study_file(tmp_path, capsys):
    from bertcore.cli import main

    out = tmp_path / "cli"
    args = ["lab", "--study", "custom", "--vary", "random_token_frac=0.1,0.2", "--seeds", "1", "--steps", "5",
            "--out", str(out)]
    for k, v in TINY.items():
        args += ["--set", f"{k}={v}"]
    assert main(args + ["--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads((out / S.STUDY_FILE).read_text())
    assert printed["study"] == "custom" and [v["name"] for v in printed["variants"]] == \
        ["random_token_frac=0.1", "random_token_frac=0.2"]
    for v in printed["variants"]:
        assert set(v) >= {"name", "settings", "runs", "mean", "sd"}
        assert set(v["runs"][0]) >= {"seed", "dir", "metrics"}
    assert main(["lab", "--study", "nope", "--out", str(tmp_path / "n")]) == 2
    assert "unknown study" in capsys.readouterr().err
    assert main(["lab", "--study", "custom", "--out", str(tmp_path / "n")]) == 2
    assert "--vary" in capsys.readouterr().err
    assert main(args + ["--steps", "9"]) == 2  # the folder holds the 5-step study
    assert "steps=5" in capsys.readouterr().err
