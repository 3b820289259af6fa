"""`sae`, `features`, `steer`: a sparse autoencoder on a run, its features, and steering with one (docs/FEATURES.md).

    python -m bertcore sae      RUN --layer L [--site residual|ffn] [--size N] [--k K | --l1 C]
                                [--step N | --over-training] [--seed S] [--train-steps N] [--out DIR] [--quiet]
                                [--json]
    python -m bertcore features SAE_DIR [--top N] [--feature F] [--text "..." [--text-b "..."]] [--json]
    python -m bertcore steer    RUN SAE_DIR --feature F [--strength S] ("text with [MASK]" | --skill NAME) [--json]

Layers are 0-based: ``--layer L --site residual`` reads the output of layer L (the glass box's ``layer.L.output``),
``--site ffn`` its FFN activation (``layer.L.ffn.intermediate``). ``--size`` is the dictionary size as a multiple of
the activation's width (8: 512 features for the default model's 64-wide residual stream).
"""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

from bertcore.cli.common import CliError, add_runtime_args, int_in, runtime_of


def _float_in(lo: float, hi: float, what: str):
    import argparse

    def parse(s: str) -> float:
        try:
            v = float(s)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be a number, got {s!r}") from None
        if not (math.isfinite(v) and lo <= v <= hi):
            raise argparse.ArgumentTypeError(f"{what}={s} is out of range; use a number in [{lo:g}, {hi:g}]")
        return v

    return parse


def _intermixed(base):
    """``base`` (the CLI's parser class) reading positionals wherever they stand among the options (argparse's
    ``parse_intermixed_args``; plain parsing takes an optional positional before the options and then refuses it)."""
    class Intermixed(base):
        _busy = False

        def parse_known_args(self, args=None, namespace=None):
            if self._busy:
                return super().parse_known_args(args, namespace)
            self._busy = True
            try:
                return self.parse_known_intermixed_args(args, namespace)
            finally:
                self._busy = False

    return Intermixed


def add_sae_parsers(sub) -> None:
    s = sub.add_parser("sae", help="train a sparse autoencoder on one layer's activations of a run (saved in "
                       "SAELens's layout in RUN/saes/)")
    s.add_argument("dir", metavar="RUN", help="a run directory (its own corpus gives the activations)")
    s.add_argument("--layer", type=int_in(0, 10_000, "--layer"), required=True, help="encoder layer, 0-based")
    s.add_argument("--site", choices=("residual", "ffn"), default="residual",
                   help="residual: the output of the layer (layer.L.output); ffn: its FFN activation")
    s.add_argument("--size", dest="dict_size", type=int_in(1, 64, "--size"), default=8,
                   help="dictionary size as a multiple of the width (default 8)")
    g = s.add_mutually_exclusive_group()
    g.add_argument("--k", type=int_in(1, 100_000, "--k"), help="top-k SAE with k active features (default 8)")
    g.add_argument("--l1", type=_float_in(1e-6, 1e4, "--l1"), help="ReLU SAE with this L1 coefficient instead")
    w = s.add_mutually_exclusive_group()
    w.add_argument("--step", type=int_in(0, 10**9, "--step"), help="a saved step of the run (default: final)")
    w.add_argument("--over-training", action="store_true",
                   help="one SAE at each of 5 saved steps (first to last): when the features appear")
    s.add_argument("--seed", type=int_in(0, 2**31 - 1, "--seed"), default=0)
    s.add_argument("--train-steps", type=int_in(1, 1_000_000, "--train-steps"), default=400,
                   help="optimizer steps of 1024 tokens (default 400)")
    s.add_argument("--out", metavar="DIR", help="SAE folder to write (default RUN/saes/<name>)")
    s.add_argument("--quiet", action="store_true", help="no progress bar")
    s.add_argument("--json", action="store_true")
    add_runtime_args(s)

    f = sub.add_parser("features", help="an SAE's features: grammar label with AUROC, precision, recall, "
                       "frequency, top contexts, promoted and suppressed words; or its activations on a text")
    f.add_argument("sae_dir", metavar="SAE_DIR")
    f.add_argument("--top", type=int_in(1, 10**6, "--top"), help="only the N features with the best labels")
    f.add_argument("--feature", type=int_in(0, 10**7, "--feature"), help="only this feature")
    f.add_argument("--text", help="activations of every feature at every token of this text")
    f.add_argument("--text-b", help="with --text: sentence B")
    f.add_argument("--json", action="store_true")

    kind = sub._parser_class
    sub._parser_class = _intermixed(kind)  # the text may come after the options: steer RUN SAE --feature 3 "a [MASK]"
    try:
        t = sub.add_parser("steer", help="add a feature's decoder direction at its layer: fill-mask before and "
                           "after, or the flip rate over a built-in skill's items")
    finally:
        sub._parser_class = kind
    t.add_argument("dir", metavar="RUN")
    t.add_argument("sae_dir", metavar="SAE_DIR")
    t.add_argument("text", nargs="?", help="a text with [MASK]")
    t.add_argument("--feature", type=int_in(0, 10**7, "--feature"), required=True)
    t.add_argument("--strength", type=_float_in(-100, 100, "--strength"), default=2.0,
                   help="multiple of the feature's largest activation (default 2)")
    t.add_argument("--skill", help="a built-in MLM skill, e.g. verb_agreement: flip rate over its held-out items")
    t.add_argument("--top-k", type=int_in(1, 100, "--top-k"), default=5)
    t.add_argument("--json", action="store_true")


