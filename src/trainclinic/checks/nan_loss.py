"""Checks for lesson 04, NaN loss: safe_step, train, and a stable learning rate.

Everything runs on the CPU, on one thread, on seeded tiny regression problems (Tanh MLPs, mean squared error).
`seed` drives a sweep: sizes and widths, dtypes (float32, float64; bfloat16 for safe_step), optimizers, a batch
of one, short last batches, a NaN from the very first step. The learner's code is watched from outside, never
read: a loss function that records its values and whether backward() went through them, torch's global
optimizer step pre-hook (which optimizer stepped, with which settings, on which gradients), and parameter hooks
(the gradients backward() produced). `check_train` runs `train` with the reference `safe_step` in place of the
learner's, so that each check grades its own cell.
"""
import contextlib
import copy
import functools
import math
import numbers
import random
import re

import torch
from torch import nn

from .. import data, models
from ..nonfinite import finite, summarize
from . import CheckFailed, _where, call, check, close, expect, flat, param_groups, standard_state

__all__ = ["check_safe_step", "check_train", "check_stable_lr", "stable_lr_verdict", "reference_safe_step", "reference_train",
           "step_named", "nan_gradient_loss", "inf_gradient_loss", "minus_inf_loss"]


# ---- small helpers --------------------------------------------------------------------------------------------

def _model(seed, inputs=4, hidden=16, dtype=torch.float32):
    return models.mlp(inputs=inputs, hidden=hidden, outputs=1, activation=nn.Tanh, seed=seed).to(dtype)


def _state(model):
    return [p.detach().clone() for p in model.parameters()]


def _bad_weights(model):
    bad = {name: summarize(p) for name, p in model.named_parameters() if not finite(p)}
    return "; ".join(f"{k}: {v}" for k, v in list(bad.items())[:2]) + (" ..." if len(bad) > 2 else "") if bad else ""


def _max_change(model, state):
    return max((p.detach().double() - s.double()).abs().max().item() for p, s in zip(model.parameters(), state))


def _num(value):
    return f"{value:.4g}" if isinstance(value, float) and math.isfinite(value) else str(value)


def _mse(output, target):
    """The mean squared error, written out (nn.MSELoss has no bfloat16 CPU kernel before torch 2.5)."""
    return ((output - target) ** 2).mean()


def nan_gradient_loss(output, target):
    """A loss whose value is finite but whose gradient is NaN: torch.where does not stop sqrt's backward at d <= 0."""
    d = output - target
    return torch.where(d > 0, torch.sqrt(d), torch.zeros_like(d)).mean()


def inf_gradient_loss(output, target):
    """The mean squared error plus sqrt(0): the value stays finite, the gradient of output[0] is inf (no NaN)."""
    first = output.reshape(-1)[0]
    return _mse(output, target) + torch.sqrt(first - first.detach())


def minus_inf_loss(output, target):
    """The mean squared error plus log(0) (a log-probability of an impossible event): the value is -inf, the gradients
    are finite (those of the squared error)."""
    return _mse(output, target) + torch.log(torch.zeros((), dtype=output.dtype, device=output.device))


# the lesson's own hints for errors in safe_step (the shared ones come after)
_HINTS = {
    "must be Tensor, not NoneType": "a parameter that gets no gradient (frozen with requires_grad=False, or unused by "
    "the forward) has .grad None, which holds no NaN or inf: skip it (if p.grad is not None).",
    "unsupported ScalarType BFloat16": "NumPy has no bfloat16 (the check runs bfloat16 models too): test the tensors "
    "with torch itself, torch.isfinite(p.grad).all(), which works in every dtype and on every device.",
}


def _huge_gradient_loss(scale):
    def loss(output, target):
        """A finite loss with huge, finite gradients: their total norm overflows the dtype."""
        return (output * scale).mean()
    return loss


class _WatchedLoss:
    """The check's loss function, watched: the values it returned, and whether backward() went through them."""

    def __init__(self, fn):
        self.fn, self.values, self.backward = fn, [], False

    def __call__(self, output, target):
        loss = self.fn(output, target)
        if torch.is_tensor(loss) and loss.numel() == 1:
            self.values.append(loss.detach().float().item())
        if torch.is_tensor(loss) and loss.requires_grad:
            loss.register_hook(self._reached)
        return loss

    def _reached(self, grad):
        self.backward = True


def _same(a, b):
    """Two lists of gradients (None: no gradient) hold the same values, NaN and inf included."""
    return all((x is None) == (y is None) and (x is None or (x.shape == y.shape and bool(
        torch.isclose(x, y, rtol=1e-5, atol=0, equal_nan=True).all()))) for x, y in zip(a, b))


class _Watch:
    """While active: every optimizer.step() (torch's global step pre-hook: the optimizer, and the gradients it is
    about to use; with step(closure), those the closure leaves) and every gradient backward() writes for `model`'s
    parameters (parameter hooks)."""

    def __init__(self, model):
        self.params = list(model.parameters())
        self.steps = []     # [{"optimizer", "grads": [tensor or None per parameter], "raw": [...]}]
        self._raw = [None] * len(self.params)  # what backward() gave since the last optimizer step
        self._handles = []

    def __enter__(self):
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        self._handles.append(register_optimizer_step_pre_hook(self._step))
        for i, p in enumerate(self.params):
            if p.requires_grad:
                self._handles.append(p.register_hook(self._grad(i)))
        return self

    def __exit__(self, *exc):
        for h in self._handles:
            h.remove()
        self._handles.clear()
        return False

    def _grad(self, i):
        def hook(grad):
            g = grad.detach().clone()
            self._raw[i] = g if self._raw[i] is None else self._raw[i] + g
        return hook

    def _step(self, optimizer, args, kwargs):
        closure = kwargs.get("closure", args[1] if len(args) > 1 else None)  # args: (optimizer, closure?)
        if closure is None:
            self._record(optimizer, self._raw)
            return None

        def recorded():  # optimizer.step(closure) updates with the gradients the closure leaves: record them then
            before, self._raw = self._raw, [None] * len(self.params)
            loss = closure()
            mine, self._raw = self._raw, before
            if any(g is not None for g in mine):  # it backpropagated: onto zeroed gradients, or onto the earlier ones
                added = [b if g is None else g if b is None else b + g for b, g in zip(before, mine)]
                now = [None if p.grad is None else p.grad.detach() for p in self.params]
                self._raw = added if _same(added, now) and not _same(mine, now) else mine
            self._record(optimizer, self._raw)
            return loss

        if "closure" in kwargs:
            return args, dict(kwargs, closure=recorded)
        return (args[0], recorded, *args[2:]), kwargs

    def _record(self, optimizer, raw):
        self.steps.append({"optimizer": optimizer, "raw": list(raw),
                           "grads": [None if p.grad is None else p.grad.detach().clone() for p in self.params]})
        self._raw = [None] * len(self.params)

    @property
    def raw(self):
        """The gradients backward() gave since the last optimizer step (None for a parameter it did not reach)."""
        return list(self._raw)

    def reset(self):
        self.steps.clear()
        self._raw = [None] * len(self.params)


def _grad_change(raw, used, params):
    """How the gradients optimizer.step() used differ from the ones backward() gave ('' when they agree)."""
    r, u = flat(raw, params), flat(used, params)
    if r.numel() != u.numel():
        return ""
    if bool(torch.isfinite(r).all()) and bool(torch.isfinite(u).all()):
        if bool(torch.allclose(u, r, rtol=1e-4, atol=1e-7 * (1 + r.abs().max().item()))):
            return ""
        scale = max(r.abs().max().item(), u.abs().max().item(), 1e-300)
        rn, un = (r / scale).norm().item() * scale, (u / scale).norm().item() * scale
        r, u = r / scale, u / scale
        cos = (r @ u).item() / (r.norm() * u.norm()).item() if rn > 0 and un > 0 else 0.0
        if cos > 0.9999 and un < rn:
            return (f"they were scaled down from norm {rn:.3g} to {un:.3g} between backward() and optimizer.step(), "
                    f"all by the same factor {un / rn:.3g}: that is what gradient clipping does")
        return f"they changed between backward() and optimizer.step() (norm {rn:.3g} -> {un:.3g})"
    if not bool(torch.isfinite(r).all()) and bool(torch.isfinite(u).all()):
        return (f"backward() gave {summarize(r)}, but optimizer.step() found only finite gradients: they were "
                f"replaced in between (torch.nan_to_num_ and the like turn a bad step into a wrong one)")
    if bool(torch.isfinite(r).all()) and not bool(torch.isfinite(u).all()):
        return (f"backward() gave finite gradients, but optimizer.step() found {summarize(u)}: non-finite gradients "
                f"left in p.grad from an earlier step were added to them")
    return ""


def _optimizer_text(opt):
    keys = ("lr", "momentum", "dampening", "weight_decay", "nesterov", "maximize", "betas")
    group = opt.param_groups[0] if opt.param_groups else {}
    shown = [f"{k}={group[k]:g}" if isinstance(group[k], float) else f"{k}={group[k]}" for k in keys if k in group
             and group[k] not in (0, False, None) or k == "lr" and k in group]
    return f"torch.optim.{type(opt).__name__}({', '.join(shown)})"


# ---- safe_step ------------------------------------------------------------------------------------------------

def reference_safe_step(model, batch, loss_fn, optimizer):
    """The lesson's safe_step: returns the loss as a float, or None (and no step) when the loss or a gradient is NaN/inf."""
    inputs, targets = batch
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), targets)
    if not torch.isfinite(loss):
        return None
    loss.backward()
    if not all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None):
        optimizer.zero_grad()
        return None
    optimizer.step()
    return loss.item()


