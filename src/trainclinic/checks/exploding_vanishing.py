"""Checks for lesson 05, exploding and vanishing gradients: grad_norms, clipped_step, build_deep_net.

PyTorch is the reference: its total norm (torch.nn.utils.get_total_norm from torch 2.6, the same computation
before it, through monitor.grad_norm) and torch.nn.utils.clip_grad_norm_ for clipping. Everything runs on the
CPU, seeded; `seed` drives a sweep of models, widths, depths, dtypes and loss functions.
"""
import copy
import math

import torch
from torch import nn
from torch.nn import functional as F

from .. import data, monitor
from . import CheckFailed, call, check, close, expect, flat, python_float, seeded, stale_grads

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


class _Tied(nn.Module):
    """Two layers sharing one weight (tied weights): it is a parameter of each, and counts once in the total."""

    def __init__(self, width):
        super().__init__()
        self.a = nn.Linear(width, width)
        self.b = nn.Linear(width, width)
        self.b.weight = self.a.weight

    def forward(self, x):
        return self.b(torch.tanh(self.a(x)))


class _WithScale(nn.Module):
    """A root module with a parameter of its own (named '' by named_modules()) around a body."""

    def __init__(self, body):
        super().__init__()
        self.body = body
        self.temperature = nn.Parameter(torch.tensor(1.3))

    def forward(self, x):
        return self.body(x) * self.temperature


def _random_model(seed):
    """A small random model (depth, width, activation, bias, LayerNorm, nested block, frozen, unused or zero-gradient
    layers, float32 / float64 / bfloat16) after one backward pass."""
    g = torch.Generator().manual_seed(seed)
    pick = lambda n: int(torch.randint(0, n, (1,), generator=g))
    torch.random.default_generator.manual_seed(seed)  # the CPU generator: @check restores it
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
            block = _Scaled(width, bias=pick(2) == 0)
            if pick(3) == 0:
                with torch.no_grad():
                    block.gain.zero_()  # its inner layer gets gradients that are all zero: a norm of 0.0
            layers.append(nn.Sequential(block, nn.Tanh()))
        if pick(4) == 0:
            layers.append(_Tied(width))
    if seed % 6 == 1:  # one layer object used twice (named_modules() names it once, under its first name)
        shared = nn.Linear(w, w)
        layers += [shared, nn.Tanh(), shared]
    layers.append(nn.Linear(w, 1 + pick(3)))
    model = nn.Sequential(*layers)
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    if len(linears) > 2 and pick(3) == 0:
        linears[pick(len(linears) - 1)].requires_grad_(False)  # a frozen layer: no gradient
    if pick(4) == 0 and linears[0].bias is not None:
        linears[0].bias.requires_grad_(False)  # a half-frozen layer: its weight only
    if pick(4) == 0:
        model = _WithSpare(model, width)
    if pick(4) == 0:
        model = _WithScale(model)
    dtype = {0: torch.float64, 1: torch.bfloat16}.get(pick(6), torch.float32)
    model.to(dtype)
    scale = 10.0 ** (pick(9) - 4)  # norms from 1e-4 to 1e4
    x = torch.randn(4 + pick(5), inputs, generator=g).to(dtype)
    model(x).float().pow(2).mean().mul(scale).backward()
    with_grad = [m for m in model.modules() if isinstance(m, nn.Linear) and m.weight.grad is not None]
    if pick(3) == 0 and with_grad:
        with_grad[pick(len(with_grad))].requires_grad_(False)  # frozen AFTER a backward: it still holds its .grad
    return model


def _own(module):
    return [p for p in module.parameters(recurse=False) if p.grad is not None]


def reference_norms(model):
    """(total, {module name: norm of its own gradients}) computed with PyTorch's total norm (monitor.grad_norm);
    the total counts each parameter once (model.parameters()), even one shared by two layers."""
    layers = {name: monitor.grad_norm(_own(m)) for name, m in model.named_modules() if _own(m)}
    return monitor.grad_norm(model), layers


def _kind(value):
    """What a returned value is, in a few words (type, and length for a sequence)."""
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)} ({', '.join(type(v).__name__ for v in value[:3])})"
    return type(value).__name__


