"""Hostile uploads in a real browser: the app refuses each with a message naming the field and stays up.

Each upload once hung the server or grew it by gigabytes (issue 13): a YAML alias bomb, a node `count` of 10^8, a
GPU type with NaN memory, a config.json nested 100,000 levels deep, a trace with a 200,000-character field. After
each one the page must show a clear error (not an exception, not the router's crash alert), keep the last good
cluster or model, and the server must still answer its health check and serve the next page.
"""

from __future__ import annotations

import time
import urllib.request

import pytest
from browser_support import CHROMIUM

pytestmark = [pytest.mark.browser]
if not CHROMIUM.exists():
    pytest.skip(f"real-browser tests need Debian's Chromium at {CHROMIUM} (apt-get install chromium)",
                allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="real-browser tests need the playwright package")

from test_browser import browser_page as browser_page  # noqa: E402, F401 - the shared module-scoped server fixture
from test_browser import no_exception, open_page, rerun, wait_drawn  # noqa: E402

ALIAS_BOMB = ("a: &a [x,x,x,x,x,x,x,x,x]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\nc: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
              "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\ne: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]\n"
              "nodes:\n  - {name: n, gpu_type: T4, num_gpus: *e}\n")
HOSTILE_CLUSTERS = {
    "bomb.yaml": (ALIAS_BOMB, "aliases"),
    "count.yaml": ("nodes:\n  - {gpu_type: T4, num_gpus: 4, count: 100000000}\n", "100,000"),
    "nan.yaml": ("gpu_types:\n  - {name: X, memory_gib: .nan, bf16_tflops: 10, fp32_tflops: 1, "
                 "memory_bandwidth_gbyte_s: 100}\nnodes:\n  - {gpu_type: X, num_gpus: 1}\n", "memory_gib"),
    "huge.yaml": ("nodes:\n  - {gpu_type: T4, num_gpus: 1000000000000}\n", "num_gpus"),
}


def healthy(url: str) -> bool:
    with urllib.request.urlopen(f"{url}/_stcore/health", timeout=10) as r:
        return r.status == 200


def upload(page, key: str, name: str, text: str) -> None:
    with rerun(page):
        page.locator(f".st-key-{key} input[type=file]").set_input_files(
            files=[{"name": name, "mimeType": "text/plain", "buffer": text.encode()}])


def wait_alert(page, expected: str, timeout_s: float = 30.0) -> list[str]:
    """The page's alerts once one names `expected` (the upload's rerun may start a moment after the file lands)."""
    deadline = time.monotonic() + timeout_s
    while True:
        alerts = page.locator('[data-testid="stAlert"]').all_inner_texts()
        if any(expected in a for a in alerts) or time.monotonic() > deadline:
            return alerts
        page.wait_for_timeout(200)


@pytest.mark.parametrize("name", sorted(HOSTILE_CLUSTERS))
def test_a_hostile_cluster_upload_is_refused_and_the_server_stays_up(browser_page, name):
    page, url = browser_page
    text, expected = HOSTILE_CLUSTERS[name]
    open_page(page, f"{url}/cluster_packing", "Cluster & packing")
    upload(page, "cl_upload", name, text)
    alerts = wait_alert(page, expected)
    assert any(expected in a for a in alerts), f"{name}: no error naming {expected!r} in {alerts}"
    no_exception(page, f"cluster upload {name}")
    assert healthy(url)
    open_page(page, f"{url}/plans", "Plans")  # the last good cluster is still there to plan on


def test_a_deeply_nested_config_json_is_refused(browser_page):
    page, url = browser_page
    open_page(page, f"{url}/model_memory", "Model & memory")
    tab = page.locator('button[role="tab"]:has-text("config.json")')
    if tab.count():
        tab.first.click()  # st.tabs switch in the browser: no rerun to wait for
    upload(page, "hf_upload", "deep.json", "[" * 100_000 + "]" * 100_000)
    alerts = wait_alert(page, "nested")
    assert any("nested" in a for a in alerts), alerts
    no_exception(page, "deep config.json")
    assert healthy(url)


DEEP_SCENARIO = "cluster: " + "[" * 12_000 + "]" * 12_000  # 24 KB: the old loader took minutes of one core
SESSIONS = 12


def open_together(pages, url: str, title: str) -> None:
    """Load one page in every session at once (all requests sent before any answer is awaited), then wait for
    each to draw its title and settle: the sessions are served concurrently, not one after another."""
    for p in pages:
        p.goto(url, wait_until="commit")
    for p in pages:
        wait_drawn(p, title, 60_000)
        no_exception(p, title)


HOSTILE_SCENARIOS = {"deep.yaml": (DEEP_SCENARIO, "nested"), "bomb.yaml": (ALIAS_BOMB, "aliases")}


def open_scenario_upload(page, url: str) -> None:
    open_page(page, f"{url}/", "Frenzy Planner")
    tab = page.locator('button[role="tab"]:has-text("Upload")')
    if tab.count():
        tab.first.click()  # st.tabs switch in the browser: no rerun to wait for


@pytest.mark.parametrize("name", sorted(HOSTILE_SCENARIOS))
def test_a_hostile_scenario_upload_is_refused_with_a_message_naming_the_problem(browser_page, name):
    page, url = browser_page
    text, expected = HOSTILE_SCENARIOS[name]
    open_scenario_upload(page, url)
    upload(page, "scn_upload", name, text)
    alerts = wait_alert(page, expected)
    assert any(expected in a for a in alerts), f"{name}: no error naming {expected!r} in {alerts}"
    no_exception(page, f"scenario upload {name}")
    assert healthy(url)


def test_twelve_sessions_keep_answering_while_one_uploads_a_hostile_scenario(browser_page):
    """12 browser sessions on one server (the fixture's page, and 11 tabs of a second browser context: each tab
    holds its own websocket, so its own Streamlit session and session state); one uploads the alias bomb that once
    hung every session (the deep YAML's refusal is checked in one session above). Each other session must still
    rerun and draw its page while the upload is handled, and the uploader must get a message naming the problem.
    The tabs share one HTTP cache, warmed by one tab first, so the test measures the server serving sessions,
    not Chromium fetching and compiling the same 10 MB of JavaScript eleven times."""
    page, url = browser_page
    context = page.context.browser.new_context(viewport={"width": 1280, "height": 900})
    try:
        others = [context.new_page() for _ in range(SESSIONS - 1)]
        # one tab fills the shared cache; the eleven sessions are opened below, all at once, during the upload
        # (a page load is a new Streamlit session, so sessions opened earlier would be replaced there anyway)
        open_together(others[:1], f"{url}/", "Frenzy Planner")
        open_scenario_upload(page, url)
        text, expected = HOSTILE_SCENARIOS["bomb.yaml"]
        page.locator(".st-key-scn_upload input[type=file]").set_input_files(
            files=[{"name": "bomb.yaml", "mimeType": "text/plain", "buffer": text.encode()}])
        started = time.monotonic()
        open_together(others, f"{url}/", "Frenzy Planner")  # while the upload is handled, all others reload
        assert time.monotonic() - started < 120, "the other sessions stalled behind the hostile upload"
        alerts = wait_alert(page, expected)
        assert any(expected in a for a in alerts), f"bomb.yaml: no error naming {expected!r} in {alerts}"
        no_exception(page, "scenario upload bomb.yaml")
        assert healthy(url)
    finally:
        context.close()
