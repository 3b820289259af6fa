"""``python -m bench.experiments.page_costs [--reps N] [--json]``: what a page run spends on work it could do once.

Three costs that every page run paid again, each measured here against what replaced it, interleaved in one
process (medians of ``--reps``):

* **A chart of a figure kept in the memo.** ``st.plotly_chart`` asks the figure for its dict and encodes it to JSON
  at every call (``plotly.tools.return_figure_from_figure_or_data`` then ``plotly.io.to_json``, as Streamlit does).
  Measured for the Attention page's all-heads grid (the default model on its default pair, and MiniLM's 72 heads
  when it is installed) and for one stage heat map of "Inside the model": a plain figure, a frozen one
  (``explorer.figures.plotly_dict.freeze_figure``), and what freezing costs once.
* **The stage table** of "Inside the model" (a window of 20 rows by 256 columns): ``pa.Table.from_pandas`` of the
  frame against ``explorer.figures.forward.stage_table``.
* **A cache decorator in a script that runs at every page run**: executing a small page script whose function is
  decorated with ``st.cache_resource`` against the same script without it (Streamlit keys the function by its
  source, read and tokenized at each decoration).

Numbers go to docs/BENCH.md ("What a page run costs the server"); nothing here is asserted.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path


def _median_ms(fn, reps: int) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return round(statistics.median(times) * 1000, 3)


def _chart_json(fig) -> str:
    import plotly.io
    import plotly.tools

    return plotly.io.to_json(plotly.tools.return_figure_from_figure_or_data(fig, validate_figure=True),
                             validate=False)


def _figures() -> dict:
    """name -> a function that builds the figure anew."""
    import numpy as np

    from bertcore.analysis.inference import inspect_pair
    from bertcore.io.checkpoint import untrained_bundle
    from bertcore.io.hf_interop import import_hf, packaged_minilm_dir
    from explorer.figures import forward as FF
    from explorer.figures.inspect import attention_grid_figure, grid_cell_size, pooled_attention

    out = {}
    bundles = {"default model": untrained_bundle()}
    if packaged_minilm_dir() is not None:
        bundles["MiniLM (72 heads)"] = import_hf(packaged_minilm_dir())
    for name, b in bundles.items():
        insp = inspect_pair(b.model, b.tokenizer, "the cat sat on the mat .", "it was warm there .", max_len=64)
        tokens = [str(t) for t in insp.tokens]
        L, H = insp.attentions.shape[:2]
        P, labels = pooled_attention(insp.attentions, tokens, grid_cell_size(L, H))
        out[f"attention grid, {name}"] = lambda P=P, tokens=tokens, labels=labels: attention_grid_figure(
            P, tokens, labels=labels)
    m = np.random.default_rng(0).random((20, 20)).astype(np.float32)
    rows = [f"{i} tok{i}" for i in range(20)]
    out["stage heat map 20 x 20"] = lambda: FF.stage_heatmap(m, rows, rows, 3, prob=True, blocks=0, head_cols=None,
                                                             meta="bench")
    return out


def measure(reps: int = 21) -> dict:
    import logging

    import numpy as np
    import pyarrow as pa

    from explorer.figures import forward as FF
    from explorer.figures.plotly_dict import freeze_figure

    charts = {}
    for name, build in _figures().items():
        plain, frozen = build(), freeze_figure(build())
        assert json.loads(_chart_json(plain)) == json.loads(_chart_json(frozen))
        charts[name] = {
            "chart_plain_ms": _median_ms(lambda f=plain: _chart_json(f), reps),
            "chart_frozen_ms": _median_ms(lambda f=frozen: _chart_json(f), reps),
            "freeze_once_ms": _median_ms(lambda b=build: freeze_figure(b()), reps) - _median_ms(build, reps),
            "json_kb": round(len(_chart_json(plain)) / 1024, 1),
        }
    m = np.random.default_rng(1).random((20, 256)).astype(np.float32)
    rows, cols = [f"{i} tok{i}" for i in range(20)], [f"{j} w{j}" for j in range(256)]
    frame = FF.stage_frame(m, rows, cols)
    assert FF.stage_table(m, rows, cols).equals(pa.Table.from_pandas(frame), check_metadata=True)
    table = {"from_pandas_ms": _median_ms(lambda: pa.Table.from_pandas(frame), reps),
             "stage_table_ms": _median_ms(lambda: FF.stage_table(m, rows, cols), reps)}
    script = textwrap.dedent('''
        import streamlit as st

        {decorator}
        def icon():
            """A favicon drawn once."""
            pixels = [[(x * y) % 255 for x in range(32)] for y in range(32)]
            return sum(map(sum, pixels))
    ''')
    logging.getLogger("streamlit").setLevel(logging.ERROR)  # a decorator outside a server warns of no script run
    with tempfile.TemporaryDirectory() as tmp:
        codes = {}
        for kind, deco in (("with_decorator", "@st.cache_resource(show_spinner=False)"), ("without", "")):
            path = Path(tmp) / f"{kind}.py"
            path.write_text(script.format(decorator=deco))
            codes[kind] = compile(path.read_text(), str(path), "exec")  # as Streamlit runs a page: its file's code
        run = {kind: _median_ms(lambda c=c: exec(c, {"__name__": "__main__"}), reps) for kind, c in codes.items()}
    return {"reps": reps, "charts": charts, "stage_table_20x256": table, "page_script_ms": run}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=21)
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    if a.reps < 3:
        print("error: --reps must be at least 3", file=sys.stderr)
        return 2
    out = measure(a.reps)
    if a.json:
        print(json.dumps(out, indent=1))
        return 0
    for name, c in out["charts"].items():
        print(f"{name}: chart {c['chart_plain_ms']} ms plain, {c['chart_frozen_ms']} ms frozen "
              f"(freezing once {c['freeze_once_ms']:.2f} ms; {c['json_kb']} KB of JSON)")
    t = out["stage_table_20x256"]
    print(f"stage table 20 x 256: from_pandas {t['from_pandas_ms']} ms, stage_table {t['stage_table_ms']} ms")
    r = out["page_script_ms"]
    print(f"a page script: {r['with_decorator']} ms with a cache decorator, {r['without']} ms without")
    return 0


if __name__ == "__main__":
    sys.exit(main())
