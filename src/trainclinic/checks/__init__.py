"""The grading checks: one module per lesson, and the small framework they share.

A check calls the learner's function on seeded inputs and asserts behaviour. It either prints one
line `✓ <grade_id>: <what was verified>` or raises CheckFailed (an AssertionError) saying what was
expected, what was observed, and a hint. Warnings and stderr from learner code are captured, so a
passing check writes nothing to stderr (nbgrader scores a cell that does 0).
"""
import contextlib
import functools
import io
import traceback
import warnings

import torch

__all__ = ["CheckFailed", "SimulationLimit", "check", "call", "expect", "close", "one_thread", "quiet", "standard_state",
           "devices", "gpu_probe", "same_device", "flat", "python_float", "stale_grads", "seeded", "settings", "restore_settings",
           "param_groups"]


class CheckFailed(AssertionError):
    """A check found the learner's code wrong: expected, observed, hint."""


class SimulationLimit(Exception):
    """Learner code did something the simulated GPU cannot run (not a bug): the check skips that probe."""


def _where(exc):
    """The last frame of the learner's own code in a traceback, as 'line N: source'."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "/torch/" not in f.filename and "/trainclinic/" not in f.filename]
    if not frames:
        return ""
    f = frames[-1]
    where = f"in {f.name}, line {f.lineno}" if f.name.isidentifier() else f"at line {f.lineno}"
    return f" ({where}: {f.line.strip()})" if f.line else f" ({where})"


@contextlib.contextmanager
def one_thread():
    """Run on one CPU thread, restoring the setting after: tiny models run fastest and alike that way."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@contextlib.contextmanager
def standard_state():
    """Grad mode on, anomaly mode off, float32 by default while a check runs; the learner's settings back after.

    Earlier cells of a notebook may leave any of these switched (a `train` that ends with
    torch.set_grad_enabled(False)): the check's own reference runs must not fail for it."""
    grad, anomaly, dtype = torch.is_grad_enabled(), torch.is_anomaly_enabled(), torch.get_default_dtype()
    torch.set_grad_enabled(True)
    torch.set_anomaly_enabled(False)
    torch.set_default_dtype(torch.float32)
    try:
        yield
    finally:
        torch.set_grad_enabled(grad)
        torch.set_anomaly_enabled(anomaly)
        torch.set_default_dtype(dtype)


_SETTINGS = {  # name -> (get, set): torch's process-wide switches that a training step has no reason to change
    "torch.get_float32_matmul_precision()": (torch.get_float32_matmul_precision, torch.set_float32_matmul_precision),
    "torch.are_deterministic_algorithms_enabled()": (
        lambda: (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()),
        lambda v: torch.use_deterministic_algorithms(v[0], warn_only=v[1])),
    "torch.get_num_threads()": (torch.get_num_threads, torch.set_num_threads),
    "torch.backends.cudnn.benchmark": (lambda: torch.backends.cudnn.benchmark,
                                       lambda v: setattr(torch.backends.cudnn, "benchmark", v)),
    "torch.backends.cudnn.deterministic": (lambda: torch.backends.cudnn.deterministic,
                                           lambda v: setattr(torch.backends.cudnn, "deterministic", v)),
    "torch.backends.cudnn.allow_tf32": (lambda: torch.backends.cudnn.allow_tf32,
                                        lambda v: setattr(torch.backends.cudnn, "allow_tf32", v)),
    "torch.backends.cuda.matmul.allow_tf32": (lambda: torch.backends.cuda.matmul.allow_tf32,
                                              lambda v: setattr(torch.backends.cuda.matmul, "allow_tf32", v)),
}


def param_groups(params):
    """The parameters as an optimizer's two groups, weights then biases (per-layer settings make such groups)."""
    params = list(params)
    groups = ({"params": [p for p in params if p.dim() > 1]}, {"params": [p for p in params if p.dim() <= 1]})
    return [g for g in groups if g["params"]]


def settings():
    """torch's process-wide switches (matmul precision, determinism, threads, cuDNN and TF32 flags): {name: value}."""
    return {name: get() for name, (get, _) in _SETTINGS.items()}


def restore_settings(saved):
    """Put back what `settings()` returned, where it changed."""
    for name, value in saved.items():
        if _SETTINGS[name][0]() != value:
            _SETTINGS[name][1](value)


@contextlib.contextmanager
def quiet():
    """Capture warnings and stderr; yield the list of caught warnings."""
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("always")
        yield caught


_DEVICE_HINT = ("two tensors of one operation are on different devices (the message names both): move inputs with "
                ".to(device) and create new tensors with device=<an input>.device.")
_CUDA_HINT = ("the code asked for CUDA itself (.cuda(), device='cuda') on a machine without it: use the `device` "
              "it is given, with .to(device).")

_TARGET_HINT = ("a loss over classes (cross_entropy, nll_loss) wants its target as int64 class indices: "
                "targets.long().")

