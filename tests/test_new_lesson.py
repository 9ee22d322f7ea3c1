"""`make new-lesson` writes a skeleton that follows the template and grades right (the full run: make test-lesson)."""
import importlib.util
import json
import re
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT
from test_release import template_problems

COPY = ("solutions", "notebooks", "src", "tools", "autograder", "tests/variants")


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    """A copy of the course with lesson 99_probe_lesson scaffolded by tools/new_lesson.py."""
    root = tmp_path_factory.mktemp("course")
    for d in COPY:
        shutil.copytree(ROOT / d, root / d, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", ".ipynb_checkpoints"))
    for f in ("README.md", "pyproject.toml"):
        shutil.copy(ROOT / f, root / f)
    proc = subprocess.run([sys.executable, "tools/new_lesson.py", "99", "probe_lesson", "Probe lesson"], cwd=root,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    again = subprocess.run([sys.executable, "tools/new_lesson.py", "99", "probe_lesson", "Probe lesson"], cwd=root,
                           capture_output=True, text=True, timeout=120)
    assert again.returncode != 0 and "exists already" in again.stderr, "scaffolding twice must refuse to overwrite"
    return root


def test_scaffold_follows_the_template(course):
    lesson = "99_probe_lesson"
    nb = json.loads((course / "solutions" / lesson / f"{lesson}.ipynb").read_text())
    assert template_problems(lesson, nb["cells"], course) == []
    assert (course / "notebooks" / lesson / f"{lesson}.ipynb").exists()
    assert "[Probe lesson](notebooks/99_probe_lesson/99_probe_lesson.ipynb)" in (course / "README.md").read_text()
    proc = subprocess.run([sys.executable, "tools/release.py", "--check", "99"], cwd=course, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_scaffold_check_grades_reference_blank_and_variants(course):
    """The skeleton's own check, called in-process: reference passes, blank and the wrong variant fail as declared."""
    import torch
    from trainclinic.checks import CheckFailed

    spec = importlib.util.spec_from_file_location("trainclinic.checks.probe_lesson",
                                                  course / "src" / "trainclinic" / "checks" / "probe_lesson.py")
    checks = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(checks)
    variants = _module(course / "tests" / "variants" / "probe_lesson.py", "probe_variants").VARIANTS
    nb = json.loads((course / "solutions" / "99_probe_lesson" / "99_probe_lesson.ipynb").read_text())
    answer = next("".join(c["source"]) for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("solution")
                  and c["cell_type"] == "code")

    def fn(source):
        scope = {"torch": torch}
        exec(source, scope)
        return scope["fit_features"]

    for seed in range(3):
        checks.check_fit_features(fn(answer), seed=seed)
    with pytest.raises(CheckFailed, match="not written yet"):
        checks.check_fit_features(fn("def fit_features(x, n):\n    raise NotImplementedError()\n"))
    assert any(v["lost"] for v in variants.values()) and any(not v["lost"] for v in variants.values())
    for name, v in variants.items():
        run = lambda: [checks.check_fit_features(fn(v["cells"]["fit_features"]), seed=s) for s in range(3)]  # noqa: E731
        if v["lost"]:
            with pytest.raises(CheckFailed, match=re.escape(list(v["lost"].values())[0])):
                run()
        else:
            run()
