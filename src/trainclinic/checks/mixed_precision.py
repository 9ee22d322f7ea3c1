"""Checks for lesson 07, mixed precision: make_scaler and amp_step.

Everything runs on seeded tiny MLPs and batches of blobs (cross-entropy), on the CPU and, when there is one, on a
CUDA GPU (float16 autocast on both: the CPU has it from torch 2.4 on at least; bfloat16 in the sweep). The
learner's code is watched from outside, never read: a forward hook (the dtype the model computed in), torch's global
optimizer step pre-hook (whether the optimizer stepped, and on which gradients) and the scaler's own state (its
scale before and after). Gradients are compared with float32 gradients of the same loss computed here.
"""
import contextlib
import copy
import math
import random
from unittest import mock

import torch
from torch import nn

from .. import data, models
from . import CheckFailed, call, check, expect, flat, param_groups, python_float
from ..precision import zero_fraction

__all__ = ["check_make_scaler", "check_amp_trains", "check_overflow_skipped", "check_grads_match_fp32",
           "check_clip_unscaled", "reference_amp_step"]

_HINTS = {
    "Attempting to unscale FP16 gradients": "the weights are float16 (model.half() or .to(torch.float16)): keep them "
    "float32. autocast computes in float16 inside the forward pass; the weights, gradients and update stay float32.",
    "has already been called since the last update()": "call scaler.update() once after scaler.step(optimizer), "
    "every step: it resets the scaler's record of the step (and adjusts the scale).",
    "unscale_() is being called after step()": "call scaler.update() once after scaler.step(optimizer), every "
    "step: it resets the scaler's record of the step (and adjusts the scale).",
    "unscale_() has already been called": "call scaler.unscale_(optimizer) once per step, before clipping; "
    "scaler.step(optimizer) does not unscale again after it.",
    "must have the same dtype": "an output computed under autocast (float16 or bfloat16) met float32 code: compute "
    "the model's output and the loss inside the same `with torch.autocast(...)` block.",
}


def _devices():
    """CPU always, plus a CUDA GPU when there is one (GradScaler and autocast have no MPS support on the floor torch)."""
    out = []
    if torch.cuda.is_available():
        out.append(torch.device("cuda"))
    return out + [torch.device("cpu")]


def _name(dtype):
    return str(dtype).replace("torch.", "")


def reference_amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.float16):
    """The lesson's amp_step: autocast forward and loss, scaled backward, unscale_ before clipping, step, update."""
    inputs, targets = batch
    optimizer.zero_grad()
    with torch.autocast(inputs.device.type, dtype=dtype):
        loss = loss_fn(model(inputs), targets)
    scaler.scale(loss).backward()
    if max_norm is not None:
        scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.item()


# ---- make_scaler ----------------------------------------------------------------------------------------------

@contextlib.contextmanager
def _no_cuda():
    """torch.cuda.is_available() is False inside: a machine without CUDA (Colab's CPU runtime, a laptop)."""
    with mock.patch.object(torch.cuda, "is_available", lambda: False):
        yield


@contextlib.contextmanager
def _cuda_present():
    """torch.cuda.is_available() is True inside: a GPU machine, as GradScaler's constructor sees one (it asks nothing
    else of CUDA), so that a scaler for 'cuda' can be built, and told apart, on a machine without a GPU."""
    with mock.patch.object(torch.cuda, "is_available", lambda: True):
        yield


