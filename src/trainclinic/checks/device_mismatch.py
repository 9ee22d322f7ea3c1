"""Checks for lesson 01, device mismatch: to_device, class_weighted_loss, train_step.

Each runs the learner's function on the present device (and on the CPU) for its results, and on a
simulated cuda:0 (FakeTensorMode) when no GPU is present, so a tensor left on the CPU is caught on any
machine. `seed` drives a sweep: batch sizes (a batch of one included), widths, class counts, dtypes
(float32, float64, bfloat16), the batch's extra items.
"""
import copy
import random

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from .. import data, models
from . import (CheckFailed, call, check, close, devices, expect, gpu_probe, param_groups,
               quiet, restore_settings, same_device, settings, stale_grads)

__all__ = ["check_to_device", "check_class_weighted_loss", "check_train_step"]


def _name(dtype):
    return str(dtype).replace("torch.", "")


def _sweep(seed):
    """A generator and the sweep's choices for this seed."""
    g = torch.Generator().manual_seed(seed)
    pick = lambda options: options[int(torch.randint(len(options), (1,), generator=g))]  # noqa: E731
    return g, pick


# ---- 3a: to_device ------------------------------------------------------------------------------------------

def _sample_batches(seed):
    """A tuple, a list and a dict batch: inputs, labels, a third tensor, and non-tensor items, swept by seed."""
    g, pick = _sweep(seed)
    n = pick([1, 2, 3, 5, 6, 8]) if seed else 6
    floats = [torch.float64, torch.bfloat16, torch.float32]  # seeds 1, 2, 3, ...: the inputs' dtype cycles
    x = torch.randn(n, pick([3, 4, 7]), generator=g).to(floats[(seed - 1) % 3] if seed else torch.float32)
    y = torch.randint(0, 3, (n,), generator=g)
    # odd seeds: float weights in a dtype the inputs do not have (float64 and bfloat16 both occur in a seed's batch:
    # a mover that converts one of them, e.g. float64 to float32 "for MPS", shows), even seeds a bool mask
    other = torch.bfloat16 if x.dtype == torch.float64 else torch.float64
    w = torch.rand(n, generator=g).to(other) if seed % 2 else torch.rand(n, generator=g) > 0.5
    ids = [f"id{i}" for i in range(n)]
    # integer tensors that are not int64 (token ids, masks, raw byte images): a mover that casts integers to int64
    # "for the loss" shows here (the labels y are int64 and hide it); each batch has one, its dtype swept by seed
    ints = [torch.int32, torch.uint8, torch.int16, torch.int8]
    small = [torch.randint(0, 100, (n, 2), generator=g).to(ints[(seed + k) % 4]) for k in range(3)]
    tup = (x, y, w, small[0]) if seed % 3 != 1 else (x, y, "train", w, small[0])
    lst = [x, y, w, ids, small[1]] if seed % 2 == 0 else [ids, x, y, w, 3, small[1]]
    # a 0-d tensor is a tensor too: an int one on seed 0, on other seeds a float one in a dtype the inputs lack
    scalar = torch.tensor(0.5, dtype=other) if seed else torch.tensor(seed + 3)
    raw = np.arange(n, dtype=np.int64)  # a NumPy array from the dataset: not a tensor, so it stays as it is
    # the dict's inputs require grad (an input being optimised, as an adversarial perturbation is): .to() keeps them
    # in their graph, a mover that detaches cuts them off
    dct = {"inputs": x.detach().clone().requires_grad_(), "labels": y, "ids": ids, "epoch": 3, "weights": w, "note": None, "step": scalar, "index": raw,
           "tokens": small[2], "size": (n, x.shape[1])}  # a tuple inside: a mover that recurses keeps it a tuple
    return [tup, lst, dct]


def _partly_moved(batch, move):
    """The batch with its FIRST tensor already moved by `move`, the others where they were: a batch can arrive
    partly moved, so one tensor's device says nothing about the others'."""
    keys = list(batch) if isinstance(batch, dict) else list(range(len(batch)))
    first = next(k for k in keys if torch.is_tensor(batch[k]))
    if isinstance(batch, dict):
        return {k: move(v) if k == first else v for k, v in batch.items()}
    return type(batch)(move(v) if i == first else v for i, v in enumerate(batch))


def _items(batch):
    """(label, value) for each item of a tuple, list or dict batch."""
    if isinstance(batch, dict):
        return [(f"batch[{k!r}]", v) for k, v in batch.items()]
    return [(f"batch[{i}]", v) for i, v in enumerate(batch)]


def _fresh(batch):
    """A new container holding the same items (a to_device that updates its input in place must not fool us)."""
    return dict(batch) if isinstance(batch, dict) else type(batch)(list(batch))


