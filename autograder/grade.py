"""Grade every lesson of a class in one command, with nbgrader, in parallel, resumably.

    python -m autograder.grade SUBMISSIONS --out DIR [--workers N] [--lessons 01_device_mismatch ...]
        [--cell-timeout S] [--notebook-timeout S] [--memory GB] [--student-regex RE]

SUBMISSIONS: nbgrader's `submitted/<student>/<lesson>/<notebook>.ipynb`, folders per student, LMS zips or
loose files named per student (see autograder/intake.py). DIR receives:
  course/            an nbgrader course folder (solutions linked, release notebooks) and
  gradebook.db       its gradebook: `nbgrader export`, formgrader, etc. work on it as usual;
  autograded/<student>/<lesson>/<lesson>.ipynb   the executed notebooks (instructor copy, hidden tests in);
  feedback/<student>/<lesson>/<lesson>.html      feedback without the hidden tests' code;
  grades.csv         one row per student and lesson: points per check, total, status, reasons;
  summary.txt        what the run printed at the end.
Each notebook runs in a sandboxed kernel (time per cell and per notebook, memory cap, no network, the
instructor's files hidden: see sandbox.py) and a guard against forced passes (guard.py). Interrupt it at
any time: running it again grades only what is not done yet (or what changed).
"""
import argparse
import csv
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from autograder.intake import STUDENT_REGEX, collect, lesson_cells
from autograder.lessons import find, lessons as course_lessons
from autograder.sandbox import SCRATCH

REPO = Path(__file__).resolve().parent.parent

__all__ = ["main", "run"]


def _env(course, gradebook):
    env = dict(os.environ, TRAINCLINIC_COURSE_ROOT=str(course), TRAINCLINIC_GRADEBOOK=str(gradebook))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # nbgrader runs alembic
    return env


def _generate(course, gradebook, lessons):
    """nbgrader generate_assignment for each lesson, in this process (one nbgrader start-up for all)."""
    if not lessons:
        return
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config.loader import PyFileConfigLoader

    saved = dict(os.environ)
    os.environ.update(_env(course, gradebook))
    try:
        cfg = PyFileConfigLoader("nbgrader_config.py", path=str(REPO / "autograder")).load_config()
        cfg.NbGraderAPI.log_level = "WARN"
        api = NbGraderAPI(coursedir=CourseDirectory(config=cfg), config=cfg)
        for lesson in lessons:
            res = api.generate_assignment(lesson, force=True, create=True)
            if not res.get("success"):
                raise SystemExit(f"nbgrader generate_assignment {lesson} failed:\n{res.get('error')}\n{res.get('log')}")
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _assignments(gradebook):
    from nbgrader.api import Gradebook

    if not Path(gradebook).exists():
        return set()
    with Gradebook(f"sqlite:///{gradebook}") as gb:
        return {a.name for a in gb.assignments}


def _prepare(out, lessons):
    """The course folder, the class gradebook and a pristine template gradebook, with every lesson generated."""
    course = out / "course"
    course.mkdir(parents=True, exist_ok=True)
    link = course / "solutions"
    if not link.exists():
        link.symlink_to(REPO / "solutions")
    template, main = out / "work" / "template.db", out / "gradebook.db"
    template.parent.mkdir(parents=True, exist_ok=True)
    _generate(course, template, sorted(set(lessons) - _assignments(template)))
    if not main.exists():
        shutil.copy(template, main)
    _generate(course, main, sorted(set(lessons) - _assignments(main)))
    return course, template, main


def _atomic_write(path, text):
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def _merge(main, result, max_scores):
    """Write one result into the class gradebook (idempotent: a rerun overwrites the same rows)."""
    from nbgrader.api import Gradebook

    student, lesson = result["student"], result["lesson"]
    with Gradebook(f"sqlite:///{main}") as gb:
        gb.update_or_create_student(student)
        gb.update_or_create_submission(lesson, student)
        for gid in max_scores[lesson]:
            grade = gb.find_grade(gid, lesson, lesson, student)
            score = result["scores"].get(gid, [0])[0] if result["status"] == "graded" else 0
            grade.auto_score = float(score or 0)
            grade.needs_manual_grade = False
        gb.db.commit()


