"""``python -m bench.experiments.sae_lens_check SAE_DIR ...`` (run with a Python that has sae-lens): each saved SAE loaded with
SAELens's ``SAE.load_from_disk`` against bertcore's own loader, on the SAE's evaluation activations (the run's
corpus, as ``bertcore.analysis.sae_runs`` draws them) and on random inputs. Prints JSON: per folder the SAELens
version, its class, the hook name it read and the largest difference of the feature activations and of the
reconstructions. bench/experiments/sae.py calls it with ``--saelens-python``."""
from __future__ import annotations

import json
import sys
import warnings


def main(argv: list[str] | None = None) -> int:
    import sae_lens
    import torch

    from bertcore.analysis.sae_data import collect, draw_pairs, token_set
    from bertcore.analysis.sae_runs import open_sae, run_of, sae_corpus
    from bertcore.io.sae_io import hook_of

    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    out = {"sae_lens_version": sae_lens.__version__, "torch": torch.__version__, "saes": []}
    for d in argv if argv is not None else sys.argv[1:]:
        loaded = sae_lens.SAE.load_from_disk(d, device="cpu")
        ours, cfg, training, b = open_sae(d)
        spec = training["spec"]
        corpus = sae_corpus(run_of(d), 2 * (spec["n_train"] + spec["n_eval"]))
        _, ev = draw_pairs(len(corpus.pairs), spec["n_train"], spec["n_eval"], spec["seed"])
        x = collect(b.model, token_set(corpus, b.tokenizer, ev[:200], 48, spec["seed"] + 2), hook_of(cfg)).x
        x = torch.cat([x, torch.randn(500, x.shape[1]) * x.std()])
        with torch.no_grad():
            f_sl, f_ours = loaded.encode(x), ours.encode(x)
            out["saes"].append({"dir": d, "class": type(loaded).__name__, "hook_name": loaded.cfg.metadata.hook_name,
                                "tokens": int(len(x)), "max_abs_diff_features": float((f_sl - f_ours).abs().max()),
                                "max_abs_diff_reconstruction": float((loaded.decode(f_sl) - ours(x)).abs().max()),
                                "same_active_set": bool(torch.equal(f_sl > 0, f_ours > 0))})
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
