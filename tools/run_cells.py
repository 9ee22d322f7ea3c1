"""Run a notebook without Jupyter: its code cells in order, in one namespace.

For machines with no Jupyter packages (a GPU box for `make gpu-check`), and for grading many variants fast
(the compatibility suite). Honours the `raises-exception` tag (the error is recorded and the run goes on),
skips IPython magics (% and ! lines), and stops at the first unexpected error, unless `grade=True`: then,
as nbgrader does, every cell runs and each graded cell's verdict is recorded (an error or stderr loses it).

`serve()` is a fork server: it imports torch and trainclinic once, then runs each notebook it is sent in a
forked child (a fresh namespace and global state for every notebook, without paying the imports again).
"""
import contextlib
import gc
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


def _cells(path, graded_only):
    nb = json.loads(Path(path).read_text())
    if graded_only:
        last = max((i for i, c in enumerate(nb["cells"]) if c.get("metadata", {}).get("nbgrader", {}).get("grade")),
                   default=len(nb["cells"]) - 1)
        nb["cells"] = nb["cells"][:last + 1]
    return nb["cells"]


def _fresh(path):
    return {"notebook": str(path), "passed": True, "cells": 0, "checks": 0, "repro_errors": [], "error": None,
            "graded": {}, "seconds": 0.0}


def run_notebook(path, echo=False, grade=False, graded_only=False):
    """Execute the code cells of `path`; return {passed, seconds, cells, checks, repro_errors, error, graded}.

    With grade=True every cell runs whatever fails, and `graded` maps each graded cell's grade_id to
    {passed, error, stdout, stderr}. graded_only=True stops after the last graded cell (later cells cannot
    change a verdict)."""
    cells, result = _cells(path, graded_only), _fresh(path)
    cwd = os.getcwd()
    os.chdir(Path(path).parent)
    try:
        _run(cells, 0, len(cells), {"__name__": "__main__"}, result, echo, grade)
    finally:
        os.chdir(cwd)
    return result


def _run(cells, begin, end, namespace, result, echo=False, grade=False):
    """Run cells[begin:end] in `namespace`, adding to `result` (run_notebook's fields)."""
    start = time.perf_counter()
    try:
        for index in range(begin, end):
            cell = cells[index]
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
        result["seconds"] = round(result["seconds"] + time.perf_counter() - start, 2)
    return result


def _prefix(cells):
    """How many leading cells every submission of a lesson shares: those before the first answer cell (None if no
    answer cell, or a graded cell comes before it)."""
    meta = [c.get("metadata", {}).get("nbgrader", {}) for c in cells]
    first = next((i for i, m in enumerate(meta) if m.get("solution")), None)
    return first if first and not any(m.get("grade") for m in meta[:first]) else None


def _refresh(warm, wanted, processes):
    """Keep one idle interpreter per wanted PYTHONHASHSEED in `warm` (busy or dead ones replaced) and hand them to
    the next fork through processes._INTERPRETERS."""
    for seed in list(warm):
        if not warm[seed].idle():
            it = warm.pop(seed)
            if it.owner == os.getpid():
                it.close()
    for seed in wanted - set(warm):
        warm[seed] = processes.Interpreter(seed)
    for seed in [seed for seed, it in warm.items() if not it.idle()]:
        warm.pop(seed)
    processes._INTERPRETERS.clear()
    processes._INTERPRETERS.update(warm)


def _started(processes):
    """The hashseeds of the interpreters this process started itself."""
    return [] if processes is None else [seed for seed, it in processes._INTERPRETERS.items()
                                         if it.owner == os.getpid() and seed is not None]


def _wait(pid, timeout):
    """Wait for a child; its wait status, or None once it was killed at `timeout` seconds."""
    import signal

    deadline = time.perf_counter() + timeout
    while time.perf_counter() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return status
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return None


def _child(run, answer, processes):
    """In a forked child: run(), write its result (and the interpreters it started) to `answer`, leave at once."""
    code = 0
    try:
        with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
            res = run()
        res["interpreters"] = _started(processes)
        Path(answer).write_text(json.dumps(res))
    except BaseException:  # noqa: BLE001
        Path(answer).write_text(json.dumps({"crash": traceback.format_exc()[-2000:]}))
        code = 1
    finally:
        os._exit(code)


