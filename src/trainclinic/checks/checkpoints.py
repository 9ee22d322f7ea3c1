"""Checks for lesson 08, checkpoints across devices: save_checkpoint, resume, load_weights and fit.

The checks build their own training runs on the CPU (an MLP with BatchNorm, whose running statistics are buffers,
and Dropout; NumPy noise on the inputs, a shuffling
DataLoader with its own generator; `seed` picks sizes, the optimizer and the schedule) and write into temporary
folders. `check_resume` saves in one forked process and resumes in another one forked from the kernel (so nothing
the learner's code keeps in memory survives), every random generator reseeded there, and compares the resumed run
bit for bit with one that never stopped; what the resume failed to restore is named part by part. `check_fit` runs
`fit` with the reference `save_checkpoint`, `resume` and `train_epoch` in its globals and a scripted validation
loss (with a tie: an epoch after the best one scores the same, and best.pt keeps the first), so that each cell is
graded on its own; the scripted evaluate() records the scheduler's last_epoch (it runs after scheduler.step()), and a
third run of PLATEAU epochs, whose loss does not improve until the last one, shows an early stop. A cuda-tagged file is written with `checkpoints.save_tagged` (torch's
own serialization); on a machine with a GPU the CPU case runs with `torch.cuda.is_available()` reporting False.
"""
import contextlib
import io
import math
import os
import pathlib
import pickle
import random
import shutil
import signal
import sys
import tempfile
import time
import traceback
import warnings

import numpy as np
import torch
from torch import nn

from .. import data
from ..checkpoints import describe, save_tagged, without_cuda
from . import CheckFailed, call, check, devices, expect, same_device

__all__ = ["check_weights_only", "check_resume", "check_gpu_checkpoint", "check_prefixes", "check_fit",
           "reference_save_checkpoint", "reference_resume", "reference_train_epoch", "in_child"]

CHILD_TIMEOUT = 8.0  # seconds for one forked process (a few tiny epochs take well under one)

_HINTS = {
    "Attempting to deserialize object on a CUDA device": "the file's storages are tagged cuda (it was saved on a GPU): "
    "torch.load(path, map_location=...) puts them where you say: 'cpu', or the model's device.",
    "Weights only load failed": "the file holds something other than tensors and plain Python: store float(...) for "
    "NumPy numbers and tensors or lists for NumPy arrays.",
    "Missing key(s) in state_dict": "compare the two key lists in the message: strip the prefix the wrapper added "
    "(module., _orig_mod.) before load_state_dict.",
}

_BUFFERS = ("the model's state is model.state_dict(): its parameters and its buffers (BatchNorm's running_mean, "
            "running_var, num_batches_tracked); named_parameters() and parameters() leave the buffers out.")
_RESUME_HINTS = {  # resume loads what save_checkpoint wrote, with no wrapper: a missing key was never saved
    "running_mean": "the file lacks the model's buffers: " + _BUFFERS,
    **_HINTS,
    "Missing key(s) in state_dict": "the file lacks keys of the model: save model.state_dict() whole and load it whole.",
}


# ---- runs ----------------------------------------------------------------------------------------------------

def _case(seed):
    """The run a seed checks: seed 0 is the notebook's visible case."""
    if seed == 0:
        return {"n": 96, "batch": 32, "features": 6, "hidden": 16, "classes": 3, "p": 0.2, "epochs": 5, "stop": 1,
                "optimizer": "adam", "scheduler": "step", "best": float, "location": "cuda:0"}
    rng = random.Random(seed)
    epochs = rng.choice([4, 5, 6])
    return {"n": rng.choice([64, 80, 100]), "batch": rng.choice([16, 32]), "features": rng.choice([4, 6]),
            "hidden": rng.choice([8, 16]), "classes": rng.choice([2, 3, 4]), "p": rng.choice([0.1, 0.3]),
            "epochs": epochs, "stop": rng.randrange(0, epochs - 1), "optimizer": ("sgd", "adamw", "adam")[seed % 3],
            "scheduler": ("exp", "multistep", "step")[seed % 3], "best": (np.float64, np.float32)[seed % 2],
            "location": ("cuda:1", "cuda:0")[seed % 2]}


class _Run:
    """A training run: model, optimizer, scheduler and a loader shuffling with its own generator."""

    def __init__(self, case, init_seed, order_seed, data_seed):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(init_seed)
            # BatchNorm: running_mean, running_var and num_batches_tracked are buffers, in state_dict() and not in
            # parameters() (no batch of one: every case's n % batch is 0 or at least 4)
            self.model = nn.Sequential(nn.Linear(case["features"], case["hidden"]), nn.BatchNorm1d(case["hidden"]),
                                       nn.ReLU(), nn.Dropout(case["p"]), nn.Linear(case["hidden"], case["classes"]))
        params = self.model.parameters()
        self.optimizer = {"adam": lambda: torch.optim.Adam(params, lr=0.01),
                          "adamw": lambda: torch.optim.AdamW(params, lr=0.01, weight_decay=0.01),
                          "sgd": lambda: torch.optim.SGD(params, lr=0.05, momentum=0.9)}[case["optimizer"]]()
        sched = torch.optim.lr_scheduler
        self.scheduler = {"step": lambda o: sched.StepLR(o, step_size=2, gamma=0.5),
                          "exp": lambda o: sched.ExponentialLR(o, gamma=0.8),
                          "multistep": lambda o: sched.MultiStepLR(o, milestones=[1, 3], gamma=0.3)}[case["scheduler"]](self.optimizer)
        dataset = data.blobs(n=case["n"], features=case["features"], classes=case["classes"], spread=2.0, seed=data_seed)
        self.loader = data.loader(dataset, batch_size=case["batch"], seed=order_seed)

    @property
    def objects(self):
        return self.model, self.optimizer, self.scheduler, self.loader


def reference_train_epoch(model, optimizer, loader, noise=0.3):
    """One epoch as the lesson's train_epoch trains: NumPy noise on the inputs, dropout; returns the losses of its
    steps (a list of floats, as section 2's train_epoch)."""
    model.train()
    losses = []
    for x, y in loader:
        x = x + torch.from_numpy(np.random.normal(0.0, noise, size=tuple(x.shape)).astype(np.float32))
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def _mean(losses):
    return sum(losses) / len(losses)


def _seed_globals(seed):
    torch.manual_seed(seed)
    np.random.seed(seed)
    random.seed(seed)


def _start_script(case):
    """What the training script draws from NumPy before its first epoch: one Gaussian when the epochs draw an even
    number of them, so that at every save NumPy holds a cached Gaussian (NumPy draws them in pairs): the state's
    has_gauss and cached value (np.random.get_state()[3:]) then matter to the next draws, as in any real run."""
    if case["n"] * case["features"] % 2 == 0:
        np.random.standard_normal()


