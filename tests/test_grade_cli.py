"""The bulk grader (`python -m autograder.grade`, `make grade`) driven for real over the sample corpus.

The corpus (autograder/corpus.py) holds, on the first lesson, every kind of submission a class sends in:
correct, blank, typical wrong fixes, loops and sleeps past the limits, os._exit and a segfault,
memory hogs, megabytes of output, stderr from learner code inside the checks, malformed JSON, an older
nbformat, deleted / edited / duplicated cells, renamed and Colab-renamed files, forced passes
(monkeypatched checks, a fake CheckFailed, patches made during a check, the guard switched off) and a
submission that snoops on the hidden tests and writes outside its folder. Every other lesson gets its slice
(the correct fix with its checks patched during a check), and a run as an ordinary user (not root) proves the
user-namespace fallback. Every grade and every reason is asserted; then the run is interrupted and resumed.
"""
import ast
import csv
import html
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import LESSONS, ROOT, load, outputs_text, source_nb

sys.path.insert(0, str(ROOT))
from autograder import corpus, intake  # noqa: E402

pytestmark = pytest.mark.xdist_group("grade-cli")  # the corpus is graded once, on one xdist worker

LESSON = LESSONS[0]
LIMITS = ["--workers", "2", "--cell-timeout", "20", "--notebook-timeout", "180", "--memory", "3", "--no-progress"]


def grade(submissions, out, *extra, check=True, lessons=(LESSON,), user=(), progress=False, **kw):
    """Run the real command (after a `user` prefix; with its progress bar on stderr if asked); return the process."""
    limits = [a for a in LIMITS if progress is False or a != "--no-progress"]
    cmd = [*user, sys.executable, "-m", "autograder.grade", str(submissions), "--out", str(out), "--lessons", *lessons,
           *limits, *extra]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, **kw)
    if check:
        assert proc.returncode == 0, f"grade failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr[-3000:]}"
    return proc


def rows(out):
    return {(r["student"], r["lesson"]): r for r in csv.DictReader((Path(out) / "grades.csv").open())}


def _summary_line(summary, student, lesson):
    return next((l for l in summary.splitlines() if l.strip().startswith(f"{student}/{lesson}:")), "")


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    """The hostile corpus, graded once: (expected, out folder, summary printed)."""
    tmp = tmp_path_factory.mktemp("gradecli")
    subs = tmp / "submissions"
    expected = corpus.build(subs, LESSON)
    t0 = time.monotonic()
    # 10 s a cell: lesson 01's slowest cell takes about 2 s, and the loops and sleeps cases wait for the limit 4 times
    proc = grade(subs, tmp / "out", "--cell-timeout", "10", timeout=1800)
    print(f"corpus of {len(expected)} graded in {time.monotonic() - t0:.0f} s")
    return expected, tmp / "out", proc.stdout


STUDENTS = sorted(corpus.cases(LESSON))


# A new network namespace holds loopback plus the fallback device of each tunnel module the host has loaded
# (sit0 and the like, always down there); any other interface would mean the host's network.
TUNNEL_FALLBACKS = {"sit0", "tunl0", "ip6tnl0", "gre0", "gretap0", "erspan0", "ip_vti0", "ip6_vti0", "ip6gre0",
                    "ip6erspan0"}


def _private_network(text):
    """The sandboxed kernel printed its interfaces, and they are loopback plus tunnel fallbacks only."""
    found = re.search(r"INTERFACES (\[.*?\])", text)
    names = set(ast.literal_eval(found.group(1))) if found else set()
    return "lo" in names and not names - {"lo"} - TUNNEL_FALLBACKS


@pytest.mark.nbgrader
@pytest.mark.parametrize("student", STUDENTS)
def test_corpus_grade(graded, student):
    """Each submission gets the grade its honest work earns, with its reasons in grades.csv and the summary."""
    expected, out, summary = graded
    want = expected[student]
    row = rows(out)[(student, want["lesson"])]
    got = {g: float(row[g]) for g in want["scores"]}
    assert got == want["scores"], f"{student}: {row['reasons']}"
    assert float(row["total"]) == sum(want["scores"].values())
    assert row["status"] == want["status"], row["reasons"]
    line = _summary_line(summary, student, want["lesson"])
    for reason in want["reasons"]:
        assert reason in row["reasons"], f"{student}: reason {reason!r} missing from {row['reasons']!r}"
        assert reason in line, f"{student}: reason {reason!r} missing from the summary line {line!r}"
    if want["absent"] or want["outputs_not"]:
        leaked = [p for p in want["absent"] if Path(p).exists()]
        for path in leaked:
            Path(path).unlink()
        if not ("network off" in summary and "read-only filesystem" in summary):
            pytest.skip("this machine allows no private namespaces (unshare): kernels can read, write and reach "
                        "out; the summary says so")
        assert not leaked, f"{student} wrote {leaked}"
    if want["outputs_not"]:
        nb = load(out / "autograded" / student / want["lesson"] / f"{want['lesson']}.ipynb")
        text = "\n".join(outputs_text(c) for c in nb["cells"] if c["cell_type"] == "code")
        assert "blocked read" in text and "blocked net" in text
        assert _private_network(text), text  # a private network namespace: loopback only
        assert "CAPS ['0000000000000000']" in text  # no capability left to undo the mounts with
        for bad in want["outputs_not"]:
            assert bad not in text, f"{student}: {bad!r} in its outputs"


