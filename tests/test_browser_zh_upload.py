"""A Chinese prose upload through the app in chromium, in 简体中文 (issue 25's done-when, at test size): Data & tokens
reads the file (prose mode: 。！？ end sentences), the Train page trains on it at its defaults (the steps slider at
its first notch to keep the test short), and Predict fills a Chinese [MASK] with characters of the corpus. The
app's run has the configuration ``bertcore train --corpus FILE`` picks for the same file. The full-size run (1.4 MB
of Tang poems, 600 steps) is ``python -m bench.experiments.zh_upload`` (docs/BENCH.md)."""
from __future__ import annotations

from browser_marks import BROWSER
from playwright.sync_api import Page

from bench.experiments.zh_upload import cli_config, upload_train_predict
from bertcore.data.corpora import get_corpus
from bertcore.data.corpus import load_corpus_file

pytestmark = BROWSER


def _chinese_prose(path):
    """Paragraphs of six sentences of the built-in Chinese grammar, one topic each (blank-line separated)."""
    corpus = get_corpus("builtin-zh")
    by_topic: dict[int, list[str]] = {}
    for (a, b), topic in zip(corpus.pairs[:3000], corpus.documents):
        by_topic.setdefault(topic, []).extend([a, b])
    paras = [s[i:i + 6] for s in by_topic.values() for i in range(0, len(s) - 5, 6)]
    path.write_text("\n\n".join("".join(p) for p in paras) + "\n", encoding="utf-8")
    return path


def test_chinese_prose_upload_trains_and_fills_the_mask(page: Page, app_server, tmp_path):
    page.set_viewport_size({"width": 1400, "height": 900})
    path = _chinese_prose(tmp_path / "故事.txt")
    pairs = len(load_corpus_file(path.read_bytes(), path.name))
    chars = set(path.read_text(encoding="utf-8")) - {"\n"}
    r = upload_train_predict(app_server.url, page, path, "一只兔子吃胡萝[MASK]。", app_server.runs_dir,
                             shots=tmp_path, steps_key="Home")
    assert r["pairs"] == pairs > 1000 and not r["data_tokens_errors"], r
    assert r["exceptions"] == 0
    first = next(iter(r["candidates"].values()))
    assert len(first) == 5 and all(c in chars for c in first), r["candidates"]
    assert r["app_config"] is not None and r["app_config"] == cli_config(path, r["app_steps"])