def _run_dir(path: str) -> Path:
    d = Path(path).expanduser()
    if not d.is_dir():
        raise CliError(f"{path} is not a directory; give a run directory")
    return d


def cmd_sae(args) -> int:
    import torch
    from tqdm import tqdm

    from bertcore.analysis.sae_runs import SAESpec, features_of, saes_over_training, summary, train_run_sae

    torch.set_num_threads(1)
    rt = runtime_of(args)  # --device cuda without a GPU: one error line, before the run is read
    run = _run_dir(args.dir)
    spec = SAESpec(layer=args.layer, site=args.site, size=args.dict_size, k=None if args.l1 is not None else (args.k or 8),
                   l1=args.l1, step=args.step, seed=args.seed, steps=args.train_steps)
    bar = None
    stages = {"data": "reading the run's corpus", "measure": "measuring the quality", "label": "naming the features"}

    def progress(stage, frac):
        nonlocal bar
        if args.quiet:
            return
        if stage == "train":
            if bar is None:
                bar = tqdm(total=spec.steps, file=sys.stderr, unit="step", desc="training the SAE", mininterval=0.5)
            bar.n = int(round(frac * spec.steps))
            bar.refresh()
        elif stage in stages and frac == 0.0:
            if bar is not None:
                bar.close()
                bar = None
            print(stages[stage] + " ...", file=sys.stderr)

    if args.over_training:
        if args.out:
            raise CliError("--over-training writes its SAEs to RUN/saes/; drop --out")
        try:
            dirs = saes_over_training(run, spec, progress=lambda i, n, stage, frac: progress(stage, frac), runtime=rt)
        finally:
            if bar is not None:
                bar.close()
        rows = [{**summary(d), "families": features_of(d).get("families")} for d in dirs]
        if args.json:
            print(json.dumps({"run": str(run), "saes": rows}, indent=2))
            return 0
        for r in rows:
            fam = ", ".join(f"{k} {v['auroc']:.3f}" for k, v in (r["families"] or {}).items() if v)
            print(f"step {r['step']}: variance explained {r['variance_explained']:.3f}, best AUROC: {fam} ({r['sae_dir']})")
        return 0
    try:
        d = train_run_sae(run, spec, out=args.out, progress=progress, runtime=rt)
    finally:
        if bar is not None:
            bar.close()
    s = summary(d)
    if args.json:
        print(json.dumps(s, indent=2))
        return 0
    print(f"saved the SAE ({s['hook']}, {spec.size}x) to {d}")
    print(f"variance explained {s['variance_explained']:.3f}, L0 {s['l0']:.2f}, dead {s['dead_fraction']:.1%}, "
          f"dense {s['dense_fraction']:.1%}")
    if "loss_recovered" in s:
        print(f"MLM loss clean {s['clean_loss']:.3f}, spliced {s['spliced_loss']:.3f}, zero-ablated "
              f"{s['zero_loss']:.3f}: loss recovered {s['loss_recovered']:.3f}")
    return 0


def _contexts(table: dict, ft: dict) -> list[dict]:
    seqs = table.get("sequences", {})
    return [{"tokens": seqs.get(str(c["seq"]), []), "position": c["position"], "activation": c["activation"],
             "activations": c.get("activations", [])} for c in ft.get("top_contexts", [])]


def feature_rows(table: dict, top: int | None = None, feature: int | None = None) -> list[dict]:
    """The rows ``features --json`` prints: every feature (best labels first for --top), or the one asked for."""
    from bertcore.data.token_labels import describe_label

    fts = table["features"]
    if feature is not None:
        if not 0 <= feature < len(fts):
            raise CliError(f"--feature {feature} does not exist; this SAE has features 0..{len(fts) - 1}")
        fts = [fts[feature]]
    elif top is not None:
        fts = sorted(fts, key=lambda f: (f["label"] is None, -(f["auroc"] or 0), -f["frequency"]))[:top]
    keys = ("id", "label", "auroc", "precision", "recall", "frequency", "max_activation", "best_guess")
    return [{**{k: ft.get(k) for k in keys}, "label_text": str(describe_label(ft.get("label"))),
             "top_contexts": _contexts(table, ft), "histogram": ft.get("histogram"),
             "promotes": ft.get("promotes", []), "suppresses": ft.get("suppresses", [])} for ft in fts]


