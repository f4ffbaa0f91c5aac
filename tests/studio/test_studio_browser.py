"""The studio in headless Chromium: live predictions, field errors, infeasible layouts,
a plan to its report. Screenshots go to $MOSAIC_TEST_ARTIFACTS (default <tmp>/...)."""

from __future__ import annotations

import contextlib
import itertools
import re
from collections.abc import Iterator
from typing import Any

import pytest

from mosaic.studio.jobs import DEFAULT_FORM

TINY_PLAN = {"plan.q": "8,10", "plan.experts": "8,16", "plan.top_k": "1,2",
             "plan.split_factor": "1,2", "plan.nodes": "4", "plan.days": "10"}


def wait_for_first_prediction(browser: Any, driver: Any) -> None:
    """Wait until the page shows its first prediction (a cold server takes seconds)."""
    browser.wait_for(lambda: driver.execute_script(
        "return document.body.getAttribute('data-perf-state') === 'ok'"), timeout_s=90,
        what="first prediction")


@contextlib.contextmanager
def open_page(studio: Any, browser: Any, height: int = 900) -> Iterator[Any]:
    """The module's studio open in a browser of its own at its first prediction; the
    browser stops after the block."""
    driver = browser.start_driver(height=height)
    try:
        driver.get(studio.url + "/")
        wait_for_first_prediction(browser, driver)
        yield driver
    finally:
        driver.quit()


def search_layouts(browser: Any, driver: Any) -> list[Any]:
    """Click Search layouts: the layout table's rows, once it has some."""
    from selenium.webdriver.common.by import By

    driver.find_element(By.ID, "layouts-run").click()
    return browser.wait_for(lambda: driver.find_elements(By.CSS_SELECTOR,
                                                         "#layouts-table tbody tr"),
                            what="the layout table")


@contextlib.contextmanager
def studio_page(browser: Any, **studio_options: Any) -> Iterator[Any]:
    """A studio of its own (``create_app`` keywords) open in a browser at its first
    prediction; the browser and the studio stop after the test."""
    from .conftest import running_studio

    with running_studio(**studio_options) as running, \
            open_page(running, browser, height=1100) as driver:
        yield driver

@pytest.fixture(scope="module")
def page(studio, browser):
    driver = browser.start_driver(height=1300)
    driver.get(studio.url + "/")
    wait_for_first_prediction(browser, driver)
    yield driver
    driver.quit()


def field(driver: Any, key: str) -> Any:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.ID, "f-" + key.replace(".", "-"))


def set_field(driver: Any, key: str, value: str) -> None:
    """Paste a value into a text input, or pick an option of a select (fires the page's events).

    The text is set in one step, as a paste is: clearing and then typing key by key leaves
    the field empty or half-typed for longer than the page's 120 ms debounce on a slow
    machine, and the page then rightly asks for a prediction of that form and logs its 422.
    """
    from selenium.webdriver.support.ui import Select

    element = field(driver, key)
    if element.tag_name == "select":
        Select(element).select_by_value(value)
    else:
        driver.execute_script(
            "const el = arguments[0]; el.value = arguments[1];"
            "el.dispatchEvent(new Event('input', {bubbles: true}));"
            "el.dispatchEvent(new Event('change', {bubbles: true}));", element, value)


def text(driver: Any, element_id: str) -> str:
    return driver.execute_script(f"return document.getElementById('{element_id}').textContent")


# one geometry of the ladder: the plans-table tests' plan, a second or so each
ONE_GEOMETRY = {**TINY_PLAN, "plan.q": "8", "plan.experts": "8", "plan.top_k": "1",
                "plan.split_factor": "1"}


def next_plan_number(studio: Any) -> int:
    """The id the studio gives the next plan it starts."""
    _, status = studio.call("/api/plan/status")
    return 1 + (status["current"]["id"] if status["current"] else 0)


def plans_table_column(driver: Any, header: str) -> list[str]:
    """The cells under ``header`` in the session's plans table, oldest plan first."""
    return driver.execute_script(
        "var rows = document.querySelectorAll('#plan-history-table tbody tr');"
        "var i = Array.from(document.querySelectorAll('#plan-history-table th'))"
        ".map(function (th) { return th.textContent; }).indexOf(arguments[0]);"
        "return Array.from(rows).map(function (tr) { return tr.cells[i].textContent; })",
        header)


def test_page_loads_with_a_prediction(page, studio, browser):
    _, body = studio.call("/api/perf", {"form": DEFAULT_FORM})
    expected = f"{body['prediction']['step_time_s']:.4f} s"
    assert browser.wait_for(lambda: text(page, "m-step") == expected, what="the step time")
    assert "fits in memory" in text(page, "m-verdict")
    # the EP dispatcher costed, and the coverage a line per part (a trial)
    assert f"; EP dispatcher {body['prediction']['dispatcher']}" in text(page, "m-layout")
    assert text(page, "m-coverage").startswith("calibration default\n")
    assert browser.wait_for(lambda: page.execute_script(
        "return document.querySelectorAll('#chart-step .trace path').length > 0"))
    assert browser.console_errors(page) == []
    browser.screenshot(page, "studio_job")


def test_the_status_lines_beside_the_buttons_read_as_notes(page):
    """The status lines beside the buttons (the layouts' and explain's summaries, the pinned
    job, the plan's state) have the class note, which report.css styles only on paragraphs
    (p.note: 13 px, muted): they showed in the body's 16 px ink, larger than every label
    around them (the docs/img screenshots)."""
    styles = page.execute_script(
        "return Array.from(document.querySelectorAll('.note')).map(function (el) {"
        "  var s = getComputedStyle(el); return [el.tagName, el.id, s.fontSize, s.color]; })")
    paragraphs = {tuple(s[2:]) for s in styles if s[0] == "P"}
    spans = [s for s in styles if s[0] == "SPAN"]
    assert paragraphs == {("13px", "rgb(91, 100, 117)")}, styles  # report.css: --muted
    assert [s[1] for s in spans] == ["layouts-summary", "explain-summary", "pin-note",
                                     "plan-state"]
    assert all(tuple(s[2:]) in paragraphs for s in spans), spans


def test_the_section_links_are_evenly_spaced(page):
    """A line break between two links of the section bar (index.html) put a space's width
    more between Compare and Plan than between the others (the docs/img screenshots); the
    report's bar joins its links with nothing between them (report/html/page.py)."""
    boxes = page.execute_script(
        "return Array.from(document.querySelectorAll('nav.toc a')).map(function (a) {"
        "  var r = a.getBoundingClientRect(); return [r.left, r.right]; })")
    gaps = [round(right[0] - left[1], 1) for left, right in itertools.pairwise(boxes)]
    assert len(gaps) == 5 and len(set(gaps)) == 1, gaps


def test_micro_batch_changes_the_step_time(page, studio, browser):
    before = text(page, "m-step")
    set_field(page, "batch.micro_seqs", "1")
    _, body = studio.call("/api/perf", {"form": {**DEFAULT_FORM, "batch.micro_seqs": "1"}})
    expected = f"{body['prediction']['step_time_s']:.4f} s"
    assert expected != before
    browser.wait_for(lambda: text(page, "m-step") == expected, what="the new step time")
    assert "micro-batch 1" not in text(page, "general-error")
    assert " mb1 " in text(page, "m-layout")