@contextlib.contextmanager
def _own_rngs():
    """NumPy's and Python's global random states back as they were after the check (@check restores torch's)."""
    np_state, py_state = np.random.get_state(), random.getstate()
    try:
        yield
    finally:
        np.random.set_state(np_state)
        random.setstate(py_state)


def _generator(loader):
    """The generator that shuffles `loader` (its sampler's)."""
    return getattr(getattr(loader, "sampler", None), "generator", None) or loader.generator


def _state(run):
    """Everything a resume must restore, copied."""
    return {"model": {k: v.clone() for k, v in run.model.state_dict().items()},
            "optimizer": pickle.loads(pickle.dumps(run.optimizer.state_dict())),
            "scheduler": pickle.loads(pickle.dumps(run.scheduler.state_dict())),
            "torch RNG": torch.get_rng_state(), "NumPy RNG": np.random.get_state(),
            "data order": _generator(run.loader).get_state()}


def _same(a, b):
    """Equal, tensors bit for bit, through dicts, lists and tuples."""
    if torch.is_tensor(a) or torch.is_tensor(b):
        return torch.is_tensor(a) and torch.is_tensor(b) and a.shape == b.shape and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.array_equal(a, b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _optimizer_difference(now, saved):
    if not now["state"] and saved["state"]:
        keys = sorted(next(iter(saved["state"].values())))
        return f"the optimizer's state is empty (it held {', '.join(keys)} per parameter)"
    for i, (g, h) in enumerate(zip(now["param_groups"], saved["param_groups"])):
        if g.get("lr") != h.get("lr"):
            return f"the optimizer's learning rate is {g.get('lr'):.4g}, it was {h.get('lr'):.4g}"
    return "the optimizer's state differs from the one saved"


def _differences(run, saved):
    """[(part, what differs)] between the restored run and the state at save time."""
    now, found = _state(run), []
    if not _same(now["model"], saved["model"]):
        params = {k for k, _ in run.model.named_parameters()}
        differ = [k for k, v in saved["model"].items() if not _same(now["model"][k], v)]
        if differ and not params.intersection(differ):
            found.append(("the model's buffers (save model.state_dict(), not its parameters alone)",
                          f"the model's buffers {', '.join(differ)} (BatchNorm's running statistics: in "
                          "model.state_dict(), not in named_parameters() or parameters())"))
        else:
            gap = max((now["model"][k].double() - v.double()).abs().max().item() for k, v in saved["model"].items())
            found.append(("model", f"the model's weights (up to {gap:.3g} apart)"))
    if not _same(now["optimizer"], saved["optimizer"]):
        found.append(("optimizer", _optimizer_difference(now["optimizer"], saved["optimizer"])))
    if not _same(now["scheduler"], saved["scheduler"]):
        found.append(("scheduler", f"the scheduler's state (last_epoch {now['scheduler'].get('last_epoch')}, it was "
                                   f"{saved['scheduler'].get('last_epoch')})"))
    for part in ("torch RNG", "NumPy RNG", "data order"):
        if not _same(now[part], saved[part]):
            partial = part == "NumPy RNG" and _numpy_difference(now[part], saved[part])
            found.append((f"all five fields of {part}" if partial else part, {"torch RNG": "torch's global random state (torch.get_rng_state())",
                                 "NumPy RNG": "NumPy's global random state (np.random.get_state()" +
                                              _numpy_difference(now[part], saved[part]) + ")",
                                 "data order": "the loader's generator state (loader.generator.get_state())"}[part]))
    return found


def _numpy_difference(now, saved):
    """Which fields of NumPy's legacy state (name, key, pos, has_gauss, cached) differ, when the key is right."""
    names = ("name", "key", "pos", "has_gauss", "cached")
    if len(now) != 5 or len(saved) != 5 or not np.array_equal(now[1], saved[1]) or now[2] != saved[2]:
        return ""
    return ": " + ", ".join(f"{names[i]} is {now[i]!r}, it was {saved[i]!r}" for i in (3, 4) if now[i] != saved[i]) + \
        "; NumPy caches the second Gaussian of each pair, and the next normal() draw returns it: save all five fields"


# ---- a forked process ------------------------------------------------------------------------------------------

def _mapped(path):
    """Whether this process holds a memory mapping of the file at `path` (Linux's /proc/self/maps; False elsewhere)."""
    import gc

    gc.collect()  # what the learner's code dropped is unmapped now
    try:
        with open("/proc/self/maps") as f:
            maps = f.read()
    except OSError:
        return False
    return os.path.realpath(path) in maps


def in_child(work, what, timeout=CHILD_TIMEOUT, crashes=None):
    """Run `work()` in a forked process and return what it returned; CheckFailed for what it raised, a crash or a hang.

    Its output goes nowhere (a forked kernel must not write to the notebook). Without os.fork (Windows) it runs here.
    `crashes` maps a signal number to what a death by that signal means in `work` (the message's explanation)."""
    if not hasattr(os, "fork"):
        return work()
    fd, path = tempfile.mkstemp(prefix="trainclinic-child-")
    os.close(fd)
    cuda = torch.cuda.is_available()  # a forked process cannot use CUDA: there, it says it has none
    pid = os.fork()
    if pid == 0:  # the child: never returns
        try:
            null = os.open(os.devnull, os.O_RDWR)
            os.dup2(null, 1)
            os.dup2(null, 2)
            sys.stdout = sys.stderr = io.StringIO()
            torch.set_num_threads(1)
            try:
                with without_cuda() if cuda else contextlib.nullcontext():
                    result = ("ok", work())
            except CheckFailed as exc:
                result = ("failed", str(exc))
            except BaseException as exc:  # noqa: B036 (SystemExit too: it is a verdict)
                result = ("error", f"{type(exc).__name__}: {exc}".strip(), traceback.format_exc()[-800:])
            with open(path, "wb") as f:
                pickle.dump(result, f)
        finally:
            os._exit(0)
    deadline = time.monotonic() + timeout
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                raise CheckFailed(f"{what} did not finish within {timeout:g} s (a few tiny epochs take well under one): "
                                  "it hung, and was stopped.")
            time.sleep(0.003)
        try:
            with open(path, "rb") as f:
                result = pickle.load(f)
        except (OSError, EOFError, pickle.UnpicklingError):
            if os.WIFSIGNALED(status):
                number = os.WTERMSIG(status)
                try:
                    name = signal.Signals(number).name
                except ValueError:
                    name = f"signal {number}"
                explained = (crashes or {}).get(number)
                explained = explained() if callable(explained) else explained
                raise CheckFailed(f"{what}: expected it to finish, observed the process killed by {name} "
                                  f"(signal {number})" + (f" {explained}" if explained else
                                                          ": the code crashed the process.")) from None
            raise CheckFailed(f"{what} ended without a result (exit status {os.waitstatus_to_exitcode(status)}): the "
                              "code ended the process (os._exit?) or crashed it.") from None
    finally:
        os.unlink(path)
    if result[0] == "failed":
        raise CheckFailed(result[1])
    if result[0] == "error":
        raise CheckFailed(f"{what}: the check's own code failed after yours ran: {result[1]}\n{result[2]}")
    return result[1]


# ---- references ------------------------------------------------------------------------------------------------

def reference_save_checkpoint(path, model, optimizer, scheduler, loader, epoch, best_loss):
    """The lesson's save_checkpoint: everything to continue after `epoch`, in types weights_only=True loads."""
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                "epoch": int(epoch), "best_loss": float(best_loss), "torch_rng": torch.get_rng_state(),
                "numpy_rng": {"kind": str(kind), "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                              "has_gauss": int(has_gauss), "cached": float(cached)},
                "data_order": loader.generator.get_state()}, path)


