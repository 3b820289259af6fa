"""BERT explorer: `streamlit run app.py`. Routes the pages (st.navigation) and draws the shared sidebar."""
import bertcore  # noqa: F401 - first: sets OMP_WAIT_POLICY before anything imports torch
import streamlit as st

from explorer import state
from explorer.page_errors import run_page
from explorer.sidebar import render_sidebar

# (file in app_pages/, url_path, title, icon, section). The folder is deliberately not named `pages/`:
# Streamlit would treat that as a legacy multipage app on a fresh server (see docs/PAGES.md).
PAGES = [
    ("overview.py", "overview", "Overview", ":material/account_tree:", "Learn"),
    ("data_tokens.py", "data_tokens", "Data & tokens", ":material/text_fields:", "Learn"),
    ("masking_nsp.py", "masking_nsp", "Masking & NSP", ":material/theater_comedy:", "Learn"),
    ("positional_encoding.py", "positional_encoding", "Positional encoding", ":material/waves:", "Learn"),
    ("train.py", "train", "Train", ":material/model_training:", "Train"),
    ("compare.py", "compare", "Compare designs", ":material/compare:", "Train"),
    ("finetune.py", "finetune", "Fine-tune", ":material/tune:", "Train"),
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
    from PIL import Image

    return Image.fromarray(img)


st.set_page_config(page_title="BERT explorer", page_icon=_icon(), layout="wide")


def build_navigation():
    sections: dict[str, list] = {}
    for fname, url, title, icon, section in PAGES:
        sections.setdefault(section, []).append(
            st.Page(f"app_pages/{fname}", title=title, icon=icon, url_path=url, default=(url == "overview")))
    return sections


page = st.navigation(build_navigation(), position="sidebar")
state.sync_workspace_param()  # ?ws=... back into the URL: st.navigation drops query params on a page switch
state.warmup_optimizer()
render_sidebar()
run_page(page)  # whatever a page did not catch is shown as a message, never Streamlit's error screen
