"""Frenzy Planner: the Streamlit entry point (router). Pages live in pages/ and only call frenzy_core.

Run with `streamlit run app.py` (or `make run`). The default cluster is $FRENZY_CLUSTER (a YAML path) when set,
else sample_clusters/modern-mixed.yaml.
"""

import plotly.graph_objects as go
import streamlit as st

from pages import common

st.set_page_config(page_title="Frenzy Planner", page_icon=":material/memory:", layout="wide")
common.init_state()
common.load_share_link()  # a share link (?s=...) opened: its scenario becomes the state this very run (never raises)
# the address bar gets the link at the start of the run as well as at its end: Streamlit drops the query string on a
# page change, and a reload before the new page's run had ended used to open the defaults (tests/test_browser.py)
common.sync_share_link()

pages = [st.Page(path, title=title, icon=icon, default=(key == "overview"))
         for key, (path, title, icon) in common.PAGES.items()]
page = st.navigation(pages, position="sidebar")

sidebar = st.sidebar.container()
if st.session_state.get("cluster_warning"):
    st.warning(common.md_escape(st.session_state.cluster_warning))
if st.session_state.get("share_link_error"):
    st.error(st.session_state.share_link_error, icon=":material/link_off:")

try:
    page.run()
except common.PageEnded:
    pass  # the page ended early after showing its error; the sidebar and the link below still follow
except Exception as err:  # noqa: BLE001 - the last line of defence: no traceback ever reaches the user
    st.error(common.md_escape(f"Something went wrong on this page: {type(err).__name__}: {err}. Your inputs are "
                              "kept; change a value or reload the page."), icon=":material/error:")
common.fill_sidebar(sidebar)
# Plotly's JavaScript (~4.7 MB) loads with the first page of a session, in a hidden element, so that the first page
# with a chart does not wait for it (bench/app_latency.py: 3.2 s -> 0.87 s for the first chart page)
with st.sidebar.container(key="plotly_prefetch"):
    st.html("<style>.st-key-plotly_prefetch{display:none}</style>")
    st.plotly_chart(go.Figure(), key="plotly_prefetch_chart")
    # the run's number in this session, drawn last: a browser (or a test) knows this run has drawn everything once
    # it shows, where the `notRunning` state alone cannot say whether the rerun an input asked for has begun
    st.session_state.frenzy_runs = st.session_state.get("frenzy_runs", 0) + 1
    st.html(f'<span data-frenzy-run="{st.session_state.frenzy_runs}"></span>')
common.sync_share_link()