def reference_resume(path, model, optimizer, scheduler, loader):
    """The lesson's resume: restore everything; return (next_epoch, best_loss)."""
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    scheduler.load_state_dict(ckpt["scheduler"])
    torch.set_rng_state(ckpt["torch_rng"])
    rng = ckpt["numpy_rng"]
    np.random.set_state((rng["kind"], rng["keys"].numpy().astype(np.uint32), rng["pos"], rng["has_gauss"], rng["cached"]))
    loader.generator.set_state(ckpt["data_order"])
    return ckpt["epoch"] + 1, ckpt["best_loss"]


@contextlib.contextmanager
def _folder():
    path = tempfile.mkdtemp(prefix="trainclinic-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# ---- the checks ------------------------------------------------------------------------------------------------

@check("weights_only")
def check_weights_only(save_checkpoint, seed=0):
    """The file save_checkpoint writes loads with torch.load(path, weights_only=True)."""
    case = _case(seed)
    with _own_rngs(), _folder() as folder:
        _seed_globals(seed)
        run = _Run(case, seed, seed, seed + 100)
        best = _mean(reference_train_epoch(*run.objects[:2], run.loader))
        run.scheduler.step()
        path = os.path.join(folder, "checkpoint.pth")  # a name of the caller's: not always .pt
        call(save_checkpoint, path, *run.objects, 0, case["best"](best), name="save_checkpoint", hints=_HINTS)
        others = sorted(set(os.listdir(folder)) - {"checkpoint.pth"})
        expect(os.path.isfile(path), "the file save_checkpoint(path, ...) writes", f"a file at path ({path})",
               f"none there; it wrote {', '.join(others)}" if others else "none",
               "write to `path` itself, whatever its name or suffix: the caller loads it from there" if others else "")
        allowed = torch.serialization.get_safe_globals()
        added = [g for g in allowed if not _torch_own(g)]  # by add_safe_globals in this process: no file carries them
        torch.serialization.clear_safe_globals()  # loaded as in a fresh process, with torch's own allowlist only
        torch.serialization.add_safe_globals([g for g in allowed if _torch_own(g)])
        try:
            torch.load(path, weights_only=True, map_location="cpu")
        except Exception as exc:
            if added:
                raise CheckFailed(
                    "torch.load(path, weights_only=True) on the file save_checkpoint wrote, in a process that has not "
                    f"called torch.serialization.add_safe_globals: expected it to load, observed {type(exc).__name__}: "
                    f"{str(exc).splitlines()[0][:200] if str(exc) else ''}\nHint: the allowlist this notebook built "
                    "does not travel with the file: store plain Python numbers, str, lists, dicts and tensors only "
                    "(float(best_loss); NumPy's state as str/int/float and a list)") from None
            first = next((line.strip() for line in str(exc).splitlines() if "Unsupported global" in line),
                         str(exc).splitlines()[0][:200] if str(exc) else "")
            try:
                names = [g for g in describe(path)["globals"] if g.split(".")[0] not in ("torch", "collections", "builtins")]
            except Exception:  # not a zip written by torch.save: describe cannot read it
                names = []
            numpy = any(g.startswith("numpy") for g in names)
            raise CheckFailed(
                f"torch.load(path, weights_only=True) on the file save_checkpoint wrote: expected it to load, observed "
                f"{type(exc).__name__}: {first}" + (f"\nThe file's pickle names: {', '.join(names)}." if names else "") +
                ("\nHint: NumPy objects are not allowed: store float(best_loss), and NumPy's random state as plain "
                 "Python (str, int, float) with its array as a tensor or a list." if numpy else "")) from None
        finally:
            torch.serialization.clear_safe_globals()
            torch.serialization.add_safe_globals(allowed)
    kind = case["best"].__name__ if case["best"] is not float else "a Python float"
    return f"the checkpoint loads with weights_only=True (best_loss given as {kind}, {case['optimizer']}, {case['scheduler']} schedule)"


def _torch_own(entry):
    """Whether an entry of torch's weights_only allowlist is torch's own (a class or function of torch, or a
    (callable, name) pair of one), not one a notebook added."""
    obj = entry[0] if isinstance(entry, tuple) else entry
    return (getattr(obj, "__module__", "") or "").split(".")[0] == "torch"


def _save_keeps_device(save_checkpoint, case, seed):
    """On a GPU, where the grader has one: save_checkpoint leaves the model where it is (a model.cpu() inside it
    moves the caller's model off the GPU at every save). On the CPU a move to the CPU changes nothing to see."""
    for device in devices():
        if device.type == "cpu":
            continue
        run = _Run(case, seed, seed, seed + 100)
        run.model.to(device)
        with _folder() as folder:
            call(save_checkpoint, os.path.join(folder, "on_device.pt"), *run.objects, 0, case["best"](1.0),
                 name="save_checkpoint", hints=_HINTS, where=f"(the model on {device})")
        moved = sorted({str(p.device) for p in run.model.parameters() if not same_device(p, device)})
        expect(not moved, f"the model's device after save_checkpoint (the model on {device})", f"{device}, where "
               "it was", ", ".join(moved), "save copies of the tensors (the state_dict, or {k: v.cpu() ...}) and "
               "leave the model itself where it is: model.cpu() and model.to(...) move the caller's model")


@check("resume")
def check_resume(save_checkpoint, resume, seed=0):
    """Saved in one process, resumed in another with fresh objects and reseeded generators: the same bits as a run
    that never stopped."""
    case = _case(seed)
    stop, epochs = case["stop"], case["epochs"]
    with _own_rngs(), _folder() as folder:
        _save_keeps_device(save_checkpoint, case, seed)
        path = os.path.join(folder, "checkpoint.pt")
        _seed_globals(seed)  # the uninterrupted run, here
        _start_script(case)
        run = _Run(case, seed, seed, seed + 100)
        losses, best = [], math.inf
        for epoch in range(epochs):
            losses.append(_mean(reference_train_epoch(*run.objects[:2], run.loader)))
            run.scheduler.step()
            if epoch == stop:
                saved, best = _state(run), min(losses)
        final = [p.detach().clone() for p in run.model.parameters()]
        best_given = case["best"](best)

        def first_part():  # train to the stop, saving after every epoch, as a training script does
            _seed_globals(seed)
            _start_script(case)
            mine = _Run(case, seed, seed, seed + 100)
            seen = []
            for epoch in range(stop + 1):
                seen.append(_mean(reference_train_epoch(*mine.objects[:2], mine.loader)))
                mine.scheduler.step()
                call(save_checkpoint, path, *mine.objects, epoch, case["best"](min(seen)), name="save_checkpoint",
                     hints=_HINTS)
            # and once with an epoch the scheduler does not count (a schedule stepped otherwise): the epoch given
            call(save_checkpoint, other, *mine.objects, stop + 3, case["best"](min(seen)), name="save_checkpoint",
                 hints=_HINTS)
            return os.path.isfile(path)

        other = os.path.join(folder, "other.pt")
        written = in_child(first_part, "the process that trains and calls save_checkpoint")
        expect(written, "the file save_checkpoint(path, ...) writes", "a file at path", "none")

        def second_part():  # a new process: other initial weights, another shuffling seed, reseeded generators
            _seed_globals(seed + 7919)
            fresh = _Run(case, seed + 1, seed + 2, seed + 100)
            got = call(resume, path, *fresh.objects, name="resume", hints=_RESUME_HINTS)
            report = {"got": got if isinstance(got, (tuple, list)) and len(got) == 2 else repr(got)[:80],
                      "differences": _differences(fresh, saved)}
            if isinstance(report["got"], str) or report["differences"]:
                return report
            start = report["got"][0]
            if os.path.isfile(other):
                got = call(resume, other, *_Run(case, seed + 5, seed + 6, seed + 100).objects, name="resume",
                           hints=_RESUME_HINTS, where=f"(a checkpoint saved with epoch={stop + 3})")
                report["other"] = got[0] if isinstance(got, (tuple, list)) and len(got) == 2 else None
            report["mapped"] = _mapped(path)
            if report["mapped"]:  # said to the parent even if the process dies below
                open(marker, "w").close()
            if isinstance(start, int) and 0 <= start <= epochs:
                for epoch in range(start, epochs):
                    reference_train_epoch(*fresh.objects[:2], fresh.loader)
                    fresh.scheduler.step()
                    # as fit does with last.pt: the next checkpoint overwrites the file resume loaded
                    reference_save_checkpoint(path, *fresh.objects, epoch, float(best_given))
            report["final"] = [p.detach().clone() for p in fresh.model.parameters()]
            if start < epochs:  # rewritten since (by save_checkpoint): a second resume in this process reads it
                last = _state(fresh)
                call(save_checkpoint, path, *fresh.objects, epochs - 1, case["best"](best), name="save_checkpoint",
                     hints=_HINTS)
                again = _Run(case, seed + 3, seed + 4, seed + 100)
                got = call(resume, path, *again.objects, name="resume", hints=_RESUME_HINTS,
                           where="(a second time in this process, the file rewritten since)")
                report["again"] = (got[0] if isinstance(got, (tuple, list)) and len(got) == 2 else None,
                                   _differences(again, last))
            return report

        marker = path + ".mapped"

        def bus_error():
            mapped = os.path.exists(marker)
            return ("after resume, when the training that followed wrote its next checkpoint to the path resume had "
                    "loaded (as fit rewrites last.pt after every epoch)" +
                    (": the file was still memory-mapped into the process after resume returned, under tensors "
                     "resume had restored, and rewriting it truncated the mapping (a SIGBUS is what touching a "
                     "truncated mapping gives).\nHint: resume must read the file into the objects: "
                     "torch.load(..., mmap=True) maps the file instead, and load_state_dict keeps the optimizer's "
                     "state tensors as loaded (still mapped); load without mmap=True." if mapped else "."))

        report = in_child(second_part, "the process that calls resume, then trains on and saves a checkpoint to the "
                          "same path after every epoch (as fit does)", crashes={signal.SIGBUS: bus_error})
    got = report["got"]
    expect(isinstance(got, tuple), "resume(...)'s return value", "the tuple (next_epoch, best_loss)",
           f"a list of 2, {got!r}" if isinstance(got, list) else got,
           "return next_epoch, best_loss (a tuple), not a list." if isinstance(got, list) else "")
    start, best_back = got
    expect(isinstance(start, int) and not isinstance(start, bool) and start == stop + 1,
           f"the next epoch resume returns for a checkpoint saved after epoch {stop}", stop + 1, repr(start),
           f"return the saved epoch + 1: epoch {stop} was done, {stop + 1} comes next" if start == stop else "")
    if "other" in report:
        expect(report["other"] == stop + 4, f"the next epoch resume returns for a checkpoint saved with epoch={stop + 3} "
               f"(its scheduler stepped {stop + 1} times)", stop + 4, repr(report["other"]),
               "return the epoch saved + 1 (save_checkpoint's `epoch`), not one counted from the scheduler or the "
               "optimizer: a schedule may step per batch, or not every epoch")
    diffs = report["differences"]
    if diffs:
        parts = "; ".join(text for _, text in diffs)
        raise CheckFailed(f"after resume, in a new process, these differ from the state at save time: {parts}.\n"
                          f"Hint: save and restore {', '.join(p for p, _ in diffs)} too: each changes how training "
                          f"continues (section 2 measured the drift of each).")
    try:
        back = float(best_back)
    except (TypeError, ValueError):
        back = None
    expect(back == float(best_given), "the best_loss resume returns", f"{float(best_given)!r} (the one saved)",
           repr(best_back))
    gap = max((a.double() - b.double()).abs().max().item() for a, b in zip(report["final"], final))
    expect(gap == 0, f"the weights after epoch {epochs - 1}, resumed after epoch {stop}, against the uninterrupted run "
           "(a checkpoint written to the same path after every epoch of the resumed run, as fit does)",
           "identical bits", f"up to {gap:.3g} apart",
           "the checkpoint file was still memory-mapped into the process after resume (torch.load(..., mmap=True)?), "
           "and rewriting it changed tensors resume had restored: load without mmap=True" if report.get("mapped") else
           "everything restored matches the save, yet the run went elsewhere: does save_checkpoint or resume draw "
           "random numbers or change the objects?")
    if "again" in report:
        start2, diffs2 = report["again"]
        expect(start2 == epochs and not diffs2, f"a second resume in the same process, of the checkpoint rewritten "
               f"after epoch {epochs - 1} since the first", f"next epoch {epochs} and the state of that rewrite",
               f"next epoch {start2!r}" + (f"; these differ from it: {'; '.join(t for _, t in diffs2)}" if diffs2
                                            else ""),
               "read the file at every call: a result kept from an earlier call (a cache keyed by the path) is the "
               "old checkpoint's")
    where = "another process" if hasattr(os, "fork") else "this process (no os.fork on this system)"
    return (f"saved after epoch {stop} of {epochs}, resumed in {where}: bit-identical to the uninterrupted run "
            f"({case['optimizer']}, {case['scheduler']} schedule, dropout, NumPy noise, shuffled batches)")


def _mlp(seed, case):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(case["features"], case["hidden"]), nn.ReLU(), nn.Linear(case["hidden"], case["classes"]))


