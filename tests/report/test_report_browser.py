"""The HTML reports in headless Chromium, offline: every figure draws, no console errors.

Screenshots go to $MOSAIC_TEST_ARTIFACTS (default: <tmp>/mosaic-browser-artifacts).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from mosaic.cli.main import app

pytest.importorskip("plotly")

runner = CliRunner()
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TINY = ["--q", "8,10", "--experts", "8,16", "--top-k", "1,2", "--split-factor", "1,2"]


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("reports")
    job = str(EXAMPLES / "appendix_e.yaml")
    commands = {
        "plan": ["plan", *TINY, "--nodes", "4", "--days", "10", "--workers", "1"],
        "perf": ["perf", job],
        "layouts": ["layouts", job, "--devices", "64", "--top", "20"],
        "validate": ["validate", str(EXAMPLES / "runs_example.yaml")],
        "sweep": ["sweep", "nodes", "--values", "2,4", *TINY, "--days", "10", "--workers", "1"],
        "compare": ["compare", job, str(EXAMPLES / "deepseek_v3_h100.yaml")],
        "explain": ["explain", job, "--measured-step-time-s", "40"],
    }
    paths = {}
    for kind, command in commands.items():
        paths[kind] = folder / f"{kind}.html"
        result = runner.invoke(app, [*command, "--html", str(paths[kind])])
        assert result.exit_code == 0, result.output
    return paths


@pytest.fixture(scope="module")
def offline_driver(browser):
    driver = browser.start_driver(offline=True, height=1600)
    yield driver
    driver.quit()


@contextlib.contextmanager
def page_at_width(browser: Any, width_px: int) -> Iterator[Any]:
    """An offline browser whose viewport is ``width_px`` wide (a phone at 420-500 px), quit
    after the test."""
    driver = browser.start_driver(offline=True, height=900)
    try:
        driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
            "width": width_px, "height": 900, "deviceScaleFactor": 1, "mobile": False})
        yield driver
    finally:
        driver.quit()


@pytest.mark.parametrize("kind", ["plan", "perf", "layouts", "validate", "sweep", "compare",
                                  "explain"])
def test_report_renders_offline(kind, reports, offline_driver, browser):
    driver = offline_driver
    driver.get(reports[kind].as_uri())
    holders, drawn = browser.wait_for(lambda: browser.figures_drawn(driver),
                                      what=f"{kind} figures to draw")
    assert holders >= 1 and drawn == holders
    assert browser.console_errors(driver) == []
    browser.screenshot(driver, f"report_{kind}")


def test_plan_report_table_sorts_and_filters(reports, offline_driver, browser):
    from selenium.webdriver.common.by import By

    driver = offline_driver
    driver.get(reports["plan"].as_uri())
    table = driver.find_element(By.ID, "candidates-table")
    headers = table.find_elements(By.CSS_SELECTOR, "thead th")
    column = [h.text for h in headers].index("MFU")

    def mfu_column() -> list[float]:
        return [float(row.find_elements(By.TAG_NAME, "td")[column].get_attribute("data-value"))
                for row in table.find_elements(By.CSS_SELECTOR, "tbody tr")
                if row.is_displayed()]

    losses_first = mfu_column()
    headers[column].click()
    ascending = mfu_column()
    assert ascending == sorted(losses_first)
    headers[column].click()
    assert mfu_column() == sorted(losses_first, reverse=True)
    # filter by a word some rows hold and others do not (which one depends on the plans)
    texts = [row.text.split() for row in table.find_elements(By.CSS_SELECTOR, "tbody tr")]
    words = sorted({w for words in texts for w in words if not w[0].isdigit()
                    and sum(w in t for t in texts) < len(texts)})
    assert words, "every row reads the same: nothing to filter on"
    box = driver.find_element(By.CSS_SELECTOR, "input[data-filter-for='candidates-table']")
    box.send_keys(words[0])
    shown = [row for row in table.find_elements(By.CSS_SELECTOR, "tbody tr")
             if row.is_displayed()]
    assert shown and all(words[0] in row.text for row in shown)
    assert len(shown) < len(losses_first)
    assert browser.console_errors(driver) == []


def test_figures_fit_a_phone_width(reports, browser):
    """At 420 px the sweep's six panels stack in one column and their legend goes below,
    and the toolbar that covered titles is hidden (a trial: titles overlapping, a 40 px
    plot beside its legend); nothing logs an error."""
    with page_at_width(browser, 420) as driver:
        driver.get(reports["sweep"].as_uri())
        browser.wait_for(lambda: browser.figures_drawn(driver)[1] >= 1, what="the sweep")
        browser.wait_for(lambda: driver.execute_script(
            "var p = document.querySelector('[data-figure] .js-plotly-plot');"
            "return p && p.layout.legend && p.layout.legend.orientation === 'h';"),
            what="the legend below the plot")
        layout = driver.execute_script(
            "var l = document.querySelector('[data-figure] .js-plotly-plot').layout;"
            "return {height: l.height, x: [l.xaxis.domain, l.xaxis6.domain],"
            "        y: [l.yaxis.domain, l.yaxis2.domain]};")
        # six panels stacked full width, the first above the second without overlap
        assert layout["height"] >= 6 * 300
        assert layout["x"] == [[0, 1], [0, 1]]
        assert layout["y"][1][1] < layout["y"][0][0]
        hidden = driver.execute_script(
            "var bar = document.querySelector('.modebar-container');"
            "return !bar || getComputedStyle(bar).display === 'none';")
        assert hidden
        assert browser.console_errors(driver) == []
        browser.screenshot(driver, "report_sweep_phone")


def test_the_step_legend_lists_every_group_without_scrolling(reports, offline_driver, browser):
    """The layouts report's three slanted bar names and ten term groups left the legend a
    scroll box hiding 'embedding + LM head', the largest grey segment (a trial)."""
    driver = offline_driver
    driver.get(reports["layouts"].as_uri())
    browser.wait_for(lambda: browser.figures_drawn(driver)[1] >= 1, what="the figures")
    scrolls = driver.execute_script(
        "var p = document.querySelector('[data-figure=fig-step] .js-plotly-plot');"
        "var bar = p.querySelector('.legend .scrollbar');"
        "return [p.querySelectorAll('.legend .traces').length,"
        "        bar ? bar.getBoundingClientRect().height : 0];")
    assert scrolls[0] >= 8 and scrolls[1] == 0, scrolls


TITLE_BOXES = (
    "return Array.prototype.map.call(document.querySelectorAll('[data-figure] .js-plotly-plot'),"
    " function (p) { var t = p.querySelector('.gtitle'); var bar = p.querySelector('.modebar');"
    "  var box = p.getBoundingClientRect(); var tb = t ? t.getBoundingClientRect() : null;"
    "  var mb = bar && getComputedStyle(bar.parentElement).display !== 'none'"
    "           ? bar.getBoundingClientRect() : null;"
    "  return {id: p.id, right: box.right, title: tb && [tb.left, tb.top, tb.right, tb.bottom],"
    "          bar: mb && mb.width > 0 ? [mb.left, mb.top, mb.right, mb.bottom] : null}; });")


@pytest.mark.parametrize("width", [1280, 500])
def test_figure_titles_fit_beside_the_toolbar_and_on_a_phone(width, reports, browser):
    """The validate parity title (120 characters) ran under the plotly toolbar at 1280 px
    and off the figure at 500 px: every report's titles stay inside their figure, clear of
    the toolbar."""
    with page_at_width(browser, width) as driver:
        for kind in ("validate", "layouts", "explain", "plan"):
            driver.get(reports[kind].as_uri())
            browser.wait_for(lambda: browser.figures_drawn(driver), what=f"{kind} figures")
            for plot in driver.execute_script(TITLE_BOXES):
                if plot["title"] is None:
                    continue
                left, top, right, bottom = plot["title"]
                assert right <= plot["right"] + 1, (kind, plot)
                if plot["bar"]:
                    b_left, b_top, b_right, b_bottom = plot["bar"]
                    apart = (right <= b_left or left >= b_right or bottom <= b_top
                             or top >= b_bottom)
                    assert apart, (kind, plot)
            assert browser.console_errors(driver) == []


def test_breakdown_legends_list_their_segments_top_down(reports, offline_driver, browser):
    """Beside the memory chart, whose legend lists its components top down as stacked, the
    step chart's legend read bottom up (compute, the bottom segment, first): both list the
    top segment first."""
    driver = offline_driver
    driver.get(reports["perf"].as_uri())
    browser.wait_for(lambda: browser.figures_drawn(driver), what="the perf figures")
    for figure in ("fig-step", "fig-memory"):
        legend, stacked = driver.execute_script(
            "var p = document.querySelector('[data-figure=' + arguments[0] + '] .js-plotly-plot');"
            "var names = Array.prototype.map.call(p.querySelectorAll('.legend .traces'),"
            "  function (t) { return t.textContent; });"
            "var seen = [];  p.data.forEach(function (t) {"
            "  if (t.showlegend !== false && seen.indexOf(t.name) < 0) { seen.push(t.name); } });"
            "return [names, seen];", figure)
        assert legend == stacked[::-1], (figure, legend, stacked)


def test_compare_bar_names_stay_level_and_apart_on_a_phone(reports, browser):
    """At 500 px the compare page's bar names (its two files) slanted under the step chart,
    squeezing its plot, and ran into each other under the memory chart."""
    with page_at_width(browser, 500) as driver:
        driver.get(reports["compare"].as_uri())
        browser.wait_for(lambda: browser.figures_drawn(driver), what="the compare figures")
        for figure in ("fig-compare-step", "fig-compare-memory"):
            ticks = driver.execute_script(
                "var p = document.querySelector('[data-figure=' + arguments[0] + ']');"
                "return Array.prototype.map.call(p.querySelectorAll('.xtick text'),"
                "  function (t) { var b = t.getBoundingClientRect();"
                "    return [t.getAttribute('transform') || '', b.left, b.right]; });", figure)
            assert len(ticks) == 2, (figure, ticks)
            assert not any("rotate" in transform for transform, _, _ in ticks), ticks
            assert ticks[0][2] < ticks[1][1], (figure, ticks)  # A's name ends before B's


def test_lever_names_leave_the_bars_room_on_a_phone(reports, browser):
    """At 500 px the explain page's 60-character lever names beside the bars took the
    figure's width: a 60 px plot, the names' ranks cut off its left edge. They are cut to
    their start (rank first) and stay inside the figure; the plot keeps half the width."""
    from mosaic.report.html.explain_page import LEVER_LABEL_CHARS

    with page_at_width(browser, 500) as driver:
        driver.get(reports["explain"].as_uri())
        browser.wait_for(lambda: browser.figures_drawn(driver), what="the explain figures")
        names, figure_left, plot_width, figure_width = driver.execute_script(
            "var p = document.querySelector('[data-figure=fig-levers] .js-plotly-plot');"
            "var ticks = Array.prototype.map.call(p.querySelectorAll('.ytick text'),"
            "  function (t) { return [t.textContent, t.getBoundingClientRect().left]; });"
            "return [ticks, p.getBoundingClientRect().left, p._fullLayout._size.w,"
            "        p._fullLayout.width];")
        assert names and any(len(name) > 10 for name, _ in names)
        assert all(name.split(".")[0].isdigit() for name, _ in names), names
        assert all(left >= figure_left for _, left in names), (names, figure_left)
        assert all(len(name) < LEVER_LABEL_CHARS for name, _ in names)
        assert plot_width >= figure_width / 2, (plot_width, figure_width)


def test_memory_limit_labels_are_clear_of_their_lines(reports, offline_driver, browser):
    """The compare page's H100 side labelled its usable line between it and the capacity
    line 8 GiB above, and the dotted line ran through the text: no label crosses a line."""
    driver = offline_driver
    driver.get(reports["compare"].as_uri())
    browser.wait_for(lambda: browser.figures_drawn(driver), what="the compare figures")
    labels, lines = driver.execute_script(
        "var p = document.querySelector('[data-figure=fig-compare-memory] .js-plotly-plot');"
        "function box(e) { var b = e.getBoundingClientRect();"
        "  return [b.left, b.top, b.right, b.bottom]; }"
        "return [Array.prototype.map.call(p.querySelectorAll('.annotation-text'), box),"
        "        Array.prototype.map.call(p.querySelectorAll('.shapelayer path'), box)];")
    assert len(labels) == 2 and len(lines) == 4, (labels, lines)
    for left, top, right, bottom in labels:
        for l_left, l_top, l_right, l_bottom in lines:
            crossed = (left < l_right and l_left < right and top < l_bottom
                       and l_top < bottom)
            assert not crossed, ((left, top, right, bottom), (l_left, l_top, l_right, l_bottom))


def test_a_row_taller_than_its_scroll_box_shows_its_label(tmp_path, offline_driver, browser):
    """validate's assumption table on the published runs: one assumption beside a hundred
    run ids made a row taller than the table's scroll box, and the label, centred in the
    row, sat below the box's edge: the reader saw ids with no assumption. Every cell's text
    starts at its row's top, inside the box."""
    from mosaic.report.html.page import (
        WHOLE_TABLE_ROWS,
        Column,
        Section,
        render_page,
        table_html,
    )

    ids = ", ".join(f"run-{i:03d}-with-a-long-name" for i in range(300))
    rows = [{"what": f"assumption {i}", "runs": 300, "ids": ids}
            for i in range(WHOLE_TABLE_ROWS + 1)]  # a scroll box
    table = table_html([Column("what", "assumption", text=True), Column("runs", "runs"),
                        Column("ids", "run ids", text=True)], rows, table_id="tall")
    page = tmp_path / "tall.html"
    page.write_text(render_page("tall rows", "", [Section("t", "t", [table])]))
    offline_driver.get(page.as_uri())
    box, label, count = offline_driver.execute_script(
        "function top(cell) { var r = document.createRange(); r.selectNodeContents(cell);"
        "  var b = r.getBoundingClientRect(); return [b.top, b.bottom]; }"
        "var b = document.querySelector('.scroll').getBoundingClientRect();"
        "var cells = document.querySelectorAll('#tall tbody tr:first-child td');"
        "return [[b.top, b.bottom], top(cells[0]), top(cells[1])];")
    row_height = offline_driver.execute_script(
        "return document.querySelector('#tall tbody tr').getBoundingClientRect().height;")
    assert row_height > box[1] - box[0], "the row must outgrow its box for this test"
    for text in (label, count):
        assert box[0] <= text[0] and text[1] <= box[1], (box, text)
    assert browser.console_errors(offline_driver) == []


