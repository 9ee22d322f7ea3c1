"""Drive nbgrader's real commands (generate_assignment, autograde, export) in a throw-away course folder."""
import copy
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

from autograder.lessons import variants_module
from conftest import ROOT, grade_id, load, release_nb, source_nb

__all__ = ["variants", "submission", "Course"]


def variants(lesson):
    """{name: spec} for a lesson: its module's VARIANTS plus 'reference' and 'blank'."""
    mod = importlib.import_module(variants_module(lesson))
    out = {"reference": {"cells": {}, "lost": {}}, "blank": {"cells": None, "lost": "all"}}
    out.update(mod.VARIANTS)
    return out


def submission(lesson, spec):
    """The notebook a student with this variant hands in."""
    if spec["cells"] is None:
        return load(release_nb(lesson))
    nb = copy.deepcopy(load(source_nb(lesson)))
    missing = set(spec["cells"]) - {grade_id(c) for c in nb["cells"]}
    assert not missing, f"variant names answer cells that {lesson} does not have: {missing}"
    for cell in nb["cells"]:
        if grade_id(cell) in spec["cells"]:
            cell["source"] = spec["cells"][grade_id(cell)]
    return nb


class Course:
    """A course folder in `tmp` holding a copy of solutions/, with its own gradebook."""

    def __init__(self, tmp):
        self.root = Path(tmp) / "course"
        if not self.root.exists():  # an existing course folder is reopened as it is
            self.root.mkdir(parents=True)
            (self.root / "solutions").symlink_to(ROOT / "solutions")
        self.db = Path(tmp) / "gradebook.db"
        self.env = dict(os.environ, TRAINCLINIC_COURSE_ROOT=str(self.root), TRAINCLINIC_GRADEBOOK=str(self.db))
        self.env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{self.env.get('PATH', '')}"  # nbgrader runs alembic

    def nbgrader(self, *args, check=True):
        """Run `nbgrader <args>` with the course's config; return the completed process."""
        cmd = [sys.executable, "-m", "nbgrader", *args]
        proc = subprocess.run(cmd, cwd=ROOT / "autograder", env=self.env, capture_output=True, text=True)
        if check and proc.returncode != 0:
            raise AssertionError(f"{' '.join(args)} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc

    def submit(self, student, lesson, nb):
        """Place a notebook as student's submission."""
        path = self.root / "submitted" / student / lesson / f"{lesson}.ipynb"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(nb))

    def scores(self, lesson):
        """{student: {grade_id: (score, max_score)}} from the gradebook."""
        from nbgrader.api import Gradebook

        out = {}
        with Gradebook(f"sqlite:///{self.db}") as gb:
            for sub in gb.assignment_submissions(lesson):
                nb = gb.find_submission_notebook(lesson, lesson, sub.student_id)
                out[sub.student_id] = {g.name: (g.score, g.max_score) for g in nb.grades}
        return out

    def autograded(self, student, lesson):
        """The autograded notebook of a student, as a dict."""
        return load(self.root / "autograded" / student / lesson / f"{lesson}.ipynb")