@check("grad_norms")
def check_grad_norms(grad_norms, seed=0, models_to_try=24):
    """grad_norms(model) -> (total, {layer: norm}) agrees with PyTorch's total norm on many random models."""
    dtypes = set()
    for i in range(models_to_try + 2):
        model = _random_model(1000 * seed + i)
        dtype = next(model.parameters()).dtype
        dtypes.add(str(dtype).replace("torch.", ""))
        rtol = 3e-2 if dtype == torch.bfloat16 else 1e-4  # bfloat16 keeps 8 bits: norms agree to ~1%
        case = f"model {i}, {str(dtype).replace('torch.', '')}"
        if i == models_to_try:  # an exploded step: one gradient entry is inf, so the norms are inf
            with torch.no_grad():
                next(p for p in model.parameters() if p.grad is not None).grad.view(-1)[0] = float("inf")
            case += ", one gradient entry inf"
        if i == models_to_try + 1:  # before any backward pass: no gradients at all, total 0.0 and no layer entries
            model.zero_grad(set_to_none=True)
            case += ", no gradients at all (every .grad None, as before the first backward pass)"
        named = [(n, p) for n, p in model.named_parameters() if p.grad is not None]
        before = [p.grad.clone() for _, p in named]
        kinds = [(n, p, p.dtype) for n, p in model.named_parameters()]
        state = _model_state(model)
        want_total, want_layers = reference_norms(model)
        mode = torch.is_grad_enabled()
        try:
            got = call(grad_norms, model, name="grad_norms", where=f"(on {case})", restore_grad=False,
                       hints={} if named else {"": "a model with no gradients at all has a total norm of 0.0 (what "
                                               "clip_grad_norm_ returns) and no layer entries: return (0.0, {})."})
            left = torch.is_grad_enabled()
        finally:
            torch.set_grad_enabled(mode)
        expect(left == mode, f"autograd when grad_norms returns (torch.is_grad_enabled(), on {case})",
               f"{mode}, as it was", f"{left}: grad_norms switched it {'off' if mode else 'on'} for the whole process",
               "measure inside a block, `with torch.no_grad():`, which puts the mode back: "
               "torch.set_grad_enabled(False) on its own line leaves it off, and the next training step's backward() "
               "then raises")
        _expect_dtypes_untouched(kinds, case)
        _expect_model_untouched(model, state, case)
        expect(isinstance(got, tuple) and len(got) == 2 and isinstance(got[1], dict), "grad_norms(model)",
               "a pair, the tuple (total, {layer name: norm})", _kind(got),
               "return total, layers (a tuple), not a list." if isinstance(got, list) and len(got) == 2 else "")
        _expect_grads_untouched(named, before, want_total, case)
        total, layers = got
        odd = [k for k in layers if not isinstance(k, str)]
        expect(not odd, "the keys of the layers dict", "each layer's name, a str from model.named_modules()",
               f"{type(odd[0]).__name__ if odd else ''} keys ({str(odd[0])[:60] if odd else ''})",
               "key each norm by the module's name (for name, module in model.named_modules()), not by the module "
               "object: names are what a log or a plot can show")
        frozen = {n for n, m in model.named_modules() if any(not p.requires_grad for p in _own(m))}
        frozen_hint = (f"{sorted(frozen)} hold parameters with requires_grad=False that still have a .grad (frozen "
                       "after a backward pass): skip only the parameters whose .grad is None; clip_grad_norm_ counts "
                       "every .grad it finds.")
        names_hint = ("iterate model.named_modules(), take each module's own parameters (parameters(recurse=False)) "
                      "and skip those whose .grad is None (frozen or unused); a layer whose gradients are all zero "
                      "still has gradients: its norm is 0.0.")
        first_name, again = {}, set()
        for n, m in model.named_modules(remove_duplicate=False):
            if id(m) in first_name:
                again.add(n)  # a module object already named: used twice in the model
            first_name.setdefault(id(m), n)
        if set(layers) > set(want_layers) and set(layers) - set(want_layers) <= again:
            twice = sorted(set(layers) - set(want_layers))
            names_hint = (f"{twice} name a layer object already listed under another name (it is used twice in the "
                          "model): model.named_modules() names each module once, under its first name; count "
                          "it once.")
        root = type(model).__name__
        if "" in want_layers and "" not in layers and root in layers:
            names_hint = (f"the model itself ({root}) has a parameter of its own: named_modules() names the root module "
                          "'' (the empty string), not by its class.")
        missing = set(want_layers) - set(layers)
        if missing == {""} and set(layers) <= set(want_layers):
            own = [n for n, p in model.named_parameters(recurse=False) if p.grad is not None]
            names_hint = (f"the model itself ({root}) has parameters of its own ({', '.join(own)}): "
                          "model.named_modules() yields it first, named '' (the empty string); it needs its entry too.")
        if missing and missing <= frozen and set(layers) <= set(want_layers):
            names_hint = frozen_hint
        expect(set(layers) == set(want_layers), f"the layer names ({case})",
               f"one entry per module with gradients of its own: {sorted(want_layers)}", f"{sorted(layers)}",
               names_hint)
        for name, want in want_layers.items():
            value = _float(layers[name], f"the norm of layer {name!r} ({case})")
            trainable = monitor.grad_norm([p for p in _own(dict(model.named_modules())[name]) if p.requires_grad])
            expect(close(value, want, rtol=rtol, atol=1e-12), f"the gradient norm of layer {name!r} ({case})",
                   f"{want:.6g}", f"{value:.6g}",
                   frozen_hint if name in frozen and close(value, trainable, rtol=rtol, atol=1e-12) else
                   "the L2 norm of the layer's GRADIENTS (p.grad, not p), weight and bias together: "
                   "sqrt of the sum of the squares of all their entries.")
        total = _float(total, f"the total norm ({case})",
                       "a model with no gradients gives (0.0, {}), as clip_grad_norm_ returns the float 0.0" if not named else "")
        shared = len({id(p) for m in model.modules() for p in _own(m)}) < sum(len(_own(m)) for m in model.modules())
        from_layers = sum(v * v for v in want_layers.values()) ** 0.5
        total_hint = ("norms add like the sides of a right triangle: total = sqrt(sum of squared layer norms), "
                      "not the sum of the layer norms.")
        if frozen and close(total, monitor.grad_norm([p for p in model.parameters() if p.grad is not None
                                                       and p.requires_grad]), rtol=rtol, atol=1e-12):
            total_hint = frozen_hint
        elif shared and close(total, from_layers, rtol=rtol, atol=1e-12):
            total_hint = ("this model has a weight shared by two layers (tied weights): it is in both layers' entries "
                          "but counts once in the total; compute the total from model.parameters() (each parameter "
                          "once), not from the layer norms.")
        expect(close(total, want_total, rtol=rtol, atol=1e-12), f"the total gradient norm ({case})",
               f"{want_total:.6g} (PyTorch's total norm, as clip_grad_norm_ measures it)", f"{total:.6g}", total_hint)
    # one model read twice, its gradients changed in between (as a training loop reads it at every step): the norms
    # of the gradients as they are at each call
    model = _random_model(1000 * seed + 1)
    rtol = 3e-2 if next(model.parameters()).dtype == torch.bfloat16 else 1e-4
    for k, factor in enumerate((1.0, 3.0)):
        with torch.no_grad():
            for p in model.parameters():
                if p.grad is not None:
                    p.grad.mul_(factor)
        want_total, want_layers = reference_norms(model)
        got = call(grad_norms, model, name="grad_norms", where=f"(model 1 again, call {k + 1} of 2 on it)")
        total = _float(got[0], f"the total norm (model 1, call {k + 1} of 2 on it)")
        expect(close(total, want_total, rtol=rtol, atol=1e-12), f"the total gradient norm at call {k + 1} of 2 on "
               "one model, its gradients multiplied by 3 in between (as the next step's gradients replace them)",
               f"{want_total:.6g}, the gradients' norm now", f"{total:.6g}",
               "the value of the first call: measure the gradients at every call, keep nothing from an earlier one "
               "(no cache keyed on the model)" if k and close(total, want_total / 3, rtol=rtol, atol=1e-12) else "")
    return (f"total and per-layer norms equal PyTorch's total norm on {models_to_try + 2} random models "
            f"({', '.join(sorted(dtypes))}; frozen, shared, inf and no gradients), Python floats, gradients and "
            "dtypes untouched")