# The other lessons: one submission each, graded together in one run (each lesson's blank and wrong fixes are graded
# through nbgrader itself in test_grading.py, and every one through the fork server in test_runtimes.py).
OTHERS = LESSONS[1:]


def _picked(lesson):
    # "patches-during-check" is the reference with its last function replaced by one that patches the lesson's check
    # helpers while a check runs: every check that does not call that function proves full marks in the grader's
    # sandbox (its limits, read-only files, no network), and the ones that do prove the guard catches the patch. The
    # first lesson's corpus has every other kind (correct, patched before the tests, a fake CheckFailed, the guard off).
    # Where that function is used by most checks (03, 07), the correct fix is graded too.
    ref = corpus.reference(lesson)
    checks = corpus._tests(ref)
    kept = len(checks) - len(corpus._users(ref, corpus._last_fn(ref)))
    return ("patches-during-check",) if 2 * kept >= len(checks) else ("correct", "patches-during-check")


@pytest.fixture(scope="module")
def lessons_graded(tmp_path_factory):
    """Every other lesson's slice of the corpus, graded in one run: ({(student, lesson): case}, out, summary)."""
    tmp = tmp_path_factory.mktemp("gradecli-lessons")
    expected = {}
    for lesson in OTHERS:
        for student, case in corpus.build(tmp / "submissions", lesson, only=set(_picked(lesson))).items():
            expected[(student, lesson)] = case
    proc = grade(tmp / "submissions", tmp / "out", lessons=OTHERS, timeout=1800)
    return expected, tmp / "out", proc.stdout


@pytest.mark.nbgrader
@pytest.mark.xdist_group("grade-cli-lessons")
@pytest.mark.parametrize("lesson,student", [(l, s) for l in OTHERS for s in _picked(l)])
def test_lessons_corpus_grade(lessons_graded, lesson, student):
    """On every lesson: full marks in the sandbox, and no forced pass passes."""
    expected, out, summary = lessons_graded
    want = expected[(student, lesson)]
    row = rows(out)[(student, lesson)]
    assert {g: float(row[g]) for g in want["scores"]} == want["scores"], f"{student}/{lesson}: {row['reasons']}"
    assert row["status"] == want["status"], row["reasons"]
    for reason in want["reasons"]:
        assert reason in row["reasons"], f"{student}/{lesson}: reason {reason!r} missing from {row['reasons']!r}"
        assert reason in _summary_line(summary, student, lesson), f"{student}/{lesson}: {reason!r} not in the summary"


@pytest.mark.nbgrader
def test_summary_and_files(graded):
    """One CSV row per student; the summary counts them; a feedback page per graded submission."""
    expected, out, summary = graded
    assert set(s for s, _ in rows(out)) == set(expected)
    n_failed = sum(e["status"] == "failed" for e in expected.values())
    assert f"graded {len(expected) - n_failed} notebooks" in summary
    assert f"failed to grade ({n_failed})" in summary
    assert re.search(r"in [\d.]+ s", summary)
    for student, e in expected.items():
        if e["status"] == "graded":
            assert (out / "feedback" / student / e["lesson"] / f"{e['lesson']}.html").exists(), student


def _hidden_lines(lesson):
    lines = []
    for cell in load(source_nb(lesson))["cells"]:
        src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
        m = re.search(r"### BEGIN HIDDEN TESTS\n(.*?)### END HIDDEN TESTS", src, re.S)
        if m:
            lines += [l.strip() for l in m.group(1).splitlines() if l.strip()]
    return lines


@pytest.mark.nbgrader
@pytest.mark.parametrize("student", ["correct", "blank", "wrong-batch-left-on-cpu"])
def test_feedback_hides_hidden_tests(graded, student):
    """Feedback shows each test's pass/fail and message, never the hidden tests' code nor the grader's seal."""
    expected, out, _ = graded
    if student not in expected:
        pytest.skip(f"no {student} in this lesson's corpus")
    page = html.unescape((out / "feedback" / student / LESSON / f"{LESSON}.html").read_text())
    text = re.sub(r"<[^>]+>", "", page)
    hidden = _hidden_lines(LESSON)
    assert hidden, "the lesson has hidden tests"
    for line in hidden:
        assert line not in text, f"hidden test code in {student}'s feedback: {line}"
    assert "trainclinic seal" not in text
    assert "BEGIN HIDDEN TESTS" not in text
    if student == "correct":
        assert "✓" in text
    else:
        assert "CheckFailed" in text


