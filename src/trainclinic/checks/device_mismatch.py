"""Checks for lesson 01, device mismatch: to_device, class_weighted_loss, train_step.

Each runs the learner's function on the present device (and on the CPU) for its results, and on a
simulated cuda:0 (FakeTensorMode) when no GPU is present, so a tensor left on the CPU is caught on any
machine.
"""
import copy

import torch
from torch import nn
from torch.nn import functional as F

from .. import data, models
from ..device import SimulatedCuda, pick_device
from . import SimulationLimit, call, check, close, expect

__all__ = ["check_to_device", "check_class_weighted_loss", "check_train_step"]


def _devices():
    """The present device, plus the CPU when the present one is an accelerator."""
    present = pick_device()
    return [present] if present.type == "cpu" else [present, torch.device("cpu")]


def _same_device(t, device):
    return t.device.type == device.type and (device.index is None or t.device.index in (None, device.index))


def _gpu_probe(run):
    """Run `run(sim)` on the simulated cuda:0 when no GPU is here; return a label for the success line."""
    if pick_device().type in ("cuda", "mps"):
        return ""  # the present-device run already used a real GPU
    try:
        with SimulatedCuda(say=False) as sim:
            run(sim)
    except SimulationLimit as limit:
        return f" (the simulated cuda:0 cannot run this code, so its device check was skipped: {limit})"
    return " and on a simulated cuda:0"


def _leaves(batch):
    """(label, value) for each item of a tuple, list or dict batch."""
    if isinstance(batch, dict):
        return [(f"batch[{k!r}]", v) for k, v in batch.items()]
    return [(f"batch[{i}]", v) for i, v in enumerate(batch)]


def _sample_batches(seed):
    x, y = data.blobs(n=6, features=4, classes=3, seed=seed).tensors
    w = torch.rand(6, generator=torch.Generator().manual_seed(seed))
    return [(x, y), [x, y, w], {"inputs": x, "labels": y, "ids": ["a", "b"], "epoch": 3}]


def _verify_moved(to_device, batch, device, real=True):
    out = call(to_device, batch, device, name="to_device")
    expect(type(out) is type(batch) or (isinstance(out, (tuple, list)) and isinstance(batch, (tuple, list))),
           "to_device's result", f"a {type(batch).__name__} like its input", type(out).__name__)
    got, want = dict(_leaves(out)), dict(_leaves(batch))
    expect(set(got) == set(want), "to_device's result", f"the same items {sorted(want)}", f"{sorted(got)}")
    for label, value in want.items():
        moved = got[label]
        if not torch.is_tensor(value):
            expect(moved == value, label, f"unchanged ({value!r}: not a tensor)", repr(moved))
            continue
        expect(torch.is_tensor(moved), label, "a tensor", type(moved).__name__)
        expect(_same_device(moved, device), f"{label} after to_device", f"on {device}", f"on {moved.device}",
               "move every tensor in the batch (inputs AND labels), not only the first one.")
        expect(moved.dtype == value.dtype and moved.shape == value.shape, label,
               f"dtype {value.dtype} and shape {tuple(value.shape)} kept", f"{moved.dtype}, {tuple(moved.shape)}")
        if real:
            expect(torch.equal(moved.cpu(), value), label, "the same values", "different values")


@check("to_device")
def check_to_device(to_device, seed=0):
    """to_device(batch, device) moves every tensor of a tuple, list or dict batch and keeps the rest."""
    batches = _sample_batches(seed)
    for device in _devices():
        for batch in batches:
            _verify_moved(to_device, batch, device)

    def probe(sim):
        for batch in batches:
            _verify_moved(to_device, batch, sim.device, real=False)

    where = _gpu_probe(probe)
    return f"tuple, list and dict batches moved to {', '.join(map(str, _devices()))}{where}; non-tensors kept"


def reference_weights(class_counts, like):
    """Balanced class weights n / (classes * count), on `like`'s device and dtype."""
    counts = torch.as_tensor(class_counts, dtype=like.dtype, device=like.device)
    return counts.sum() / (len(class_counts) * counts)


