"""BERT explorer: `streamlit run app.py`. Routes the pages (st.navigation) and draws the shared sidebar."""

import streamlit as st

import bertcore  # noqa: F401 - first: sets OMP_WAIT_POLICY before anything imports torch
from bertcore.errors import BertcoreError
from bertcore.message import reason
from bertcore import settings
from explorer.session import client_limits, page_caches, page_slots, workspace
from explorer import i18n, server_process
from explorer.launch import launcher
from explorer.i18n import mark, tr
from explorer.parts.sidebar import render_sidebar
from explorer.page_errors import run_page

# (file in app_pages/, url_path, title, icon, section). The folder is deliberately not named `pages/`:
# Streamlit would treat that as a legacy multipage app on a fresh server (see docs/PAGES.md).
PAGES = [
    ("overview.py", "overview", mark("Overview"), ":material/account_tree:", mark("Learn")),
    ("data_tokens.py", "data_tokens", mark("Data & tokens"), ":material/text_fields:", mark("Learn")),
    ("masking_nsp.py", "masking_nsp", mark("Masking & NSP"), ":material/theater_comedy:", mark("Learn")),
    ("positional_encoding.py", "positional_encoding", mark("Positional encoding"), ":material/waves:", mark("Learn")),
    ("forward.py", "forward", mark("Inside the model"), ":material/route:", mark("Learn")),
    ("train.py", "train", mark("Train"), ":material/model_training:", mark("Train")),
    ("compare.py", "compare", mark("Compare designs"), ":material/compare:", mark("Train")),
    ("lab.py", "lab", mark("Lab"), ":material/science:", mark("Train")),
    ("finetune.py", "finetune", mark("Fine-tune"), ":material/tune:", mark("Train")),
    ("attention.py", "attention", mark("Attention"), ":material/grid_on:", mark("Inspect")),
    ("predict.py", "predict", mark("Predict"), ":material/psychology:", mark("Inspect")),
    ("embeddings.py", "embeddings", mark("Embeddings"), ":material/scatter_plot:", mark("Inspect")),
    ("probes.py", "probes", mark("Probes"), ":material/biotech:", mark("Inspect")),
    ("lens_patching.py", "lens_patching", mark("Logit lens & patching"), ":material/layers:", mark("Inspect")),
    ("features.py", "features", mark("Features"), ":material/category:", mark("Inspect")),
]



# The link's workspace goes into session state first, before any element: a rerun requested meanwhile (a click)
# stops this run at its first element, and a page switch's rerun carries no ?ws=. That is how the tabs of a
# server process that died reconnect to another process with their workspace (docs/REPLICAS.md).
workspace.workspace_id()
st.set_page_config(page_title="BERT explorer", page_icon=page_caches.page_icon(), layout="wide")


def build_navigation():
    """The pages by section, titled in the session's language. Made once per session and language: each st.Page
    resolves and checks its file on the disk, work worth saving on a loaded server (docs/BENCH-HISTORY.md, "One
    torch thread for the pages"). A session's runs never overlap, so its own Page objects
    are safe to reuse; other sessions' are not (st.navigation marks the page it returns)."""
    lang = i18n.language()
    made = st.session_state.get("bx_nav")
    if made is not None and made[0] == lang:
        return made[1]
    sections: dict[str, list] = {}
    for fname, url, title, icon, section in PAGES:
        sections.setdefault(tr(section), []).append(
            st.Page(f"app_pages/{fname}", title=tr(title), icon=icon, url_path=url, default=(url == "overview")))
    st.session_state["bx_nav"] = (lang, sections)
    return sections


i18n.sync_language_param()  # ?lang=zh: the language of every page (kept in the URL like ?ws=)
if not st.session_state.get("bx_settings_ok"):  # a bad BERTCORE_* value: one line each, never a traceback
    bad_settings = settings.check_all(settings.APP)
    for line in bad_settings:
        st.error(tr(line))
    if bad_settings:
        settings.report(bad_settings)  # the server's terminal too
        st.stop()
    st.session_state["bx_settings_ok"] = True
refused = client_limits.admit_run()  # one client address's sessions and page runs per minute (docs/LIMITS.md)
if refused:
    st.error(refused)
    st.stop()
try:
    page_slots.semaphore()  # a few page scripts at a time (explorer/session/page_slots.py)
except BertcoreError as e:  # BERTCORE_PAGE_SLOTS is not a whole number
    st.error(tr(reason(e)))
    st.stop()
with page_slots.page_slot():
    # expanded: every page in view, and no "View N more" button, which Streamlit writes in English only
    page = st.navigation(build_navigation(), position="sidebar", expanded=True)
    workspace.sync_workspace_param()  # ?ws=... back into the URL: st.navigation drops query params on a page switch
    workspace.sync_share_param()  # ?share=<id>: a read-only link to one run opens it (explorer.session.share_links)
    server_process.warmup_optimizer()
    if st.context.headers:  # a real server (AppTest has no request): its threads, switch interval and collector
        server_process.tune_server_process()
    launcher.adopt_finished_runs()  # a training that ended makes its model the active one, before anything shows it
    render_sidebar()
    workspace.remember_in_browser()  # for a tab that reconnects to another server process (docs/REPLICAS.md)
    run_page(page)  # whatever a page did not catch is shown as a message, never Streamlit's error screen