def _short(value, limit=100):
    """repr(value), cut to `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + " ..."


def _verify_moved(to_device, batch, device, real=True, reached=()):
    """`reached`: the devices to_device already moved this check's batches to, when `device` is the meta device."""
    kind = type(batch).__name__
    out = call(to_device, _fresh(batch), device, name="to_device")
    expect(type(out) is type(batch), f"to_device's result for a {kind} batch",
           f"a {kind} (keep the batch's type: code that unpacks or indexes the batch relies on it)",
           f"a {type(out).__name__}" if out is not None else "None (did it return its result?)")
    got, want = dict(_items(out)), dict(_items(batch))
    expect(set(got) == set(want) and len(got) == len(want), f"to_device's result for a {kind} batch",
           f"the same items {list(want)}", f"{list(got)}")
    tensors = [(label, value, got[label]) for label, value in want.items() if torch.is_tensor(value)]
    for label, value in want.items():
        if not torch.is_tensor(value):
            expect(got[label] is value or (type(got[label]) is type(value) and not isinstance(value, np.ndarray)
                                           and got[label] == value), label,
                   f"unchanged, the same {type(value).__name__} ({_short(value)} is not a tensor)",
                   f"{'a tensor ' if torch.is_tensor(got[label]) else ''}{_short(got[label])}",
                   "move only the tensors; leave every other item as it is." if torch.is_tensor(got[label]) else "")
    for label, value, moved in tensors:
        expect(torch.is_tensor(moved), label, "a tensor", type(moved).__name__)
    stayed = [(label, moved) for label, _, moved in tensors if not same_device(moved, device)]
    if stayed:
        where = sorted({str(m.device) for _, m in stayed})
        names = ", ".join(f"{label} on {m.device}" for label, m in stayed)
        if len(stayed) < len(tensors):
            moved_names = ", ".join(label for label, _, m in tensors if same_device(m, device))
            scalars = [label for label, m in stayed if m.dim() == 0]
            what = (f" ({', '.join(scalars)} {'is a 0-d tensor' if len(scalars) == 1 else 'are 0-d tensors'})"
                    if scalars else "")
            already = [label for label, v, _ in tensors if same_device(v, device)]
            came = (f"; the batch came with {', '.join(already)} already on {device}, the rest elsewhere"
                    if already else "")
            raise CheckFailed(f"to_device's result for a {kind} batch: expected every tensor on {device}, observed "
                              f"{moved_names} on {device} but {names}{what}{came}.\nHint: move every tensor of the "
                              f"batch, whatever its device, position, name, dtype, shape (0-d tensors included) or "
                              f"the device of the others.")
        others = [d for d in reached if not d.startswith("cpu")]
        if device.type == "meta" and others:
            raise CheckFailed(f"to_device's result for a {kind} batch sent to torch.device('meta') (a device of "
                              f"shapes without data, on any torch): expected every tensor on meta, observed {names}; "
                              f"earlier in this check it moved them to {', '.join(others)}.\nHint: move each tensor "
                              f"with the `device` argument itself, t.to(device), whatever device it names: not with "
                              f"a device picked from it (such as 'cuda' or 'cpu').")
        if device.type == "meta":
            raise CheckFailed(f"to_device's result for a {kind} batch sent to torch.device('meta') (a device of "
                              f"shapes without data, on any torch): expected every tensor on meta (the `device` "
                              f"argument), observed {names}.")
        if all(m.device == v.device for _, v, m in tensors):
            raise CheckFailed(f"to_device's result for a {kind} batch: expected every tensor on {device}, observed all "
                              f"{len(tensors)} still on {', '.join(where)}, where they were.\nHint: the result must hold "
                              f"`t.to(device)` for each tensor `t`, with the `device` argument: `.to()` returns a new "
                              f"tensor and leaves `t` where it was.")
        raise CheckFailed(f"to_device's result for a {kind} batch: expected every tensor on {device} (the `device` "
                          f"argument), observed {names}.")
    for label, value, moved in tensors:
        expect(moved.dtype == value.dtype, f"{label} in to_device's result for a {kind} batch",
               f"dtype {_name(value.dtype)} kept (only the device changes)", f"{_name(moved.dtype)}",
               "move each tensor with .to(device) alone: its dtype is the caller's (a float64 model needs its "
               "float64 data, a bfloat16 one its bfloat16 data)." if value.is_floating_point() else
               "move each tensor with .to(device) alone: its dtype is the caller's (int32 token ids, uint8 images "
               "and masks stay as they are: the code that uses them converts them if, and where, it needs to).")
        expect(moved.shape == value.shape, f"{label} in to_device's result for a {kind} batch",
               f"shape {tuple(value.shape)} kept", f"{tuple(moved.shape)}")
        if real:
            expect(torch.equal(moved.detach().cpu(), value.detach().cpu()), label, "the same values", "different values")
        if real and value.requires_grad and torch.is_grad_enabled():
            expect(moved.requires_grad, f"{label} in to_device's result for a {kind} batch (a tensor that requires "
                   f"grad)", "requires_grad=True kept, the tensor still in its autograd graph (only the device "
                   "changes)", "requires_grad=False: cut from its graph",
                   "move each tensor with .to(device) alone, no .detach(): an input that requires grad (an "
                   "adversarial perturbation, an input being optimised) must still get its gradient.")
            reached = moved is value or torch.autograd.grad(moved.sum(), value, allow_unused=True)[0] is not None
            expect(reached, f"{label} in to_device's result for a {kind} batch (a tensor that requires grad)",
                   "still in the original's autograd graph: a gradient through it reaches the tensor passed in",
                   "a new leaf (requires_grad set again after a .detach()): a gradient stops there and never "
                   "reaches the tensor passed in",
                   "move each tensor with .to(device) alone: .detach() cuts the graph, and requires_grad_() after it "
                   "makes a new leaf, not the original's copy.")


@check("to_device")
def check_to_device(to_device, seed=0):
    """to_device(batch, device) moves every tensor of a tuple, list or dict batch and keeps the rest."""
    batches = _sample_batches(seed)
    for device in devices():
        for batch in batches:
            _verify_moved(to_device, batch, device)
            if device.type != "cpu":  # its first tensor already there, the others on the CPU
                _verify_moved(to_device, _partly_moved(batch, lambda t: t.to(device)), device)
            for other in devices():  # its first tensor on another device: moved too, whichever way
                if other != device:
                    _verify_moved(to_device, _partly_moved(batch, lambda t: t.to(other)), device)

    def probe(sim):
        for batch in batches:
            _verify_moved(to_device, batch, sim.device, real=False)
            _verify_moved(to_device, _partly_moved(batch, sim.tensor), sim.device, real=False)
            _verify_moved(to_device, _partly_moved(batch, sim.tensor), torch.device("cpu"), real=False)
            # a second GPU, both ways (a device type alone does not say which GPU: DDP's ranks each use their own)
            _verify_moved(to_device, _partly_moved(batch, lambda t: sim.tensor(t).to("cuda:1")), sim.device, real=False)
            _verify_moved(to_device, _partly_moved(batch, sim.tensor), torch.device("cuda", 1), real=False)

    where = gpu_probe(probe)
    # a device that is neither the CPU nor cuda:0: code that reduces `device` to "cuda" or "cpu" is caught here
    meta = torch.device("meta")
    reached = [str(d) for d in devices()] + (["cuda:0 (simulated)"] if where == " and on a simulated cuda:0" else [])
    for batch in batches:
        _verify_moved(to_device, batch, meta, real=False, reached=reached)
    return (f"tuple, list and dict batches moved to {', '.join(map(str, devices()))}{where} and to the meta device; "
            f"types and non-tensors kept")


# ---- 3b: class_weighted_loss -----------------------------------------------------------------------------------

def reference_weights(class_counts, like):
    """Balanced class weights n / (classes * count), on `like`'s device and dtype."""
    counts = torch.as_tensor(class_counts, dtype=torch.float64)
    return (counts.sum() / (len(class_counts) * counts)).to(device=like.device, dtype=like.dtype)


_TOLERANCE = {torch.float32: (1e-4, 1e-5), torch.float64: (1e-9, 1e-10), torch.bfloat16: (2e-2, 2e-2),
              torch.float16: (5e-3, 5e-3)}