def _float(value, what, why=""):
    """`value` as a float when it is a Python float; else CheckFailed (a tensor, and an int too: the text asks for
    Python floats, as `.item()` of a norm gives)."""
    number = python_float(value, what)
    expect(isinstance(value, float), what, "a Python float" + (f" ({why})" if why else ""),
           f"the {type(value).__name__} {value!r}", f"return {float(value)!r}, not {value!r}: the text asks for Python "
           "floats, whatever the value.")
    return number


def _model_state(model):
    """What a measure must leave as it found it: each parameter's values and requires_grad, each module's mode."""
    params = [(n, p, p.detach().clone(), p.requires_grad) for n, p in model.named_parameters()]
    modes = [(n or type(m).__name__, m, m.training) for n, m in model.named_modules()]
    return params, modes


def _expect_model_untouched(model, state, case):
    """The parameters (values, requires_grad) and every module's training flag as they were before grad_norms."""
    params, modes = state
    flipped = [(n, was) for n, p, _, was in params if p.requires_grad != was]
    if flipped:
        on = [n for n, was in flipped if not was]
        off = [n for n, was in flipped if was]
        observed = "; ".join(part for part in (
            f"{len(on)} frozen parameter{'s' * (len(on) > 1)} (requires_grad=False) made trainable, e.g. {on[0]!r}"
            if on else "",
            f"{len(off)} trainable parameter{'s' * (len(off) > 1)} frozen, e.g. {off[0]!r}" if off else "") if part)
        expect(False, f"the parameters' requires_grad after grad_norms ({case})",
               f"as before the call ({sum(not was for *_, was in params)} of {len(params)} frozen)", observed,
               "grad_norms set requires_grad itself and did not put back what each parameter had (a frozen layer "
               "comes back trainable, and the next optimizer step would train it): measure without touching "
               "requires_grad; reading p.grad needs no autograd (torch.no_grad() for the arithmetic, if any)."
               if on else "")
    changed = [n for n, p, before, _ in params if p.dtype == before.dtype and not torch.equal(p.detach(), before)]
    expect(not changed, f"the parameters' values after grad_norms ({case})", "unchanged (measure, do not update)",
           f"{len(changed)} of {len(params)} parameters changed (e.g. {changed[0]!r})" if changed else "")
    switched = [(n, was) for n, m, was in modes if m.training != was]
    if switched:
        n, was = switched[0]
        expect(False, f"the model's mode after grad_norms ({case})",
               f"as it was ({'training' if modes[0][2] else 'eval'} mode, every module)",
               f"{len(switched)} of {len(modes)} modules switched to {'eval' if was else 'training'} mode (e.g. {n})",
               "grad_norms changed the model's mode (model.eval() / model.train()): measuring needs neither. A "
               "dashboard calls it inside a training loop: the next steps would run in that mode (Dropout off, "
               "BatchNorm frozen, in eval mode).")


