"""nbgrader end to end, per lesson: generate, autograde, export; assert every grade and message.

nbgrader's own commands grade each lesson's core submissions: the reference solution (full marks), the blank
release (0), the first wrong fix (it loses exactly the points of the checks it breaks, with the expected
message) and the first correct fix written differently (full marks). Every other variant is
graded by the same hidden tests through tests/test_runtimes.py's fork server, on every declared runtime
(`make test-compat`, today's pins included): a kernel per notebook costs about 15 s here, and a whole
class of variants through nbgrader took half of CI's time while proving nothing the fork server does not.
"""
import csv
import fcntl
import json
import os

import pytest

from conftest import LESSONS, grade_id, outputs_text
from nbgrader_run import Course, submission, variants

ALLOWED_ERRORS = {"CheckFailed", "NotImplementedError"}


@pytest.fixture(scope="session")
def graded(tmp_path_factory):
    """Grade every lesson's variants once per test run, whichever xdist worker asks first: {lesson: (course, scores)}.

    The graded course lives in a folder all workers share, behind a file lock, so a lesson whose tests land
    on two workers (or come back after pytest tore a fixture down) is never graded twice.
    """
    base = tmp_path_factory.getbasetemp()
    shared = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "graded"
    shared.mkdir(exist_ok=True)
    cache = {}

    def get(lesson):
        if lesson not in cache:
            with open(shared / f"{lesson}.lock", "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                done = shared / lesson / "scores.json"
                course = Course(shared / lesson)
                if not done.exists():
                    course.nbgrader("generate_assignment", lesson, "--force")
                    for name, spec in core(lesson).items():
                        course.submit(name, lesson, submission(lesson, spec))
                    course.nbgrader("autograde", lesson, "--force")
                    done.write_text(json.dumps(course.scores(lesson)))
            cache[lesson] = (course, json.loads(done.read_text()))
        return cache[lesson]

    return get


def _grouped(*args):
    """A parameter set kept on one xdist worker per lesson, so each lesson is graded once."""
    return pytest.param(*args, marks=pytest.mark.xdist_group(f"grade-{args[0]}"), id="-".join(args))


def core(lesson):
    """The submissions nbgrader itself grades: reference, blank, the first wrong and the first correct variant."""
    found = variants(lesson)
    wrong = [n for n, v in found.items() if v["lost"] and n != "blank"][:1]
    right = [n for n, v in found.items() if not v["lost"] and n != "reference"][:1]
    return {n: found[n] for n in ["reference", "blank", *wrong, *right]}


CASES = [_grouped(lesson, name) for lesson in LESSONS for name in core(lesson)]
LESSON_CASES = [_grouped(lesson) for lesson in LESSONS]


@pytest.mark.nbgrader
@pytest.mark.parametrize("lesson,variant", CASES)
def test_variant_grade(graded, lesson, variant):
    course, scores = graded(lesson)
    spec = core(lesson)[variant]
    got = scores[variant]
    assert got, f"no grades recorded for {variant}"
    lost = {gid: "" for gid in got} if spec["lost"] == "all" else spec["lost"]
    assert set(lost) <= set(got), f"variant names test cells the notebook lacks: {set(lost) - set(got)}"
    nb = course.autograded(variant, lesson)
    cells = {grade_id(c): c for c in nb["cells"] if grade_id(c)}
    for gid, (score, max_score) in got.items():
        if gid in lost:
            assert score == 0, f"{variant}: {gid} should lose its {max_score} points, got {score}"
            assert lost[gid] in outputs_text(cells[gid]), (
                f"{variant}: {gid} should say {lost[gid]!r}; it said:\n{outputs_text(cells[gid])}")
        else:
            assert score == max_score, f"{variant}: {gid} should keep {max_score} points, got {score}:\n{outputs_text(cells[gid])}"


@pytest.mark.nbgrader
@pytest.mark.parametrize("lesson", LESSON_CASES)
def test_errors_are_verdicts(graded, lesson):
    """Outside cells tagged raises-exception, the blank release fails only through CheckFailed or NotImplementedError,
    and the reference not at all."""
    course, _ = graded(lesson)
    for student, allowed in (("blank", ALLOWED_ERRORS), ("reference", set())):
        for cell in course.autograded(student, lesson)["cells"]:
            if cell["cell_type"] != "code" or "raises-exception" in cell.get("metadata", {}).get("tags", []):
                continue
            for out in cell.get("outputs", []):
                if out["output_type"] == "error":
                    assert out["ename"] in allowed, f"{student}: unexpected {out['ename']}: {out['evalue']}\n{cell['source']}"
                assert not (out["output_type"] == "stream" and out["name"] == "stderr" and student == "reference"), (
                    f"reference wrote to stderr: {out['text'][:500]}")


@pytest.mark.nbgrader
@pytest.mark.parametrize("lesson", LESSON_CASES)
def test_export(graded, lesson, tmp_path):
    """nbgrader export writes one row per student with the autograded totals."""
    course, scores = graded(lesson)
    out = tmp_path / "grades.csv"
    course.nbgrader("export", f"--to={out}")
    rows = {r["student_id"]: r for r in csv.DictReader(out.open()) if r["assignment"] == lesson}
    full = sum(m for _, m in scores["reference"].values())
    assert float(rows["reference"]["score"]) == full
    assert float(rows["blank"]["score"]) == 0
