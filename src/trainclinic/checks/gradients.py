"""Checks for lesson 05, exploding and vanishing gradients: grad_norms, clipped_step, build_deep_net.

PyTorch is the reference: torch.nn.utils.get_total_norm (through monitor.grad_norm) for norms, and
torch.nn.utils.clip_grad_norm_ for clipping. Everything runs on the CPU, seeded.
"""
import copy
import math

import torch
from torch import nn
from torch.nn import functional as F

from .. import data, models, monitor
from . import CheckFailed, call, check, close, expect

__all__ = ["check_grad_norms", "check_clipped_step", "check_build_deep_net"]



class _Scaled(nn.Module):
    """A block with a parameter of its own (gain) and a child layer: its own norm is the gain's alone."""

    def __init__(self, width, bias=True):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(width) * 1.5)
        self.inner = nn.Linear(width, width, bias=bias)

    def forward(self, x):
        return self.gain * self.inner(x)


class _WithSpare(nn.Module):
    """A body that is used and a spare head that never is (its gradients stay None)."""

    def __init__(self, body, width):
        super().__init__()
        self.body = body
        self.spare = nn.Linear(width, 2)

    def forward(self, x):
        return self.body(x)


def _random_model(seed):
    """A small random model (depth, width, activation, bias, LayerNorm, nested block, frozen or unused layers)."""
    g = torch.Generator().manual_seed(seed)
    pick = lambda n: int(torch.randint(0, n, (1,), generator=g))
    torch.manual_seed(seed)
    width, inputs = 3 + pick(6), 2 + pick(5)
    layers, w = [], inputs
    for i in range(1 + pick(4)):
        bias = pick(4) > 0
        layers.append(nn.Linear(w, width, bias=bias))
        w = width
        if pick(3) == 0:
            layers.append(nn.LayerNorm(width))
        layers.append([nn.ReLU, nn.Tanh, nn.Sigmoid, nn.GELU][pick(4)]())
        if pick(4) == 0:
            layers.append(nn.Sequential(_Scaled(width, bias=pick(2) == 0), nn.Tanh()))
    layers.append(nn.Linear(w, 1 + pick(3)))
    model = nn.Sequential(*layers)
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    if len(linears) > 2 and pick(3) == 0:
        linears[pick(len(linears) - 1)].requires_grad_(False)  # a frozen layer: no gradient
    if pick(4) == 0 and linears[0].bias is not None:
        linears[0].bias.requires_grad_(False)  # a half-frozen layer: its weight only
    if pick(4) == 0:
        model = _WithSpare(model, width)
    scale = 10.0 ** (pick(9) - 4)  # norms from 1e-4 to 1e4
    x = torch.randn(4 + pick(5), inputs, generator=g)
    model(x).pow(2).mean().mul(scale).backward()
    return model


def _own(module):
    return [p for p in module.parameters(recurse=False) if p.grad is not None]


def reference_norms(model):
    """(total, {module name: norm of its own gradients}) computed with PyTorch's get_total_norm."""
    layers = {name: monitor.grad_norm(_own(m)) for name, m in model.named_modules() if name and _own(m)}
    return monitor.grad_norm(model), layers


def _as_float(value, what):
    try:
        return float(value)
    except (TypeError, ValueError, RuntimeError):
        raise CheckFailed(f"{what}: expected a number (a Python float), observed {type(value).__name__}") from None


def _check_grad_norms(grad_norms, seed=0, models_to_try=24):
    """grad_norms(model) -> (total, {layer: norm}) agrees with torch.nn.utils.get_total_norm on many random models."""
    for i in range(models_to_try):
        model = _random_model(1000 * seed + i)
        before = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        want_total, want_layers = reference_norms(model)
        got = call(grad_norms, model, name="grad_norms")
        expect(isinstance(got, (tuple, list)) and len(got) == 2 and isinstance(got[1], dict), "grad_norms(model)",
               "a pair (total, {layer name: norm})", type(got).__name__)
        after = [p.grad for p in model.parameters() if p.grad is not None]
        expect(len(before) == len(after) and all(torch.equal(a, b) for a, b in zip(before, after)),
               "the gradients after grad_norms", "unchanged (measure, do not clip or zero them)", "modified")
        total, layers = got
        expect(set(layers) == set(want_layers), f"the layer names (model {i})",
               f"one entry per module with gradients of its own: {sorted(want_layers)}", f"{sorted(layers)}",
               "iterate model.named_modules(), take each module's own parameters (parameters(recurse=False)) "
               "and skip those whose .grad is None (frozen or unused).")
        for name, want in want_layers.items():
            value = _as_float(layers[name], f"the norm of layer {name!r}")
            expect(close(value, want, rtol=1e-4, atol=1e-12), f"the gradient norm of layer {name!r} (model {i})",
                   f"{want:.6g}", f"{value:.6g}",
                   "the L2 norm of the layer's GRADIENTS (p.grad, not p), weight and bias together: "
                   "sqrt of the sum of the squares of all their entries.")
        total = _as_float(total, "the total norm")
        expect(close(total, want_total, rtol=1e-4, atol=1e-12), f"the total gradient norm (model {i})",
               f"{want_total:.6g} (torch.nn.utils.get_total_norm)", f"{total:.6g}",
               "norms add like the sides of a right triangle: total = sqrt(sum of squared layer norms), "
               "not the sum of the layer norms.")
    return f"total and per-layer norms equal PyTorch's get_total_norm on {models_to_try} random models"