def _expect_dtypes_untouched(kinds, case):
    """Every parameter (and its .grad) keeps its dtype: a measure does not convert the model."""
    moved = [(n, d, p) for n, p, d in kinds if p.dtype != d or (p.grad is not None and p.grad.dtype != d)]
    if not moved:
        return
    n, d, p = moved[0]
    was = str(d).replace("torch.", "")
    now = str(p.dtype).replace("torch.", "")
    grad = f", its .grad {str(p.grad.dtype).replace('torch.', '')}" if p.grad is not None else ""
    expect(False, f"the dtypes of the model's parameters and gradients after grad_norms ({case})",
           f"unchanged ({was})", f"{len(moved)} of {len(kinds)} parameters converted (e.g. {n!r}: {was} -> {now}{grad})",
           "grad_norms converted the model itself (model.float(), model.to(dtype), p.data = ...): measure without "
           "changing it; for float32 arithmetic, upcast a copy of each gradient (p.grad.float()).")


def _expect_grads_untouched(named, before, total, case):
    """Every .grad exactly as it was before grad_norms (a measure reads, it does not write)."""
    changed = [(n, b, p.grad) for (n, p), b in zip(named, before)
               if p.grad is None or p.grad.dtype != b.dtype or not torch.equal(p.grad, b)]
    if not changed:
        return
    name, b, a = changed[0]
    if a is None:
        how = f"{name!r}.grad is now None"
    else:
        nan = int(a.isnan().sum()) - int(b.isnan().sum())
        how = (f"{name!r}: norm {float(b.double().norm()):.4g} -> {float(a.double().norm()):.4g}"
               + (f", {nan} of its {a.numel()} entries now nan" if nan > 0 else ""))
    all_nan = all(a is not None and bool(a.isnan().all()) for _, _, a in changed) and len(changed) == len(named)
    hint = ("every gradient became nan, and this model's total norm is inf: scaling by max_norm / total (what "
            "clip_grad_norm_ does, even with max_norm=inf) multiplies them by inf / inf = nan. Measure with a "
            "function that only reads the gradients (torch.linalg.vector_norm, torch.nn.utils.get_total_norm)."
            if all_nan and math.isinf(total) else "")
    expect(False, f"the gradients after grad_norms ({case})", "unchanged (measure, do not clip or zero them)",
           f"modified: {len(changed)} of {len(named)} parameters' .grad changed (e.g. {how})", hint)


LOSSES = {"CrossEntropyLoss()": lambda: nn.CrossEntropyLoss(),
          "CrossEntropyLoss(label_smoothing=0.1)": lambda: nn.CrossEntropyLoss(label_smoothing=0.1),
          "CrossEntropyLoss(reduction='sum')": lambda: nn.CrossEntropyLoss(reduction="sum")}


def clip_case(seed, depth=None):
    """The seed's clipped_step case: depth, width, batch size, dtype and loss function (seed 0: the lesson's)."""
    if seed == 0:
        case = {"depth": 6, "width": 24, "batch_size": 32, "dtype": torch.float32, "loss": "CrossEntropyLoss()"}
    else:
        g = torch.Generator().manual_seed(seed)
        pick = lambda seq: seq[int(torch.randint(0, len(seq), (1,), generator=g))]
        case = {"depth": pick([4, 5, 6, 7, 8]), "width": pick([12, 16, 24, 32]), "batch_size": pick([8, 17, 32, 40]),
                "dtype": pick([torch.float32, torch.float32, torch.float64]), "loss": pick(sorted(LOSSES))}
    if depth is not None:
        case["depth"] = depth
    return case


def _exploding_setup(seed, depth=6, gain=3.0, batch_size=32, width=24, dtype=torch.float32):
    """A ReLU MLP with a large init (big gradients) and a batch of blobs."""
    model, batch = seeded(seed, batch_size, hidden=width, depth=depth, dtype=dtype)
    with torch.no_grad():
        for layer in model.modules():
            if isinstance(layer, nn.Linear):
                layer.weight.mul_(gain)
    return model, batch


class _Counted:
    """The check's loss function, counting its calls (so a message can say whether it was used)."""

    def __init__(self, fn):
        self.fn, self.calls = fn, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.fn(*args, **kwargs)


def _two_groups(model):
    """SGD with two parameter groups, as for a head trained at its own rate: the last nn.Linear, and the rest."""
    head = {id(p) for p in list(_linears(model))[-1].parameters()}
    rest = [p for p in model.parameters() if id(p) not in head]
    return torch.optim.SGD([{"params": rest}, {"params": [p for p in model.parameters() if id(p) in head],
                                                "lr": 0.005}], lr=0.01)


def _run_clipped(clipped_step, model, batch, loss_fn, max_norm):
    """Call the learner's step with a stale gradient in place; return (result, gradients seen at optimizer.step)."""
    opt = _two_groups(model)
    if isinstance(loss_fn, _Counted):
        loss_fn.calls = 0
    stale_grads(model, 0.25)  # left over from a previous step
    seen = []

    def hook(optimizer, args, kwargs):
        # after the step: the gradients the update used. Not a pre-hook: optimizer.step(closure) runs the closure
        # (zero_grad, backward, clipping) inside step(), after the pre-hooks and before the update.
        seen.append([p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()])

    handle = opt.register_step_post_hook(hook)
    grad_mode = torch.is_grad_enabled()
    try:
        got = call(clipped_step, model, batch, loss_fn, opt, max_norm, name="clipped_step", restore_grad=False)
        grad_after = torch.is_grad_enabled()
    finally:
        handle.remove()
        torch.set_grad_enabled(grad_mode)
    expect(grad_after == grad_mode, "autograd when clipped_step returns (torch.is_grad_enabled())",
           f"{'on' if grad_mode else 'off'}, as it was before the call (the next training step's backward() needs it)",
           f"{'on' if grad_after else 'off'}: the next step's loss would have no grad_fn, and its backward() would raise",
           "clipped_step switched autograd off and left it off (e.g. torch.set_grad_enabled(False) as a statement: it "
           "holds for everything after it, the caller's next steps included); wrap only the lines that need it in `with torch.no_grad():`, which switches it back "
           "on leaving the block." if not grad_after else "")
    after = [p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]
    _plain_step_after(opt, model, max_norm)
    return got, seen, after


