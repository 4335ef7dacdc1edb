"""Screenshots of every page at 1,280 px wide (issue 23's closing note).

    .venv/bin/python artifacts/screens-2026-12-02/take_screens.py <repo root> <before|after>

Starts `streamlit run app.py` in <repo root> (tests/browser_support.py of that root), opens each page in Chromium at
a 1,280 x 2,000 viewport, runs a small simulation / what-if where the page needs one, and writes
<page>-<suffix>.png next to this file."""

import sys
from pathlib import Path

root, suffix = Path(sys.argv[1]).resolve(), sys.argv[2]
sys.path.insert(0, str(root / "tests"))
from browser_support import CHROMIUM, CHROMIUM_ARGS, streamlit_server  # noqa: E402
from playwright.sync_api import TimeoutError as PWTimeout  # noqa: E402
from playwright.sync_api import sync_playwright  # noqa: E402

OUT = Path(__file__).resolve().parent
IDLE = '[data-testid="stApp"][data-test-script-state="notRunning"]'
RUNNING = '[data-testid="stApp"][data-test-script-state="running"]'


def idle(page, timeout_ms=120_000):
    try:
        page.wait_for_selector(RUNNING, timeout=1_000)
    except PWTimeout:
        pass
    page.wait_for_selector(IDLE, timeout=timeout_ms)


def number(page, key, value):
    box = page.locator(f".st-key-{key} input")
    box.fill(str(value))
    box.press("Enter")
    idle(page)


def settle(page):
    page.wait_for_timeout(1500)  # Plotly draws after the script has stopped


def shot(page, name):
    page.evaluate("() => document.querySelectorAll('[data-testid=\"stMain\"], section.main').forEach(e => e.scrollTo(0, 0))")
    settle(page)
    page.screenshot(path=str(OUT / f"{name}-{suffix}.png"))


with streamlit_server() as url, sync_playwright() as pw:
    browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
    page = browser.new_page(viewport={"width": 1280, "height": 2000})
    for name, path, title in (("overview", "", "Frenzy Planner"), ("model_memory", "model_memory", "Model & memory"),
                              ("plans", "plans", "Plans"), ("cluster_packing", "cluster_packing", "Cluster & packing")):
        page.goto(f"{url}/{path}")
        page.wait_for_selector(f'h1:has-text("{title}")', timeout=60_000)
        idle(page)
        shot(page, name)
    # the Plans page with a 40 h deadline: L40S fits in memory but none of its plans is left
    page.goto(f"{url}/plans")
    page.wait_for_selector('h1:has-text("Plans")', timeout=60_000)
    idle(page)
    number(page, "plans_deadline_h", 40)
    shot(page, "plans_deadline40h")
    page.goto(f"{url}/simulation")
    page.wait_for_selector('h1:has-text("Simulation")', timeout=60_000)
    idle(page)
    number(page, "sim_limit", 60)
    number(page, "sim_seeds", 1)
    page.locator(".st-key-sim_run button").click()
    page.wait_for_selector('h3:has-text("Results")', timeout=180_000)
    idle(page, 180_000)
    page.locator('h3:has-text("Results")').first.scroll_into_view_if_needed()
    settle(page)
    page.screenshot(path=str(OUT / f"simulation-{suffix}.png"))
    page.goto(f"{url}/gpu_mix")
    page.wait_for_selector('h1:has-text("GPU mix what-if")', timeout=60_000)
    idle(page)
    number(page, "wi_limit", 60)
    number(page, "wi_seeds", 1)
    page.locator(".st-key-wi_run button").click()
    page.wait_for_selector('h3:has-text("Average JCT against cost")', timeout=180_000)
    idle(page, 180_000)
    page.locator('h3:has-text("Average JCT against cost")').first.scroll_into_view_if_needed()
    settle(page)
    page.screenshot(path=str(OUT / f"gpu_mix-{suffix}.png"))
    browser.close()
print("done", suffix)
