"""Frenzy Planner: the Streamlit entry point (router). Pages live in pages/ and only call frenzy_core.

Run with `streamlit run app.py` (or `make run`). The default cluster is $FRENZY_CLUSTER (a YAML path) when set,
else sample_clusters/modern-mixed.yaml.
"""

import streamlit as st

from pages import common

st.set_page_config(page_title="Frenzy Planner", page_icon=":material/memory:", layout="wide")
common.init_state()
common.load_share_link()  # a share link (?s=...) opened: its scenario becomes the state this very run

pages = [st.Page(path, title=title, icon=icon, default=(key == "overview"))
         for key, (path, title, icon) in common.PAGES.items()]
page = st.navigation(pages, position="sidebar")

sidebar = st.sidebar.container()
if st.session_state.get("cluster_warning"):
    st.warning(st.session_state.cluster_warning)
if st.session_state.get("share_link_error"):
    st.error(st.session_state.share_link_error, icon=":material/link_off:")

try:
    page.run()
except Exception as err:  # noqa: BLE001 - the last line of defence: no traceback ever reaches the user
    st.error(f"Something went wrong on this page: {type(err).__name__}: {err}. Your inputs are kept; "
             "change a value or reload the page.", icon=":material/error:")
common.fill_sidebar(sidebar)
common.sync_share_link()