@pytest.mark.nbgrader
def test_gradebook_export(graded, tmp_path):
    """The class gradebook is nbgrader's own: `nbgrader export` agrees with grades.csv."""
    expected, out, _ = graded
    env = dict(os.environ, TRAINCLINIC_COURSE_ROOT=str(out / "course"), TRAINCLINIC_GRADEBOOK=str(out / "gradebook.db"))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    dest = tmp_path / "export.csv"
    subprocess.run([sys.executable, "-m", "nbgrader", "export", f"--to={dest}"], cwd=ROOT / "autograder", env=env,
                   check=True, capture_output=True)
    ours = rows(out)
    for r in csv.DictReader(dest.open()):
        if r["assignment"] == LESSON and (r["student_id"], LESSON) in ours:
            assert float(r["score"]) == float(ours[(r["student_id"], LESSON)]["total"]), r["student_id"]


@pytest.mark.nbgrader
def test_rerun_resumes(graded):
    """Running again regrades nothing that is done and changes no grade."""
    expected, out, _ = graded
    before = (out / "grades.csv").read_text()
    proc = grade(out.parent / "submissions", out, timeout=600)
    assert f"(0 run now, {len(expected)} already done)" in proc.stdout
    assert (out / "grades.csv").read_text() == before


@pytest.mark.nbgrader
@pytest.mark.xdist_group("grade-cli-kill")
def test_kill_and_resume(tmp_path):
    """Kill a run once a notebook is done; the next run grades only the rest, and the gradebook is sound."""
    subs, out = tmp_path / "subs", tmp_path / "out"
    corpus.build(subs, LESSON, only={"correct", "blank", "old-format", "renamed"})
    cmd = [sys.executable, "-m", "autograder.grade", str(subs), "--out", str(out), "--lessons", LESSON, *LIMITS]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
    done = out / "work" / "done"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and not (done.exists() and any(done.iterdir())):
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    finished = len(list(done.iterdir()))
    assert 1 <= finished < 4, f"{finished} done before the kill"
    again = grade(subs, out, timeout=900)
    assert f"({4 - finished} run now, {finished} already done)" in again.stdout, again.stdout
    r = rows(out)
    assert float(r[("correct", LESSON)]["total"]) == float(r[("correct", LESSON)]["max"]) > 0
    assert float(r[("blank", LESSON)]["total"]) == 0
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{out / 'gradebook.db'}") as gb:
        assert {s.student_id for s in gb.assignment_submissions(LESSON)} == {"correct", "blank", "old-format", "renamed"}


def _as_ordinary_user():
    """A prefix that runs the grader as an ordinary user who owns this checkout and venv: as root, a user
    namespace in which we are uid 1000 (our files stay ours, every privilege goes); otherwise nothing."""
    if os.geteuid() != 0:
        return []
    prefix = ["unshare", "--user", "--map-user=1000", "--map-group=1000", "--"]
    try:
        probe = subprocess.run([*prefix, "sh", "-c", "test $(id -u) = 1000"], capture_output=True, text=True)
    except OSError as exc:
        probe = subprocess.CompletedProcess([], 1, "", str(exc))
    if probe.returncode != 0:
        pytest.skip(f"cannot become an ordinary user here (unshare --map-user): {probe.stderr.strip()[-200:]}")
    return prefix