def _call_safe(safe_step, *args, **kwargs):
    """call() for safe_step, and the grad mode it leaves behind: safe_step is called step after step (a skipped step,
    then normal ones), so it must leave autograd as it found it."""
    before = torch.is_grad_enabled()
    try:
        got = call(safe_step, *args, restore_grad=False, **kwargs)
        after = torch.is_grad_enabled()
    finally:
        torch.set_grad_enabled(before)
    where = kwargs.get("where", "")
    expect(after == before, f"autograd when safe_step returns{' ' + where if where else ''} (torch.is_grad_enabled())",
           f"{before}, as it was when safe_step was called", f"{after}: safe_step switched autograd "
           f"{'off' if before else 'on'} for the whole process and left it so"
           + (", so the next step's forward builds no graph and its backward() raises" if before else ""),
           "leave the grad mode as you found it: `with torch.no_grad():` around a part that needs no graph switches "
           "it back when the block ends, whichever way the block is left (return included); "
           "torch.set_grad_enabled(False) on its own line does not.")
    return got


def _optimizer(kind, params):
    """safe_step's optimizer; its parameters in two groups (weights, then biases), as per-layer settings make them."""
    groups = param_groups(params)
    if kind == "adam":
        return torch.optim.Adam(groups, lr=0.01)
    if kind == "sgd":
        return torch.optim.SGD(groups, lr=0.05)
    return torch.optim.SGD(groups, lr=0.1, momentum=0.9)


def _safe_setup(seed, batch_size, dtype):
    rng = random.Random(seed)
    features = 4 if seed == 0 else rng.choice([1, 3, 4, 8])
    hidden = 16 if seed == 0 else rng.choice([3, 8, 16, 32])
    batch_size = batch_size or (16 if seed == 0 else rng.choice([1, 2, 5, 7, 16, 33]))
    dtype = dtype or (torch.float32 if seed == 0 else (torch.float32, torch.float64, torch.bfloat16)[seed % 3])
    kind = "momentum" if seed == 0 else rng.choice(["momentum", "sgd", "adam"])
    return rng, features, hidden, batch_size, dtype, kind


def _test_loss(value):
    if value != value:
        return ("test torch.isfinite(loss) right after computing it (False for NaN, inf and -inf; NaN gets past "
                "torch.isinf(loss), and `loss == float('nan')` is never True: NaN equals nothing)")
    if value == -math.inf:
        return ("test torch.isfinite(loss) right after computing it (-inf is not finite either: a test for NaN and "
                "+inf lets it through; isfinite catches all three)")
    return "test torch.isfinite(loss) right after computing it (isnan is False for inf; isfinite catches both)"


def _skip_hint(value, backward, stepped, returned):
    hint = f"a loss of {value} got past your test to loss.backward() and optimizer.step(): "
    if not backward:
        hint = f"the loss was {value}, and optimizer.step() ran anyway: "
    hint += _test_loss(value)
    if returned is None and stepped:
        hint += ". It did return None, but only after stepping: test first, then step"
    return hint + "."


@check("safe_step")
def check_safe_step(safe_step, seed=0, batch_size=None, dtype=None):
    """safe_step(model, batch, loss_fn, optimizer) skips (returns None, weights untouched) non-finite steps, else steps."""
    rng, features, hidden, batch_size, dtype, kind = _safe_setup(seed, batch_size, dtype)
    with standard_state():
        return _safe_step_cases(safe_step, seed, rng, features, hidden, batch_size, dtype, kind)