def test_the_rank_legend_lists_every_group_without_scrolling(tmp_path, offline_driver,
                                                             browser):
    """validate on the published runs: the rank chart's 30-odd groups left its legend a
    scroll box in a 500 px figure, most groups out of view."""
    from mosaic.report.html.page import Section, figure_html, render_page
    from mosaic.report.html.validate_sweep_page import rank_figure

    runs = [{"id": f"g{g}-r{i}", "group": f"model {g} @ GPU",
             "measured_tokens_per_s_per_gpu": 100.0 + i,
             "predicted_tokens_per_s_per_gpu": 100.0 + (1 - i) * (g % 2) + i}
            for g in range(40) for i in range(2)]
    page = tmp_path / "ranks.html"
    page.write_text(render_page("ranks", "", [
        Section("r", "r", [figure_html(rank_figure(runs), "fig-ranks")])]))
    offline_driver.get(page.as_uri())
    browser.wait_for(lambda: browser.figures_drawn(offline_driver), what="the rank chart")
    entries, bar = offline_driver.execute_script(
        "var p = document.querySelector('[data-figure=fig-ranks] .js-plotly-plot');"
        "var bar = p.querySelector('.legend .scrollbar');"
        "return [p.querySelectorAll('.legend .traces').length,"
        "        bar ? bar.getBoundingClientRect().height : 0];")
    assert entries == 41 and bar == 0, (entries, bar)
    assert browser.console_errors(offline_driver) == []


