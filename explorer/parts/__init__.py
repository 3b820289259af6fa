"""Page parts: the pieces of pages that draw Streamlit widgets (forms, views, the sidebar, the tour).

The pure figure builders (no ``st.*``) are ``explorer.figures``; a part draws what they build."""