def _safe_step_cases(safe_step, seed, rng, features, hidden, batch_size, dtype, kind):
    setting = f"{batch_size} sample{'s' if batch_size > 1 else ''}, {str(dtype).replace('torch.', '')}"
    model = _model(seed, features, hidden, dtype)
    start = _state(model)
    pristine = copy.deepcopy(model)
    opt = _optimizer(kind, model.parameters())
    x, y = (t.to(dtype) for t in data.regression(n=batch_size, features=features, seed=seed + 1).tensors)
    big = math.sqrt(torch.finfo(dtype).max) * 2
    x_nan = x.clone()
    x_nan[batch_size // 2, rng.randrange(features)] = float("nan")
    y_inf = y.clone()
    y_inf[rng.randrange(batch_size), 0] = float("inf") if seed % 2 == 0 else -float("inf")
    y_big = torch.full_like(y, big)
    with torch.no_grad():
        out = model(x)
    signs = torch.tensor([0.5 if i % 2 == 0 else -0.5 for i in range(batch_size)], dtype=dtype).reshape(-1, 1)
    y_nan_grad = out + signs  # d = output - target = -0.5 for sample 0: sqrt's gradient there is NaN
    cases = [
        ("a batch with a NaN input", (x_nan, y), _mse, "loss"),
        (f"a batch with an {'inf' if seed % 2 == 0 else '-inf'} target", (x, y_inf), _mse, "loss"),
        (f"a batch whose squared error overflows to inf (finite targets of {big:.3g})", (x, y_big), _mse, "loss"),
        ("a loss whose value is finite but whose gradients are NaN (sqrt below 0, masked by torch.where)",
         (x, y_nan_grad), nan_gradient_loss, "nan"),
        ("a loss whose value is -inf, with finite gradients (the squared error plus log(0), the log-probability of an "
         "impossible event)", (x, y), minus_inf_loss, "loss"),
    ]
    for what, batch, fn, bad in cases:
        _premise(pristine, batch, fn, bad, what)
        loss_fn = _WatchedLoss(fn)
        kept = [t.clone() for t in batch]
        with _Watch(model) as watch:
            got = _call_safe(safe_step, model, batch, loss_fn, opt, name="safe_step", hints=_HINTS, where=f"on {what}")
        for part, t, k in zip(("inputs", "targets"), batch, kept):
            same = t.shape == k.shape and bool(torch.isclose(t, k, rtol=0, atol=0, equal_nan=True).all())
            expect(same, f"the batch's {part} after safe_step on {what}", f"unchanged ({summarize(k)})",
                   f"changed in place, now {summarize(t)}",
                   "leave the caller's batch as it is: a batch whose loss is NaN or inf is skipped (return None), "
                   "not repaired.")
        _expect_skipped(model, start, watch, loss_fn, got, what, bad)
    # inf gradients, no NaN: one hidden layer, so that no sum meets +inf and -inf (that would make NaN)
    shallow = models.mlp(inputs=features, hidden=hidden, outputs=1, depth=1, activation=nn.Tanh, seed=seed).to(dtype)
    what = "a loss whose value is finite but whose gradients are inf, not NaN (sqrt at exactly 0)"
    _premise(shallow, (x, y), inf_gradient_loss, "inf", what)
    shallow_start = _state(shallow)
    loss_fn = _WatchedLoss(inf_gradient_loss)
    with _Watch(shallow) as watch:
        got = _call_safe(safe_step, shallow, (x, y), loss_fn, _optimizer(kind, shallow.parameters()), name="safe_step", hints=_HINTS,
                   where=f"on {what}")
    _expect_skipped(shallow, shallow_start, watch, loss_fn, got, what, "inf")
    # one entry of one bias gradient non-finite, every other entry of every gradient finite: inf or NaN, then -inf
    # (a test on each gradient's largest value sees inf and NaN, not -inf)
    _one_bad_entry(safe_step, pristine, kind, x, y, rng, "inf" if seed % 2 == 0 else "nan")
    _one_bad_entry(safe_step, pristine, kind, x, y, rng, "-inf")
    # a finite batch, with NaN gradients left over in p.grad: exactly one step of the optimizer passed in
    y_steep = y * 20  # large gradients, so that any clipping shows
    ref = copy.deepcopy(pristine)
    ref_opt = _optimizer(kind, ref.parameters())
    ref_loss = _mse(ref(x), y_steep)
    ref_loss.backward()
    ref_grads = [p.grad.detach().clone() for p in ref.parameters()]
    ref_opt.step()
    for p in model.parameters():
        p.grad = torch.full_like(p, float("nan"))
    with _Watch(model) as watch:
        got = _call_safe(safe_step, model, (x, y_steep), _WatchedLoss(_mse), opt, name="safe_step", hints=_HINTS,
                   where="on a finite batch")
    _expect_one_step(model, ref, ref_loss, ref_grads, opt, watch, got, "a finite batch (gradient norm "
                     f"{flat(ref_grads).norm().item():.3g}) with NaN gradients left in p.grad from before", dtype)
    # huge but finite gradients (their norm overflows): a normal step, on a copy of the untouched model
    _huge_step(safe_step, pristine, kind, x, y, big, dtype)
    # larger still, all of one sign: every entry finite, their sums overflow too (a test on a sum is not on the gradients)
    _sum_overflow_step(safe_step, pristine, kind, x, y, dtype)
    # a loss of exactly 0.0 (the batch is fitted): a step, and 0.0 returned (a falsy float, not None)
    _zero_loss_step(safe_step, pristine, kind, x, y, dtype)
    # a parameter that gets no gradient (frozen): nothing to test there, a normal step on the others
    _frozen_step(safe_step, pristine, kind, x, y, dtype, rng)
    _frozen_then_nan(safe_step, pristine, kind, (x, y_nan_grad), dtype)
    _dropout_step(safe_step, kind, x, y, dtype, seed)
    _unused_stays(safe_step, pristine, x, y, dtype)
    _caller_changed(safe_step, pristine, kind, x, y, x_nan, dtype)
    return (f"NaN input, ±inf target, overflowing loss, -inf loss, NaN and inf gradients (all of them, or one entry of one "
            f"bias, -inf too) skipped with no backward() on a "
            f"non-finite loss and the weights untouched; huge finite gradients (whose norm, or even sum, overflows), "
            f"a finite batch, a loss of exactly 0.0 and a model with a frozen parameter take exactly one "
            f"{_optimizer_text(opt).split('(')[0]} step ({setting})")


def _entry_loss(param, index, bad):
    """The mean squared error plus a term that is 0 in value but whose gradient is non-finite in param[index] only."""
    def loss(output, target):
        e = param[index] - param[index].detach()
        if bad == "inf":
            term = torch.sqrt(e)  # sqrt at exactly 0: gradient inf
        elif bad == "-inf":
            term = -torch.sqrt(e)  # minus sqrt at exactly 0: gradient -inf
        else:
            term = torch.where(e > 0, torch.sqrt(e - 1), torch.zeros_like(e))  # sqrt below 0, masked: gradient NaN
        return _mse(output, target) + term
    return loss


def _one_bad_entry(safe_step, pristine, kind, x, y, rng, bad):
    model = copy.deepcopy(pristine)
    start = _state(model)
    biases = [(n, p) for n, p in model.named_parameters() if n.endswith("bias")
              and (bad != "-inf" or p.numel() > 1)]  # -inf beside finite entries: the bias's max() stays finite
    name, param = biases[rng.randrange(len(biases))]
    index = rng.randrange(param.numel())
    fn = _entry_loss(param, index, bad)
    m = copy.deepcopy(model)
    mp = dict(m.named_parameters())[name]
    value = _entry_loss(mp, index, bad)(m(x), y)
    value.backward()
    grads = flat([p.grad for p in m.parameters()])
    sign = {"inf": 1, "-inf": -1}.get(bad)
    if not (bool(torch.isfinite(value)) and int((~torch.isfinite(grads)).sum()) == 1
            and (mp.grad[index].item() == sign * math.inf if sign else bool(torch.isnan(mp.grad[index])))):
        raise RuntimeError(f"check_safe_step's one-entry case is broken on torch {torch.__version__}")
    total = sum(p.numel() for p in m.parameters())
    what = (f"a finite loss whose gradients are all finite except ONE entry, {name}.grad[{index}] = "
            f"{mp.grad[index].item()} (1 non-finite value in {total}; {name}.grad has {param.numel()} entries)")
    loss_fn = _WatchedLoss(fn)
    with _Watch(model) as watch:
        got = _call_safe(safe_step, model, (x, y), loss_fn, _optimizer(kind, model.parameters()), name="safe_step", hints=_HINTS,
                   where=f"on {what}")
    extra = ""
    if bad == "-inf" and (watch.steps or _max_change(model, start)):
        extra = _minus_inf_hint(safe_step, pristine, kind, x, y, name, index)
    _expect_skipped(model, start, watch, loss_fn, got, what, bad, extra)


def _minus_inf_hint(safe_step, pristine, kind, x, y, name, index):
    """Why safe_step stepped on a -inf gradient entry: it skips +inf in that same entry (its test misses -inf only)."""
    model = copy.deepcopy(pristine)
    start = _state(model)
    param = dict(model.named_parameters())[name]
    with _Watch(model) as watch:
        got = _call_safe(safe_step, model, (x, y), _entry_loss(param, index, "inf"), _optimizer(kind, model.parameters()),
                   name="safe_step", hints=_HINTS, where=f"on a +inf entry in {name}.grad[{index}]")
    if got is not None or watch.steps or _max_change(model, start):
        return ""
    return (f"it skips the same step when {name}.grad[{index}] is +inf, so its test misses -inf only (a test on each "
            "gradient's largest value, .max(), or for == inf, lets -inf through): torch.isfinite(p.grad).all() "
            "catches NaN, inf and -inf.")


def _premise(model, batch, fn, bad, what):
    """The test data does what its name says, on this torch (a check bug otherwise, not the learner's)."""
    m = copy.deepcopy(model)
    loss = fn(m(batch[0]), batch[1])
    if bad == "loss":
        ok = not bool(torch.isfinite(loss))
    else:
        loss.backward()
        g = flat([p.grad for p in m.parameters()])
        ok = bool(torch.isfinite(loss)) and (bool(torch.isnan(g).any()) if bad == "nan" else
                                              bool(torch.isinf(g).any()) and not bool(torch.isnan(g).any()))
    if not ok:
        raise RuntimeError(f"check_safe_step's own test case is broken on torch {torch.__version__}: {what}")


def _expect_skipped(model, start, watch, loss_fn, got, what, bad, extra=""):
    value = loss_fn.values[0] if loss_fn.values else float("nan")
    change = _max_change(model, start)
    stepped = len(watch.steps)
    broken = _bad_weights(model)
    if stepped or change:
        observed = (f"optimizer.step() called{f' {stepped} times' if stepped > 1 else ''}" if stepped else
                    "no optimizer.step(), but the weights changed")
        zero = stepped and bool(flat(watch.steps[0]["grads"], watch.params).eq(0).all())
        observed += (f"; the weights now hold {broken}" if broken else f"; the weights changed by up to {change:.3g}"
                     if change else "; the weights happen to be unchanged (it stepped on all-zero gradients)" if zero
                     else "; the weights are as they were when it returned (put back after the step)")
        if bad == "loss":
            hint = _skip_hint(value, loss_fn.backward, stepped, got)
            expected = f"no step: the weights exactly as they were (the loss was {value})"
        else:
            raw = flat(watch.steps[0]["raw"] if watch.steps else watch.raw, list(model.parameters()))
            change_text = _grad_change(watch.steps[0]["raw"], watch.steps[0]["grads"], watch.params) if stepped else ""
            expected = f"no step: the weights exactly as they were (the loss was {_num(value)}, backward() gave {summarize(raw)})"
            if "replaced in between" in change_text:
                hint = change_text + ": when a gradient is not finite, return None without stepping."
            elif got is None and stepped:  # it saw the bad gradient, too late
                hint = (f"it did return None, but only after optimizer.step() had run{f' ({stepped} times)' if stepped > 1 else ''}: "
                        "the step had already used the bad gradients (and a stateful optimizer, momentum or Adam's "
                        "moments, keeps them even if the weights are put back). Test every parameter's gradient "
                        "first, then call optimizer.step() once.")
            elif extra:
                hint = extra
            else:
                hint = ("the loss was finite, so only the gradients show it: after loss.backward(), test every "
                        "gradient with torch.isfinite(p.grad).all() and return None before optimizer.step()")
                if bad == "inf":
                    hint += " (isnan is False for inf: test with isfinite)"
                hint += "."
        expect(False, f"safe_step on {what}", expected, observed, hint)
    if bad == "loss":
        expect(not loss_fn.backward, f"safe_step on {what}",
               f"return None before loss.backward() (the loss was {value}: the text says not to call backward() on it)",
               f"loss.backward() was called on the {value} loss (the weights stayed as they were)",
               _test_loss(value) + ", before backward().")
    expect(got is None, f"safe_step's result on {what}", "None (the step was skipped)",
           f"{type(got).__name__} {got!r}" if got is not None else "None",
           "return None itself, not the loss, when the step is skipped." if isinstance(got, float) else "")


def _special_step(safe_step, pristine, kind, x, y, loss_for, premise, describe):
    """One planted case of check_safe_step: a reference step on a copy of `pristine` with loss_for(copy), its
    `premise(loss, grads)` verified (else the case is broken on this torch), then safe_step on another copy, watched.
    Returns (model, ref, ref_loss, ref_grads, opt, watch, watched, got, what), `what` = describe(loss, grads)."""
    model, ref = copy.deepcopy(pristine), copy.deepcopy(pristine)
    opt, ref_opt = _optimizer(kind, model.parameters()), _optimizer(kind, ref.parameters())
    ref_loss = loss_for(ref)(ref(x), y)
    ref_loss.backward()
    ref_grads = [None if p.grad is None else p.grad.detach().clone() for p in ref.parameters()]
    if not premise(ref_loss, ref_grads):
        raise RuntimeError(f"check_safe_step's case '{describe(ref_loss, ref_grads)}' is broken on torch "
                           f"{torch.__version__}")
    ref_opt.step()
    what = describe(ref_loss, ref_grads)
    watched = _WatchedLoss(loss_for(model))
    with _Watch(model) as watch:
        got = _call_safe(safe_step, model, (x, y), watched, opt, name="safe_step", hints=_HINTS, where=f"on {what}")
    return model, ref, ref_loss, ref_grads, opt, watch, watched, got, what


def _norm(grads):
    return float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))


def _huge_step(safe_step, pristine, kind, x, y, big, dtype):
    fn = _huge_gradient_loss(big)
    model, ref, ref_loss, ref_grads, opt, watch, watched, got, what = _special_step(
        safe_step, pristine, kind, x, y, lambda m: fn,
        lambda loss, grads: bool(torch.isfinite(loss)) and bool(torch.isfinite(flat(grads)).all())
        and not math.isfinite(_norm(grads)),
        lambda loss, grads: f"a finite loss ({loss.item():.3g}) whose gradients are all finite (largest |grad| "
                            f"{flat(grads).abs().max().item():.3g}) but whose total norm overflows "
                            f"{str(dtype).replace('torch.', '')} to inf")
    if got is None:
        value = ref_loss.item()
        narrow = (f" ({value:.3g} is finite in {str(dtype).replace('torch.', '')} but above float32's largest, "
                  f"3.4e+38: a cast to float32, e.g. .float(), turns it into inf; test the loss in its own dtype)"
                  if abs(value) > torch.finfo(torch.float32).max and dtype == torch.float64 else "")
        hint = (f"it returned None without calling loss.backward() on a loss of {value:.3g}, which is "
                f"finite: only a NaN or inf loss is refused before backward(){narrow}." if not watched.backward else
                _huge_hint(safe_step, pristine, kind, x, y, big, dtype))
        expect(False, f"safe_step on {what}", "a step (no gradient holds NaN or inf), and the loss returned",
               "None (no step)", hint)
    _expect_one_step(model, ref, ref_loss, ref_grads, opt, watch, got, what, dtype)


def _same_sign_loss(model, push):
    """The mean squared error plus a term that is 0 in value but adds `push` to every entry of every gradient."""
    params = list(model.parameters())

    def loss(output, target):
        return _mse(output, target) + push * sum((p - p.detach()).sum() for p in params)
    return loss


