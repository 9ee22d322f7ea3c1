"""Every lesson in JupyterLab, in headless Chromium, as a learner sees it.

One JupyterLab (temporary copy of the course, free port, no token) serves all lessons. For each lesson the
release notebook, with its answer cells filled from the solution, is opened and run with Run > Run All Cells.
Asserted: the setup banner, PyTorch's own error under every repro cell, passing checks, a LivePlot that
redraws while the loop trains, an explore slider that redraws its plot when moved, and no widget or
JavaScript error. Screenshots go to artifacts/browser/ (docs/lesson01.png with TRAINCLINIC_DOC_SCREENSHOT=1).
"""
import json
import os
import shutil
import time
from pathlib import Path

import pytest

from browser_helpers import ROOT, JupyterLab, failure_message, fill, lessons

# one xdist group: `make test` (--dist loadgroup) runs every lesson on one worker, against one server
pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("browser")]

CHROMIUM = os.environ.get("TRAINCLINIC_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--disable-sync"]
RUN_TIMEOUT = 240  # seconds for one lesson's Run All (about 15 s on an idle 2-core CPU)
ARTIFACTS = ROOT / "artifacts" / "browser"
LESSONS = lessons()
# The only resource from outside a lesson may load; served blank here (no network), so the page stays quiet.
EXTERNAL_OK = ("https://colab.research.google.com/assets/colab-badge.svg",)
BLANK_SVG = '<svg xmlns="http://www.w3.org/2000/svg" width="117" height="20"/>'

# Records every <img> that appears (or changes src) in a cell's output, with a hash of its src and whether
# the cell was still running at that moment (its execution count is set only when the kernel replies).
OBSERVE = """() => {
  if (window.__tc) return;
  window.__tc = {imgs: []};
  const hash = (s) => { let h = 2166136261; for (let i = 0; i < s.length; i += 7) { h ^= s.charCodeAt(i); h = Math.imul(h, 16777619); } return (h >>> 0) + ':' + s.length; };
  const record = (img) => {
    const cell = img.closest('.jp-Notebook .jp-Cell');
    if (!cell) return;
    const cells = Array.from(document.querySelectorAll('.jp-Notebook .jp-Cell'));
    const i = cells.indexOf(cell);
    const w = window.jupyterapp.shell.currentWidget;
    const model = w && w.content && w.content.widgets[i] && w.content.widgets[i].model;
    window.__tc.imgs.push({cell: i, key: hash(img.getAttribute('src') || ''),
      busy: !!model && (model.executionState === 'running' || model.executionCount === null),
      widget: !!img.closest('.widget-output'), t: performance.now()});
  };
  new MutationObserver((muts) => {
    for (const m of muts) {
      if (m.type === 'attributes' && m.target.tagName === 'IMG') record(m.target);
      for (const n of m.addedNodes || []) {
        if (n.nodeType !== 1) continue;
        if (n.tagName === 'IMG') record(n); else n.querySelectorAll('img').forEach(record);
      }
    }
  }).observe(document.body, {subtree: true, childList: true, attributes: true, attributeFilter: ['src']});
}"""

KERNEL_IDLE = """() => {
  const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
  const k = w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
  return !!k && k.connectionStatus === 'connected' && k.status === 'idle';
}"""

PROMPTS = """() => Array.from(document.querySelectorAll('.jp-Notebook .jp-Cell')).map(
  (c) => c.classList.contains('jp-CodeCell') ? (c.querySelector('.jp-InputPrompt') || {}).textContent || '' : null)"""


def _src(cell):
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """A temporary course copy whose release notebooks have their answers filled in."""
    root = tmp_path_factory.mktemp("course")
    shutil.copytree(ROOT / "notebooks", root / "notebooks")
    for lesson in LESSONS:
        nb = fill(lesson)
        (root / "notebooks" / lesson / f"{lesson}.ipynb").write_text(json.dumps(nb, indent=1, ensure_ascii=False))
    return root


@pytest.fixture(scope="module")
def lab(course, tmp_path_factory):
    """One JupyterLab for all lessons, stopped (with its kernels) at the end."""
    server = JupyterLab(course, tmp_path_factory.mktemp("labhome"))
    with server:
        yield server


