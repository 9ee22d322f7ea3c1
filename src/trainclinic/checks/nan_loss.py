"""Checks for lesson 04, NaN loss: safe_step, train, and a stable learning rate.

All run on the CPU with seeded tiny regression problems (a Tanh MLP on MSE), one thread (tiny models
are fastest so), so they are deterministic and fast on any machine.
"""
import copy
import math
import re

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from .. import data, models
from ..nonfinite import describe, finite
from . import call, check, close, expect

__all__ = ["check_safe_step", "check_train", "check_stable_lr", "reference_train"]

SKIP_HINT = ("check the loss with torch.isfinite(loss) BEFORE loss.backward() and optimizer.step(), and return None "
             "without stepping when it is not finite (note: `loss == float('nan')` is never True, NaN equals nothing).")
GRAD_HINT = ("a finite loss can still have NaN/inf gradients: after loss.backward(), check that every p.grad (or the "
             "total gradient norm) is finite before optimizer.step(), and return None when it is not.")



def _model(seed, inputs=4, hidden=16):
    return models.mlp(inputs=inputs, hidden=hidden, outputs=1, activation=nn.Tanh, seed=seed)


def _state(model):
    return [p.detach().clone() for p in model.parameters()]


def _bad_weights(model):
    bad = {name: describe(p) for name, p in model.named_parameters() if not finite(p)}
    return "; ".join(f"{k}: {v}" for k, v in list(bad.items())[:2]) + (" ..." if len(bad) > 2 else "") if bad else ""


def _max_change(model, state):
    return max((p.detach() - s).abs().max().item() for p, s in zip(model.parameters(), state))


def nan_gradient_loss(output, target):
    """A loss whose value is finite but whose gradient is NaN: torch.where does not stop sqrt's backward at d <= 0."""
    d = output - target
    return torch.where(d > 0, torch.sqrt(d), torch.zeros_like(d)).mean()


