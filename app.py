"""Frenzy Planner: the Streamlit entry point (router). Pages live in pages/ and only call frenzy_core."""

import streamlit as st

st.set_page_config(page_title="Frenzy Planner", layout="wide")
st.title("Frenzy Planner")
st.write("Memory-aware capacity planning for LLM training on heterogeneous GPU clusters. The pages are coming.")
