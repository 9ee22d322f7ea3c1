"""Run a function in `world` real processes joined by torch.distributed (gloo, 127.0.0.1): lesson 11's launcher.

`launch(fn, world=2, args=())` forks `world` processes from this one, and each runs `fn(rank, world, *args)` inside a
gloo process group (MASTER_ADDR=127.0.0.1, a free port). Everything is bounded: the process group's `timeout` (every
gloo collective gives up after it), then the parent's join deadline, after which the ranks still running are killed
(their whole process group) and reported as hung. Each rank's return value (pickled) or exception (type and message)
comes back to the parent, with what it wrote on its stdout and stderr: a child's file descriptors 1 and 2 go to a file,
never to the notebook's (nbgrader scores a test cell that writes to stderr 0). This is a teaching launcher for one
machine; on GPUs and across machines, the real one is `torchrun` (the lesson says how).
"""
import contextlib
import json
import os
import pickle
import signal
import socket
import sys
import tempfile
import time
import traceback
import warnings
from datetime import timedelta

import torch
from torch import nn

from .fingerprint import fingerprint

__all__ = ["RankResult", "Launch", "free_port", "launch", "progress", "spawn_cell_function", "TwoHeads", "Recorded",
           "params_digest"]


class RankResult:
    """One rank's outcome: `value` (its return value), or `error` ((type name, message, where)), or `hung` (killed
    at the deadline); `signal` names a signal that ended it; `output` is what it wrote on stdout and stderr."""

    def __init__(self, rank):
        self.rank, self.value, self.error, self.hung, self.signal, self.output = rank, None, None, False, None, ""

    @property
    def ok(self):
        """True when the rank returned a value."""
        return self.error is None and not self.hung and self.signal is None

    def describe(self):
        """One line: what happened to this rank."""
        if self.hung:
            return f"rank {self.rank} did not finish within {self.hung:g} s and was killed"
        if self.error:
            kind, text, where = self.error
            return f"rank {self.rank} raised {kind}: {text}{where}"
        if self.signal:
            return f"rank {self.rank} was killed by signal {self.signal}"
        return f"rank {self.rank} returned"


class Launch:
    """The outcome of a `launch`: `ranks` (RankResult per rank), `seconds` (wall time), `timeout`, `deadline`."""

    def __init__(self, ranks, seconds, timeout, deadline):
        self.ranks, self.seconds, self.timeout, self.deadline = ranks, seconds, timeout, deadline

    @property
    def ok(self):
        """True when every rank returned a value."""
        return all(r.ok for r in self.ranks)

    @property
    def values(self):
        """The ranks' return values, in rank order (None for a rank that failed)."""
        return [r.value for r in self.ranks]

    def failure(self):
        """A message naming what went wrong (the hung ranks first, then errors), or '' when every rank returned."""
        peer = ("Connection closed by peer", "Connection reset by peer", "pair closure")  # a consequence, listed last
        errors = [r for r in self.ranks if not r.ok and not r.hung]
        errors.sort(key=lambda r: bool(r.error and any(p in r.error[1] for p in peer)))
        bad = [r for r in self.ranks if r.hung] + errors
        if not bad:
            return ""
        lines = [r.describe() for r in bad]
        if any(r.hung for r in self.ranks):
            lines.append("a hang: some collective (a barrier, an all_reduce, DDP's gradient all-reduce) was waiting "
                         "for a rank that never joined it")
        return "\n".join(lines)

    def report(self, output=True, width=300):
        """A printable summary: each rank's outcome and, with `output`, what it wrote (cut to `width` characters)."""
        lines = [f"{len(self.ranks)} ranks, {self.seconds:.2f} s"]
        for r in self.ranks:
            lines.append("  " + r.describe())
            text = r.output.strip()
            if output and text:
                text = text if len(text) <= width else text[:width] + " ..."
                lines += ["      | " + line for line in text.splitlines()]
        return "\n".join(lines)