def _loss_case(seed, n=None, classes=None):
    """Counts (distinct, weights not all integers), logits and targets for one seed of the sweep."""
    g, pick = _sweep(seed)
    classes = classes or (3 if not seed else pick([2, 3, 4, 5, 6]))
    n = n or (10 if not seed else pick([1, 2, 5, 7, 10, 16]))
    while True:
        counts = (torch.randperm(55, generator=g)[:classes] + 5).tolist()
        if seed % 4 == 1:  # strongly imbalanced: a class of 1-3 samples next to one of thousands, so the weights
            counts[0] = pick([1, 2, 3])  # span from below 1/n_classes to far above 10 (a cap or floor shows)
            counts[-1] = 1000 * pick([2, 3, 5]) + counts[-1]
        if any((sum(counts) / (classes * c)) % 1 for c in counts):
            break
    dtypes = [torch.float32] if not seed else [torch.float32, pick([torch.float64, torch.bfloat16])]
    if seed % 4 == 1:
        n = max(n, 5)  # a batch that holds the rare class and others: weights of absent classes have no effect
    logits = torch.randn(n, classes, generator=g) * 2
    targets = torch.randint(0, classes, (n,), generator=g)
    if seed % 4 == 1:
        targets[0], targets[1] = 0, classes - 1  # the rarest class and the most common one
    return counts, logits, targets, dtypes


def _loss_cause(got, logits, targets, counts, rtol, atol):
    """What a wrong loss equals, when it equals a known mistake; else what the exercise computes."""
    x = logits.detach().double()
    w = reference_weights(counts, x)
    known = [
        (F.cross_entropy(x, targets), "the cross-entropy without class weights",
         "pass the weight tensor as `weight=` to the cross-entropy."),
        (F.cross_entropy(x, targets, weight=w, reduction="sum"), "the weighted cross-entropy summed over the batch",
         "keep the cross-entropy's default mean reduction."),
        (F.cross_entropy(x, targets, weight=w, reduction="none").mean(),
         "the weighted per-sample losses averaged over the batch size",
         "pass the weights as `weight=` and keep the default mean: its mean divides by the sum of the picked weights, "
         "not by the batch size."),
        (F.cross_entropy(x, targets, weight=1 / w), "the cross-entropy weighted by the inverse of the balanced weights",
         "weight class c by n_total / (n_classes * class_counts[c]): rare classes count more."),
    ]
    for value, name, hint in known:
        if close(got, value, rtol=rtol, atol=atol):
            return f", which is {name}.\nHint: {hint}"
    return (".\nExpected: weight class c by n_total / (n_classes * class_counts[c]) and pass it as `weight=` to the "
            "cross-entropy (its mean divides by the sum of the picked weights).")


def _balanced_case(seed, classes, n):
    """Nearly balanced counts (the largest under twice the smallest, weights near 1 but not 1), logits and targets
    that hold the rarest and the most common class: the weights apply to any counts, not only to imbalanced ones."""
    g = torch.Generator().manual_seed(1000 + seed)
    while True:
        counts = (torch.randperm(26, generator=g)[:classes] + 30).tolist()  # 30..55: max < 2 * min
        if any((sum(counts) / (classes * c)) % 1 for c in counts):
            break
    n = max(n, 6)
    logits = torch.randn(n, classes, generator=g) * 2
    targets = torch.randint(0, classes, (n,), generator=g)
    targets[0], targets[1] = counts.index(min(counts)), counts.index(max(counts))
    return counts, logits, targets


_GAPS = {torch.float32: 120, torch.float16: 20}  # exp(-gap) is 0 in that dtype: its probability underflows


_SHIFTS = {torch.float32: 100, torch.float16: 12}  # exp of a logit this large overflows to inf in that dtype


def _confident(logits, targets, dtype):
    """The logits with the first row confidently wrong: its target's logit _GAPS[dtype] below the row's largest, so
    the target's probability underflows to 0 in `dtype`, where the cross-entropy is about the gap; and the row raised
    by _SHIFTS[dtype] (the softmax is the same), so exp of its logits overflows unless the row's max is taken out."""
    out = logits.clone()
    out[0] += _SHIFTS[dtype]
    out[0, targets[0]] = out[0].max() - _GAPS[dtype]
    return out


def _verify_loss(class_weighted_loss, counts, logits, targets, dtype, device, balanced=False, confident=False):
    """One call of class_weighted_loss on `device` with `dtype` logits, its result compared with the reference."""
    lg = logits.to(device, dtype).requires_grad_()
    tg = targets.to(device)
    counts_arg, targets_before = list(counts), tg.clone()
    try:
        got = call(class_weighted_loss, lg, tg, counts_arg, name="class_weighted_loss")
    except CheckFailed as failed:
        if dtype == torch.float32:
            raise
        text = str(failed).split("\nHint:")[0]
        hint = ("\nHint: create the weight tensor with the logits' dtype too (dtype=logits.dtype)."
                if "scalar type" in text or "dtype" in text else "")
        raise CheckFailed(f"with {_name(dtype)} logits (float32 ones worked): {text}{hint}") from None
    expect(type(counts_arg) is list and counts_arg == counts, "the class_counts list after the call",
           f"unchanged, {counts} (the caller's list: the next batch's loss is built from it again)",
           f"{counts_arg!r}", "build the weights in a new tensor; do not write into class_counts.")
    expect(torch.equal(tg, targets_before), "the targets after the call", "unchanged (the caller's tensor)",
           "different values", "compute from targets without modifying them in place.")
    want = F.cross_entropy(lg.detach().double(), tg, weight=reference_weights(counts, lg.double()))
    expect(torch.is_tensor(got), "the loss", "a tensor (so it can be backpropagated)", type(got).__name__,
           "return the loss tensor itself, not loss.item().")
    expect(got.dim() == 0, "the loss", "a scalar (0-dim tensor)", f"shape {tuple(got.shape)}")
    expect(got.requires_grad, "the loss", "connected to logits (requires_grad)", "no gradient path",
           "compute it from logits with PyTorch operations; do not detach or rebuild it.")
    expect(same_device(got, device), "the loss", f"on {device}, with the logits", f"on {got.device}")
    if got.dtype != dtype:
        wider = torch.promote_types(got.dtype, dtype) == got.dtype  # promoted by a wider operand
        raise CheckFailed(
            f"the loss for {_name(dtype)} logits: expected dtype {_name(dtype)}, the logits' dtype, observed "
            f"{_name(got.dtype)}.\nExpected: " + (
                f"every tensor of the computation in the logits' dtype (a {_name(got.dtype)} operand promotes "
                f"the loss): build the weights with dtype=logits.dtype." if wider else
                "the loss computed in the logits' own dtype: no conversion of the logits or of the loss "
                "(.float(), .to(...)), and the weights built with dtype=logits.dtype."))
    rtol, atol = _TOLERANCE[dtype]
    what = (f"the loss for {_name(dtype)} logits on {device} (n={len(targets)}, counts {counts}"
            + (", nearly balanced: the largest under twice the smallest)" if balanced else
               f", nearly balanced, the first row confidently wrong: its logits about {_SHIFTS.get(dtype)}, its "
               f"target's {_GAPS.get(dtype)} below its largest)" if confident else ")"))
    if dtype == torch.float64 and not close(got, want, rtol=rtol, atol=atol) and close(got, want):
        raise CheckFailed(f"{what}: expected {want.item():.12g}, observed {got.item():.12g}, equal only to "
                          f"float32 precision.\nHint: something was computed in float32: build the weights "
                          f"with dtype=logits.dtype.")
    if not close(got, want, rtol=rtol, atol=atol):
        unweighted = F.cross_entropy(lg.detach().double(), tg)
        if balanced and close(got, unweighted, rtol=rtol, atol=atol):
            raise CheckFailed(f"{what}: expected {want.item():.6g}, observed {got.item():.6g}, which is the "
                              f"cross-entropy without class weights (for the imbalanced counts of this check it "
                              f"used them).\nHint: weight the classes for any counts: weights close to 1 are "
                              f"not 1, and the text asks for n_total / (n_classes * class_counts[c]) always.")
        if confident and not torch.isfinite(got).all():
            raise CheckFailed(f"{what}: expected {want.item():.6g}, observed {got.item():.6g}.\nHint: the target's "
                              f"probability, about exp(-{_GAPS[dtype]}), rounds to 0 in {_name(dtype)}, and log(0) is -inf "
                              f"(lesson 04); exp of a logit near {_SHIFTS[dtype]} is inf in {_name(dtype)}: take "
                              "log_softmax (or torch.logsumexp), which subtracts the row's largest logit and never "
                              "forms the probability, or let F.cross_entropy do it.")
        if not torch.isfinite(got).all() and sum(counts) > torch.finfo(dtype).max:
            raise CheckFailed(f"{what}: expected {want.item():.6g}, observed {got.item():.6g}.\nHint: the counts add "
                              f"up to {sum(counts)}, past {_name(dtype)}'s largest number "
                              f"({torch.finfo(dtype).max:.0f}): compute the weights as Python numbers (or in float64 "
                              "on the CPU), then make the tensor in the logits' dtype (the weights themselves fit).")
        raise CheckFailed(f"{what}: expected {want.item():.6g}, observed {got.item():.6g}"
                          f"{_loss_cause(got, lg, tg, counts, rtol, atol)}")


