"""The nbgrader pipeline's static side: release without drift, template conformity, validation."""
import json
import subprocess
import sys

import pytest

from conftest import LESSONS, ROOT, grade_id, load, release_nb, source_nb, text


def test_there_are_lessons():
    assert LESSONS and LESSONS[0] == "01_device_mismatch"


def test_release_has_no_drift():
    """notebooks/ is exactly what `make release` generates from solutions/."""
    proc = subprocess.run([sys.executable, "tools/release.py", "--check"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.name for p in (ROOT / "notebooks").iterdir() if p.is_dir()) == LESSONS


@pytest.mark.parametrize("lesson", LESSONS)
def test_sources_have_no_outputs(lesson):
    for cell in load(source_nb(lesson))["cells"]:
        if cell["cell_type"] == "code":
            assert not cell.get("outputs") and cell.get("execution_count") is None


SECTIONS = ("Reproduce", "Diagnose", "Fix", "Check", "Explore", "Troubleshooting")  # docs/lesson-template.md


def template_problems(lesson, cells, root=ROOT):
    """Everything a lesson's source notebook lacks against docs/lesson-template.md, as a list of sentences."""
    from nbcells import badge, setup_source
    from release import settings

    from autograder.lessons import slug, variants_file

    found = []
    need = found.append
    md = [(i, text(c)) for i, c in enumerate(cells) if c["cell_type"] == "markdown"]
    metas = [c.get("metadata", {}).get("nbgrader", {}) for c in cells]
    first = text(cells[0]) if cells else ""
    if not first.startswith(f"# Lesson {lesson[:2]} · "):
        need(f"the first cell's title is not '# Lesson {lesson[:2]} · <title>'")
    if badge(lesson, *settings()) not in first:
        need("the first cell has no Open in Colab badge for this lesson (make release stamps it)")
    for part in ("**The failure", "**What you will learn**", "**Prerequisites:**"):
        if part not in first:
            need(f"the first cell has no {part}")
    setup = cells[1] if len(cells) > 1 else {"metadata": {}, "source": ""}
    if grade_id(setup) != "setup" or not setup["metadata"].get("nbgrader", {}).get("locked"):
        need("the second cell is not the locked setup cell (grade_id 'setup')")
    if not text(setup).startswith(setup_source(*settings()).split("import torch")[0]):
        need("the setup cell does not start with the Colab bootstrap (nbcells.setup_source)")
    if "device = tc.pick_device()" not in text(setup):
        need("the setup cell does not pick the device (device = tc.pick_device())")
    heads = {}
    for i, src in md:
        for line in src.splitlines():
            if line.startswith("## "):
                for name in SECTIONS:
                    if name.lower() in line.lower() and name not in heads:
                        heads[name] = i
    missing = [n for n in SECTIONS if n not in heads]
    if missing:
        need(f"no '## N · ...' section for {', '.join(missing)}")
    order = [heads[n] for n in SECTIONS if n in heads]
    if order != sorted(order):
        need(f"the sections are not in the template's order ({' > '.join(SECTIONS)})")
    at = lambda name, default: heads.get(name, default)  # noqa: E731
    end = len(cells)
    if not any(c["cell_type"] == "code" and at("Reproduce", 0) < i < at("Diagnose", end) for i, c in enumerate(cells)):
        need("no code cell reproduces the failure in the Reproduce section")
    if not any("raises-exception" in c.get("metadata", {}).get("tags", []) for c in cells):
        need("no cell tagged raises-exception (a failure that raises shows PyTorch's own exception)")
    if not any(at("Reproduce", 0) < i < at("Diagnose", end) and "how to read" in src.lower() for i, src in md):
        need("no 'How to read the message' part after the repro")
    solutions = [i for i, m in enumerate(metas) if m.get("solution")]
    tests = [i for i, m in enumerate(metas) if m.get("grade")]
    if not solutions:
        need("no answer cell (nbgrader solution)")
    if not tests:
        need("no graded check cell (nbgrader grade)")
    for i in solutions:
        if cells[i]["cell_type"] == "code" and "### BEGIN SOLUTION" not in text(cells[i]):
            need(f"answer cell {grade_id(cells[i])} has no ### BEGIN SOLUTION / ### END SOLUTION")
        if not at("Fix", 0) < i < at("Check", end):
            need(f"answer cell {grade_id(cells[i])} is not in the Fix section")
    for i in tests:
        meta, src = metas[i], text(cells[i])
        gid = meta.get("grade_id")
        if not meta.get("points", 0) > 0:
            need(f"{gid} is worth no points")
        if not src.startswith('"""'):
            need(f"{gid} does not start with its title docstring")
        if "### BEGIN HIDDEN TESTS" not in src:
            need(f"{gid} has no hidden tests")
        if f"from trainclinic.checks import {slug(lesson)} as checks" not in src:
            need(f"{gid} does not import its checks from trainclinic.checks.{slug(lesson)}")
        if not at("Check", 0) < i < at("Explore", end):
            need(f"{gid} is not in the Check section")
    if solutions and tests and max(solutions) > min(tests):
        need("an answer cell comes after a check cell")
    explore = [i for i, c in enumerate(cells) if c["cell_type"] == "code" and "explore(" in text(c)]
    if not any(at("Explore", end) < i < at("Troubleshooting", end) for i in explore):
        need("no explore widget (tc.explore(...)) in the Explore section")
    if any("failure=" not in text(cells[i]) for i in explore):
        need("an explore call has no failure= (the settings that show the failure)")
    trouble = [src for i, src in md if i >= at("Troubleshooting", end)]
    if not any("| Symptom | Cause | Fix |" in src for src in trouble):
        need("no troubleshooting table (| Symptom | Cause | Fix |)")
    if not any("**Recap.**" in src for src in trouble):
        need("no **Recap.** after the troubleshooting table")
    ids = [m["grade_id"] for m in metas if m.get("grade_id")]
    if len(set(ids)) != len(ids):
        need(f"duplicate grade ids: {sorted({g for g in ids if ids.count(g) > 1})}")
    if not (root / "src" / "trainclinic" / "checks" / f"{slug(lesson)}.py").exists():
        need(f"no checks module src/trainclinic/checks/{slug(lesson)}.py")
    if not variants_file(lesson, root).exists():
        need(f"no variants file {variants_file(lesson, root).relative_to(root)}")
    if f"(notebooks/{lesson}/{lesson}.ipynb)" not in (root / "README.md").read_text():
        need("no row for the lesson in the README's lessons table")
    return found


@pytest.mark.parametrize("lesson", LESSONS)
def test_lesson_follows_the_template(lesson):
    """Every gap against docs/lesson-template.md, listed in one message."""
    found = template_problems(lesson, load(source_nb(lesson))["cells"])
    assert not found, f"{lesson} does not follow docs/lesson-template.md:\n- " + "\n- ".join(found)


def test_template_check_finds_every_gap():
    """Each rule of the template check can fail: a notebook stripped of everything breaks every one of them."""
    lesson = LESSONS[0]
    cells = load(source_nb(lesson))["cells"]
    assert template_problems(lesson, cells) == []
    bare = [{"cell_type": "markdown", "metadata": {}, "source": "x"}, {"cell_type": "markdown", "metadata": {}, "source": ""}]
    found = template_problems(lesson, bare)
    for part in ("title", "badge", "The failure", "setup cell", "Colab bootstrap", "pick the device", "section for",
                 "no code cell reproduces", "raises-exception", "How to read", "no answer cell", "no graded check", "explore widget",
                 "troubleshooting table", "Recap"):
        assert any(part in f for f in found), f"no problem mentions {part!r}: {found}"
    shuffled = [cells[0], cells[1]] + list(reversed(cells[2:]))  # sections out of order, answers after checks
    found = template_problems(lesson, shuffled)
    assert any("order" in f for f in found) and any("after a check cell" in f for f in found), found
    dup = cells + [dict(c) for c in cells if c.get("metadata", {}).get("nbgrader", {}).get("grade")][:1]
    assert any("duplicate grade ids" in f for f in template_problems(lesson, dup))
    hollow = []
    for c in cells:
        c = json.loads(json.dumps(c))
        meta = c.get("metadata", {}).get("nbgrader", {})
        if meta.get("grade"):
            meta["points"] = 0
            c["source"] = text(c).replace("### BEGIN HIDDEN TESTS", "").lstrip('"')
        if meta.get("solution"):
            c["source"] = text(c).replace("### BEGIN SOLUTION", "")
        if "explore(" in text(c):
            c["source"] = text(c).replace("failure=", "fail=")
        hollow.append(c)
    found = template_problems(lesson, hollow)
    for part in ("worth no points", "title docstring", "no hidden tests", "BEGIN SOLUTION", "no failure="):
        assert any(part in f for f in found), f"no problem mentions {part!r}: {found}"
    fake = f"99_{lesson[3:]}_gone"
    found = template_problems(fake, cells)
    for part in ("checks module", "variants file", "README"):
        assert any(part in f for f in found), f"no problem mentions {part!r}: {found}"


@pytest.mark.parametrize("lesson", LESSONS)
def test_release_strips_solutions_and_hidden_tests(lesson):
    body = "\n".join(text(c) for c in load(release_nb(lesson))["cells"])
    assert "### BEGIN SOLUTION" not in body and "BEGIN HIDDEN TESTS" not in body
    assert "raise NotImplementedError()" in body


@pytest.mark.parametrize("lesson", LESSONS)
def test_bench_runs_checks_as_released(lesson):
    """`make bench` times the learner's run: the solution's check cells exactly as the release has them."""
    import nbformat

    sys.path.insert(0, str(ROOT / "tools"))
    from bench import as_released

    checks = lambda nb: {grade_id(c): text(c) for c in nb["cells"] if c["metadata"].get("nbgrader", {}).get("grade")}  # noqa: E731
    solution = nbformat.read(source_nb(lesson), as_version=4)
    assert checks(as_released(solution)) == checks(load(release_nb(lesson)))
    assert any("BEGIN HIDDEN TESTS" in text(c) for c in solution.cells)  # the graded run keeps them


def _validate(nb):
    from nbgrader.validator import Validator  # not the CLI: `nbgrader validate` exits 0 even on failure

    validator = Validator()
    validator.config.Execute.timeout = 120
    return validator.validate(str(nb)).get("failed")


@pytest.mark.nbgrader
@pytest.mark.parametrize("lesson", LESSONS)
def test_validator_passes_solution(lesson):
    """The learner's Validate button passes the solution: its repro cells raise on purpose, nothing is failed."""
    assert _validate(source_nb(lesson)) is None


@pytest.mark.nbgrader
def test_validator_fails_release():
    """Validate refuses the blank release (each lesson's blank scores 0 through nbgrader in test_grading.py)."""
    assert _validate(release_nb(LESSONS[0])), "the blank release passed validation"