def _max_scores(template, lessons):
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{template}") as gb:
        return {l: {c.name: c.max_score for nb in gb.find_assignment(l).notebooks for c in nb.grade_cells} for l in lessons}


class Pool:
    """N worker processes (autograder.worker), each fed one task at a time, with a hard wall-clock limit."""

    def __init__(self, n, settings, limit, netns):
        self.settings, self.limit, self.netns, self.n = settings, limit, netns, n

    def _spawn(self):
        # the settings go in a file: as an argument, a long list of folders to hide can pass the kernel's limit on
        # one argument's length (E2BIG, "Argument list too long")
        path = Path(self.settings["work"]) / "settings.json"
        if not path.exists():
            path.write_text(json.dumps(self.settings))
        cmd = [sys.executable, "-m", "autograder.worker", str(path)]
        env = dict(os.environ, PYTHONPATH=str(REPO), TRAINCLINIC_NETNS="1" if self.netns else "0",
                   HOME=self.settings["work"], PYTHONUNBUFFERED="1", JUPYTER_PLATFORM_DIRS="1")
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        if self.netns:
            cmd = [*self.netns, "--", *cmd]
        log = open(Path(self.settings["work"]) / "workers.log", "a")
        proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
                                cwd=REPO, env=env, start_new_session=True, bufsize=1)
        lines = queue.Queue()
        threading.Thread(target=lambda: [lines.put(l) for l in proc.stdout] + [lines.put(None)], daemon=True).start()
        first = lines.get(timeout=120)
        if first is None or first.strip() != "READY":
            raise RuntimeError("a grading worker did not start: see " + str(Path(self.settings["work"]) / "workers.log"))
        return proc, lines

    @staticmethod
    def _kill(proc):
        """Kill a worker and everything under it (its kernels run in sessions of their own)."""
        try:
            import psutil

            try:
                procs = [psutil.Process(proc.pid)] + psutil.Process(proc.pid).children(recursive=True)
            except psutil.NoSuchProcess:
                procs = []
            for p in procs:
                try:
                    p.kill()
                except psutil.NoSuchProcess:
                    pass
        except ImportError:  # without psutil: the worker's group; orphaned kernels exit with their parent
            try:
                os.killpg(proc.pid, 9)
            except ProcessLookupError:
                pass
        proc.wait()

    def run(self, tasks, on_result):
        todo = queue.Queue()
        for t in tasks:
            todo.put(t)
        lock = threading.Lock()
        procs = []

        def loop():
            proc, lines = self._spawn()
            with lock:
                procs.append(proc)
            while True:
                try:
                    task = todo.get_nowait()
                except queue.Empty:
                    break
                proc.stdin.write(json.dumps(task) + "\n")
                proc.stdin.flush()
                try:
                    line = lines.get(timeout=self.limit)
                except queue.Empty:
                    line = None
                    why = f"grading did not finish within {self.limit} s (the process was killed)"
                else:
                    why = "the grading worker crashed"
                if line is None:
                    self._kill(proc)
                    on_result({"key": task["key"], "student": task["student"], "lesson": task["lesson"],
                               "status": "failed", "scores": {}, "reasons": list(task.get("reasons", [])) + [why]})
                    proc, lines = self._spawn()
                    with lock:
                        procs.append(proc)
                    continue
                on_result(json.loads(line))
            proc.stdin.close()
            proc.wait()

        threads = [threading.Thread(target=loop, daemon=True) for _ in range(min(self.n, len(tasks)))]
        try:
            for t in threads:
                t.start()
            for t in threads:
                while t.is_alive():
                    t.join(0.5)
        finally:
            for p in procs:
                if p.poll() is None:
                    self._kill(p)


