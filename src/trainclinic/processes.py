"""Run a function in another Python process: a fresh interpreter (its own PYTHONHASHSEED, its own random state).

`Interpreter(hashseed)` starts `python` once (it imports torch once, a few seconds) and then runs each call in a
fork of itself: every call starts from the same fresh state, in a process other than yours, in well under a
second. Functions defined in a notebook (module `__main__`) travel by value: their compiled code (marshal), the
globals they use (modules by name, other notebook functions and classes by value, the rest by pickle) and their
defaults and closures; never their source text. Functions from importable modules travel by reference.
Calls are bounded: past `timeout` the call's whole process group is killed and `ProcessTimeout` raised.
"""
import atexit
import dis
import functools
import gc
import importlib
import io
import marshal
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import tempfile
import time
import types

__all__ = ["Interpreter", "ProcessTimeout", "ProcessError", "interpreter", "other_hashseed", "warm_workers", "close_all", "run_each", "here_and_in",
           "dumps"]


class ProcessTimeout(Exception):
    """A call in another process did not finish in time (it was killed)."""


class ProcessError(Exception):
    """A call in another process raised: `.kind` is the exception's type name, `.text` its message."""

    def __init__(self, kind, text, where=""):
        super().__init__(f"{kind}: {text}{where}")
        self.kind, self.text, self.where = kind, text, where


# ---- functions and classes by value --------------------------------------------------------------------------

_GLOBAL_OPS = {"LOAD_GLOBAL", "STORE_GLOBAL", "DELETE_GLOBAL", "LOAD_NAME", "STORE_NAME"}


def _global_names(code):
    """The global names a code object (and the code nested in it) reads or writes."""
    names = set()
    for ins in dis.get_instructions(code):
        if ins.opname in _GLOBAL_OPS and isinstance(ins.argval, str):
            names.add(ins.argval)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def _by_value(obj):
    """True for a function or class that cannot be imported by name in another process (defined in a notebook)."""
    module = getattr(obj, "__module__", None)
    if module in (None, "__main__", "__mp_main__"):
        return True
    mod = sys.modules.get(module)
    target = mod
    for part in getattr(obj, "__qualname__", "").split("."):
        target = getattr(target, part, None)
    return target is not obj


def _main_globals():
    import __main__

    return vars(__main__)


def _function_skeleton(code, name, qualname, ncells):
    """A function with the shipped code, living in this process's __main__; its state comes after (recursion)."""
    closure = tuple(types.CellType() for _ in range(ncells)) or None
    fn = types.FunctionType(marshal.loads(code), _main_globals(), name, None, closure)
    fn.__qualname__ = qualname
    return fn


def _function_state(fn, state):
    g = _main_globals()
    for key, value in state["globals"].items():
        g.setdefault(key, value)  # the first shipped definition of a name wins (notebook functions share globals)
    fn.__defaults__, fn.__kwdefaults__ = state["defaults"], state["kwdefaults"]
    for cell, value in zip(fn.__closure__ or (), state["cells"]):
        if value is not _EMPTY:
            cell.cell_contents = value
    fn.__dict__.update(state["dict"])
    fn.__module__ = "__main__"
    return fn


class _Empty:
    def __reduce__(self):
        return "_EMPTY"


_EMPTY = _Empty()


def _class_skeleton(metaclass, name, bases):
    return metaclass(name, bases, {"__module__": "__main__"})


def _class_state(cls, state):
    for key, value in state.items():
        setattr(cls, key, value)
    _main_globals().setdefault(cls.__name__, cls)
    return cls


def _lru_cached(fn, maxsize, typed):
    return functools.lru_cache(maxsize=maxsize, typed=typed)(fn)


def _module(name):
    return importlib.import_module(name)