HINTS = {  # the first key found in the exception's text gives the hint
    "Expected all tensors to be on the same device": _DEVICE_HINT,  # real GPU (all torch), simulation torch >= 2.13
    "found two different devices": _DEVICE_HINT,  # the simulation (FakeTensorMode), torch <= 2.12
    "Torch not compiled with CUDA enabled": _CUDA_HINT,  # CPU-only build
    "not linked with support for cuda": _CUDA_HINT,  # CPU-only build, some calls
    "Found no NVIDIA driver": _CUDA_HINT,  # CUDA build without a GPU (Colab's CPU runtime)
    "CUDA driver version is insufficient": _CUDA_HINT,  # the same, other calls
    "Cannot re-initialize CUDA in forked subprocess": _CUDA_HINT,  # the same, in a fork of a process that looked for a GPU
    "does not require grad and does not have a grad_fn": "the loss has no graph back to the parameters: compute it "
    "outside torch.no_grad(), from the model's output, without .detach() or .item().",
    "expected target dtype to be Long": _TARGET_HINT,  # a class-index loss's target, torch >= 2.13
    "expected scalar type Long but found": _TARGET_HINT,  # the same, torch <= 2.12 (which does not name the target)
    "expected scalar type": "two tensors have different dtypes: match them with .to(dtype) or create them with the same dtype.",
    "cannot be multiplied": "the two shapes in the message must agree on their inner dimension: check the layer sizes.",
}


def call(fn, *args, name=None, where="", hints=None, restore_grad=True, defaults=False, **kwargs):
    """Call learner code quietly; its exceptions become CheckFailed naming them, with a hint where one fits
    (`hints`, a lesson's own {message fragment: hint}, first; then the shared HINTS). Whatever the code does to the
    global grad mode (and anomaly detection), the check gets its own back (restore_grad=False: a check that observes
    them restores them). torch's default dtype and device are put back too (defaults=True: and a change to them fails
    the call, where the lesson's text asks the function to leave them alone)."""
    name = name or getattr(fn, "__name__", "your function")
    if not callable(fn):
        raise CheckFailed(f"expected `{name}` to be a function, found {type(fn).__name__}")
    grad, anomaly = torch.is_grad_enabled(), torch.is_anomaly_enabled()
    saved = _defaults()
    try:
        with quiet():
            out = fn(*args, **kwargs)
    except CheckFailed:
        raise
    except Exception as exc:  # any error in learner code is a verdict, not a crash
        from ..device import SimulatedCuda, simulation_limit

        # the release's own `raise NotImplementedError()` (no message; re-raised from a DataLoader worker, its
        # traceback ends with the bare name); PyTorch's own say what is not implemented
        if isinstance(exc, NotImplementedError) and (not str(exc) or str(exc).rstrip().endswith("\nNotImplementedError")):
            raise CheckFailed(f"`{name}` is not written yet: replace `raise NotImplementedError` with your code") from None
        if SimulatedCuda.active and simulation_limit(exc):
            raise SimulationLimit(f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}{_where(exc)}") from None
        if SimulatedCuda.active and isinstance(exc, AssertionError):  # the same code passed the checks' real runs
            raise SimulationLimit(
                f"an assert in your code failed there ({str(exc).splitlines()[0][:80] if str(exc) else 'no message'}"
                f"{_where(exc)}): its tensors hold no values and record no autograd graph") from None
        hint = next((h for table in (hints or {}, HINTS) for key, h in table.items() if key in str(exc)), "")
        text = f"`{name}`{' ' + where if where else ''} raised {type(exc).__name__}: {exc}{_where(exc)}"
        # The learner's frames die now, with what they hold (tensors, a DataLoader's workers), not at a later
        # garbage collection: a worker-backed iterator freed by the collector waits 5 s per worker to stop.
        exc.__traceback__ = None
        raise CheckFailed(text + (f"\nHint: {hint}" if hint else "")) from None
    finally:
        if restore_grad:
            torch.set_grad_enabled(grad)
        changed = _restore_defaults(saved)
        if restore_grad and torch.is_anomaly_enabled() != anomaly:  # autograd's other process-wide mode
            torch.set_anomaly_enabled(anomaly)
    if changed and defaults:
        what, was, now = changed[0]
        raise CheckFailed(
            f"torch's default {what} when `{name}`{' ' + where if where else ''} returned: expected {was}, as it was, "
            f"observed {now}: a process-wide setting, so every tensor and model the caller makes afterwards would be "
            f"{now}.\nHint: give the tensors you make the {what} they need (e.g. {what}=x.{what} of an input) "
            f"instead of torch.set_default_{what}(...); or put the default back before returning (try/finally).")
    return out


def _defaults():
    """torch's default dtype and device (what new tensors get when none is named)."""
    from ..device import default_device

    return torch.get_default_dtype(), default_device()


def _restore_defaults(saved):
    """Put back `_defaults()` where learner code changed them; [(what, was, now)] for each change."""
    from ..device import put_defaults

    now = _defaults()
    changed = [(what, str(was).removeprefix("torch."), str(got).removeprefix("torch."))
               for what, was, got in zip(("dtype", "device"), saved, now) if was != got]
    put_defaults(*saved)
    return changed