def _answer(status, answer, timeout):
    if status is None:
        return {"timeout": timeout}
    text = Path(answer).read_text()
    return json.loads(text) if text else {"crash": f"the notebook's process died (wait status {status})"}


def _special(path):
    """A socket, pipe or device (multiprocessing's listener, say): neither saved nor removed."""
    return not (os.path.islink(path) or os.path.isfile(path) or os.path.isdir(path))


def _save(folder, saved):
    import shutil

    shutil.copytree(folder, saved, symlinks=True,
                    ignore=lambda d, names: [n for n in names if _special(os.path.join(d, n))])


def _restore(folder, saved):
    """Put `folder` back as `saved` holds it, in place: folders that exist in both are kept (a process whose working
    folder is one of them keeps it), everything else is removed or copied back; sockets and pipes are left alone."""
    import shutil

    keep = set(os.listdir(saved))
    for name in os.listdir(folder):
        path = os.path.join(folder, name)
        if _special(path):
            continue
        if name not in keep or os.path.isdir(path) != os.path.isdir(os.path.join(saved, name)) or os.path.islink(path):
            shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.unlink(path)
    for name in keep:
        src, dst = os.path.join(saved, name), os.path.join(folder, name)
        if os.path.isdir(src) and not os.path.islink(src):
            os.makedirs(dst, exist_ok=True)
            _restore(dst, src)
        elif not os.path.lexists(dst):
            shutil.copy2(src, dst, follow_symlinks=False)
        elif not os.path.islink(src):
            shutil.copy2(src, dst)


def _forkable(processes):
    """Whether a fork of this process can go on as this process would: no thread or child process of the prefix's
    still running (a fork has neither), and no GPU found by a CUDA build: a fork could not use it. A CUDA build that
    looked and found none (Colab's CPU runtime) leaves forks that find none either; only a call that asks for CUDA
    itself reads another message there, "Cannot re-initialize CUDA in forked subprocess" for "Found no NVIDIA driver",
    which the checks give the same hint."""
    import threading

    if threading.active_count() > 1:
        return False
    own = {it.proc.pid for it in (processes._INTERPRETERS.values() if processes else [])}
    try:
        with open(f"/proc/{os.getpid()}/task/{os.getpid()}/children") as f:
            if set(map(int, f.read().split())) - own:
                return False
    except OSError:
        return False
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch.cuda, "_is_in_bad_fork"):
        return True
    pid = os.fork()
    if pid == 0:
        os._exit(3 if torch.cuda._is_in_bad_fork() else 0)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0 or not torch.cuda.is_available()


def _freeze():
    """Collect, then move every object left to the collector's permanent generation: a fork's collections then skip
    what it inherited. Otherwise a full collection (what a gc.collect() in a check runs) walks torch's few hundred
    thousand objects, writing to each, and the fork copies every page they sit on: 0.33 s a collection, 0.03 s frozen."""
    gc.collect()
    gc.freeze()


