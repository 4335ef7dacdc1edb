"""Every page in a real browser: Debian's Chromium driven by Playwright against `streamlit run app.py`.

The server runs on a free port in its own process group and is stopped by killing that group by its PID. Each page is
opened, waited for until the app reports `data-test-script-state="notRunning"`, checked for any
`[data-testid="stException"]` and for app.py's last-resort alert (every page exception becomes an `st.error` saying
"Something went wrong", so a crash shows no stException), given one interaction, checked again, and screenshotted
to artifacts/screenshots/ (git-ignored). Skips with the reason when /usr/bin/chromium or the playwright package is missing.
"""

from __future__ import annotations

import contextlib
import time

import pytest
from browser_support import CHROMIUM, CHROMIUM_ARGS, REPO, streamlit_server

SHOTS = REPO / "artifacts" / "screenshots"
VIEWPORT = {"width": 1400, "height": 900}
IDLE = '[data-testid="stApp"][data-test-script-state="notRunning"]'
# app.py draws `<span data-frenzy-run="N">` last in the N-th run of a session
RUNS_JS = "() => Math.max(0, ...[...document.querySelectorAll('[data-frenzy-run]')].map(e => +e.dataset.frenzyRun))"
QUIET_MS = 150  # the DOM unchanged this long after a run has stopped: the browser has drawn it
EXCEPTION = '[data-testid="stException"]'
CRASH = "Something went wrong"  # app.py turns any page exception into an st.error starting with this
CRASH_ALERT = f'[data-testid="stAlert"]:has-text("{CRASH}")'
PLOTLY = '[data-testid="stPlotlyChart"]'
BAR = ".barlayer .point path"  # one bar of a Plotly bar trace
POINT = ".scatterlayer .points path"  # one marker of a Plotly scatter trace

pytestmark = [pytest.mark.browser]
if not CHROMIUM.exists():
    pytest.skip(f"real-browser tests need Debian's Chromium at {CHROMIUM} (apt-get install chromium)",
                allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="real-browser tests need the playwright package "
                                                            "(pip install playwright; no `playwright install` needed)")


def runs(page) -> int:
    """The number of the last run this page has drawn (app.py draws it last in every run; 0 before the first)."""
    return page.evaluate(RUNS_JS)


def settle(page, quiet_ms: int = QUIET_MS, limit_ms: int = 5_000) -> None:
    """Until the DOM has not changed for `quiet_ms` (at most `limit_ms`): the browser draws a run's last elements
    a moment after the server says it stopped (a number box shows 0, then its value)."""
    page.evaluate("""([quiet, limit]) => new Promise(done => {
        let timer;
        const observer = new MutationObserver(() => { clearTimeout(timer); timer = setTimeout(end, quiet); });
        const cap = setTimeout(end, limit);
        function end() { observer.disconnect(); clearTimeout(timer); clearTimeout(cap); done(); }
        observer.observe(document.body, {subtree: true, childList: true, attributes: true, characterData: true});
        timer = setTimeout(end, quiet);
    })""", [quiet_ms, limit_ms])


def wait_idle(page, after: int, timeout_ms: int = 30_000, title: str | None = None) -> None:
    """Until a run numbered above `after` has drawn everything (its number shows, the state is `notRunning`, the
    DOM has settled) and, if given, the page's title is `title`. Conditions only: no fixed wait."""
    page.wait_for_function("""([after, idle, title]) => (""" + RUNS_JS + """)() > after
        && document.querySelector(idle) !== null
        && (title === null || [...document.querySelectorAll('h1')].some(h => h.innerText.includes(title)))
    """, arg=[after, IDLE, title], timeout=timeout_ms)
    settle(page)


@contextlib.contextmanager
def rerun(page, timeout_ms: int = 30_000):
    """`with rerun(page): <an input>`: on leaving, the rerun that input asked for has drawn everything."""
    before = runs(page)
    yield
    wait_idle(page, before, timeout_ms)