def _plain_step_after(opt, model, max_norm):
    """After clipped_step returned, a plain optimizer.step() of the caller's uses the gradients as they are: nothing
    clipped_step registered on the optimizer (a step hook) is left to act on the caller's later steps."""
    params = list(model.parameters())
    total = sum(p.numel() for p in params)
    big = [torch.full_like(p, 100 * max_norm / total ** 0.5) for p in params]  # norm 100 x max_norm
    for p, g in zip(params, big):
        p.grad = g.clone()
    seen = []
    handle = opt.register_step_post_hook(lambda o, a, k: seen.append([p.grad.detach().clone() for p in params]))
    try:
        opt.step()
    except Exception as exc:  # noqa: BLE001 - a hook left behind that fails outside clipped_step
        raise CheckFailed(f"a plain optimizer.step() of the caller's after clipped_step returned: expected it to run, "
                          f"observed {type(exc).__name__}: {str(exc)[:200]}\nHint: something clipped_step registered "
                          "on the optimizer still runs at every step; remove it before returning "
                          "(handle.remove()).") from None
    finally:
        handle.remove()
    changed = not seen or not all(torch.equal(a, b) for a, b in zip(seen[0], big))
    expect(not changed, "the gradients a plain optimizer.step() of the caller's used, after clipped_step returned "
           f"(set to a norm of {100 * max_norm:.4g})", "those gradients as they are: clipped_step leaves the "
           "optimizer as it found it", "other gradients (clipped): something clipped_step registered on the "
           "optimizer still acts on every later step", "clip between loss.backward() and optimizer.step() inside "
           "clipped_step; a hook you register on the optimizer must be removed before returning (handle.remove()).")


@check("clipped_step")
def check_clipped_step(clipped_step, seed=0, depth=None):
    """clipped_step(...) -> (loss, norm before clipping); at optimizer.step the gradients are clipped, same direction."""
    c = clip_case(seed, depth)
    model, batch = _exploding_setup(seed, c["depth"], batch_size=c["batch_size"], width=c["width"], dtype=c["dtype"])
    loss_fn = _Counted(LOSSES[c["loss"]]())
    ref = copy.deepcopy(model)
    ref_loss = loss_fn(ref(batch[0]), batch[1])
    ref_loss.backward()
    ref_grads = [p.grad.detach().clone() for p in ref.parameters()]
    ref_norm = monitor.grad_norm(ref)
    expect(math.isfinite(ref_norm) and ref_norm > 1.0, "(check setup) the reference gradient norm", "finite and > 1", ref_norm)
    flat_ref = flat(ref_grads)
    setup = (f"depth {c['depth']}, width {c['width']}, batch of {c['batch_size']}, "
             f"{str(c['dtype']).replace('torch.', '')}, loss_fn=nn.{c['loss']}")
    for factor in (0.1, 4.0):
        max_norm = factor * ref_norm
        trial = copy.deepcopy(model)
        got, seen, after = _run_clipped(clipped_step, trial, batch, loss_fn, max_norm)
        case = f"with max_norm={max_norm:.4g} (the gradient norm is {ref_norm:.4g}; {setup})"
        _expect_loss_fn_used(loss_fn, case)
        expect(len(seen) == 1, f"optimizer.step() calls {case}", "exactly 1", len(seen),
               "the norm is under max_norm here, and optimizer.step() was not called: below the ceiling clipping "
               "changes nothing, but the step is still a training step; call optimizer.step() every time."
               if factor > 1 and not seen else "")
        vec = flat(seen[0])
        norm = float(vec.norm())
        cos = float(vec @ flat_ref / (vec.norm() * flat_ref.norm() + 1e-30))
        expect(cos > 1 - 1e-6, f"the gradient's direction at optimizer.step() {case}",
               "the same as before clipping (cosine similarity 1)", f"cosine similarity {cos:.6f}",
               _direction_hint(seen[0], ref_grads, trial, loss_fn))
        if norm > max_norm * (1 + 1e-4):
            after_norm = float(flat(after).norm())
            returned = got[1] if isinstance(got, (tuple, list)) and len(got) == 2 else None
            returned = float(returned) if isinstance(returned, (float, int)) or torch.is_tensor(returned) and returned.numel() == 1 else None
            if close(after_norm, max_norm, rtol=1e-3):
                hint = ("the gradients are clipped when clipped_step returns, but optimizer.step() had already used "
                        "them unclipped: clip AFTER loss.backward() and BEFORE optimizer.step().")
            elif returned is not None and returned < 1e-6 * ref_norm:
                hint = (f"the norm you report is {returned:.3g}: clipping ran before loss.backward() created this "
                        "step's gradients. Clip AFTER loss.backward() and BEFORE optimizer.step().")
            else:
                hint = ""  # the gradients were not clipped at all; the check cannot tell why
            expect(False, f"the total gradient norm at optimizer.step() {case}", f"at most max_norm = {max_norm:.4g}",
                   f"{norm:.4g}, above the ceiling (and {after_norm:.4g} when clipped_step returned)", hint)
        if factor < 1:
            expect(close(norm, max_norm, rtol=1e-3), f"the total gradient norm at optimizer.step() {case}",
                   f"clipped to max_norm = {max_norm:.4g}", f"{norm:.4g}",
                   "scale by max_norm / total_norm: the clipped gradient has norm max_norm exactly.")
        else:
            expect(close(norm, ref_norm, rtol=1e-4), f"the total gradient norm at optimizer.step() {case}",
                   f"unchanged ({ref_norm:.4g}): it is already under the ceiling", f"{norm:.4g}",
                   "clipping only ever scales DOWN: the factor is min(1, max_norm / total_norm).")
        expect(isinstance(got, tuple) and len(got) == 2, "clipped_step's return value",
               "a pair, the tuple (loss, grad_norm)", f"{_kind(got)}: {repr(got)[:80]}",
               "return loss, norm (a tuple), not a list." if isinstance(got, list) and len(got) == 2 else "")
        loss = _float(got[0], f"the returned loss {case}")
        reported = _float(got[1], f"the returned grad_norm {case}")
        expect(close(reported, ref_norm, rtol=1e-4), f"the returned grad_norm {case}",
               f"{ref_norm:.5g}, the total norm BEFORE clipping", f"{reported:.5g}",
               "report the norm measured before clipping (clip_grad_norm_ returns it): after clipping it is never "
               "above max_norm, so a dashboard of clipped norms cannot show an explosion.")
        expect(close(loss, ref_loss.item(), rtol=1e-4), f"the returned loss {case}", f"{ref_loss.item():.5g}", f"{loss:.5g}")
    _zero_gradients(clipped_step, model, batch, loss_fn, setup)
    _nonfinite_gradients(clipped_step, model, batch, loss_fn, setup)
    return (f"gradients clipped to max_norm with their direction kept, left alone under it, all-zero ones too; "
            f"pre-clip norm {ref_norm:.3g} and loss reported as Python floats ({setup})")


