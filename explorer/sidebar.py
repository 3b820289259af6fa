"""The sidebar drawn by app.py on every page: active model, live training status, model switcher."""
from __future__ import annotations

import streamlit as st

from explorer import state

MINILM_LABEL = "all-MiniLM-L6-v2 (pretrained)"
_LOAD_MINILM = "all-MiniLM-L6-v2 (pretrained) · load"
_K_MSG = "sb_message"


@st.cache_resource(show_spinner="Importing all-MiniLM-L6-v2…")
def _shared_minilm():
    """all-MiniLM-L6-v2 imported once per server and shared read-only (bertcore.io.hf_interop.import_hf)."""
    from bertcore.io.hf_interop import import_hf, packaged_minilm_dir

    d = packaged_minilm_dir()
    if d is None:
        return None
    return import_hf(d, name="all-MiniLM-L6-v2")


def _minilm_available() -> bool:
    try:
        from bertcore.io.hf_interop import packaged_minilm_dir

        return packaged_minilm_dir() is not None
    except Exception:  # noqa: BLE001 - module missing or broken: just do not offer it
        return False


def param_count(model) -> int:
    try:
        from bertcore.model import count_parameters

        parts = count_parameters(model)
        return int(parts.get("total", sum(parts.values())))
    except Exception:  # noqa: BLE001
        return int(sum(p.numel() for p in model.parameters()))


def _runs():
    return [r for r in (state.get_run(), state.get_run("bx_compare_run")) if r is not None]


def _status_block() -> None:
    running = any(r.running for r in _runs())

    @st.fragment(run_every=1.0 if running else None)
    def _status():
        # Polling snapshot() is also the heartbeat that keeps the training thread alive.
        runs = _runs()
        live = [r for r in runs if r.running]
        for run in live:
            s = run.snapshot()
            label = " vs ".join(s.labels) if len(s.labels) > 1 else "training"
            st.progress(s.progress, text=f"{label}: step {s.total_done}/{s.total_steps}, "
                                         f"ETA {state.fmt_seconds(s.eta)}")
        main = state.get_run()
        if running and not live:  # a run ended since this fragment started ticking: rerun the app
            state.adopt_finished_runs()
            st.rerun()
        if not live:
            if main is not None and main.status in ("finished", "stopped", "abandoned", "error"):
                s = main.snapshot()
                if s.message:
                    st.caption(f"Last training: {s.message}")
                else:
                    st.caption(f"Last training: {s.status} after {s.total_done} steps.")
            else:
                st.caption("No training running.")

    _status()


def _switch(choice: str, active_label: str) -> None:
    if choice == active_label:
        return
    if choice == _LOAD_MINILM:
        try:
            bundle = _shared_minilm()
        except Exception as e:  # noqa: BLE001 - shown as a message, never a traceback
            st.session_state[_K_MSG] = ("error", f"Could not import all-MiniLM-L6-v2: {e}")
            return
        if bundle is None:
            st.session_state[_K_MSG] = ("error", "all-MiniLM-L6-v2 is not installed on this server.")
            return
        state.set_active("pretrained", bundle, MINILM_LABEL)
    else:
        state.select_active(choice)
    st.rerun()


def _load_local_dir(path: str) -> None:
    path = (path or "").strip()
    if not path:
        st.session_state[_K_MSG] = ("error", "Type the path of a local transformers BERT folder first.")
        return
    try:
        from bertcore.io.hf_interop import import_hf

        bundle = import_hf(path)
    except ValueError as e:  # BertcoreError and friends carry the fix in their message
        st.session_state[_K_MSG] = ("error", str(e))
        return
    except Exception as e:  # noqa: BLE001
        st.session_state[_K_MSG] = ("error", f"Could not import {path}: {type(e).__name__}: {e}")
        return
    name = getattr(bundle, "name", "") or path.rstrip("/").split("/")[-1]
    state.set_active("pretrained", bundle, f"pretrained: {name}")
    st.session_state[_K_MSG] = ("success", f"Imported {name}.")


def render_sidebar() -> None:
    with st.sidebar:
        try:
            active = state.get_active()
        except Exception as e:  # noqa: BLE001 - e.g. bertcore half-installed
            st.error(f"The model package is not available: {e}")
            return
        st.markdown(f"**Active model:** {active.label}")
        kind = {"untrained": "random weights", "trained": "trained here", "uploaded": "uploaded checkpoint",
                "pretrained": "imported pretrained"}.get(active.kind, active.kind)
        st.caption(f"{param_count(active.model):,} parameters · {kind}")
        if not getattr(active.model, "has_mlm_head", True) or not getattr(active.model, "has_nsp_head", True):
            st.caption("This model has no trained MLM/NSP head: fill-mask / NSP are not meaningful.")
        _status_block()

        labels = list(state.list_models())
        if MINILM_LABEL not in labels and _minilm_available():
            labels.append(_LOAD_MINILM)
        idx = labels.index(active.label) if active.label in labels else 0
        choice = st.selectbox("Switch model", labels, index=idx,
                              help="Fresh untrained (shared), trained in this session, uploaded on the Train "
                                   "page, or a pretrained BERT.")
        _switch(choice, active.label)

        with st.expander("Import a local BERT folder"):
            path = st.text_input("transformers BERT directory", key="sb_hf_path",
                                 placeholder="/path/to/bert (config.json + model.safetensors + vocab.txt)")
            if st.button("Import", key="sb_hf_import"):
                _load_local_dir(path)
                st.rerun()
        msg = st.session_state.pop(_K_MSG, None)
        if msg:
            (st.error if msg[0] == "error" else st.success)(msg[1])
        st.page_link("app_pages/train.py", label="Train a model", icon=":material/model_training:")