def test_bad_value_is_shown_next_to_its_field(page, browser):
    good = text(page, "m-step")
    set_field(page, "parallelism.ep", "5")
    message = browser.wait_for(lambda: text(page, "err-parallelism-ep"), what="the field error")
    assert "ep=5 must divide experts=96" in message
    row_class = page.execute_script(
        "return document.getElementById('err-parallelism-ep').parentNode.className")
    assert "invalid" in row_class
    # screen readers hear the field is invalid and why (a trial: no aria attributes)
    assert field(page, "parallelism.ep").get_attribute("aria-invalid") == "true"
    assert field(page, "parallelism.ep").get_attribute("aria-describedby") == \
        "err-parallelism-ep"
    # the last good result stays, greyed out (docs/studio.md; it was blanked to '–')
    assert text(page, "m-step") == good
    assert "stale" in page.execute_script("return document.getElementById('metrics').className")
    browser.screenshot(page, "studio_field_error")
    # pinning now would describe the greyed job and compare the invalid one (a trial)
    from selenium.webdriver.common.by import By

    page.find_element(By.ID, "pin-a").click()  # (predicts the form first: asynchronous)
    browser.wait_for(lambda: "Fix the job's fields first" in text(page, "pin-note"),
                     what="the refusal to pin")
    assert page.find_element(By.ID, "compare-run").get_attribute("disabled") is not None
    set_field(page, "parallelism.ep", "8")
    browser.wait_for(lambda: text(page, "err-parallelism-ep") == "" and "stale" not in
                     page.execute_script("return document.getElementById('metrics').className"),
                     what="the error to clear")
    assert field(page, "parallelism.ep").get_attribute("aria-invalid") is None
    # the only console entries: Chromium logging the 422 answers to the invalid form
    logged = browser.console_errors(page)
    assert logged and all("/api/perf" in e["message"] and "422" in e["message"]
                          for e in logged), logged


def test_infeasible_layout_shows_its_reason(page, studio, browser):
    set_field(page, "parallelism.pp", "1")
    set_field(page, "batch.micro_seqs", "4")
    set_field(page, "performance.checkpointing", "none")
    form = {**DEFAULT_FORM, "parallelism.pp": "1", "batch.micro_seqs": "4",
            "performance.checkpointing": "none"}
    _, body = studio.call("/api/perf", {"form": form})
    # the verdict in the CLI's words (perf.headroom.memory_fit_text): out of memory, or
    # only over the planning headroom, said as such
    expected = body["prediction"]["memory_fit"]
    assert "OUT OF MEMORY" in expected or "planning headroom" in expected
    browser.wait_for(lambda: expected in text(page, "m-verdict"),
                     what="the out-of-memory verdict")
    # the overshoot is against the usable share, and the verdict says that share (it gave
    # the whole device's 178.4 GiB beside an overshoot over 160.5; a trial)
    prediction = body["prediction"]
    usable = prediction["usable_memory_fraction"] * prediction["memory_capacity_gib"]
    assert f"of {usable:.1f} usable (90% of" in text(page, "m-verdict")
    assert f"of {usable:.1f} GiB usable (90% of" in text(page, "m-memory")
    assert "bad" in page.execute_script("return document.getElementById('m-verdict').className")
    # the long verdict wraps in its cell: the page does not scroll sideways (a trial's
    # out-of-memory line widened it to 1,457 px in a 1,385 px window)
    assert page.execute_script(
        "return document.documentElement.scrollWidth <= window.innerWidth")
    page.execute_script("document.getElementById('m-verdict').scrollIntoView()")
    browser.screenshot(page, "studio_infeasible")


def test_layout_table_lists_layouts_and_reasons(page, browser):
    from selenium.webdriver.common.by import By

    rows = search_layouts(browser, page)
    assert len(rows) >= 10
    reasons = page.find_elements(By.CSS_SELECTOR, "#infeasible-table tbody tr")
    texts = [r.text for r in reasons]
    # above the device's memory, or under it and over the planning headroom (the wording
    # perf uses for the two)
    assert any("out of memory by" in t or "planning headroom by" in t for t in texts)
    assert any("must divide" in t for t in texts)
    page.execute_script("document.getElementById('layouts').scrollIntoView()")
    browser.screenshot(page, "studio_layouts")
    # rows are reachable by keyboard (a trial: click only): Enter loads the layout
    from selenium.webdriver.common.keys import Keys

    assert rows[0].get_attribute("tabindex") == "0"
    rows[0].send_keys(Keys.ENTER)  # loads the best layout into the editor
    browser.wait_for(lambda: "fits in memory" in text(page, "m-verdict"),
                     what="the best layout to fit")