def no_exception(page, where: str) -> None:
    """Neither a raw exception nor app.py's crash alert (the page raised and the router caught it)."""
    count = page.locator(EXCEPTION).count()
    assert count == 0, f"{where}: {count} exception(s) shown: {page.locator(EXCEPTION).first.inner_text()[:500]}"
    crashes = page.locator(CRASH_ALERT)
    count = crashes.count()
    assert count == 0, f"{where}: the page crashed ({count} alert(s)): {crashes.first.inner_text()[:500]}"


def wait_drawn(page, title: str, timeout_ms: int = 30_000) -> None:
    """After a page load or a reload (a new session: its runs count from 1), until a run has drawn the page titled
    `title` and everything else."""
    wait_idle(page, 0, timeout_ms, title=title)


def open_page(page, url: str, title: str) -> None:
    page.goto(url)
    wait_drawn(page, title)
    no_exception(page, title)


def set_number(page, key: str, value: float) -> None:
    box = page.locator(f".st-key-{key} input")
    box.fill(str(value))
    with rerun(page):
        box.press("Enter")


@pytest.fixture(scope="module")
def browser_page():
    with streamlit_server() as url, sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport=VIEWPORT)
            yield page, url
        finally:
            browser.close()


def charts_drawn(page, at_least: int, timeout_s: float = 20) -> None:
    """At least `at_least` Plotly charts on the page, and every one of them drawn: Plotly has put its svg (class
    "main-svg") inside (a figure Plotly cannot draw leaves the element empty or shows an error instead)."""
    charts = page.locator(PLOTLY)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:  # Plotly draws after the script has finished (its chunk loads lazily)
        n = charts.count()
        drawn = sum(charts.nth(i).locator(".main-svg").count() > 0 for i in range(n))
        if n >= at_least and drawn == n:
            return
        page.wait_for_timeout(200)
    raise AssertionError(f"{drawn} of {n} Plotly charts drawn, expected at least {at_least}")


def hover_text(page, key: str, mark: str = BAR, timeout_ms: int = 10_000) -> str:
    """Hover the first bar (or point) of the Plotly chart with widget key `key`; the text of Plotly's hover label
    (in its `.hoverlayer`). The mouse goes to the mark's centre (force: Plotly's drag layer lies on top of it and is
    what takes the hover)."""
    chart = page.locator(f".st-key-{key} {PLOTLY}")
    target = chart.locator(mark).first
    target.scroll_into_view_if_needed()
    box = target.bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    label = chart.locator(".hoverlayer .hovertext")
    label.first.wait_for(state="attached", timeout=timeout_ms)
    return label.first.text_content()


def scroll_to(page, selector: str) -> None:
    """Bring a section to the top of the view for the screenshot (the main area scrolls, not the document)."""
    scroll_top(page.locator(selector).first)


def scroll_top(locator) -> None:
    """Scroll a section to the top of the view and wait until it has stopped moving (a condition, not a fixed
    wait): the same top edge on two animation frames in a row."""
    locator.evaluate("e => { e.scrollIntoView({block: 'start'}); window.__frenzyTop = undefined; }")
    locator.page.wait_for_function(
        """e => { const top = e.getBoundingClientRect().top;
                  const still = window.__frenzyTop === top; window.__frenzyTop = top; return still; }""",
        arg=locator.element_handle(), polling="raf", timeout=10_000)


