"""Checks for lesson 10, autograd errors: sgd_update, train (runs, hidden state carried and detached, gradients)
and validate.

Everything is watched from outside, never read: the check's model records, through forward pre-hooks and forward
hooks, the weights and the hidden state going into each chunk and the hidden state coming out; the reference
gradient of each step is recomputed from those weights and that (detached) hidden state, and compared with the
step the weights actually took. `train` runs with the reference `sgd_update` in place of the learner's, so that
each check grades its own cell. `seed` drives a sweep: sizes, learning rates, float32 and float64.
"""
import contextlib
import copy
import functools
import random
import weakref

import torch
from torch.nn import functional as F

from .. import graphs
from . import CheckFailed, call, check, devices, expect, python_float

__all__ = ["check_sgd_update", "check_train", "check_hidden_detached", "check_train_gradients", "check_validate",
           "reference_sgd_update", "reference_train", "reference_validate"]

_DETACH = ("the hidden state carried from the previous chunk still holds that chunk's graph, which backward() already "
           "freed: h = h.detach() before it goes into the next chunk (not retain_graph=True, which keeps every "
           "earlier chunk's graph and backpropagates through all of them).")
_NO_GRAD_UPDATE = ("update the parameters under `with torch.no_grad():` (p -= lr * p.grad): outside it, an in-place "
                   "change of a leaf that requires grad is refused.")

HINTS = {  # the lesson's own hints, by a fragment of the exception's text (the shared ones come after)
    "backward through the graph a second time": _DETACH,
    "a view of a leaf Variable that requires grad": _NO_GRAD_UPDATE,
    "a leaf Variable that requires grad is being used in an in-place operation": _NO_GRAD_UPDATE,
    "modified by an inplace operation": "a tensor that backward needs was changed in place before backward() ran. "
    "In a training loop it is usually retain_graph=True: the kept graph of the earlier chunks saved the weights, "
    "and the update changed them in place since. Do not keep the graph: h = h.detach() before the next chunk "
    "(elsewhere: +=, an inplace=True layer, x[...] = ...: use the out-of-place form).",
    "'float' and 'NoneType'": "a .grad was None: `p = p - lr * p.grad` makes a new, non-leaf tensor whose .grad is "
    "never filled (or a parameter without a gradient was not skipped); update in place under torch.no_grad(), and "
    "skip tensors whose .grad is None.",
    "'NoneType' and 'float'": "a .grad was None: skip tensors whose .grad is None (and update in place under "
    "torch.no_grad(), so that each parameter keeps its .grad).",
}


# ---- the reference ----------------------------------------------------------------------------------------------

def reference_sgd_update(params, lr):
    """p <- p - lr * p.grad in place under no_grad, for every p with a gradient."""
    with torch.no_grad():
        for p in params:
            if p.grad is not None:
                p -= lr * p.grad


def reference_train(model, batches, lr):
    """Truncated BPTT, hidden state carried and detached, one hand-written SGD step per chunk; the losses."""
    losses, h = [], None
    for x, y in batches:
        model.zero_grad()
        if h is not None:
            h = h.detach()
        pred, h = model(x, h)
        loss = F.mse_loss(pred, y)
        loss.backward()
        reference_sgd_update(model.parameters(), lr)
        losses.append(loss.item())
    return losses


def reference_validate(model, batches):
    """The mean MSE over the chunks, hidden state carried, under no_grad."""
    total, h = 0.0, None
    with torch.no_grad():
        for x, y in batches:
            pred, h = model(x, h)
            total += F.mse_loss(pred, y).item()
    return total / len(batches)


# ---- cases --------------------------------------------------------------------------------------------------------

def _case(seed):
    """The sizes, rate and dtype for a seed: seed 0 is the notebook's visible case."""
    if seed == 0:
        return {"hidden": 16, "batch_size": 8, "length": 16, "n_batches": 12, "lr": 0.1, "dtype": torch.float32}
    rng = random.Random(seed)
    return {"hidden": rng.choice([8, 12, 16, 24]), "batch_size": rng.choice([1, 3, 8]),
            "length": rng.choice([6, 12, 16]), "n_batches": rng.choice([9, 12, 15]), "lr": rng.choice([0.05, 0.1, 0.2]),
            "dtype": rng.choice([torch.float32, torch.float64])}