class _Pickler(pickle.Pickler):
    """pickle, with notebook functions and classes by value and modules by name."""

    def reducer_override(self, obj):
        if isinstance(obj, types.ModuleType):
            return _module, (obj.__name__,)
        wrapped = getattr(obj, "__wrapped__", None)
        if isinstance(obj, functools._lru_cache_wrapper) and isinstance(wrapped, types.FunctionType) and \
                _by_value(wrapped):  # a notebook's @lru_cache function: its function, in a fresh cache (as a script)
            params = obj.cache_parameters()
            return _lru_cached, (wrapped, params["maxsize"], params["typed"])
        if isinstance(obj, types.FunctionType) and _by_value(obj):
            g = obj.__globals__
            used = {n: g[n] for n in sorted(_global_names(obj.__code__)) if n in g and n != "__builtins__"}
            for n, value in used.items():  # name the culprit now: pickle's own error would not
                _check_sendable(n, value, obj.__name__)
            cells = []
            for cell in obj.__closure__ or ():
                try:
                    cells.append(cell.cell_contents)
                except ValueError:
                    cells.append(_EMPTY)
            state = {"globals": used, "defaults": obj.__defaults__, "kwdefaults": obj.__kwdefaults__,
                     "cells": cells, "dict": dict(vars(obj))}
            args = (marshal.dumps(obj.__code__), obj.__name__, obj.__qualname__, len(obj.__closure__ or ()))
            return _function_skeleton, args, state, None, None, _function_state
        if isinstance(obj, type) and _by_value(obj) and obj.__module__ in ("__main__", "__mp_main__"):
            skip = {"__dict__", "__weakref__", "__module__", "__qualname__"}
            state = {k: v for k, v in vars(obj).items() if k not in skip}
            return _class_skeleton, (type(obj), obj.__name__, obj.__bases__), state, None, None, _class_state
        return NotImplemented


def _check_sendable(name, value, owner):
    if isinstance(value, (types.ModuleType, types.FunctionType, type)) or value is None:
        return
    try:
        _Pickler(io.BytesIO(), protocol=pickle.HIGHEST_PROTOCOL).dump(value)
    except Exception as exc:
        raise ProcessError("TypeError", f"`{owner}` uses the global `{name}` ({type(value).__name__}), which cannot "
                           f"be sent to another process ({type(exc).__name__}: {exc}): create it inside the "
                           "function instead") from None


def dumps(obj):
    """pickle bytes of `obj`, with notebook functions and classes by value (compiled code, never source text)."""
    buf = io.BytesIO()
    _Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    return buf.getvalue()


# ---- the interpreter: a fork server -----------------------------------------------------------------------------

def _where(exc):
    """The last frame outside torch and trainclinic, as ' (in fn, line N)'."""
    import traceback

    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if "/torch/" not in f.filename and "/trainclinic/" not in f.filename]
    return f" (in {frames[-1].name}, line {frames[-1].lineno})" if frames else ""


def _job(payload_path, result_path):
    """In the forked child: run the call and write {'value': ...} or {'error': (type, text, where)}."""
    try:
        with open(payload_path, "rb") as f:
            fn, args, kwargs = pickle.load(f)
        out = {"value": fn(*args, **kwargs)}
    except BaseException as exc:  # noqa: BLE001 - everything goes back as a verdict
        out = {"error": (type(exc).__name__, str(exc), _where(exc))}
    try:
        data = pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001
        data = pickle.dumps({"error": ("TypeError", f"the result cannot be sent back: {exc}", "")})
    with open(result_path, "wb") as f:
        f.write(data)


def warm_workers():
    """Import here what a forked DataLoader worker imports to send its first tensor (seconds on torch 2.4, where
    every new worker paid it again, every epoch): workers forked afterwards inherit it."""
    import torch
    from multiprocessing.reduction import ForkingPickler

    ForkingPickler.dumps(torch.zeros(1))