def _loaded(model, source):
    return all(torch.equal(p.detach().cpu(), source[k]) for k, p in model.state_dict().items())


@check("gpu_checkpoint")
def check_gpu_checkpoint(load_weights, seed=0):
    """load_weights loads a state dict whose storages are tagged cuda, on a machine without CUDA."""
    case = _case(seed)
    where = []
    with _folder() as folder:
        for device in devices():
            source = _mlp(seed + 1, case).state_dict()
            model = _mlp(seed, case).to(device)
            path = os.path.join(folder, f"from_gpu_{device.type}.pt")
            location = case["location"] if device.type == "cpu" else "cuda:0"
            save_tagged(source, path, location=location)
            cpu_only = without_cuda() if device.type == "cpu" and torch.cuda.is_available() else contextlib.nullcontext()
            own = list(model.parameters())
            with cpu_only:
                call(load_weights, model, path, name="load_weights", hints=_HINTS,
                     where=f"(on a file saved on {location}, the model on {device})")
            expect(all(same_device(p, device) for p in model.parameters()), "the model's device after load_weights",
                   str(device), sorted({str(p.device) for p in model.parameters()}))
            swapped = sum(a is not b for a, b in zip(model.parameters(), own))
            expect(not swapped, "the model's parameters after load_weights",
                   "its own tensors, the file's values copied into them (on the model's device, whatever the file's)",
                   f"{swapped} of {len(own)} replaced by the file's tensors",
                   "load_state_dict(state) without assign=True: assign=True puts the file's tensors in the model, on "
                   "the device they were loaded to (the CPU with map_location='cpu', wherever the model was), and an "
                   "optimizer built before the load keeps the old ones.")
            expect(_loaded(model, source), f"the model's weights after load_weights (file tagged {location})",
                   "the file's weights", "others", "load_state_dict(state) into the model you are given")
            where.append(f"{location} -> {device}" + (" (CUDA hidden)" if device.type == "cpu" and torch.cuda.is_available() else ""))
        # a model on a device that is not the CPU, on any machine: torch.device("meta") (shapes without data, as a
        # GPU's tensors are out of the CPU's reach): load_weights loads into it where it is, moving nothing
        model = _mlp(seed, case).to("meta")
        path = os.path.join(folder, "from_gpu_meta.pt")
        save_tagged(_mlp(seed + 1, case).state_dict(), path, location=case["location"])
        cpu_only = without_cuda() if torch.cuda.is_available() else contextlib.nullcontext()
        with cpu_only, warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*copying from a non-meta parameter")
            call(load_weights, model, path, name="load_weights", where=f"(on a file saved on {case['location']}, the "
                 "model on torch.device('meta'), standing in for a GPU)", hints={**_HINTS, "Cannot copy out of meta":
                 "load_weights moved the model (model.to(...), model.cpu()): the model stays on its own device "
                 "(here the meta device, standing in for a GPU); load the file's values into it where it is."})
        moved = sorted({str(p.device) for p in model.parameters() if p.device.type != "meta"})
        expect(not moved, "the model's device after load_weights (the model on torch.device('meta'), standing in for "
               "a GPU)", "meta, where it was", ", ".join(moved), "load the file into the model on its own device: "
               "moving the model (model.to(...)) is the caller's choice, not load_weights'")
        where.append(f"{case['location']} -> meta (a model off the CPU)")
    return f"a checkpoint saved on a GPU loads: {', '.join(where)}"