def _sum_overflow_step(safe_step, pristine, kind, x, y, dtype):
    """Gradients whose every entry is finite (0.6 of the dtype's largest, one sign) but whose sum, over all of them or
    over any parameter with two entries or more, overflows to inf: safe_step must take a normal step."""
    name = str(dtype).replace("torch.", "")
    push = 0.6 * torch.finfo(dtype).max
    model, ref, ref_loss, ref_grads, opt, watch, watched, got, what = _special_step(
        safe_step, pristine, kind, x, y, lambda m: _same_sign_loss(m, push),
        lambda loss, grads: bool(torch.isfinite(loss)) and bool(torch.isfinite(flat(grads)).all())
        and not bool(torch.isfinite(sum(g.sum() for g in grads))),
        lambda loss, grads: f"a finite loss ({loss.item():.3g}) whose gradients are all finite, every entry near "
                            f"{push:.3g} (one sign, largest |grad| {flat(grads).abs().max().item():.3g}), so that "
                            f"their sum overflows {name} to inf")
    if got is None:
        hint = (f"it returned None without calling loss.backward() on a loss of {ref_loss.item():.3g}, which is "
                "finite: only a NaN or inf loss is refused before backward()." if not watched.backward else
                f"every gradient entry here is finite in {name}, so what safe_step found non-finite was computed "
                "from them: a total over finite gradients (a sum, a mean, a norm) overflows to inf. Test the "
                "gradients as they are: torch.isfinite(p.grad).all().")
        expect(False, f"safe_step on {what}", "a step (no gradient holds NaN or inf), and the loss returned",
               "None (no step)", hint)
    _expect_one_step(model, ref, ref_loss, ref_grads, opt, watch, got, what, dtype)


def _within_margin_loss(margin):
    def loss(output, target):
        """An epsilon-insensitive error: 0 for every sample within `margin` of its target, so exactly 0.0 when all are."""
        return torch.relu((output - target).abs() - margin).mean()
    return loss


def _zero_loss_step(safe_step, pristine, kind, x, y, dtype):
    """A batch the model already fits: a loss of exactly 0.0 (finite, with finite, zero gradients) is a normal step,
    and 0.0 is the loss to return."""
    with torch.no_grad():
        margin = (pristine(x) - y).abs().max().item() + 1.0
    fn = _within_margin_loss(margin)
    model, ref, ref_loss, ref_grads, opt, watch, watched, got, what = _special_step(
        safe_step, pristine, kind, x, y, lambda m: fn,
        lambda loss, grads: loss.item() == 0.0 and bool(torch.isfinite(flat(grads)).all()),
        lambda loss, grads: f"a batch the model already fits: a loss of exactly 0.0 (every sample within the "
                            f"loss's margin of {margin:.3g}), finite gradients")
    stepped = sum(s["optimizer"] is opt for s in watch.steps)
    if got is None and stepped:
        expect(False, f"safe_step's result on {what}", "the loss as a Python float, 0.0 (the step was taken)",
               f"None, although optimizer.step() ran{f' {stepped} times' if stepped > 1 else ''}",
               "return loss.item() whenever the step is taken: 0.0 is a finite loss like any other, but Python "
               "treats it as false, so `value or None`, `ok and value or None` or `if value:` turn it into None.")
    if got is None:
        expect(False, f"safe_step on {what}", "a step (the loss and every gradient are finite), and the loss 0.0 "
               "returned", "None (no step)", "only a NaN or inf loss or gradient is refused: 0.0 is finite.")
    _expect_one_step(model, ref, ref_loss, ref_grads, opt, watch, got, what, dtype)


def _frozen_step(safe_step, pristine, kind, x, y, dtype, rng):
    """A model with one frozen parameter (requires_grad=False, as fine-tuning leaves it): backward() gives it no
    gradient (.grad stays None), which holds no NaN or inf; the others' gradients are finite: a normal step."""
    names = [n for n, _ in pristine.named_parameters()]
    frozen = names[rng.randrange(len(names))]
    base = copy.deepcopy(pristine)
    dict(base.named_parameters())[frozen].requires_grad_(False)
    model, ref, ref_loss, ref_grads, opt, watch, watched, got, what = _special_step(
        safe_step, base, kind, x, y, lambda m: _mse,
        lambda loss, grads: bool(torch.isfinite(loss)) and all(g is None or bool(torch.isfinite(g).all()) for g in grads)
        and sum(g is None for g in grads) == 1,
        lambda loss, grads: f"a finite batch (loss {loss.item():.4g}) on a model whose parameter {frozen} is frozen "
                            "(requires_grad=False): its .grad stays None, every other gradient is finite")
    if got is None and not watch.steps:
        expect(False, f"safe_step on {what}", "a step (no gradient holds NaN or inf: a missing one holds nothing), "
               "and the loss returned", "None (no step)" + ("" if watched.backward else ", before loss.backward()"),
               f"a parameter that gets no gradient ({frozen} here: frozen, or unused by the forward) has .grad None: "
               "there is nothing to test, so skip it (if p.grad is not None) rather than refuse the step."
               if watched.backward else "")
    _expect_one_step(model, ref, ref_loss, ref_grads, opt, watch, got, what, dtype)


def _frozen_then_nan(safe_step, pristine, kind, batch, dtype):
    """The first parameter frozen (.grad None after backward), NaN in every later gradient: the step is refused (a scan
    of the gradients that stops at the first missing one never reaches the NaN)."""
    model = copy.deepcopy(pristine)
    first = next(model.parameters())
    first.requires_grad_(False)
    for p in model.parameters():
        p.grad = None
    what = ("a loss whose value is finite but whose gradients are NaN, on a model whose first parameter is frozen "
            "(requires_grad=False: its .grad stays None)")
    _premise(model, batch, nan_gradient_loss, "nan", what)
    start = _state(model)
    loss_fn = _WatchedLoss(nan_gradient_loss)
    with _Watch(model) as watch:
        got = _call_safe(safe_step, model, batch, loss_fn, _optimizer(kind, [p for p in model.parameters()
                                                                             if p.requires_grad]),
                         name="safe_step", hints=_HINTS, where=f"on {what}")
    _expect_skipped(model, start, watch, loss_fn, got, what, "nan",
                    "a parameter without a gradient is skipped (continue), not the end of the scan (break): the "
                    "gradients after it must be tested too.")


