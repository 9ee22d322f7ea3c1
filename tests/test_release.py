"""The nbgrader pipeline's static side: release without drift, template conformity, validation."""
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


@pytest.mark.parametrize("lesson", LESSONS)
def test_lesson_follows_the_template(lesson):
    """Title + badge, locked setup, a raising repro, solutions, graded checks with hidden tests, explore, recap."""
    from nbcells import badge, setup_source
    from release import settings

    cells = load(source_nb(lesson))["cells"]
    first = text(cells[0])
    assert first.startswith(f"# Lesson {lesson[:2]}") and badge(lesson, *settings()) in first
    setup = cells[1]
    assert grade_id(setup) == "setup" and setup["metadata"]["nbgrader"]["locked"]
    assert text(setup).startswith(setup_source(*settings()).split("import torch")[0])
    assert "--no-deps" in text(setup) and "device = tc.pick_device()" in text(setup)
    tags = [t for c in cells for t in c.get("metadata", {}).get("tags", [])]
    assert "raises-exception" in tags, "no cell reproduces the failure"
    metas = [c["metadata"].get("nbgrader", {}) for c in cells]
    solutions = [m for m in metas if m.get("solution")]
    tests = [(m, text(c)) for m, c in zip(metas, cells) if m.get("grade")]
    assert solutions and tests
    for meta, src in tests:
        assert meta["points"] > 0 and src.startswith('"""'), f"{meta['grade_id']}: title docstring first"
        assert "### BEGIN HIDDEN TESTS" in src, f"{meta['grade_id']} has no hidden tests"
    order = [i for i, m in enumerate(metas) if m.get("solution")] + [i for i, m in enumerate(metas) if m.get("grade")]
    assert max(i for i, m in enumerate(metas) if m.get("solution")) < min(i for i, m in enumerate(metas) if m.get("grade"))
    body = "\n".join(text(c) for c in cells)
    assert "tc.explore(" in body or "explore(" in body, "no explore widget"
    assert "Troubleshooting" in body and "Recap" in body
    assert len({m["grade_id"] for m in metas if m}) == len([m for m in metas if m]), "duplicate grade ids"
    assert order


@pytest.mark.parametrize("lesson", LESSONS)
def test_release_strips_solutions_and_hidden_tests(lesson):
    body = "\n".join(text(c) for c in load(release_nb(lesson))["cells"])
    assert "### BEGIN SOLUTION" not in body and "BEGIN HIDDEN TESTS" not in body
    assert "raise NotImplementedError()" in body


@pytest.mark.nbgrader
@pytest.mark.parametrize("lesson", LESSONS)
def test_validator_passes_solution_and_fails_release(lesson, tmp_path):
    """nbgrader's Validator (not the CLI: `nbgrader validate` exits 0 even on failure)."""
    from nbgrader.validator import Validator

    validator = Validator()
    validator.config.Execute.timeout = 120
    assert validator.validate(str(source_nb(lesson))).get("failed") is None
    failed = validator.validate(str(release_nb(lesson))).get("failed")
    assert failed, "the blank release passed validation"