def _exploding_setup(seed, depth=6, gain=3.0, batch_size=32):
    """A ReLU MLP with a large init (big gradients) and a batch of blobs."""
    model = models.mlp(inputs=8, hidden=24, outputs=3, depth=depth, seed=seed)
    with torch.no_grad():
        for layer in model.modules():
            if isinstance(layer, nn.Linear):
                layer.weight.mul_(gain)
    x, y = data.blobs(n=batch_size, features=8, classes=3, seed=seed + 1).tensors
    return model, (x, y)


def _flat(grads):
    return torch.cat([g.reshape(-1).double() for g in grads])


def _run_clipped(clipped_step, model, batch, max_norm):
    """Call the learner's step with a stale gradient in place; return (result, gradients seen at optimizer.step)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for p in model.parameters():
        p.grad = torch.full_like(p, 0.25)  # left over from a previous step
    seen = []

    def hook(optimizer, args, kwargs):
        seen.append([p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()])

    handle = opt.register_step_pre_hook(hook)
    try:
        got = call(clipped_step, model, batch, nn.CrossEntropyLoss(), opt, max_norm, name="clipped_step")
    finally:
        handle.remove()
    return got, seen


def _check_clipped_step(clipped_step, seed=0, depth=6):
    """clipped_step(...) -> (loss, norm before clipping); at optimizer.step the gradients are clipped, same direction."""
    model, batch = _exploding_setup(seed, depth)
    ref = copy.deepcopy(model)
    ref_loss = F.cross_entropy(ref(batch[0]), batch[1])
    ref_loss.backward()
    ref_grads = [p.grad.detach().clone() for p in ref.parameters()]
    ref_norm = monitor.grad_norm(ref)
    expect(math.isfinite(ref_norm) and ref_norm > 1.0, "(check setup) the reference gradient norm", "finite and > 1", ref_norm)
    flat_ref = _flat(ref_grads)
    for factor in (0.1, 4.0):
        max_norm = factor * ref_norm
        trial = copy.deepcopy(model)
        got, seen = _run_clipped(clipped_step, trial, batch, max_norm)
        case = f"with max_norm={max_norm:.4g} (the gradient norm is {ref_norm:.4g})"
        expect(len(seen) == 1, f"optimizer.step() calls {case}", "exactly 1", len(seen))
        flat = _flat(seen[0])
        norm = float(flat.norm())
        cos = float(flat @ flat_ref / (flat.norm() * flat_ref.norm() + 1e-30))
        expect(cos > 1 - 1e-6, f"the gradient's direction at optimizer.step() {case}",
               "the same as before clipping (cosine similarity 1)", f"cosine similarity {cos:.6f}",
               "scale ALL gradients by one common factor max_norm / total_norm (clip the total norm of the model, "
               "e.g. torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)), not each parameter or value on "
               "its own; and zero the old gradients before backward().")
        expect(norm <= max_norm * (1 + 1e-4), f"the total gradient norm at optimizer.step() {case}",
               f"at most max_norm = {max_norm:.4g}", f"{norm:.4g}, above the ceiling",
               "clip AFTER loss.backward() (which creates the gradients) and BEFORE optimizer.step() (which uses them).")
        if factor < 1:
            expect(close(norm, max_norm, rtol=1e-3), f"the total gradient norm at optimizer.step() {case}",
                   f"clipped to max_norm = {max_norm:.4g}", f"{norm:.4g}",
                   "scale by max_norm / total_norm: the clipped gradient has norm max_norm exactly.")
        else:
            expect(close(norm, ref_norm, rtol=1e-4), f"the total gradient norm at optimizer.step() {case}",
                   f"unchanged ({ref_norm:.4g}): it is already under the ceiling", f"{norm:.4g}",
                   "clipping only ever scales DOWN: the factor is min(1, max_norm / total_norm).")
        expect(isinstance(got, (tuple, list)) and len(got) == 2, "clipped_step's return value",
               "a pair (loss, grad_norm)", repr(got)[:80])
        loss, reported = _as_float(got[0], "the returned loss"), _as_float(got[1], "the returned grad_norm")
        expect(close(reported, ref_norm, rtol=1e-4), f"the returned grad_norm {case}",
               f"{ref_norm:.5g}, the total norm BEFORE clipping", f"{reported:.5g}",
               "report the norm measured before clipping (clip_grad_norm_ returns it): after clipping it is never "
               "above max_norm, so a dashboard of clipped norms cannot show an explosion.")
        expect(close(loss, ref_loss.item(), rtol=1e-4), f"the returned loss {case}", f"{ref_loss.item():.5g}", f"{loss:.5g}")
    return (f"gradients clipped to max_norm with their direction kept, left alone under it; "
            f"pre-clip norm {ref_norm:.3g} reported")


def _deep_net_data(seed):
    return data.blobs(n=256, features=8, classes=3, seed=seed).tensors


def _linears(model):
    return [m for m in model.modules() if isinstance(m, nn.Linear)]


def _check_build_deep_net(build_deep_net, seed=0, depth=10, hidden=32, steps=80, lr=0.05):
    """build_deep_net(inputs, hidden, outputs, depth): gradients reach the first layer, and plain SGD trains it."""
    torch.manual_seed(seed)
    model = call(build_deep_net, 8, hidden, 3, depth, name="build_deep_net")
    expect(isinstance(model, nn.Module), "build_deep_net's result", "an nn.Module", type(model).__name__)
    linears = _linears(model)
    expect(len(linears) >= depth + 1, "the number of nn.Linear layers", f"at least depth + 1 = {depth + 1} (keep the depth)",
           len(linears), "the task is to make a DEEP net trainable, not to make it shallow.")
    x, y = _deep_net_data(seed)
    model.train()
    out = call(model, x, name="the model's forward")
    expect(torch.is_tensor(out) and tuple(out.shape) == (len(x), 3), "the model's output", f"shape {(len(x), 3)}",
           tuple(out.shape) if torch.is_tensor(out) else type(out).__name__)
    model.zero_grad(set_to_none=True)
    call(lambda: F.cross_entropy(model(x), y).backward(), name="forward and backward")
    first, last = (monitor.grad_norm(list(m.parameters())) for m in (linears[0], linears[-1]))
    r = first / last if last > 0 else float("nan")
    expect(math.isfinite(r) and r >= 1e-2, "first-layer / last-layer gradient norm", "at least 1e-2 (within two orders of magnitude)",
           f"{r:.2e} (first {first:.2e}, last {last:.2e})",
           "the gradient still vanishes on its way back: sigmoid (and tanh) squash it at every layer; use ReLU with "
           "He (Kaiming) initialisation, residual connections (x + f(x)) or normalisation (BatchNorm/LayerNorm).")
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = call(lambda: F.cross_entropy(model(x), y), name="the model's forward")
        loss.backward()
        opt.step()
        losses.append(loss.item())
    prior = torch.bincount(y, minlength=3).double() / len(y)
    constant = float(-(prior * prior.log()).sum())  # the loss of always guessing the class frequencies
    expect(math.isfinite(losses[-1]) and losses[-1] < 0.5 * constant,
           f"the loss after {steps} plain SGD steps (lr={lr})", f"below {0.5 * constant:.3f} (half of {constant:.3f}, "
           "the loss of a constant guess)", f"{losses[-1]:.3f} (it started at {losses[0]:.3f})",
           "the net does not learn: its first layers get (almost) no gradient. tanh saturates like sigmoid; ReLU needs "
           "He init (nn.init.kaiming_normal_), or add residual connections or BatchNorm/LayerNorm.")
    return (f"first/last layer gradient ratio {r:.2g}; {steps} SGD steps took the loss "
            f"{losses[0]:.3g} -> {losses[-1]:.3g} at depth {depth}")


@check("grad_norms")
def check_grad_norms(grad_norms, seed=0, models_to_try=24):
    """grad_norms(model) -> (total, {layer: norm}) agrees with torch.nn.utils.get_total_norm on many random models."""
    return _check_grad_norms(grad_norms, seed, models_to_try)


@check("clipped_step")
def check_clipped_step(clipped_step, seed=0, depth=6):
    """clipped_step(...) -> (loss, norm before clipping); at optimizer.step the gradients are clipped, same direction."""
    return _check_clipped_step(clipped_step, seed, depth)


@check("build_deep_net")
def check_build_deep_net(build_deep_net, seed=0, depth=10, hidden=32, steps=80, lr=0.05):
    """build_deep_net(inputs, hidden, outputs, depth): gradients reach the first layer, and plain SGD trains it."""
    return _check_build_deep_net(build_deep_net, seed, depth, hidden, steps, lr)