@check("class_weighted_loss")
def check_class_weighted_loss(class_weighted_loss, seed=0, n=None, classes=None):
    """class_weighted_loss(logits, targets, class_counts) = cross-entropy with balanced weights, on logits' device."""
    counts, logits, targets, dtypes = _loss_case(seed, n, classes)
    dtypes = dtypes if torch.float64 in dtypes or torch.bfloat16 in dtypes else dtypes + [torch.float64]
    for device in devices():
        for dtype in dtypes:
            _verify_loss(class_weighted_loss, counts, logits, targets, dtype, device)
    balanced = _balanced_case(seed, len(counts), len(targets))
    for device in devices():
        _verify_loss(class_weighted_loss, *balanced, torch.float32, device, balanced=True)
        counts_b, logits_b, targets_b = balanced  # weights near 1: the float16 loss itself stays in range
        for dtype in _GAPS:  # a confident model's logits: large gaps are ordinary
            _verify_loss(class_weighted_loss, counts_b, _confident(logits_b, targets_b, dtype), targets_b, dtype,
                         device, confident=True)

    def probe(sim):
        got = call(class_weighted_loss, sim.tensor(logits), sim.tensor(targets), list(counts),
                   name="class_weighted_loss", where="on a simulated cuda:0")
        expect(torch.is_tensor(got) and same_device(got, sim.device), "the loss on a simulated cuda:0",
               "on cuda:0, with the logits", f"on {got.device}" if torch.is_tensor(got) else type(got).__name__)

    where = gpu_probe(probe)
    # a large data set and float16 logits: the counts add up past float16's largest number (65504), the weights
    # (the same as the case's: scaled counts) fit
    big = [c * (70000 // sum(counts) + 1) for c in counts]
    for device in devices():
        _verify_loss(class_weighted_loss, big, logits, targets, torch.float16, device)
    kinds = "/".join(map(_name, dtypes + [torch.float16]))
    return f"equals the balanced-weight cross-entropy for {kinds} logits on {', '.join(map(str, devices()))}{where}"


# ---- 3c: train_step ----------------------------------------------------------------------------------------------

def _step_case(seed, batch_size=None):
    g, pick = _sweep(seed)
    inputs, hidden, classes = (4, 16, 3) if not seed else (pick([3, 4, 6]), pick([8, 12, 16]), pick([2, 3, 5]))
    n = batch_size or (16 if not seed else pick([1, 3, 5, 8, 16, 21]))
    if seed % 8 == 3 and not batch_size:
        n = 1  # a batch of one: a squeeze() that drops the batch dimension shows here
    dtype = torch.float32 if not seed or seed % 3 else torch.float64
    x, y = data.blobs(n=n, features=inputs, classes=classes, seed=seed + 1).tensors
    weighted = bool(seed % 4 == 3)
    soft = bool(seed % 4 == 2)  # float targets (class probabilities) and an MSE loss: labels are not always int64
    lr = 0.05 if not seed else pick([0.02, 0.05, 0.2])  # never 0.1, the usual default
    if soft and seed % 8 == 2:  # one output per sample: (n, 1) predictions against (n, 1) targets
        classes = 1
        y = torch.rand(n, 1, generator=g).to(dtype)
    elif soft:
        y = torch.softmax(torch.randn(n, classes, generator=g) * 2, dim=1).to(dtype)
    return (dict(inputs=inputs, hidden=hidden, classes=classes, dtype=dtype, weighted=weighted, soft=soft, lr=lr,
                 nesterov=bool(seed % 2), partial=bool(seed % 2)), (x.to(dtype), y))


def _loss_fn(case):
    if case["soft"]:
        return nn.MSELoss()
    if not case["weighted"]:
        return nn.CrossEntropyLoss()
    weights = torch.linspace(0.5, 2.0, case["classes"], dtype=case["dtype"])
    return lambda logits, labels: F.cross_entropy(logits, labels, weight=weights.to(logits.device))


def _model(case, seed, device):
    model = models.mlp(inputs=case["inputs"], hidden=case["hidden"], outputs=case["classes"], depth=2, seed=seed)
    return model.to(device=device, dtype=case["dtype"])


def _optimizer(case, params):
    """The optimizer train_step is given: SGD with momentum and weight decay, its learning rate swept by seed, with
    two parameter groups (weights, then biases), as fine-tuning code often has."""
    return torch.optim.SGD(param_groups(params), lr=case["lr"], momentum=0.9, weight_decay=0.01,
                           nesterov=case["nesterov"])


def _describe(case):
    nesterov = ", Nesterov" if case["nesterov"] else ""
    return (f"SGD(lr={case['lr']}, momentum=0.9{nesterov}, weight_decay=0.01) with the momentum buffer of an earlier "
            "step" + (", over every parameter but model[2]'s (the caller's choice: those must not move)"
                      if case["partial"] else ""))


def _setup(case, seed, device):
    """The model and the optimizer train_step is given, after one earlier step (the optimizer has state); then the
    caller froze the first layer (requires_grad=False), which the optimizer still holds, as in fine-tuning. On odd
    seeds the optimizer does not hold model[2]'s parameters, which still require grad (the caller trains them
    another way, or not at all): a step must not add them."""
    model = _model(case, seed, device)
    opt = _optimizer(case, [p for name, p in model.named_parameters()
                            if not (case["partial"] and name.startswith("2."))])
    for k, p in enumerate(model.parameters()):
        p.grad = torch.full_like(p, 0.2 if k % 2 else -0.1)
    opt.step()
    for p in model.parameters():
        p.grad = None
    model[0].requires_grad_(False)
    return model, opt


def _reference_step(model, opt, batch, loss_fn, device, stale=None):
    """(model after one step of a copy of `opt`, the loss): zeroed gradients, or `stale` ones kept, as a wrong step
    would."""
    ref, ref_opt = copy.deepcopy((model, opt))
    x, y = (t.to(device) for t in batch)
    for p in ref.parameters():
        p.grad = None if stale is None or not p.requires_grad else torch.full_like(p, stale)
    loss = loss_fn(ref(x), y)
    loss.backward()
    ref_opt.step()
    return ref, loss.item()


def _stale_only_step(model, opt):
    """The model after a step on the stale gradients alone (stepping before backward)."""
    ref, ref_opt = copy.deepcopy((model, opt))
    for p in ref.parameters():
        p.grad = torch.full_like(p, 0.5) if p.requires_grad else None
    ref_opt.step()
    return ref


def _max_diff(a, b):
    return max((p - q).abs().max().item() for p, q in zip(a.parameters(), b.parameters()))


def _watched(loss_fn, labels):
    """loss_fn, failing the check when the labels it gets are not the batch's own (moved, nothing else)."""

    def watched(*args, **kwargs):
        target = args[1] if len(args) > 1 else kwargs.get("target")
        if torch.is_tensor(target) and (target.dtype != labels.dtype or target.shape != labels.shape):
            raise CheckFailed(
                f"the labels that reached loss_fn: expected the batch's labels as given, {_name(labels.dtype)} of "
                f"shape {tuple(labels.shape)} (moved to the device, nothing else), observed {_name(target.dtype)} of "
                f"shape {tuple(target.shape)}.\nHint: move the labels with .to(device) alone: their dtype and shape "
                f"are the caller's, like loss_fn (this check's takes "
                f"{'float targets' if labels.is_floating_point() else _name(labels.dtype) + ' class indices'}).")
        if torch.is_tensor(target) and not torch.equal(target.detach().cpu(), labels):
            raise CheckFailed(f"the labels that reached loss_fn: expected the batch's labels as given (moved to the "
                              f"device, nothing else), observed different values (differ by up to "
                              f"{(target.detach().cpu().double() - labels.double()).abs().max().item():.3g}).")
        return loss_fn(*args, **kwargs)

    return watched


def _int32_labels(train_step, seed):
    """int32 class ids with a loss_fn that converts them itself: they reach it as int32 (the labels' dtype is the
    caller's and loss_fn's business, not the step's)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed + 61)
        model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3))
        x, y = torch.randn(8, 4), torch.randint(0, 3, (8,), dtype=torch.int32)
    mover = (getattr(train_step, "__globals__", None) or {}).get("to_device")
    if callable(mover):  # train_step may move the batch with the learner's to_device: its dtypes are check_to_device's
        try:
            with quiet():
                moved = mover([x.clone(), y.clone()], torch.device("cpu"))
            if torch.is_tensor(moved[1]) and moved[1].dtype != y.dtype:
                return
        except Exception:  # noqa: BLE001 - to_device's own failures are check_to_device's
            pass
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = _watched(lambda out, target: F.cross_entropy(out, target.long()), y)
    call(train_step, model, [x.clone(), y.clone()], loss_fn, opt, torch.device("cpu"), name="train_step",
         where="(int32 class ids, and a loss_fn that converts them itself, on the CPU)")


def _rng_states():
    """The global random states a step has no reason to touch: torch's CPU generator, Python's, NumPy's."""
    return torch.random.get_rng_state(), random.getstate(), np.random.get_state()


def _rng_changed(before, after):
    """A description of what changed among the global random states, or ''."""
    (tb, pb, nb), (ta, pa, na) = before, after
    changed = []
    if not torch.equal(tb, ta):
        changed.append("torch's global generator (torch.random.get_rng_state())")
    if pb != pa:
        changed.append("Python's `random`")
    if nb[0] != na[0] or not np.array_equal(nb[1], na[1]) or nb[2:] != na[2:]:
        changed.append("NumPy's global generator")
    return " and ".join(changed)


def _groups(opt):
    """The optimizer's parameter groups: (ids of the parameters, the other settings) of each."""
    return [([id(p) for p in g["params"]], {k: v for k, v in g.items() if k != "params"}) for g in opt.param_groups]


def _groups_changed(before, after, names):
    """What changed in the parameter groups, in words, or ''."""
    if len(after) != len(before):
        extra = [f"{len(ids)} tensors ({', '.join(names.get(i, 'not the model') for i in ids[:4])}"
                 f"{' ...' if len(ids) > 4 else ''})" for ids, _ in after[len(before):]]
        return (f"{len(after)} groups, not {len(before)}" + (f": a group was added with {'; '.join(extra)}" if extra
                                                             else ""))
    for k, ((ids_b, opts_b), (ids_a, opts_a)) in enumerate(zip(before, after)):
        if ids_a != ids_b:
            added = [names.get(i, "a tensor not of the model") for i in ids_a if i not in ids_b]
            gone = [names.get(i, "a tensor not of the model") for i in ids_b if i not in ids_a]
            return (f"group {k} holds other parameters" + (f": added {', '.join(added[:4])}" if added else "")
                    + (f"; removed {', '.join(gone[:4])}" if gone else ""))
        diff = [f"{key}: {opts_b.get(key)!r} -> {opts_a.get(key)!r}" for key in opts_b.keys() | opts_a.keys()
                if not (key in opts_a and key in opts_b and _same(opts_a[key], opts_b[key]))]
        if diff:
            return f"group {k}'s settings changed: {'; '.join(sorted(diff))}"
    return ""


def _same(a, b):
    try:
        return bool(a == b) if not (torch.is_tensor(a) or torch.is_tensor(b)) else bool(torch.equal(
            torch.as_tensor(a), torch.as_tensor(b)))
    except Exception:  # noqa: BLE001 (values that do not compare: count them as changed only if not the same object)
        return a is b


def _times(k):
    return "once" if k == 1 else f"{k} times"


_DEFAULTS = {"torch.get_float32_matmul_precision()": "highest", "torch.are_deterministic_algorithms_enabled()":
             (False, False), "torch.backends.cuda.matmul.allow_tf32": False}


def _caller_settings(train_step, case, seed, batch, loss_fn):
    """One more step, on the CPU, for a caller with global settings of its own (not PyTorch's defaults): they must
    be the caller's when train_step returns, also when train_step changes one for its own use (restored to the
    default, not to what it found, is a change)."""
    precision = "high" if seed % 2 == 0 else "medium"
    threads = 1 if torch.get_num_threads() > 1 else 2  # another thread count than the one it runs with
    caller = {"torch.get_float32_matmul_precision()": precision,
              "torch.are_deterministic_algorithms_enabled()": (True, True), "torch.get_num_threads()": threads}
    saved, default_dtype = settings(), torch.get_default_dtype()
    model, opt = _setup(case, seed, torch.device("cpu"))
    what = (f"torch.set_float32_matmul_precision({precision!r}), torch.use_deterministic_algorithms(True, "
            f"warn_only=True), torch.set_num_threads({threads}) and torch.set_default_dtype(torch.float64)")
    try:
        restore_settings(caller)
        torch.set_default_dtype(torch.float64)  # (the model and the batch are float32, made before)
        given = settings()
        call(train_step, model, [t.clone() for t in batch], loss_fn, opt, torch.device("cpu"), name="train_step",
             where=f"(on cpu) for a caller that had set {what}", defaults=True)
        after = settings()  # (the default dtype: call() fails a step that changes it)
    finally:
        restore_settings(saved)
        torch.set_default_dtype(default_dtype)
    changed = [k for k in given if after[k] != given[k]]
    to_default = [k for k in changed if k in _DEFAULTS and after[k] == _DEFAULTS[k]]
    expect(not changed, f"torch's global settings when train_step returns, for a caller that had set {what}",
           "the caller's, as they were when train_step was called",
           "; ".join(f"{k}: {given[k]!r} -> {after[k]!r}{' (PyTorch default)' if k in to_default else ''}"
                     for k in changed),
           "put back what the caller had (read it before changing it, e.g. torch.get_float32_matmul_precision(), "
           "and set that value back in a finally:), not PyTorch's default." if to_default else
           "a step changes no global setting: each one stays in force for all the caller's later code.")


def _layer_modes(train_step, case, seed, batch, loss_fn):
    """One more step, on the CPU, with a model that has BatchNorm1d and Dropout (layers whose forward depends on the
    mode): each of its layers must be in training mode whenever it runs during the step, as the caller set it."""
    x, y = batch
    if len(y) < 2:  # BatchNorm in training mode needs more than one value per channel
        x, y = torch.cat([x, x.flip(1)]), torch.cat([y, y])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Linear(case["inputs"], case["hidden"]), nn.BatchNorm1d(case["hidden"]), nn.ReLU(),
                              nn.Dropout(0.25), nn.Linear(case["hidden"], case["classes"])).to(case["dtype"])
    opt = torch.optim.SGD(model.parameters(), lr=case["lr"])
    kinds = {name: type(m).__name__ for name, m in model.named_modules()}
    in_eval = {}  # name -> kind, for each layer that ran in eval mode

    def note(module, args, name):
        if not module.training:
            in_eval[name] = kinds[name]

    handles = [m.register_forward_pre_hook(lambda module, args, name=name: note(module, args, name))
               for name, m in model.named_modules()]
    try:
        call(train_step, model, [x.clone(), y.clone()], loss_fn, opt, torch.device("cpu"), name="train_step",
             where="(on cpu) with a model that has BatchNorm1d and Dropout layers, in training mode")
    finally:
        for handle in handles:
            handle.remove()
    layers = ", ".join(f"{kind} ({'the model itself' if not name else f'model[{name}]'})"
                       for name, kind in in_eval.items())
    expect(not in_eval, "the layers' modes while they ran in train_step, for a model with BatchNorm1d and Dropout "
           "layers (model.train() set by the caller)", "every layer in training mode: a training step computes its "
           "loss in training mode", f"eval mode in {layers}",
           "leave every layer in training mode for the step's forward: in eval mode dropout is off and BatchNorm "
           "uses (and does not update) its running statistics, so the loss and the gradients are not those of a "
           "training step.")


def _fresh_masks(train_step, case, seed, batch, loss_fn):
    """Two steps, on the CPU, with a model that has Dropout and one optimizer: each step draws its own dropout mask
    from the caller's random stream, as plain steps do (the stream ends where theirs does, the weights as theirs)."""
    x, y = batch
    cpu = torch.device("cpu")

    def build():
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed + 17)
            model = nn.Sequential(nn.Linear(case["inputs"], case["hidden"]), nn.ReLU(), nn.Dropout(0.5),
                                  nn.Linear(case["hidden"], case["classes"])).to(case["dtype"])
        return model, torch.optim.SGD(model.parameters(), lr=case["lr"])

    (mine, opt), (ref, ref_opt) = build(), build()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed + 31)
        start = torch.get_rng_state()
        for k in range(2):
            call(train_step, mine, [x.clone(), y.clone()], loss_fn, opt, cpu, name="train_step",
                 where=f"(on cpu, step {k + 1} of 2) with a model that has a Dropout layer")
        after = torch.get_rng_state()
        torch.manual_seed(seed + 31)
        for _ in range(2):
            ref_opt.zero_grad()
            loss_fn(ref(x), y).backward()
            ref_opt.step()
        want = torch.get_rng_state()
    tol = 1e-5 if case["dtype"] == torch.float32 else 1e-9
    put_back = torch.equal(after, start) and not torch.equal(want, start)
    expect(not put_back, "the global random stream after two train_steps on a model with Dropout",
           "advanced by the two steps' dropout masks, as plain steps advance it",
           "as it was before them: each step put the random state back, so every step draws the same dropout mask",
           "leave the random stream alone: a step's dropout draws from it, and the caller's stream moves on with "
           "every step (fork_rng or set_rng_state around a step replays one mask at every step).")
    diff = _max_diff(mine, ref)
    expect(diff <= tol, "the parameters after two train_steps on a model with Dropout (one optimizer, the caller's "
           "random stream)", "those of two plain steps, each with its own dropout mask",
           f"parameters that differ by up to {diff:.3g}")


