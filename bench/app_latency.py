"""App latency in a real browser: time to the first full render of each page, and the Model & memory page's update
after an edit. Targets: every page under 2 s, the memory update under 0.5 s.

Starts `streamlit run app.py` on a free port (own process group, stopped by its PID), drives Debian's Chromium with
Playwright. A page counts as rendered when its title is on screen and the app reports
`data-test-script-state="notRunning"`, no element placeholder (skeleton) is left, every chart and data frame has
drawn (its canvas or svg exists), and the browser's main thread has gone idle (requestIdleCallback). Per page:
- `render_s`: clicking its sidebar link to the page fully rendered, the page's first visit in a browser session
  (median over sessions; the target applies to this);
- `first_session_s`: the same in the very first session after the server started (Python imports, caches cold);
- `fresh_load_s`: opening the page's URL in a new browser session without cache, which adds the frontend's own
  JavaScript boot (about 1-2 s on a 2-core machine, the same for every page).

    .venv/bin/python bench/app_latency.py        # prints a table; the LAST LINE is a JSON object

Also `cluster_10000_nodes_s`: the Cluster & packing page rendered with a 10,000-node cluster (node groups).

Last line: {"max_page_s": ..., "memory_update_s": ..., "cluster_10000_nodes_s": ..., "pages": {...}, ...}.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO))
from browser_support import CHROMIUM, CHROMIUM_ARGS, streamlit_server  # noqa: E402  (shared with the browser test)

PAGES = {"overview": ("", "Frenzy Planner"), "model_memory": ("model_memory", "Model & memory"),
         "plans": ("plans", "Plans"), "cluster_packing": ("cluster_packing", "Cluster & packing"),
         "simulation": ("simulation", "Simulation"), "gpu_mix": ("gpu_mix", "GPU mix what-if")}
PAGE_TARGET_S = 2.0
MEMORY_TARGET_S = 0.5
WARM_VISITS = 3
EDITS = 6
IDLE = '[data-testid="stApp"][data-test-script-state="notRunning"]'
METRIC_LABEL = "Peak per GPU"
METRIC = '[data-testid="stMetric"]:has-text("Peak per GPU") [data-testid="stMetricValue"]'


SETTLED_JS = "() => new Promise(r => requestAnimationFrame(() => requestIdleCallback(() => r(true), {timeout: 10000})))"


# every element placeholder gone and every visible chart and table drawn (a collapsed expander draws nothing): a
# Plotly chart has its svg (class "main-svg"), a data frame its canvas
DRAWN_JS = """() => {
    const shown = sel => [...document.querySelectorAll(sel)].filter(
        e => e.offsetParent !== null && !e.closest('details:not([open])'));
    return !document.querySelector('[data-testid="stSkeleton"]')
        && shown('[data-testid="stPlotlyChart"]').every(e => e.querySelector('.main-svg'))
        && shown('[data-testid="stDataFrame"]').every(e => e.querySelector('canvas'));
}"""


def settle(page) -> None:
    """Wait until the script is idle, every chart and table is drawn, and the browser's main thread has gone idle."""
    page.wait_for_selector(IDLE, timeout=60_000)
    page.wait_for_function(DRAWN_JS, timeout=60_000, polling="raf")
    page.evaluate(SETTLED_JS)


def fresh_load_s(browser, url: str, title: str) -> float:
    """Seconds from opening the URL in a new browser session (no cache) to the title shown and the script idle.
    Includes the frontend's own boot (its JavaScript bundle), the same for every page."""
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    page = ctx.new_page()
    try:
        t0 = time.perf_counter()
        page.goto(url)
        page.wait_for_selector(f'h1:has-text("{title}")', timeout=60_000)
        settle(page)
        elapsed = time.perf_counter() - t0
        if page.locator('[data-testid="stException"]').count():
            raise RuntimeError(f"{url}: the page shows an exception")
        return elapsed
    finally:
        ctx.close()


def navigation_s(browser, url: str) -> dict[str, float]:
    """Seconds from clicking each page's sidebar link to its title shown and the script idle, in one session, each
    page visited for the first time (its first full render: widgets, core calls, charts)."""
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    page = ctx.new_page()
    out = {}
    try:
        page.goto(f"{url}/gpu_mix")  # start elsewhere so that the overview is a real navigation too
        settle(page)
        for name, (_, title) in PAGES.items():
            link_text = "Overview" if name == "overview" else title
            link = page.locator(f'[data-testid="stSidebarNav"] a:has-text("{link_text}")').first
            t0 = time.perf_counter()
            link.click()
            page.wait_for_selector(f'h1:has-text("{title}")', timeout=60_000)
            settle(page)
            out[name] = time.perf_counter() - t0
            if page.locator('[data-testid="stException"]').count():
                raise RuntimeError(f"{name}: the page shows an exception")
        return out
    finally:
        ctx.close()