def _direction_hint(seen, ref_grads, model, loss_fn):
    """Why the gradients at optimizer.step() point elsewhere, when what was observed tells (else '')."""
    if loss_fn.calls == 0:
        return "the loss_fn passed in was never called: compute the loss with the loss_fn you are given."
    stale = [g + 0.25 for g in ref_grads]  # what backward() gives on top of the 0.25 left in p.grad
    a, b = flat(seen), flat(stale)
    if float(a @ b / (a.norm() * b.norm() + 1e-30)) > 1 - 1e-6:
        return ("the gradients at optimizer.step() are those of this batch plus the 0.25 left in p.grad from a "
                "previous step: call optimizer.zero_grad() before loss.backward().")
    names = [n for n, _ in model.named_parameters()]
    kept, scaled = [], []
    for name, g, r in zip(names, seen, ref_grads):
        g, r = g.double().reshape(-1), r.double().reshape(-1)
        if float(r.norm()) == 0:
            continue
        cos = float(g @ r / (g.norm() * r.norm() + 1e-30))
        if cos < 1 - 1e-6:
            return (f"even within one parameter ({name!r}) the gradient at optimizer.step() is not a multiple of the "
                    "one backward() gave (its values were changed one by one): scale ALL gradients by one common "
                    "factor, max_norm / total_norm (torch.nn.utils.clip_grad_norm_; clip_grad_value_ clips each "
                    "value on its own).")
        (kept if close(float(g.norm()), float(r.norm()), rtol=1e-4) else scaled).append((name, float(g.norm() / r.norm())))
    if kept and scaled:
        return (f"{len(scaled)} parameters were scaled and {len(kept)} left as they were (e.g. {kept[0][0]!r}): clip "
                "the total norm of ALL the model's gradients together (model.parameters(), or every one of "
                "optimizer.param_groups), by one common factor.")
    factors = sorted(f for _, f in scaled)
    if len(factors) > 1 and not close(factors[0], factors[-1], rtol=1e-3):
        return (f"each parameter was scaled by its own factor ({factors[0]:.3g} to {factors[-1]:.3g}): scale ALL "
                "gradients by one common factor, max_norm / total_norm (torch.nn.utils.clip_grad_norm_("
                "model.parameters(), max_norm)), not each parameter on its own.")
    return ""


def _expect_loss_fn_used(loss_fn, case):
    expect(loss_fn.calls > 0, f"the loss of clipped_step {case}", "computed with the loss_fn passed in",
           "loss_fn never called", "use the loss_fn you are given: the checks pass other losses too.")