def _token_inputs(train_step, seed):
    """One more step, on the CPU, with a model that starts with nn.Embedding and a batch of token ids (int64): the
    inputs are moved, never converted (an Embedding takes integer indices, not the weights' dtype)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed + 23)
        model = nn.Sequential(nn.Embedding(10, 4), nn.Flatten(), nn.Linear(12, 3))  # float32, 3 classes
        tokens = torch.randint(0, 10, (6, 3))
        labels = torch.randint(0, 3, (6,))
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    before = [p.detach().clone() for p in model.parameters()]
    call(train_step, model, [tokens, labels], nn.functional.cross_entropy, opt, torch.device("cpu"),
         name="train_step", where="(on cpu) with a model that starts with nn.Embedding, its inputs token ids (int64)",
         hints={"'indices' to have one of the following scalar types": "the inputs were converted: an "
                "nn.Embedding takes integer token ids; move the inputs with .to(device) alone (their dtype is the "
                "data's)"})
    expect(any(not torch.equal(p.detach(), b) for p, b in zip(model.parameters(), before)),
           "the parameters after train_step with a model that starts with nn.Embedding (token ids as inputs)",
           "one step taken", "unchanged")


@check("train_step")
def check_train_step(train_step, seed=0, batch_size=None):
    """train_step(model, batch, loss_fn, optimizer, device) does one correct step with the batch on the model's device."""
    case, batch = _step_case(seed, batch_size)
    loss_fn = _loss_fn(case)
    tol = 1e-5 if case["dtype"] == torch.float32 else 1e-9
    for device in devices():
        model, opt = _setup(case, seed, device)
        ref, ref_loss = _reference_step(model, opt, batch, loss_fn, device)
        caller_anomaly = seed % 2 == 1  # odd seeds: a caller debugging with anomaly detection on, which must stay on
        stale_grads(model, 0.5)
        frozen = [name for name, p in model.named_parameters() if not p.requires_grad]
        for p in model.parameters():
            if not p.requires_grad:
                p.grad = None  # a frozen parameter never has a gradient
        steps, reached = [], []  # optimizer.step() calls; gradients computed for a parameter by backward
        handles = [opt.register_step_post_hook(lambda *args: steps.append(1))]
        # model(...) calls, each as whether the model was in training mode (a direct model.forward(...) runs no hook
        # and is not counted)
        forwards = []
        handles.append(model.register_forward_pre_hook(
            lambda module, args: forwards.append(all(m.training for m in module.modules()))))
        groups, names = _groups(opt), {id(p): name for name, p in model.named_parameters()}
        modes = {name: m.training for name, m in model.named_modules()}
        others = settings()
        handles += [p.register_hook(lambda grad: reached.append(1)) for p in model.parameters() if p.requires_grad]
        grad_mode, anomaly, default_dtype = torch.is_grad_enabled(), torch.is_anomaly_enabled(), torch.get_default_dtype()
        if caller_anomaly:
            torch.set_anomaly_enabled(True)
        entry_anomaly = torch.is_anomaly_enabled()  # what the caller had when it called train_step
        torch.manual_seed(7919 + seed)  # a state of the caller's (a step of this model draws no random numbers)
        torch.rand(3)
        seed_before, rng_before = torch.initial_seed(), _rng_states()
        try:
            got = call(train_step, model, [t.clone() for t in batch], _watched(loss_fn, batch[1]), opt, device,
                       name="train_step", restore_grad=False)
            grad_after, anomaly_after = torch.is_grad_enabled(), torch.is_anomaly_enabled()
            dtype_after, seed_after, rng_changed = torch.get_default_dtype(), torch.initial_seed(), _rng_changed(
                rng_before, _rng_states())
            others_after = settings()
            modes_after = {name: m.training for name, m in model.named_modules()}
            groups_changed = _groups_changed(groups, _groups(opt), names)
        finally:
            restore_settings(others)
            torch.set_grad_enabled(grad_mode)
            torch.set_anomaly_enabled(anomaly)
            torch.set_default_dtype(default_dtype)
            for handle in handles:
                handle.remove()
        expect(grad_after == grad_mode, "autograd when train_step returns (torch.is_grad_enabled())",
               f"{'on' if grad_mode else 'off'}, as it was when train_step was called",
               f"{'on' if grad_after else 'off'} (the caller's next forward would build no graph)",
               "switch autograd off only inside a `with torch.no_grad():` block, which switches it back on; a bare "
               "torch.set_grad_enabled(False) stays in force after the function." if grad_mode else "")
        expect(anomaly_after == entry_anomaly, "autograd's anomaly detection when train_step returns "
               "(torch.is_anomaly_enabled())", f"{'on' if entry_anomaly else 'off'}, as it was when train_step was called",
               "on (every later backward of the caller would run slower, traced)" if anomaly_after else
               "off (the caller had switched it on to debug, and train_step switched it off)",
               "to debug a step, wrap it in `with torch.autograd.detect_anomaly():`, which switches it back; "
               "torch.autograd.set_detect_anomaly(True) stays in force after the function." if not entry_anomaly else
               "leave the caller's setting as it is: `with torch.autograd.set_detect_anomaly(True):` restores what "
               "it found, a bare set_detect_anomaly(False) does not")
        expect(dtype_after == default_dtype, "the default dtype when train_step returns (torch.get_default_dtype())",
               f"{_name(default_dtype)}, as it was when train_step was called", _name(dtype_after))
        changed = [f"{k}: {others[k]!r} -> {others_after[k]!r}" for k in others if others_after[k] != others[k]]
        expect(not changed, "torch's global settings when train_step returns", "as they were when it was called",
               "; ".join(changed), "a step changes no global setting: each one stays in force for all the caller's "
               "later code (set such options once, at the top of a script, if at all)")
        flipped = [name for name in modes if modes_after.get(name) != modes[name]]
        expect(not flipped, "the model's mode when train_step returns (model.training)",
               "training mode, as the caller set it", "eval mode" + (" (model.training is False)" if "" in flipped
                                                                      else f" in layers {flipped[:4]}"),
               "leave the mode as the caller set it: code that switches to eval() (to measure something) must "
               "switch back with model.train()")
        expect(not forwards or any(forwards), "the model's mode during train_step's forward (model(...))",
               "training mode, as the caller set it: a training step computes its loss in training mode",
               "eval mode (model.training was False when model(...) was called)",
               "leave the model in training mode for the step's forward: in eval mode dropout is off and BatchNorm "
               "uses its running statistics, so the loss and the gradients are not those of a training step.")
        reseeded = seed_after != seed_before
        expect(not rng_changed, "the global random state after train_step",
               "unchanged: this check's model has no dropout and its batch is given, so a step draws no random "
               "numbers (the random stream is the caller's: shuffling, dropout, initialisation)",
               f"{rng_changed} changed" + (f": reseeded with torch.manual_seed({seed_after})" if reseeded else ""),
               "seed once, in the caller's code: a step that reseeds replays the same random numbers at every step."
               if reseeded else "")
        unfrozen = [name for name, p in model.named_parameters() if name in frozen and p.requires_grad]
        expect(not unfrozen, "the parameters the caller froze (requires_grad=False, still held by the optimizer) "
               "after train_step", f"still frozen ({', '.join(frozen)})", f"requires_grad=True on {', '.join(unfrozen)}",
               "leave requires_grad as the caller set it: a frozen parameter that gets a gradient is moved by the "
               "optimizer, which holds it too.")
        expect(not groups_changed, "the optimizer's parameter groups after train_step",
               "the groups it was given, unchanged (which parameters it steps, and with which settings, is the "
               "caller's choice)", groups_changed,
               "step with the optimizer as it is: a parameter it does not hold is not the step's to train (the "
               "caller trains it another way, or not at all)." if "added" in groups_changed else
               "step with the optimizer as it is given: its groups and their settings are the caller's.")
        expect(isinstance(got, float) and not isinstance(got, bool), "train_step's return value",
               "the loss as a Python float (loss.item())", type(got).__name__,
               "a tensor keeps its whole graph alive; return loss.item().")
        diff = _max_diff(model, ref)
        if diff > tol:
            model_before, opt_before = _setup(case, seed, device)
            stale, _ = _reference_step(model_before, opt_before, batch, loss_fn, device, stale=0.5)
            unchanged = _max_diff(model, model_before)
            called = f"optimizer.step() was called {_times(len(steps))}" if steps else "optimizer.step() was not called"
            if _max_diff(model, stale) <= tol:
                observed = "the step of this batch's gradients PLUS the stale ones already in .grad"
                hint = "call optimizer.zero_grad() before loss.backward(): gradients add up in .grad."
            elif unchanged <= tol and not reached:
                observed = (f"parameters that did not change: no gradient reached them, backward() computed none "
                            f"({called})")
                hint = ""
            elif unchanged <= tol:
                observed = f"parameters that did not change ({called})"
                hint = "call loss.backward() to fill .grad, then optimizer.step() (after zero_grad, not between)."
            elif _max_diff(model, _stale_only_step(model_before, opt_before)) <= tol:
                observed = "a step on the stale gradients only (the step came before this batch's backward)"
                hint = "the order is zero_grad, loss, backward, step."
            elif not steps:
                observed = (f"parameters that differ by up to {diff:.3g} from it, changed without the given "
                            f"optimizer: its step() was not called")
                hint = ("update the parameters with optimizer.step(), the optimizer train_step is given: its rule "
                        "and state (learning rate, momentum, weight decay) are the caller's choice.")
            elif len(steps) > 1:
                observed = f"parameters that differ by up to {diff:.3g} from it ({called})"
                hint = "one step per batch: call optimizer.step() once."
            else:
                observed, hint = f"parameters that differ by up to {diff:.3g} from it", ""
            if not hint and not reached:
                observed += (".\nExpected: loss.backward() on a loss computed from model(inputs) with operations "
                             "autograd records (no .detach(), no torch.no_grad()), then optimizer.step()")
            expect(False, f"the parameters after train_step on {device}", f"exactly one step of the optimizer it is "
                   f"given, {_describe(case)}, on this batch's gradients (the .grad it was given holds stale ones)",
                   observed, hint)
        expect(close(got, ref_loss, rtol=tol * 10, atol=tol), f"the returned loss on {device}",
               f"{ref_loss:.6g}, the loss of the batch before the step", f"{got:.6g}")
        expect(len(forwards) <= 1, "model(...) calls in one step", "1", f"{len(forwards)}",
               "one forward per step: each training-mode forward updates BatchNorm's running statistics and draws "
               "new dropout masks, so a second one changes the model the caller trains; compute the loss (and "
               "anything else you want) from the one forward")

    _caller_settings(train_step, case, seed, batch, loss_fn)
    _layer_modes(train_step, case, seed, batch, loss_fn)
    _fresh_masks(train_step, case, seed, batch, loss_fn)
    _token_inputs(train_step, seed)
    model = _model(case, seed, torch.device("cpu"))  # real tensors: the simulation makes its fake twins
    reached = []  # what the simulation could not follow, if anything

    def probe(sim):
        fake = sim.model(model)
        opt = _optimizer(case, fake.parameters())
        losses, inference = [], []  # inference: (where, which) for each inference tensor the step passed on

        def note(where, args, kwargs):
            tensors = [("inputs" if where == "model(...)" else ("predictions", "labels")[k] if k < 2 else
                        f"argument {k}", a)
                       for k, a in enumerate(list(args) + list(kwargs.values()))]
            inference.extend(f"the {which} of {where}" for which, a in tensors
                             if torch.is_tensor(a) and a.is_inference())

        handle = fake.register_forward_pre_hook(lambda module, args: note("model(...)", args, {}))

        def watched_loss_fn(*args, **kwargs):
            note("loss_fn", args, kwargs)
            out = loss_fn(*args, **kwargs)
            losses.append(out)
            return out

        try:
            call(train_step, fake, [t.clone() for t in batch], watched_loss_fn, opt, sim.device, name="train_step",
                 where="with the model on a simulated cuda:0 and the batch on the CPU")
        finally:
            handle.remove()
        expect(not inference, "the tensors train_step passed on with the model on a simulated cuda:0 (the batch on "
               "the CPU)", "ordinary tensors, which autograd can save for backward",
               f"inference tensors (tensor.is_inference(): made under torch.inference_mode()) as "
               f"{' and '.join(dict.fromkeys(inference))}: on a real GPU, where .to(device) makes new tensors, autograd "
               f"cannot save them for backward and raises RuntimeError: Inference tensors cannot be saved for backward",
               "move the batch outside torch.inference_mode(): the moved tensors take part in the step's autograd. "
               "(On the CPU .to('cpu') returns the tensor itself, which is why it works there.)")
        if sim.backward_calls == 0 and losses:
            # the simulation has no data: .item() gives nan there, so code that branches on the loss's value
            # (e.g. skipping a non-finite loss) takes another path than on real data
            reached.append(" (up to the loss: train_step did not call backward() there, where the loss's value is a "
                           "placeholder nan)")
            return
        expect(sim.backward_calls == 1, "backward() calls on a simulated cuda:0", "1",
               f"{sim.backward_calls}" + ("" if losses else " (train_step returned before computing loss_fn)"))

    where = gpu_probe(probe) + "".join(reached)
    _int32_labels(train_step, seed)
    dt = _name(case["dtype"])
    return (f"one correct step of the given optimizer ({dt}, batch of {len(batch[1])}), loss returned as a float, "
            f"batch moved, on {', '.join(map(str, devices()))}{where}")
