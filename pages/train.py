import streamlit as st


def render():
    from explorer import state
    state.ensure_app_frame()
    st.title("Train")
    st.write("TRAIN-PAGE-CONTENT")


if __name__ == "__main__":
    render()