@check("safe_step")
def check_safe_step(safe_step, seed=0, batch_size=16):
    """safe_step(model, batch, loss_fn, optimizer) skips (returns None, weights untouched) non-finite steps, else steps."""
    model = _model(seed)
    x, y = data.regression(n=batch_size, features=4, seed=seed + 1).tensors
    start = _state(model)
    ref = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x_nan = x.clone()
    x_nan[batch_size // 2, 1] = float("nan")
    y_inf = y.clone()
    y_inf[0, 0] = float("inf")
    cases = [
        ("a batch with a NaN input", (x_nan, y), nn.MSELoss(), SKIP_HINT),
        ("a batch with an inf target", (x, y_inf), nn.MSELoss(), SKIP_HINT),
        ("a loss whose value is finite but whose gradient is NaN", (x, y), nan_gradient_loss, GRAD_HINT),
    ]
    for what, batch, loss_fn, hint in cases:
        got = call(safe_step, model, batch, loss_fn, opt, name="safe_step", where=f"on {what}")
        bad = _bad_weights(model)
        expect(not bad, f"the weights after safe_step on {what}", "all finite (the step skipped)", bad, hint)
        change = _max_change(model, start)
        expect(change == 0, f"the weights after safe_step on {what}", "unchanged (no optimizer step)",
               f"changed by up to {change:.3g}", hint)
        expect(got is None, f"safe_step's result on {what}", "None (the step was skipped)", repr(got), hint)
    # then a good step: exactly one SGD step, even with NaN gradients left over from the skipped ones
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    ref_loss = nn.MSELoss()(ref(x), y)
    ref_loss.backward()
    ref_opt.step()
    for p in model.parameters():
        p.grad = torch.full_like(p, float("nan"))
    got = call(safe_step, model, (x, y), nn.MSELoss(), opt, name="safe_step", where="on a finite batch")
    expect(isinstance(got, float), "safe_step's result on a finite batch", "the loss as a Python float (loss.item())",
           f"{type(got).__name__} {got!r}")
    expect(close(got, ref_loss.item()), "the loss returned on a finite batch", f"{ref_loss.item():.5f}", f"{got:.5f}")
    bad = _bad_weights(model)
    expect(not bad, "the weights after a step on a finite batch (with NaN gradients left in p.grad)", "all finite",
           bad, "call optimizer.zero_grad() first, so old gradients never leak into this step.")
    diff = max((p - q).abs().max().item() for p, q in zip(model.parameters(), ref.parameters()))
    expect(diff < 1e-5, "the weights after a step on a finite batch", "exactly one optimizer step on this batch",
           f"a max difference of {diff:.3g}", "zero_grad, forward, loss, backward, then optimizer.step() once.")
    return "NaN input, inf target and NaN gradient skipped with the weights untouched; a finite batch takes one step"


def _outcome(train, *args):
    """('returned', history) or ('raised', FloatingPointError) from train(*args)."""
    try:
        return "returned", train(*args)
    except FloatingPointError as exc:
        return "raised", exc


def _losses(history):
    expect(isinstance(history, dict) and "loss" in history, "train's result", "a history dict with a 'loss' list",
           type(history).__name__)
    return list(history["loss"])


def _returned(history):
    losses = _losses(history)
    return f"a history of {len(losses)} losses and no error (the last ones: {[round(v, 4) for v in losses[-3:]]})"


def _run(train, model, loader, lr, steps, what):
    return call(_outcome, train, model, loader, lr, steps, name="train", where=what)


@check("train")
def check_train(train, seed=0, steps=20, batch_size=16):
    """train(model, loader, lr, steps) trains at a sane rate, and stops with FloatingPointError at a non-finite step."""
    ds = data.regression(n=4 * batch_size, features=4, seed=seed)
    # 1. a sane rate: every loss finite, lower at the end, `steps` steps (cycling over the loader)
    model = _model(seed)
    kind, result = _run(train, model, data.loader(ds, batch_size=batch_size, seed=seed), 0.05, steps,
                        "at lr=0.05")
    expect(kind == "returned", "train at lr=0.05", "a history (a sane rate never goes non-finite)",
           f"FloatingPointError: {result}")
    losses = _losses(result)
    expect(len(losses) == steps, f"the losses recorded over {steps} steps with a loader of 4 batches",
           f"{steps} (one per step, going through the loader again as often as needed)", len(losses))
    expect(all(isinstance(v, float) and math.isfinite(v) for v in losses), "the losses at lr=0.05",
           "finite Python floats", [v for v in losses if not (isinstance(v, float) and math.isfinite(v))][:3])
    expect(not _bad_weights(model), "the weights after training at lr=0.05", "finite", _bad_weights(model))
    tail = sum(losses[-3:]) / 3
    expect(tail < losses[0], "the loss at lr=0.05", f"lower at the end than at the start ({losses[0]:.4g})",
           f"{tail:.4g} (mean of the last 3)", "take an optimizer step each step: SGD(model.parameters(), lr=lr).")
    # 2. a planted NaN in batch 2: reported, not trained on
    x, y = (t.clone() for t in ds.tensors)
    x[2 * batch_size + 3, 1] = float("nan")
    model = _model(seed)
    planted = DataLoader(TensorDataset(x, y), batch_size=batch_size, shuffle=False)
    kind, result = _run(train, model, planted, 0.05, steps, "on a loader whose batch 2 holds a NaN")
    bad = _bad_weights(model)
    expect(not bad, "the weights after train met a NaN input at step 2", "still finite (never trained on it)", bad,
           "use safe_step: it skips the batch instead of stepping on it.")
    expect(kind == "raised", "train on a loader whose batch 2 (counting from 0) holds a NaN input",
           "FloatingPointError naming step 2", kind == "returned" and _returned(result),
           "when safe_step returns None, raise FloatingPointError(f'non-finite loss at step {step}').")
    expect(re.search(r"\bstep 2\b", str(result)), "the FloatingPointError's message", "one naming 'step 2'",
           repr(str(result)), "count steps from 0, as in history['step'], and put f'step {step}' in the message.")
    # 3. far too high a rate: stops, with the weights still finite
    model = _model(seed)
    kind, result = _run(train, model, data.loader(ds, batch_size=batch_size, seed=seed), 100.0, steps, "at lr=100")
    bad = _bad_weights(model)
    expect(not bad, "the weights after train at lr=100", "still finite (stopped before they were corrupted)", bad,
           "stop at the first step whose loss or gradients are not finite.")
    expect(kind == "raised", "train at lr=100", "FloatingPointError (the loss goes non-finite)",
           kind == "returned" and _returned(result),
           "when safe_step returns None, raise FloatingPointError naming the step.")
    return f"{steps} finite, falling losses at lr=0.05; a NaN input and lr=100 stop with FloatingPointError, weights finite"


def reference_train(lr, seed=0, steps=60, batch_size=32):
    """The lesson's problem (regression, 8 features; Tanh MLP 8-32-1; SGD; MSE): losses until the first non-finite."""
    ds = data.regression(n=256, features=8, noise=0.1, seed=seed)
    model = models.mlp(inputs=8, hidden=32, outputs=1, activation=nn.Tanh, seed=seed)
    loader = data.loader(ds, batch_size=batch_size, seed=seed)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    while len(losses) < steps:
        for x, y in loader:
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            losses.append(loss.item())
            if not math.isfinite(losses[-1]) or len(losses) == steps:
                return losses
            loss.backward()
            opt.step()
    return losses


@check("stable_lr")
def check_stable_lr(lr, seed=0, steps=60):
    """A learning rate that trains the lesson's model: finite all the way, the loss below 10% of its start."""
    expect(isinstance(lr, (int, float)) and not isinstance(lr, bool) and math.isfinite(lr) and lr > 0, "LR",
           "a positive number", repr(lr))
    losses = reference_train(float(lr), seed=seed, steps=steps)
    expect(math.isfinite(losses[-1]), f"training at lr={lr:g} (seed {seed})", f"{steps} finite steps",
           f"the loss went non-finite at step {len(losses) - 1} (it was {losses[0]:.3g} at step 0)",
           "the rate is still too high: divide it by 10 and try again.")
    tail = sum(losses[-5:]) / 5
    expect(tail < 0.1 * losses[0], f"the loss after {steps} steps at lr={lr:g} (seed {seed})",
           f"below 10% of where it started ({0.1 * losses[0]:.3g})", f"{tail:.3g} (mean of the last 5)",
           "the rate is too low: the loss barely moves. Multiply it by 3 to 10.")
    return f"lr={lr:g} trains seed {seed} in {steps} steps: loss {losses[0]:.3g} -> {tail:.3g}"
