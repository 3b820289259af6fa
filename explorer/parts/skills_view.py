"""The Train page's skills: the names on screen, the upload of a user's own items, and the sentences that say when
each skill first passed a level (bertcore.analysis.skills; the items: bertcore.data.skill_items). The numbers are
the run's skills.csv: ``python -m bertcore skills RUN --all-steps --json`` prints the same."""
from __future__ import annotations

from pathlib import Path

import streamlit as st

from bertcore.analysis.skills import LEVELS, first_passes, skill_label
from bertcore.data.skill_items import MAX_USER_BYTES, NSP_SKILLS, USER_PREFIX, parse_skill_csv
from bertcore.training.history import History
from bertcore.launch.service import read_skills_csv
from explorer.i18n import mark, tr
from explorer.page_errors import user_action

SKILL_LABELS = {
    "verb_agreement": mark("verb agreement"),
    "article_a_an": mark("a / an"),
    "det_number": mark("this / these"),
    "pronoun_gender": mark("pronoun gender across [SEP]"),
    "selection": mark("what a verb takes"),
    "topic_place": mark("topic place"),
    "nsp_other_topic": mark("NSP: other topic"),
    "nsp_same_topic": mark("NSP: same topic"),
}
UPLOAD_KEY = "train_skills_csv"


def skill_name(name: str) -> str:
    """A skill's name on screen: the translated label of a built-in skill, "own: FILE" for a user's."""
    if name.startswith(USER_PREFIX):
        return tr("own: {name}", name=name[len(USER_PREFIX):])
    return tr(SKILL_LABELS[name]) if name in SKILL_LABELS else skill_label(name)


def skill_upload(tokenizer, disabled: bool) -> tuple[str, bytes] | None:
    """The uploader of a user's own skill items; checked against the vocabulary the run will use, so a bad file
    gets its message now (and is not used), never a failed run. Returns (name, bytes) of a good file."""
    up = st.file_uploader(tr("Your own skills (CSV: text,right,wrong; one [MASK] per text)"), type=["csv"],
                          key=UPLOAD_KEY, disabled=disabled,
                          help=tr("Scored at every evaluation next to the built-in skills: an item passes when the "
                                  "model gives P(right) > P(wrong) at its [MASK]. Each word must be one token of "
                                  "the vocabulary. At most {mb} MB.", mb=MAX_USER_BYTES // 2**20))
    if up is None:
        return None
    data = up.getvalue()
    with user_action(tr("Read your skill file"), tr("Skill file not used: ")) as act:
        items = parse_skill_csv(data, up.name, tokenizer)
    if act.failed:
        return None
    st.caption(tr("{n} items of your own will be scored as “{name}”.", n=len(items),
                  name=skill_name(items[0].skill)))
    return up.name, data


def first_pass_lines(skills: History | None, names: list[str]) -> list[str]:
    """"verb agreement passed 0.9 at step 300 (N s of training)" per skill and level reached, in order."""
    if skills is None or not len(skills):
        return []
    rows = skills.frame().to_dict("records")
    seconds = {int(r["step"]): r["seconds"] for r in rows}
    out = []
    for fp in first_passes(rows, names, LEVELS, seconds):
        if fp["step"] == 0:
            out.append(tr("{skill} was already at {level} before training (step 0)", skill=skill_name(fp["skill"]),
                          level=f"{fp['level']:g}"))
        else:
            out.append(tr("{skill} passed {level} at step {step} ({secs:.0f} s of training)",
                          skill=skill_name(fp["skill"]), level=f"{fp['level']:g}", step=fp["step"],
                          secs=float(fp["seconds"] or 0.0)))
    return out


def show_first_passes(skills: History | None, names: list[str]) -> None:
    lines = first_pass_lines(skills, names)
    if lines:
        st.caption(" · ".join(lines))
    elif names:
        st.caption(tr("No skill has passed {level} yet (chance is 0.5).", level=f"{LEVELS[0]:g}"))


def saved_skills(run_dir) -> History | None:
    """A finished run's skills.csv (None for a run without skills)."""
    return read_skills_csv(Path(run_dir)) if run_dir else None


def skill_names(skills: History | None, sentence_head: bool = True) -> list[str]:
    """The skills of a skills History, in its column order; without ``sentence_head`` (a sentence_task=none run,
    whose NSP skills are NaN: nothing to draw) the NSP skills are left out."""
    names = [c for c in skills.columns if c not in ("step", "seconds")] if skills is not None else []
    return names if sentence_head else [n for n in names if n not in NSP_SKILLS]


def final_levels(skills: History | None, names: list[str], level: float = LEVELS[-1]) -> list[dict]:
    """A finished run's skills against ``level`` (0.9): per skill {"skill", "final" (the last score, None when never
    scored: an NSP skill of a run without a sentence head is NaN), "step" (where it first reached ``level``, None:
    never)}, in ``names`` order. From the run's skills.csv (``first_passes``, the same rule as the sentences above)."""
    if skills is None or not len(skills):
        return []
    rows = skills.frame().to_dict("records")
    first = {fp["skill"]: fp["step"] for fp in first_passes(rows, names, (level,))}
    out = []
    for name in names:
        scored = [r[name] for r in rows if r.get(name) is not None and r[name] == r[name]]
        out.append({"skill": name, "final": float(scored[-1]) if scored else None, "step": first.get(name)})
    return out


def show_skills_passed(skills: History | None, names: list[str], level: float = LEVELS[-1]) -> None:
    """The result view's skills: which reached ``level`` (and at which step), which did not (their last score), and
    which were not scored (NaN: no sentence head, or items this vocabulary cannot score)."""
    rows = final_levels(skills, names, level)
    if not rows:
        return
    passed = [tr("{skill} (step {step})", skill=skill_name(r["skill"]), step=r["step"]) for r in rows
              if r["step"] is not None]
    short = [tr("{skill} ({score})", skill=skill_name(r["skill"]), score=f"{r['final']:.2f}") for r in rows
             if r["step"] is None and r["final"] is not None]
    unscored = [skill_name(r["skill"]) for r in rows if r["final"] is None]
    lv = f"{level:g}"
    st.markdown(tr("**Reached {level}:** {skills}", level=lv, skills=", ".join(passed)) if passed
                else tr("**No skill reached {level}.**", level=lv))
    if short:
        st.caption(tr("Not yet at {level} (last score): {skills}", level=lv, skills=", ".join(short)))
    if unscored:
        st.caption(tr("Not scored in this run: {skills} (a run without a sentence head has no NSP skills).",
                      skills=", ".join(unscored)))