def _zero_gradients(clipped_step, model, batch, loss_fn, setup):
    """A step whose gradients are all zero (total norm 0, under any ceiling): left alone, norm 0.0 reported."""
    trial = copy.deepcopy(model)
    zero_loss = _Counted(lambda output, target: loss_fn.fn(output, target) * 0.0)
    case = f"with a loss_fn whose gradients are all zero (the loss times 0: total norm 0.0; max_norm=1; {setup})"
    got, seen, after = _run_clipped(clipped_step, trial, batch, zero_loss, 1.0)
    _expect_loss_fn_used(zero_loss, case)
    expect(len(seen) == 1, f"optimizer.step() calls {case}", "exactly 1", len(seen))
    norm = float(flat(seen[0]).norm())
    expect(norm == 0.0, f"the total gradient norm at optimizer.step() {case}", "0.0 (zero gradients left alone)",
           f"{norm:.4g}")
    expect(isinstance(got, tuple) and len(got) == 2, "clipped_step's return value", "a pair, the tuple (loss, grad_norm)",
           f"{_kind(got)}: {repr(got)[:80]}")
    reported = _float(got[1], f"the returned grad_norm {case}")
    expect(reported == 0.0, f"the returned grad_norm {case}", "0.0", f"{reported:.4g}")


def _nonfinite_gradients(clipped_step, model, batch, loss_fn, setup):
    """A step whose gradients are not finite (an exploded step): the norm reported is the non-finite one.

    The step itself may be taken (clip_grad_norm_ scales by max_norm / inf) or skipped (the troubleshooting table's
    fix), and clip_grad_norm_(..., error_if_nonfinite=True) raising PyTorch's own error is a reading too; a finite
    number would hide the explosion from the dashboard."""
    trial = copy.deepcopy(model)

    def poisoned(output, target):
        if output.requires_grad:  # one entry of d(loss)/d(output) becomes inf: every gradient below is inf or nan
            output.register_hook(lambda g: g.index_put((torch.zeros((), dtype=torch.long),) * g.dim(),
                                                       torch.tensor(float("inf"), dtype=g.dtype)))
        return loss_fn.fn(output, target)

    bad_loss = _Counted(poisoned)
    case = (f"with a loss_fn whose gradients are not finite (one entry of d(loss)/d(output) is inf, the loss itself "
            f"finite; max_norm=1; {setup})")
    try:
        got, seen, _ = _run_clipped(clipped_step, trial, batch, bad_loss, 1.0)
    except CheckFailed as exc:
        if "is non-finite, so it cannot be clipped" in str(exc):
            return  # clip_grad_norm_(..., error_if_nonfinite=True): PyTorch's own error names the exploded step
        raise
    _expect_loss_fn_used(bad_loss, case)
    expect(len(seen) <= 1, f"optimizer.step() calls {case}", "at most 1 (taken, or skipped)", len(seen))
    expect(isinstance(got, tuple) and len(got) == 2, "clipped_step's return value", "a pair, the tuple (loss, grad_norm)",
           f"{_kind(got)}: {repr(got)[:80]}")
    reported = _float(got[1], f"the returned grad_norm {case}")
    expect(not math.isfinite(reported), f"the returned grad_norm {case}",
           "inf or nan, the total norm before clipping (what clip_grad_norm_ returns)", f"{reported:.4g}",
           "the step was skipped (no optimizer.step()) and a finite number reported: report the norm measured "
           "before clipping on a skipped step too; a finite number there hides the explosion from the dashboard."
           if not seen else "")


def deep_case(seed, depth=None, hidden=None):
    """The seed's build_deep_net case (inputs, hidden, outputs, depth); seed 0 is the lesson's (8, 32, 3, 10)."""
    if seed == 0:
        case = {"inputs": 8, "hidden": 32, "outputs": 3, "depth": 10}
    else:
        g = torch.Generator().manual_seed(seed)
        pick = lambda seq: seq[int(torch.randint(0, len(seq), (1,), generator=g))]
        # odd seeds: narrow layers (12, 14), where an init scaled for the lesson's width 32 makes the gradient vanish
        case = {"inputs": pick([6, 7, 9, 10]), "hidden": pick([12, 14] if seed % 2 else [16, 20, 24, 28, 36, 40]),
                "outputs": pick([2, 3, 4]),
                "depth": pick([8, 9, 10, 11, 12])}
    if depth is not None:
        case["depth"] = depth
    if hidden is not None:
        case["hidden"] = hidden
    return case


def _deep_net_data(seed, inputs=8, outputs=3):
    return data.blobs(n=256, features=inputs, classes=outputs, spread=0.7, seed=seed).tensors


def _linears(model):
    return [m for m in model.modules() if isinstance(m, nn.Linear)]


def _eval_hint(model):
    """When the returned net has BatchNorm layers in eval mode: the likely cause (else '')."""
    off = sorted({type(m).__name__ for m in model.modules() if not m.training
                  and isinstance(m, nn.modules.batchnorm._BatchNorm)})
    if not off:
        return ""
    return (f"the net came back in eval mode ({', '.join(off)} with training=False), and the check trains it as "
            "returned: in eval mode BatchNorm normalises with its running statistics (mean 0, variance 1 at the "
            "start: no normalisation at all) and never updates them. Return it in training mode (drop the .eval()).")