def expect(ok, what, expected, observed, hint=""):
    """Raise CheckFailed unless `ok`: '<what>: expected <expected>, observed <observed>. Hint: ...'."""
    if not ok:
        text = f"{what}: expected {expected}, observed {observed}."
        raise CheckFailed(text + (f"\nHint: {hint}" if hint else ""))


def close(a, b, rtol=1e-4, atol=1e-5):
    """allclose for floats or tensors (compared on the CPU, float64)."""
    a = torch.as_tensor(a).detach().to("cpu", torch.float64)
    b = torch.as_tensor(b).detach().to("cpu", torch.float64)
    return a.shape == b.shape and bool(torch.allclose(a, b, rtol=rtol, atol=atol))


def devices():
    """The devices a check runs on: the present one, plus the CPU when the present one is an accelerator."""
    from ..device import pick_device

    present = pick_device()
    return [present] if present.type == "cpu" else [present, torch.device("cpu")]


def gpu_probe(run):
    """Run `run(sim)` on a simulated cuda:0 when no GPU is here; return a phrase for the success line (how it went)."""
    from ..device import SimulatedCuda, pick_device

    if pick_device().type in ("cuda", "mps"):
        return ""  # the present-device run already used a real GPU
    grad_mode = torch.is_grad_enabled()
    try:
        with SimulatedCuda(say=False) as sim:
            run(sim)
    except SimulationLimit as limit:
        return f" (the simulated cuda:0 cannot run this code, so its device check was skipped: {limit})"
    except CheckFailed as failed:
        if "simulated" in str(failed):
            raise
        raise CheckFailed(f"on a simulated GPU (no GPU here; PyTorch's FakeTensorMode): {failed}") from None
    finally:
        torch.set_grad_enabled(grad_mode)
    return " and on a simulated cuda:0"


def same_device(t, device):
    """True if tensor `t` is on `device` (`cuda` matches any index, `cuda:1` only itself)."""
    device = torch.device(device)
    return t.device.type == device.type and (device.index is None or t.device.index in (None, device.index))


def flat(tensors, like=None):
    """One float64 CPU vector of a list of tensors (a None becomes zeros shaped like `like`'s tensor at its place)."""
    parts = []
    for i, t in enumerate(tensors):
        if t is None:
            t = torch.zeros_like(like[i]) if like is not None else torch.zeros(0)
        parts.append(t.detach().reshape(-1).to("cpu", torch.float64))
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64)


def python_float(value, what):
    """`value` as a float when it is a Python float (or int); else CheckFailed saying what it is and why it matters."""
    if torch.is_tensor(value):
        shape = "a 0-d tensor" if value.dim() == 0 else f"a tensor of shape {tuple(value.shape)}"
        if value.grad_fn is not None:
            observed = f"{shape} that still holds its autograd graph (grad_fn={type(value.grad_fn).__name__})"
            why = ("a tensor with a grad_fn keeps the whole graph of its step alive (every activation saved for "
                   "backward), so a history or a log of them holds the memory of every step it records")
        else:
            observed = f"{shape} ({value.dtype}, on {value.device})"
            why = ("a tensor kept in a history or a log keeps its storage alive (GPU memory, on a GPU), and every "
                   "comparison or print of it is a PyTorch operation (a device sync, on a GPU)")
        raise CheckFailed(f"{what}: expected a Python float, observed {observed}.\n"
                          f"Hint: return `.item()` (or float(...)) of it: {why}.")
    if isinstance(value, bool) or not isinstance(value, (float, int)):
        kind = type(value).__name__ if type(value).__module__ == "builtins" else f"{type(value).__module__}.{type(value).__name__}"
        raise CheckFailed(f"{what}: expected a Python float, observed {kind} ({value!r:.60}).")
    return float(value)


def stale_grads(model, value):
    """Fill every parameter's .grad with `value`, as a previous step would leave it (a step must zero it first)."""
    for p in model.parameters():
        p.grad = torch.full_like(p, value)


def seeded(seed, batch_size, inputs=8, hidden=32, classes=3, depth=2, dtype=torch.float32, device="cpu"):
    """A seeded MLP and a batch of blobs for it (seed + 1), both in `dtype` on `device` (labels int64)."""
    from .. import data, models

    model = models.mlp(inputs=inputs, hidden=hidden, outputs=classes, depth=depth, seed=seed).to(device, dtype)
    x, y = data.blobs(n=batch_size, features=inputs, classes=classes, seed=seed + 1).tensors
    return model, (x.to(device, dtype), y.to(device))


def check(grade_id):
    """Decorator for a check: quiet, on one thread, in a standard grad mode and default dtype, without disturbing the
    learner's RNG or settings; prints `✓ grade_id: ...`."""

    def wrap(body):
        @functools.wraps(body)
        def run(*args, **kwargs):
            with torch.random.fork_rng(devices=[]), one_thread(), standard_state(), quiet():
                verified = body(*args, **kwargs)
            print(f"✓ {grade_id}: {verified}")

        return run

    return wrap