def _dropout_step(safe_step, kind, x, y, dtype, seed):
    """A model with Dropout, on a finite batch: the gradients stepped are those of the loss tested and returned (one
    forward pass: a second one draws other masks)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed + 41)
        base = nn.Sequential(nn.Linear(x.shape[1], 16), nn.Tanh(), nn.Dropout(0.5), nn.Linear(16, y.shape[1])).to(dtype)
    model = copy.deepcopy(base)
    opt = _optimizer(kind, model.parameters())

    def reference(probes):  # the step on the masks of the forward pass after `probes` passes under no_grad
        ref = copy.deepcopy(base)
        ref_opt = _optimizer(kind, ref.parameters())
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed + 43)
            with torch.no_grad():
                for _ in range(probes):
                    ref(x)
            loss = _mse(ref(x), y)
            loss.backward()
            grads = [p.grad.detach().clone() for p in ref.parameters()]
            ref_opt.step()
        return ref, loss, grads

    what = "a finite batch, on a model with Dropout(0.5) (each forward pass draws its own masks)"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed + 43)
        with _Watch(model) as watch:
            got = _call_safe(safe_step, model, (x, y), _WatchedLoss(_mse), opt, name="safe_step", hints=_HINTS,
                             where=f"on {what}")
    ref, ref_loss, ref_grads = reference(0)
    mine = [s_ for s_ in watch.steps if s_["optimizer"] is opt]
    if len(mine) == 1 and isinstance(got, float) and not close(got, ref_loss.item(), rtol=1e-4):
        # a look under no_grad first, then the pass that is backpropagated, tested and returned: one step, whole
        ref2, loss2, grads2 = reference(1)
        if close(got, loss2.item(), rtol=1e-4) and not _grad_change(grads2, mine[0]["grads"], watch.params):
            ref, ref_loss, ref_grads = ref2, loss2, grads2
    if len(mine) == 1 and isinstance(got, float) and close(got, ref_loss.item(), rtol=1e-4) \
            and _grad_change(ref_grads, mine[0]["grads"], watch.params) \
            and not _grad_change(mine[0]["raw"], mine[0]["grads"], watch.params):
        expect(False, f"the gradients optimizer.step() used on {what}", "those of the loss safe_step tested and "
               "returned", "the gradients of another forward pass (other Dropout masks): the loss returned is the "
               "first pass's, the step backpropagated a second one",
               "run one forward pass: test that loss, backpropagate it, and return its .item(); a second pass (after "
               "a probe under torch.no_grad()) draws new Dropout masks, so the step is not the loss you tested.")
    _expect_one_step(model, ref, ref_loss, ref_grads, opt, watch, got, what, dtype)


def _unused_stays(safe_step, pristine, x, y, dtype):
    """A parameter that requires grad but the forward never uses (a head not trained in this phase): backward() leaves
    its .grad None and the optimizer skips it; a zero gradient made up for it would move it under weight decay."""
    model = copy.deepcopy(pristine)
    model.register_parameter("unused", nn.Parameter(torch.ones(3, dtype=dtype)))
    for p in model.parameters():
        p.grad = None
    opt = torch.optim.SGD(model.parameters(), lr=0.05, weight_decay=0.1)
    what = "a model with a parameter its forward never uses (SGD with weight_decay=0.1)"
    try:
        _call_safe(safe_step, model, (x, y), _mse, opt, name="safe_step", hints=_HINTS, where=f"on {what}")
    except CheckFailed as failed:
        if "not have been used in the graph" in str(failed):  # torch.autograd.grad without allow_unused: a step
            return  # that takes only models whose every parameter is used, as this lesson's are; not this check's
        raise
    moved = not torch.equal(model.unused.detach(), torch.ones(3, dtype=dtype))
    expect(not moved, f"the unused parameter after safe_step on {what}", "unchanged, 1.0: backward() gives it no "
           "gradient (.grad None) and the optimizer skips a parameter without one",
           f"changed by up to {(model.unused.detach() - 1).abs().max().item():.3g} (a gradient of zeros was given to "
           "it, so weight decay moved it)",
           "leave the gradients as loss.backward() makes them: a parameter that got none keeps .grad None (no "
           "torch.autograd.grad(..., materialize_grads=True), no zeros_like for it)")


def _caller_changed(safe_step, pristine, kind, x, y, x_nan, dtype):
    """A step, then the caller changes the weights (loads a checkpoint, lowers them), then a non-finite batch: the
    skipped step leaves the weights as the caller left them, not as an earlier step left them."""
    model = copy.deepcopy(pristine)
    opt = _optimizer(kind, model.parameters())
    _call_safe(safe_step, model, (x, y), _mse, opt, name="safe_step", hints=_HINTS, where="on a finite batch")
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.5)  # the caller's own change between two steps
    mine = _state(model)
    what = "a batch with a NaN input, after the caller changed the weights since the previous step (halved them)"
    _call_safe(safe_step, model, (x_nan, y), _mse, opt, name="safe_step", hints=_HINTS, where=f"on {what}")
    kept = all(torch.equal(p.detach(), q) for p, q in zip(model.parameters(), mine))
    expect(kept, f"the weights after safe_step on {what}", "as the caller left them: a skipped step changes nothing",
           "other weights (those of an earlier step: a copy kept from before was put back)",
           "skip the step by not calling optimizer.step(): no copy of the weights to restore, which would undo "
           "whatever the caller did to them since")


def _huge_hint(safe_step, pristine, kind, x, y, big, dtype):
    """Why safe_step refused huge finite gradients: their norm (it takes smaller ones whose norm is finite), or not."""
    model = copy.deepcopy(pristine)
    fn = _huge_gradient_loss(big / 1e6)
    m = copy.deepcopy(pristine)
    fn(m(x), y).backward()
    largest = flat([p.grad for p in m.parameters()]).abs().max().item()
    norm = _norm([p.grad for p in m.parameters()])
    if not math.isfinite(norm):
        return ""
    got = _call_safe(safe_step, model, (x, y), fn, _optimizer(kind, model.parameters()), name="safe_step", hints=_HINTS,
               where="on smaller finite gradients")
    name = str(dtype).replace("torch.", "")
    if got is not None:
        return ("it stepped on gradients a million times smaller (largest |grad| "
                f"{largest:.3g}, total norm {norm:.3g}), so it is the total norm that overflowed: test each gradient "
                "(torch.isfinite(p.grad).all()), not their total norm: a norm (tc.grad_norm, clip_grad_norm_) sums "
                "squares and overflows to inf while every gradient is finite.")
    narrow = (" (a cast to float32, e.g. .float(), turns anything above 3.4e+38 into inf)" if largest > 3.4e38
              else "")
    return (f"it also refused gradients a million times smaller (largest |grad| {largest:.3g}, total norm "
            f"{norm:.3g}, both finite in {name}): test the gradients as they are, in their own dtype{narrow}.")


def _expect_one_step(model, ref, ref_loss, ref_grads, opt, watch, got, what, dtype):
    holds = ""
    if torch.is_tensor(got):
        holds = (": it still holds its autograd graph (grad_fn), which keeps the step's activations alive for as long "
                 "as the value is kept" if got.requires_grad else ": a tensor, not a number (history and plots take numbers)")
    stale = ""
    if got is None and not watch.steps and all(g is not None and bool(torch.isfinite(g).all()) for g in watch.raw) \
            and any(p.grad is not None and not bool(torch.isfinite(p.grad).all()) for p in model.parameters()):
        stale = ("backward() gave finite gradients on this batch, but p.grad held NaN from before the call and "
                 "backward() adds to it: call optimizer.zero_grad() before the forward pass, so old gradients never "
                 "leak into this step.")
    expect(isinstance(got, float), f"safe_step's result on {what}", "the loss as a Python float (loss.item())",
           f"{type(got).__name__} {got!r}{holds}", stale)
    expect(close(got, ref_loss.item(), rtol=1e-3 if dtype == torch.bfloat16 else 1e-4), f"the loss returned on {what}",
           f"{ref_loss.item():.6g}", f"{got:.6g}")
    others = [s for s in watch.steps if s["optimizer"] is not opt]
    expect(not others, f"the optimizer safe_step stepped on {what}", f"the one passed in ({_optimizer_text(opt)})",
           others and f"one of its own, {_optimizer_text(others[0]['optimizer'])}",
           "use the `optimizer` argument: a new optimizer has none of the passed one's settings or state.")
    mine = [s for s in watch.steps if s["optimizer"] is opt]
    expect(len(mine) == 1, f"optimizer.step() calls on {what}", "exactly one", len(mine),
           "take exactly one optimizer step per call." if mine else "call optimizer.step() once the checks pass.")
    change = _grad_change(ref_grads, mine[0]["grads"], watch.params)
    expect(not change, f"the gradients optimizer.step() used on {what}", "the ones loss.backward() gave", change,
           "call optimizer.zero_grad() before the forward pass, so old gradients never leak into this step."
           if "left in p.grad" in change else
           "take the optimizer step on the gradients as backward() gave them: the text asks for no clipping or other "
           "change (the lesson's failure must stay visible).")
    bad = _bad_weights(model)
    expect(not bad, f"the weights after safe_step on {what}", "all finite", bad)
    diff = max((p.double() - q.double()).abs().max().item() for p, q in zip(model.parameters(), ref.parameters()))
    scale = max(p.detach().double().abs().max().item() for p in ref.parameters())
    tol = (1e-2 if dtype == torch.bfloat16 else 1e-5) * max(1.0, scale)
    expect(diff <= tol, f"the weights after safe_step on {what}", "exactly one optimizer step on this batch",
           f"a max difference of {diff:.3g} from it", "zero_grad, forward, loss, backward, then optimizer.step() once.")


# ---- train ----------------------------------------------------------------------------------------------------

STEP_WORD = re.compile(r"(?<![A-Za-z])steps?(?![A-Za-z])\s*(?:#|no\.?|number|n°|index)?\s*[=:#]?\s*(-?\d+)", re.I)


def step_named(message):
    """The step numbers a message names: 'step 2', 'Step 2/20', 'step=2', 'step #2', 'step: 2' (not 'iteration 2')."""
    return [int(n) for n in STEP_WORD.findall(str(message))]


class _NaNAfter(nn.Module):
    """The check's model for train: an MLP whose output turns NaN once its weights have been updated `after` times
    (as if a layer computed NaN from then on), so the first non-finite loss comes at step `after`, in any pass."""

    def __init__(self, body, after):
        super().__init__()
        self.body, self.after, self.updates, self._seen = body, after, 0, None

    def forward(self, x):
        now = [p.detach().clone() for p in self.body.parameters()]
        if self._seen is not None and any(not torch.equal(a, b) for a, b in zip(now, self._seen)):
            self.updates += 1
        self._seen = now
        out = self.body(x)
        return out * float("nan") if self.updates >= self.after else out


class _Calls:
    """The reference safe_step, counting its calls (`sites`: where it stood in for the learner's, 0 if nowhere)."""

    def __init__(self):
        self.count, self.sites = 0, 0

    def __call__(self, *args, **kwargs):
        self.count += 1
        return reference_safe_step(*args, **kwargs)


@contextlib.contextmanager
def _reference_safe_step(fn):
    """While `fn` (the learner's train) runs, the reference safe_step (counting its calls) stands in for the learner's
    wherever train can reach it: the name `safe_step` (and any other name for that function) in its globals, its
    default arguments, and the variables it closes over (a partial of it too)."""
    calls = _Calls()
    g = getattr(fn, "__globals__", None)
    g = g if isinstance(g, dict) else {}
    mine = g.get("safe_step")

    def theirs(value):
        return value is not None and (value is mine if mine is not None else
                                      callable(value) and getattr(value, "__name__", None) == "safe_step")

    def swap(value):
        if theirs(value):
            calls.sites += 1
            return calls
        if isinstance(value, functools.partial) and theirs(value.func):
            calls.sites += 1
            return functools.partial(calls, *value.args, **value.keywords)
        return value

    undo = []
    try:
        for name in [k for k, v in g.items() if theirs(v)]:
            undo.append(functools.partial(g.__setitem__, name, g[name]))
            g[name] = swap(g[name])
        defaults = getattr(fn, "__defaults__", None)
        if defaults:
            undo.append(functools.partial(setattr, fn, "__defaults__", defaults))
            fn.__defaults__ = tuple(swap(v) for v in defaults)
        kwdefaults = getattr(fn, "__kwdefaults__", None)
        if kwdefaults:
            undo.append(functools.partial(setattr, fn, "__kwdefaults__", kwdefaults))
            fn.__kwdefaults__ = {k: swap(v) for k, v in kwdefaults.items()}
        for cell in getattr(fn, "__closure__", None) or ():
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            new = swap(value)
            if new is not value:
                undo.append(functools.partial(setattr, cell, "cell_contents", value))
                cell.cell_contents = new
        yield calls
    finally:
        for restore in reversed(undo):
            restore()


class _Runaway(BaseException):
    """Raised by the check's model when train keeps calling it long after `steps` (a loop that never ends).
    A BaseException, so that an `except Exception` in train does not swallow it."""


def _outcome(train, model, loader, lr, steps):
    """('returned', history), ('raised', exception) or ('runaway', forward passes) from train(...)."""
    limit = 4 * steps + 20
    count = [0]

    def budget(module, args):
        count[0] += 1
        if count[0] > limit:
            raise _Runaway(limit)

    handle = model.register_forward_pre_hook(budget)
    try:
        return "returned", train(model, loader, lr, steps)
    except (NotImplementedError, CheckFailed):
        raise
    except _Runaway:
        return "runaway", limit
    except Exception as exc:  # noqa: BLE001 - which exception it is, is the verdict
        return "raised", exc
    finally:
        handle.remove()


def _expect_ends(kind, result, where, steps, hint=""):
    expect(kind != "runaway", where, f"train to return (or raise) after at most {steps} steps",
           f"it was still calling the model after {result} forward passes, so the check stopped it", hint)


def _raised(exc):
    return f"{type(exc).__name__}({str(exc)!r})"


class _Batches:
    """Records, for each grad-enabled forward pass of the model, which samples it saw and what it output."""

    def __init__(self, model, dataset):
        x = dataset.tensors[0]
        self.index = {tuple(row.tolist()): i for i, row in enumerate(x)}
        self.targets = dataset.tensors[1]
        self.seen = []  # [(sample indices, output)]
        self._handles = [model.register_forward_hook(self._hook)]

    def _hook(self, module, args, output):
        if torch.is_grad_enabled() and args and torch.is_tensor(args[0]):
            rows = tuple(self.index.get(tuple(r.tolist()), -1) for r in args[0].detach().to(self.targets.dtype))
            self.seen.append((rows, output.detach().clone()))

    def remove(self):
        for h in self._handles:
            h.remove()


def _train_setup(seed, steps, batch_size):
    rng = random.Random(seed)
    features = 4 if seed == 0 else rng.choice([1, 3, 4, 8])
    hidden = 16 if seed == 0 else rng.choice([4, 8, 16, 32])
    batch_size = batch_size or (16 if seed == 0 else rng.choice([4, 8, 16]))
    batches = 4 if seed == 0 else rng.choice([2, 3, 4])
    short = 0 if seed == 0 else rng.choice([0, 1, batch_size // 2, batch_size - 1])
    n = batches * batch_size - short
    steps = steps or (20 if seed == 0 else rng.randint(2 * batches + 1, 24))
    dtype = torch.float32 if seed % 2 == 0 else torch.float64
    after = batches + 2 if seed == 0 else rng.choice([0, 1, batches - 1, batches, batches + 1, 2 * batches + 1])
    return features, hidden, batch_size, batches, n, max(steps, after + 2), dtype, after


@check("train")
def check_train(train, seed=0, steps=None, batch_size=None):
    """train(model, loader, lr, steps): plain SGD on MSE for `steps` steps, stopping with a FloatingPointError
    naming the step at the first non-finite loss or gradient. Runs with the reference safe_step."""
    features, hidden, batch_size, batches, n, steps, dtype, after = _train_setup(seed, steps, batch_size)
    ds = data.regression(n=n, features=features, seed=seed)
    ds = torch.utils.data.TensorDataset(*(t.to(dtype) for t in ds.tensors))
    setting = (f"{steps} steps over a loader of {batches} batches of {batch_size}"
               f"{f' (the last one holds {batch_size - (batches * batch_size - n)})' if n % batch_size else ''}, "
               f"{str(dtype).replace('torch.', '')}")
    with standard_state(), _reference_safe_step(train) as calls:
        _sane_rate(train, ds, seed, batch_size, batches, n, steps, dtype, features, hidden, setting, calls)
        _nan_at(train, ds, seed, batch_size, batches, steps, dtype, features, hidden, after, calls)
        _far_too_high(train, ds, seed, batch_size, steps, dtype, features, hidden)
        _norm_overflows_at(train, ds, seed, batch_size, steps, dtype, features, hidden, after)
        _nan_grad_at(train, ds, seed, batch_size, steps, dtype, features, hidden, after)
        _edge_runs(train, ds, seed, batch_size, dtype, features, hidden)
    return (f"plain SGD at lr=0.05 for {setting}: every step, a new pass each time, falling MSE losses; stops with "
            f"FloatingPointError naming step {after} when the loss turns NaN there, and at lr=100, weights finite; "
            f"goes on when finite gradients have an inf norm; steps=0 takes none; losses of exactly 0.0 go on")


def _edge_runs(train, ds, seed, batch_size, dtype, features, hidden):
    """steps=0: no step, an empty history. A model that fits its targets exactly (output layer zero, targets 0): every
    loss is 0.0, a finite loss like any other (safe_step returns 0.0, not None): train goes on."""
    model = _model(seed, features, hidden, dtype)
    with _Watch(model) as watch:
        kind, result = _run(train, model, data.loader(ds, batch_size=batch_size, seed=seed), 0.05, 0, "with steps=0")
    _expect_ends(kind, result, "train with steps=0", 0)
    expect(kind == "returned" and not watch.steps, "train with steps=0", "no step, and the (empty) history returned",
           f"{len(watch.steps)} optimizer step(s)" if watch.steps else _raised(result) if kind == "raised" else kind,
           "test the step count before each step (while step < steps), not after it: steps=0 takes none")
    with torch.no_grad():
        last = [m for m in model.modules() if isinstance(m, nn.Linear)][-1]
        last.weight.zero_()
        last.bias.zero_()
    zeros = torch.utils.data.TensorDataset(ds.tensors[0], torch.zeros_like(ds.tensors[1]))
    what = "on targets of 0 with the model's output layer zeroed (every loss exactly 0.0)"
    kind, result = _run(train, model, data.loader(zeros, batch_size=batch_size, seed=seed), 0.05, 3, what)
    _expect_ends(kind, result, f"train {what}", 3)
    expect(kind == "returned", f"train {what}", "the history of its 3 steps: 0.0 is a finite loss, a step taken",
           _raised(result) if kind == "raised" else kind,
           "stop only when safe_step returns None, and test it with `is None`: `if not loss` takes a loss of 0.0 "
           "for a refused step" if kind == "raised" else "")


def _counted(loader):
    """`loader`, counting in `.passes` the times it is iterated (a new pass each time)."""
    class Counted(type(loader)):
        def __iter__(self):
            self.__dict__["passes"] = self.__dict__.get("passes", 0) + 1
            return super().__iter__()

    loader.__class__ = Counted
    loader.__dict__["passes"] = 0
    return loader


def _run(train, model, loader, lr, steps, what):
    return call(_outcome, train, model, loader, lr, steps, name="train", where=what)


def _sane_rate(train, ds, seed, batch_size, batches, n, steps, dtype, features, hidden, setting, calls):
    lr = 0.05
    model = _model(seed, features, hidden, dtype)
    start = copy.deepcopy(model)
    loader = _counted(data.loader(ds, batch_size=batch_size, seed=seed))
    seen = _Batches(model, ds)
    try:
        with _Watch(model) as watch:
            kind, result = _run(train, model, loader, lr, steps, f"at lr={lr}")
    finally:
        seen.remove()
    where = f"train at lr={lr} ({setting})"
    _expect_ends(kind, result, where, steps)
    expect(loader.passes, f"the loader given to {where}", "iterated (for batch in loader), pass after pass",
           "never iterated: train made its batches another way",
           "iterate the loader you are given: its seeded generator decides the order of the batches (a DataLoader "
           "built inside train shuffles with torch's global stream, and ignores the caller's settings)")
    expect(kind == "returned", where, "a history (at this rate every loss and gradient stays finite)",
           kind == "raised" and _raised(result))
    keys = ("step", "loss", "grad_norm")
    ok = isinstance(result, dict) and all(isinstance(result.get(k), list) for k in keys)
    observed = type(result).__name__
    if isinstance(result, dict):
        kinds = ", ".join(f"{k!r}: {type(result[k]).__name__}" for k in keys if k in result)
        observed = (f"a dict with keys {sorted(map(str, result))}" if not all(k in result for k in keys) else
                    f"a dict whose values are {kinds}")
    expect(ok, "train's result", 'a dict {"step": [...], "loss": [...], "grad_norm": [...]} of lists', observed,
           "the text asks for lists: make each value a list (list(...) turns a tuple into one)." if isinstance(result, dict) and all(
               isinstance(result.get(k), tuple) for k in keys) else "")
    losses = list(result["loss"])
    one_pass = len(losses) == batches and steps > batches
    expect(len(losses) == steps, f"the losses recorded by {where}",
           f"{steps}, one per step, going through the loader again as often as needed", len(losses),
           f"train stopped after one pass over the loader ({batches} batches): start a new pass "
           f"(`for batch in loader` again) until {steps} steps are done." if one_pass else "")
    expect(list(result["step"]) == list(range(steps)), 'history["step"]', f"[0, 1, ..., {steps - 1}]",
           f"{list(result['step'])[:6]}{' ...' if len(result['step']) > 6 else ''} ({len(result['step'])} entries)")
    tensors = [v for v in losses if torch.is_tensor(v)]
    expect(not tensors, 'history["loss"]', "Python floats (safe_step returns loss.item())",
           tensors and f"tensors, e.g. {tensors[0]!r}")
    expect(all(isinstance(v, (int, float)) and math.isfinite(v) for v in losses), f'history["loss"] at lr={lr}',
           "finite numbers", [v for v in losses if not (isinstance(v, (int, float)) and math.isfinite(v))][:3])
    norms = list(result["grad_norm"])
    expect(len(norms) == steps and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in norms),
           'history["grad_norm"]', f"{steps} numbers (tc.grad_norm(model) after each step)",
           f"{len(norms)} entries, e.g. {norms[:2]!r}")
    _expect_plain_sgd(watch, model, lr, where)
    _expect_grad_norms(watch, norms, steps, where)
    _expect_batches(seen, losses, ds, batches, n, steps, where)
    with torch.no_grad():
        before, after = (_mse(m(ds.tensors[0]), ds.tensors[1]).item() for m in (start, model))
    expect(after < before, f"the mean squared error on the whole data set after {where}",
           f"lower than before training ({before:.4g})", f"{after:.4g}")
    # last, as the more specific faults above also show in a train that steps without safe_step
    if calls.sites:  # the reference stood in for the learner's safe_step: train must call it once per step
        expect(calls.count == steps, f"the calls of safe_step during {where}", f"{steps}, one per step (the text: "
               "use safe_step for every step)", f"{calls.count}{' (train never called safe_step)' if not calls.count else ''}",
               "call safe_step(model, batch, loss_fn, optimizer), by that name, for each step: the check puts the "
               "reference safe_step in its place while train runs (so that each cell is graded on its own), and "
               "train never called it."
               if not calls.count else "")


def _expect_plain_sgd(watch, model, lr, where):
    opts = []
    for s in watch.steps:
        if all(s["optimizer"] is not o for o in opts):
            opts.append(s["optimizer"])
    expect(watch.steps, f"optimizer steps during {where}", "one torch.optim.SGD step per training step",
           "no torch.optim optimizer stepped")
    ids = {id(p) for p in model.parameters()}
    for opt in opts:
        groups = opt.param_groups
        plain = type(opt) is torch.optim.SGD and all(
            math.isclose(float(g["lr"]), lr, rel_tol=1e-9) and not g.get("momentum") and not g.get("weight_decay")
            and not g.get("maximize") for g in groups)
        expect(plain, f"the optimizer of {where}",
               f"plain torch.optim.SGD(model.parameters(), lr={lr:g}): no momentum, no weight decay, the given lr",
               _optimizer_text(opt))
        held = {id(p) for g in groups for p in g["params"]}
        expect(ids <= held, f"the parameters of train's optimizer", f"all {len(ids)} of the model's",
               f"{len(ids & held)} of them")
    for s in watch.steps:
        change = _grad_change(s["raw"], s["grads"], watch.params)
        expect(not change, f"the gradients each optimizer step of {where} used", "the ones loss.backward() gave",
               change, "call optimizer.zero_grad() every step." if "left in p.grad" in change else
               "the text asks for plain SGD steps on the gradients backward() gave (no clipping), so that a "
               "non-finite step is reported, not hidden.")


def _expect_grad_norms(watch, norms, steps, where):
    """history["grad_norm"][t] is tc.grad_norm(model) after step t: the norm of the gradients that step used (the
    reference safe_step leaves them in p.grad)."""
    if len(watch.steps) != steps:
        return  # optimizer steps do not line up with training steps: _expect_plain_sgd or the losses say why
    want = [float(torch.linalg.vector_norm(flat(s["grads"], watch.params))) for s in watch.steps]
    for t, (got, w) in enumerate(zip(norms, want)):
        if math.isclose(float(got), w, rel_tol=1e-4, abs_tol=1e-9):
            continue
        shifted = steps > 1 and all(math.isclose(float(norms[i]), want[i - 1], rel_tol=1e-4, abs_tol=1e-9)
                                    for i in range(1, steps))
        hint = ("each entry is the norm of the step before (entry 0: before any step): read tc.grad_norm(model) "
                "after safe_step, not before it." if shifted else "")
        expect(False, f'history["grad_norm"][{t}] in {where}',
               f"{w:.6g}, tc.grad_norm(model) after step {t} (the norm of the gradients that step used)",
               f"{float(got):.6g}", hint)


def _expect_batches(seen, losses, ds, batches, n, steps, where):
    if len(seen.seen) != steps:
        return  # forward passes do not line up with steps: nothing more to compare
    y = ds.tensors[1].double()
    for t, (rows, out) in enumerate(seen.seen):
        if -1 in rows:
            return
        want = ((out.double() - y[list(rows)]) ** 2).mean().item()
        got = float(losses[t])
        if not math.isclose(got, want, rel_tol=1e-3, abs_tol=1e-6):
            ratio = got / want if want else float("inf")
            extra = (f": {ratio:.3g} times it, the batch's size: a sum, not the mean"
                     if math.isclose(ratio, len(rows), rel_tol=1e-3) else "")
            expect(False, f'history["loss"][{t}] in {where}',
                   f"{want:.6g}, the mean squared error (nn.MSELoss()) of the model's output on that step's batch",
                   f"{got:.6g}{extra}")
    first = [r for rows, _ in seen.seen[:batches] for r in rows]
    expect(sorted(first) == list(range(n)), f"the samples of the first {batches} steps of {where}",
           f"each of the {n} samples once (one pass through the loader)",
           f"{len(set(first))} distinct samples, {len(first) - len(set(first))} repeats")
    if steps >= 2 * batches:
        again = [rows for rows, _ in seen.seen[batches:2 * batches]]
        replay = again == [rows for rows, _ in seen.seen[:batches]]
        expect(not replay, f"the batches of the second pass (steps {batches}-{2 * batches - 1}) of {where}",
               "a new pass through the loader (it reshuffles at each pass)",
               "the first pass's batches again, in the same order",
               "going through the loader again means a new `for batch in loader` (or iter(loader)): "
               "itertools.cycle, or a list of the batches, replays the first pass instead.")


def _nan_at(train, ds, seed, batch_size, batches, steps, dtype, features, hidden, after, calls=None):
    model = _NaNAfter(_model(seed, features, hidden, dtype), after)
    loader = data.loader(ds, batch_size=batch_size, seed=seed)
    where_pass = (f"the first pass" if after < batches else
                  f"pass {after // batches + 1} over the loader's {batches} batches")
    what = f"a model whose output turns NaN at step {after} (counting from 0; {where_pass})"
    before = calls.count if calls is not None else 0
    kind, result = _run(train, model, loader, 0.05, steps, f"on {what}")
    made = calls.count - before if calls is not None and calls.sites else None  # safe_step calls, where counted
    _expect_ends(kind, result, f"train on {what}", steps,
                 f"from step {after} on every loss was NaN and safe_step returned None each time: when it returns "
                 "None, stop and raise FloatingPointError (a loop that skips or retries without counting never ends).")
    bad = _bad_weights(model.body)
    expect(not bad, f"the weights after train on {what}", "still finite (no step taken on the NaN loss)", bad)
    if kind == "returned":
        observed = "no error"
        if isinstance(result, dict) and isinstance(result.get("loss"), (list, tuple)):
            losses = list(result["loss"])
            nan = [i for i, v in enumerate(losses) if isinstance(v, float) and not math.isfinite(v)]
            observed = (f"a history of {len(losses)} losses and no error"
                        + (f", NaN from entry {nan[0]} on" if nan else f" (the last: {[_num(v) for v in losses[-2:]]})"))
        expect(False, f"train on {what}", f"FloatingPointError naming step {after}", observed,
               f"from step {after} on every loss was NaN and safe_step returned None, but train went on: when "
               "safe_step returns None, stop and raise FloatingPointError naming the step.")
    expect(made is None or made <= after + 1, f"safe_step calls of train on {what}",
           f"{after + 1} (steps 0 to {after}: the first None ends the run)", made,
           f"train went on calling safe_step after it returned None at step {after}: raise FloatingPointError at "
           "once, inside the loop (a later finite batch would take a step after the failure, and the error comes "
           "late)")
    deliberate = bool(step_named(result)) or re.search(r"nan|inf|finite", str(result), re.I)
    expect(isinstance(result, FloatingPointError), f"the error train raised on {what}",
           f"FloatingPointError naming step {after}", _raised(result) + _where(result),
           "raise FloatingPointError itself: callers (such as the cell in 3c) catch that one." if deliberate else "")
    named = step_named(result)
    message = f"{str(result)!r}"
    if after in named:
        return
    if not named:
        hint = (f"it has the number {after} but not the word 'step' before it: write e.g. 'step {after}'."
                if re.search(rf"(?<![\d.]){after}(?![\d.])", str(result)) else "")
        expect(False, f"the FloatingPointError's message on {what}",
               f"one naming the step: the word 'step' and its number, e.g. 'step {after}', 'Step {after}', "
               f"'step={after}'", message, hint)
    n = named[0]
    if n == after + 1:
        why = f"{n} is one more: counted from 1, where history['step'] counts from 0"
    elif n == after - 1:
        why = f"{n} is one less: the last step that went well, not the one that failed"
    elif after >= batches and n == after % batches:
        why = f"{n} is the batch's position in its pass: the step count must go on across passes"
    else:
        why = f"it names step {n}"
    expect(False, f"the step named by the FloatingPointError on {what}", f"step {after}", f"{message}: {why}")


class _Inject(torch.autograd.Function):
    """Identity on the output; in backward, a fixed gradient `push` for every entry of `spare`."""

    @staticmethod
    def forward(ctx, out, spare, push):
        ctx.shape, ctx.dtype, ctx.push = spare.shape, spare.dtype, push
        return out.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad, torch.full(ctx.shape, ctx.push, dtype=ctx.dtype, device=grad.device), None


class _HugeGradAt(nn.Module):
    """The check's model for train: an MLP, plus a spare parameter that never touches the output, whose gradient at
    step `at` only (after `at` updates) is huge but finite (0.6 of the dtype's largest, 4 entries): the loss and every
    gradient stay finite, while their total norm overflows to inf."""

    def __init__(self, body, at):
        super().__init__()
        self.body, self.at, self.updates, self._seen = body, at, 0, None
        dtype = next(body.parameters()).dtype
        self.spare = nn.Parameter(torch.zeros(4, dtype=dtype))
        self.push = 0.6 * torch.finfo(dtype).max

    def forward(self, x):
        now = [p.detach().clone() for p in self.body.parameters()]
        if self._seen is not None and any(not torch.equal(a, b) for a, b in zip(now, self._seen)):
            self.updates += 1
        self._seen = now
        out = self.body(x)
        return _Inject.apply(out, self.spare, self.push) if self.updates == self.at else out


def _norm_overflows_at(train, ds, seed, batch_size, steps, dtype, features, hidden, at):
    """At step `at`, finite loss and gradients whose total norm (tc.grad_norm) overflows to inf: safe_step takes the
    step, and train goes on (it stops only when safe_step returns None)."""
    from ..monitor import grad_norm

    probe = _HugeGradAt(_model(seed, features, hidden, dtype), 0)
    loss = nn.MSELoss()(probe(ds.tensors[0][:batch_size]), ds.tensors[1][:batch_size])
    loss.backward()
    grads = [p.grad for p in probe.parameters()]
    if not (bool(torch.isfinite(loss)) and all(bool(torch.isfinite(g).all()) for g in grads)
            and not math.isfinite(grad_norm(probe))):
        raise RuntimeError(f"check_train's overflowing-norm case is broken on torch {torch.__version__}")
    model = _HugeGradAt(_model(seed, features, hidden, dtype), at)
    what = (f"a model whose gradients at step {at} are all finite (the loss too), one parameter's entries "
            f"{model.push:.3g}, so that their total norm, tc.grad_norm(model), overflows "
            f"{str(dtype).replace('torch.', '')} to inf")
    where = f"train at lr=0.05 on {what}"
    kind, result = _run(train, model, data.loader(ds, batch_size=batch_size, seed=seed), 0.05, steps, f"on {what}")
    _expect_ends(kind, result, where, steps)
    if kind == "raised":
        named = step_named(result)
        expect(False, where, f"a history of {steps} steps (safe_step took every step: no loss or gradient was NaN or "
               f"inf, and history['grad_norm'][{at}] is inf)", _raised(result) + _where(result),
               f"safe_step took step {at}, so train must go on: stop only when safe_step returns None. A total norm "
               "overflows to inf while every gradient is finite; record it as it is." if at in named else "")
    losses = list(result["loss"]) if isinstance(result, dict) and isinstance(result.get("loss"), (list, tuple)) else []
    expect(len(losses) == steps, f"the losses recorded by {where}", f"{steps}, one per step", len(losses))


def _nan_grad_at(train, ds, seed, batch_size, steps, dtype, features, hidden, at):
    """At step `at`, a finite loss whose backward gives NaN in one parameter's gradient: safe_step refuses the step,
    and train stops there with FloatingPointError naming it."""
    model = _HugeGradAt(_model(seed, features, hidden, dtype), at)
    model.push = float("nan")
    what = f"a model whose loss stays finite but whose gradients at step {at} hold NaN (one parameter's)"
    kind, result = _run(train, model, data.loader(ds, batch_size=batch_size, seed=seed), 0.05, steps, f"on {what}")
    _expect_ends(kind, result, f"train on {what}", steps)
    anomaly = kind == "raised" and "returned nan values" in str(result)
    expect(kind == "raised" and isinstance(result, FloatingPointError) and at in step_named(result),
           f"the error train raised on {what}", f"FloatingPointError naming step {at}",
           _raised(result) + _where(result) if kind == "raised" else "no error",
           "anomaly detection raised its own RuntimeError inside backward(), before safe_step could refuse the step: "
           "leave it off in train (it is for a debugging session, and slow)" if anomaly else
           "safe_step returned None at that step: stop there and raise FloatingPointError naming the step"
           if kind != "raised" else "")


def _far_too_high(train, ds, seed, batch_size, steps, dtype, features, hidden):
    lr, steps, dtype = 100.0, 40, torch.float32  # plain SGD overflows float32 within about 8 steps (float64: 60)
    ds = torch.utils.data.TensorDataset(*(t.to(dtype) for t in ds.tensors))
    ref = reference_run(ds, seed, batch_size, steps, dtype, features, hidden, lr)
    if ref is None:
        raise RuntimeError(f"check_train's lr=100 case does not blow up on seed {seed}: a check bug")
    model = _model(seed, features, hidden, dtype)
    with _Watch(model) as watch:
        kind, result = _run(train, model, data.loader(ds, batch_size=batch_size, seed=seed), lr, steps, f"at lr={lr:g}")
    bad = _bad_weights(model)
    expect(not bad, f"the weights after train at lr={lr:g}", "still finite (stopped before they were corrupted)", bad,
           "stop at the first step whose loss or gradients are not finite: never step on them.")
    where = f"train at lr={lr:g}"
    _expect_ends(kind, result, where, steps)
    if kind == "raised" and isinstance(result, FloatingPointError):
        named = step_named(result)
        expect(not named or ref in named, f"the step named by the FloatingPointError of {where}",
               f"step {ref}, where plain SGD's loss or gradients first turn non-finite", f"{str(result)!r}",
               "raise at the first non-finite loss or gradient, not before: a large but finite loss is still a "
               "step the text asks train to take" if named and named[0] < ref else "")
        return
    if kind == "raised":
        expect(False, where, f"FloatingPointError (plain SGD's loss goes non-finite at step {ref})", _raised(result))
    losses = list(result["loss"]) if isinstance(result, dict) and isinstance(result.get("loss"), (list, tuple)) else []
    observed = f"a history of {len(losses)} losses and no error (the last: {[_num(v) for v in losses[-2:]]})"
    why = ""
    for opt in {id(s["optimizer"]): s["optimizer"] for s in watch.steps}.values():
        if float(opt.param_groups[0]["lr"]) != lr:
            why = f"; its optimizer ran at lr={opt.param_groups[0]['lr']:g}, not the lr argument"
    for s in watch.steps:
        change = _grad_change(s["raw"], s["grads"], watch.params)
        if change and not why:
            why = f"; at one step {change}"
    expect(False, where, f"FloatingPointError: plain SGD at lr={lr:g} on this data gives a non-finite loss or "
           f"gradient at step {ref}", observed + why)


def reference_run(ds, seed, batch_size, steps, dtype, features, hidden, lr):
    """The step at which the reference train (plain SGD, reference safe_step) stops on this data, or None."""
    model = _model(seed, features, hidden, dtype)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    loader = data.loader(ds, batch_size=batch_size, seed=seed)
    step = 0
    while step < steps:
        for batch in loader:
            if step == steps:
                break
            if reference_safe_step(model, batch, nn.MSELoss(), opt) is None:
                return step
            step += 1
    return None


# ---- a stable learning rate -----------------------------------------------------------------------------------

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


def _ends(losses, steps):
    """(finite all the way, mean of the last 5) of a reference_train run."""
    ok = len(losses) == steps and math.isfinite(losses[-1])
    return ok, (sum(losses[-5:]) / 5 if ok else float("inf"))


@check("stable_lr")
def check_stable_lr(lr, seed=0, steps=60, seeds=4):
    """A rate that trains the lesson's model on `seeds` seeds from `seed`: finite, the loss below 10% of its start."""
    return stable_lr_verdict(lr, seed, steps, seeds)


def stable_lr_verdict(lr, seed=0, steps=60, seeds=4, train=reference_train, example=0.05):
    """check_stable_lr's verdict for `train(lr, seed=, steps=)` (a list of losses until the first non-finite one):
    lesson 12 runs it on its own script."""
    number = isinstance(lr, numbers.Real) and not isinstance(lr, bool)
    expect(number and math.isfinite(lr) and lr > 0, "LR", f"a positive number, such as {example:g}", repr(lr))
    lr = float(lr)
    tried = list(range(seed, seed + seeds))
    worst = None
    with standard_state():
        for s in tried:
            worst = _stable_on(lr, s, steps, tried, worst, train)
    first, tail, ratio = worst
    return (f"lr={lr:g} trains seeds {tried[0]}-{tried[-1]} in {steps} steps: at worst (seed {first}) the loss ends "
            f"at {ratio:.0%} of its start ({tail:.3g})")


def _stable_on(lr, seed, steps, tried, worst, train=reference_train):
    """Train the lesson's model at `lr` on one seed: CheckFailed unless finite and below 10%; the worst so far."""
    losses = train(lr, seed=seed, steps=steps)
    others = (f" (the check tries seeds {tried[0]}-{tried[-1]}; a rate that passes some and fails others sits on "
              f"the edge)" if len(tried) > 1 else "")
    where = f"training the lesson's model at lr={lr:g} (seed {seed}){others}"
    if not math.isfinite(losses[-1]):
        k = len(losses) - 1
        expect(False, where, f"{steps} finite steps",
               f"the loss went from {losses[0]:.3g} at step 0 to {_num(losses[k - 1]) if k else '-'} at step "
               f"{k - 1} and {losses[k]} at step {k}",
               "this rate is too high for the problem: lower it (by 3 to 10 times) and pick one well inside the "
               "range that trains, since the check also runs other seeds.")
    tail = sum(losses[-5:]) / 5
    if tail < 0.1 * losses[0]:
        ratio = tail / losses[0]
        return (seed, tail, ratio) if worst is None or ratio > worst[2] else worst
    change = 1 - tail / losses[0]
    moved = f"fell {change:.0%}" if change > 0 else f"rose {-change:.0%}"
    hint = ""
    up_ok, up = _ends(train(lr * 3, seed=seed, steps=steps), steps)
    down_ok, down = _ends(train(lr / 3, seed=seed, steps=steps), steps)
    # where both a higher and a lower rate end lower, the rate is past the edge: a BatchNorm net (lesson 12) can
    # also reach a low loss at an absurd rate, which is no advice to follow
    if up_ok and up < tail and not (down_ok and down < tail):
        hint = (f"at lr={lr * 3:g} the same run ends at {up:.3g}: this rate is too low to get there in {steps} "
                "steps. Raise it, staying well below the rates that blow up.")
    elif down_ok and down < tail:
        hint = (f"at lr={lr / 3:g} the same run ends at {down:.3g}: this rate is too high (the loss bounces "
                "instead of settling). Lower it.")
    expect(False, f"the loss after {steps} steps at lr={lr:g} (seed {seed}){others}",
           f"below 10% of where it started ({0.1 * losses[0]:.3g})",
           f"{tail:.3g} (mean of the last 5): it {moved} from {losses[0]:.3g}", hint)