class _Residual(nn.Module):
    """x + module(x): a layer that keeps the layer it wraps as its attribute `module`, as many models do (its keys
    are like '2.module.weight': that 'module.' is the model's own and stays, only a wrapper's prefix goes)."""

    def __init__(self, module):
        super().__init__()
        self.module = module

    def forward(self, x):
        return x + self.module(x)


def _residual_mlp(seed, case):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return nn.Sequential(nn.Linear(case["features"], case["hidden"]), nn.ReLU(),
                             _Residual(nn.Linear(case["hidden"], case["hidden"])), nn.Linear(case["hidden"], case["classes"]))


_PREFIX_HINTS = {
    "Missing key(s) in state_dict": "compare the two key lists in the message: strip the prefix the wrapper added "
    "(module., _orig_mod., or both) at the START of each key, and only there: this model has a layer of its own "
    "named `module` (keys like '2.module.weight'), and that 'module.' must stay (str.replace removes it too).",
}


def _prefixed(state, prefix):
    return type(state)((prefix + k, v) for k, v in state.items())


class _Listed(nn.Module):
    """A model whose first layer's name starts with 'module' (as nn.ModuleList attributes often do)."""

    def __init__(self):
        super().__init__()
        self.module_list = nn.ModuleList([nn.Linear(4, 8), nn.Linear(8, 2)])

    def forward(self, x):
        return self.module_list[1](torch.relu(self.module_list[0](x)))


def _listed(seed):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return _Listed()