@pytest.fixture(scope="module")
def browser():
    """Headless Debian Chromium through Playwright (never a downloaded browser)."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (make chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


def _wait(page, js, what, timeout, arg=None):
    try:
        page.wait_for_function(js, arg=arg, timeout=timeout * 1000, polling=250)
    except Exception as e:
        raise AssertionError(f"timed out after {timeout} s waiting for {what}") from e


def _run_all(page, n_code, timeout):
    """Run > Run All Cells through the menu bar, then wait until every code cell has run."""
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
    # queued cells show [*]; done when none is queued or running, all have a number, and the kernel is idle
    done = f"""() => {{
      const p = ({PROMPTS})().filter((x) => x !== null);
      return p.length === {n_code} && p.every((x) => /\\[\\d+\\]/.test(x)) && ({KERNEL_IDLE})();
    }}"""
    start = time.monotonic()
    try:
        page.wait_for_function(done, timeout=timeout * 1000, polling=250)
    except Exception as e:
        prompts = page.evaluate(PROMPTS)
        raise AssertionError(f"Run All did not finish in {timeout} s; prompts: {prompts}") from e
    return time.monotonic() - start


def _cell(page, i):
    return page.locator(".jp-Notebook .jp-Cell").nth(i)


def _output_text(page, i):
    return _cell(page, i).locator(".jp-Cell-outputWrapper").inner_text()


def _images(page, i):
    return [r for r in page.evaluate("() => window.__tc.imgs") if r["cell"] == i]


def _move_slider(page, cell):
    """Move the first slider one step with the keyboard (as a learner would); return (before, after) readouts."""
    slider = cell.locator(".widget-slider").first
    handle = slider.get_by_role("slider").first
    readout = slider.locator(".widget-readout").first
    before = readout.inner_text()
    handle.focus()
    handle.press("ArrowRight")
    page.wait_for_timeout(300)
    if readout.inner_text() == before:  # at its maximum: go the other way
        handle.press("ArrowLeft")
        page.wait_for_timeout(300)
    return before, readout.inner_text()


@pytest.mark.parametrize("lesson", LESSONS)
def test_lesson_in_jupyterlab(lesson, lab, browser, course):
    nb = json.loads((course / "notebooks" / lesson / f"{lesson}.ipynb").read_text())
    cells = nb["cells"]
    code = [i for i, c in enumerate(cells) if c["cell_type"] == "code"]
    tags = {i: c.get("metadata", {}).get("tags", []) for i, c in enumerate(cells)}
    nbg = {i: c.get("metadata", {}).get("nbgrader", {}) for i, c in enumerate(cells)}
    setup = [i for i in code if nbg[i].get("grade_id") == "setup"]
    repros = [i for i in code if "raises-exception" in tags[i]]
    checks = [i for i in code if nbg[i].get("grade")]
    live = [i for i in code if "LivePlot(" in _src(cells[i])]  # may be empty: a lesson may draw its own widget
    explore = [i for i in code if "explore(" in _src(cells[i])]
    assert setup and repros and checks, f"{lesson}: needs a setup cell, repro cells and check cells"
    assert explore, f"{lesson}: no cell calls tc.explore"

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    external = []

    def offline(route):
        external.append(route.request.url)
        route.fulfill(status=200, content_type="image/svg+xml", body=BLANK_SVG)

    context.route(lambda url: not url.startswith(lab.url), offline)
    page = context.new_page()
    console_errors = []
    page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: console_errors.append(f"uncaught: {e}"))
    try:
        # a workspace of its own per lesson: only this notebook open, whatever the last lesson left
        page.goto(f"{lab.url}/lab/workspaces/{lesson}/tree/notebooks/{lesson}/{lesson}.ipynb?reset", wait_until="domcontentloaded", timeout=90_000)
        _wait(page, f"() => document.querySelectorAll('.jp-Notebook .jp-Cell').length === {len(cells)}",
              "the notebook to render", 90)
        _wait(page, KERNEL_IDLE, "the kernel to start", 90)
        page.evaluate(OBSERVE)
        seconds = _run_all(page, len(code), RUN_TIMEOUT)
        print(f"{lesson}: Run All took {seconds:.1f} s in the browser")

        # the setup banner
        for i in setup:
            assert "trainclinic:" in _output_text(page, i), f"{lesson}: the setup cell shows no banner"
        # PyTorch's own error under every repro cell; the intro's message under at least one
        message = failure_message(nb)
        shown = {i: _output_text(page, i) for i in repros}
        for i, out in shown.items():
            assert "Traceback" in out or "Error" in out, f"{lesson}: repro cell {i} shows no error:\n{out[:500]}"
        if message:  # its first words (a simulation raises a subclass, with other numbers, and says so)
            words = " ".join(message.partition(": ")[2].split()[:4]).rstrip(".,;:!")
            assert any(words in out for out in shown.values()), \
                f"{lesson}: no repro cell shows '{words}...' (the failure named in the intro)"
        # the checks pass (the answers are the reference)
        for i in checks:
            out = _output_text(page, i)
            assert "✓" in out and "CheckFailed" not in out, f"{lesson}: check cell {i} did not pass:\n{out[:800]}"
        # no other cell raised or wrote to stderr
        for i in code:
            if i in repros:
                continue
            errs = _cell(page, i).locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')
            if errs.count():
                raise AssertionError(f"{lesson}: cell {i} wrote to stderr:\n{errs.first.inner_text()[:800]}")

        # the live plot: every LivePlot draws into a widget Output, and at least one cell's plot changed at
        # least twice while its training loop was running (a lesson may use its own live widget, e.g. a dashboard)
        records = [r for r in page.evaluate("() => window.__tc.imgs") if r["widget"] and r["cell"] not in explore]
        for i in live:
            assert any(r["cell"] == i for r in records), f"{lesson}: the LivePlot in cell {i} drew nothing"
        during = {i: len({r["key"] for r in records if r["cell"] == i and r["busy"]}) for i in code}
        best = max(during, key=during.get)
        assert during[best] >= 3, (f"{lesson}: no live plot changed twice while training "
                                   f"(distinct images drawn while running, per cell: { {i: n for i, n in during.items() if n} })")
        print(f"{lesson}: live plot in cell {best}: {during[best]} distinct images while training")
        live_cell = _cell(page, best)
        live_cell.scroll_into_view_if_needed()
        live_cell.evaluate("(el) => el.scrollIntoView({block: 'start'})")
        page.wait_for_timeout(300)
        page.screenshot(path=str(ARTIFACTS / f"{lesson}_live.png"))

        # the explorer: move a slider, the plot is redrawn; "show the failure" shows it. Both latencies recorded.
        for i in explore:
            cell = _cell(page, i)
            assert cell.locator(".widget-slider").count() >= 1, f"{lesson}: explore cell {i} shows no slider"
            _wait(page, f"() => window.__tc.imgs.some((r) => r.cell === {i})", "the explore plot", 60)
            seen = {r["key"] for r in _images(page, i)}
            cell.evaluate("(el) => el.scrollIntoView({block: 'start'})")
            start = page.evaluate("() => performance.now()")
            before, after = _move_slider(page, cell)
            assert before != after, f"{lesson}: the slider in cell {i} did not move ({before})"
            _wait(page, f"(seen) => window.__tc.imgs.some((r) => r.cell === {i} && !seen.includes(r.key))",
                  f"the explore plot of cell {i} to redraw after the slider moved {before} -> {after}", 120, arg=list(seen))
            drawn = min(r["t"] for r in _images(page, i) if r["key"] not in seen)
            _wait(page, KERNEL_IDLE, "the kernel to finish the rerun", 120)
            slider_s = (drawn - start) / 1000
            print(f"{lesson}: explore cell {i} redrew {slider_s:.2f} s after moving the slider {before} -> {after}")
            button = cell.get_by_role("button", name="show the failure")
            assert button.count() == 1, f"{lesson}: explore cell {i} has no 'show the failure' button"
            seen = {r["key"] for r in _images(page, i)}
            start = page.evaluate("() => performance.now()")
            button.click()
            failed = (f"(seen) => window.__tc.imgs.some((r) => r.cell === {i} && !seen.includes(r.key)) || "
                      f"/Error|Traceback/.test(document.querySelectorAll('.jp-Notebook .jp-Cell')[{i}]"
                      f".querySelector('.widget-output') ? document.querySelectorAll('.jp-Notebook .jp-Cell')[{i}]"
                      f".querySelector('.widget-output').innerText : '')")
            _wait(page, failed, f"explore cell {i} to show the failure", 120, arg=list(seen))
            failure_s = (page.evaluate("() => performance.now()") - start) / 1000
            new = [r["t"] for r in _images(page, i) if r["key"] not in seen]
            if new:
                failure_s = (min(new) - start) / 1000
            _wait(page, KERNEL_IDLE, "the kernel to finish the failure run", 120)
            print(f"{lesson}: explore cell {i} showed the failure {failure_s:.2f} s after the button")
            latency = {"cell": i, "slider_s": round(slider_s, 3), "failure_s": round(failure_s, 3)}
            (ARTIFACTS / f"explore-latency-{lesson}.json").write_text(json.dumps(latency))  # make bench prints them
        page.wait_for_timeout(500)
        page.screenshot(path=str(ARTIFACTS / f"{lesson}_explore.png"))
        if os.environ.get("TRAINCLINIC_DOC_SCREENSHOT") == "1" and lesson.startswith("01_"):
            live_cell.evaluate("(el) => el.scrollIntoView({block: 'start'})")
            page.wait_for_timeout(300)
            (ROOT / "docs").mkdir(exist_ok=True)
            page.screenshot(path=str(ROOT / "docs" / "lesson01.png"))

        body = page.locator("body").inner_text()
        assert "Error displaying widget" not in body, f"{lesson}: a widget failed to display"
        assert "Loading widget" not in body, f"{lesson}: a widget never finished loading"
        assert set(external) <= set(EXTERNAL_OK), f"{lesson}: the page loads from outside: {sorted(set(external))}"
        assert not console_errors, f"{lesson}: JavaScript console errors:\n" + "\n".join(console_errors[:20])
    except BaseException:
        try:
            page.screenshot(path=str(ARTIFACTS / f"{lesson}_failure.png"))
        except Exception:
            pass
        raise
    finally:
        try:  # shut the lesson's kernel down before the next lesson starts its own
            page.evaluate("() => window.jupyterapp.shell.currentWidget.sessionContext.shutdown()")
        except Exception:
            pass
        context.close()