@check("class_weighted_loss")
def check_class_weighted_loss(class_weighted_loss, seed=0, n=10, classes=3):
    """class_weighted_loss(logits, targets, class_counts) = cross-entropy with balanced weights, on logits' device."""
    g = torch.Generator().manual_seed(seed)
    counts = torch.randint(5, 60, (classes,), generator=g).tolist()
    logits = torch.randn(n, classes, generator=g)
    targets = torch.randint(0, classes, (n,), generator=g)
    for device in _devices():
        lg = logits.to(device).requires_grad_()
        tg = targets.to(device)
        got = call(class_weighted_loss, lg, tg, list(counts), name="class_weighted_loss")
        want = F.cross_entropy(lg.detach(), tg, weight=reference_weights(counts, lg))
        expect(torch.is_tensor(got), "the loss", "a tensor (so it can be backpropagated)", type(got).__name__,
               "return the loss tensor itself, not loss.item().")
        expect(got.dim() == 0, "the loss", "a scalar (0-dim tensor)", f"shape {tuple(got.shape)}")
        expect(got.requires_grad, "the loss", "connected to logits (requires_grad)", "no gradient path",
               "compute it from logits with PyTorch operations; do not detach or rebuild it.")
        expect(_same_device(got, device), "the loss", f"on {device}", f"on {got.device}")
        expect(close(got, want), f"the loss on {device} (counts {counts})", f"{want.item():.5f}", f"{got.item():.5f}",
               "weight class c by n_total / (n_classes * count_c) and pass it as `weight=` to the cross-entropy.")

    def probe(sim):
        got = call(class_weighted_loss, sim.tensor(logits), sim.tensor(targets), list(counts),
                   name="class_weighted_loss", where="on a simulated cuda:0")
        expect(_same_device(got, sim.device), "the loss on a simulated cuda:0", "on cuda:0", f"on {got.device}")

    where = _gpu_probe(probe)
    return f"equals the balanced-weight cross-entropy on {', '.join(map(str, _devices()))}{where}"


def _setup(seed, batch_size, device):
    model = models.mlp(inputs=4, hidden=16, outputs=3, depth=2, seed=seed).to(device)
    x, y = data.blobs(n=batch_size, features=4, classes=3, seed=seed + 1).tensors
    return model, (x, y)


def _reference_step(model, batch, device):
    ref = copy.deepcopy(model)
    opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    x, y = (t.to(device) for t in batch)
    loss = nn.CrossEntropyLoss()(ref(x), y)
    loss.backward()
    opt.step()
    return ref, loss.item()


@check("train_step")
def check_train_step(train_step, seed=0, batch_size=16):
    """train_step(model, batch, loss_fn, optimizer, device) does one correct step with the batch on the model's device."""
    for device in _devices():
        model, batch = _setup(seed, batch_size, device)
        ref, ref_loss = _reference_step(model, batch, device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        for p in model.parameters():  # stale gradients, as after a previous step
            p.grad = torch.full_like(p, 0.5)
        seen = []
        hook = model.register_forward_pre_hook(lambda m, args: seen.extend(a.device for a in args if torch.is_tensor(a)))
        try:
            got = call(train_step, model, batch, nn.CrossEntropyLoss(), opt, device, name="train_step")
        finally:
            hook.remove()
        expect(isinstance(got, float), "train_step's return value", "the loss as a Python float (loss.item())",
               type(got).__name__, "a tensor keeps its whole graph alive; return loss.item().")
        expect(close(got, ref_loss), f"the loss on {device}", f"{ref_loss:.5f}", f"{got:.5f}")
        expect(all(_same_device(torch.empty(0, device=d), device) for d in seen) and seen,
               "the model's inputs", f"on {device}", f"{sorted(set(map(str, seen)))}")
        diff = max((p - q).abs().max().item() for p, q in zip(model.parameters(), ref.parameters()))
        expect(diff < 1e-5, f"the parameters after one step on {device}", "those of exactly one SGD step on this batch",
               f"a max difference of {diff:.3g}",
               "call optimizer.zero_grad() before loss.backward(), then optimizer.step() once.")

    model, batch = _setup(seed, batch_size, torch.device("cpu"))  # real tensors: made outside the fake mode

    def probe(sim):
        fake = sim.model(model)
        opt = torch.optim.SGD(fake.parameters(), lr=0.1, momentum=0.9)
        call(train_step, fake, batch, nn.CrossEntropyLoss(), opt, sim.device, name="train_step",
             where="with the model on a simulated cuda:0 and the batch on the CPU")
        expect(sim.backward_calls == 1, "backward() calls on a simulated cuda:0", "1", sim.backward_calls)

    where = _gpu_probe(probe)
    return f"one correct SGD step, loss returned as a float, batch moved, on {', '.join(map(str, _devices()))}{where}"