def _vanish_hint(model, linears):
    """Why the gradient does not reach the first layer, from what the model holds (a zero layer, squashing)."""
    zero = [i for i, m in enumerate(linears) if not bool(m.weight.detach().ne(0).any())]
    if zero:
        which = "the output layer" if zero[-1] == len(linears) - 1 else f"nn.Linear number {zero[-1]} (from 0)"
        return (f"the weight of {which} is all zeros: the gradient passed back through it (weight.T @ grad) is zero, "
                "so no layer below it gets any; initialise it with small random values like the others.")
    squash = sorted({type(m).__name__ for m in model.modules() if isinstance(m, (nn.Sigmoid, nn.Tanh))})
    if squash:
        return (f"the gradient still vanishes on its way back: {' and '.join(squash)} squash it at every layer; use "
                "ReLU with He (Kaiming) initialisation, residual connections (x + f(x)) or normalisation "
                "(BatchNorm/LayerNorm).")
    normed = any(isinstance(m, (nn.modules.batchnorm._BatchNorm, nn.LayerNorm, nn.GroupNorm)) for m in model.modules())
    hidden = [m for m in linears[1:-1] if m.weight.numel() > 1]
    if hidden and not normed and any(isinstance(m, nn.ReLU) for m in model.modules()):
        stds = [(m.weight.detach().double().std().item(), (2 / m.in_features) ** 0.5, m.in_features) for m in hidden]
        if all(s < 0.8 * he for s, he, _ in stds):
            s, he, fan = stds[0]
            return (f"the gradient shrinks on its way back to the first layer, and the hidden nn.Linear weights have "
                    f"std {s:.3g}, below He initialisation's sqrt(2 / fan_in) = sqrt(2 / {fan}) = {he:.3g} for their "
                    f"fan-in {fan}: each ReLU layer shrinks the signal. Scale each layer's init by its own fan-in "
                    f"(nn.init.kaiming_normal_), or use residual connections or normalisation.")
    return ("the gradient shrinks on its way back to the first layer; the classic fixes: ReLU with He (Kaiming) "
            "initialisation (nn.init.kaiming_normal_), residual connections (x + f(x)) or normalisation "
            "(BatchNorm/LayerNorm).")


@check("build_deep_net")
def check_build_deep_net(build_deep_net, seed=0, depth=None, hidden=None, steps=80, lr=0.05):
    """build_deep_net(inputs, hidden, outputs, depth): gradients reach the first layer, and plain SGD trains it."""
    c = deep_case(seed, depth, hidden)
    inputs, hidden, outputs, depth = c["inputs"], c["hidden"], c["outputs"], c["depth"]
    args = f"build_deep_net(inputs={inputs}, hidden={hidden}, outputs={outputs}, depth={depth})"
    torch.manual_seed(seed)
    model = call(build_deep_net, inputs, hidden, outputs, depth, name="build_deep_net")
    expect(isinstance(model, nn.Module), f"{args}'s result", "an nn.Module", type(model).__name__)
    linears = _linears(model)
    expect(len(linears) >= depth + 1, f"the number of nn.Linear layers of {args}",
           f"at least depth + 1 = {depth + 1} (keep the depth)", len(linears),
           "the task is to make a DEEP net trainable, not to make it shallow.")
    widths = [m.out_features for m in linears]
    wide = sum(w == hidden for w in widths)
    others = sorted(set(widths[:-1]) - {hidden})
    expect(wide >= depth, f"the nn.Linear layers of width hidden={hidden} in {args}", f"at least depth = {depth}",
           f"{wide} (output widths of the nn.Linear layers: {widths})",
           f"the hidden width is {others[0]} whatever `hidden` says: build the layers from the arguments, "
           "not from fixed numbers." if len(others) == 1 and wide == 0 else "")
    x, y = _deep_net_data(seed, inputs, outputs)
    # trained as returned (no model.train() here): a net returned in eval mode is trained in eval mode
    out = call(model, x, name="the model's forward", where=f"(the model of {args}, on inputs of shape {tuple(x.shape)})")
    expect(torch.is_tensor(out) and tuple(out.shape) == (len(x), outputs), f"the output of {args}",
           f"shape {(len(x), outputs)}", tuple(out.shape) if torch.is_tensor(out) else type(out).__name__)
    model.zero_grad(set_to_none=True)
    call(lambda: F.cross_entropy(model(x), y).backward(), name="forward and backward")
    first, last = (monitor.grad_norm(list(m.parameters())) for m in (linears[0], linears[-1]))
    r = first / last if last > 0 else float("nan")
    expect(math.isfinite(r) and r >= 1e-2, f"first-layer / last-layer gradient norm ({args})",
           "at least 1e-2 (within two orders of magnitude)", f"{r:.2e} (first {first:.2e}, last {last:.2e})",
           _eval_hint(model) or _vanish_hint(model, linears))
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = call(lambda: F.cross_entropy(model(x), y), name="the model's forward")
        loss.backward()
        opt.step()
        losses.append(loss.item())
    prior = torch.bincount(y, minlength=outputs).double() / len(y)
    constant = float(-(prior * prior.log()).sum())  # the loss of always guessing the class frequencies
    expect(math.isfinite(losses[-1]) and losses[-1] < 0.5 * constant,
           f"the loss after {steps} plain SGD steps (lr={lr}, {args})", f"below {0.5 * constant:.3f} (half of "
           f"{constant:.3f}, the loss of a constant guess)", f"{losses[-1]:.3f} (it started at {losses[0]:.3f})",
           _eval_hint(model) or (_vanish_hint(model, linears) if r < 0.1 else ""))
    return (f"first/last layer gradient ratio {r:.2g}; {steps} SGD steps took the loss "
            f"{losses[0]:.3g} -> {losses[-1]:.3g} ({args})")
