"""The studio screenshots of docs/studio.md (docs/img/studio_*.png), in one command.

Starts the studio on a free localhost port, opens it in headless Chromium at 1280 px, and
saves the job editor, a field error, a comparison and the plan runner after three small
plans (the paper's ladder at 4 x 8 B200 for 10 days: the CLI's settings, then a Young-Daly
goodput, then a searched batch, so the plans table shows its goodput and B columns). It
stops on any unexpected browser console error. About a minute on a 2-core machine.
Usage: `python benchmarks/studio_screenshots.py [--out docs/img]` (needs
`pip install -e '.[studio,browser-tests]'`, Debian's chromium and chromium-driver).
"""

from __future__ import annotations

import argparse
import io
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_studio import _post, _start  # the studio on a free port (same folder)

WIDTH_PX = 1280  # a laptop's page width; the viewport, not the window (CDP override)
MAX_PNG_BYTES = 300_000  # docs/img stays small

# A small plan grid (12 geometries of the paper's ladder, seconds each plan) on a small
# cluster; the plans differ in the fields whose columns the plans table adds.
GRID = {"plan.gpu": "B200", "plan.nodes": "4", "plan.days": "10", "plan.q": "8,10",
        "plan.experts": "8,16", "plan.top_k": "1,2", "plan.split_factor": "1,2"}
PLANS = (
    GRID,
    # Young-Daly goodput: 50,000 h MTBF per GPU, 120 s checkpoints (plan/goodput.py)
    {"plan.mtbf_gpu_hours": "50000", "plan.checkpoint_s": "120"},
    # a searched batch, 256..2048 sequences under the DeepSeek rule (plan/batch.py)
    {"plan.mtbf_gpu_hours": "", "plan.checkpoint_s": "", "plan.global_batch": "256:2048",
     "plan.batch_rule": "deepseek"},
)