class _Zygote:
    """A fork of the server that ran a lesson's shared prefix (the cells before the first answer cell) once; each
    submission then runs in a fork of it, from the first answer cell on. The prefix's files (its working folder
    and its temporary folder) are put back as they were after every submission, so none sees another's."""

    def __init__(self, cells, first, env, warm, wanted, processes, notebook):
        import random
        import shutil
        import tempfile

        self.home = tempfile.mkdtemp(prefix="run-cells-prefix-")
        jobs_r, self.jobs = os.pipe()
        self.replies, reply_w = os.pipe()
        self.pid = os.fork()
        if self.pid:
            os.close(jobs_r), os.close(reply_w)
            self.buffer = b""
            return
        os.close(self.jobs), os.close(self.replies)
        code = 0
        try:
            os.setpgid(0, 0)  # the server ends this zygote and its submissions together
            out = os.fdopen(reply_w, "w")
            work, tmp = os.path.join(self.home, "cwd"), os.path.join(self.home, "tmp")
            os.mkdir(work), os.mkdir(tmp)
            shutil.copy2(notebook, work)  # a run from the top has its notebook beside it
            system_tmp, system_env = tempfile.gettempdir(), os.environ.get("TMPDIR")
            os.environ.update(env, TMPDIR=tmp)
            tempfile.tempdir = tmp
            os.chdir(work)
            namespace, result = {"__name__": "__main__"}, _fresh("")
            try:
                with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
                    _run(cells, 0, first, namespace, result, grade=True)
                ok = (result["passed"] and result["error"] is None and not result["graded"]
                      and _forkable(processes))
                for folder in (work, tmp):
                    _save(folder, folder + ".prefix")
            except BaseException:  # noqa: BLE001
                ok = False
            out.write(json.dumps({"ready": ok, "interpreters": _started(processes)}) + "\n")
            out.flush()
            if not ok:
                return
            _freeze()
            if processes is not None:
                warm.update(processes._INTERPRETERS)  # those the prefix started are handed on too
            for line in os.fdopen(jobs_r):
                job = json.loads(line)
                if processes is not None:  # interpreters live outside the prefix's folders, which are put back
                    wanted.update(job.get("wanted", []))
                    tempfile.tempdir = system_tmp
                    os.environ.pop("TMPDIR") if system_env is None else os.environ.update(TMPDIR=system_env)
                    _refresh(warm, wanted, processes)
                    tempfile.tempdir, os.environ["TMPDIR"] = tmp, tmp
                shutil.copy2(job["path"], work)  # this submission's own notebook, where the first one was
                state = random.getstate()  # Python reseeds `random` in every forked child: undone below
                pid = os.fork()
                if pid == 0:
                    random.setstate(state)

                    def rest(job=job):
                        res = dict(result, notebook=job["path"], repro_errors=list(result["repro_errors"]), graded={})
                        rest = _cells(job["path"], job.get("graded_only", False))
                        return _run(rest, first, len(rest), namespace, res, grade=True)
                    _child(rest, job["answer"], processes)
                status = _wait(pid, job.get("timeout", 120))
                for folder in (work, tmp):
                    _restore(folder, folder + ".prefix")
                os.chdir(work)
                clean = processes is None or all(it.idle(wait=5) for it in processes._INTERPRETERS.values())
                out.write(json.dumps({"status": status, "clean": clean}) + "\n")
                out.flush()
                if not clean:
                    return
        except BaseException:  # noqa: BLE001
            code = 1
        finally:
            if processes is not None:
                for it in processes._INTERPRETERS.values():
                    if it.owner == os.getpid():
                        it.close()
            os._exit(code)

    def ready(self, timeout):
        """The prefix ran without error: {"ready": bool, "interpreters": [...]}, or None (hung or died)."""
        return self._reply(timeout)

    def run(self, job, timeout):
        """Run one submission; its reply {"status", "clean"}, or None if the zygote hung or died."""
        try:
            os.write(self.jobs, (json.dumps(job) + "\n").encode())
        except OSError:
            return None
        return self._reply(timeout)

    def _reply(self, timeout):
        import select

        deadline = time.perf_counter() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.perf_counter()
            if left <= 0 or not select.select([self.replies], [], [], left)[0]:
                return None
            chunk = os.read(self.replies, 65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\n", 1)
        return json.loads(line)

    def close(self):
        """End the zygote, anything it still runs, and its files."""
        import shutil
        import signal

        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            os.waitpid(self.pid, 0)
        except ChildProcessError:
            pass
        for fd in (self.jobs, self.replies):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.home, ignore_errors=True)