def _setup(seed, device):
    c = _case(seed)
    model = graphs.forecaster(hidden=c["hidden"], seed=seed).to(device, c["dtype"])
    batches = [(x.to(device), y.to(device)) for x, y in graphs.sine_batches(
        n_batches=c["n_batches"], batch_size=c["batch_size"], length=c["length"], seed=seed + 1, dtype=c["dtype"])]
    return c, model, batches


def _describe(c, device):
    return (f"{c['n_batches']} chunks of {c['batch_size']}x{c['length']}, hidden {c['hidden']}, lr={c['lr']}, "
            f"{str(c['dtype'])[6:]} on {device.type}")


def _tol(dtype):
    return 2e-3 if dtype == torch.float32 else 1e-7


def _rel(a, b):
    """|a - b| / max(|b|, tiny) over flattened tensors."""
    a, b = a.double(), b.double()
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def _flat(tensors):
    return torch.cat([t.detach().reshape(-1).double().cpu() for t in tensors])


# ---- watching train ----------------------------------------------------------------------------------------------

class _Watch:
    """Per forward pass of `model`: the weights and the hidden state going in, the hidden state and prediction out."""

    def __init__(self, model):
        self.model = model
        self.params = list(model.parameters())
        self.calls = []
        self._handles = []

    def __enter__(self):
        self._handles = [self.model.register_forward_pre_hook(self._pre, with_kwargs=True),
                         self.model.register_forward_hook(self._post)]
        return self

    def __exit__(self, *exc):
        for h in self._handles:
            h.remove()
        return False

    def _pre(self, module, args, kwargs):
        h = args[1] if len(args) > 1 else kwargs.get("h", kwargs.get("hx"))
        self.calls.append({
            "weights": [p.detach().clone() for p in self.params],
            "x": args[0] if args else kwargs.get("x"),
            "h_in": None if h is None else h.detach().clone(),
            "h_grad_fn": None if h is None else h.grad_fn,
            "h_requires_grad": h is not None and h.requires_grad,
        })
        return None

    def _post(self, module, args, output):
        pred, h = output
        self.calls[-1]["h_out"] = h.detach().clone()
        self.calls[-1]["pred"] = pred.detach().clone()


@contextlib.contextmanager
def _reference_update(fn):
    """While the learner's train runs, the reference sgd_update stands in for theirs wherever train reaches it by
    name: its globals, its default arguments, and the variables it closes over."""
    g = getattr(fn, "__globals__", None)
    g = g if isinstance(g, dict) else {}
    mine = g.get("sgd_update")

    def theirs(value):
        return value is not None and value is not reference_sgd_update and (
            value is mine if mine is not None else callable(value) and getattr(value, "__name__", None) == "sgd_update")

    undo = []
    try:
        for name in [k for k, v in g.items() if theirs(v)]:
            undo.append(functools.partial(g.__setitem__, name, g[name]))
            g[name] = reference_sgd_update
        defaults = getattr(fn, "__defaults__", None)
        if defaults:
            undo.append(functools.partial(setattr, fn, "__defaults__", defaults))
            fn.__defaults__ = tuple(reference_sgd_update if theirs(v) else v for v in defaults)
        for cell in getattr(fn, "__closure__", None) or ():
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            if theirs(value):
                undo.append(functools.partial(setattr, cell, "cell_contents", value))
                cell.cell_contents = reference_sgd_update
        yield
    finally:
        for restore in reversed(undo):
            restore()


def _run_train(train, seed, device):
    """(case, model, batches, watch, losses): the learner's train on the seed's case, watched."""
    c, model, batches = _setup(seed, device)
    with _Watch(model) as watch, _reference_update(train):
        losses = call(train, model, batches, c["lr"], name="train", hints=HINTS,
                      where=f"on {_describe(c, device)}")
    return c, model, batches, watch, losses