_DEFAULT_SCALE = 2.0 ** 16
_SETTINGS = {"growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 2000}  # GradScaler's defaults


def _kind(scaler):
    """The device a GradScaler was built for, as it was given ('?' when it does not say): a device type, 'cuda' or
    'cpu', as GradScaler's documentation asks (a name with an index, 'cuda:0', is not one)."""
    kind = getattr(scaler, "_device", None)
    return "?" if kind is None else str(kind)


def _expect_scaler(scaler, arg, device, where):
    """A fresh GradScaler from make_scaler(arg): a GradScaler, enabled, for device.type, at the default initial scale."""
    expect(isinstance(scaler, torch.amp.GradScaler), f"make_scaler({arg!r})'s return value",
           "a torch.amp.GradScaler", type(scaler).__name__)
    kind = _kind(scaler)
    cpu = device.type == "cpu"
    expect(scaler.is_enabled(), f"make_scaler({arg!r}).is_enabled() {where}".strip(), True,
           f"False: the scaler was built for device {kind!r} and disabled itself, so scaler.scale(loss) returns "
           "the loss unscaled and float16 gradients underflow to zero" if kind == "cuda" and cpu else
           f"False (a scaler built for device {kind!r})",
           f"torch.amp.GradScaler() defaults to 'cuda' (so does torch.cuda.amp.GradScaler()), and a scaler for "
           "'cuda' only warns and disables itself without CUDA: "
           f"pass the device's type, torch.amp.GradScaler({device.type!r}) "
           "(torch.amp.GradScaler(device.type) for a torch.device)" if kind != device.type else
           "leave the scaler enabled (no enabled=False)")
    expect(kind == device.type, f"the device type of make_scaler({arg!r})'s GradScaler, {where}".strip(" ,"),
           f"{device.type!r}, the type of the device passed", repr(kind),
           "GradScaler takes a device type, not a device name: torch.amp.GradScaler(torch.device(device).type)"
           if kind.startswith(device.type + ":") else
           "build the scaler for the device it is given, not a fixed one nor one picked from "
           "torch.cuda.is_available(): torch.amp.GradScaler(torch.device(device).type) (a torch.device, or a name "
           "such as 'cpu' or 'cuda:0')")
    settings = {k: getattr(scaler, f"_{k}", v) for k, v in _SETTINGS.items()}
    changed = {k: v for k, v in settings.items() if v != _SETTINGS[k]}
    expect(not changed, f"make_scaler({arg!r})'s GradScaler settings", "GradScaler's defaults ("
           + ", ".join(f"{k}={v:g}" for k, v in _SETTINGS.items()) + "): the scale halves after an overflow, "
           "doubles after 2000 good steps", ", ".join(f"{k}={v:g}" for k, v in changed.items()),
           "build it with GradScaler(device_type) alone: the lesson's scaler halves its scale at an overflow, as "
           "section 1 shows")
    initial = scaler.get_scale()
    expect(initial == _DEFAULT_SCALE, f"make_scaler({arg!r}).get_scale(), the initial loss scale",
           f"{_DEFAULT_SCALE:g} (GradScaler's default init_scale)", f"{initial:g}",
           "keep GradScaler's default init_scale (65536): " + (
               "a scale of 1 or less does not lift small gradients" if initial <= 1 else
               "a smaller one lifts small gradients less (and the scaler only grows it after 2000 good steps)"
               if initial < _DEFAULT_SCALE else "a larger one overflows at first, and the first steps are skipped"))


@check("make_scaler")
def check_make_scaler(make_scaler, seed=0):
    """make_scaler(device) returns a torch.amp.GradScaler that is enabled, built for `device`'s type and at the default
    initial scale, on the CPU without CUDA and on a CUDA GPU (real, or simulated: torch.cuda.is_available() made True)."""
    rng = random.Random(seed)
    value = 0.5 if seed == 0 else rng.uniform(0.01, 10)
    seen = []
    for device in _devices():
        arg = device if seed % 2 == 0 else str(device)  # a torch.device or its name
        cpu = device.type == "cpu"
        where = "for the CPU on a machine without CUDA" + (
            " (simulated here: torch.cuda.is_available() made False during the call)" if torch.cuda.is_available() else "")
        with _no_cuda() if cpu else contextlib.nullcontext():
            scaler = call(make_scaler, arg, name="make_scaler", hints=_HINTS, where=f"({arg!r})")
            _expect_scaler(scaler, arg, device, where if cpu else "on a machine with CUDA")
            loss = torch.tensor(value, device=device)
            scaled = scaler.scale(loss)
            factor = scaler.get_scale()
        expect(factor > 1 and torch.is_tensor(scaled) and scaled.device.type == device.type
               and abs(scaled.item() - value * factor) <= 1e-6 * value * factor,
               f"scaler.scale(loss) for a loss of {value:.4g} on {device}", f"{value:.4g} x get_scale()",
               f"{scaled.item() if torch.is_tensor(scaled) else scaled!r} (get_scale() = {factor:g})",
               "a scale of 1 or less does not lift small gradients: keep GradScaler's default init_scale (65536)"
               if factor <= 1 else "")
        seen.append(f"{device.type} ({'no CUDA' if cpu else 'CUDA'}): scale {factor:g}")
    if not torch.cuda.is_available():
        # No GPU here: a CUDA device is passed all the same, with torch.cuda.is_available() made True while make_scaler
        # runs. Only the scaler is built then (nothing runs on CUDA): a scaler for a fixed device shows here.
        device = torch.device("cuda:0")
        arg = device if seed % 2 == 0 else str(device)
        try:  # as this machine is, without CUDA: still a scaler for the device passed (it disables itself there)
            bare = call(make_scaler, arg, name="make_scaler", hints=_HINTS, where=f"({arg!r}), without CUDA")
        except CheckFailed:  # code that touches CUDA itself cannot run here: not a verdict
            bare = None
        if bare is not None:
            expect(isinstance(bare, torch.amp.GradScaler) and _kind(bare) == "cuda",
                   f"the device type of make_scaler({arg!r})'s GradScaler on this machine, without CUDA",
                   "'cuda', the type of the device passed (GradScaler then warns and disables itself: nothing runs "
                   "on that device here anyway)", repr(_kind(bare)) if isinstance(bare, torch.amp.GradScaler)
                   else type(bare).__name__,
                   "build the scaler for the device it is given, whatever this machine has: "
                   "torch.amp.GradScaler(torch.device(device).type); a type picked from torch.cuda.is_available() "
                   "is for another device than the one passed")
        where = "on a machine with CUDA (simulated here: torch.cuda.is_available() made True during the call)"
        try:
            with _cuda_present():
                scaler = call(make_scaler, arg, name="make_scaler", hints=_HINTS, where=f"({arg!r})")
                cpu_there = call(make_scaler, torch.device("cpu"), name="make_scaler", hints=_HINTS,
                                 where="(torch.device('cpu'), on a machine with CUDA)")
        except CheckFailed as exc:  # code that touches CUDA itself cannot run in the simulation: not a verdict
            seen.append(f"cuda:0 (simulated) skipped, make_scaler could not run without a GPU: {str(exc)[:80]}")
        else:
            _expect_scaler(scaler, arg, device, where)
            _expect_scaler(cpu_there, torch.device("cpu"), torch.device("cpu"), "on a machine with CUDA (simulated "
                           "here: torch.cuda.is_available() made True), for the CPU")
            seen.append("cuda:0 (simulated): a scaler for 'cuda', and one for 'cpu' when the CPU is passed")
    if not torch.backends.mps.is_available():
        # An Apple GPU's device: only the scaler is built (GradScaler('mps') is enabled on every supported torch, with
        # or without an Apple GPU), so a scaler for a fixed 'cpu' or 'cuda' shows here too.
        arg = torch.device("mps") if seed % 2 == 0 else "mps"
        try:
            with mock.patch.object(torch.backends.mps, "is_available", lambda: True):
                scaler = call(make_scaler, arg, name="make_scaler", hints=_HINTS, where=f"({arg!r})")
        except CheckFailed as exc:  # code that touches the Apple GPU itself cannot run here: not a verdict
            seen.append(f"mps (simulated) skipped, make_scaler could not run without an Apple GPU: {str(exc)[:80]}")
        else:
            _expect_scaler(scaler, arg, torch.device("mps"), "for an Apple GPU (simulated here: only the scaler is "
                           "built, nothing runs on it)")
            seen.append("mps (simulated): a scaler for 'mps'")
    return "an enabled torch.amp.GradScaler for the device passed, at the default scale: " + ", ".join(seen)


# ---- amp_step: the watch --------------------------------------------------------------------------------------

class _Watch:
    """While active: the dtype of the model's first Linear output (forward hook) and, at every step of `optimizer`,
    the parameters' gradients (torch's global optimizer step pre-hook)."""

    def __init__(self, model, optimizer):
        self.model, self.optimizer = model, optimizer
        self.params = list(model.parameters())
        self.steps, self.dtypes, self._handles = [], [], []
        self.loss_dtypes = []  # the dtype of each loss loss_fn returned (see _run)
        self.loss_autocast = []  # whether loss_fn ran under autocast for the batch's device, or on float32 outputs

    def __enter__(self):
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        first = next(m for m in self.model.modules() if isinstance(m, nn.Linear))
        self._handles += [register_optimizer_step_pre_hook(self._step),
                          first.register_forward_hook(lambda m, i, o: self.dtypes.append(o.dtype))]
        return self

    def __exit__(self, *exc):
        for h in self._handles:
            h.remove()
        return False

    def _step(self, optimizer, args, kwargs):
        if optimizer is self.optimizer:
            self.steps.append([None if p.grad is None else p.grad.detach().clone() for p in self.params])


def _optimizer(kind, params, lr):
    if kind == "adam":
        return torch.optim.Adam(params, lr=lr / 10)
    if kind == "momentum":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    return torch.optim.SGD(params, lr=lr)


def _setup(seed, device, dtype=None):
    """A seeded Tanh MLP (float32 weights; smooth, so that float16 rounding flips no ReLU), a batch on `device`, the optimizer kind and the autocast dtype for a seed."""
    rng = random.Random(seed)
    if seed == 0:
        features, hidden, classes, depth, batch, kind, half = 8, 32, 3, 2, 64, "sgd", torch.float16
    else:
        features, hidden, classes = rng.choice([4, 8, 16]), rng.choice([16, 32, 64]), rng.choice([2, 3, 5])
        depth, batch = rng.choice([1, 2, 3]), rng.choice([16, 33, 64, 128])
        kind = rng.choice(["sgd", "momentum", "adam"])
        half = (torch.float16, torch.bfloat16)[seed % 2]
    half = dtype or half
    model = models.mlp(inputs=features, hidden=hidden, outputs=classes, depth=depth, activation=nn.Tanh, seed=seed)
    x, y = data.blobs(n=batch, features=features, classes=classes, seed=seed + 1).tensors
    return model.to(device), (x.to(device), y.to(device)), kind, half


def _fp32_grads(model, batch, loss_fn):
    """The float32 gradients of loss_fn on a copy of `model` (no autocast, no scaler)."""
    m = copy.deepcopy(model)
    m.zero_grad(set_to_none=True)
    loss = loss_fn(m(batch[0]), batch[1])
    loss.backward()
    return [p.grad.detach().clone() for p in m.parameters()], loss.item()


def _scaler(device, **kwargs):
    return torch.amp.GradScaler(device.type, **kwargs)


def _rel(a, b, like):
    a, b = flat(a, like), flat(b, like)
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def _cross_entropy(output, target):
    return nn.functional.cross_entropy(output, target)


def _run(amp_step, model, batch, loss_fn, opt, scaler, what, max_norm=None, dtype=torch.float16):
    with _Watch(model, opt) as watch:
        def watched_loss(*args, **kw):  # the same loss, its dtype recorded (float32 under autocast for cross_entropy)
            # inside autocast, or on a float32 (or wider) output: the loss computed in float32 on purpose (autocast
            # switched off for it, the output cast with .float(), as the troubleshooting table does it)
            wide = [a for a in args if torch.is_tensor(a) and a.is_floating_point()]
            watch.loss_autocast.append(torch.is_autocast_enabled(batch[0].device.type) or bool(wide) and all(
                a.dtype in (torch.float32, torch.float64) for a in wide))
            out = loss_fn(*args, **kw)
            watch.loss_dtypes.append(out.dtype if torch.is_tensor(out) else None)
            return out

        kwargs = {"max_norm": max_norm} if max_norm is not None else {}
        got = call(amp_step, model, batch, watched_loss, opt, scaler, dtype=dtype, name="amp_step", hints=_HINTS,
                   where=f"on {what}", **kwargs)
    return got, watch


def _steps_hint(watch, before, after):
    """Why amp_step on a normal batch did not take exactly one optimizer step: `before`, `after` the scaler's scale."""
    if watch.steps or after >= before:
        return "call scaler.step(optimizer) once per amp_step"
    hint = (f"scaler.step skipped the step: the scaled gradients held inf or NaN on this normal batch (the scale fell "
            f"{before:g} -> {after:g})")
    low = [d for d in watch.loss_dtypes if d in (torch.float16, torch.bfloat16)]
    if low:
        hint += (f". The loss was {_name(low[0])}: loss_fn ran outside autocast, on the 16-bit output, so the scaled "
                 f"backward pass starts in {_name(low[0])}" + (f", where the scale {before:g} is inf (float16 stops "
                                                                 "at 65504)" if before > 65504 else "") +
                 ". Compute the loss inside the same `with torch.autocast(...)` block as the output (autocast "
                 "computes cross_entropy in float32)")
    return hint


def _expect_autocast(watch, device, dtype, what, float32_hint=None, other_hint=None):
    seen = watch.dtypes[-1] if watch.dtypes else None
    expect(seen == dtype, f"the dtype of the model's first Linear output in amp_step ({what}, on {device.type})",
           f"{_name(dtype)} (autocast({device.type!r}, dtype={_name(dtype)}))",
           "no forward pass" if seen is None else _name(seen),
           (float32_hint or f"autocast for another device type does nothing here: use torch.autocast(inputs.device.type, "
            "dtype=dtype), the device of the batch, and the dtype amp_step is given") if seen == torch.float32 else
           (other_hint or "use the dtype amp_step is given") if seen is not None else
           "run the model on the batch inside autocast")


def _rounded_to(start, now, rel=0.0):
    """The 16-bit dtype (float16 or bfloat16) whose rounding of the float32 tensors `start` gives `now` (within `rel`
    of the largest weight), or None."""
    for half in (torch.float16, torch.bfloat16):
        if all(((n - s.to(half).to(s.dtype)).abs().max() <= rel * s.abs().max()).item() for s, n in zip(start, now)):
            return half
    return None


def _expect_defaults(amp_step, seed, device):
    """Called as a training loop calls it, without dtype (the signature's default, float16), step after step: the
    grad mode is left as it was found (on, then off inside a caller's no_grad block)."""
    model, batch, kind, _ = _setup(seed + 2000, device)
    opt = _optimizer(kind, model.parameters(), lr=0.05)
    types = sorted({"cpu", device.type})
    defaults = {t: torch.get_autocast_dtype(t) for t in types}  # what torch.autocast(t) uses without a dtype
    with _Watch(model, opt) as watch:
        outer = torch.is_grad_enabled()
        try:
            torch.set_grad_enabled(True)
            call(amp_step, model, batch, _cross_entropy, opt, _scaler(device), name="amp_step", hints=_HINTS,
                 restore_grad=False, where="called without dtype (its default, float16)")
            after = torch.is_grad_enabled()
            left = {t: torch.get_autocast_dtype(t) for t in types}
        finally:
            torch.set_grad_enabled(outer)
            for t, d in defaults.items():
                torch.set_autocast_dtype(t, d)
    changed = [t for t in types if left[t] != defaults[t]]
    expect(not changed, "the default dtype of torch.autocast(device_type) when amp_step returns (torch.get_autocast_"
           "dtype, a process-wide setting)", ", ".join(f"{t}: {_name(defaults[t])}, as it was" for t in changed),
           ", ".join(f"{t}: {_name(left[t])}" for t in changed),
           "pass the dtype to the autocast block, torch.autocast(inputs.device.type, dtype=dtype): "
           "torch.set_autocast_dtype changes it for every later autocast of the caller's")
    seen = watch.dtypes[-1] if watch.dtypes else None
    expect(seen == torch.float16, f"the dtype of the model's first Linear output in amp_step called without dtype (on "
           f"{device.type})", "float16, the signature's default (dtype=torch.float16)",
           "no forward pass" if seen is None else _name(seen), "keep the signature as given: dtype=torch.float16")
    expect(after, "autograd when amp_step returns (torch.is_grad_enabled(), called with it on)", "on, as it was",
           "off: amp_step switched autograd off for the whole process and left it so, so the next step's forward "
           "builds no graph and its backward() raises",
           "leave the grad mode as you found it: `with torch.no_grad():` around a part that needs none switches it "
           "back when the block ends (torch.set_grad_enabled(False) on its own line does not)")
    try:
        torch.set_grad_enabled(False)
        with contextlib.suppress(CheckFailed):  # whether it runs there is its own business
            call(amp_step, model, batch, _cross_entropy, opt, _scaler(device), name="amp_step", hints=_HINTS,
                 restore_grad=False, where="called inside torch.no_grad()")
        after = torch.is_grad_enabled()
    finally:
        torch.set_grad_enabled(outer)
    expect(not after, "autograd when amp_step returns, called inside torch.no_grad() (a caller with autograd off)",
           "still off, as the caller had it", "on: amp_step switched autograd on for the caller and left it so",
           "switch autograd on only inside a block: `with torch.enable_grad():` puts back what it found when it ends")


def _expect_master_weights(amp_step, seed, device):
    """One plain SGD step (a normal batch, a loss scale that cannot overflow): the float32 weights after it are the
    weights before minus lr x the gradients the optimizer stepped with, to float32's precision: float32 master weights,
    never rounded to 16 bits on the way (model.to(float16) then .float() rounds them, and loses small updates)."""
    model, batch, _, dtype = _setup(seed + 1000, device)
    lr = 1e-3
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    start = [p.detach().clone() for p in model.parameters()]
    what = f"one plain SGD step (lr={lr:g}, {_name(dtype)}, loss scale 1024)"
    _, watch = _run(amp_step, model, batch, _cross_entropy, opt, _scaler(device, init_scale=2.0 ** 10), what,
                    dtype=dtype)
    if len(watch.steps) != 1 or any(g is None for g in watch.steps[0]) or \
            any(p.dtype != torch.float32 for p in model.parameters()):
        return  # no single step to measure: the other cases of this check say why
    now = [p.detach().clone() for p in model.parameters()]
    want = [s.add(g.to(s.dtype), alpha=-lr) for s, g in zip(start, watch.steps[0])]
    gap = max(((n - w).abs().max() / s.abs().max().clamp_min(1e-30)).item() for n, w, s in zip(now, want, start))
    if gap <= 1e-5:
        return
    # the update itself: what the weights would be had the step started from the 16-bit rounding of the weights
    rounded = _rounded_to(start, [n.add(g.to(n.dtype), alpha=lr) for n, g in zip(now, watch.steps[0])], rel=1e-5)
    tol = [(n - w).abs().max().item() for n, w in zip(now, want)]
    expect(False, f"the weights after {what}", "the weights before minus lr x the gradients the optimizer stepped "
           "with, to float32's precision (float32 master weights)",
           f"up to {gap:.3g} apart (relative to the largest weight; the largest gap {max(tol):.3g})" +
           (f": the step started from the weights rounded to {_name(rounded)}" if rounded is not None else ""),
           f"the float32 weights were rounded to {_name(rounded)} inside amp_step (model.to({_name(rounded)}) or "
           ".half() and then back with .float()?): every step then loses the weights' low bits, and updates below "
           f"{_name(rounded)}'s spacing vanish (section 1: 1 + 1e-3 is 1.0 in bfloat16). Keep the model float32: "
           "autocast casts a 16-bit copy for each matrix product" if rounded is not None else "")


# ---- amp_step: the checks -------------------------------------------------------------------------------------

@check("amp_trains")
def check_amp_trains(amp_step, seed=0, steps=20):
    """20 amp_steps compute under autocast, keep float32 weights, return the loss as a float, and the loss falls; with a
    disabled scaler (GradScaler(enabled=False)) amp_step still computes under autocast, and steps; called without
    dtype it computes in float16, and it leaves the grad mode and autocast's default dtype as it found them."""
    seen = []
    for device in _devices():
        model, batch, kind, dtype = _setup(seed, device)
        opt = _optimizer(kind, model.parameters(), lr=0.2)
        scaler = _scaler(device)
        ref_loss = _fp32_grads(model, batch, _cross_entropy)[1]
        losses, stepped = [], 0
        for i in range(steps):
            before = scaler.get_scale()
            want = _amp_loss(model, batch, _cross_entropy, dtype)
            got, watch = _run(amp_step, model, batch, _cross_entropy, opt, scaler, f"step {i}", dtype=dtype)
            if i == 0:
                _expect_autocast(watch, device, dtype, "step 0")
                expect(all(watch.loss_autocast), "where amp_step called loss_fn (step 0)",
                       f"inside torch.autocast({device.type!r}, ...), with the model's output (3b: the output **and** "
                       "the loss inside autocast; or, on purpose, in float32 on output.float())",
                       "outside the autocast block, on the 16-bit output" if watch.loss_autocast else "never called",
                       "compute loss = loss_fn(model(inputs), targets) inside the `with torch.autocast(...)` block: "
                       "autocast runs each op of the loss in the dtype it needs (cross_entropy in float32)"
                       if watch.loss_autocast else "use the loss_fn amp_step is given")
                value = python_float(got, "amp_step's return value")
                expect(abs(value - ref_loss) <= 0.02 * abs(ref_loss) + 1e-3, "amp_step's return value at step 0",
                       f"the loss, about {ref_loss:.4g} (its float32 value)", f"{value:.6g}",
                       f"that is {value / ref_loss:.4g}x the loss: return loss.item(), not the scaled loss"
                       if ref_loss and abs(value / ref_loss - before) < 0.01 * before else "")
            value = python_float(got, f"amp_step's return value at step {i}")
            _expect_loss(value, want, dtype, f"amp_step's return value at step {i} ({_name(dtype)}, on {device.type})")
            losses.append(value)
            stepped += len(watch.steps)
            bad = [n for n, p in model.named_parameters() if p.dtype != torch.float32]
            expect(not bad, f"the dtype of the weights after amp_step (step {i})", "float32 (autocast casts inside the "
                   "forward pass; the weights, the gradients and the update stay float32)",
                   f"{', '.join(f'{n}: {_name(dict(model.named_parameters())[n].dtype)}' for n in bad[:2])}",
                   "never .half() or .to(bfloat16) the model: a 16-bit weight loses small updates (1 + 1e-3 is 1.0 "
                   "in bfloat16), and the optimizer must step float32 master weights")
            if scaler.get_scale() >= before:  # no overflow at this step: the optimizer must have stepped
                # (how many times, and with which gradients, is check_grads_match_fp32's)
                expect(watch.steps, f"optimizer steps in one amp_step (step {i}, no overflow)",
                       "one, through scaler.step(optimizer)", "none", "call scaler.step(optimizer) once per amp_step")
        finite = all(torch.isfinite(p).all() for p in model.parameters())
        expect(finite, "the weights after 20 amp_steps", "finite", "NaN or inf in the weights",
               "step through scaler.step(optimizer): it skips a step whose gradients hold inf or NaN")
        first, last = losses[0], sum(losses[-3:]) / 3
        expect(last < 0.7 * first, f"the loss over {steps} amp_steps ({kind}, {_name(dtype)}, on {device.type})",
               f"to fall below 70% of its start {first:.4g}", f"{last:.4g} at the end")
        # A small loss: the value returned is that loss, not a rounding of it.
        m, batch, kind, _ = _setup(seed, device)  # untrained: a loss of about 1, x 1e-6
        what = "a loss x 1e-6"
        small = _amp_loss(m, batch, _tiny(1e-6), dtype)
        got, _ = _run(amp_step, m, batch, _tiny(1e-6), _optimizer(kind, m.parameters(), lr=0.2), _scaler(device), what,
                      dtype=dtype)
        _expect_loss(python_float(got, f"amp_step's return value on {what}"), small, dtype,
                     f"amp_step's return value on {what} ({_name(dtype)}, on {device.type})")
        # A disabled scaler (GradScaler(enabled=False), as bfloat16 allows): amp_step still computes under autocast,
        # in the dtype it is given, float16 included (a disabled scaler turns the loss scaling off, nothing else).
        for half in (torch.bfloat16, torch.float16)[::1 if seed % 2 == 0 else -1]:
            model, batch, kind, _ = _setup(seed, device)
            opt = _optimizer(kind, model.parameters(), lr=0.2)
            what = f"a disabled scaler, GradScaler(enabled=False), dtype={_name(half)}"
            _, watch = _run(amp_step, model, batch, _cross_entropy, opt, _scaler(device, enabled=False), what,
                            dtype=half)
            seen_dtype = watch.dtypes[-1] if watch.dtypes else None
            _expect_autocast(watch, device, half, what,
                             "autocast ran in dtype with an enabled scaler, but not with this disabled one: compute "
                             "under torch.autocast(inputs.device.type, dtype=dtype) whatever the scaler (no "
                             "enabled=scaler.is_enabled()); a disabled scaler only turns the loss scaling off",
                             f"amp_step was given dtype={_name(half)} with a disabled scaler and computed in "
                             f"{_name(seen_dtype)}: use the dtype amp_step is given, whatever the scaler (a disabled "
                             "scaler only turns the loss scaling off; it does not choose the dtype)")
            expect(watch.steps, f"optimizer steps in amp_step with {what}", "one "
                   "(scaler.step(optimizer) calls optimizer.step() when the scaler is disabled)", "none",
                   "call scaler.step(optimizer) once per amp_step")
            bad = [n for n, p in model.named_parameters() if p.dtype != torch.float32]
            expect(not bad, f"the dtype of the weights after amp_step with {what}", "float32, as with an enabled "
                   "scaler (a disabled scaler turns the loss scaling off, nothing else)",
                   f"{', '.join(f'{n}: {_name(dict(model.named_parameters())[n].dtype)}' for n in bad[:2])}",
                   "never .half() or .to(bfloat16) the model: the optimizer must step float32 master weights")
        _expect_master_weights(amp_step, seed, device)
        _expect_defaults(amp_step, seed, device)
        _expect_token_inputs(amp_step, seed, device, dtype)
        _expect_stream_left(amp_step, seed, device, dtype)
        seen.append(f"{device.type}: {first:.3g} -> {last:.3g} in {_name(dtype)}, {stepped} steps")
    return (f"autocast on the batch's device (also with a disabled scaler), float32 weights, loss returned as a float "
            f"and falling ({'; '.join(seen)})")


def _expect_stream_left(amp_step, seed, device, dtype):
    """amp_step called from two different states of the global random stream leaves two different states: it does not
    reseed it (every step of a model with Dropout would draw the same masks)."""
    after = []
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        for start in (seed + 401, seed + 402):
            model, batch, kind, _ = _setup(seed, device)
            torch.manual_seed(start)
            _run(amp_step, model, batch, _cross_entropy, _optimizer(kind, model.parameters(), lr=0.1),
                 _scaler(device), f"after torch.manual_seed({start})", dtype=dtype)
            after.append(torch.get_rng_state())
    expect(not torch.equal(*after), f"the global random stream after amp_step, called after torch.manual_seed"
           f"({seed + 401}) and after torch.manual_seed({seed + 402})", "two different states: the step leaves the "
           "caller's stream as it found it, or moved on by its own draws", "the same state both times: amp_step "
           "reseeds the global random stream, so every step of a model with Dropout draws the same masks",
           "do not call torch.manual_seed inside a training step: seeding is the script's, once, at the start.")


def _expect_token_inputs(amp_step, seed, device, dtype):
    """A batch of token ids (integers) into a model that starts with nn.Embedding: its Linear layers still compute
    under autocast (the inputs' dtype does not decide; their device does)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Embedding(20, 8), nn.Flatten(), nn.Linear(8 * 6, 16), nn.Tanh(),
                              nn.Linear(16, 3)).to(device)
        g = torch.Generator().manual_seed(seed + 1)
        batch = (torch.randint(0, 20, (16, 6), generator=g).to(device), torch.randint(0, 3, (16,), generator=g).to(device))
    what = "token ids (int64 inputs) into a model that starts with nn.Embedding"
    _, watch = _run(amp_step, model, batch, _cross_entropy, _optimizer("sgd", model.parameters(), lr=0.1),
                    _scaler(device, init_scale=2.0 ** 8), what, dtype=dtype)
    _expect_autocast(watch, device, dtype, what,
                     "autocast ran for float inputs but not for these integer ones: the model's layers compute in "
                     "floats whatever the inputs are, so enter torch.autocast(inputs.device.type, dtype=dtype) always "
                     "(no enabled=inputs.is_floating_point())")


def _number(value, what):
    """The loss amp_step returned, as a number: a 0-d tensor too (a Python float is check_amp_trains's to ask)."""
    if torch.is_tensor(value) and value.numel() == 1:
        return float(value.detach())
    return python_float(value, what)


@check("overflow_skipped")
def check_overflow_skipped(amp_step, seed=0):
    """On a batch whose float16 forward pass overflows, amp_step skips the step (weights untouched) and the scale halves;
    the next normal batch steps again; a bfloat16 step with NaN gradients is skipped too."""
    seen = []
    for device in _devices():
        model, (x, y), kind, _ = _setup(seed, device, dtype=torch.float16)
        opt = _optimizer(kind, model.parameters(), lr=0.05)
        scaler = _scaler(device, init_scale=2.0 ** (10 + seed % 7))
        big = x * 1e5  # activations above float16's 65504
        with torch.no_grad(), torch.autocast(device.type, dtype=torch.float16):
            premise = model(big)
        if torch.isfinite(premise).all():
            raise RuntimeError(f"check_overflow_skipped's overflow batch does not overflow on torch {torch.__version__}")
        start = [p.detach().clone() for p in model.parameters()]
        before = scaler.get_scale()
        clip = 1.0 if seed else None  # hidden: with clipping on, the overflowing step is still skipped, not an error
        what = "a batch whose float16 activations overflow (inputs x 1e5)" + (f", max_norm={clip:g}" if clip else "")
        _, watch = _run(amp_step, model, (big, y), _cross_entropy, opt, scaler, what, max_norm=clip,
                        dtype=torch.float16)
        _expect_autocast(watch, device, torch.float16, what)
        moved = [n for (n, p), s in zip(model.named_parameters(), start) if not torch.equal(p.detach(), s)]
        now = [p.detach().float() for p in model.parameters()]
        rounded = None if watch.steps or any(not torch.isfinite(p).all() for p in now) else _rounded_to(start, now)
        expect(not moved, f"the weights after amp_step on {what}", "exactly as they were (the step skipped)",
               f"{', '.join(moved[:3])} changed" + (" (to NaN or inf)" if any(not torch.isfinite(p).all()
                                                                       for p in model.parameters()) else "") +
               ("" if watch.steps else ", with no optimizer step") +
               (f": they are the weights rounded to {_name(rounded)}" if rounded is not None else ""),
               "step through scaler.step(optimizer), never optimizer.step() directly: scaler.step skips the step "
               "when a gradient holds inf or NaN" if watch.steps else
               f"amp_step rounded the float32 weights to {_name(rounded)} (model.to({_name(rounded)}) or .half(), "
               "then back with .float()?): keep the model float32, autocast casts a 16-bit copy for each matrix "
               "product" if rounded is not None else "")
        expect(not watch.steps, f"optimizer.step() calls on {what}", "none (scaler.step skips it)", len(watch.steps),
               "step through scaler.step(optimizer), never optimizer.step() directly")
        after = scaler.get_scale()
        expect(after == before / 2, f"the scaler's scale after {what}", f"halved, {before:g} -> {before / 2:g}",
               f"{before:g} -> {after:g}",
               "call scaler.update() after scaler.step(optimizer), every step: it halves the scale after an "
               "overflow (and grows it after a run of good steps)" if after == before else "")
        kept = [p.detach().clone() for p in model.parameters()]
        _, watch = _run(amp_step, model, (x, y), _cross_entropy, opt, scaler, "the next, normal batch",
                        dtype=torch.float16)
        moved = any(not torch.equal(p.detach(), s) for p, s in zip(model.parameters(), kept))
        left = any(p.grad is not None and not torch.isfinite(p.grad).all() for p in model.parameters())
        expect(len(watch.steps) == 1 and moved, "after the skipped step, amp_step on a normal batch",
               "one optimizer step that moves the weights", f"{len(watch.steps)} optimizer steps, weights "
               f"{'moved' if moved else 'unchanged'}",
               "the skipped step's inf/NaN gradients were still in p.grad, so this step overflowed too: zero the "
               "gradients at the start of every step (optimizer.zero_grad())" if not watch.steps and left else "")
        huge = _scaler(device, init_scale=2.0 ** 40)  # a normal batch, a finite loss, its scaled gradients overflow
        with torch.no_grad(), torch.autocast(device.type, dtype=torch.float16):
            want = float(_cross_entropy(model(x), y))
        what = "a normal batch with a loss scale of 2**40 (its loss finite, its scaled float16 gradients overflow)"
        start = [p.detach().clone() for p in model.parameters()]
        got, watch = _run(amp_step, model, (x, y), _cross_entropy, opt, huge, what, dtype=torch.float16)
        # (whether the step's gradients overflowed: a step that never scaled them, check_amp_trains's, has none)
        bad = [n for (n, _), g in zip(model.named_parameters(), watch.steps[0] if watch.steps else [])
               if g is not None and not torch.isfinite(g).all()]
        broken = any(not torch.isfinite(p).all() for p in model.parameters())
        moved = [n for (n, p), s in zip(model.named_parameters(), start) if not torch.equal(p.detach(), s)]
        expect(not (moved and (bad or broken)), f"the weights after amp_step on {what}", "exactly as they were (the "
               "step skipped: a gradient holds inf)", f"{', '.join(moved[:3])} changed" + (
                   " (to NaN or inf)" if broken else "") + (f", by an optimizer step with inf in the gradients of "
                                                            f"{', '.join(bad[:3])}" if bad else ""),
               "a finite loss does not mean finite gradients: the backward pass overflows on its own. Always step "
               "through scaler.step(optimizer), which looks at the gradients, never optimizer.step() directly"
               if watch.steps else "")
        got = _number(got, f"amp_step's return value on {what}")
        control = _number(_run(amp_step, model, (x, y), _cross_entropy, opt, _scaler(device), "the same batch "
                               "with the default scale", dtype=torch.float16)[0], "amp_step's return value")
        right = abs(control - want) <= 1e-3 * max(1.0, abs(want))  # a wrong loss on every step is check_amp_trains's
        expect(not right or abs(got - want) <= 1e-3 * max(1.0, abs(want)), f"the loss amp_step returned on {what}",
               f"{want:.5g}, the batch's loss (unscaled, whether the step was skipped or not)", f"{got:.5g}",
               "return the loss itself (loss.item()), not the scaled loss divided by the scale: scaler.update() "
               "changes the scale after a skipped step" if abs(got - 2 * want) <= 1e-3 * max(1.0, abs(want)) else "")
        # bfloat16 with an enabled scaler (as section 5 passes it): bfloat16's range rarely overflows, but a batch
        # with a NaN in it gives NaN gradients, and the step must be skipped all the same (scaler.step does it)
        model, (x, y), kind, _ = _setup(seed, device, dtype=torch.bfloat16)
        bad = x.clone()
        bad[0, 0] = float("nan")
        start = [p.detach().clone() for p in model.parameters()]
        what = "a batch with a NaN in it (bfloat16, an enabled scaler)"
        _, watch = _run(amp_step, model, (bad, y), _cross_entropy, _optimizer(kind, model.parameters(), lr=0.05),
                        _scaler(device), what, dtype=torch.bfloat16)
        moved = [n for (n, p), s in zip(model.named_parameters(), start) if not torch.equal(p.detach(), s)]
        expect(not moved, f"the weights after amp_step on {what}", "exactly as they were (scaler.step skips a step "
               "whose gradients hold NaN or inf, whatever the dtype)", f"{', '.join(moved[:3])} changed" + (
                   " (to NaN)" if any(not torch.isfinite(p).all() for p in model.parameters()) else ""),
               "step through the scaler amp_step is given, whatever the dtype: scaler.step(optimizer), then "
               "scaler.update() (bfloat16 needs no loss scaling, but an enabled scaler still skips a non-finite step, "
               "and a disabled one just calls optimizer.step())" if watch.steps else "")
    return f"overflowing step skipped with the weights untouched, the scale halved, the next step taken ({'; '.join(seen)})"


def _amp_loss(model, batch, loss_fn, dtype):
    """The loss of `model` on `batch` as amp_step computes it (under autocast, cross_entropy in float32): a float."""
    with torch.no_grad(), torch.autocast(batch[0].device.type, dtype=dtype):
        return loss_fn(model(batch[0]), batch[1]).item()


def _expect_loss(value, want, dtype, what):
    """`value` is the loss `want` as computed (float32 under autocast), not a 16-bit rounding of it nor scaled."""
    if abs(value - want) <= 1e-4 * abs(want) + 1e-12:
        return
    rounded = [_name(h) for h in (torch.float16, torch.bfloat16)
               if abs(value - torch.tensor(want).to(h).item()) <= 1e-6 * abs(want)]
    expect(False, what, f"the loss {want:.7g} (float32, computed under autocast)", f"{value:.7g}",
           f"that is the loss rounded to {rounded[0]}: return loss.item() of the float32 loss autocast computed, "
           "converting nothing (a 16-bit loss also loses the small values of a training curve)" if rounded else
           "return loss.item() as it is (not rounded, not scaled)")


def _tiny(factor):
    def loss(output, target):
        """A cross-entropy multiplied by a tiny factor: its float16 gradients underflow without a loss scale."""
        return nn.functional.cross_entropy(output, target) * factor
    return loss


@check("grads_match_fp32")
def check_grads_match_fp32(amp_step, seed=0):
    """The gradients the optimizer steps with equal the float32 gradients (unscaled, no stale ones), also for a tiny loss
    whose float16 gradients underflow to zero without a working scaler, and with a disabled scaler."""
    seen = []
    for device in _devices():
        model, batch, kind, dtype = _setup(seed, device)
        tol16 = 1e-2 if dtype == torch.float16 else 2e-2
        cases = [("a normal batch", _cross_entropy, dtype, 1e3, True),
                 ("a loss x 1e-7 (float16 gradients this small underflow to 0 unless the loss is scaled)",
                  _tiny(1e-7), torch.float16, None, True),
                 # scale 1: a gradient added on top of the scaled one (a second, unscaled backward) is not 1/65536
                 # of it any more, but all of it
                 ("a disabled scaler, GradScaler(enabled=False)", _cross_entropy, torch.bfloat16, 1e3, False)]
        for what, loss_fn, half, stale, enabled in cases:
            m = copy.deepcopy(model)
            opt = _optimizer(kind, m.parameters(), lr=0.01)
            want, _ = _fp32_grads(m, batch, loss_fn)
            if stale is not None:
                for p in m.parameters():
                    p.grad = torch.full_like(p, stale)
            scaler = _scaler(device) if enabled else _scaler(device, enabled=False)
            tol = tol16 if enabled else 2e-2  # bfloat16
            scale = scaler.get_scale()
            got, watch = _run(amp_step, m, batch, loss_fn, opt, scaler, f"{what}, {_name(half)}", dtype=half)
            if not enabled and not watch.steps:  # no step at all with a disabled scaler is check_amp_trains's:
                # the gradients left in p.grad are read
                watch.steps.append([None if p.grad is None else p.grad.detach().clone() for p in m.parameters()])
            expect(len(watch.steps) == 1, f"optimizer steps in amp_step on {what}", "exactly one", len(watch.steps),
                   _steps_hint(watch, scale, scaler.get_scale()))

            grads = watch.steps[0]
            err = _rel(grads, want, list(m.parameters()))
            zeros, zeros32 = zero_fraction(grads), zero_fraction(want)
            ratio = flat(grads, list(m.parameters())).norm().item() / max(flat(want).norm().item(), 1e-30)
            if zeros > zeros32 + 0.2:
                hint = (f"{zeros:.0%} of the gradients are exactly 0 (float32: {zeros32:.0%}): they underflowed in "
                        "float16. Backpropagate the scaled loss, scaler.scale(loss).backward(), and step with "
                        "scaler.step(optimizer)")
            elif ratio > 100:
                hint = (f"the gradients are {ratio:.3g}x too large: still scaled. Step with scaler.step(optimizer) "
                        "(it unscales first), not optimizer.step()")
            elif abs(ratio - 2) < 0.05 and _rel(grads, [2 * w for w in want], list(m.parameters())) < tol:
                hint = ("the gradients are twice the float32 ones: two backward passes added up in p.grad (a plain "
                        "loss.backward() besides scaler.scale(loss).backward()): backpropagate once, the scaled loss")
            elif stale is not None and err > tol and _rel(grads, [w + stale / scale for w in want], list(m.parameters())) < 0.1:
                hint = ("the gradients left in p.grad before the step were added to the new ones: call "
                        "optimizer.zero_grad() first")
            else:
                hint = ""
            expect(err <= tol, f"the gradients optimizer.step() used on {what} ({_name(half)}, on {device.type})",
                   f"the float32 gradients within {tol:g} (relative)", f"a relative error of {err:.3g}", hint)
            seen.append(f"{err:.1e}")
    return f"gradients at the step equal float32's (relative errors {', '.join(seen)}), the tiny loss included"


@check("clip_unscaled")
def check_clip_unscaled(amp_step, seed=0):
    """With max_norm, the optimizer steps with the float32 gradients clipped to max_norm (clipped after unscale_);
    with a max_norm above the gradient norm, with the gradients unchanged."""
    seen = []
    for device in _devices():
        model, batch, kind, dtype = _setup(seed, device)
        tol = 1e-2 if dtype == torch.float16 else 2e-2
        want, _ = _fp32_grads(model, batch, _cross_entropy)
        norm = flat(want).norm().item()
        # (max_norm, loss factor, enabled scaler): a float max_norm below the norm and one above it; an int max_norm
        # (1, below the norm of a loss made large enough; `max_norm is not None`, not isinstance(max_norm, float));
        # a disabled scaler (bfloat16 needs none): clipping still happens, unscale_ then does nothing
        factor = float(math.ceil(3.0 / norm)) if norm < 3.0 else 1.0
        cases = [(round(norm * (0.2 + 0.1 * (seed % 3)), 4), 1.0, True), (round(norm * 3, 4), 1.0, True),
                 (1, factor, True), (round(norm * 0.5, 4), 1.0, False)]
        cases.append((round(norm * 0.004, 6), 1.0, True))  # a norm 250x max_norm: clipped as any other, a step
        if seed:
            cases.append((0.0, 1.0, True))  # hidden: a max_norm given, all gradients clipped to nothing (not `if max_norm:`)
        for max_norm, k, enabled in cases:
            m = copy.deepcopy(model)
            # hidden: two parameter groups (weights, biases): the total norm is the model's, not a group's
            opt = _optimizer(kind, param_groups(m.parameters()) if seed else m.parameters(), lr=0.01)
            loss_fn = _cross_entropy if k == 1.0 else _tiny(k)
            half = dtype if enabled else torch.bfloat16
            norm_k = norm * k
            what = (f"max_norm={max_norm!r}" + (" (an int)" if isinstance(max_norm, int) else "") +
                    f" (the float32 gradient norm is {norm_k:.4g}" + (f", the loss x {k:g}" if k != 1.0 else "") + ")" +
                    ("" if enabled else ", a disabled scaler (GradScaler(enabled=False)), bfloat16"))
            # a scale of 2**8 (not the default 2**16): a step whose scaled loss overflows float16 is check_amp_trains's
            scaler = _scaler(device, **({"init_scale": 2.0 ** 8} if enabled else {"enabled": False}))
            scale = scaler.get_scale()
            _, watch = _run(amp_step, m, batch, loss_fn, opt, scaler, what, max_norm=max_norm, dtype=half)
            # (one step, not two: check_grads_match_fp32's; each step's gradients: this check's; no step at all with
            # a disabled scaler is check_amp_trains's: then the gradients left in p.grad are read)
            if not enabled and not watch.steps:
                watch.steps.append([None if p.grad is None else p.grad.detach().clone() for p in m.parameters()])
            expect(watch.steps, f"optimizer steps in amp_step with {what}", "one", "none",
                   _steps_hint(watch, scale, scaler.get_scale()))
            grads = max(watch.steps, key=lambda g: flat(g, list(m.parameters())).norm().item())
            got = flat(grads, list(m.parameters())).norm().item()
            if max_norm == 0:
                expect(got <= 1e-12 * norm, f"the gradients optimizer.step() used with {what}",
                       "norm 0: every gradient clipped to zero (max_norm=0.0 is a max_norm, not None)",
                       f"norm {got:.4g}", "test `max_norm is not None`, not `if max_norm:`: 0.0 is falsy"
                       if got > 0.5 * norm else "")
                continue
            clipped = min(1.0, max_norm / norm_k)
            expected = [w * k * clipped for w in want]
            err = _rel(grads, expected, list(m.parameters()))
            tol_k = tol if enabled else 2e-2
            unclipped = _rel(grads, [w * k for w in want], list(m.parameters())) <= tol_k
            if got == 0:
                hint = ("the gradients at the step are all zero: clip them to max_norm whatever their norm (a large "
                        "norm is what clipping is for: the step still happens, with norm max_norm)")
            elif got < 0.01 * min(norm_k, max_norm):
                hint = (f"the norm at the step is {min(norm_k, max_norm) / max(got, 1e-30):.3g}x too small: the "
                        "gradients were clipped while still scaled, then unscaled. Call scaler.unscale_(optimizer) "
                        "before clip_grad_norm_")
            elif got > max_norm * (1 + tol_k) and unclipped and isinstance(max_norm, int):
                hint = ("the gradients reached optimizer.step() unclipped with this int max_norm: clip whenever "
                        "max_norm is not None (an int is a max_norm too; no isinstance(max_norm, float))")
            elif got > max_norm * (1 + tol_k) and unclipped and not enabled:
                hint = ("the gradients reached optimizer.step() unclipped with this disabled scaler: clip whenever "
                        "max_norm is not None, whatever the scaler (scaler.unscale_ does nothing when it is disabled)")
            elif got > max_norm * (1 + tol_k):
                hint = ("the gradients reached optimizer.step() unclipped: clip them (after scaler.unscale_(optimizer)) "
                        "before scaler.step(optimizer)" if unclipped else "")
            else:
                hint = ""
            expect(err <= tol_k and got <= max_norm * (1 + tol_k), f"the gradients optimizer.step() used with {what}",
                   f"norm {min(norm_k, max_norm):.4g}: the float32 gradients" + (" clipped to max_norm" if clipped < 1
                                                                                 else ", unchanged"),
                   f"norm {got:.4g}, relative error {err:.3g}", hint)
        seen.append(f"{device.type}: {norm:.3g} clipped to {round(norm * (0.2 + 0.1 * (seed % 3)), 4):g}")
    return f"clipping acts on the unscaled gradients ({'; '.join(seen)}); a max_norm above the norm changes nothing"
