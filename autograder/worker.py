"""A grading worker: reads tasks (JSON lines) on stdin, grades each with nbgrader in-process, answers on stdout.

Started by autograder.grade, one per core, inside its own network namespace where possible. Each task
gets a private course folder and its own copy of the gradebook (sqlite wants one writer), so a
submission is graded exactly as if it were alone; the parent merges the result into the class gradebook.
"""
import ctypes
import json
import os
import re
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import time
import warnings
from pathlib import Path

# nbgrader 0.9 with SQLAlchemy 2.0 warns about its own session use while autograding: noise, not news.
warnings.filterwarnings("ignore", message="Object of type <Submitted")

HERE = Path(__file__).resolve().parent
REPO = HERE.parent

__all__ = ["grade_task", "main"]


def _config(settings, course, gradebook):
    """nbgrader's config: the project's nbgrader_config.py plus the grading limits and preprocessors."""
    from nbconvert.preprocessors import ClearMetadataPreprocessor, CSSHTMLHeaderPreprocessor
    from nbgrader.preprocessors import (AssignLatePenalties, CheckCellMetadata, GetGrades, IgnorePattern,
                                        LimitOutput, SaveAutoGrades)
    from traitlets.config.loader import PyFileConfigLoader

    from autograder.execute import SafeExecute, StripHidden

    os.environ["TRAINCLINIC_COURSE_ROOT"] = str(course)
    os.environ["TRAINCLINIC_GRADEBOOK"] = str(gradebook)
    cfg = PyFileConfigLoader("nbgrader_config.py", path=str(HERE)).load_config()
    cfg.Autograde.autograde_preprocessors = [SafeExecute, IgnorePattern, ClearMetadataPreprocessor, LimitOutput,
                                             SaveAutoGrades, AssignLatePenalties, CheckCellMetadata]
    cfg.GenerateFeedback.preprocessors = [StripHidden, GetGrades, CSSHTMLHeaderPreprocessor]
    cfg.OverwriteCells.add_missing_cells = True
    cfg.ExecutePreprocessor.timeout = settings["cell_timeout"]
    cfg.Execute.timeout = settings["cell_timeout"]
    cfg.SafeExecute.notebook_timeout = settings["notebook_timeout"]
    cfg.Execute.kernel_name = "trainclinic-sandbox"
    cfg.Execute.shutdown_kernel = "immediate"
    cfg.Execute.startup_timeout = 120
    # nbgrader's Execute raises on an IOPub timeout, failing the whole notebook: the wait only starts once a cell has
    # replied, so it is no guard against a hang (the cell and notebook budgets are); on a loaded grading machine a
    # cell's last outputs can take more than 10 s to arrive
    cfg.Execute.iopub_timeout = 60
    cfg.NbGraderAPI.log_level = "WARN"
    return cfg


def _others_can_reach(*paths):
    """True when every folder above these paths lets other users through (a kernel run as `nobody` needs it)."""
    for path in paths:
        for parent in Path(os.path.realpath(path)).parents:
            if not os.stat(parent).st_mode & stat.S_IXOTH:
                return False
    return True


def _kernelspec(tdir, settings, home):
    share = tdir / "share"
    spec = share / "kernels" / "trainclinic-sandbox"
    spec.mkdir(parents=True)
    cfg = {"mem": settings["memory"], "fsize": 256 << 20, "hide": settings["hide"], "keep": settings.get("keep", []),
           "isolate": settings["isolate"],
           "user": 65534 if settings["isolate"] and settings.get("real_root") and _others_can_reach(sys.executable, HERE, tdir) else None, "home": str(home), "task": str(tdir),
           "python": sys.executable, "guard": str(HERE / "guard.py"), "threads": settings.get("threads", 1)}
    (spec / "sandbox.json").write_text(json.dumps(cfg))  # a file, not an argument: see grade.Pool._spawn
    argv = [sys.executable, str(HERE / "sandbox.py"), str(spec / "sandbox.json"), "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": "trainclinic (grading)", "language": "python"}))
    return share


def _outcome(nb):
    """Reasons, from the executed notebook: limits hit, kernel deaths, tampering found by the guard."""
    reasons = []
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        where = gid or f"cell {i}"
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error" and out.get("ename") in ("KernelDied", "CellTimeoutError", "NotebookTimeout", "IntegrityError"):
                reasons.append(f"{where}: {out['ename']}: {out['evalue']}")
            if out.get("output_type") == "error" and (out.get("ename") == "MemoryError" or "can't allocate memory" in out.get("evalue", "")):
                reasons.append(f"{where}: out of memory (the cap is {settings_memory_gb():g} GB): {out['ename']}")
            if out.get("output_type") == "stream" and "... Output truncated ..." in out.get("text", ""):
                reasons.append(f"{where}: output truncated (too long)")
            if out.get("output_type") == "stream":
                for line in out.get("text", "").splitlines():
                    if line.startswith("⚠ trainclinic grader:"):
                        reasons.append(f"{where}: {line[len('⚠ trainclinic grader: '):]}")
    return reasons


def settings_memory_gb():
    return round(_SETTINGS.get("memory", 0) / 2**30, 2)