def _netns():
    """The command prefix that gives a worker a private network namespace (root: unshare -n; others: a user
    namespace, unshare -rn), or None where neither is allowed."""
    for prefix in (["unshare", "-n"], ["unshare", "-rn"]):
        try:
            if subprocess.run([*prefix, "--", "true"], capture_output=True, timeout=10).returncode == 0:
                return prefix
        except (OSError, subprocess.SubprocessError):
            return None
    return None


def _clean_stale(tmp=None):
    """Remove work folders left by runs that were killed (their owner process is gone)."""
    for d in Path(tmp or tempfile.gettempdir()).glob("tc-grade-*"):
        try:
            pid = int((d / "owner.pid").read_text())
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
        except (OSError, ValueError):
            continue


def _keep_list():
    """What a kernel needs to see: the venv, the python install, trainclinic's source and the grading code."""
    return {REPO / ".venv", REPO / "src", REPO / "autograder", Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(),
            Path(os.path.realpath(sys.executable)).parent.parent}


def _hide_list(out, submissions):
    """What a kernel must not see: the instructor's files around the code it needs (venv, python, src)."""
    keep = _keep_list()

    def cover(path, depth=0):
        path = Path(path)
        if not path.is_dir() or path.is_symlink() or any(path == k or path.is_relative_to(k) for k in keep):
            return []
        if not any(k.is_relative_to(path) for k in keep):
            return [path]
        if depth > 4:
            return []
        return [p for child in sorted(path.iterdir()) for p in cover(child, depth + 1)]

    hide = cover(REPO) + cover(REPO.parent) + cover(Path.home()) + cover(out) + cover(Path(submissions).resolve())
    # the sandbox mounts a fresh, empty tmpfs on each of these (binding back only what a kernel needs): nothing in
    # them needs hiding one by one (a busy /tmp holds thousands of folders)
    scratch = [Path(p) for p in SCRATCH]
    return sorted({str(p) for p in hide if not any(p == s or p.is_relative_to(s) for s in scratch)})


def _write_csv(path, rows, max_scores):
    checks = list(dict.fromkeys(g for l in sorted(max_scores) for g in max_scores[l]))
    fields = ["student", "lesson", *checks, "total", "max", "status", "reasons"]
    tmp = Path(path).with_suffix(".tmp")
    with tmp.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for r in sorted(rows, key=lambda r: (r["student"], r["lesson"])):
            maxes = max_scores[r["lesson"]]
            row = {"student": r["student"], "lesson": r["lesson"], "status": r["status"], "reasons": " | ".join(r["reasons"])}
            total = 0.0
            for gid in maxes:
                score = float((r["scores"].get(gid, [0])[0] or 0) if r["status"] == "graded" else 0)
                row[gid] = f"{score:g}"
                total += score
            row["total"], row["max"] = f"{total:g}", f"{sum(maxes.values()):g}"
            w.writerow(row)
    os.replace(tmp, path)


