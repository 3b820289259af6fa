"""The app in English and 简体中文 (explorer.i18n): every message the code marks has a Chinese translation with the
same {fields}, the catalogue is up to date with the code, and ?lang=zh reaches every page and survives a page switch.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from babel.messages.extract import extract_from_dir
from babel.messages.pofile import read_po
from streamlit.testing.v1 import AppTest

from explorer import i18n

ROOT = Path(__file__).resolve().parents[1]
KEYWORDS = {"tr": None, "ntr": (1, 2), "mark": None, "Message": None}  # Message: texts bertcore writes
FIELDS = re.compile(r"\{(\w*)[^{}]*\}")


def code_messages() -> dict[str, set[str]]:
    """msgid (or (singular, plural)) -> files that use it, as Babel extracts them with babel.cfg's method map."""
    out: dict = {}
    for sub in ("app.py", "app_pages", "explorer", "bertcore"):
        path = ROOT / sub
        items = extract_from_dir(str(path), method_map=[("**.py", "python")], keywords=KEYWORDS) if path.is_dir() \
            else [(path.name, ln, msg, c, ctx) for ln, msg, c, ctx in
                  __import__("babel.messages.extract", fromlist=["extract"]).extract(
                      "python", path.open("rb"), keywords=KEYWORDS)]
        for fname, _, msg, _, _ in items:
            out.setdefault(msg, set()).add(f"{sub}/{fname}" if path.is_dir() else sub)
    return out


def catalogue():
    with i18n.catalogue_path("zh").open("rb") as f:
        return read_po(f, locale="zh_Hans")


def test_every_marked_message_has_a_chinese_translation_with_the_same_fields():
    cat = catalogue()
    missing, fuzzy, fields = [], [], []
    for msg, where in sorted(code_messages().items(), key=lambda kv: str(kv[0])):
        key = msg[0] if isinstance(msg, tuple) else msg
        entry = cat.get(key)
        if entry is None or not entry.string or (isinstance(entry.string, tuple) and not all(entry.string)):
            missing.append(f"{key!r} ({', '.join(sorted(where))})")
            continue
        if entry.fuzzy:
            fuzzy.append(key)
        translated = entry.string if isinstance(entry.string, str) else entry.string[0]
        if sorted(FIELDS.findall(key)) != sorted(FIELDS.findall(translated)):
            fields.append(f"{key!r} -> {translated!r}")
    assert not missing, f"{len(missing)} messages without a Chinese entry (run scripts/i18n.sh, then translate):\n" + \
        "\n".join(missing[:40])
    assert not fuzzy, fuzzy
    assert not fields, "translations must keep the message's {fields}:\n" + "\n".join(fields)


def test_the_catalogue_holds_no_message_the_code_no_longer_uses():
    used = {m[0] if isinstance(m, tuple) else m for m in code_messages()}
    stale = [m.id for m in catalogue() if m.id and (m.id[0] if isinstance(m.id, tuple) else m.id) not in used]
    assert not stale, f"run scripts/i18n.sh to drop {len(stale)} unused entries, e.g. {stale[:5]}"


def test_tr_follows_the_language_and_fills_fields():
    with i18n.using("zh"):
        assert i18n.tr("Attention") == "注意力" and i18n.language() == "zh"
    with i18n.using("en"):
        assert i18n.tr("Attention") == "Attention"
    assert i18n.language() == "en"  # no session, no override: English
    with i18n.using("fr"):  # an unknown language falls back to English
        assert i18n.tr("Predict") == "Predict"


def test_pybabel_with_babel_cfg_extracts_what_this_test_checks(tmp_path):
    """scripts/i18n.sh's extraction (babel.cfg, the same keywords) finds exactly the messages checked above."""
    if subprocess.run(["pybabel", "--version"], capture_output=True).returncode != 0:
        pytest.skip("pybabel is not on PATH")
    script = (ROOT / "scripts" / "i18n.sh").read_text()
    extract = next(ln for ln in script.splitlines() if ln.startswith("pybabel extract"))
    pot = tmp_path / "messages.pot"
    cmd = extract.replace("-o locale/messages.pot", f"-o {pot}").replace(" 2>/dev/null", "")
    r = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    with pot.open("rb") as f:
        ids = {m.id[0] if isinstance(m.id, tuple) else m.id for m in read_po(f) if m.id}
    assert ids == {m[0] if isinstance(m, tuple) else m for m in code_messages()}