_SETTINGS = {}


def _dedupe(reasons):
    seen, out = set(), []
    for r in reasons:
        if r not in seen:
            seen.add(r)
            out.append(r)
    return out


def grade_task(task, settings):
    """Grade one submission in a private course folder; return the result dict."""
    import nbformat
    from nbgrader.api import Gradebook
    from nbgrader.apps import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory

    t0 = time.monotonic()
    student, lesson = task["student"], task["lesson"]
    tdir = Path(settings["work"]) / task["key"]
    shutil.rmtree(tdir, ignore_errors=True)
    tdir.mkdir(parents=True)
    os.chmod(tdir, 0o711)
    course = tdir / "course"
    (course / "submitted" / student / lesson).mkdir(parents=True)
    os.chmod(course / "submitted", 0o700)
    (course / "solutions").symlink_to(Path(settings["course"]) / "solutions")
    shutil.copy(task["notebook"], course / "submitted" / student / lesson / f"{lesson}.ipynb")
    gradebook = Path(settings["work"]) / f"{task['key']}.db"  # outside the task folder: the kernel cannot see it
    shutil.copy(settings["template"], gradebook)
    os.chmod(gradebook, 0o600)
    home = tdir / "home"
    home.mkdir()
    os.environ["JUPYTER_PATH"] = str(_kernelspec(tdir, settings, home))
    token = secrets.token_hex(16)
    os.environ["TRAINCLINIC_GUARD_TOKEN"] = token
    cfg = _config(settings, course, gradebook)
    api = NbGraderAPI(coursedir=CourseDirectory(config=cfg), config=cfg)
    result = {"key": task["key"], "student": student, "lesson": lesson, "status": "graded", "reasons": list(task.get("reasons", []))}
    t1 = time.monotonic()
    try:
        res = api.autograde(lesson, student, force=True, create=True)
    finally:
        os.environ.pop("TRAINCLINIC_GUARD_TOKEN", None)
    t2 = time.monotonic()
    url = f"sqlite:///{gradebook}"
    auto = course / "autograded" / student / lesson / f"{lesson}.ipynb"
    if not res.get("success") or not auto.exists():
        result["status"] = "failed"
        log = (res.get("error") or "") + "\n" + (res.get("log") or "")
        lines = [l.strip() for l in log.splitlines() if l.strip() and "Traceback" not in l]
        raised = [l for l in lines if re.match(r"[\w.]*(Error|Exception|Timeout\w*)\b", l)][-1:]  # what nbgrader caught
        last = raised + [l for l in lines[-3:] if l not in raised]
        result["reasons"].append("nbgrader autograde failed: " + " | ".join(last)[:500])
        result["scores"] = {}
    else:
        with Gradebook(url) as gb:
            nbrec = gb.find_submission_notebook(lesson, lesson, student)
            scores = {g.name: [g.score, g.max_score] for g in nbrec.grades}
        result["reasons"] += _outcome(nbformat.read(str(auto), as_version=4))
        result["scores"] = scores
        t3 = time.monotonic()
        fb = api.generate_feedback(lesson, student, force=True)
        result["timing"] = {"setup": round(t1 - t0, 2), "autograde": round(t2 - t1, 2), "feedback": round(time.monotonic() - t3, 2)}
        html = course / "feedback" / student / lesson / f"{lesson}.html"
        if fb.get("success") and html.exists():
            result["feedback"] = str(html)
        else:
            result["reasons"].append("feedback not generated: " + (fb.get("error") or "")[-200:])
        result["autograded"] = str(auto)
    result["reasons"] = _dedupe(result["reasons"])
    result["seconds"] = round(time.monotonic() - t0, 2)
    result["dir"] = str(tdir)
    gradebook.unlink(missing_ok=True)
    return result


def _network_off():
    """Bring up loopback in the private network namespace the parent started us in (kernels talk over it)."""
    if os.environ.get("TRAINCLINIC_NETNS") == "1":
        subprocess.run(["ip", "link", "set", "lo", "up"], check=False, capture_output=True)


def main():
    settings = json.loads(Path(sys.argv[1]).read_text())
    _SETTINGS.update(settings)
    try:  # die with the parent: an interrupted run leaves no orphan graders behind
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)
    except Exception:
        pass
    _network_off()
    sys.path.insert(0, str(REPO))
    import autograder.execute  # noqa: F401  (import once, before the first task)
    import nbgrader.apps  # noqa: F401

    out = sys.stdout
    sys.stdout = sys.stderr  # nbgrader's chatter must not mix with the answers
    print("READY", file=out, flush=True)
    for line in sys.stdin:
        task = json.loads(line)
        try:
            result = grade_task(task, settings)
        except Exception as exc:  # never lose a task: report it as failed to grade
            import traceback

            traceback.print_exc()
            result = {"key": task["key"], "student": task["student"], "lesson": task["lesson"], "status": "failed",
                      "scores": {}, "reasons": list(task.get("reasons", [])) + [f"grader error: {type(exc).__name__}: {exc}"[:400]]}
        print(json.dumps(result), file=out, flush=True)


if __name__ == "__main__":
    main()