def test_the_layouts_table_takes_one_tab_stop_and_sorts_by_keyboard(studio, browser):
    """A keyboard pass (a trial) tabbed through all 200 layout rows between Search layouts
    and Explain, and could sort no table: the table is one tab stop, the arrow keys move
    between its shown rows, and a focused header sorts on Enter."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    def focused() -> str:
        return page.execute_script(
            "var e = document.activeElement;"
            "return e.id || e.tagName + ':' + (e.getAttribute('data-index') || e.textContent)")

    def stops() -> list[str]:
        return page.execute_script(
            "return Array.from(document.querySelectorAll('#layouts-table tbody tr'))"
            ".filter(function (tr) { return tr.tabIndex === 0; })"
            ".map(function (tr) { return tr.getAttribute('data-index'); })")

    with open_page(studio, browser) as page:
        rows = search_layouts(browser, page)
        assert len(rows) > 100 and stops() == ["0"]
        headers = page.find_elements(By.CSS_SELECTOR, "#layouts-table thead th")
        page.find_element(By.CSS_SELECTOR, "input[data-filter-for='layouts-table']").click()
        keys = ActionChains(page)
        for _ in headers:  # the headers, then the table's one row stop, then Explain
            keys.send_keys(Keys.TAB)
        keys.send_keys(Keys.TAB).perform()
        assert focused() == "TR:0"
        ActionChains(page).send_keys(Keys.ARROW_DOWN, Keys.ARROW_DOWN).perform()
        assert focused() == "TR:2" and stops() == ["2"]
        # past the table: the infeasible layouts' two headers, then Explain
        ActionChains(page).send_keys(Keys.TAB, Keys.TAB, Keys.TAB).perform()
        assert focused() == "explain-run"
        # the memory header, focused, sorts on Enter (ascending: the least memory first)
        memory = headers[-1]
        page.execute_script("arguments[0].focus()", memory)
        ActionChains(page).send_keys(Keys.ENTER).perform()
        assert memory.get_attribute("aria-sort") == "ascending"
        shown = [float(r.find_elements(By.TAG_NAME, "td")[-1].text) for r in
                 page.find_elements(By.CSS_SELECTOR, "#layouts-table tbody tr")]
        assert shown == sorted(shown)
        # a filter hiding the row stop (by its sharding) moves the stop to a shown row
        shardings = page.execute_script(
            "return Array.from(document.querySelectorAll('#layouts-table tbody tr'))"
            ".map(function (tr) { return [tr.tabIndex, tr.cells[8].textContent]; })")
        hidden = next(name for stop, name in shardings if stop == 0)
        other = next(name for _, name in shardings if name != hidden)
        page.execute_script(
            "var f = document.querySelector(\"input[data-filter-for='layouts-table']\");"
            "f.value = arguments[0]; f.dispatchEvent(new Event('input'));", other)
        (stop,) = page.find_elements(By.CSS_SELECTOR, "#layouts-table tbody tr[tabindex='0']")
        assert stop.is_displayed() and other in stop.text
        assert browser.console_errors(page) == []


def test_the_table_filter_matches_each_word_in_the_rows_cells(studio, browser):
    """The filter (table.js, the studio's and the reports') matched its text against the
    row's cells run together: "zero2 4" found nothing (the cells read "zero24"), and text
    spanning two cells found rows. Each whitespace-separated word is looked for in the
    cells, kept apart."""
    from selenium.webdriver.common.by import By

    def cells() -> list[list[str]]:
        return driver.execute_script(
            "return Array.from(document.querySelectorAll('#layouts-table tbody tr'))"
            ".map(function (tr) { return Array.from(tr.cells).map(function (td) {"
            "  return td.textContent.toLowerCase(); }); })")

    def shown_after(words: str) -> list[int]:
        return driver.execute_script(
            "var f = document.querySelector(\"input[data-filter-for='layouts-table']\");"
            "f.value = arguments[0]; f.dispatchEvent(new Event('input'));"
            "return Array.from(document.querySelectorAll('#layouts-table tbody tr'))"
            ".map(function (tr, i) { return tr.style.display === 'none' ? -1 : i; })"
            ".filter(function (i) { return i >= 0; })", words)

    with open_page(studio, browser) as driver:
        search_layouts(browser, driver)
        rows = cells()
        headers = [h.text for h in driver.find_elements(By.CSS_SELECTOR, "#layouts-table th")]
        sharding, mbs = headers.index("sharding"), headers.index("mbs")
        # two words of two cells of the first row, as a reader types them ("zero1 4")
        words = [rows[0][sharding], rows[0][mbs]]
        shown = shown_after("  ".join(words).upper() + " ")
        assert 0 in shown
        assert shown == [i for i, row in enumerate(rows)
                         if all(any(w in cell for cell in row) for w in words)]
        # the two cells' text run together is in no cell: no row holds it
        joined = words[0] + words[1]
        assert not any(joined in cell for row in rows for cell in row)
        assert shown_after(joined) == []
        assert len(shown_after("")) == len(rows)
        assert browser.console_errors(driver) == []


def test_a_layouts_hsdp_rows_name_their_shard_group(studio, browser):
    """torchtitan's best layouts include HSDP with shard groups 8, 4 and 2, which `mosaic
    layouts` lists as hsdp/8, hsdp/4, hsdp/2: the studio's table (and its infeasible list)
    said 'hsdp' for each, rows of different memory that read the same (a trial)."""
    form = {**DEFAULT_FORM, "performance.stack": "torchtitan", "parallelism.sharding": "fsdp"}
    _, body = studio.call("/api/layouts", {"form": form})
    wanted = [f"hsdp/{r['hsdp_shard']}" if r["sharding"] == "hsdp" else r["sharding"]
              for r in body["rows"]]
    assert len({w for w in wanted if w.startswith("hsdp/")}) > 1, wanted
    with open_page(studio, browser) as driver:
        set_field(driver, "performance.stack", "torchtitan")
        set_field(driver, "parallelism.sharding", "fsdp")
        browser.wait_for(lambda: driver.execute_script(
            "return document.body.getAttribute('data-perf-state') === 'ok'"), what="the job")
        search_layouts(browser, driver)
        shown = driver.execute_script(
            "return Array.from(document.querySelectorAll('#layouts-table tbody tr'))"
            ".map(function (tr) { return tr.cells[8].textContent; })")
        assert shown == wanted
        infeasible = [f"hsdp/{r['hsdp_shard']} " for r in
                      body["infeasible"]["out_of_memory_plans"] if r["sharding"] == "hsdp"]
        assert infeasible
        listed = text(driver, "infeasible-holder")
        assert all(label in listed for label in infeasible)


def test_explain_draws_the_levers_of_the_edited_job(page, browser):
    from selenium.webdriver.common.by import By

    page.find_element(By.ID, "explain-run").click()
    rows = browser.wait_for(lambda: page.find_elements(By.CSS_SELECTOR,
                                                       "#levers-table tbody tr"),
                            what="the lever table")
    assert len(rows) >= 5 and text(page, "explain-summary").startswith("Bound: ")
    browser.wait_for(lambda: page.execute_script(
        "return document.querySelectorAll('#chart-levers .trace path').length > 0"),
        what="the lever chart")
    page.execute_script("document.getElementById('explain').scrollIntoView()")
    browser.screenshot(page, "studio_explain")


def test_the_page_fits_a_phone_width(studio, browser):
    """At 420 px the editor and the results stack, tables scroll inside their own box and
    the page never scrolls sideways (a trial: 695 px wide)."""
    driver = browser.start_driver(height=900)
    try:
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": 420, "height": 900, "deviceScaleFactor": 1, "mobile": False})
        driver.get(studio.url + "/")
        wait_for_first_prediction(browser, driver)
        search_layouts(browser, driver)
        width = driver.execute_script("return document.documentElement.scrollWidth")
        assert width <= 420, width
    finally:
        driver.quit()


def test_compare_pinned_job_with_the_edited_one(page, browser):
    from selenium.webdriver.common.by import By

    page.find_element(By.ID, "pin-a").click()
    step_a = text(page, "m-step")
    current = field(page, "performance.checkpointing").get_attribute("value")
    set_field(page, "performance.checkpointing", "selective" if current == "full" else "full")
    browser.wait_for(lambda: text(page, "m-step") != step_a, what="job B")
    step_b = text(page, "m-step")
    page.find_element(By.ID, "compare-run").click()
    row = browser.wait_for(lambda: page.find_element(By.CSS_SELECTOR,
                                                     "#compare-table tbody tr").text,
                           what="the comparison")
    assert step_a.split()[0] in row and step_b.split()[0] in row
    # tokens/s grouped and the change signed, as the CLI prints them (a trial saw '4414'
    # and '4.2%' beside '-4.1%')
    rows = [r.text for r in page.find_elements(By.CSS_SELECTOR, "#compare-table tbody tr")]
    tokens = next(r for r in rows if r.startswith("tokens/s"))
    assert re.search(r"\d,\d{3}", tokens) and re.search(r"[+-]\d+\.\d%$", tokens), tokens
    # the inputs that differ come first (docs/studio.md: "a table of the changes")
    changes = [r.text for r in page.find_elements(By.CSS_SELECTOR, "#compare-changes tbody tr")]
    assert len(changes) == 1 and changes[0].startswith("performance.checkpointing")
    # each side's memory verdict (a trial's B, out of memory on another GPU, had no row),
    # in perf's wording: "fits", or the memory line with the overshoot
    verdict = next(r for r in page.find_elements(By.CSS_SELECTOR, "#compare-table tbody tr")
                   if r.text.startswith("fits in memory?"))
    cells = [c.text for c in verdict.find_elements(By.TAG_NAME, "td")]
    assert all(c == "fits" or " GiB of " in c for c in cells[1:3]), cells
    browser.wait_for(lambda: page.execute_script(
        "return document.querySelectorAll('#chart-compare-step .trace path').length > 0"))
    page.execute_script("document.getElementById('compare').scrollIntoView()")
    browser.screenshot(page, "studio_compare")


def test_small_plan_runs_to_its_report(page, studio, browser):
    from selenium.webdriver.common.by import By

    for key, value in TINY_PLAN.items():
        set_field(page, key, value)
    page.find_element(By.ID, "plan-run").click()
    browser.wait_for(lambda: page.execute_script(
        "return document.body.getAttribute('data-plan-state') === 'done'"), timeout_s=90,
        what="the plan to finish")
    link = page.find_element(By.ID, "plan-report-link")
    assert link.is_displayed()
    assert "12/12 geometries" in text(page, "plan-state")
    page.execute_script("document.getElementById('plan').scrollIntoView()")
    browser.screenshot(page, "studio_plan")
    assert browser.console_errors(page) == []
    page.get(link.get_attribute("href"))
    holders, _ = browser.wait_for(lambda: browser.figures_drawn(page),
                                  what="the report's figures")
    assert holders >= 4
    assert "mosaic plan" in page.title
    assert browser.console_errors(page) == []
    browser.screenshot(page, "studio_plan_report")


def test_a_refused_plan_request_clears_the_previous_plans_status(page, studio, browser):
    """A refused plan request left the status line on the previous plan ("plan 1: done",
    its report link beside it) under the refusal: it says the plan did not start."""
    from selenium.webdriver.common.by import By

    page.get(studio.url + "/")  # the plan test before left the page on its report
    browser.wait_for(lambda: page.execute_script(
        "return document.body.getAttribute('data-perf-state') === 'ok'"), timeout_s=90,
        what="the page's prediction")
    for key, value in ONE_GEOMETRY.items():
        set_field(page, key, value)
    page.find_element(By.ID, "plan-run").click()
    browser.wait_for(lambda: "done (1/1 geometries" in text(page, "plan-state")
                     and page.find_element(By.ID, "plan-report-link").is_displayed(),
                     timeout_s=90, what="the one-geometry plan to finish")
    set_field(page, "plan.nodes", "0")
    page.find_element(By.ID, "plan-run").click()
    browser.wait_for(lambda: "not started" in text(page, "plan-state"), what="the refusal")
    assert "done" not in text(page, "plan-state")
    assert not page.find_element(By.ID, "plan-report-link").is_displayed()
    assert page.execute_script("return document.getElementById('plan-progress').value") == 0
    assert field(page, "plan.nodes").get_attribute("aria-invalid") == "true"
    # the refused request's 422 is the only console error
    assert all("/api/plan" in e["message"] for e in browser.console_errors(page))
    set_field(page, "plan.nodes", TINY_PLAN["plan.nodes"])


def test_run_plan_shows_the_new_request_at_once(studio, browser):
    """After Run plan the status line showed the previous plan's state ("plan N: done", its
    report link beside it) until the request returned (a trial): it says the plan is
    starting as soon as the button is clicked."""
    from selenium.webdriver.common.by import By

    with open_page(studio, browser) as driver:
        for key, value in ONE_GEOMETRY.items():
            set_field(driver, key, value)
        first = next_plan_number(studio)
        driver.find_element(By.ID, "plan-run").click()
        browser.wait_for(lambda: f"plan {first}: done" in text(driver, "plan-state")
                         and driver.find_element(By.ID, "plan-report-link").is_displayed(),
                         timeout_s=90, what="the first plan to finish")
        # the click and the line read in one script: the request cannot have returned
        state, link_hidden, progress = driver.execute_script(
            "document.getElementById('plan-run').click();"
            "return [document.getElementById('plan-state').textContent,"
            "        document.getElementById('plan-report-link').hidden,"
            "        document.getElementById('plan-progress').value];")
        assert state == "starting…" and link_hidden and progress == 0, state
        browser.wait_for(lambda: f"plan {first + 1}: done" in text(driver, "plan-state"),
                         timeout_s=90, what="the second plan to finish")
        assert browser.console_errors(driver) == []


def test_the_pages_export_of_the_starting_job_is_the_apis(studio, browser):
    """The page's job YAML of the untouched starting job held `quantised_gemms: all`, which
    `/api/export` of the same (options) form leaves out: the select had no empty choice,
    so its first one was sent as stated (a trial). An untouched default is not written."""
    from selenium.webdriver.common.by import By

    _, options = studio.call("/api/options")
    _, exported = studio.call("/api/export", {"form": options["form"], "target": "yaml"})
    with open_page(studio, browser) as driver:
        driver.find_element(By.ID, "export-run").click()
        shown = browser.wait_for(lambda: text(driver, "export-text"), what="the export")
        assert shown == exported["text"]
        assert browser.console_errors(driver) == []


def test_an_export_of_the_job_before_an_edit_is_greyed_and_not_offered(studio, browser):
    """After an export, an edit left the earlier job's file on the page with its download
    link (a trial set micro-batch 1 and downloaded `micro_seqs: 4`), and a refused export
    of an invalid job kept offering the last good file beside the refusal. The file is
    greyed with a note naming the edit and not offered; an export of the job offers it."""
    from selenium.webdriver.common.by import By

    def offered() -> bool:
        return driver.find_element(By.ID, "export-download").is_displayed()

    def greyed() -> bool:
        return "stale" in driver.find_element(By.ID, "export-text").get_attribute("class")

    with open_page(studio, browser) as driver:
        driver.find_element(By.ID, "export-run").click()
        browser.wait_for(lambda: "micro_seqs: 4" in text(driver, "export-text"),
                         what="the export")
        assert offered() and not greyed()
        set_field(driver, "batch.micro_seqs", "1")
        assert greyed() and not offered()
        assert "edit of batch.micro_seqs" in text(driver, "export-stale")
        set_field(driver, "hardware.nodes", "abc")
        driver.find_element(By.ID, "export-run").click()
        browser.wait_for(lambda: text(driver, "export-error"), what="the refusal")
        assert "micro_seqs: 4" in text(driver, "export-text") and greyed() and not offered()
        set_field(driver, "hardware.nodes", DEFAULT_FORM["hardware.nodes"])
        driver.find_element(By.ID, "export-run").click()
        browser.wait_for(lambda: "micro_seqs: 1" in text(driver, "export-text"),
                         what="the export of the edited job")
        assert offered() and not greyed() and text(driver, "export-stale") == ""
        assert text(driver, "export-error") == ""


def test_numbers_are_grouped_as_the_cli_prints_them_in_any_browser_locale(studio, browser):
    """Under a German browser locale the page read tokens/s "763.684 (2.983)" beside MFU
    "11.55%" (the browser's grouping, a decimal point elsewhere) and the layouts summary
    "46.800 candidates"; `mosaic perf` prints 763,684 (2,983) (a trial). The page groups
    digits as the CLI does whatever the locale."""
    from selenium.webdriver.common.by import By

    _, body = studio.call("/api/perf", {"form": DEFAULT_FORM})
    prediction = body["prediction"]
    driver = browser.start_driver(height=900)
    try:
        # Chromium's locale for the page's Intl (DevTools Emulation.setLocaleOverride)
        driver.execute_cdp_cmd("Emulation.setLocaleOverride", {"locale": "de-DE"})
        driver.get(studio.url + "/")
        wait_for_first_prediction(browser, driver)
        assert driver.execute_script("return (1234.5).toLocaleString()") == "1.234,5"
        assert text(driver, "m-tokens") == (f"{prediction['tokens_per_s']:,.0f} "
                                            f"({prediction['tokens_per_s_per_gpu']:,.0f})")
        search_layouts(browser, driver)
        _, layouts = studio.call("/api/layouts", {"form": DEFAULT_FORM})
        assert text(driver, "layouts-summary").startswith(f"{layouts['n_candidates']:,} candidates")
        row = driver.find_element(By.CSS_SELECTOR, "#layouts-table tbody tr")
        assert row.find_elements(By.TAG_NAME, "td")[11].text == (
            f"{layouts['rows'][0]['tokens_per_s_per_gpu']:,.0f}")
    finally:
        driver.quit()


def test_an_edit_the_stopped_server_cannot_answer_greys_the_result(browser):
    """With the studio stopped, an edit read "request failed: TypeError: Failed to fetch"
    above the earlier job's step time in full colour, as if it were the edited job's (a
    trial). The result is greyed and the line asks whether the studio still runs."""
    from .conftest import start_studio

    running, server, thread = start_studio()
    driver = browser.start_driver(height=900)
    try:
        driver.get(running.url + "/")
        wait_for_first_prediction(browser, driver)
        server.should_exit = True
        thread.join(10)
        set_field(driver, "batch.micro_seqs", "2")
        message = browser.wait_for(lambda: text(driver, "general-error"), what="the failure")
        assert "is `mosaic studio` still running?" in message, message
        assert driver.execute_script(
            "return document.getElementById('metrics').classList.contains('stale')"
            " && document.getElementById('job-charts').classList.contains('stale')"
            " && document.body.getAttribute('data-perf-state') === 'error'")
    finally:
        driver.quit()
        server.should_exit = True
        thread.join(10)


def test_a_busy_refusal_goes_when_the_running_plan_ends(studio, browser):
    """Run plan while another tab's plan ran answered "plan N is still running ...; cancel
    it or wait": the line stayed under "plan N: cancelled" and the enabled Run button (a
    trial). It is gone once the running plan is."""
    from selenium.webdriver.common.by import By

    _, options = studio.call("/api/options")
    driver = browser.start_driver(height=900)
    try:
        driver.get(studio.url + "/")
        wait_for_first_prediction(browser, driver)
        status, started = studio.call("/api/plan", {"form": options["plan_form"]})
        assert status == 200, started  # the default grid: 1,092 geometries, running a while
        driver.execute_script("document.getElementById('plan-run').click()")
        busy = browser.wait_for(lambda: text(driver, "plan-error"), what="the busy refusal")
        assert f"plan {started['id']} is still running" in busy
        studio.call("/api/plan/cancel", {})
        browser.wait_for(lambda: f"plan {started['id']}: cancelled" in text(driver, "plan-state"),
                         what="the cancelled plan")
        browser.wait_for(lambda: text(driver, "plan-error") == "", what="the refusal to go")
        assert driver.find_element(By.ID, "plan-run").is_enabled()
    finally:
        driver.quit()
        studio.app.state.runner.cancel()
        studio.app.state.runner.wait(30)


def test_the_plans_table_shows_the_goodput_that_scaled_the_tokens(page, studio, browser):
    """A plan with an MTBF (Young-Daly goodput) was listed with its tokens and no goodput,
    which `mosaic plan` prints and `mosaic sweep` tabulates where it differs: the plans
    table gains a goodput column once a plan's is not the paper's 1. On 4 x 8 B200, an MTBF
    of 50,000 h per GPU and 120 s checkpoints: M = 50,000 x 3,600 / 32 s and goodput
    1 - sqrt(2 x 120 / M) = 0.9935 (plan/goodput.py, Young 1974)."""
    from selenium.webdriver.common.by import By

    page.get(studio.url + "/")
    wait_for_first_prediction(browser, page)
    headers = ("return Array.from(document.querySelectorAll('#plan-history-table th'))"
               ".map(function (th) { return th.textContent; })")

    def run(form: dict[str, str]) -> None:
        number = next_plan_number(studio)
        for key, value in form.items():
            set_field(page, key, value)
        page.find_element(By.ID, "plan-run").click()
        browser.wait_for(lambda: text(page, "plan-state").startswith(f"plan {number}: done"),
                         timeout_s=90, what=f"plan {number} to finish")

    run(ONE_GEOMETRY)  # the paper's goodput 1 (as every plan before it): no goodput column
    assert "goodput" not in page.execute_script(headers)
    run({**ONE_GEOMETRY, "plan.mtbf_gpu_hours": "50000", "plan.checkpoint_s": "120"})
    assert "goodput" in page.execute_script(headers)
    cells = plans_table_column(page, "goodput")
    mtbf_s = 50_000 * 3600 / 32
    assert cells[-1] == f"{1 - (2 * 120 / mtbf_s) ** 0.5:.4f} (young-daly)", cells
    assert "1.0000 (constant)" in cells[:-1], cells
    assert browser.console_errors(page) == []
    # the form's checkpoint interval and scale-out what-if (a review: the form had neither):
    # hourly checkpoints lose 120 / 3,600 + 3,600 / (2 M) (Young 1974 at the stated
    # interval), and the cluster is the node type's 100 Gb/s variant
    run({**ONE_GEOMETRY, "plan.mtbf_gpu_hours": "50000", "plan.checkpoint_s": "120",
         "plan.checkpoint_interval_s": "3600", "plan.scale_out_gbps": "100"})
    cells = plans_table_column(page, "goodput")
    assert cells[-1] == f"{1 - 120 / 3600 - 3600 / (2 * mtbf_s):.4f} (young-daly)", cells
    assert "scale-out 100 Gb/s per GPU" in plans_table_column(page, "cluster")[-1]
    assert browser.console_errors(page) == []
    for key in ("plan.mtbf_gpu_hours", "plan.checkpoint_s", "plan.checkpoint_interval_s",
                "plan.scale_out_gbps"):
        set_field(page, key, "")


def test_the_plans_table_shows_a_searched_batch_as_the_cli_chose_it(page, studio, browser):
    """`--global-batch auto` typed into the form (a trial: 'must be an integer, got 'auto'')
    plans each geometry at 64, 128, ..., 65,536 sequences (plan/batch.py): the status counts
    the geometry-batch pairs, and the plans table gains the optimum's batch (`mosaic plan`'s
    B column) with the rule that bounded it, the batch the CLI chooses for the same grid."""
    import json

    from selenium.webdriver.common.by import By
    from typer.testing import CliRunner

    from mosaic.cli.main import app as cli
    from mosaic.plan.batch import AUTO_BATCHES

    page.get(studio.url + "/")
    wait_for_first_prediction(browser, page)
    number = next_plan_number(studio)
    form = {**ONE_GEOMETRY, "plan.global_batch": "auto"}
    for key, value in form.items():
        set_field(page, key, value)
    page.find_element(By.ID, "plan-run").click()
    pairs = len(AUTO_BATCHES)
    browser.wait_for(lambda: text(page, "plan-state").startswith(
        f"plan {number}: done ({pairs}/{pairs} geometry-batch pairs"), timeout_s=120,
        what="the searched batch's plan")
    cell = plans_table_column(page, "B")[-1]
    result = CliRunner().invoke(cli, ["plan", "--q", "8", "--experts", "8", "--top-k", "1",
                                      "--split-factor", "1", "--nodes", "4", "--days", "10",
                                      "--workers", "1", "--global-batch", "auto", "--json"])
    assert result.exit_code == 0, result.output
    chosen = json.loads(result.stdout)["optimum"]["global_batch"]
    assert chosen in AUTO_BATCHES and cell == f"{chosen} (searched, deepseek)", cell
    assert browser.console_errors(page) == []
    set_field(page, "plan.global_batch", "1024")


def test_a_budgets_window_is_listed_as_the_report_rounds_it(page, studio, browser):
    """A USD budget sets the window: 25,000 USD at 3 USD per GPU-hour on 4 x 8 GPUs buys
    25,000 / (3 x 32) / 24 = 10.8507 days, which the plans table listed as
    10.850694444444445 (a trial); the report says 10.851 days."""
    from selenium.webdriver.common.by import By

    page.get(studio.url + "/")
    wait_for_first_prediction(browser, page)
    number = next_plan_number(studio)
    form = {**ONE_GEOMETRY, "plan.days": "", "plan.price_per_gpu_hour": "3",
            "plan.budget_usd": "25000"}
    for key, value in form.items():
        set_field(page, key, value)
    page.find_element(By.ID, "plan-run").click()
    browser.wait_for(lambda: text(page, "plan-state").startswith(f"plan {number}: done"),
                     timeout_s=90, what="the budget's plan")
    days = plans_table_column(page, "days")[-1]
    assert days == f"{25_000 / (3 * 32) / 24:.3f}" == "10.851", days
    for key in ("plan.price_per_gpu_hour", "plan.budget_usd"):
        set_field(page, key, "")
    set_field(page, "plan.days", TINY_PLAN["plan.days"])


def test_a_model_grid_plans_around_the_edited_model(page, studio, browser):
    """`grid: model` hides the ladder's q, shows depth and width, clears the ladder's E, K
    and G lists (empty keeps the model's own) and plans variants of the edited model."""
    from selenium.webdriver.common.by import By

    page.get(studio.url + "/")
    browser.wait_for(lambda: page.execute_script(
        "return document.body.getAttribute('data-perf-state') === 'ok'"), timeout_s=90,
        what="the page's prediction")
    for key, value in {"ladder.q": "8", "ladder.experts": "16", "ladder.top_k": "2",
                       "ladder.split_factor": "1"}.items():
        set_field(page, key, value)
    for key, value in {**TINY_PLAN, "plan.days": "30"}.items():
        set_field(page, key, value)
    set_field(page, "plan.top_k", "2")  # typed: kept
    from mosaic.studio.plan_runner import DEFAULT_PLAN_FORM

    # the ladder's default list: cleared
    set_field(page, "plan.split_factor", DEFAULT_PLAN_FORM["plan.split_factor"])
    assert field(page, "plan.q").is_displayed() and not field(page, "plan.layers").is_displayed()
    set_field(page, "plan.grid", "model")
    assert not field(page, "plan.q").is_displayed() and field(page, "plan.layers").is_displayed()
    assert field(page, "plan.split_factor").get_attribute("value") == ""
    assert field(page, "plan.top_k").get_attribute("value") == "2"
    set_field(page, "plan.experts", "16,32")
    page.find_element(By.ID, "plan-run").click()
    browser.wait_for(lambda: "done (2/2 geometries" in text(page, "plan-state"), timeout_s=90,
                     what="the model grid's plan")
    _, summary = studio.call("/api/plan/status")
    assert summary["current"]["summary"]["geometry"].startswith("L=32 d=4096 ")
    assert browser.console_errors(page) == []


def test_the_plan_form_follows_the_edited_cluster_until_typed_in(studio, browser):
    """Picking DGX-H100 x 16 in the job editor plans on H100s, 16 nodes (a trial's plan
    stayed on B200 x 32); a plan field the user typed in keeps the user's value."""
    driver = browser.start_driver(height=900)
    try:
        driver.get(studio.url + "/")
        browser.wait_for(lambda: driver.execute_script(
            "return document.body.getAttribute('data-ready') === '1'"), what="the forms")
        set_field(driver, "plan.global_batch", "512")  # typed: kept
        set_field(driver, "hardware.system", "DGX-H100")
        set_field(driver, "hardware.nodes", "16")
        set_field(driver, "batch.global_seqs", "2048")
        assert field(driver, "plan.gpu").get_attribute("value") == "H100-SXM-80GB"
        assert field(driver, "plan.system").get_attribute("value") == "DGX-H100"
        assert field(driver, "plan.nodes").get_attribute("value") == "16"
        assert field(driver, "plan.global_batch").get_attribute("value") == "512"
        # a typed GPU keeps its node type too: the two are a pair
        set_field(driver, "plan.gpu", "B200")
        set_field(driver, "hardware.system", "DGX-H200")
        assert field(driver, "plan.gpu").get_attribute("value") == "B200"
        assert field(driver, "plan.system").get_attribute("value") == "DGX-H100"
    finally:
        driver.quit()


def test_a_request_that_gets_no_answer_says_so(page, browser):
    """With the server gone, the panels said "searching…" or nothing, forever (a trial
    stopped the server with the page open). A fetch that rejects stands in for it here."""
    page.execute_script("window._fetch = window.fetch;"
                        "window.fetch = function () { return Promise.reject("
                        "new TypeError('Failed to fetch')); };")
    try:
        for button, summary, error in (("layouts-run", "layouts-summary", "layouts-error"),
                                       ("explain-run", "explain-summary", "explain-error"),
                                       ("export-run", None, "export-error")):
            page.execute_script(f"document.getElementById('{button}').click()")
            message = browser.wait_for(lambda error=error: text(page, error), what=error)
            assert message.startswith("request failed") and "Failed to fetch" in message
            if summary is not None:
                assert text(page, summary) == ""  # not "searching…" forever
    finally:
        page.execute_script("window.fetch = window._fetch;")


def test_a_panel_of_the_job_before_an_edit_says_so(studio, browser):
    """A trial searched the layouts, then halved the nodes and clicked the best row: the
    editor got its degrees with the new job's dp, another step time than the row's, and
    nothing said the table was the old job's. An edit no row sets greys the table, says
    which field changed and loads no row; a row's own fields keep it current. Explain's
    result of the job before an edit says so too; its bound and what makes the job fit are
    two sentences (they ran on as "... of the step The job does not fit")."""
    from selenium.webdriver.common.by import By

    with open_page(studio, browser, height=1100) as driver:
        search_layouts(browser, driver)

        def best_row() -> tuple[Any, float]:
            row = driver.find_elements(By.CSS_SELECTOR, "#layouts-table tbody tr")[0]
            return row, float(row.find_elements(By.TAG_NAME, "td")[13].text)

        def holder_is_stale() -> bool:
            return "stale" in driver.execute_script(
                "return document.getElementById('layouts-table-holder').className")

        set_field(driver, "batch.micro_seqs", "1")  # a field a row sets: still this job's
        assert text(driver, "layouts-stale") == "" and not holder_is_stale()
        set_field(driver, "hardware.nodes", "16")
        assert "edit of hardware.nodes" in text(driver, "layouts-stale") and holder_is_stale()
        browser.wait_for(lambda: " on 128 " in text(driver, "m-layout"), what="16 nodes")
        step = text(driver, "m-step")
        best_row()[0].click()
        assert "Not loaded" in text(driver, "layouts-error")
        assert field(driver, "parallelism.pp").get_attribute("value") == "8"  # nothing loaded
        assert text(driver, "m-step") == step
        set_field(driver, "hardware.nodes", "32")  # the searched job again
        assert text(driver, "layouts-stale") == "" and not holder_is_stale()
        row, row_step = best_row()
        row.click()
        browser.wait_for(lambda: abs(float(text(driver, "m-step").split()[0]) - row_step)
                         < 6e-4, what="the row's step time")

        # explain an out-of-memory job (the default layout, no recompute, no sharding, mb 8)
        layout = {key: DEFAULT_FORM[key] for key in DEFAULT_FORM if key.startswith("parallelism.")}
        for key, value in {**layout, "performance.checkpointing": "none",
                           "batch.micro_seqs": "8", "parallelism.sharding": "none"}.items():
            set_field(driver, key, value)
        browser.wait_for(lambda: "infeasible" in text(driver, "m-verdict"), what="out of memory")
        driver.find_element(By.ID, "explain-run").click()
        summary = browser.wait_for(lambda: text(driver, "explain-summary").startswith("Bound")
                                   and text(driver, "explain-summary"), what="the explanation")
        assert "of the step. The job does not fit" in summary, summary
        assert text(driver, "explain-stale") == ""
        set_field(driver, "parallelism.sharding", "zero1")
        assert "edit of parallelism.sharding" in text(driver, "explain-stale")
        assert "stale" in driver.execute_script(
            "return document.getElementById('levers-table-holder').className")
        assert all("/api/perf" in e["message"] for e in browser.console_errors(driver))


@pytest.mark.parametrize("job, wanted", [
    ("nemotron_h_56b_b200.yaml", "hsdp"),  # the search's shard group of each HSDP row
    # the record states sequence parallelism off (tp 1); a tp 2 row has it on
    ("runs_example.yaml#example-torchtitan-llama3.1-8b-h100-8-fsdp", "tp2")])
def test_a_layouts_row_loads_the_job_the_row_predicts(job, wanted, browser):
    """A row of the layout table loaded its degrees, sharding, micro-batch and recompute
    but not the search's own choices of sequence parallelism and the HSDP shard group: a
    trial's HSDP row of Nemotron-H said 122.6 GiB and loaded a 36.3 GiB job, a tp 2 row of a
    run record 2.44 s and loaded 2.56 s. Loaded, the editor predicts the row."""
    from pathlib import Path

    from selenium.webdriver.common.by import By

    from mosaic.studio.server import load_job_document

    examples = Path(__file__).resolve().parents[2] / "examples"
    with studio_page(browser, job_document=load_job_document(examples / job)) as driver:
        rows = search_layouts(browser, driver)
        cells = [[c.text for c in row.find_elements(By.TAG_NAME, "td")] for row in rows[:80]]
        pick = next(i for i, c in enumerate(cells)
                    if (c[8].startswith("hsdp/") if wanted == "hsdp" else c[1] == "2"))
        step, memory = float(cells[pick][13]), float(cells[pick][14])
        rows[pick].click()
        browser.wait_for(lambda: abs(float(text(driver, "m-step").split()[0]) - step) < 6e-4,
                         what=f"the row's step time {step}")
        assert abs(float(text(driver, "m-memory").split()[0]) - memory) < 0.051
        if wanted == "tp2":
            assert field(driver, "parallelism.sequence_parallel").get_attribute("value") == "true"
        else:
            # the row's shard group, as the table names it (hsdp/8)
            shard = cells[pick][8].removeprefix("hsdp/")
            assert field(driver, "parallelism.hsdp_shard").get_attribute("value") == shard
        assert browser.console_errors(driver) == []


def test_pinning_right_after_an_edit_pins_the_edited_job(studio, browser):
    """Pin clicked within the prediction's debounce of an edit pinned the edited form under
    the numbers of the job before it ("A pinned: ... mb4" for mb 1), and an invalid form
    (ep 5) past the greyed-result guard (a trial)."""
    from selenium.webdriver.common.by import By

    driver = browser.start_driver(height=900)
    edit_and_pin = ("const el = document.getElementById(arguments[0]); el.value = arguments[1];"
                    "el.dispatchEvent(new Event('input', {bubbles: true}));"
                    "document.getElementById('pin-a').click();")
    try:
        driver.get(studio.url + "/")
        wait_for_first_prediction(browser, driver)
        driver.execute_script(edit_and_pin, "f-batch-micro_seqs", "1")
        note = browser.wait_for(lambda: text(driver, "pin-note"), what="the pin note")
        assert " mb1 " in note and note.endswith(text(driver, "m-step")), note
        driver.execute_script(edit_and_pin, "f-parallelism-ep", "5")
        browser.wait_for(lambda: "Fix the job's fields first" in text(driver, "pin-note"),
                         what="the refusal to pin an invalid job")
        driver.execute_script(edit_and_pin, "f-parallelism-ep", "8")
        browser.wait_for(lambda: text(driver, "pin-note").startswith("A pinned"),
                         what="the valid job pinned")
        assert driver.find_element(By.ID, "compare-run").is_enabled()
    finally:
        driver.quit()


def test_a_refused_comparison_greys_the_last_one(studio, browser):
    """Compare with an invalid B (ep 5) listed B's changes, ep 8 -> 5 among them, above the
    step times of the B compared before it, in full colour (a trial): the refused request
    leaves the last comparison as it was, greyed, and says why."""
    from selenium.webdriver.common.by import By

    def compared() -> list[str]:
        return [row.text for row in driver.find_elements(
            By.CSS_SELECTOR, "#compare-changes tbody tr, #compare-table tbody tr")]

    def greyed() -> list[bool]:
        return driver.execute_script(
            "return ['compare-changes-holder', 'compare-table-holder', 'compare-charts']"
            ".map(function (id) { return document.getElementById(id)"
            ".classList.contains('stale'); })")

    with open_page(studio, browser) as driver:
        driver.find_element(By.ID, "pin-a").click()
        browser.wait_for(lambda: text(driver, "pin-note").startswith("A pinned"), what="A")
        set_field(driver, "batch.micro_seqs", "2")
        driver.find_element(By.ID, "compare-run").click()
        browser.wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, "#compare-table tbody tr"),
                         what="the comparison")
        before = compared()
        assert greyed() == [False, False, False]
        set_field(driver, "parallelism.ep", "5")
        driver.find_element(By.ID, "compare-run").click()
        message = browser.wait_for(lambda: text(driver, "compare-error"), what="the refusal")
        assert "ep=5 must divide experts=96" in message
        assert compared() == before and not any("parallelism.ep" in r for r in before)
        assert greyed() == [True, True, True]
        set_field(driver, "parallelism.ep", "8")
        driver.find_element(By.ID, "compare-run").click()
        browser.wait_for(lambda: greyed() == [False, False, False], what="a valid comparison")
        assert text(driver, "compare-error") == ""


def test_a_comparison_of_the_job_before_an_edit_is_greyed_and_says_so(studio, browser):
    """After a comparison, an edit of the job left the earlier B's numbers in full colour
    under "Compare A with current job (B)" (a trial); so did pinning another A. The
    comparison is greyed and names the edit until compared again."""
    from selenium.webdriver.common.by import By

    def greyed() -> list[bool]:
        return driver.execute_script(
            "return ['compare-changes-holder', 'compare-table-holder', 'compare-charts']"
            ".map(function (id) { return document.getElementById(id)"
            ".classList.contains('stale'); })")

    def compare() -> None:
        driver.find_element(By.ID, "compare-run").click()
        browser.wait_for(lambda: greyed() == [False, False, False]
                         and driver.find_elements(By.CSS_SELECTOR, "#compare-table tbody tr"),
                         what="the comparison")

    with open_page(studio, browser) as driver:
        driver.find_element(By.ID, "pin-a").click()
        browser.wait_for(lambda: text(driver, "pin-note").startswith("A pinned"), what="A")
        set_field(driver, "batch.micro_seqs", "2")
        compare()
        set_field(driver, "batch.micro_seqs", "1")
        assert greyed() == [True, True, True]
        assert "edit of batch.micro_seqs" in text(driver, "compare-stale")
        compare()
        assert text(driver, "compare-stale") == ""
        driver.find_element(By.ID, "pin-a").click()
        browser.wait_for(lambda: greyed() == [True, True, True], what="the comparison greyed")
        assert "pinned before" in text(driver, "compare-stale")
        compare()
        assert text(driver, "compare-stale") == ""


def test_a_comparison_of_two_models_stays_legible(studio, browser):
    """A pasted config.json as job B filled the table of changes with its whole text, and
    B's out-of-memory line, unwrapped, widened B's column so that its numbers sat far from
    their labels (a trial): the config is shown by its start and length, the line wraps."""
    from pathlib import Path

    from selenium.webdriver.common.by import By

    config = (Path(__file__).resolve().parents[2] / "examples" / "hf" /
              "deepseek-v3.json").read_text()
    with open_page(studio, browser, height=1100) as driver:
        driver.find_element(By.ID, "pin-a").click()
        browser.wait_for(lambda: text(driver, "pin-note").startswith("A pinned"), what="A")
        set_field(driver, "model.source", "hf")
        set_field(driver, "hf.config", config)
        set_field(driver, "parallelism.pp", "1")
        browser.wait_for(lambda: "d=7168" in text(driver, "m-model"), what="DeepSeek-V3 as B")
        driver.find_element(By.ID, "compare-run").click()
        browser.wait_for(lambda: driver.find_elements(By.CSS_SELECTOR, "#compare-table tbody tr"),
                         what="the comparison")
        changes = {row.find_elements(By.TAG_NAME, "td")[0].text:
                   row.find_elements(By.TAG_NAME, "td")[2].text
                   for row in driver.find_elements(By.CSS_SELECTOR, "#compare-changes tbody tr")}
        shown = changes["hf.config"]
        assert shown.endswith(f"… ({len(config):,} characters)") and len(shown) < 140, shown
        rows = driver.find_elements(By.CSS_SELECTOR, "#compare-table tbody tr")
        verdict_b = rows[-1].find_elements(By.TAG_NAME, "td")[2]
        assert "OUT OF MEMORY" in verdict_b.text
        assert verdict_b.size["width"] < 450, verdict_b.size  # wrapped, not one long line


def test_a_run_records_explain_panel_shows_the_measured_gap(browser):
    """The explain panel of a studio opened on a run record shows the measured-vs-predicted
    table `mosaic explain RUNS.yaml#ID` prints (it showed the bound and levers only)."""
    from pathlib import Path

    from selenium.webdriver.common.by import By

    from mosaic.studio.server import load_job_document, load_run_record

    path = (Path(__file__).resolve().parents[2] / "examples"
            / "runs_example.yaml#example-bridge-qwen3-30b-a3b-b200-8-mxfp8")
    with studio_page(browser, job_document=load_job_document(path),
                     record=load_run_record(path)) as driver:
        driver.find_element(By.ID, "explain-run").click()
        rows = browser.wait_for(lambda: driver.find_elements(By.CSS_SELECTOR,
                                                             "#gap-table tr"),
                                what="the gap table")
        cells = {row.find_elements(By.TAG_NAME, "td")[0].text:
                 row.find_elements(By.TAG_NAME, "td")[1].text for row in rows}
        assert cells["measured step time"] == "28.191 s", cells
        assert driver.find_element(By.ID, "explain-gap").is_displayed()
        assert "within 5%" in text(driver, "gap-findings")
        browser.screenshot(driver, "studio_record_gap")
        assert browser.console_errors(driver) == []


def test_a_rule_on_two_fields_is_said_once_in_a_panels_line(page, browser):
    """Megatron-Core's flex dispatcher at etp·ep = 1 is refused beside etp and ep, and
    dp·micro_batch beside the nodes and the micro-batch: Explain's and Export's one error
    line said each message twice, joined by '; ' (a review)."""
    try:
        set_field(page, "batch.micro_seqs", "3")
        rule = "dp·micro_batch=32·3 must divide global_batch=1024"
        for button, error in (("explain-run", "explain-error"), ("export-run", "export-error")):
            page.execute_script(f"document.getElementById('{button}').click()")
            message = browser.wait_for(lambda error=error: text(page, error), what=error)
            assert message.count(rule) == 1, message
    finally:
        set_field(page, "batch.micro_seqs", DEFAULT_FORM["batch.micro_seqs"])