def serve(preload=("torch", "trainclinic", "torch._dynamo", "matplotlib.figure"), zygotes=3):
    """Fork server on stdin/stdout: each line {"path", "timeout", "env", "graded_only", "share_prefix"} runs one
    notebook (grade=True) in a forked child and answers one JSON line with its result (or a timeout / crash verdict).

    With "share_prefix", notebooks whose cells before the first answer cell are the same (a lesson's submissions) run
    those cells once, in a zygote kept for the next ones (the `zygotes` most recently used are kept): each then runs
    in a fork of it from its first answer cell on, with the state, files and random streams a run from the top has."""
    import importlib
    import tempfile

    for name in preload:  # the expensive imports, paid once
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    _freeze()
    reply = sys.stdout
    sys.stdout = sys.stderr  # nothing but answers on the reply channel
    try:
        from trainclinic import processes
    except ImportError:
        processes = None
    # The fresh interpreters a notebook starts (trainclinic.processes, lesson 09: torch imported in each, seconds)
    # are started here once, for the PYTHONHASHSEEDs notebooks asked for before, and handed to every fork: each
    # call still runs in a fork of a pristine interpreter. One left busy or unread (a killed notebook) is replaced.
    warm, wanted, kept, unshareable = {}, set(), {}, set()
    for line in sys.stdin:
        job = json.loads(line)
        if processes is not None:
            _refresh(warm, wanted, processes)
        with tempfile.NamedTemporaryFile("r", suffix=".json") as answer:
            start = time.perf_counter()
            timeout = job.get("timeout", 120)
            res = None
            if job.get("share_prefix"):
                try:
                    res = _shared(job, answer.name, kept, unshareable, warm, wanted, processes, zygotes)
                except OSError:  # no fork, no pipe: run it from the top
                    res = None
            if res is None:
                pid = os.fork()
                if pid == 0:  # child: run, write the answer, leave at once
                    os.environ.update(job.get("env", {}))
                    _child(lambda: run_notebook(job["path"], grade=True, graded_only=job.get("graded_only", False)),
                           answer.name, processes)
                res = _answer(_wait(pid, timeout), answer.name, timeout)
            wanted.update(res.pop("interpreters", []))
            res["wall"] = round(time.perf_counter() - start, 2)
        reply.write(json.dumps(res) + "\n")
        reply.flush()
    for zygote in kept.values():
        zygote.close()
    for it in warm.values():
        it.close()


def _shared(job, answer, kept, unshareable, warm, wanted, processes, limit):
    """Run `job` in a fork of the zygote that ran its prefix (started if none has); None when its prefix cannot be
    shared (no answer cell, files beside the notebook, a prefix that failed or left what a fork cannot have: a
    thread, a process, CUDA looked for): the caller runs it from the top."""
    cells = _cells(job["path"], False)
    first = _prefix(cells)
    folder = Path(job["path"]).parent
    if first is None or any(p.name != Path(job["path"]).name for p in folder.iterdir()):
        return None  # files beside the notebook: the prefix may read them, so it runs there, from the top
    key = json.dumps([[c.get("cell_type"), _source(c)] for c in cells[:first]]
                     + [sorted(job.get("env", {}).items()), Path(job["path"]).name])
    timeout = job.get("timeout", 120)
    if key in unshareable:
        return None
    zygote = kept.pop(key, None)
    if zygote is None:
        zygote = _Zygote(cells, first, job.get("env", {}), warm, wanted, processes, job["path"])
        ready = zygote.ready(timeout)
        if not ready or not ready["ready"]:
            zygote.close()
            unshareable.add(key)  # its prefix fails or leaves what a fork cannot have: from the top, always
            if ready:
                wanted.update(ready.get("interpreters", []))
            return None
        wanted.update(ready.get("interpreters", []))
    kept[key] = zygote  # most recently used last
    while len(kept) > limit:
        kept.pop(next(iter(kept))).close()
    done = zygote.run({"path": job["path"], "graded_only": job.get("graded_only", False), "timeout": timeout,
                       "answer": answer, "wanted": sorted(wanted)}, timeout + 30)
    if done is None or not done["clean"]:
        kept.pop(key).close()
    if done is None:
        return {"timeout": timeout}
    return _answer(done["status"], answer, timeout)


if __name__ == "__main__":
    if sys.argv[1:] == ["--serve"]:
        serve()
    else:
        print(json.dumps(run_notebook(sys.argv[1], echo=True), indent=1))
