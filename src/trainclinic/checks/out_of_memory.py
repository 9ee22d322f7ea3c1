"""Checks for lesson 03, CUDA out of memory: accumulate_step (gradient accumulation over micro-batches).

accumulate_step(model, batch, loss_fn, optimizer, micro_batches) must take ONE optimizer step whose gradients
equal the full batch's, while holding only one micro-batch's activations at a time. The gradients are read at
the moment optimizer.step() runs (a recording SGD); the peak memory is measured with the live-bytes tracker on
the CPU, deterministic on every machine, against a budget that the full batch breaks.
"""
import copy

import torch
from torch import nn

from .. import data, models
from ..device import pick_device
from ..memory import LiveBytes, fmt
from . import CheckFailed, call, check, close, expect

__all__ = ["check_accumulated_grads", "check_one_step", "check_peak_memory", "RecordingSGD"]


class RecordingSGD(torch.optim.SGD):
    """SGD that counts its steps and records the gradients it was given (clones, or only their presence)."""

    def __init__(self, params, lr, record=True):
        super().__init__(params, lr=lr)
        self.steps = 0
        self.record = record
        self.grads = []  # per step: [grad clone or None per parameter]
        self.complete = []  # per step: did every parameter have a gradient?

    def step(self, closure=None):
        self.steps += 1
        params = [p for group in self.param_groups for p in group["params"]]
        self.complete.append(all(p.grad is not None for p in params))
        if self.record:
            self.grads.append([None if p.grad is None else p.grad.detach().clone() for p in params])
        return super().step(closure)


def _devices():
    present = pick_device()
    return [present] if present.type == "cpu" else [present, torch.device("cpu")]


def _setup(seed, batch_size, device, inputs=8, hidden=32, classes=3, depth=2):
    model = models.mlp(inputs=inputs, hidden=hidden, outputs=classes, depth=depth, seed=seed).to(device)
    x, y = data.blobs(n=batch_size, features=inputs, classes=classes, seed=seed + 1).tensors
    return model, (x.to(device), y.to(device))


def _grads(model, x, y):
    """Gradients (and loss) of the mean cross-entropy on (x, y), computed on a copy of `model`."""
    ref = copy.deepcopy(model)
    ref.zero_grad(set_to_none=True)
    loss = nn.CrossEntropyLoss()(ref(x), y)
    loss.backward()
    return [p.grad.detach().clone() for p in ref.parameters()], loss.item()


def _stale(model):
    for p in model.parameters():  # stale gradients, as after a previous step
        p.grad = torch.full_like(p, 0.5)


def _flat(grads):
    return torch.cat([g.reshape(-1) for g in grads]).to("cpu", torch.float64)


def _matches(got, want):
    return all(close(a, b, rtol=1e-4, atol=1e-6) for a, b in zip(got, want))


def _diagnose(got, want, model, batch, micro_batches):
    """A hint naming the classic mistake the observed gradients match, or a general one."""
    g, w = _flat(got), _flat(want)
    ratio = float(g @ w / (w @ w))
    if _matches(got, [t * micro_batches for t in want]):
        return (f"they are {ratio:.2f} times the full-batch gradients",
                f"divide each micro-batch loss by micro_batches ({micro_batches}) before backward(): the loss is a "
                "mean over its micro-batch, and backward() adds the gradients of every micro-batch.")
    x, y = batch
    last, _ = _grads(model, x.chunk(micro_batches)[-1], y.chunk(micro_batches)[-1])
    if _matches(got, last) or _matches(got, [t / micro_batches for t in last]):
        return ("they are the gradients of the last micro-batch only",
                "call optimizer.zero_grad() once, before the loop over micro-batches: zero_grad() inside the loop "
                "throws away what the earlier micro-batches accumulated.")
    stale = [torch.full_like(t, 0.5) for t in want]
    if _matches(got, [a + b for a, b in zip(want, stale)]):
        return ("they still contain the previous step's gradients",
                "call optimizer.zero_grad() once, before the loop: backward() adds to whatever .grad held.")
    diff = max((a - b).abs().max().item() for a, b in zip(got, want))
    return (f"a max difference of {diff:.3g} (ratio {ratio:.3g})",
            "zero_grad() once before the loop, backward() on each micro-batch's loss / micro_batches, step() once after.")