@pytest.mark.nbgrader
@pytest.mark.xdist_group("grade-cli-lessons")
def test_ordinary_user(tmp_path):
    """An instructor who is not root, grading in their own checkout: the user-namespace fallback cuts the
    network, hides the solutions and the other submissions, keeps the instructor's own files read-only and
    leaves the kernel no capability to undo that; the grades are those of a root run."""
    user = _as_ordinary_user()
    subs, out = tmp_path / "submissions", tmp_path / "out"
    canary = ROOT / "src" / f".tc-canary-{os.getpid()}"  # in the instructor's checkout, which the kernel sees
    home = Path.home() / f".tc-canary-{os.getpid()}.txt"
    corpus.build(subs, LESSON, only={"correct", "blank", "patches-checks"})
    reads = [str(subs / "submitted" / "correct" / LESSON / f"{LESSON}.ipynb"), str(ROOT / "solutions" / LESSON / f"{LESSON}.ipynb")]
    writes = [str(canary / "x.txt"), str(home), str(subs / "x.txt"), str(ROOT / "src" / "trainclinic" / "x.py")]
    nb = corpus._insert_after_answers(corpus.reference(LESSON), corpus.escape([repr(p) for p in reads], writes))
    (subs / "probe").mkdir()
    (subs / "probe" / f"{LESSON}.ipynb").write_text(json.dumps(nb))
    canary.mkdir()
    try:
        proc = grade(subs, out, user=user, progress=True, timeout=900)
        assert re.search(r"grading: 100%.*4/4", proc.stderr), proc.stderr[-500:]  # the progress bar
        first = proc.stdout.splitlines()[0]
        if "user namespace" not in first:
            pytest.skip(f"this machine gives ordinary users no namespaces, and the summary says so: {first}")
        assert "network off" in first
        r = rows(out)
        assert float(r[("correct", LESSON)]["total"]) == float(r[("correct", LESSON)]["max"]) > 0
        assert float(r[("probe", LESSON)]["total"]) == float(r[("probe", LESSON)]["max"]), r[("probe", LESSON)]["reasons"]
        assert float(r[("blank", LESSON)]["total"]) == float(r[("patches-checks", LESSON)]["total"]) == 0
        cells = load(out / "autograded" / "probe" / LESSON / f"{LESSON}.ipynb")["cells"]
        text = "\n".join(outputs_text(c) for c in cells if c["cell_type"] == "code")
        assert _private_network(text) and "CAPS ['0000000000000000']" in text, text
        assert text.count("blocked read") == len(reads) and "READ " not in text, text
        assert text.count("blocked write") == len(writes) and "WROTE" not in text, text
        assert "blocked remount" in text, text
        assert not any(Path(p).exists() for p in writes)
    finally:
        shutil.rmtree(canary, ignore_errors=True)
        home.unlink(missing_ok=True)
        Path(writes[-1]).unlink(missing_ok=True)


def test_intake_names(tmp_path):
    """Students and lessons from every naming a class produces (no grading)."""
    import zipfile

    ref = json.dumps(corpus.reference(LESSON))
    files = {
        f"submitted/ann/{LESSON}/{LESSON}.ipynb": ref,
        f"bob/Copy of {LESSON}.ipynb": ref,
        f"cy_{LESSON} (1).ipynb": ref,
        "dee/whatever I called it.ipynb": ref,
        "notes.txt": "hello",
        f"eve_{LESSON}.ipynb": "{ not json",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    if len(LESSONS) > 1:  # another lesson's notebook, even renamed, is recognised and left out
        other = json.dumps(corpus.blank(LESSONS[1]))
        (tmp_path / "gus").mkdir()
        (tmp_path / "gus" / "my work.ipynb").write_text(other)
    with zipfile.ZipFile(tmp_path / "fay_12345_upload.zip", "w") as z:
        z.writestr(f"sub/{LESSON} (2).ipynb", ref)
    items, skipped = intake.collect(tmp_path, [LESSON], ROOT / "notebooks", solutions=ROOT / "solutions")
    got = {(i.student, i.lesson): i for i in items}
    assert set(got) == {(s, LESSON) for s in ("ann", "bob", "cy", "dee", "eve", "fay")}
    assert "malformed notebook" in got[("eve", LESSON)].failure
    assert any("recognised by its cells" in r for r in got[("dee", LESSON)].reasons)
    assert all(not got[(s, LESSON)].failure for s in ("ann", "bob", "cy", "dee", "fay"))
    assert skipped == [("notes.txt", "not a notebook")]


def _run_safe(sources, **limits):
    """Execute a tiny notebook with SafeExecute on a plain kernel; return its cells."""
    import nbformat

    from autograder.execute import SafeExecute

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    ex = SafeExecute(kernel_name="python3", shutdown_kernel="immediate", **limits)
    ex.preprocess(nb, {"metadata": {"path": str(ROOT)}})
    return nb.cells


def _errors(cell):
    return [o["ename"] for o in cell.outputs if o.output_type == "error"]


@pytest.mark.xdist_group("grade-cli-kill")
def test_dead_kernel_is_restarted_and_replayed():
    """A cell that kills the kernel loses its own output only: the kernel restarts, earlier cells replay."""
    cells = _run_safe(["a = 41", "import os; os._exit(1)", "print(a + 1)"], timeout=60)
    assert _errors(cells[1]) == ["KernelDied"]
    assert "42" in "".join(o.get("text", "") for o in cells[2].outputs)


@pytest.mark.xdist_group("grade-cli-kill")
def test_notebook_budget():
    """Past the notebook's budget, the cell running is stopped and the remaining cells are not run."""
    cells = _run_safe(["import time", "time.sleep(60)", "z = 1"], timeout=60, notebook_timeout=15)
    assert _errors(cells[1]) == ["CellTimeoutError"]
    assert _errors(cells[2]) == ["NotebookTimeout"]