def test_the_model_flops_pick_shows_where_it_is_the_optimum(reports, offline_driver, browser):
    """The frontier's legend lists the model-FLOPs pick (a diamond) and the cluster optimum
    (a star); where they are one geometry (a loss gap of 0, as in this plan and the
    README's) the 14 px diamond lay under the 18 px star: a legend entry with no mark on
    the chart. The diamond now reaches past the star around it."""
    driver = offline_driver
    driver.get(reports["plan"].as_uri())
    browser.wait_for(lambda: browser.figures_drawn(driver), what="the plan figures")
    boxes = driver.execute_script(
        "var p = document.querySelector('[data-figure=fig-frontier] .js-plotly-plot');"
        "var layers = p.querySelectorAll('.scatterlayer .trace');"
        "function box(symbol) { var i = p.data.findIndex(function (t) {"
        "    return t.marker && t.marker.symbol === symbol; });"
        "  var b = layers[i].querySelector('path.point').getBoundingClientRect();"
        "  return [b.left, b.top, b.right, b.bottom, p.data[i].x[0], p.data[i].y[0]]; }"
        "return [box('diamond'), box('star')];")
    diamond, star = boxes
    # the pick's loss is the law at D = C_model / (6 N_act), the optimum's at its own D: the
    # same tokens up to rounding, so the same point to a few ulp
    assert diamond[4:] == pytest.approx(star[4:], rel=1e-12), \
        "the case drawn here: the pick is the optimum"
    assert diamond[0] < star[0] and diamond[2] > star[2], boxes
    assert browser.console_errors(driver) == []


