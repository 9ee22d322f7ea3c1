"""Run a notebook without Jupyter: its code cells in order, in one namespace.

For machines with no Jupyter packages (a GPU box for `make gpu-check`), and for grading many variants fast
(the compatibility suite). Honours the `raises-exception` tag (the error is recorded and the run goes on),
skips IPython magics (% and ! lines), and stops at the first unexpected error, unless `grade=True`: then,
as nbgrader does, every cell runs and each graded cell's verdict is recorded (an error or stderr loses it).

`serve()` is a fork server: it imports torch and trainclinic once, then runs each notebook it is sent in a
forked child (a fresh namespace and global state for every notebook, without paying the imports again).
"""
import contextlib
import io
import json
import os
import sys
import time
import traceback
from pathlib import Path

__all__ = ["run_notebook", "serve"]


def _source(cell):
    src = cell.get("source", "")
    src = "".join(src) if isinstance(src, list) else src
    return "\n".join(line for line in src.splitlines() if not line.lstrip().startswith(("%", "!")))


def run_notebook(path, echo=False, grade=False, graded_only=False):
    """Execute the code cells of `path`; return {passed, seconds, cells, checks, repro_errors, error, graded}.

    With grade=True every cell runs whatever fails, and `graded` maps each graded cell's grade_id to
    {passed, error, stdout, stderr}. graded_only=True stops after the last graded cell (later cells cannot
    change a verdict)."""
    nb = json.loads(Path(path).read_text())
    if graded_only:
        last = max((i for i, c in enumerate(nb["cells"]) if c.get("metadata", {}).get("nbgrader", {}).get("grade")),
                   default=len(nb["cells"]) - 1)
        nb["cells"] = nb["cells"][:last + 1]
    namespace = {"__name__": "__main__"}
    result = {"notebook": str(path), "passed": True, "cells": 0, "checks": 0, "repro_errors": [], "error": None,
              "graded": {}}
    start = time.perf_counter()
    cwd = os.getcwd()
    os.chdir(Path(path).parent)
    try:
        for index, cell in enumerate(nb["cells"]):
            if cell.get("cell_type") != "code":
                continue
            result["cells"] += 1
            out, err = io.StringIO(), io.StringIO()
            meta = cell.get("metadata", {})
            tags = meta.get("tags", [])
            failure = None
            try:
                with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err if grade else sys.stderr):
                    exec(compile(_source(cell), f"<cell {index}>", "exec"), namespace)
            except BaseException as exc:  # noqa: BLE001 - a notebook may raise anything; SystemExit included
                record = {"cell": index, "type": f"{type(exc).__module__}.{type(exc).__name__}", "message": str(exc)[:2000]}
                if "raises-exception" in tags and isinstance(exc, Exception):
                    result["repro_errors"].append(record)
                else:
                    record["traceback"] = traceback.format_exc()[-2000:]
                    failure = record
                    if not grade or isinstance(exc, KeyboardInterrupt):
                        result["passed"], result["error"] = False, record
                        break
                exc.__traceback__ = None  # recorded: the cell's frames die now, not at a later garbage collection,
                # where a DataLoader iterator that failed inside them would wait 5 s for each of its workers
            finally:
                result["checks"] += out.getvalue().count("✓ ")
                if echo:
                    sys.stdout.write(out.getvalue())
                nbg = meta.get("nbgrader", {})
                if grade and nbg.get("grade"):
                    result["graded"][nbg.get("grade_id")] = {
                        "passed": failure is None and not err.getvalue(), "error": failure,
                        "stdout": out.getvalue()[-4000:], "stderr": err.getvalue()[-2000:]}
                elif grade and failure and result["error"] is None:
                    result["error"] = failure  # an ungraded cell failed: later cells may suffer, as in nbgrader
    finally:
        os.chdir(cwd)
    result["seconds"] = round(time.perf_counter() - start, 2)
    return result


def serve(preload=("torch", "trainclinic", "torch._dynamo", "matplotlib.figure")):
    """Fork server on stdin/stdout: each line {"path", "timeout", "env", "graded_only"} runs one notebook (grade=True) in a
    forked child and answers one JSON line with its result (or a timeout / crash verdict)."""
    import importlib
    import signal
    import tempfile

    for name in preload:  # the expensive imports, paid once
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    reply = sys.stdout
    sys.stdout = sys.stderr  # nothing but answers on the reply channel
    try:
        from trainclinic import processes
    except ImportError:
        processes = None
    # The fresh interpreters a notebook starts (trainclinic.processes, lesson 09: torch imported in each, seconds)
    # are started here once, for the PYTHONHASHSEEDs notebooks asked for before, and handed to every fork: each
    # call still runs in a fork of a pristine interpreter. One left busy or unread (a killed notebook) is replaced.
    warm, wanted = {}, set()
    for line in sys.stdin:
        job = json.loads(line)
        if processes is not None:
            for seed in list(warm):
                if not warm[seed].idle():
                    warm.pop(seed).close()
            for seed in wanted - set(warm):
                warm[seed] = processes.Interpreter(seed)
            warm = {seed: it for seed, it in warm.items() if it.idle()}
            processes._INTERPRETERS.clear()
            processes._INTERPRETERS.update(warm)
        with tempfile.NamedTemporaryFile("r", suffix=".json") as answer:
            start = time.perf_counter()
            pid = os.fork()
            if pid == 0:  # child: run, write the answer, leave at once
                code = 0
                try:
                    os.environ.update(job.get("env", {}))
                    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
                        res = run_notebook(job["path"], grade=True, graded_only=job.get("graded_only", False))
                    if processes is not None:  # the hashseeds of the interpreters it started itself
                        res["interpreters"] = [seed for seed, it in processes._INTERPRETERS.items()
                                               if it.owner == os.getpid() and seed is not None]
                    Path(answer.name).write_text(json.dumps(res))
                except BaseException:  # noqa: BLE001
                    Path(answer.name).write_text(json.dumps({"crash": traceback.format_exc()[-2000:]}))
                    code = 1
                finally:
                    os._exit(code)
            deadline = start + job.get("timeout", 120)
            status = None
            while time.perf_counter() < deadline:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    break
                time.sleep(0.05)
            else:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                res = {"timeout": job.get("timeout", 120)}
                status = None
            if status is not None:
                text = Path(answer.name).read_text()
                res = json.loads(text) if text else {"crash": f"the notebook's process died (wait status {status})"}
                wanted.update(res.pop("interpreters", []))
            res["wall"] = round(time.perf_counter() - start, 2)
        reply.write(json.dumps(res) + "\n")
        reply.flush()
    for it in warm.values():
        it.close()


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        serve()
    else:
        print(json.dumps(run_notebook(sys.argv[1], echo=True), indent=1))