@check("prefixes")
def check_prefixes(load_weights, seed=0):
    """load_weights strips module. and _orig_mod., loads strictly, and refuses a file for another model."""
    case = _case(seed)
    # the prefixes the exercise names: module., _orig_mod., and both as module._orig_mod.
    prefixes = {0: ["module.", "_orig_mod."], 1: ["module._orig_mod.", ""], 2: ["module._orig_mod.", "module."]}.get(seed % 3)
    with _folder() as folder:
        for prefix in prefixes:
            source_model = _residual_mlp(seed + 1, case)
            source = source_model.state_dict()
            saved = nn.DataParallel(source_model).state_dict() if prefix == "module." else _prefixed(source, prefix)
            path = os.path.join(folder, "weights.pt")
            torch.save(saved, path)
            model = _residual_mlp(seed, case)
            own = {k: v.clone() for k, v in model.state_dict().items()}
            shown = prefix or "no prefix"
            call(load_weights, model, path, name="load_weights", hints={**_HINTS, **_PREFIX_HINTS}, where=f"(keys with {shown})")
            if not _loaded(model, source):
                kept = [k for k, v in model.state_dict().items() if not torch.equal(v.detach().cpu(), source[k])]
                nothing = len(kept) == len(source)
                expect(False, f"the model's weights after load_weights on keys like {next(iter(saved))!r}",
                       "the file's weights", "the model's own (nothing was loaded)" if nothing and _loaded(model, own)
                       else f"others in {', '.join(kept[:4])}{'...' if len(kept) > 4 else ''}",
                       "strict=False loads nothing when no key matches: strip the prefix, keep strict=True"
                       if nothing else "every key of the file must load: strip only the wrapper's prefix at the start "
                       "of each key (this model's own keys include '2.module.weight'), and keep strict=True")
        # a model whose own top-level layer's name starts with "module" (module_list.0.weight): only the wrapper's
        # "module." is a prefix, not any key that starts with the letters
        for prefix in ("", "module."):
            source = _listed(seed + 1).state_dict()
            torch.save(_prefixed(source, prefix), os.path.join(folder, "weights.pt"))
            model = _listed(seed)
            shown = f"keys like {prefix + next(iter(source))!r}, of a model whose first layer is named module_list"
            call(load_weights, model, os.path.join(folder, "weights.pt"), name="load_weights",
                 hints={**_HINTS, **_PREFIX_HINTS}, where=f"({shown})")
            expect(_loaded(model, source), f"the model's weights after load_weights on {shown}", "the file's weights",
                   "others", "strip the wrapper's prefix with its dot, 'module.' (and '_orig_mod.'), at the start of "
                   "a key only: 'module_list.0.weight' is the model's own name")
        other = _prefixed(_residual_mlp(seed + 1, case).state_dict(), "model.")  # a wrapper the exercise does not name
        _refused(load_weights, other, _residual_mlp(seed, case), folder,
                 f"a file whose keys do not fit the model (they start with 'model.', e.g. {next(iter(other))!r})",
                 "strict=False (or skipping the keys that do not match) turns this mismatch into silence: keep "
                 "strict=True.")
        # a file that fits but for one key (another head, a missing buffer): strict=True raises all the same
        state = _residual_mlp(seed + 1, case).state_dict()
        dropped = list(state)[-1]
        partial = _prefixed({k: v for k, v in state.items() if k != dropped}, "module.")
        _refused(load_weights, partial, _residual_mlp(seed, case), folder,
                 f"a DDP file that lacks one of the model's keys ({dropped!r}; the other {len(partial)} fit)",
                 "strict=False, or raising only when nothing matched, loads a part of a file that does not fit in "
                 "silence: keep strict=True.")
        # a file with one key more than the model has (another head's): strict=True raises (Unexpected key(s))
        extra = dict(_residual_mlp(seed + 1, case).state_dict())
        extra["head2.weight"] = torch.zeros(2, 2)
        _refused(load_weights, _prefixed(extra, "_orig_mod."), _residual_mlp(seed, case), folder,
                 "a torch.compile file with one key more than the model has ('head2.weight'; the others fit)",
                 "strict=False, or raising only on missing keys, loads a file that does not fit in silence: keep "
                 "strict=True.")
    return (f"keys with {', '.join(p or 'no prefix' for p in prefixes)} load strictly (a layer's own 'module.' kept); "
            "a file for another model, lacking one key or with one more, raises")


def _refused(load_weights, state, model, folder, what, hint):
    """load_weights on a file holding `state`, which does not fit `model`: CheckFailed unless it raised."""
    path = os.path.join(folder, "other.pt")
    torch.save(state, path)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            call(load_weights, model, path, name="load_weights")
    except CheckFailed:
        return  # it refused: right
    kept = "kept its own weights: nothing was loaded, in silence" if _loaded(model, before) else "changed"
    raise CheckFailed(f"load_weights on {what}: expected an error, as load_state_dict(strict=True) raises; observed "
                      f"none, and the model {kept}.\nHint: {hint}")


class _Scripted:
    """The validation loss fit sees: a scripted value per epoch (the epoch counted by the reference train_epoch);
    it records the model's weights and the scheduler's last_epoch at each call."""

    def __init__(self, run, values, first_epoch, trained, fit=None):
        self.model, self.scheduler = run.model, run.scheduler
        self.values, self.first, self.trained = values, first_epoch, trained
        self.calls, self.weights, self.steps = 0, {}, {}
        g = getattr(fit, "__globals__", None)
        self.hooked = isinstance(g, dict) and "train_epoch" in g  # its epochs are counted by the reference train_epoch
        self.before = 0  # calls before the first epoch trained (e.g. a look at the model just resumed)

    def epochs(self):
        """How many epochs fit validated: every call, or those after training began where it looked before."""
        return self.calls - self.before if self.before and self.trained[0] else self.calls

    def __call__(self):
        self.calls += 1
        if self.hooked and not self.trained[0]:  # the model as loaded (or as built): not an epoch's validation
            self.before += 1
            # the loaded epoch's loss; a new model scores below every epoch (a fit that starts its best from it,
            # not from inf, then never saves best.pt)
            return self.values[self.first - 1] if self.first else round(min(self.values) - 0.1, 4)
        epoch = self.first + (self.trained[0] if self.trained[0] else self.calls) - 1
        self.weights[epoch] = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        self.steps.setdefault(epoch, self.scheduler.last_epoch)
        return self.values[min(epoch, len(self.values) - 1)]


def _check_last_saved(events, first_epoch, what):
    """folder/'last.pt' saved after every epoch (between its train_epoch and the next one's), when fit saves through
    the save_checkpoint of its globals (else the files tell what they can)."""
    if all(e == "train" for e in events):
        return
    missing, epoch, pending = [], first_epoch - 1, False
    for e in events:
        if e == "train":
            if pending:
                missing.append(epoch)
            epoch, pending = epoch + 1, True
        elif e == "last.pt":
            pending = False
    if pending:
        missing.append(epoch)
    expect(not missing, f"the saves of folder/'last.pt' during fit {what}", "one at the end of every epoch (a run "
           "stopped after any epoch resumes from it)", f"none after epoch {', '.join(map(str, missing))}",
           "save_checkpoint(folder / 'last.pt', ...) inside the epoch loop, at the end of each epoch: saved only "
           "after the loop, a run stopped midway has nothing to resume from")


def _check_order(ev):
    """Each epoch's evaluate() ran after that epoch's scheduler.step() (the scheduler's last_epoch is epoch + 1)."""
    for epoch, last in sorted(ev.steps.items()):
        expect(last == epoch + 1, f"the scheduler's last_epoch when evaluate() runs for epoch {epoch}",
               f"{epoch + 1} (after that epoch's scheduler.step())", last,
               "evaluate() ran before scheduler.step(): each epoch runs train_epoch, then scheduler.step(), then "
               "evaluate(), in this order" if last == epoch else "")


@contextlib.contextmanager
def _references(fn, trained):
    """While the learner's fit runs, save_checkpoint, resume and train_epoch in its globals are the references
    (train_epoch counting its calls in trained[0], and recording the learning rate of each in trained[1]; each
    epoch's "train" and each save's file name in trained[2], in order)."""
    g = getattr(fn, "__globals__", None)
    if not isinstance(g, dict):
        yield
        return

    def train_epoch(model, optimizer, loader, *args, **kwargs):
        trained[0] += 1
        trained[1].append(float(optimizer.param_groups[0]["lr"]))
        trained[2].append("train")
        return reference_train_epoch(model, optimizer, loader)

    def save_checkpoint(path, *args, **kwargs):
        trained[2].append(os.path.basename(os.fspath(path)) if isinstance(path, (str, os.PathLike)) else "?")
        return reference_save_checkpoint(path, *args, **kwargs)

    swap = {"save_checkpoint": save_checkpoint, "resume": reference_resume, "train_epoch": train_epoch}
    mine = {k: g[k] for k in swap if k in g}
    g.update({k: v for k, v in swap.items() if k in g})
    try:
        yield
    finally:
        g.update(mine)