def _serve():
    """The interpreter's loop: read 'payload result' path pairs on stdin, fork one child per call, report on stdout."""
    import torch  # noqa: F401 - paid once here, not in every call

    import trainclinic  # noqa: F401

    warm_workers()
    # a call's collections skip what every call inherits (without it, a gc.collect() in a fork walks torch's objects
    # and copies every page they sit on: a third of a second)
    gc.collect()
    gc.freeze()

    out = os.fdopen(os.dup(1), "w", buffering=1)
    null = os.open(os.devnull, os.O_RDWR)
    out.write("ready\n")
    for line in sys.stdin:
        payload, result, log = line.split()
        pid = os.fork()
        if pid == 0:
            os.setpgid(0, 0)  # a group of its own: a timeout kills it with its DataLoader workers
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(fd, 1), os.dup2(fd, 2), os.dup2(null, 0)
            code = 0
            try:
                _job(payload, result)
            except BaseException:  # noqa: BLE001
                code = 1
            finally:
                sys.stdout.flush(), sys.stderr.flush()
                os._exit(code)
        out.write(f"started {pid}\n")
        _, status = os.waitpid(pid, 0)
        out.write(f"done {status}\n")


class Interpreter:
    """A fresh Python interpreter (PYTHONHASHSEED=`hashseed`, None: random) that runs calls in forks of itself."""

    def __init__(self, hashseed=None, threads=1):
        env = dict(os.environ)
        env.pop("PYTHONHASHSEED", None)
        if hashseed is not None:
            env["PYTHONHASHSEED"] = str(hashseed)
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
        path = [p for p in sys.path if p and os.path.isdir(p)]  # import what this process imports
        env["PYTHONPATH"] = os.pathsep.join(path + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
        self.hashseed, self.dir = hashseed, tempfile.mkdtemp(prefix="trainclinic-")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from trainclinic.processes import _serve; _serve()"], env=env,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
            cwd=self.dir, start_new_session=True)
        self.started, self.ready = time.monotonic(), False
        self._calls, self._buffer, self.owner = 0, b"", os.getpid()

    def alive(self):
        """Whether the interpreter runs (asked also from a fork that inherited this object, whose child it is not)."""
        if os.getpid() == self.owner:
            return self.proc.poll() is None
        try:
            with open(f"/proc/{self.proc.pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        except OSError:
            return False

    def idle(self, wait=60.0):
        """Ready for the next call from whichever process holds it (a fork server hands it to its forks): alive,
        its imports done (waits up to `wait` s), no call running and nothing left unread."""
        try:
            if not self.alive():
                return False
            if not self.ready:
                if self._line(self.started + wait) != ["ready"]:
                    return False
                self.ready = time.monotonic()
            if self._buffer or select.select([self.proc.stdout.fileno()], [], [], 0)[0]:
                return False
            with open(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children") as f:
                return not f.read().split()
        except (OSError, ValueError, ProcessError):
            return False

    def submit(self, fn, *args, **kwargs):
        """Send a call; returns a handle for `result`."""
        self._calls += 1
        base = os.path.join(self.dir, f"call{os.getpid()}-{self._calls}")  # forks sharing it never reuse a name
        with open(base + ".in", "wb") as f:
            f.write(dumps((fn, args, kwargs)))
        self.proc.stdin.write(f"{base}.in {base}.out {base}.log\n")
        self.proc.stdin.flush()
        return {"base": base, "pid": None, "sent": time.monotonic()}

    def _line(self, deadline):
        """The server's next line (split in words), or None at `deadline`; read from the raw pipe, own buffer."""
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 4096)
                if not chunk:
                    raise ProcessError("RuntimeError", "the interpreter exited (out of memory?)")
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode().split()

    def result(self, handle, timeout, startup=60.0):
        """The call's return value; ProcessError if it raised, ProcessTimeout after `timeout` seconds (counted from
        when the interpreter is ready: starting it, importing torch, may take up to `startup` seconds more)."""
        while True:
            deadline = (max(handle["sent"], self.ready) + timeout) if self.ready else self.started + startup + timeout
            words = self._line(deadline)
            if words is None:
                self._kill(handle)
                what = "the call" if self.ready else "the interpreter (still importing torch)"
                raise ProcessTimeout(f"{what} gave no result within {time.monotonic() - handle['sent']:.0f} s")
            if words[0] == "ready":
                self.ready = time.monotonic()
            elif words[0] == "started":
                handle["pid"] = int(words[1])
            elif words[0] == "done":
                break
        status = int(words[1])
        try:
            with open(handle["base"] + ".out", "rb") as f:
                out = pickle.load(f)
        except (OSError, EOFError, pickle.UnpicklingError):
            sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
            why = f"killed by signal {signal.Signals(sig).name}" if sig else f"exit status {os.waitstatus_to_exitcode(status)}"
            raise ProcessError("RuntimeError", f"the process ended without a result ({why})") from None
        if "error" in out:
            raise ProcessError(*out["error"])
        return out["value"]

    def _kill(self, handle):
        """Kill a call that ran out of time (its process group: DataLoader workers included)."""
        pid = handle.get("pid")
        try:
            if pid:
                os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if not pid or self._line(time.monotonic() + 5) is None:  # the server never reported: it is stuck, end it
            self.close()

    def close(self):
        """Stop the interpreter, and any call still running (each runs in a process group of its own)."""
        try:
            with open(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children") as f:
                calls = [int(pid) for pid in f.read().split()]
        except OSError:
            calls = []
        for pid in calls:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except OSError:
                pass


_INTERPRETERS = {}  # hashseed -> Interpreter, shared by the lesson's cells and its checks (mutated, never rebound)


def interpreter(hashseed=None):
    """The shared fresh interpreter for `hashseed` (started on first use; started again if it died)."""
    it = _INTERPRETERS.get(hashseed)
    if it is None or not it.alive():
        if not _INTERPRETERS:
            atexit.register(close_all)
        it = _INTERPRETERS[hashseed] = Interpreter(hashseed)
    return it


def close_all():
    """Stop the shared interpreters (they also stop by themselves when this process ends)."""
    for it in list(_INTERPRETERS.values()):
        it.close()
    _INTERPRETERS.clear()


def run_each(calls, timeout=10.0):
    """Run [(interpreter, fn, args)] concurrently, one call per interpreter; their results, in order.

    `timeout` counts from when each interpreter is ready (a starting interpreter gets up to 60 s more to import
    torch). Raises ProcessTimeout or ProcessError for the first call that fails (the others are still collected)."""
    handles = [(it, it.submit(fn, *args)) for it, fn, args in calls]
    results, failure = [], None
    for it, h in handles:
        try:
            results.append(it.result(h, timeout))
        except (ProcessTimeout, ProcessError) as exc:
            failure = failure or exc
            results.append(None)
    if failure is not None:
        raise failure
    return results


def here_and_in(interpreter, fn, *args, timeout=10.0, here=None):
    """(result here, result in `interpreter`) of fn(*args): the other process runs while this one does.
    `here` (optional) runs this process's side instead of fn, e.g. through a check's `call`."""
    handle = interpreter.submit(fn, *args)
    try:
        mine = (here or fn)(*args)
    except BaseException:
        try:
            interpreter.result(handle, timeout)  # let the other call finish (or be killed) before going on
        except (ProcessTimeout, ProcessError):
            pass
        raise
    return mine, interpreter.result(handle, timeout)


def other_hashseed():
    """A PYTHONHASHSEED that salts str hashes differently from this process's salt (checked, not assumed)."""
    probe = "trainclinic hash probe"
    for seed in (1, 2, 3):
        env = {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}
        env["PYTHONHASHSEED"] = str(seed)
        out = subprocess.run([sys.executable, "-S", "-c", f"print(hash({probe!r}))"], env=env, capture_output=True,
                             text=True, timeout=30).stdout.strip()
        if out != str(hash(probe)):
            return seed
    raise RuntimeError("no PYTHONHASHSEED among 1, 2, 3 salts str hashes differently from this process")