LABELS_AND_LINES = (
    "var p = document.querySelector('[data-figure=' + arguments[0] + '] .js-plotly-plot');"
    "function box(e) { var b = e.getBoundingClientRect();"
    "  return [b.left, b.top, b.right, b.bottom]; }"
    "return [Array.prototype.map.call(p.querySelectorAll('.annotation-text'), box),"
    "        Array.prototype.map.call(p.querySelectorAll('.shapelayer path'), box)];")


def test_an_out_of_memory_jobs_limit_labels_are_clear_of_the_lines(tmp_path, offline_driver,
                                                                    browser):
    """DeepSeek-V3 on H100s without a pipeline, ep 8 (391 GiB a GPU on 79 GiB): the bar
    stretched the axis, the 8 GiB between the capacity and usable lines became a few pixels,
    and the dotted capacity line ran through 'usable 71.2 GiB (90%)', labelled between
    the two."""
    html = tmp_path / "perf.html"
    result = runner.invoke(app, ["perf", str(EXAMPLES / "deepseek_v3_h100.yaml"), "--set",
                                 "parallelism.pp=1", "--set", "parallelism.vpp=1", "--set",
                                 "parallelism.ep=8",
                                 "--html", str(html)])
    assert result.exit_code == 0, result.output
    assert "OUT OF MEMORY" in result.output
    offline_driver.get(html.as_uri())
    browser.wait_for(lambda: browser.figures_drawn(offline_driver), what="the perf figures")
    labels, lines = offline_driver.execute_script(LABELS_AND_LINES, "fig-memory")
    assert len(labels) == 2 and len(lines) == 2, (labels, lines)
    for left, top, right, bottom in labels:
        for l_left, l_top, l_right, l_bottom in lines:
            crossed = (left < l_right and l_left < right and top < l_bottom
                       and l_top < bottom)
            assert not crossed, ((left, top, right, bottom), (l_left, l_top, l_right, l_bottom))
    assert browser.console_errors(offline_driver) == []