def _find_state(obj, keys, depth=0):
    """The state dict of a model with `keys` somewhere inside a loaded checkpoint (None if there is none)."""
    if depth > 4:
        return None
    if isinstance(obj, nn.Module):
        obj = obj.state_dict()
    if isinstance(obj, dict):
        if set(obj) == set(keys) and all(torch.is_tensor(v) for v in obj.values()):
            return obj
        for value in obj.values():
            found = _find_state(value, keys, depth + 1)
            if found is not None:
                return found
    if isinstance(obj, (list, tuple)):
        for value in obj:
            found = _find_state(value, keys, depth + 1)
            if found is not None:
                return found
    return None


def _rates(case, epochs):
    """The learning rate each epoch trains with: the schedule's rate before its scheduler.step()."""
    run = _Run(case, 0, 0, 0)
    rates = []
    with warnings.catch_warnings():  # scheduler.step() with no optimizer.step() before it
        warnings.simplefilter("ignore")
        for _ in range(epochs):
            rates.append(float(run.optimizer.param_groups[0]["lr"]))
            run.scheduler.step()
    return rates


def _check_rates(observed, expected, first, case):
    """The rates train_epoch saw for epochs first, first+1...: the schedule's, stepped after each epoch."""
    if not observed:  # fit trains without calling train_epoch: nothing to observe
        return
    for i, (got, want) in enumerate(zip(observed, expected[first:])):
        if not math.isclose(got, want, rel_tol=1e-9):
            shifted = first + i + 1 < len(expected) and math.isclose(got, expected[first + i + 1], rel_tol=1e-9)
            expect(False, f"the learning rate train_epoch trains epoch {first + i} with ({case['scheduler']} schedule, "
                   f"rates per epoch {[round(r, 6) for r in expected]})", f"{want:.6g}", f"{got:.6g}",
                   "train_epoch first, then scheduler.step(): stepping before training trains every epoch at the next "
                   "epoch's rate" if shifted else "call scheduler.step() once per epoch, after train_epoch")


def _read(path):
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception:  # the learner's own format: their file, their code already runs here
        return torch.load(path, map_location="cpu", weights_only=False)


PLATEAU = 13  # epochs of check_fit's plateau run


