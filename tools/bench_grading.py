"""Grading benchmark: plain sequential `nbgrader autograde` vs `python -m autograder.grade`, same class, same run.

    python tools/bench_grading.py [--students 40] [--lessons ...] [--workers N] [--bare-sample 3]

Generates a class (students x every lesson, a mix of reference, blank and wrong answers: autograder/corpus.py),
then times (1) nbgrader autograde, one lesson after the other, as an instructor would run it; (2) the bulk
grader with N workers (default: the number of cores), which also writes feedback and grades.csv; and (3)
bare execution (nbclient, no nbgrader) of a sample of the same notebooks, to price the per-notebook overhead.
Prints the three times, the speed-up ratio and the overheads; writes them as JSON to --json if given.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from autograder import corpus  # noqa: E402
from autograder.lessons import lessons as all_lessons  # noqa: E402

__all__ = ["main"]


def _env(course, db):
    env = dict(os.environ, TRAINCLINIC_COURSE_ROOT=str(course), TRAINCLINIC_GRADEBOOK=str(db))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return env


def nbgrader_sequential(subs, tmp, lessons):
    """Seconds for plain `nbgrader autograde LESSON --force`, lesson after lesson (generation not timed)."""
    course, db = tmp / "seq" / "course", tmp / "seq" / "gradebook.db"
    course.mkdir(parents=True)
    (course / "solutions").symlink_to(ROOT / "solutions")
    shutil.copytree(subs / "submitted", course / "submitted")
    env = _env(course, db)
    run = lambda *a: subprocess.run([sys.executable, "-m", "nbgrader", *a, "--log-level=ERROR"], cwd=ROOT / "autograder",
                                    env=env, capture_output=True, text=True)
    for lesson in lessons:
        run("generate_assignment", lesson, "--force")
    t0 = time.monotonic()
    for lesson in lessons:
        proc = run("autograde", lesson, "--force")
        if proc.returncode != 0:
            print(f"  (nbgrader autograde {lesson} reported errors: {proc.stderr.strip().splitlines()[-1:]})")
    return time.monotonic() - t0


def ours(subs, tmp, lessons, workers):
    """Seconds for the bulk grader (intake, generation, grading, feedback, CSV: everything)."""
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "autograder.grade", str(subs), "--out", str(tmp / "ours"), "--no-progress",
                           "--workers", str(workers), "--lessons", *lessons], cwd=ROOT, capture_output=True, text=True)
    took = time.monotonic() - t0
    if proc.returncode != 0:
        print(proc.stdout[-2000:], proc.stderr[-2000:])
    tasks = [json.loads(p.read_text()) for p in (tmp / "ours" / "work" / "done").glob("*.json")]
    return took, [t["seconds"] for t in tasks if t.get("seconds")], proc.stdout


def bare(subs, lessons, per_lesson):
    """Mean seconds to execute one notebook with nbclient alone (fresh kernel, NBGRADER_EXECUTION set)."""
    import nbformat
    from nbclient import NotebookClient

    os.environ["NBGRADER_EXECUTION"] = "autograde"
    times = []
    for lesson in lessons:
        paths = sorted((subs / "submitted").glob(f"*/{lesson}/{lesson}.ipynb"))
        for path in paths[:: max(1, len(paths) // per_lesson)][:per_lesson]:  # spread over the class's mix
            nb = nbformat.read(path, as_version=4)
            t0 = time.monotonic()
            NotebookClient(nb, timeout=120, allow_errors=True, kernel_name="python3",
                           resources={"metadata": {"path": str(path.parent)}}).execute()
            times.append(time.monotonic() - t0)
    return sum(times) / len(times), len(times)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--students", type=int, default=40)
    p.add_argument("--lessons", nargs="*", default=None)
    p.add_argument("--workers", type=int, default=os.cpu_count())
    p.add_argument("--bare-sample", type=int, default=3, help="notebooks per lesson executed bare (default 3)")
    p.add_argument("--json", help="also write the figures here")
    a = p.parse_args(argv)
    lessons = a.lessons or all_lessons()
    tmp = Path(tempfile.mkdtemp(prefix="tc-bench-"))
    try:
        subs = tmp / "subs"
        corpus.build_class(subs, a.students, lessons)
        n = a.students * len(lessons)
        print(f"class: {a.students} students x {len(lessons)} lessons = {n} notebooks; {os.cpu_count()} cores, {a.workers} workers")
        t_bare, k = bare(subs, lessons, a.bare_sample)
        print(f"bare execution (nbclient, {k} notebooks): {t_bare:.2f} s per notebook")
        t_seq = nbgrader_sequential(subs, tmp, lessons)
        print(f"nbgrader autograde, sequential:  {t_seq:7.1f} s  ({t_seq / n:.2f} s per notebook)")
        t_ours, per_task, summary = ours(subs, tmp, lessons, a.workers)
        print(f"autograder.grade, {a.workers} workers:    {t_ours:7.1f} s  (incl. feedback and CSV)")
        ratio = t_seq / t_ours
        busy = t_ours * a.workers / n
        mean_task = sum(per_task) / max(1, len(per_task))
        figures = {"students": a.students, "lessons": lessons, "notebooks": n, "cores": os.cpu_count(), "workers": a.workers,
                   "bare_per_notebook_s": round(t_bare, 2), "nbgrader_sequential_s": round(t_seq, 1),
                   "ours_s": round(t_ours, 1), "speedup": round(ratio, 2),
                   "nbgrader_overhead": round(t_seq / n / t_bare - 1, 3),
                   "ours_overhead_per_worker_slot": round(busy / t_bare - 1, 3),
                   "ours_mean_task_s": round(mean_task, 2)}
        print(f"speed-up: {ratio:.2f}x  (target >= 1.7x on 2 cores)")
        print(f"per-notebook overhead over bare execution: nbgrader {figures['nbgrader_overhead']:+.0%}; "
              f"ours {figures['ours_overhead_per_worker_slot']:+.0%} (wall x workers / notebooks, feedback included; "
              f"target < 30%); mean task in a worker {mean_task:.2f} s")
        if a.json:
            Path(a.json).write_text(json.dumps(figures, indent=1))
        return figures
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