def _forwards(c, watch, device):
    n = len(watch.calls)
    expect(n == c["n_batches"], f"forward passes of the model in train ({_describe(c, device)})",
           f"one per chunk, {c['n_batches']}", n, "call model(x, h) once per chunk, in order")


# ---- the checks ----------------------------------------------------------------------------------------------------

@check("sgd_update")
def check_sgd_update(sgd_update, seed=0):
    """sgd_update(params, lr): in place, the same leaf tensors, p - lr * p.grad; tensors without .grad untouched."""
    c = _case(seed)
    for device in devices():
        model = graphs.forecaster(hidden=c["hidden"], seed=seed).to(device, c["dtype"])
        gen = torch.Generator().manual_seed(seed + 7)
        params = list(model.parameters())
        for p in params[:-1]:  # the head's bias gets no gradient: it must be skipped
            p.grad = torch.randn(p.shape, generator=gen, dtype=p.dtype).to(device)
        before = [p.detach().clone() for p in params]
        grads = [None if p.grad is None else p.grad.clone() for p in params]
        call(sgd_update, model.parameters(), c["lr"], name="sgd_update", hints=HINTS,
             where=f"on a model's parameters ({str(c['dtype'])[6:]} on {device.type}, grad mode on)")
        after = list(model.parameters())
        expect(all(a is p for a, p in zip(after, params)), "the model's parameters after sgd_update",
               "the same tensor objects", "other objects")
        _leaves(params, "the model's parameters")
        moved = [i for i, (p, b) in enumerate(zip(params, before)) if not torch.equal(p.detach(), b)]
        expect(moved, "how many of the model's parameters sgd_update changed", f"all {len(params) - 1} that have a .grad",
               "none: their values are exactly as before",
               "`p = p - lr * p.grad` (in a loop, or under no_grad) makes a new tensor named p and leaves the parameter "
               "untouched: change p itself, in place (p -= lr * p.grad, under torch.no_grad())")
        expect(torch.equal(params[-1].detach(), before[-1]), "a parameter whose .grad is None",
               "left untouched", "changed", "skip tensors whose .grad is None")
        for i, (p, b, g) in enumerate(zip(params[:-1], before, grads)):
            want = b - c["lr"] * g
            err = _rel(p.detach() - b, want - b)
            expect(err < _tol(c["dtype"]), f"parameter {i} ({tuple(p.shape)}) after sgd_update at lr={c['lr']}",
                   "p - lr * p.grad", f"a change off by {err:.2g} (relative)",
                   "subtract lr times the gradient, once, from each parameter")
        # plain leaf tensors in a list: the list must still hold the same leaves
        leaves = [torch.randn(3, 4, generator=gen, dtype=c["dtype"]).to(device).requires_grad_() for _ in range(2)]
        for t in leaves:
            t.grad = torch.randn(t.shape, generator=gen, dtype=t.dtype).to(device)
        held = list(leaves)
        before = [t.detach().clone() for t in leaves]
        call(sgd_update, leaves, c["lr"], name="sgd_update", hints=HINTS, where="on a list of leaf tensors")
        expect(all(a is b for a, b in zip(leaves, held)) and len(leaves) == len(held), "the list of tensors after sgd_update",
               "the same leaf tensors in it", "other tensors put in their place",
               "do not rebind params[i]: update each tensor in place")
        _leaves(leaves, "the leaf tensors")
        for t, b in zip(leaves, before):
            expect(_rel(t.detach() - b, -c["lr"] * t.grad) < _tol(c["dtype"]), "a leaf tensor after sgd_update",
                   "p - lr * p.grad", "other values")
    return (f"in place on {len(params)} parameters and a list of leaves ({str(c['dtype'])[6:]}): the same leaf "
            f"tensors, p - lr * p.grad, a tensor without .grad untouched")


def _leaves(tensors, what):
    for i, p in enumerate(tensors):
        expect(p.is_leaf and p.grad_fn is None, f"{what} after sgd_update (tensor {i})", "still a leaf (grad_fn None)",
               f"a non-leaf (grad_fn={type(p.grad_fn).__name__})", "update in place under torch.no_grad()")
        expect(p.requires_grad, f"{what} after sgd_update (tensor {i})", "still requires_grad=True",
               "requires_grad=False: it will never get a gradient again",
               "do not switch requires_grad off; use torch.no_grad() around the update instead")