def _number(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


_FOLDER_HINTS = {
    "unsupported operand type(s) for +: 'PosixPath'": "`folder` may be a pathlib.Path or a str: build the paths with "
    "pathlib.Path(folder) / 'last.pt' (or os.path.join), which take both, not with + on a str.",
    "unsupported operand type(s) for +: 'WindowsPath'": "`folder` may be a pathlib.Path or a str: build the paths "
    "with pathlib.Path(folder) / 'last.pt' (or os.path.join), which take both, not with + on a str.",
    "unsupported operand type(s) for /: 'str'": "`folder` may be a str or a pathlib.Path: turn it into a Path first, "
    "pathlib.Path(folder), then / 'last.pt' works for both.",
}


@check("fit")
def check_fit(fit, seed=0):
    """fit, stopped after some epochs and called again with fresh objects, continues; best.pt holds the best epoch."""
    case = _case(seed)
    epochs, stop = case["epochs"], case["stop"]
    rng = random.Random(seed)
    values = [round(rng.uniform(0.5, 1.5), 3) for _ in range(epochs)]
    later = rng.random() < 0.5 or seed == 0  # the best epoch after the restart, or before it
    best_epoch = rng.randrange(stop + 1, epochs) if later else rng.randrange(0, stop + 1)
    if seed == 0:
        best_epoch = 2
    values[best_epoch] = 0.25
    # a tie: a later epoch on the same side of the restart scores the best loss again (across the restart it would
    # hide a fit that forgets the best on resume); not lower than the best, so best.pt keeps best_epoch. Where there
    # is room, a worse epoch comes between them: the tie is then lower than the epoch before it (a fit that compares
    # with the previous epoch, not the best so far, takes it for a new best)
    end = epochs if later else stop + 1
    tie = None
    if best_epoch + 2 < end:
        values[best_epoch + 1] = 1.45
        tie = rng.randrange(best_epoch + 2, end)
    elif best_epoch + 1 < end:
        tie = best_epoch + 1
    if tie is not None:
        values[tie] = 0.25
    rates = _rates(case, epochs)
    with _own_rngs(), _folder() as folder:
        # an earlier run's best.pt, without its last.pt: this run starts from epoch 0 and best_loss inf all the same
        old = _Run(case, seed + 5, seed + 5, seed + 100)
        reference_save_checkpoint(os.path.join(folder, "best.pt"), *old.objects, 3, 0.1)
        stale = {k: v.detach().clone() for k, v in old.model.state_dict().items()}
        trained = [0, [], []]
        _seed_globals(seed)
        first = _Run(case, seed, seed, seed + 100)
        ev1 = _Scripted(first, values, 0, trained, fit)
        with _references(fit, trained):
            # `folder` a pathlib.Path here, a str at the restart (the text allows both)
            call(fit, *first.objects, ev1, stop + 1, pathlib.Path(folder), name="fit", hints=_FOLDER_HINTS,
                 where=f"(epochs={stop + 1}, a new folder, given as a pathlib.Path)")
        expect(ev1.epochs() == stop + 1, f"the validations fit runs for epochs={stop + 1} from an empty folder",
               stop + 1, ev1.epochs(), "one evaluate() per epoch, after training it")
        _check_rates(trained[1], rates, 0, case)
        _check_order(ev1)
        _check_last_saved(trained[2], 0, f"(epochs={stop + 1}, from an empty folder)")
        expect(os.path.isfile(os.path.join(folder, "last.pt")), "folder/'last.pt' after fit", "a file", "none",
               "save_checkpoint(folder / 'last.pt', ...) at the end of every epoch")
        last = _read(os.path.join(folder, "last.pt"))
        if isinstance(last, dict) and "best_loss" in last:  # written by save_checkpoint (the reference, here)
            recorded, so_far = _number(last["best_loss"]), min(values[:stop + 1])
            expect(recorded == so_far, f"the best_loss that last.pt records after epoch {stop} (validation losses "
                   f"{values[:stop + 1]})", so_far, repr(last["best_loss"])[:60],
                   "save last.pt at the end of the epoch, after evaluate() and the best's update: saved before them, "
                   "it records the previous best, and a resume forgets that epoch's improvement"
                   if recorded == min(values[:stop], default=math.inf) else "")
        trained[0], trained[1], trained[2] = 0, [], []
        _seed_globals(seed + 7919)
        second = _Run(case, seed + 1, seed + 2, seed + 100)
        ev2 = _Scripted(second, values, stop + 1, trained, fit)
        with _references(fit, trained):
            got = call(fit, *second.objects, ev2, epochs, str(folder), name="fit", hints=_FOLDER_HINTS,
                       where=f"(epochs={epochs}, the folder of a run stopped after epoch {stop}, given as a str)")
        expect(ev2.epochs() == epochs - stop - 1,
               f"the validations fit runs for epochs={epochs} when folder/'last.pt' holds "
               f"epoch {stop}", epochs - stop - 1, ev2.epochs(),
               "it started again from epoch 0: resume from last.pt first" if ev2.epochs() == epochs else "")
        _check_rates(trained[1], rates, stop + 1, case)
        _check_order(ev2)
        _check_last_saved(trained[2], stop + 1, f"(epochs={epochs}, resumed after epoch {stop})")
        best = _number(got)
        expect(best == 0.25, "the best validation loss fit returns", 0.25, repr(got)[:60],
               "the best of the whole run, including the epochs before the restart (resume returns it)"
               if best == min(values[stop + 1:]) and not later else "")
        path = os.path.join(folder, "best.pt")
        expect(os.path.isfile(path), "folder/'best.pt' after fit", "a file", "none")
        keys = list(first.model.state_dict())
        saved = _read(path)
        state = _find_state(saved, keys)
        expect(state is not None, "the model's state dict in best.pt", f"a dict with keys {keys[:2]}...", "none found")
        expect(not (isinstance(saved, dict) and set(saved) == set(keys)), "folder/'best.pt'",
               "a checkpoint written by save_checkpoint (the model's, optimizer's and scheduler's states, epoch, "
               "best_loss...)", "the model's state dict alone",
               "save_checkpoint(folder / 'best.pt', model, optimizer, scheduler, loader, epoch, best): the best "
               "epoch's checkpoint, which training can resume from as from last.pt")
        weights = {**ev1.weights, **ev2.weights}
        held = next((e for e, w in sorted(weights.items()) if _same({k: v.cpu() for k, v in state.items()}, w)), None)
        expect(held == best_epoch, f"the epoch whose weights best.pt holds (validation losses {values})",
               f"epoch {best_epoch} (loss 0.25, the lowest, and the first to reach it)",
               "none of the epochs" + (": the best.pt an earlier run had left in the folder" if held is None and
                                       _same({k: v.cpu() for k, v in state.items()}, stale) else "")
               if held is None else f"epoch {held}",
               "without last.pt, fit starts from epoch 0 with best_loss = float('inf'), whatever else the folder holds "
               "(an earlier run's best.pt is not this run's best): the first epoch then writes best.pt"
               if held is None and _same({k: v.cpu() for k, v in state.items()}, stale) else
               f"epoch {tie} only ties the best (0.25 again): a loss that is not lower than the best so far must not "
               f"replace best.pt (compare with <, not <=)" if held is not None and held == tie and
               values[tie - 1] == 0.25 else
               f"epoch {held} scored {values[held]}, lower than the epoch before it ({values[held - 1]}) but not lower "
               f"than the best so far (0.25, epoch {best_epoch}): best.pt changes only for a loss strictly lower than "
               "the best so far (not one lower than the previous epoch's, not a tie: compare with <)"
               if held is not None and held > best_epoch and values[held] < values[held - 1] else
               "save best.pt only when the loss is lower than the best so far, and carry the best across a resume"
               if held is not None else "")
        if isinstance(saved, dict) and "best_loss" in saved:  # written by save_checkpoint (the reference, here)
            try:
                recorded = float(saved["best_loss"])
            except (TypeError, ValueError):
                recorded = None
            earlier = [values[e] for e in range(best_epoch)]
            expect(recorded == 0.25, f"the best_loss that best.pt records (it holds epoch {best_epoch}, validation loss "
                   "0.25)", 0.25, repr(saved["best_loss"])[:60],
                   "the loss becomes the best first, then save_checkpoint(folder / 'best.pt', ..., best_loss) with the "
                   "new best: saved before the update, best.pt records the previous best"
                   if recorded == min(earlier, default=math.inf) else "")
        if isinstance(saved, dict) and "epoch" in saved and isinstance(saved["epoch"], int):
            expect(saved["epoch"] == best_epoch, f"the epoch that best.pt records (it holds the weights of epoch "
                   f"{best_epoch})", best_epoch, saved["epoch"], "save_checkpoint(..., epoch, ...) with the epoch just "
                   "finished, counting from 0")
        # a plateau: no better loss than epoch 0's for PLATEAU - 3 epochs, then two better ones, the last better by
        # 0.0004 only: every epoch up to `epochs` trains, whatever the loss does (an early stop with patience up to
        # PLATEAU - 3 shows), and any improvement counts (a min_delta shows)
        plateau = [0.5] + [round(rng.uniform(0.5, 1.5), 3) for _ in range(PLATEAU - 3)] + [0.2504, 0.25]
        trained[0], trained[1], trained[2] = 0, [], []
        _seed_globals(seed + 31)
        third = _Run(dict(case, n=2 * case["batch"]), seed + 3, seed + 4, seed + 100)  # two steps an epoch
        ev3 = _Scripted(third, plateau, 0, trained, fit)
        with _references(fit, trained), _folder() as parent:
            other = os.path.join(parent, "runs", "seed0")  # a folder that does not exist yet, nor its parent
            create = "create the folder and its parents first: pathlib.Path(folder).mkdir(parents=True, exist_ok=True)"
            got = call(fit, *third.objects, ev3, PLATEAU, other, name="fit",
                       hints={"does not exist": create, "No such file or directory": create},
                       where=f"(epochs={PLATEAU}, a folder that does not exist yet, nor its parent, runs/seed0; "
                       f"validation losses {plateau})")
        expect(ev3.epochs() == PLATEAU, f"the validations fit runs for epochs={PLATEAU} from an empty folder when the "
               f"validation loss does not improve from epoch 1 to epoch {PLATEAU - 3} (losses {plateau})", PLATEAU,
               ev3.epochs(), f"it stopped after epoch {ev3.epochs() - 1}, {ev3.epochs() - 1} epochs without "
               "improvement: every "
               "epoch up to `epochs` trains and validates, whatever the loss does (no early stopping)"
               if 1 < ev3.epochs() < PLATEAU else "")
        expect(_number(got) == 0.25, f"the best validation loss fit returns (epochs={PLATEAU}, losses {plateau})",
               0.25, repr(got)[:60], "0.25 is lower than 0.2504: any lower loss is a new best, however small the "
               "improvement (no min_delta)" if _number(got) == 0.2504 else "")
    when = "after" if later else "before"
    tied = f"; epoch {tie}'s tie did not replace it" if tie is not None else ""
    return (f"fit resumed from last.pt after epoch {stop}, and best.pt holds epoch {best_epoch} (the best, {when} the "
            f"restart{tied}); {PLATEAU} epochs with a plateau all trained")