def free_port():
    """A TCP port on 127.0.0.1 that nobody listens on now."""
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _where(exc):
    """The last frame outside torch and trainclinic, as ' (in fn, line N)'."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if "/torch/" not in f.filename and "/trainclinic/" not in f.filename]
    return f" (in {frames[-1].name}, line {frames[-1].lineno})" if frames else ""


_INHERITED = []
_PROGRESS = None  # in a rank: the file its progress() lines go to


def progress(**values):
    """In a rank of `launch`: send numbers (a step's loss, say) to the parent's `watch` while training goes on."""
    if _PROGRESS is not None:
        with open(_PROGRESS, "a") as f:
            f.write(json.dumps(values) + "\n")


class _Progress:
    """The parent's side: each rank's new progress lines, handed to watch(rank, values) as they come."""

    def __init__(self, base, world, watch):
        self.base, self.world, self.watch, self.offsets, self.error = base, world, watch, [0] * world, None

    def drain(self):
        for rank in range(self.world):
            try:
                with open(f"{self.base}.progress{rank}", "rb") as f:
                    f.seek(self.offsets[rank])
                    chunk = f.read()
            except OSError:
                continue
            whole = chunk[:chunk.rfind(b"\n") + 1]
            self.offsets[rank] += len(whole)
            for line in whole.splitlines():
                if self.error is None:
                    try:
                        self.watch(rank, json.loads(line))
                    except Exception as exc:  # noqa: BLE001 - raised once the ranks are done
                        self.error = exc
_GRACE = 1.5  # seconds a rank that wrote its result gets to exit (destroy_process_group) before it is killed


def _reset_inherited_group():
    """A process group the parent left initialised is only Python objects here (its threads did not survive the
    fork): drop them, without talking to anyone, so that this rank can start its own."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    if dist.is_available() and dist.is_initialized():
        _INHERITED.append(c10d._world)  # kept alive: its C++ destructor would join threads this process lacks
        c10d._world = c10d._World()
        if hasattr(c10d, "_default_pg_init_method"):
            c10d._default_pg_init_method = None


def _child(rank, world, port, timeout, fn, args, base, env):
    """In a forked rank: redirect fds 1/2 to its log, join the group, run fn, write the outcome, exit."""
    code = 0
    try:
        log = os.open(f"{base}.log{rank}", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(log, 1), os.dup2(log, 2), os.dup2(null, 0)
        # The notebook's sys.stdout/stderr send to the kernel through threads the fork did not copy: plain files.
        sys.stdout = open(1, "w", buffering=1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        warnings.resetwarnings()
        warnings.simplefilter("default")
        torch.set_num_threads(1)  # 2 cores, `world` ranks: one thread each
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                          LOCAL_RANK=str(rank))
        os.environ.update(env or {})
        import torch.distributed as dist

        _reset_inherited_group()
        if env and hasattr(dist, "set_debug_level_from_env"):
            dist.set_debug_level_from_env()  # read once at import, in the parent: read again here
        global _PROGRESS
        _PROGRESS = f"{base}.progress{rank}"
        out = {}
        try:
            dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=timeout))
            # every rank connected before any runs fn: a rank that returned at once would close the group while
            # another was still connecting to it (that one's error: gloo's "Connection closed by peer")
            dist.barrier()
            out = {"value": fn(rank, world, *args)}
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the parent as a verdict
            out = {"error": (type(exc).__name__, str(exc), _where(exc))}
            traceback.print_exc()
        try:
            data = pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # noqa: BLE001
            data = pickle.dumps({"error": ("TypeError", f"the return value cannot be sent back: {exc}", "")})
        with open(f"{base}.out{rank}.tmp", "wb") as f:
            f.write(data)
        os.replace(f"{base}.out{rank}.tmp", f"{base}.out{rank}")  # the result first: the parent has it whatever comes
        if dist.is_initialized():
            dist.destroy_process_group()  # (a rank whose shutdown hangs is killed by the parent, result kept)
    except BaseException:  # noqa: BLE001
        code = 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush(), sys.stderr.flush()
        os._exit(code)


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def launch(fn, world=2, args=(), timeout=5.0, deadline=None, env=None, watch=None):
    """Run fn(rank, world, *args) in `world` forked processes, each in a gloo process group on 127.0.0.1 whose
    collectives give up after `timeout` seconds; wait at most `deadline` seconds (default: timeout + 5), then kill the
    ranks still running. `env`: environment variables set in the ranks only (e.g. TORCH_DISTRIBUTED_DEBUG=INFO).
    `watch(rank, values)`: called here, while the ranks run, for each `progress(**values)` a rank sends.
    Returns a Launch (never raises for what the ranks do; an error in `watch` is raised after they end)."""
    # DDP's constructor imports torch._dynamo (hundreds of modules, about 6 s). Imported here, once, every forked
    # rank inherits it, and a 2-rank run takes well under a second instead of seconds per rank.
    import torch._dynamo  # noqa: F401
    import torch.distributed  # noqa: F401
    import torch.nn.parallel  # noqa: F401

    deadline = timeout + 5.0 if deadline is None else deadline
    folder = tempfile.mkdtemp(prefix="trainclinic-ddp-")
    base = os.path.join(folder, "rank")
    port = free_port()
    pids = []
    sys.stdout.flush(), sys.stderr.flush()
    start = time.monotonic()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # Python 3.12: "This process is multi-threaded, ..."
        for rank in range(world):
            pid = os.fork()
            if pid == 0:
                os.setpgid(0, 0)  # its own process group: a kill takes its DataLoader workers too
                _child(rank, world, port, timeout, fn, args, base, env)
            with contextlib.suppress(OSError):
                os.setpgid(pid, pid)
            pids.append(pid)
    results = [RankResult(rank) for rank in range(world)]
    running = dict(zip(pids, results))
    written = {}  # pid -> when its result appeared
    watched = _Progress(base, world, watch) if watch is not None else None
    polled = 0.0
    while running:
        if watched is not None and time.monotonic() - polled > 0.05:
            watched.drain()
            polled = time.monotonic()
        for pid in list(running):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                result = running.pop(pid)
                if os.WIFSIGNALED(status) and pid not in written:
                    result.signal = signal.Signals(os.WTERMSIG(status)).name
            elif os.path.exists(f"{base}.out{running[pid].rank}"):
                written.setdefault(pid, time.monotonic())
                if time.monotonic() - written[pid] > _GRACE:  # its work is done; its shutdown hangs: end it
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(pid, signal.SIGKILL)
        if running and time.monotonic() - start > deadline:
            for pid, result in running.items():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signal.SIGKILL)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, 0)
                result.hung = deadline
            running = {}
        time.sleep(0.005)
    seconds = time.monotonic() - start
    if watched is not None:
        watched.drain()
    for r in results:
        r.output = (_read(f"{base}.log{r.rank}") or b"").decode(errors="replace")
        data = _read(f"{base}.out{r.rank}")
        if data is not None and not r.hung:
            out = pickle.loads(data)
            r.value, r.error = out.get("value"), out.get("error")
        elif not r.hung and r.signal is None:
            r.error = ("RuntimeError", "the process ended without a result", "")
    for name in os.listdir(folder):
        with contextlib.suppress(OSError):
            os.remove(os.path.join(folder, name))
    with contextlib.suppress(OSError):
        os.rmdir(folder)
    if watched is not None and watched.error is not None:
        raise watched.error
    return Launch(results, seconds, timeout, deadline)