def test_every_lever_kind_in_the_legend_has_a_visible_mark(reports, offline_driver, browser):
    """The explain page's legend named 'unchanged' beside bars 0.003x long (or none, at
    exactly 1x): four levers with nothing drawn. Each kind the legend lists draws marks at
    least a few pixels wide."""
    driver = offline_driver
    driver.get(reports["explain"].as_uri())
    browser.wait_for(lambda: browser.figures_drawn(driver), what="the explain figures")
    widths = driver.execute_script(
        "var p = document.querySelector('[data-figure=fig-levers] .js-plotly-plot');"
        "var out = {};"
        "p.querySelectorAll('.barlayer .trace, .scatterlayer .trace').forEach(function (t) {"
        "  var name = t.__data__[0].trace.name;"
        "  out[name] = Array.prototype.map.call(t.querySelectorAll('path'), function (e) {"
        "    return e.getBoundingClientRect().width; }); });"
        "return out;")
    assert "unchanged" in widths, widths  # appendix_e has levers that change nothing
    for kind, marks in widths.items():
        assert marks and min(marks) >= 4, (kind, marks)
    assert browser.console_errors(driver) == []


def test_a_wide_tables_text_columns_do_not_read_one_word_a_line_at_800_px(reports, browser):
    """At 800 px the plan's ranked candidates (21 columns) are wider than the page, and the
    browser squeezed the layout column to its longest word: 'pp4 vpp4 ep8 dp8 mb4 zero2'
    one word a line, every candidate six lines tall. A row is as tall as the header."""
    with page_at_width(browser, 800) as driver:
        driver.get(reports["plan"].as_uri())
        header, rows = driver.execute_script(
            "var t = document.getElementById('candidates-table');"
            "return [t.tHead.rows[0].getBoundingClientRect().height,"
            "        Array.prototype.map.call(t.tBodies[0].rows, function (r) {"
            "          return r.getBoundingClientRect().height; })];")
        assert rows and max(rows) < 1.5 * header, (header, rows)
        assert browser.console_errors(driver) == []