def cmd_features(args) -> int:
    import torch

    from bertcore.analysis.sae_runs import features_of, open_sae, text_activations
    from bertcore.io.sae_io import hook_of

    torch.set_num_threads(1)
    if args.text_b is not None and args.text is None:
        raise CliError("--text-b needs --text (sentence A)")
    if args.text is not None:
        sae, cfg, _, b = open_sae(args.sae_dir)
        r = text_activations(sae, hook_of(cfg), b.model, b.tokenizer, args.text, args.text_b)
        acts = r["activations"]
        if args.json:
            print(json.dumps({"tokens": r["tokens"], "hook": r["hook"], "activations": acts.tolist()}))
            return 0
        for i, tok in enumerate(r["tokens"]):
            row = acts[i]
            top = row.argsort()[::-1][:5]
            print(f"{i:>3} {tok:<14} " + "  ".join(f"#{j}:{row[j]:.2f}" for j in top if row[j] > 0))
        return 0
    table = features_of(args.sae_dir)
    rows = feature_rows(table, args.top, args.feature)
    if args.json:
        print(json.dumps({"sae_dir": str(args.sae_dir), "hook": table.get("hook"), "grammar": table.get("grammar"),
                          "no_label_auroc": table.get("no_label_auroc"), "features": rows}))
        return 0
    print(f"{'id':>5}  {'label':<36} {'AUROC':>6} {'prec':>5} {'rec':>5} {'freq':>7}  promotes")
    for r in rows:
        auroc = f"{r['auroc']:.3f}" if r["auroc"] is not None else "-"
        prec = f"{r['precision']:.2f}" if r["precision"] is not None else "-"
        rec = f"{r['recall']:.2f}" if r["recall"] is not None else "-"
        words = " ".join(t for t, _ in r["promotes"][:4])
        print(f"{r['id']:>5}  {r['label_text'][:36]:<36} {auroc:>6} {prec:>5} {rec:>5} {r['frequency']:>7.4f}  {words}")
    return 0


def cmd_steer(args) -> int:
    import torch

    from bertcore.analysis.sae_runs import effect_of, features_of, open_sae, run_of, sae_corpus
    from bertcore.analysis.steering import check_feature, skill_flips, skill_suite, steer_text, steering_vector
    from bertcore.io.checkpoint import load_checkpoint
    from bertcore.io.sae_io import hook_of

    torch.set_num_threads(1)
    if (args.text is None) == (args.skill is None):
        raise CliError("give either a text with [MASK] or --skill NAME (e.g. --skill verb_agreement)")
    run = _run_dir(args.dir)
    if run_of(args.sae_dir).resolve() != run.resolve():
        print(f"note: {args.sae_dir} was trained on another run; steering {run.name} with it", file=sys.stderr)
    sae, cfg, training, b = open_sae(args.sae_dir, load_checkpoint(run))
    check_feature(args.feature, sae.d_sae)
    hook = hook_of(cfg)
    table = features_of(args.sae_dir, b)
    max_act = float(table["features"][args.feature]["max_activation"])
    if max_act <= 0:
        raise CliError(f"feature {args.feature} never fires on the evaluation tokens (it is dead), so it has no "
                       "strength to steer with; choose a live feature (`features SAE_DIR --top 20`)")
    if args.text is not None:
        out = steer_text(b.model, b.tokenizer, sae, hook, args.feature, args.strength, max_act, args.text, args.top_k)
        out["hook"] = hook
    else:
        effect = effect_of(args.sae_dir, args.feature)
        if effect is None:
            raise CliError("this SAE has no output effects (its model has no MLM head), so it cannot steer a skill")
        max_len = int(cfg.get("metadata", {}).get("context_size") or 48)
        suite = skill_suite(sae_corpus(run, 24000), b.tokenizer, args.skill, max_len)
        vec = steering_vector(sae, args.feature, args.strength, max_act)
        out = {"skill": args.skill, "feature": args.feature, "strength": args.strength, "hook": hook,
               **skill_flips(b.model, suite, hook, vec, effect, seed=int(training.get("spec", {}).get("seed", 0)))}
    if args.json:
        print(json.dumps(out))
        return 0
    if args.text is not None:
        print(" ".join(out["tokens"]))
        for before, after in zip(out["before"], out["after"]):
            print(f"[MASK] at {before['position']}: before " + ", ".join(f"{t} {p:.3f}" for t, p in before["top"][:3])
                  + " | after " + ", ".join(f"{t} {p:.3f}" for t, p in after["top"][:3]))
        return 0
    print(f"{args.skill}: {out['can_flip']} of {out['items']} items can flip toward feature {args.feature}; "
          f"flip rate {out['flip_rate']:.3f}, random direction of the same norm {out['random_flip_rate']:.3f}")
    return 0