def test_lang_in_the_url_reaches_the_pages_and_survives_a_page_switch():
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.query_params["lang"] = "zh"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.session_state[i18n.LANG_KEY] == "zh" and at.query_params["lang"] == ["zh"] or \
        at.query_params["lang"] == "zh"
    assert at.sidebar.selectbox(key=i18n.LANG_KEY).value == "zh"
    at.switch_page("app_pages/attention.py").run()
    assert not at.exception and at.session_state[i18n.LANG_KEY] == "zh"
    at.sidebar.selectbox(key=i18n.LANG_KEY).set_value("en").run()
    assert "lang" not in at.query_params


def test_translated_option_labels_survive_a_widget_change_in_chinese():
    """format_func labels are fixed when drawn (i18n.frozen): changing a widget in 简体中文 keeps them matching."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.query_params["lang"] = "zh"
    at.run()
    at.switch_page("app_pages/attention.py").run()
    assert not at.exception, [e.value for e in at.exception]
    layer = at.selectbox(key="attn_layer")
    assert layer.options[:2] == ["第 1 层", "第 2 层"]
    layer.set_value(1).run()
    assert not at.exception and at.selectbox(key="attn_layer").value == 1
    at.switch_page("app_pages/data_tokens.py").run()
    at.radio(key="dt_source").set_value("tutorial two-liner").run()
    assert not at.exception, [e.value for e in at.exception]


def test_a_text_bertcore_writes_is_english_there_and_translated_on_the_page():
    """bertcore.message.Message: the str is the English (CLI, run.json, logs); tr() translates its template and
    fills the same values, also after a copy; a bertcore error raised with one is shown translated."""
    import copy
    import json

    from bertcore.data.corpus import builtin_corpus, load_corpus_file
    from bertcore.errors import CorpusError
    from bertcore.message import Message
    from explorer.page_errors import error_text

    desc = builtin_corpus().description
    assert isinstance(desc, Message) and desc.startswith("generated English: 10 topics") and "24000" in desc
    assert json.loads(json.dumps({"d": desc}))["d"] == str(desc)  # written to disk as the plain English text
    with i18n.using("zh"):
        zh = i18n.tr(copy.deepcopy(desc))
        assert zh.startswith("生成的英文：10 个话题") and "24000" in zh and "（随机种子 0）" in zh
        nested = Message("softmax of the model's own MLM head cls.predictions: {kind}",
                         kind=Message("W h + b (one untied linear decoder)"))
        assert i18n.tr(nested).endswith("一个不共享权重的线性解码器）")
        with pytest.raises(CorpusError) as err:
            load_corpus_file(b"only one sentence. and two.", "x.txt")
        assert str(err.value).startswith("x.txt gives 1 sentence pair(s); at least 2")
        assert error_text(err.value).startswith("x.txt 只得到 1 个句子对")
        assert error_text(ValueError("plain")) == "plain"  # not a Message: shown as written
    with i18n.using("en"):
        assert i18n.tr(desc) == str(desc)


def test_a_bad_upload_is_explained_in_the_page_language():
    """A bertcore error reaches the page as a Message: in 简体中文 the reason is Chinese, with the file's name and
    count filled in; switching to English shows the same reason in English."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.query_params["lang"] = "zh"
    at.switch_page("app_pages/data_tokens.py").run()
    at.radio(key="dt_source").set_value("upload a .txt file").run()
    at.file_uploader(key="dt_upload").set_value(("一句.txt", "只有一句话。".encode(), "text/plain")).run()
    assert not at.exception, [e.value for e in at.exception]
    shown = " ".join(e.value for e in at.error)
    assert "一句.txt 只得到 0 个句子对；至少需要 2 个" in shown and "sentence pair" not in shown, shown
    at.sidebar.selectbox(key=i18n.LANG_KEY).set_value("en").run()
    shown = " ".join(e.value for e in at.error)
    assert "一句.txt gives 0 sentence pair(s); at least 2 are needed" in shown, shown


def test_the_attention_tab_of_a_link_stays_open_in_the_other_language():
    """The open tab is kept by its label (?attn_tab=): an English link opened in 简体中文 opens the same tab, and
    switching the language on the page keeps it."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.query_params["lang"] = "zh"
    at.query_params["attn_tab"] = "Per-head statistics"
    at.switch_page("app_pages/attention.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.session_state["attn_tab"] == "每个头的统计"
    assert [t.label for t in at.tabs][:2] == ["所有头", "单个头"]
    at.sidebar.selectbox(key=i18n.LANG_KEY).set_value("en").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.session_state["attn_tab"] == "Per-head statistics"


if __name__ == "__main__":  # a quick listing of what is still untranslated
    cat = catalogue()
    for m in sorted(code_messages(), key=str):
        k = m[0] if isinstance(m, tuple) else m
        if not (cat.get(k) and cat.get(k).string):
            print(k, file=sys.stdout)
