"""Checks for lesson 10, autograd errors: sgd_update, train (runs, hidden state carried and detached, gradients)
and validate.

Everything is watched from outside, never read: the check's model records, through forward pre-hooks and forward
hooks, the weights and the hidden state going into each chunk and the hidden state coming out; the reference
gradient of each step is recomputed from those weights and that (detached) hidden state, and compared with the
step the weights actually took. `train` runs with the reference `sgd_update` in place of the learner's, so that
each check grades its own cell; the model arrives with stale gradients, and train is called twice on it (two
epochs). sgd_update is called in both grad modes, and compared with the gradients as they were before the call (what
it leaves in .grad is its own business). `seed` drives a sweep: sizes, learning rates, float32 and float64.
"""
import contextlib
import copy
import functools
import random
import weakref

import torch
from torch.nn import functional as F

from .. import graphs
from . import CheckFailed, call, check, devices, expect, gpu_probe, python_float, stale_grads

__all__ = ["check_sgd_update", "check_train", "check_hidden_detached", "check_train_gradients", "check_validate",
           "reference_sgd_update", "reference_train", "reference_validate"]

_DETACH = ("the hidden state carried from the previous chunk still holds that chunk's graph, which backward() already "
           "freed: h = h.detach() before it goes into the next chunk (not retain_graph=True, which keeps every "
           "earlier chunk's graph and backpropagates through all of them).")
_NO_GRAD_UPDATE = ("update the parameters under `with torch.no_grad():` (p -= lr * p.grad): outside it, an in-place "
                   "change of a leaf that requires grad is refused.")

