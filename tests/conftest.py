"""Shared fixtures: paths, the lesson list (autograder.lessons), notebook helpers."""
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")  # 2 shared cores: one torch thread per process (kernels inherit it)

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tools"), str(Path(__file__).resolve().parent)]

from autograder.lessons import lessons, release_nb, source_nb  # noqa: E402  (the course's one lesson list)

LESSONS = lessons()


def load(path):
    """The notebook as a dict."""
    return json.loads(Path(path).read_text())


def grade_id(cell):
    """The cell's nbgrader grade_id, or None."""
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def text(cell):
    """A cell's source as one string."""
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def outputs_text(cell):
    """Everything a code cell printed or raised, as one string."""
    parts = []  # a kernel may flush one print() as several stream outputs: streams join with nothing between
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append("".join(out.get("text", "")))
        elif out.get("output_type") == "error":
            parts.append(f"\n{out.get('ename')}: {out.get('evalue')}\n")
    return "".join(parts)