def shot(page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"))


def test_a_page_url_on_a_fresh_server_goes_through_the_router(browser_page):
    # Runs first, on a server no session has touched: Streamlit's old pages/ convention would run the page alone.
    page, url = browser_page
    open_page(page, f"{url}/plans", "Plans")
    nav = page.locator('[data-testid="stSidebarNav"]').inner_text()
    assert "Overview" in nav and "common" not in nav, nav


def test_overview_links_to_the_model_page(browser_page):
    page, url = browser_page
    open_page(page, url, "Frenzy Planner")
    assert page.locator('[data-testid="stSidebar"]').inner_text().count("modern-mixed") >= 1
    shot(page, "overview")
    before = runs(page)
    page.locator('[data-testid="stPageLink"] a:has-text("Model & memory")').first.click()
    wait_idle(page, before, title="Model & memory")
    no_exception(page, "overview -> model")


def test_model_page_updates_the_memory_figure(browser_page):
    page, url = browser_page
    open_page(page, f"{url}/model_memory", "Model & memory")
    metric = page.locator('[data-testid="stMetric"]:has-text("Peak per GPU") [data-testid="stMetricValue"]')
    before = metric.inner_text()
    set_number(page, "hp_num_layers", 16)
    deadline = time.monotonic() + 30  # set_number waited for its rerun; a metric may still be drawn a moment later
    while metric.inner_text() == before and time.monotonic() < deadline:
        page.wait_for_timeout(100)
    assert metric.inner_text() != before
    no_exception(page, "model page after edit")
    charts_drawn(page, 1)  # the memory breakdown
    assert "GiB" in hover_text(page, "memory_chart")
    shot(page, "model_memory")


def test_plans_page_switches_objective(browser_page):
    page, url = browser_page
    open_page(page, f"{url}/plans", "Plans")
    charts_drawn(page, 1)  # the headroom heatmaps
    alert = page.locator('[data-testid="stAlert"]').first
    before = alert.inner_text()
    with rerun(page):
        page.locator('.st-key-plans_objective button:has-text("cost")').click()
    deadline = time.monotonic() + 30
    while alert.inner_text() == before and time.monotonic() < deadline:  # the why-top sentence follows the objective
        page.wait_for_timeout(100)
    assert alert.inner_text() != before, "the top-plan sentence did not change with the objective"
    no_exception(page, "plans after objective change")
    shot(page, "plans")


def test_cluster_page_places_a_job(browser_page):
    page, url = browser_page
    open_page(page, f"{url}/cluster_packing", "Cluster & packing")
    for _ in range(3):
        with rerun(page):
            page.locator(".st-key-pack_submit button").click()
    page.wait_for_selector('[data-testid="stAlert"]:has-text("placed")', timeout=30_000)
    scroll_to(page, 'h3:has-text("Packing with HAS")')
    no_exception(page, "cluster page after submit")
    charts_drawn(page, 2)  # the node grid and GPUs per type
    assert "GPUs" in hover_text(page, "pack_capacity")
    scroll_to(page, 'h3:has-text("Packing with HAS")')
    shot(page, "cluster_packing")


def test_simulation_page_runs_a_small_simulation(browser_page):
    page, url = browser_page
    open_page(page, f"{url}/simulation", "Simulation")
    set_number(page, "sim_limit", 60)
    set_number(page, "sim_seeds", 2)
    with rerun(page, 60_000):
        page.locator(".st-key-sim_run button").click()
    page.wait_for_selector('h3:has-text("Results")', timeout=60_000)
    no_exception(page, "simulation after run")
    charts_drawn(page, 4)  # CDF, JCT bars, utilisation, GPU-hours (queue and OOM only when something waited/failed)
    assert " h" in hover_text(page, "sim_jct_bars")
    assert "GPU-hours" in hover_text(page, "sim_gpu_hours")
    scroll_to(page, 'h3:has-text("Results")')
    shot(page, "simulation")
    scroll_top(page.locator(".st-key-sim_gpu_hours"))
    shot(page, "simulation_gpu_hours")


def test_gpu_mix_page_plots_the_frontier(browser_page):
    page, url = browser_page
    open_page(page, f"{url}/gpu_mix", "GPU mix what-if")
    set_number(page, "wi_limit", 60)
    set_number(page, "wi_seeds", 1)
    with rerun(page, 60_000):
        page.locator(".st-key-wi_run button").click()
    page.wait_for_selector('h3:has-text("Average JCT against cost")', timeout=60_000)
    no_exception(page, "gpu mix after run")
    charts_drawn(page, 1)  # the frontier
    label = hover_text(page, "wi_frontier", POINT)
    assert "$" in label and " h" in label, label
    scroll_to(page, 'h3:has-text("Average JCT against cost")')
    shot(page, "gpu_mix")


# --- each user's path with a sample scenario (issue 11): settings survive page changes and a reload ------------------
def _code(name: str) -> str:
    from frenzy_core.scenario import encode_share, load_scenario

    return encode_share(load_scenario(REPO / "sample_scenarios" / f"{name}.yaml"))


def nav(page, title: str, link: str | None = None) -> None:
    """Click the page's sidebar link and wait until it has rendered."""
    before = runs(page)
    page.locator(f'[data-testid="stSidebarNav"] a:has-text("{link or title}")').first.click()
    wait_idle(page, before, title=title)
    no_exception(page, title)


def value_of(page, key: str) -> str:
    return page.locator(f".st-key-{key} input").first.input_value()


def value_is(page, key: str, want: float, timeout_s: float = 15) -> bool:
    """Whether the number box `key` shows `want`, waiting for it: Streamlit draws a new number box with 0 and puts
    its value in a moment later (76 ms on an idle machine, over 150 ms of quiet DOM on a loaded one)."""
    deadline = time.monotonic() + timeout_s
    while True:
        text = value_of(page, key)
        if text and float(text) == want:
            return True
        if time.monotonic() > deadline:
            print(f"{key} shows {text!r}, not {want}")
            return False
        page.wait_for_timeout(100)


def wait_text(page, selector: str, text: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(text in t for t in page.locator(selector).all_inner_texts()):
            return
        page.wait_for_timeout(200)
    raise AssertionError(f"{text!r} never appeared in {selector}: {page.locator(selector).all_inner_texts()[:3]}")


def url_holds(page, want, timeout_s: float = 15.0) -> None:
    """Wait until the address bar's share link decodes to a scenario `want` accepts: the app writes the link during
    each run (app.py), so a reload just after an input or a page change could otherwise restore an older state."""
    from urllib.parse import parse_qs, urlparse

    from frenzy_core.scenario import decode_share

    deadline = time.monotonic() + timeout_s
    while True:
        code = parse_qs(urlparse(page.url).query).get("s", [""])[0]
        scenario = decode_share(code) if code else None
        if scenario is not None and want(scenario):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"the address bar's share link never held the state: {scenario!r:.600}")
        page.wait_for_timeout(200)


def test_ml_engineer_path_share_link_plans_launch_and_reload(browser_page):
    page, url = browser_page
    open_page(page, f"{url}/?s={_code('ml-engineer')}", "Frenzy Planner")
    wait_text(page, '[data-testid="stSidebar"]', "llama-3.1-8b-20b-tokens-in-3-days")
    nav(page, "Plans")
    assert value_is(page, "plans_max_gpus", 32) and value_is(page, "plans_deadline_h", 72)
    wait_text(page, '[data-testid="stAlert"]', "wins on the shortest time")
    wait_text(page, '[data-testid="stCode"]', "--global-batch-size 256")
    assert "--tensor-model-parallel-size" in page.locator('[data-testid="stCode"]').first.inner_text()
    scroll_to(page, 'h3:has-text("Memory headroom")')
    charts_drawn(page, 1)
    shot(page, "plans_heatmap")
    with rerun(page):
        page.locator('.st-key-plans_export_format button:has-text("SLURM")').click()
    wait_text(page, '[data-testid="stCode"]', "#SBATCH --gpus-per-node")
    scroll_to(page, 'h3:has-text("Launch")')
    shot(page, "plans_launch")
    with rerun(page):
        page.locator('.st-key-plans_objective button:has-text("cost")').click()
    wait_text(page, '[data-testid="stAlert"]', "lowest cost")
    nav(page, "Simulation")
    nav(page, "Plans")
    wait_text(page, '[data-testid="stAlert"]', "lowest cost")  # the objective survived the page change
    assert value_is(page, "plans_max_gpus", 32)
    url_holds(page, lambda sc: sc.plans.objective == "cost" and sc.plans.max_gpus == 32)
    page.reload()
    wait_drawn(page, "Plans")
    no_exception(page, "plans after reload")
    wait_text(page, '[data-testid="stAlert"]', "lowest cost")  # ... and the reload, through the share link
    assert value_is(page, "plans_max_gpus", 32)
    # the export format is a view choice, not part of the scenario: the Launch panel shows the plan again
    wait_text(page, '[data-testid="stCode"]', "--global-batch-size 256")


def test_procurement_path_sample_scenario_budget_across_pages(browser_page):
    page, url = browser_page
    open_page(page, url, "Frenzy Planner")
    box = page.locator(".st-key-scn_sample input")  # the selectbox is a combobox: type, then Enter picks the match
    box.click()
    box.fill("procurement")
    page.get_by_role("option").first.wait_for(timeout=10_000)
    with rerun(page):
        box.press("Enter")
    with rerun(page):
        page.locator(".st-key-scn_load button").click()
    wait_text(page, '[data-testid="stAlert"]', "Loaded")
    shot(page, "overview_scenario")
    nav(page, "Plans")
    wait_text(page, '[data-testid="stAlert"]', "lowest cost")
    assert value_is(page, "plans_budget", 5000)
    assert page.locator('h3:has-text("Best plan per GPU type")').count() == 1
    nav(page, "GPU mix what-if")
    assert value_is(page, "wi_budget", 150) and value_is(page, "wi_seeds", 5)
    nav(page, "Cluster & packing")
    nav(page, "GPU mix what-if")
    assert value_is(page, "wi_budget", 150)  # the budget survived the page change
    url_holds(page, lambda sc: sc.whatif.budget_usd_per_hour == 150)
    page.reload()
    wait_drawn(page, "GPU mix what-if")
    assert value_is(page, "wi_budget", 150)  # ... and the reload


def test_teacher_path_memory_terms_and_a_cached_simulation(browser_page):
    page, url = browser_page
    open_page(page, f"{url}/?s={_code('teacher')}", "Frenzy Planner")
    nav(page, "Model & memory")
    with rerun(page):
        page.locator('.st-key-mem_log_scale label').first.click()
    no_exception(page, "model page log scale")
    # GPT-2 small: 124,439,808 parameters (the count Hugging Face reports for "gpt2")
    assert "124,439,808" in page.locator('[data-testid="stCaptionContainer"]:has-text("parameters (")').first.inner_text()
    shot(page, "model_memory")
    nav(page, "Simulation")
    assert value_is(page, "sim_limit", 60) and value_is(page, "sim_seeds", 2)
    for attempt in range(2):
        with rerun(page, 90_000):
            page.locator(".st-key-sim_run button").click()
        page.wait_for_selector('h3:has-text("Results")', timeout=90_000)
        no_exception(page, f"simulation run {attempt + 1}")
    wait_text(page, '[data-testid="stCaptionContainer"]', "from the cache")
    scroll_to(page, 'h3:has-text("Results")')
    shot(page, "simulation")
    url_holds(page, lambda sc: sc.simulation.limit_jobs == 60)  # the link is written during the run: wait for it
    page.reload()
    wait_drawn(page, "Simulation")
    assert value_is(page, "sim_limit", 60)


def test_a_1000_node_cluster_draws_node_groups(browser_page):
    page, url = browser_page
    open_page(page, f"{url}/cluster_packing", "Cluster & packing")
    page.locator('[data-testid="stExpander"] summary:has-text("Paste cluster YAML")').click()
    box = page.locator(".st-key-cl_yaml_text textarea")
    box.fill("name: big-lab\nnodes:\n  - {name: h100, gpu_type: H100-80GB, num_gpus: 8, count: 600}\n"
             "  - {name: a100, gpu_type: A100-80GB, num_gpus: 8, count: 400}\n")
    with rerun(page):  # the text is the app's before Apply is pressed (a click at once once lost the paste)
        box.press("Control+Enter")
    with rerun(page):
        page.locator(".st-key-cl_yaml_apply button").click()
    wait_text(page, '[data-testid="stSidebar"]', "big-lab")
    for _ in range(3):
        with rerun(page):
            page.locator(".st-key-pack_submit button").click()
    wait_text(page, '[data-testid="stCaptionContainer"]', "groups of identical nodes")
    no_exception(page, "1000-node cluster")
    charts_drawn(page, 2)  # the node groups and GPUs per type
    scroll_to(page, 'h3:has-text("Packing with HAS")')
    shot(page, "cluster_groups")


# --- issue 23: layouts that fit 1,280 px, the sidebar following the live scenario ------------------------------------
NARROW = {"width": 1280, "height": 900}


def visible_columns(page, key: str) -> list[str]:
    """The column headers a dataframe shows in its visible region, left to right. Streamlit's grid draws on a canvas;
    its accessibility table lists only the columns that intersect the visible region (not the scrolled-out ones)."""
    return page.locator(f'.st-key-{key} [role="columnheader"]').all_text_contents()


def columns_in_view(page, key: str, wanted: list[str]) -> None:
    """Each wanted column is drawn and ends inside the view: a column after it is drawn too (the grid draws only
    the columns that intersect its visible region), and the grid itself ends inside the 1,280 px viewport."""
    page.locator(f'.st-key-{key} [role="columnheader"]').first.wait_for(state="attached", timeout=30_000)
    shown = visible_columns(page, key)
    for name in wanted:
        assert name in shown, f"{key}: {name!r} is scrolled out of view at 1,280 px; in view: {shown}"
        assert shown.index(name) < len(shown) - 1, f"{key}: {name!r} is cut at the grid's right edge: {shown}"
    box = page.locator(f".st-key-{key}").bounding_box()
    assert box["x"] + box["width"] <= NARROW["width"], box
    assert page.evaluate("() => document.documentElement.scrollWidth") <= NARROW["width"]


def test_deciding_columns_fit_1280_px_and_the_sidebar_follows_the_scenario(browser_page):
    page, url = browser_page
    page.set_viewport_size(NARROW)
    try:
        open_page(page, f"{url}/?s={_code('procurement')}", "Frenzy Planner")
        name = "procurement-150-usd-per-hour"
        wait_text(page, '[data-testid="stSidebar"]', f"Scenario: {name}")
        nav(page, "Plans")
        charts_drawn(page, 1)
        columns_in_view(page, "plans_table_box", ["time to train (h)", "GPU-hours", "cost (USD)"])
        columns_in_view(page, "plans_per_type_box", ["time to train (h)", "GPU-hours", "cost (USD)"])
        assert f"Scenario: {name}" in page.locator('[data-testid="stSidebar"]').inner_text()  # nothing changed yet
        nav(page, "GPU mix what-if")
        set_number(page, "wi_limit", 40)
        set_number(page, "wi_seeds", 1)
        with rerun(page, 90_000):
            page.locator(".st-key-wi_run button").click()
        page.wait_for_selector('h3:has-text("Average JCT against cost")', timeout=90_000)
        no_exception(page, "gpu mix at 1,280 px")
        columns_in_view(page, "wi_results_box", ["avg JCT h", "cost $/h", "added $/h", "within budget"])
        for key in ("wi_budget", "wi_limit", "wi_seeds", "wi_workers"):  # one-line labels: inputs side by side align
            label = page.locator(f'.st-key-{key} [data-testid="stWidgetLabel"]').first.bounding_box()
            assert label["height"] < 30, f"{key}: its label wraps at 1,280 px ({label['height']:.0f} px high)"
        nav(page, "Model & memory")
        box = page.locator(".st-key-zoo_pick input")
        box.click()
        box.fill("mistral-7b")
        page.get_by_role("option").first.wait_for(timeout=10_000)
        with rerun(page):
            box.press("Enter")
        wait_text(page, '[data-testid="stSidebar"]', f"Scenario: unsaved changes (from {name})")
    finally:
        page.set_viewport_size(VIEWPORT)