def wait_for(condition: Callable[[], Any], what: str, timeout_s: float = 120.0) -> Any:
    """Poll ``condition`` until it returns a truthy value, or stop with ``what``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            value = condition()
        except Exception:  # element not there yet
            value = None
        if value:
            return value
        time.sleep(0.1)
    raise SystemExit(f"error: timed out after {timeout_s:.0f} s waiting for {what}")


def start_browser(height_px: int) -> Any:
    """Headless Chromium with a ``WIDTH_PX`` x ``height_px`` viewport and its console log."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser = shutil.which("chromium") or shutil.which("google-chrome")
    driver_path = shutil.which("chromedriver")
    if browser is None or driver_path is None:
        raise SystemExit("error: needs chromium and chromedriver "
                         "(Debian: apt-get install chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--disable-gpu", "--hide-scrollbars",
                     f"--window-size={WIDTH_PX},{height_px}"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    driver.execute_cdp_cmd("Emulation.setDeviceMetricsOverride", {
        "width": WIDTH_PX, "height": height_px, "deviceScaleFactor": 1, "mobile": False})
    return driver


def set_field(driver: Any, key: str, value: str) -> None:
    """Paste ``value`` into the field ``key`` (fires the page's input and change events)."""
    driver.execute_script(
        "const el = document.getElementById(arguments[0]); el.value = arguments[1];"
        "el.dispatchEvent(new Event('input', {bubbles: true}));"
        "el.dispatchEvent(new Event('change', {bubbles: true}));",
        "f-" + key.replace(".", "-"), value)


def text(driver: Any, element_id: str) -> str:
    return driver.execute_script(
        "return document.getElementById(arguments[0]).textContent", element_id)


def check_console(driver: Any, expected: str | None = None) -> None:
    """Stop on a SEVERE console entry, except those naming ``expected`` (a 422 answer)."""
    errors = [entry["message"] for entry in driver.get_log("browser")
              if entry["level"] == "SEVERE" and not (expected and expected in entry["message"])]
    if errors:
        raise SystemExit(f"error: browser console: {errors}")


def save(png: bytes, path: Path) -> None:
    """Write ``png``, re-encoded as a 256-colour palette image where that keeps it under
    ``MAX_PNG_BYTES`` (a page of flat colours loses nothing visible)."""
    from PIL import Image

    if len(png) > MAX_PNG_BYTES:
        image = Image.open(io.BytesIO(png)).convert("RGB")
        buffer = io.BytesIO()
        image.quantize(256, method=Image.Quantize.MEDIANCUT).save(buffer, "PNG", optimize=True)
        png = buffer.getvalue()
    if len(png) > MAX_PNG_BYTES:
        raise SystemExit(f"error: {path.name} is {len(png):,} bytes (limit {MAX_PNG_BYTES:,})")
    path.write_bytes(png)
    print(f"  {path}  {len(png) / 1e3:.0f} kB")


def shoot(driver: Any, out: Path, name: str, selector: str, from_top: bool = False) -> None:
    """The elements ``selector`` matches (below the viewport too) with a margin, or with
    ``from_top`` the page from its top to their lowest bottom, as ``out/name.png``."""
    import base64

    left, top, right, bottom = driver.execute_script(
        "var boxes = Array.from(document.querySelectorAll(arguments[0])).map(function (el) {"
        "  return el.getBoundingClientRect(); });"
        "return [Math.min.apply(null, boxes.map(function (r) { return r.left; })),"
        "        Math.min.apply(null, boxes.map(function (r) { return r.top; })),"
        "        Math.max.apply(null, boxes.map(function (r) { return r.right; })),"
        "        Math.max.apply(null, boxes.map(function (r) { return r.bottom; }))]"
        ".map(function (v, i) { return v + (i % 2 ? window.scrollY : window.scrollX); });",
        selector)
    margin = 12
    if from_top:
        # the cut between two of the editor's rows, not through one
        cut = driver.execute_script(
            "var y = arguments[0]; document.querySelectorAll('.editor .field')"
            ".forEach(function (row) { var r = row.getBoundingClientRect();"
            "  var top = r.top + window.scrollY, bottom = r.bottom + window.scrollY;"
            "  if (top < y && y < bottom) { y = top - 2; } }); return y;", bottom + margin)
        clip = {"x": 0, "y": 0, "width": WIDTH_PX, "height": cut}
    else:
        clip = {"x": left - margin, "y": top - margin, "width": right - left + 2 * margin,
                "height": bottom - top + 2 * margin}
    shot = driver.execute_cdp_cmd("Page.captureScreenshot", {
        "format": "png", "captureBeyondViewport": True, "clip": {**clip, "scale": 1}})
    save(base64.b64decode(shot["data"]), out / f"{name}.png")


# the job's first screen: down to the step-time chart
JOB_SCREEN = "#chart-step"


def charts_drawn(driver: Any, *chart_ids: str) -> bool:
    return driver.execute_script(
        "return arguments[0].every(function (id) {"
        "  return document.querySelectorAll('#' + id + ' .trace path').length > 0; })",
        list(chart_ids))


def require_packages() -> None:
    """Stop with one line where the studio, Selenium or Pillow is missing."""
    import importlib.util

    missing = [name for name in ("fastapi", "uvicorn", "plotly", "selenium", "PIL")
               if importlib.util.find_spec(name) is None]
    if missing:
        raise SystemExit(f"error: {', '.join(missing)} not installed: "
                         "pip install -e '.[studio,browser-tests]'")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parents[1] / "docs" / "img",
                        help="folder for the PNGs (default: docs/img)")
    args = parser.parse_args()
    require_packages()
    args.out.mkdir(parents=True, exist_ok=True)
    from mosaic.studio.jobs import DEFAULT_FORM

    url, server = _start()
    _post(url, dict(DEFAULT_FORM))  # warm: the page's first prediction then takes its usual time
    driver = start_browser(height_px=1000)
    try:
        driver.get(url + "/")
        wait_for(lambda: driver.execute_script(
            "return document.body.getAttribute('data-perf-state') === 'ok'"), "first prediction")
        wait_for(lambda: charts_drawn(driver, "chart-step", "chart-memory"), "the job's charts")
        check_console(driver)
        print("studio screenshots:")
        shoot(driver, args.out, "studio_job", JOB_SCREEN, from_top=True)

        good_step = text(driver, "m-step")
        set_field(driver, "parallelism.ep", "5")  # 96 experts: ep must divide them
        wait_for(lambda: text(driver, "err-parallelism-ep"), "the field error")
        shoot(driver, args.out, "studio_field_error", JOB_SCREEN, from_top=True)
        check_console(driver, expected="/api/perf")  # the invalid form's 422 answers
        set_field(driver, "parallelism.ep", "8")
        wait_for(lambda: not text(driver, "err-parallelism-ep") and "stale" not in
                 driver.execute_script("return document.getElementById('metrics').className"),
                 "the job back")

        driver.find_element("id", "pin-a").click()
        wait_for(lambda: text(driver, "pin-note").startswith("A pinned"), "job A pinned")
        set_field(driver, "performance.checkpointing", "selective")
        wait_for(lambda: text(driver, "m-step") != good_step, "job B")
        driver.find_element("id", "compare-run").click()
        wait_for(lambda: charts_drawn(driver, "chart-compare-step", "chart-compare-memory"),
                 "the comparison")
        check_console(driver)
        shoot(driver, args.out, "studio_compare", "#compare")

        for number, form in enumerate(PLANS, start=1):
            for key, value in form.items():
                set_field(driver, key, value)
            driver.find_element("id", "plan-run").click()
            wait_for(lambda n=number: text(driver, "plan-state").startswith(f"plan {n}: done"),
                     f"plan {number}")
        check_console(driver)
        shoot(driver, args.out, "studio_plan", "#plan")
    finally:
        driver.quit()
        server.should_exit = True


if __name__ == "__main__":
    main()