@check("accumulated_grads")
def check_accumulated_grads(accumulate_step, seed=0, batch_size=32, micro_batches=4):
    """The gradients at optimizer.step() equal the full batch's (allclose), on the present device and the CPU."""
    for device in _devices():
        model, batch = _setup(seed, batch_size, device)
        want, _ = _grads(model, *batch)
        _stale(model)
        opt = RecordingSGD(model.parameters(), lr=0.0)  # lr 0: the parameters stay where the reference was taken
        call(accumulate_step, model, batch, nn.CrossEntropyLoss(), opt, micro_batches, name="accumulate_step",
             where=f"on {device}")
        expect(opt.steps > 0, "optimizer.step() calls", "one, after the loop", "none",
               "call optimizer.step() once, after every micro-batch has been backpropagated.")
        got = opt.grads[-1]
        missing = [name for (name, _), g in zip(model.named_parameters(), got) if g is None]
        expect(not missing, "gradients at optimizer.step()", "one for every parameter", f"none for {missing}",
               "call backward() on each micro-batch's loss before optimizer.step().")
        if not _matches(got, want):
            observed, hint = _diagnose(got, want, model, batch, micro_batches)
            raise CheckFailed(
                f"the gradients at optimizer.step() on {device} (batch {batch_size}, {micro_batches} micro-batches): "
                f"expected the full-batch gradients, observed {observed}.\nHint: {hint}")
    return (f"gradients accumulated over {micro_batches} micro-batches equal the full batch's on "
            f"{', '.join(map(str, _devices()))}")


@check("one_step")
def check_one_step(accumulate_step, seed=0, batch_size=32, micro_batches=4):
    """One optimizer step per effective batch, and the full batch's mean loss returned as a float."""
    device = pick_device()
    model, _ = _setup(seed, batch_size, device)
    opt = RecordingSGD(model.parameters(), lr=0.1, record=False)
    for k in range(2):
        _, batch = _setup(seed + 10 * (k + 1), batch_size, device)
        _, want = _grads(model, *batch)
        got = call(accumulate_step, model, batch, nn.CrossEntropyLoss(), opt, micro_batches, name="accumulate_step")
        expect(opt.steps == k + 1, f"optimizer.step() calls after {k + 1} effective batch(es) of {micro_batches} "
               "micro-batches", k + 1, opt.steps,
               "step once per effective batch, after the loop: a step inside the loop is plain small-batch training "
               "(more, noisier steps), not accumulation.")
        expect(isinstance(got, float), "accumulate_step's return value", "the loss as a Python float",
               type(got).__name__, "add loss.item() of each micro-batch: keeping tensors keeps their graphs alive.")
        expect(abs(got - want) <= 1e-4 * max(1.0, abs(want)), "the returned loss",
               f"the full batch's mean loss {want:.5f}", f"{got:.5f}",
               "return the sum of the scaled micro-batch losses (each loss.item() / micro_batches).")
    return f"one optimizer.step() per effective batch of {micro_batches} micro-batches; the full-batch loss returned"


def _peak(fn, model, batch, micro_batches):
    """Peak live bytes of one accumulation step (CPU tracker), and the recording optimizer."""
    opt = RecordingSGD(model.parameters(), lr=0.1, record=False)
    _stale(model)
    with LiveBytes() as live:
        fn(model, batch, nn.CrossEntropyLoss(), opt, micro_batches)
    return live.peak, opt


def _reference(model, batch, loss_fn, optimizer, micro_batches):
    optimizer.zero_grad()
    total = 0.0
    x, y = batch
    for xb, yb in zip(x.chunk(micro_batches), y.chunk(micro_batches)):
        loss = loss_fn(model(xb), yb) / micro_batches
        loss.backward()
        total += loss.item()
    optimizer.step()
    return total


@check("peak_memory")
def check_peak_memory(accumulate_step, seed=0, batch_size=256, micro_batches=4):
    """The measured peak of one accumulation step stays under a budget that the full batch breaks."""
    cpu = torch.device("cpu")
    model, batch = _setup(seed, batch_size, cpu, inputs=16, hidden=64, classes=4, depth=6)
    full, _ = _peak(_reference, copy.deepcopy(model), batch, 1)
    ref, _ = _peak(_reference, copy.deepcopy(model), batch, micro_batches)
    budget = (full + ref) // 2
    assert full > budget > ref, "the check's own budget is inconsistent"
    learner = copy.deepcopy(model)
    peak, opt = call(_peak, accumulate_step, learner, batch, micro_batches, name="accumulate_step")
    expect(opt.steps > 0 and all(opt.complete), "the accumulation step", "gradients for every parameter, then "
           "optimizer.step()", f"{opt.steps} step(s), gradients {'complete' if all(opt.complete) else 'missing'}",
           "backward() each micro-batch, then optimizer.step().")
    expect(peak < budget, f"the peak memory of one step with {micro_batches} micro-batches (batch {batch_size})",
           f"under {fmt(budget)}, a budget the full batch breaks (full batch: {fmt(full)}; "
           f"one micro-batch at a time: {fmt(ref)})", fmt(peak),
           "run forward AND backward on one micro-batch before the next forward: its backward frees its activations. "
           "Summing the micro-batch losses and calling backward() once keeps every micro-batch's graph alive, "
           "as much memory as the full batch.")
    return (f"peak {fmt(peak)} under a budget of {fmt(budget)} that the full batch ({fmt(full)}) breaks "
            "(live tensor bytes, measured on the CPU)")
