"""BERT explorer: `streamlit run app.py`. Routes the pages (st.navigation) and draws the shared sidebar."""
import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch is imported anywhere

from pathlib import Path

import streamlit as st

from explorer import state

state.ensure_app_frame()  # a deep link on a fresh server may have started us in legacy mode

HERE = Path(__file__).parent

# (file in pages/, url_path, title, icon, section)
PAGES = [
    ("overview.py", "overview", "Overview", ":material/account_tree:", "Learn"),
    ("data_tokens.py", "data", "Data & tokens", ":material/text_fields:", "Learn"),
    ("masking_nsp.py", "masking", "Masking & NSP", ":material/theater_comedy:", "Learn"),
    ("positional_encoding.py", "positional", "Positional encoding", ":material/waves:", "Learn"),
    ("train.py", "train", "Train", ":material/model_training:", "Train"),
    ("compare.py", "compare", "Compare designs", ":material/compare:", "Train"),
    ("attention.py", "attention", "Attention", ":material/grid_on:", "Inspect"),
    ("predict.py", "predict", "Predict", ":material/psychology:", "Inspect"),
    ("embeddings.py", "embeddings", "Embeddings", ":material/scatter_plot:", "Inspect"),
]


def _icon():
    """A 32x32 favicon drawn in memory: served by this server, nothing fetched from the internet
    (a ":material/..." page_icon would make the browser fetch a Google font)."""
    import numpy as np

    img = np.zeros((32, 32, 3), dtype=np.uint8)
    img[:] = (255, 255, 255)
    colors = [(66, 133, 244), (219, 68, 55), (244, 180, 0), (15, 157, 88)]
    for i, c in enumerate(colors):  # four stacked "layers"
        img[3 + i * 7: 8 + i * 7, 4:28] = c
    return img


st.set_page_config(page_title="BERT explorer", page_icon=_icon(), layout="wide")


def build_navigation():
    sections: dict[str, list] = {}
    for fname, url, title, icon, section in PAGES:
        if not (HERE / "pages" / fname).exists():
            continue  # during development a page may not exist yet
        sections.setdefault(section, []).append(
            st.Page(f"pages/{fname}", title=title, icon=icon, url_path=url, default=(url == "overview")))
    return sections


page = st.navigation(build_navigation(), position="sidebar")
state.warmup_optimizer()
try:
    from explorer.sidebar import render_sidebar
except ImportError:  # sidebar not written yet
    render_sidebar = None
if render_sidebar is not None:
    render_sidebar()
page.run()