# Records, when the page is laid out for print (the print media query's change, after the
# page's own listener in figures.js), each figure's drawn width beside its box's, whether a
# table box cuts its table, and what of the screen-only controls is shown.
RECORD_PRINT_LAYOUT = (
    "window.printed = null;"
    "window.matchMedia('print').addEventListener('change', function (m) {"
    "  if (!m.matches) { return; }"
    "  var plots = document.querySelectorAll('[data-figure] .js-plotly-plot');"
    "  var boxes = document.querySelectorAll('.whole, .scroll');"
    "  var shown = function (selector) { return Array.prototype.some.call("
    "    document.querySelectorAll(selector), function (e) {"
    "      return getComputedStyle(e).display !== 'none'; }); };"
    "  window.printed = {"
    "    figures: Array.prototype.map.call(plots, function (p) {"
    "      return [p.id, p._fullLayout.width, p.clientWidth]; }),"
    "    cut: Array.prototype.filter.call(boxes, function (b) {"
    "      return b.scrollWidth > b.clientWidth + 1 || b.scrollHeight > b.clientHeight + 1;"
    "    }).map(function (b) { return b.firstElementChild.id; }),"
    "    filter: shown('input.filter'), toolbar: shown('.modebar-container')};"
    "});")


def test_printing_fits_the_figures_and_tables_to_the_paper(reports, offline_driver, browser):
    """Printed from a 1400 px window, every figure kept its screen width and was cut at the
    paper's right edge (the frontier's legend, the P(optimal) panel), the ranked candidates
    lost their last columns past the paper's edge, and the toolbars and the filter box were
    printed. In the print layout each figure is drawn at its box's width, no table box cuts
    its table, and the screen controls are hidden; after printing the figures fill their
    boxes on the screen again."""
    driver = offline_driver
    driver.get(reports["plan"].as_uri())
    browser.wait_for(lambda: browser.figures_drawn(driver), what="the plan figures")
    screen = driver.execute_script(
        "return Array.prototype.map.call("
        "  document.querySelectorAll('[data-figure] .js-plotly-plot'),"
        "  function (p) { return p.clientWidth; });")
    driver.execute_script(RECORD_PRINT_LAYOUT)
    driver.print_page()
    printed = driver.execute_script("return window.printed;")
    assert printed is not None, "the print layout never applied"
    assert len(printed["figures"]) == len(screen) >= 4
    boxes_px = [box_px for _, _, box_px in printed["figures"]]
    assert all(box < width for box, width in zip(boxes_px, screen, strict=True)
               if width > 1000), ("the paper must be narrower than a full-width figure",
                                  boxes_px, screen)
    for name, drawn_px, box_px in printed["figures"]:
        assert abs(drawn_px - box_px) <= 1, (name, drawn_px, box_px)
    assert printed["cut"] == []
    assert not printed["filter"] and not printed["toolbar"]
    after = driver.execute_script(
        "return Array.prototype.map.call("
        "  document.querySelectorAll('[data-figure] .js-plotly-plot'),"
        "  function (p) { return [p._fullLayout.width, p.clientWidth]; });")
    assert all(abs(drawn - box) <= 1 for drawn, box in after), after
    assert [box for _, box in after] == screen
    assert browser.console_errors(driver) == []