def memory_update_s(browser, url: str) -> list[float]:
    """Seconds from committing a new layer count to the new memory figure shown and the script idle."""
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    page = ctx.new_page()
    try:
        page.goto(f"{url}/model_memory")
        page.wait_for_selector(METRIC, timeout=60_000)
        settle(page)
        box = page.locator(".st-key-hp_num_layers input")
        times = []
        for i in range(EDITS):
            before = page.locator(METRIC).inner_text()
            box.fill(str(16 if i % 2 == 0 else 24))
            t0 = time.perf_counter()
            box.press("Enter")
            page.wait_for_function(
                """([label, old]) => {
                    const box = [...document.querySelectorAll('[data-testid="stMetric"]')]
                        .find(e => e.innerText.includes(label));
                    const v = box && box.querySelector('[data-testid="stMetricValue"]');
                    const app = document.querySelector('[data-testid="stApp"]');
                    return v && v.innerText !== old && app.getAttribute('data-test-script-state') === 'notRunning';
                }""", arg=[METRIC_LABEL, before], timeout=30_000, polling="raf")
            page.evaluate(SETTLED_JS)
            times.append(time.perf_counter() - t0)
        return times
    finally:
        ctx.close()


def big_cluster_s(browser, url: str, nodes: int = 10_000) -> float:
    """Seconds from clicking the Cluster & packing link to the page rendered, with a `nodes`-node cluster loaded
    through a share link (the page shows node groups above 64 nodes)."""
    from frenzy_core.cluster import parse_cluster_yaml
    from frenzy_core.scenario import Scenario, encode_share

    cluster = parse_cluster_yaml(f"name: huge\nnodes: [{{name: h, gpu_type: H100-80GB, num_gpus: 8, count: {nodes}}}]")
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    page = ctx.new_page()
    try:
        page.goto(f"{url}/?s={encode_share(Scenario(cluster=cluster))}")
        page.wait_for_selector('h1:has-text("Frenzy Planner")', timeout=60_000)
        settle(page)
        link = page.locator('[data-testid="stSidebarNav"] a:has-text("Cluster & packing")').first
        t0 = time.perf_counter()
        link.click()
        page.wait_for_selector('h1:has-text("Cluster & packing")', timeout=60_000)
        settle(page)
        elapsed = time.perf_counter() - t0
        if page.locator('[data-testid="stException"]').count():
            raise RuntimeError("cluster page with a huge cluster shows an exception")
        return elapsed
    finally:
        ctx.close()


def main() -> int:
    if not Path(CHROMIUM).exists():
        print(json.dumps({"skipped": f"{CHROMIUM} not found"}))
        return 0
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print(json.dumps({"skipped": "playwright is not installed"}))
        return 0
    pages: dict[str, dict[str, float]] = {}
    with streamlit_server() as url, sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            first = navigation_s(browser, url)  # the first session after the server started: imports included
            navs = [navigation_s(browser, url) for _ in range(WARM_VISITS)]
            for name, (path, title) in PAGES.items():
                fresh = statistics.median(fresh_load_s(browser, f"{url}/{path}", title) for _ in range(2))
                nav = statistics.median(n[name] for n in navs)
                pages[name] = {"render_s": round(nav, 3), "first_session_s": round(first[name], 3),
                               "fresh_load_s": round(fresh, 3)}
                print(f"{name:16} render {nav:6.3f} s   first session {first[name]:6.3f} s   "
                      f"fresh browser load {fresh:6.3f} s")
            edits = memory_update_s(browser, url)
            huge = statistics.median(big_cluster_s(browser, url) for _ in range(2))
        finally:
            browser.close()
    memory = statistics.median(edits)
    print(f"{'memory update':16} median {memory:6.3f} s over {len(edits)} edits (max {max(edits):.3f} s)")
    print(f"{'10,000 nodes':16} cluster page {huge:6.3f} s (node groups)")
    max_page = max(p["render_s"] for p in pages.values())
    ok = max_page < PAGE_TARGET_S and memory < MEMORY_TARGET_S
    print(f"targets: pages < {PAGE_TARGET_S} s, memory update < {MEMORY_TARGET_S} s -> {'met' if ok else 'MISSED'}")
    print(json.dumps({"max_page_s": round(max_page, 3), "memory_update_s": round(memory, 3),
                      "max_first_session_s": max(p["first_session_s"] for p in pages.values()),
                      "max_fresh_load_s": max(p["fresh_load_s"] for p in pages.values()),
                      "memory_update_max_s": round(max(edits), 3), "cluster_10000_nodes_s": round(huge, 3),
                      "pages": pages,
                      "targets": {"page_s": PAGE_TARGET_S, "memory_update_s": MEMORY_TARGET_S}, "met": ok}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