def spawn_cell_function(fn, timeout=30.0):
    """Start fn(0) with multiprocessing's "spawn" (a fresh interpreter, as mp.spawn and torchrun do) and return what
    the child printed on stderr and its exit code: a function defined in a notebook cell cannot be found there."""
    import multiprocessing

    ctx = multiprocessing.get_context("spawn")
    with tempfile.TemporaryFile() as log:
        sys.stderr.flush()
        saved = os.dup(2)
        os.dup2(log.fileno(), 2)  # the child inherits fd 2 at its start: its traceback goes to the file
        # As in a Jupyter kernel, whose __main__ has no file: the child does not re-run a script's __main__.
        main = sys.modules["__main__"]
        hidden = {k: main.__dict__.pop(k) for k in ("__file__", "__spec__") if k in main.__dict__}
        main.__spec__ = None
        try:
            p = ctx.Process(target=fn, args=(0,))
            p.start()
        finally:
            main.__dict__.pop("__spec__", None)
            main.__dict__.update(hidden)
            os.dup2(saved, 2)
            os.close(saved)
        p.join(timeout)
        if p.is_alive():
            p.kill()
            p.join()
        log.seek(0)
        return log.read().decode(errors="replace"), p.exitcode


class TwoHeads(nn.Module):
    """A small classifier with a main head and an auxiliary head: forward returns (logits, aux_logits)."""

    def __init__(self, inputs=8, hidden=16, classes=3, seed=0):
        super().__init__()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.body = nn.Sequential(nn.Linear(inputs, hidden), nn.ReLU())
            self.head = nn.Linear(hidden, classes)
            self.aux = nn.Linear(hidden, classes)

    def forward(self, x):
        h = self.body(x)
        return self.head(h), self.aux(h)


class Recorded(torch.utils.data.Dataset):
    """A dataset that records, in `seen`, every index read from it (in this process), in order."""

    def __init__(self, dataset):
        self.dataset, self.seen = dataset, []

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, i):
        self.seen.append(int(i))
        return self.dataset[i]


def params_digest(model):
    """A short hex digest of a model's parameters (equal digests: equal parameters, to the bit)."""
    return fingerprint(list(model.parameters()), length=12)
