"""Authoring helpers: build lesson notebooks with the right nbgrader metadata.

Used by whoever writes a lesson (see README, "Adding a lesson"); a notebook can equally be edited in
JupyterLab with nbgrader's "Create Assignment" toolbar. Each cell is (kind, source, nbgrader, tags).
"""
import json
from pathlib import Path

import nbformat

__all__ = ["md", "code", "locked", "solution", "test", "repro", "write", "setup_source", "badge"]

REPO = "https://github.com/trainclinic/trainclinic"
BRANCH = "main"


def badge(lesson, repo=REPO, branch=BRANCH):
    """The "Open in Colab" badge for a lesson's release notebook."""
    path = repo.removeprefix("https://github.com/")
    url = f"https://colab.research.google.com/github/{path}/blob/{branch}/notebooks/{lesson}/{lesson}.ipynb"
    return f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]({url})"


def setup_source(repo=REPO, branch=BRANCH, extra=""):
    """The locked setup cell: install trainclinic only when missing (never torch), then pick the device."""
    return (
        "# Setup. In Colab this installs trainclinic once, with --no-deps: Colab's own torch is never touched.\n"
        "import importlib.util, subprocess, sys\n"
        "if importlib.util.find_spec(\"trainclinic\") is None:\n"
        f"    subprocess.run([sys.executable, \"-m\", \"pip\", \"install\", \"-q\", \"--no-deps\", \"git+{repo}@{branch}\"], check=True)\n"
        "import torch\n"
        "import trainclinic as tc\n"
        + extra
        + "device = tc.pick_device()\n"
        "tc.banner(device);"
    )




def _meta(grade_id, *, grade=False, solution=False, locked=False, points=None):
    meta = {"grade": grade, "grade_id": grade_id, "locked": locked, "schema_version": 3, "solution": solution, "task": False}
    if points is not None:
        meta["points"] = points
    return meta


def md(source, grade_id=None):
    """A markdown cell (locked when it has a grade_id)."""
    return ("markdown", source, _meta(grade_id, locked=True) if grade_id else None, [])


def code(source, tags=()):
    """A plain code cell the learner may edit and run."""
    return ("code", source, None, list(tags))


def repro(source):
    """A code cell that raises on purpose (tagged raises-exception so runners continue)."""
    return ("code", source, None, ["raises-exception"])


def locked(grade_id, source):
    """A read-only code cell (nbgrader restores it when grading)."""
    return ("code", source, _meta(grade_id, locked=True), [])


def solution(grade_id, source):
    """An answer cell: the reference between ### BEGIN SOLUTION / ### END SOLUTION is stripped on release."""
    return ("code", source, _meta(grade_id, solution=True), [])


def test(grade_id, points, source):
    """An autograded test cell worth `points`."""
    return ("code", source, _meta(grade_id, grade=True, locked=True, points=points), [])


def write(path, cells):
    """Write the cells as a notebook with outputs stripped."""
    nb = nbformat.v4.new_notebook()
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    for kind, source, meta, tags in cells:
        cell = nbformat.v4.new_markdown_cell(source) if kind == "markdown" else nbformat.v4.new_code_cell(source)
        cell.pop("id", None)
        if meta:
            cell.metadata["nbgrader"] = meta
        if tags:
            cell.metadata["tags"] = tags
        nb.cells.append(cell)
    nb.nbformat_minor = 4  # nbgrader strips cell ids; 4.4 has none
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