@check("train")
def check_train(train, seed=0):
    """train runs one step per chunk, returns the chunks' losses as Python floats, and they fall."""
    for device in devices():
        c, model, batches, watch, losses = _run_train(train, seed, device)
        expect(isinstance(losses, (list, tuple)), "train's return value", "a list of the chunks' losses",
               type(losses).__name__)
        expect(len(losses) == c["n_batches"], f"how many losses train returned ({_describe(c, device)})",
               c["n_batches"], len(losses), "one loss per chunk: append loss.item() after each step")
        values = [python_float(v, f"train's loss {i}") for i, v in enumerate(losses)]
        _forwards(c, watch, device)
        for i, (call_, (x, y), v) in enumerate(zip(watch.calls, batches, values)):
            want = F.mse_loss(call_["pred"], y).item()
            expect(abs(v - want) <= 1e-4 * abs(want) + 1e-7, f"train's loss {i}", f"{want:.6g} (the MSE of chunk {i})",
                   f"{v:.6g}", "return loss.item() of each chunk, in order")
        third = max(len(values) // 3, 1)
        first, last = sum(values[:third]) / third, sum(values[-third:]) / third
        expect(last < first, f"the loss over the run ({_describe(c, device)})",
               "falling: the last third's mean below the first third's", f"{first:.4g} -> {last:.4g}")
    return f"{len(values)} steps without an exception; losses as floats, {values[0]:.3g} -> {values[-1]:.3g}"


@check("hidden_detached")
def check_hidden_detached(train, seed=0):
    """train gives each chunk after the first the previous chunk's final hidden state, detached."""
    for device in devices():
        c, model, batches, watch, losses = _run_train(train, seed, device)
        _forwards(c, watch, device)
        first = watch.calls[0]["h_in"]
        expect(first is None or not first.abs().max().item(), "the hidden state given to the first chunk",
               "None (or zeros)", "other values", "start each call of train from h=None")
        for k in range(1, len(watch.calls)):
            now, prev = watch.calls[k], watch.calls[k - 1]
            expect(now["h_in"] is not None, f"the hidden state given to chunk {k}", "the previous chunk's h, carried",
                   "None: the model starts from zeros at every chunk",
                   "pass h from the previous model(x, h) call into the next one (detached)")
            expect(now["h_in"].shape == prev["h_out"].shape and torch.allclose(now["h_in"], prev["h_out"]),
                   f"the hidden state given to chunk {k}", f"the h chunk {k - 1} returned",
                   "other values (a fresh one?)", "carry h from chunk to chunk; detach() keeps its values")
            expect(now["h_grad_fn"] is None and not now["h_requires_grad"], f"the hidden state given to chunk {k}",
                   "detached (grad_fn None)",
                   f"still attached to chunk {k - 1}'s graph (grad_fn={type(now['h_grad_fn']).__name__})", _DETACH)
    return f"{len(watch.calls) - 1} chunks got the previous chunk's hidden state, detached ({_describe(c, device)})"


@check("train_gradients")
def check_train_gradients(train, seed=0):
    """each step of train moves the weights by -lr times that chunk's own gradient at the weights of that step."""
    for device in devices():
        c, model, batches, watch, losses = _run_train(train, seed, device)
        _forwards(c, watch, device)
        ref = copy.deepcopy(model)
        params = list(ref.parameters())
        weights = [call_["weights"] for call_ in watch.calls] + [[p.detach().clone() for p in model.parameters()]]
        total = None
        for t, (call_, (x, y)) in enumerate(zip(watch.calls, batches)):
            with torch.no_grad():
                for p, w in zip(params, call_["weights"]):
                    p.copy_(w)
            loss = F.mse_loss(ref(x, call_["h_in"])[0], y)
            g = _flat(torch.autograd.grad(loss, params))
            total = g if total is None else total + g
            step = _flat(weights[t]) - _flat(weights[t + 1])
            want = c["lr"] * g
            err = _rel(step, want)
            if err < _tol(c["dtype"]):
                continue
            where = f"the weights' change at step {t} ({_describe(c, device)})"
            if not step.abs().max().item():
                expect(False, where, f"-lr x that chunk's gradient (norm {want.norm().item():.4g})", "no change at all",
                       "the order of a step: zero_grad(), forward, backward(), then the update")
            if t > 0 and _rel(step, c["lr"] * total) < _tol(c["dtype"]):
                expect(False, where, f"-lr x chunk {t}'s gradient (norm {want.norm().item():.4g})",
                       f"-lr x the SUM of the gradients of chunks 0..{t} (norm {step.norm().item():.4g}): .grad was "
                       "never zeroed", "model.zero_grad() at the start of every step: backward() adds into .grad")
            ratio = step.norm().item() / max(want.norm().item(), 1e-30)
            hint = (_DETACH if call_["h_grad_fn"] is not None else
                    "the update is -lr * p.grad, with the gradient of this chunk's loss only")
            expect(False, where, f"-lr x chunk {t}'s own gradient (norm {want.norm().item():.4g})",
                   f"a change off by {err:.2g} (relative; norm ratio {ratio:.3g})", hint)
    return (f"{len(watch.calls)} steps, each -lr x its own chunk's gradient, as the reference computes it "
            f"({_describe(c, device)})")


@check("validate")
def check_validate(validate, seed=0):
    """validate returns the mean loss as a float, builds no autograd graph, holds none, leaves grad mode alone."""
    for device in devices():
        c, model, batches = _setup(seed, device)
        want = reference_validate(model, batches)
        outputs = []

        def hook(module, args, output):
            pred, h = output
            outputs.append((weakref.ref(pred), pred.grad_fn is not None or pred.requires_grad,
                            type(pred.grad_fn).__name__ if pred.grad_fn is not None else None))

        handle = model.register_forward_hook(hook)
        grad = torch.is_grad_enabled()
        try:
            result = call(validate, model, batches, name="validate", hints=HINTS, restore_grad=False,
                          where=f"on {_describe(c, device)}")
            after = torch.is_grad_enabled()
        finally:
            torch.set_grad_enabled(grad)
            handle.remove()
        expect(after == grad, "the grad mode after validate", f"as before (torch.is_grad_enabled() {grad})",
               f"{after}: it was switched off for good, so the next training step's loss has no graph",
               "use `with torch.no_grad():` around the loop: it puts the grad mode back when the block ends")
        expect(len(outputs) == len(batches), "forward passes of the model in validate", f"one per chunk, {len(batches)}",
               len(outputs))
        graphed = [i for i, (_, g, _) in enumerate(outputs) if g]
        if graphed:
            alive = sum(ref() is not None for ref, _, _ in outputs)
            by = (f" by the {type(result.grad_fn).__name__} tensor it returned" if torch.is_tensor(result)
                  and result.grad_fn is not None else "")
            held = (f"; {alive} of the {len(outputs)} chunks' outputs, with their graphs, are still held after it "
                    f"returned{by}" if alive else "")
            expect(False, "the model's outputs in validate", "no graph (run under torch.no_grad())",
                   f"{len(graphed)} of {len(outputs)} outputs with a graph (grad_fn={outputs[graphed[0]][2]}){held}",
                   "wrap the loop in `with torch.no_grad():`: validation never calls backward(), so a graph is pure "
                   "waste of time and memory" + (", and adding up loss tensors (not loss.item()) keeps every chunk's "
                                                 "graph alive" if alive else ""))
        value = python_float(result, "validate's return value")
        expect(abs(value - want) <= 1e-4 * abs(want) + 1e-7, f"validate's value ({_describe(c, device)})",
               f"{want:.6g} (the mean of the chunks' MSE, hidden state carried)", f"{value:.6g}",
               "the mean over chunks of F.mse_loss(pred, y), with h carried from chunk to chunk as in train")
    return f"the mean loss {value:.4g} as a float, no graph built or held, grad mode untouched ({_describe(c, device)})"