def run(submissions, out, workers=None, lessons=None, cell_timeout=60, notebook_timeout=300, memory_gb=4.0,
        student_regex=STUDENT_REGEX, progress=True, isolate=True):
    """Grade a folder of submissions into `out`; return the summary dict."""
    t0 = time.monotonic()
    out = Path(out).resolve()
    lessons = sorted({find(l) for l in lessons}) if lessons else course_lessons()
    course, template, main = _prepare(out, lessons)
    max_scores = _max_scores(template, lessons)
    order = lesson_cells(course / "notebooks", lessons)  # checks in notebook order
    max_scores = {l: {g: max_scores[l][g] for g in order[l] if g in max_scores[l]} for l in lessons}
    items, skipped = collect(submissions, lessons, course / "notebooks", student_regex, REPO / "solutions")

    done_dir, inbox = out / "work" / "done", out / "work" / "inbox"
    results, tasks = {}, []
    for item in items:
        marker = done_dir / f"{item.key}.json"
        digest = item.digest()
        if marker.exists():
            prev = json.loads(marker.read_text())
            if prev.get("digest") == digest:
                results[item.key] = prev
                continue
        if item.failure:
            results[item.key] = {"key": item.key, "student": item.student, "lesson": item.lesson, "status": "failed",
                                 "scores": {}, "reasons": item.reasons + [item.failure], "digest": digest}
            _merge(main, results[item.key], max_scores)
            _atomic_write(marker, json.dumps(results[item.key]))
            continue
        nb_path = inbox / item.student / f"{item.lesson}.ipynb"
        _atomic_write(nb_path, json.dumps(item.notebook))
        tasks.append({"key": item.key, "student": item.student, "lesson": item.lesson, "notebook": str(nb_path),
                      "reasons": item.reasons, "digest": digest})
    resumed = len(results)

    _clean_stale()
    work = Path(tempfile.mkdtemp(prefix="tc-grade-"))
    os.chmod(work, 0o711)
    (work / "owner.pid").write_text(str(os.getpid()))
    netns = _netns() if isolate else None
    settings = {"real_root": os.geteuid() == 0, "work": str(work), "template": str(template), "course": str(course), "cell_timeout": cell_timeout,
                "notebook_timeout": notebook_timeout, "memory": int(memory_gb * 2**30), "isolate": isolate,
                "hide": _hide_list(out, submissions) if isolate else [],
                "keep": sorted(str(p) for p in _keep_list() if p.is_dir())}
    digests = {t["key"]: t["digest"] for t in tasks}
    bar = None
    if progress and tasks:
        from tqdm import tqdm

        bar = tqdm(total=len(tasks), unit="nb", desc="grading", file=sys.stderr)
    lock = threading.Lock()

    def on_result(result):
        with lock:
            result["digest"] = digests[result["key"]]
            dest = {}
            for kind, sub in (("autograded", "autograded"), ("feedback", "feedback")):
                if result.get(kind):
                    target = out / sub / result["student"] / result["lesson"] / Path(result[kind]).name
                    target.parent.mkdir(parents=True, exist_ok=True)
                    if target.exists():
                        os.chmod(target, 0o644)
                    shutil.copy(result[kind], target)
                    dest[kind] = str(target.relative_to(out))
            result.update(dest)
            if result.get("dir") and not os.environ.get("TRAINCLINIC_KEEP_WORK"):
                shutil.rmtree(result.pop("dir"), ignore_errors=True)
            _merge(main, result, max_scores)
            _atomic_write(done_dir / f"{result['key']}.json", json.dumps(result))  # done only once merged
            results[result["key"]] = result
            if bar:
                bar.update(1)
                bar.set_postfix_str(f"{result['student']}/{result['lesson']}", refresh=True)

    n = workers or os.cpu_count() or 1
    try:
        if tasks:
            Pool(n, settings, notebook_timeout + 90, netns).run(tasks, on_result)
    finally:
        if bar:
            bar.close()
        if not os.environ.get("TRAINCLINIC_KEEP_WORK"):
            shutil.rmtree(work, ignore_errors=True)
    rows = [results[i.key] for i in items if i.key in results]
    have = {(r["student"], r["lesson"]) for r in rows}
    absent = [{"student": st, "lesson": l, "status": "not submitted", "scores": {}, "reasons": []}
              for st in sorted({i.student for i in items}) for l in lessons if (st, l) not in have and len(lessons) > 1]
    _write_csv(out / "grades.csv", rows + absent, max_scores)
    summary = {"graded": sum(r["status"] == "graded" for r in rows), "failed": [r for r in rows if r["status"] != "graded"],
               "notes": [r for r in rows if r["status"] == "graded" and r["reasons"]], "skipped": skipped,
               "resumed": resumed, "ran": len(tasks), "seconds": round(time.monotonic() - t0, 1), "workers": n,
               "network": "off (private network namespace)" if netns else "ON: unshare unavailable, kernels can reach the network",
               "missing": [i.key for i in items if i.key not in results], "isolation": _isolation(isolate, work, netns),
               "not_submitted": len(absent)}
    text = _summary_text(summary, out)
    _atomic_write(out / "summary.txt", text)
    print(text)
    return summary