HINTS = {  # the lesson's own hints, by a fragment of the exception's text (the shared ones come after)
    "device type tensor to numpy": "the update went through NumPy, which sees only CPU memory: on a GPU .numpy() "
    "raises. Update with PyTorch operations, where the tensors are (p -= lr * p.grad under torch.no_grad()).",
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


def _elementwise_mean(model, batches):
    """The MSE over every element of every chunk (hidden state carried): what the mean of the chunks' losses is not
    when the chunks differ in length."""
    total, count, h = 0.0, 0, None
    with torch.no_grad():
        for x, y in batches:
            pred, h = model(x, h)
            total += F.mse_loss(pred, y, reduction="sum").item()
            count += y.numel()
    return total / count


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


def _ulps(got, before, grad, lr):
    """How far `got` is from before - lr * grad, in units of the dtype's precision (eps x the terms' size), over the
    finite entries; inf where a NaN or an infinity is not where the reference has it. A correct update in p's dtype
    is within 2 (one rounding of lr * grad, one of the subtraction); one done in a lower precision is far off."""
    want = before.detach().double().cpu() - lr * grad.detach().double().cpu()
    got = got.detach().double().cpu()
    if not (torch.equal(got.isnan(), want.isnan()) and torch.equal(got.isinf(), want.isinf())
            and torch.equal(got[got.isinf()], want[want.isinf()])):
        return float("inf")
    fine = want.isfinite()
    scale = before.detach().double().cpu().abs() + (lr * grad.detach().double().cpu()).abs()
    eps = torch.finfo(before.dtype).eps
    off = (got[fine] - want[fine]).abs() / (eps * scale[fine]).clamp_min(torch.finfo(torch.float64).tiny)
    return off.max().item() if off.numel() else 0.0


_ULPS = 4  # the most a correct update may be off, in _ulps' units


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
        self.calls = []  # the forward passes with autograd on (the training steps')
        self.every = []  # every forward pass, under no_grad too (a warm-up of the hidden state is one)
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
        self.every.append({
            "weights": [p.detach().clone() for p in self.params],
            "x": args[0] if args else kwargs.get("x"),
            "h_in": None if h is None else h.detach().clone(),
            "h_grad_fn": None if h is None else h.grad_fn,
            "h_requires_grad": h is not None and h.requires_grad,
        })
        if torch.is_grad_enabled():  # a forward under no_grad (a log line, a look) is no training step's
            self.calls.append(self.every[-1])
        return None

    def _post(self, module, args, output):
        pred, h = output
        self.every[-1]["h_out"] = h.detach().clone()
        self.every[-1]["pred"] = pred.detach().clone()


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


_STALE = 0.05  # the .grad every parameter arrives with in check_train_gradients, as an earlier backward leaves it


def _run_train(train, seed, device, again=False, stale=False):
    """(case, model, batches, watch, losses, starts): the learner's train on the seed's case, watched. again: a first
    call of train on the first chunks (an earlier epoch) before the call on all of them, on the same model; stale:
    the model arrives with a .grad in every parameter. starts: the index in watch.calls of each call's first chunk."""
    c, model, batches = _setup(seed, device)
    if stale:
        stale_grads(model, _STALE)
    first = batches[:3] if again else []
    starts = [0]
    with _Watch(model) as watch, _reference_update(train):
        watch.chunks = [x for x, _ in first] + [x for x, _ in batches]  # the order each call must see them in
        watch.first = len(first)
        watch.every_starts = [0]
        if first:
            call(train, model, list(first), c["lr"], name="train", hints=HINTS,
                 where=f"in a first call, on {len(first)} of the {_describe(c, device)}")
            starts.append(len(watch.calls))
            watch.every_starts.append(len(watch.every))
        watch.given = list(batches)  # a list of its own: what train does to it, check_train tells
        losses = call(train, model, watch.given, c["lr"], name="train", hints=HINTS,
                      where=f"{'in a second call, on the same model, ' if first else ''}on {_describe(c, device)}")
    return c, model, batches, watch, losses, starts


def _counts_right(c, calls, starts, first):
    """Whether `calls` hold one forward per chunk in each call of train."""
    return (len(starts) < 2 or starts[1] == first) and len(calls) - starts[-1] == c["n_batches"]


_NOT_RUN = ("train never ran the model it was given: a copy of it (copy.deepcopy(model)) trains the copy and leaves "
            "the caller's model as it was. Train the model you are given (a second epoch is a second call on it)")


def _forwards(c, watch, device, starts=(0,), calls=None):
    calls = watch.calls if calls is None else calls
    if len(starts) > 1:
        expect(starts[1] == watch.first, f"forward passes of the model in a first call of train on {watch.first} "
               f"chunks ({_describe(c, device)})", f"one per chunk, {watch.first}", starts[1],
               _NOT_RUN if not starts[1] else "call model(x, h) once per chunk, in order")
    n = len(calls) - starts[-1]
    expect(n == c["n_batches"], f"forward passes of the model in train ({_describe(c, device)})",
           f"one per chunk, {c['n_batches']}", n, _NOT_RUN if not n else "call model(x, h) once per chunk, in order")
    chunks = watch.chunks[-n:]
    for k, (call_, x) in enumerate(zip(calls[starts[-1]:], chunks)):
        seen = call_["x"]
        same = torch.is_tensor(seen) and seen.shape == x.shape and torch.equal(seen.detach().to(x.device, x.dtype), x)
        expect(same, f"the chunk train gives the model at step {k} ({_describe(c, device)})", f"chunk {k}",
               next((f"chunk {j}" for j, other in enumerate(chunks) if torch.is_tensor(seen) and seen.shape ==
                     other.shape and torch.equal(seen.detach().to(other.device, other.dtype), other)), "other data"),
               "one step per chunk, in the order of `batches`: the hidden state carries from each chunk to the next "
               "one in time (no shuffling)")


# ---- the checks ----------------------------------------------------------------------------------------------------

@check("sgd_update")
def check_sgd_update(sgd_update, seed=0):
    """sgd_update(params, lr): in place, the same leaf tensors, p - lr * p.grad; tensors without .grad untouched;
    the grad mode as it found it (called with grad mode on, then off)."""
    c = _case(seed)
    for device in devices():
        model = graphs.forecaster(hidden=c["hidden"], seed=seed).to(device, c["dtype"])
        gen = torch.Generator().manual_seed(seed + 7)
        params = list(model.parameters())
        skip = 1 + seed % (len(params) - 1)  # a parameter without .grad, after one with: it must be skipped, not end the loop
        # called twice on the same tensors, new gradients each time: the same rule, nothing kept from the first call
        for where, what in ((f"on a model's parameters ({str(c['dtype'])[6:]} on {device.type}, grad mode on)",
                             "the model's parameters"),
                            (f"a second time on the same parameters, with new gradients ({str(c['dtype'])[6:]} on "
                             f"{device.type})", "the model's parameters at a second call")):
            for i, p in enumerate(params):
                if i != skip:
                    p.grad = torch.randn(p.shape, generator=gen, dtype=p.dtype).to(device)
            _update(sgd_update, lambda: model.parameters(), params, skip, c, True, where, what)
            expect(all(a is p for a, p in zip(model.parameters(), params)), "the model's parameters after sgd_update",
                   "the same tensor objects", "other objects")
        # plain leaf tensors in a list, the first without .grad, called inside a no_grad block
        # and a frozen one last (requires_grad=False, a .grad left from before it was frozen): it has a .grad
        # and a 0-dim one (a learned scale, a temperature) before it
        # and tensor 1 not contiguous (its memory in another order, as a transposed weight or a channels_last
        # convolution's is): p.view(-1) of it raises, p.reshape(-1) is a copy, and neither may lose the update
        shapes = [(3, 4), (4, 3), (), (3, 4)]
        leaves = [torch.randn(shape, generator=gen, dtype=c["dtype"]).to(device) for shape in shapes]
        leaves[1] = leaves[1].t()
        leaves = [t.requires_grad_(i < 3) for i, t in enumerate(leaves)]
        for t in leaves[1:]:
            t.grad = torch.randn(t.shape, generator=gen, dtype=t.dtype).to(device)
        held = list(leaves)
        _update(sgd_update, lambda: leaves, held, 0, c, False,
                f"on a list of leaf tensors ({str(c['dtype'])[6:]} on {device.type}, inside torch.no_grad())",
                "the leaf tensors")
        expect(all(a is b for a, b in zip(leaves, held)) and len(leaves) == len(held), "the list of tensors after sgd_update",
               "the same leaf tensors in it", "other tensors put in their place",
               "do not rebind params[i]: update each tensor in place")
        # a gradient with inf and NaN in it: SGD's rule still (whether to step is the training loop's call)
        odd = torch.randn(6, generator=gen, dtype=c["dtype"]).to(device).requires_grad_()
        grad = torch.randn(6, generator=gen, dtype=c["dtype"])
        grad[1], grad[4] = float("inf"), float("nan")
        odd.grad = grad.to(device).clone()  # (sgd_update may scale .grad in place: `grad` keeps what it was given)
        was = odd.detach().clone()
        with torch.no_grad():
            call(sgd_update, [odd], c["lr"], name="sgd_update", hints=HINTS,
                 where=f"on a tensor whose .grad holds inf and NaN ({str(c['dtype'])[6:]} on {device.type})")
        got = odd.detach()  # against the .grad it was given (what it leaves in .grad is its own business)
        expect(_ulps(got, was, grad, c["lr"]) <= _ULPS,
               "a tensor whose .grad holds inf and NaN, after sgd_update",
               "p - lr * p.grad in every entry, inf and NaN included, as torch.optim.SGD does (refusing a step with "
               "non-finite gradients is the training loop's decision, as in lesson 04, not the update's)",
               "left untouched" if torch.equal(got, was) else "other values",
               "update every tensor whose .grad is not None, whatever its values")

    def probe(sim):  # where the gradients live on the GPU (NumPy, Python numbers: they cannot go there)
        model = sim.model(graphs.forecaster(hidden=c["hidden"], seed=seed).to(c["dtype"]))
        params = list(model.parameters())
        for p in params:
            p.grad = torch.ones_like(p)
        call(sgd_update, model.parameters(), c["lr"], name="sgd_update", hints=HINTS,
             where=f"on a model's parameters on a simulated cuda:0 (no GPU here; {str(c['dtype'])[6:]})")
        expect(all(a is p for a, p in zip(model.parameters(), params)),
               "the model's parameters after sgd_update on a simulated cuda:0", "the same tensor objects",
               "other objects")
        moved = [str(p.device) for p in params if p.device != sim.device]
        expect(not moved, "the model's parameters after sgd_update on a simulated cuda:0", "still on cuda:0",
               f"{len(moved)} of {len(params)} on {moved[0] if moved else ''}")

    where = gpu_probe(probe)
    return (f"in place on {len(params)} parameters and a list of leaves ({str(c['dtype'])[6:]}), in both grad modes: "
            f"the same leaf tensors, p - lr * p.grad, a tensor without .grad untouched, the grad mode left as found"
            f"{where}")


def _update(sgd_update, params_now, params, skip, c, grad_mode, where, what):
    """Call sgd_update(params_now(), lr) in `grad_mode` and compare each tensor with p - lr * g, g its .grad before the
    call (what sgd_update leaves in .grad is its own business); params[skip] has no .grad and must stay untouched."""
    before = [p.detach().clone() for p in params]
    requires = [p.requires_grad for p in params]
    grads = [None if p.grad is None else p.grad.detach().clone() for p in params]
    shared = [p.detach() for p in params]  # the same memory as each p: an update in place shows in it
    outer = torch.is_grad_enabled()
    try:
        torch.set_grad_enabled(grad_mode)
        call(sgd_update, params_now(), c["lr"], name="sgd_update", hints=HINTS, restore_grad=False, where=where)
        after_mode = torch.is_grad_enabled()
    finally:
        torch.set_grad_enabled(outer)
    expect(after_mode == grad_mode, f"the grad mode after sgd_update (called {where})",
           f"as sgd_update found it (torch.is_grad_enabled() {grad_mode})",
           f"{after_mode}: " + ("switched off for good, so the caller's next forward builds no graph and its "
                                "backward() raises" if grad_mode else
                                "switched on inside the caller's no_grad block, whose later operations build graphs"),
           "use `with torch.no_grad():` around the update: it puts the grad mode back when the block ends")
    _leaves(params, requires, what)
    lr = c["lr"]
    moved = [i for i, (p, b) in enumerate(zip(params, before)) if not torch.equal(p.detach(), b)]
    with_grad = [i for i, g in enumerate(grads) if g is not None]
    expect(moved, f"how many of {what} sgd_update changed", f"all {len(with_grad)} that have a .grad",
           "none: their values are exactly as before",
           "`p = p - lr * p.grad` (in a loop, or under no_grad) makes a new tensor named p and leaves the parameter "
           "untouched: change p itself, in place (p -= lr * p.grad, under torch.no_grad())")
    expect(torch.equal(params[skip].detach(), before[skip]), f"{what}: tensor {skip}, whose .grad is None",
           "left untouched", "changed", "skip tensors whose .grad is None")
    untouched = [i for i in with_grad if i not in moved and bool(grads[i].ne(0).any())]  # (p - lr * 0 is p)
    if untouched:
        i = untouched[0]
        after_skip = skip < i and all(j > skip for j in untouched) and all(j not in moved for j in with_grad if j > skip)
        prefix = untouched == with_grad[:len(untouched)] and not isinstance(params_now(), (list, tuple))
        expect(False, f"{what}: tensor {i} ({tuple(params[i].shape)}) after sgd_update at lr={lr}",
               "p - lr * p.grad", f"its old values, untouched, though it has a .grad ({len(untouched)} of the "
               f"{len(with_grad)} tensors with a .grad untouched: {untouched}" + (
                   "; params was model.parameters(), a generator, which can be iterated only once: the first "
                   "tensors it yields are not seen again by a second pass" if prefix else "") + ")",
               f"tensor {skip} has .grad None and every tensor after it was left untouched: skip that tensor "
               "(`continue`), do not end the loop there (`return`, `break`)" if after_skip else
               f"tensor {i} is not contiguous (a transposed tensor: its memory is in another order), so "
               "p.reshape(-1) or p.flatten() of it is a copy, and a change to the copy never reaches p: update p "
               "itself (p -= lr * p.grad)" if not params[i].is_contiguous() else
               f"tensor {i} has requires_grad=False (frozen after a backward) and a .grad: update every tensor whose "
               ".grad is not None, whatever its requires_grad (as torch.optim.SGD does)"
               if not requires[i] else "")
    for i in with_grad:
        p, b, g = params[i], before[i], grads[i]
        off = _ulps(p, b, g, lr)
        rel = _rel(p.detach() - b, -lr * g)
        low = [str(t)[6:] for t in (torch.float32, torch.bfloat16, torch.float16) if torch.finfo(t).eps > 
               torch.finfo(p.dtype).eps and rel < 8 * torch.finfo(t).eps]
        expect(off <= _ULPS, f"{what}: tensor {i} ({tuple(p.shape)}, {str(p.dtype)[6:]}) after sgd_update at lr={lr}",
               f"p - lr * p.grad in {str(p.dtype)[6:]} (with p.grad as it was before the call)",
               f"a change off by {rel:.2g} (relative), {off:.3g} times {str(p.dtype)[6:]}'s precision",
               f"the step was rounded to {low[0]} or coarser on the way: compute it in p's own dtype (p -= lr * "
               "p.grad), converting nothing" if low and rel > 0 else
               "subtract lr times the gradient, once, from each tensor")
        expect(torch.equal(shared[i], p.detach()), f"{what}: tensor {i}'s memory after sgd_update",
               "the new values in it (an update in place)",
               "the old values still there: the tensor was given new memory (as `p.data = ...` or `p.set_(...)` "
               "does), so anything sharing the old memory (a view of p, p.detach(), a flat buffer) still reads the "
               "old values", "subtract in place, in p's own memory: p -= lr * p.grad (or p.sub_(...)) under "
               "torch.no_grad()")


def _leaves(tensors, requires, what):
    for i, (p, req) in enumerate(zip(tensors, requires)):
        expect(p.is_leaf and p.grad_fn is None, f"{what} after sgd_update (tensor {i})", "still a leaf (grad_fn None)",
               f"a non-leaf (grad_fn={type(p.grad_fn).__name__})", "update in place under torch.no_grad()")
        expect(p.requires_grad == req, f"{what} after sgd_update (tensor {i})", f"still requires_grad={req}",
               "requires_grad=False: it will never get a gradient again" if req else "requires_grad=True",
               "do not switch requires_grad off; use torch.no_grad() around the update instead" if req else
               "leave requires_grad as it was")


@check("train")
def check_train(train, seed=0):
    """train runs one step per chunk, returns the chunks' losses as Python floats, and they fall."""
    for device in devices():
        c, model, batches, watch, losses, _ = _run_train(train, seed, device)
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
        kept = lambda a, b: a is b or (isinstance(a, (tuple, list)) and len(a) == 2 and all(  # noqa: E731
            torch.is_tensor(u) and u.shape == v.shape and torch.equal(u.detach().cpu(), v.cpu()) for u, v in zip(a, b)))
        expect(len(watch.given) == len(batches) and all(kept(a, b) for a, b in zip(watch.given, batches)),
               "the list of chunks train was given, after the call", f"as it was ({len(batches)} chunks, in order)",
               f"{len(watch.given)} chunks" + (" in another order" if len(watch.given) == len(batches) else ""),
               "iterate over batches without changing it (no pop, no shuffle in place): the caller trains on the "
               "same list again in the next epoch")
    return f"{len(values)} steps without an exception; losses as floats, {values[0]:.3g} -> {values[-1]:.3g}"


@check("hidden_detached")
def check_hidden_detached(train, seed=0):
    """train starts each call from h=None and gives each later chunk the previous chunk's final hidden state,
    detached (train is called twice on the same model, as for two epochs)."""
    for device in devices():
        c, model, batches, watch, losses, starts = _run_train(train, seed, device, again=True)
        calls = watch.calls
        if not _counts_right(c, calls, starts, watch.first) and _counts_right(c, watch.every, watch.every_starts,
                                                                              watch.first):
            # a chunk run under no_grad (a warm-up of the hidden state, not a step): check_train counts the steps;
            # here, what every chunk is given
            calls, starts = watch.every, watch.every_starts
        _forwards(c, watch, device, starts, calls)
        for k in range(len(calls)):
            now = calls[k]
            if k in starts:
                h = now["h_in"]
                second = k > 0
                kept = second and h is not None and h.shape == calls[k - 1]["h_out"].shape and torch.allclose(
                    h, calls[k - 1]["h_out"])
                expect(h is None or not h.abs().max().item(),
                       "the hidden state given to the first chunk" + (" of a second call of train, on the same model "
                                                                     "(a second epoch)" if second else ""),
                       "None (or zeros): each call of train starts from h=None",
                       "the last h of the previous call, kept from it" if kept else "other values",
                       "start each call of train from h=None: keep no hidden state from one call to the next")
                continue
            prev = calls[k - 1]
            chunk = k - starts[-1] if k > starts[-1] else k
            expect(now["h_in"] is not None, f"the hidden state given to chunk {chunk}", "the previous chunk's h, carried",
                   "None: the model starts from zeros at every chunk",
                   "pass h from the previous model(x, h) call into the next one (detached)")
            expect(now["h_in"].shape == prev["h_out"].shape and torch.allclose(now["h_in"], prev["h_out"]),
                   f"the hidden state given to chunk {chunk}", f"the h chunk {chunk - 1} returned",
                   "other values (a fresh one?)", "carry h from chunk to chunk; detach() keeps its values")
            expect(now["h_grad_fn"] is None, f"the hidden state given to chunk {chunk}",
                   "detached (grad_fn None)",
                   f"still attached to chunk {chunk - 1}'s graph (grad_fn={type(now['h_grad_fn']).__name__})", _DETACH)
    def probe(sim):  # the hidden state stays where the model is: on a GPU a CPU h cannot meet cuda inputs
        model = sim.model(graphs.forecaster(hidden=c["hidden"], seed=seed).to(c["dtype"]))
        batches = [(sim.tensor(x), sim.tensor(y)) for x, y in graphs.sine_batches(
            n_batches=3, batch_size=c["batch_size"], length=c["length"], seed=seed + 1, dtype=c["dtype"])]
        with _reference_update(train):
            call(train, model, batches, c["lr"], name="train", hints=HINTS,
                 where="on 3 chunks on a simulated cuda:0 (no GPU here)")

    where = gpu_probe(probe)
    return (f"each of 2 calls of train started from h=None; {len(calls) - len(starts)} chunks got the previous "
            f"chunk's hidden state, detached ({_describe(c, device)}){where}")


def _h_text(h, prev_out, start):
    """How a hidden state given to a chunk compares with what the reference gives it (None at a call's start)."""
    if h is None or not h.abs().max().item():
        return "None (zeros)"
    if prev_out is not None and h.shape == prev_out.shape and torch.allclose(h, prev_out):
        return "the previous call's last h" if start else "the previous chunk's h"
    return "other values"


@check("train_gradients")
def check_train_gradients(train, seed=0):
    """each step of train moves the weights by -lr times that chunk's own gradient, as the reference computes it
    (at the weights of that step, from h=None at a call's first chunk, else the previous chunk's h, detached). The
    model arrives with a .grad in every parameter (an earlier backward's), and train is called twice on it."""
    for device in devices():
        c, model, batches, watch, losses, starts = _run_train(train, seed, device, again=True, stale=True)
        _forwards(c, watch, device, starts)
        ref = copy.deepcopy(model)
        params = list(ref.parameters())
        weights = [call_["weights"] for call_ in watch.calls] + [[p.detach().clone() for p in model.parameters()]]
        chunks = batches[:starts[-1]] + batches
        stale = torch.full_like(_flat(params), _STALE)

        def grad_at(t, h):
            with torch.no_grad():
                for p, w in zip(params, watch.calls[t]["weights"]):
                    p.copy_(w)
            x, y = chunks[t]
            return _flat(torch.autograd.grad(F.mse_loss(ref(x, h)[0], y), params))

        total = stale
        for t, call_ in enumerate(watch.calls):
            start = t in starts
            h_ref = None if start else watch.calls[t - 1]["h_out"]
            g = grad_at(t, h_ref)
            total = total + g
            step = _flat(weights[t]) - _flat(weights[t + 1])
            want = c["lr"] * g
            err = _rel(step, want)
            if err < _tol(c["dtype"]):
                continue
            chunk = t - starts[-1] if t >= starts[-1] else t
            which = f"step {t}: chunk {chunk} of train's {'second' if t >= starts[-1] and len(starts) > 1 else 'first'} call"
            where = f"the weights' change at {which} ({_describe(c, device)})"
            if not step.abs().max().item():
                expect(False, where, f"-lr x that chunk's gradient (norm {want.norm().item():.4g})", "no change at all",
                       "the order of a step: zero_grad(), forward, backward(), then the update")
            if _rel(step, c["lr"] * total) < _tol(c["dtype"]):
                if t == 0 and _rel(_flat(weights[1]) - _flat(weights[2]), c["lr"] * grad_at(1, watch.calls[0]["h_out"])) < _tol(c["dtype"]):
                    expect(False, where, f"-lr x chunk 0's gradient (norm {want.norm().item():.4g})",
                           f"-lr x (that gradient + the .grad the model arrived with, left by an earlier backward; "
                           f"norm {step.norm().item():.4g}): .grad was not zeroed before the first step, only after it",
                           "each step STARTS with model.zero_grad(): backward() adds into whatever .grad holds")
                expect(False, where, f"-lr x that chunk's gradient (norm {want.norm().item():.4g})",
                       f"-lr x the SUM of the .grad the model arrived with and the gradients of chunks 0..{t} "
                       f"(norm {step.norm().item():.4g}): .grad was never zeroed",
                       "model.zero_grad() at the start of every step: backward() adds into .grad")
            ratio = step.norm().item() / max(want.norm().item(), 1e-30)
            observed = f"a change off by {err:.2g} (relative; norm ratio {ratio:.3g})"
            h_in, hint = call_["h_in"], "the update is -lr * p.grad, with the gradient of this chunk's loss only"
            if call_["h_grad_fn"] is not None:
                hint = _DETACH
            elif _h_text(h_in, h_ref, start) != ("None (zeros)" if start else "the previous chunk's h"):
                own = _rel(step, c["lr"] * grad_at(t, h_in))
                given = _h_text(h_in, None if not t else watch.calls[t - 1]["h_out"], start)
                if own < _tol(c["dtype"]):
                    observed = (f"-lr x the gradient from the hidden state it was given, {given}, not from "
                                f"{'None' if start else 'the h the previous chunk returned'}, as the reference does")
                    hint = ("start each call of train from h=None" if start else
                            "carry h from chunk to chunk (detached): chunk k starts from the h chunk k-1 returned")
            expect(False, where, f"-lr x that chunk's own gradient, as the reference computes it "
                   f"(norm {want.norm().item():.4g})", observed, hint)
    return (f"{len(watch.calls)} steps over 2 calls, each -lr x its own chunk's gradient, as the reference computes it "
            f"({_describe(c, device)})")


@check("validate")
def check_validate(validate, seed=0):
    """validate returns the mean loss as a float, builds no autograd graph, holds none, leaves grad mode alone."""
    for device in devices():
        c, model, batches = _setup(seed, device)
        x, y = batches[-1]
        cut = max(c["length"] // 2, 1)  # a shorter last chunk: the mean of the chunks' losses is not the elements'
        batches = batches[:-1] + [(x[:, :cut].clone(), y[:, :cut].clone())]
        want = reference_validate(model, batches)
        elements = _elementwise_mean(model, batches)
        next(model.parameters()).requires_grad_(False)  # a layer the caller froze (fine-tuning) stays frozen
        requires = [p.requires_grad for p in model.parameters()]
        outputs = []

        def hook(module, args, output):
            pred, h = output
            outputs.append((weakref.ref(pred), pred.grad_fn is not None or pred.requires_grad,
                            type(pred.grad_fn).__name__ if pred.grad_fn is not None else None))

        handle = model.register_forward_hook(hook)
        outer = torch.is_grad_enabled()
        try:
            torch.set_grad_enabled(True)
            result = call(validate, model, batches, name="validate", hints=HINTS, restore_grad=False,
                          where=f"on {_describe(c, device)}")
            after = torch.is_grad_enabled()
        finally:
            torch.set_grad_enabled(outer)
            handle.remove()
        _grad_mode(after, True)
        expect(outputs, "forward passes of the model in validate", "at least one (the loss of the model as it is)",
               "none")
        graphed = [i for i, (_, g, _) in enumerate(outputs) if g]
        if graphed:
            alive = sum(ref() is not None for ref, _, _ in outputs)
            by = (f" by the {type(result.grad_fn).__name__} tensor it returned" if torch.is_tensor(result)
                  and result.grad_fn is not None else "")
            held = (f"; {alive} of the model's {len(outputs)} outputs, with their graphs, are still held after it "
                    f"returned{by}" if alive else "")
            expect(False, "the model's outputs in validate", "no graph (run under torch.no_grad())",
                   f"{len(graphed)} of {len(outputs)} outputs with a graph (grad_fn={outputs[graphed[0]][2]}){held}",
                   "wrap the loop in `with torch.no_grad():`: validation never calls backward(), so a graph is pure "
                   "waste of time and memory" + (", and adding up loss tensors (not loss.item()) keeps every chunk's "
                                                 "graph alive" if alive else ""))
        frozen = [i for i, (p, r) in enumerate(zip(model.parameters(), requires)) if p.requires_grad != r]
        expect(not frozen, "the model's parameters' requires_grad after validate", "as before (the first parameter "
               "frozen by the caller, the others True)", f"changed for {len(frozen)} of {len(requires)} parameters"
               + (": the next training step's loss has no graph" if any(requires[i] for i in frozen) else
                  ": the caller's frozen parameter is trainable again"),
               "leave the parameters alone: torch.no_grad() around the loop builds no graph without freezing them "
               "(requires_grad_ on and off again also thaws what the caller froze)")
        value = python_float(result, "validate's return value")
        # to the model's precision: the chunks' losses summed in another order differ by a few units of it, a
        # float64 mean rounded through float32 by far more
        rel = 1e-5 if c["dtype"] == torch.float32 else 1e-12
        close = lambda a, b: abs(a - b) <= rel * abs(b) + 1e-30  # noqa: E731
        digits = ".7g" if c["dtype"] == torch.float32 else ".15g"
        expect(close(value, want), f"validate's value ({_describe(c, device)}, the last chunk {cut} steps long)",
               f"{want:{digits}} (the mean of the chunks' MSE, hidden state carried)", f"{value:{digits}}",
               "the mean of the chunks' losses (F.mse_loss of each chunk, then their mean over chunks), not the mean "
               "over every element: the chunks need not be the same length" if close(value, elements) else
               f"that is the value to float32's precision only, not the model's ({str(c['dtype'])[6:]}): a sum kept "
               "in float32 (a float32 tensor accumulator, or the model cast to float32) rounds it; add Python floats "
               "(loss.item()) or keep the model's dtype" if abs(value - want) <= 1e-6 * abs(want) else
               "the mean over chunks of F.mse_loss(pred, y), with h carried from chunk to chunk as in train")
        # new weights (as after a training epoch), then called inside a no_grad block (as in an evaluation helper):
        # the loss of the model as it is now, and grad mode left off
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(0.8)
        old, want = want, reference_validate(model, batches)
        try:
            torch.set_grad_enabled(False)
            again = call(validate, model, batches, name="validate", hints=HINTS, restore_grad=False,
                         where=f"inside torch.no_grad(), on {_describe(c, device)}")
            after = torch.is_grad_enabled()
        finally:
            torch.set_grad_enabled(outer)
        _grad_mode(after, False, " inside a no_grad block")
        again = python_float(again, "validate's return value (called inside torch.no_grad())")
        expect(close(again, want), f"validate's value inside torch.no_grad(), called again after the model's weights "
               f"changed ({_describe(c, device)})", f"{want:.6g}, the loss of the model as it is now", f"{again:.6g}",
               "the value of the first call, before the weights changed: compute the loss from the model every call, "
               "keep nothing from an earlier one" if close(again, old) else "")
        # and on fewer chunks (a validation set of another length)
        fewer = batches[2:]
        want = reference_validate(model, fewer)
        got = python_float(call(validate, model, fewer, name="validate", hints=HINTS,
                                where=f"on the last {len(fewer)} of the {_describe(c, device)}"), "validate's return value")
        divisor = want * len(fewer) / got if got else 0.0
        expect(close(got, want), f"validate's value on the last {len(fewer)} chunks", f"{want:.6g}, the mean over "
               f"the {len(fewer)} chunks", f"{got:.6g}",
               f"that is the sum of the chunks' losses divided by {round(divisor)}: divide by the number of chunks "
               f"given, len(batches) ({len(fewer)} here)" if abs(divisor - round(divisor)) < 1e-3 and round(divisor)
               not in (0, len(fewer)) else "")
    def probe(sim):  # the model stays where its owner put it: a validation on another device moves the batches
        model = sim.model(graphs.forecaster(hidden=c["hidden"], seed=seed).to(c["dtype"]))
        chunks = [(sim.tensor(x), sim.tensor(y)) for x, y in graphs.sine_batches(
            n_batches=3, batch_size=c["batch_size"], length=c["length"], seed=seed + 1, dtype=c["dtype"])]
        call(validate, model, chunks, name="validate", hints=HINTS, where="on 3 chunks on a simulated cuda:0")
        moved = sorted({str(p.device) for p in model.parameters()} - {str(sim.device)})
        expect(not moved, "the model's device after validate, on a simulated cuda:0", "cuda:0, where it was",
               f"moved to {', '.join(moved)}", "leave the model where it is (no model.cpu() or .to(...)): the caller "
               "trains it there next, and a model moved to the CPU meets its GPU batches with a device mismatch")

    where = gpu_probe(probe)
    return (f"the mean loss {value:.4g} as a float, no graph built or held, grad mode untouched (on and off) "
            f"({_describe(c, device)}){where}")


def _grad_mode(after, before, called=""):
    expect(after == before, f"the grad mode after validate (called{called} with torch.is_grad_enabled() {before})",
           f"as before ({before})",
           f"{after}: " + ("it was switched off for good, so the next training step's loss has no graph" if before else
                           "it was switched on inside the caller's no_grad block, whose later operations now build "
                           "graphs"),
           "use `with torch.no_grad():` around the loop: it puts the grad mode back (whatever it was) when the "
           "block ends")
