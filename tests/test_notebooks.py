"""Every solution notebook runs top to bottom in a real kernel (widgets live, as a learner would run it)."""
import os

import nbformat
import pytest
from nbclient import NotebookClient

from conftest import LESSONS, grade_id, outputs_text, source_nb


CASES = [pytest.param(lesson, marks=pytest.mark.xdist_group(f"run-{lesson}"), id=lesson) for lesson in LESSONS]


@pytest.fixture(scope="module")
def executed():
    cache = {}

    def run(lesson):
        if lesson not in cache:
            nb = nbformat.read(source_nb(lesson), as_version=4)
            os.environ.pop("NBGRADER_EXECUTION", None)  # the kernel inherits it: widgets must be live here
            path = str(source_nb(lesson).parent)
            NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": path}}).execute()
            cache[lesson] = nb
        return cache[lesson]

    return run


@pytest.mark.parametrize("lesson", CASES)
def test_solution_runs_with_every_check_passing(executed, lesson):
    nb = executed(lesson)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        tags = cell.metadata.get("tags", [])
        errors = [o for o in cell.outputs if o.output_type == "error"]
        stderr = [o for o in cell.outputs if o.output_type == "stream" and o.name == "stderr"]
        if "raises-exception" in tags:
            assert errors, f"repro cell did not fail:\n{cell.source}"
            assert errors[0].ename not in ("NameError", "SyntaxError", "ImportError", "AttributeError"), errors[0].evalue
        else:
            assert not errors, f"{errors[0].ename}: {errors[0].evalue}\n{cell.source}"
        assert not stderr, f"stderr in a cell:\n{stderr[0].text[:800]}\n{cell.source}"
        if cell.metadata.get("nbgrader", {}).get("grade"):
            calls = cell.source.count("checks.check_")
            assert outputs_text(cell).count("✓ ") == calls, f"{grade_id(cell)}: {outputs_text(cell)}"


@pytest.mark.parametrize("lesson", CASES)
def test_live_plot_uses_widgets_in_a_kernel(executed, lesson):
    """Outside grading, the training plot is an ipywidgets Output that redraws (not a static image)."""
    nb = executed(lesson)
    widget_views = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
                    if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    assert widget_views, "no widget was displayed"