def _isolation(isolate, work, netns=None):
    from autograder.worker import HERE, _others_can_reach

    if not isolate:
        return "none (--no-isolation)"
    if os.geteuid() != 0:
        if netns == ["unshare", "-rn"]:  # the kernel is root of a user namespace: it can make its own mounts
            return ("kernels see a read-only filesystem with the instructor's files hidden, run as you (user namespace) "
                    "without capabilities")
        return "limits only (no user namespaces here: no private mounts, kernels run as you)"
    user = "nobody" if _others_can_reach(sys.executable, HERE, work) else "root (the python install is not reachable by other users)"
    return f"kernels see a read-only filesystem with the instructor's files hidden, run as {user} without capabilities"


def _summary_text(s, out):
    lines = [f"graded {s['graded']} notebooks ({s['ran']} run now, {s['resumed']} already done) with {s['workers']} "
             f"workers in {s['seconds']} s; network {s['network']}; isolation: {s['isolation']}"]
    if s["failed"]:
        lines.append(f"failed to grade ({len(s['failed'])}), scored 0:")
        lines += [f"  {r['student']}/{r['lesson']}: {' | '.join(r['reasons'])}" for r in s["failed"]]
    if s["notes"]:
        lines.append(f"graded with notes ({len(s['notes'])}):")
        lines += [f"  {r['student']}/{r['lesson']}: {' | '.join(r['reasons'])}" for r in s["notes"]]
    if s["skipped"]:
        lines.append(f"files not graded ({len(s['skipped'])}):")
        lines += [f"  {f}: {why}" for f, why in s["skipped"]]
    if s.get("not_submitted"):
        lines.append(f"not submitted (rows with 0 in grades.csv): {s['not_submitted']}")
    if s["missing"]:
        lines.append(f"NOT FINISHED (run again to resume): {', '.join(s['missing'])}")
    lines.append(f"grades: {out / 'grades.csv'}   feedback: {out / 'feedback'}   gradebook: {out / 'gradebook.db'}")
    return "\n".join(lines) + "\n"


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m autograder.grade", description=__doc__.split("\n\n")[0])
    p.add_argument("submissions", help="folder of submissions (nbgrader layout, per-student folders, zips, loose files)")
    p.add_argument("--out", default=str(REPO / ".grading" / "class"), help="grading folder (default .grading/class)")
    p.add_argument("--workers", type=int, default=None, help="parallel notebooks (default: the number of cores)")
    p.add_argument("--lessons", nargs="*", help="only these lessons: folder names, numbers or slugs (default: every lesson)")
    p.add_argument("--cell-timeout", type=int, default=60, help="seconds per cell (default 60)")
    p.add_argument("--notebook-timeout", type=int, default=300, help="seconds per notebook (default 300)")
    p.add_argument("--memory", type=float, default=4.0, help="address-space cap per kernel, GB (default 4)")
    p.add_argument("--student-regex", default=STUDENT_REGEX, help="student id from a file or zip name (named group student_id)")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--no-isolation", action="store_true", help="no private namespaces (limits and guard stay)")
    a = p.parse_args(argv)
    try:
        a.lessons = sorted({find(l) for l in a.lessons}) if a.lessons else None
    except LookupError as e:
        p.error(str(e))
    s = run(a.submissions, a.out, a.workers, a.lessons, a.cell_timeout, a.notebook_timeout, a.memory,
            a.student_regex, progress=not a.no_progress, isolate=not a.no_isolation)
    return 1 if s["missing"] else 0


if __name__ == "__main__":
    sys.exit(main())
