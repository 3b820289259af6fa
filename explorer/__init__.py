"""Streamlit helpers of the BERT explorer: session state, the shared sidebar and pure figure builders."""
