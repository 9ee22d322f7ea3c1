"""Checks for lesson 06, missing model.eval() / torch.no_grad(): evaluate and train_epoch.

The model has Dropout and BatchNorm with warmed-up running statistics, so evaluating in training mode
shows: logits that change from call to call, running statistics that move, and a different accuracy.
`evaluation.watch_validation` records the mode and autograd state of every forward pass. `seed` drives a sweep of
data sizes and batch sizes (short last batches, a last batch of one for evaluate), widths, dropout rates
and dtypes. Where no GPU is present, the functions also run on a model on a simulated cuda:0 with a loader
of CPU batches, so a batch that is never moved to the model's device is caught on every machine; and on a model
without BatchNorm (no buffers), on every machine, so that the device is taken from what every model has.
"""
import contextlib
import copy
import weakref

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from .. import data
from ..device import SimulatedCuda, pick_device
from ..evaluation import bn_mlp, watch_validation
from . import CheckFailed, SimulationLimit, call, check, expect, python_float

__all__ = ["check_evaluate_eval", "check_evaluate_no_grad", "check_evaluate_restores", "check_train_epoch"]

BATCH_OF_ONE = "Expected more than 1 value per channel when training"
DEVICE_MISMATCH = ("Expected all tensors to be on the same device", "found two different devices",
                   "found at least two devices")
_DROPOUT = nn.modules.dropout._DropoutNd


def case(seed, n=None, batch_size=None, last_one=False, train=False):
    """The seed's data and model: samples, batch size, widths, dropout rate, dtype (seed 0: the visible case).

    The last batch is short: of one sample on some seeds when `last_one` (evaluate in eval mode must cope),
    else of two or more (BatchNorm in training mode cannot take one sample, and the checks of autograd and
    of the mode are not about that)."""
    if seed == 0:
        c = {"n": 52 if train else 40, "batch_size": 16, "inputs": 4, "hidden": 16, "classes": 3, "p": 0.5,
             "dtype": torch.float32}
    else:
        g = torch.Generator().manual_seed(seed)
        pick = lambda seq: seq[int(torch.randint(0, len(seq), (1,), generator=g))]
        bs = pick([5, 7, 8, 12, 16])
        full = pick([2, 3, 4])
        last = pick([1, 1, 2, bs - 1]) if last_one else pick([2, 3, bs // 2])
        c = {"n": full * bs + last, "batch_size": bs, "inputs": pick([3, 4, 6]), "hidden": pick([8, 16, 24]),
             "classes": pick([2, 3, 4]), "p": pick([0.3, 0.5]), "dtype": pick([torch.float32, torch.float64])}
        if train and seed % 2:  # a longer epoch (11 to 13 full batches): the mean is over all of them
            c["n"] += 9 * bs
    if n is not None:
        c["n"] = n
    if batch_size is not None:
        c["batch_size"] = batch_size
    return c


def _describe(c):
    last = c["n"] % c["batch_size"]
    tail = f", last batch of {last}" if last else ""
    return f"{c['n']} samples in batches of {c['batch_size']}{tail}, {str(c['dtype']).replace('torch.', '')}"


def _setup(seed, c, device=None):
    """A warmed-up Dropout+BatchNorm model in training mode on `device`, and a CPU loader (not shuffled)."""
    device = device or pick_device()
    model = bn_mlp(inputs=c["inputs"], hidden=c["hidden"], outputs=c["classes"], p=c["p"], seed=seed)
    n = c["n"]
    x, y = data.blobs(n=n + 64, features=c["inputs"], classes=c["classes"], spread=1.5, seed=seed).tensors
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.random.default_generator.manual_seed(seed)
        for i in range(4):  # running statistics away from their (0, 1) start
            model(x[n + 16 * i: n + 16 * (i + 1)] * 1.5 + 0.5)
    model.train()
    x = x.to(c["dtype"])
    loader = DataLoader(TensorDataset(x[:n], y[:n]), batch_size=c["batch_size"], shuffle=False)
    return model.to(device=device, dtype=c["dtype"]), loader, device


class _Tag:
    """A gradient hook that does nothing: registered on a training step's output, it lives as long as that step's
    autograd graph does, so a weak reference to it tells whether the graph is still alive."""

    def __call__(self, grad):
        return None


@contextlib.contextmanager
def _graphs_kept(model):
    """Yield a list that gets, as each forward pass with autograd on begins, how many graphs of the steps before the
    previous one are still alive (a running total of loss tensors, a list of them: each holds its step's graph)."""
    tags, alive = [], []

    def pre(module, args):
        if torch.is_grad_enabled():
            alive.append(sum(r() is not None for r in tags[:-1]))

    def post(module, args, output):
        if torch.is_tensor(output) and output.requires_grad and output.grad_fn is not None:
            tag = _Tag()
            with contextlib.suppress(Exception):  # (a transform's tensor may refuse hooks: then nothing is seen)
                output.register_hook(tag)
                tags.append(weakref.ref(tag))

    handles = [model.register_forward_pre_hook(pre), model.register_forward_hook(post)]
    try:
        yield alive
    finally:
        for h in handles:
            h.remove()


@contextlib.contextmanager
def _grad_mode_kept():
    """Whatever learner code does to the global grad mode, the check (and the cells after it) get theirs back."""
    before = torch.is_grad_enabled()
    try:
        yield
    finally:
        torch.set_grad_enabled(before)


def _probe_models(c):
    """The models for the device probe (the lesson's, and one without BatchNorm: no buffers to take a device from),
    each with what it is, and a CPU loader whose last batch is short but not of one."""
    model = bn_mlp(inputs=c["inputs"], hidden=c["hidden"], outputs=c["classes"], p=c["p"], depth=1, seed=1)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(2)
        plain = nn.Sequential(nn.Linear(c["inputs"], c["hidden"]), nn.ReLU(), nn.Dropout(c["p"]),
                              nn.Linear(c["hidden"], c["classes"]))
    x, y = data.blobs(n=6, features=c["inputs"], classes=c["classes"], seed=1).tensors  # the simulation is slow
    return [(model, "the lesson's model"), (plain, "a model without BatchNorm (parameters only, no buffers)")], \
        DataLoader(TensorDataset(x, y), batch_size=4)


NUMPY_ON_CUDA = "device type tensor to numpy"  # PyTorch's TypeError for .numpy() of a GPU tensor
NUMPY_HINT = (".numpy() works on CPU tensors only: call .cpu() first (t.cpu().numpy()), or keep the arithmetic in "
              "torch on the tensors' device and take .item() of the result ((pred == y).sum().item()).")


def _device_probe(name, run, c):
    """Run `run(model, loader)` with the model on a simulated cuda:0 and CPU batches, where no GPU is here.

    Returns a phrase for the success line; CheckFailed when the code trips over a device mismatch."""
    models, loader = _probe_models(c)
    device = pick_device()
    if device.type in ("cuda", "mps"):  # the checks above ran the lesson's model there with CPU batches already
        model, what = models[1]
        _probe_one(name, run, model.to(device), what, loader, real=True)
        return " and, with CPU batches, on a model without buffers"
    try:
        for model, what in models:
            _probe_one(name, run, model, what, loader)
    except SimulationLimit as limit:
        return f"; the simulated cuda:0 cannot run this code, so its device check was skipped ({limit})"
    return (" and on a simulated cuda:0 with CPU batches (moved to the model's device), with and without BatchNorm "
            "buffers")


def _probe_one(name, run, model, what, loader, real=False):
    """`run` on `model` moved to a simulated cuda:0 (or on the `real` accelerator it is on), with CPU batches;
    CheckFailed naming the cause."""
    where = str(next(model.parameters()).device) if real else "cuda:0"
    place = where if real else "cuda:0 (simulated: no GPU here)"
    try:
        if real:
            run(model, loader)
            moved = sorted({str(t.device) for t in model.parameters()} - {where})
        else:
            with SimulatedCuda(say=False) as sim:
                fake = sim.model(model)  # its parameters require grad, as a real model's do
                run(fake, loader)
                moved = sorted({str(t.device) for t in list(fake.parameters()) + list(fake.buffers())} - {where})
    except CheckFailed as exc:
        text = str(exc).split("\nHint:")[0]
        if NUMPY_ON_CUDA in text:
            raise CheckFailed(
                f"{name} with {what} on {place} and a loader of CPU batches: expected it to "
                f"run with the model on a GPU, observed .numpy() of a tensor on cuda:0: {text}\n"
                f"Hint: {NUMPY_HINT}") from None
        if any(s in text for s in DEVICE_MISMATCH):
            raise CheckFailed(
                f"{name} with {what} on {place} and a loader of CPU batches: expected "
                f"every batch moved to the model's device, observed a device mismatch: {text}\n"
                "Hint: move each batch to the model's device first: device = next(model.parameters()).device, then "
                "x, y = x.to(device), y.to(device) (a global `device` is the CPU on a machine without a GPU, so it "
                "hides the bug there).") from None
        hint = ""
        if "StopIteration" in text and not list(model.buffers()):
            hint = ("\nHint: this model has no buffers: take the device from its parameters, "
                    "next(model.parameters()).device.")
        raise CheckFailed(f"{name} with {what} on {place} and a loader of CPU batches: {text}{hint}") from None
    expect(not moved, f"the model's device after {name}, with {what} on {place} and a loader of CPU batches",
           f"{where}, where it was", f"moved to {', '.join(moved)}",
           "move each batch to the model's device (x.to(device), with device = next(model.parameters()).device), "
           "not the model to the batches: the model stays where its owner put it.")


def _reference(model, loader, device):
    """Eval-mode logits (CPU, float64) and accuracy, computed on a copy."""
    ref = copy.deepcopy(model).eval()
    with torch.no_grad():
        logits = torch.cat([ref(x.to(device)).to("cpu", torch.float64) for x, _ in loader])
    labels = torch.cat([y for _, y in loader])
    return logits, (logits.argmax(1) == labels).double().mean().item()


def _evaluate(evaluate, model, loader, keep_outputs=False, where=""):
    """Run the learner's evaluate under `watch_validation`; a batch-of-one BatchNorm error gets its hint."""
    before = {str(t.device) for t in model.parameters()}
    try:
        with watch_validation(model, keep_outputs=keep_outputs) as w, _grad_mode_kept():
            got = call(evaluate, model, loader, name="evaluate", where=where, restore_grad=False,
                       hints={NUMPY_ON_CUDA: NUMPY_HINT})
            w.grad_after = torch.is_grad_enabled()
    except CheckFailed as exc:
        if BATCH_OF_ONE in str(exc):
            raise CheckFailed(f"{exc}\nHint: the last batch has one sample and BatchNorm was still in training mode: "
                              "call model.eval() before the loop.") from None
        raise
    after = {str(t.device) for t in model.parameters()}
    expect(after == before, "the model's device after evaluate", f"{', '.join(sorted(before))}, where it was",
           f"{', '.join(sorted(after))}",
           "move each batch to the model's device, not the model to the batches: the model stays where its owner "
           "put it.")
    return got, w


def _accuracy(got, what="evaluate's return value"):
    """The learner's accuracy as a float, or CheckFailed: the text asks for a Python float."""
    return python_float(got, what)


@check("evaluate_eval")
def check_evaluate_eval(evaluate, seed=0, n=None, batch_size=None):
    """evaluate(model, loader) runs in eval mode: same logits every call, BatchNorm untouched, right accuracy."""
    c = case(seed, n, batch_size, last_one=True)
    model, loader, device = _setup(seed, c)
    ref_logits, ref_acc = _reference(model, loader, device)
    buffers = {k: v.clone() for k, v in model.named_buffers()}
    first, w1 = _evaluate(evaluate, model, loader, keep_outputs=True)
    model.train()  # whatever the first call left, the second starts from training mode too
    second, w2 = _evaluate(evaluate, model, loader, keep_outputs=True)
    expect(w1.outputs and w2.outputs, "forward passes of the model inside evaluate", "at least one", "none",
           "call model(inputs) on every batch of the loader.")
    _expect_every_sample(w1, loader, c)
    a, b = torch.cat(w1.outputs), torch.cat(w2.outputs)
    diff = (a - b).abs().max().item() if a.shape == b.shape else float("inf")
    active = [i for i, c_ in enumerate(w1.calls) if c_["dropout_active"]]
    if active and active[0] > 0:  # eval mode at first, training mode later: switched back inside the loop
        dropout_hint = (f"forward pass 1 ran in eval mode and {len(active)} later ones (from pass {active[0] + 1}) in "
                        "training mode: the model went back to training mode inside the loop; put it back once, "
                        "after the loop.")
    elif active:
        dropout_hint = "call model.eval() before the loop: in training mode Dropout zeroes a random half of the units on every call."
    else:
        dropout_hint = ""
    expect(diff < 1e-5, "the logits of two evaluations of the same data", "identical",
           f"a max difference of {diff:.3g} ({w1.train_calls} of {len(w1.calls)} forward passes with Dropout active)",
           dropout_hint)
    moved = max(((model.get_buffer(k).double().cpu() - v.double().cpu()).abs().max().item() for k, v in buffers.items()),
                default=0.0)
    expect(moved == 0, "the BatchNorm running statistics after evaluate", "untouched",
           f"changed by up to {moved:.3g}",
           "call model.eval() before the loop: in training mode BatchNorm updates its running mean and variance "
           "with the validation batches.")
    expect(a.shape == ref_logits.shape and bool(torch.allclose(a, ref_logits, rtol=1e-4, atol=1e-5)),
           "the logits seen inside evaluate", "those of the model in eval mode (BatchNorm using its running statistics)",
           f"a max difference of {(a - ref_logits).abs().max().item() if a.shape == ref_logits.shape else 'other shapes'}",
           "put the whole model in eval mode with model.eval(), not only some layers.")
    some = [c_ for c_ in w1.calls if c_["modules_training"]]
    expect(not some, "forward passes inside evaluate with the model (or a submodule) in training mode", "none",
           f"{len(some)} of {len(w1.calls)} (in training mode: {', '.join(some[0]['modules_training'])})" if some else "",
           "call model.eval(): it switches the model and every submodule; switching only some layer classes leaves "
           "the others (and the model's own flag, model.training) in training mode.")
    model.train()
    model.training = False  # the top module's flag off, its layers still training: model.training says nothing of them
    _, w3 = _evaluate(evaluate, model, loader, where="on a model whose own flag is off but whose layers are training")
    mixed = [c_ for c_ in w3.calls if c_["modules_training"]]
    expect(not mixed, "forward passes inside evaluate, called on a model whose own flag is off (model.training is "
           "False) while its layers are in training mode", "none in training mode",
           f"{len(mixed)} of {len(w3.calls)} (in training mode: {', '.join(mixed[0]['modules_training'])})" if mixed
           else "", "call model.eval() whatever model.training says: it is the top module's flag only, and each "
           "layer has its own")
    for got in (first, second):
        acc = _accuracy(got)
        expect(abs(acc - ref_acc) < 1e-6, f"the accuracy returned ({_describe(c)})",
               f"{ref_acc:.4f} (correct / total over all {c['n']} samples)", f"{acc:.4f}",
               "count correct predictions (argmax of the logits == label) over every batch and divide by the number "
               "of samples seen (a short last batch counts its own size), not by the number of batches.")
    _dropped_last(evaluate, model, loader, device, c)
    _shuffled(evaluate, model, loader, device, c, seed)
    _stream_left(evaluate, model, loader, seed)

    def probe(fake, cpu_loader):
        call(evaluate, fake, cpu_loader, name="evaluate", where="with CPU batches, the model on another device")

    where = _device_probe("evaluate", probe, c)
    return (f"identical logits on two calls, BatchNorm buffers untouched, accuracy {ref_acc:.3f} as in eval mode, "
            f"a Python float ({_describe(c)}, on {device}){where}")


def _stream_left(evaluate, model, loader, seed):
    """evaluate called from two different states of the global random stream leaves two different states: it does
    not reseed the stream (the next training epoch would draw the same Dropout masks after every validation)."""
    after = []
    with torch.random.fork_rng(devices=[]):
        for start in (seed + 301, seed + 302):
            torch.manual_seed(start)
            _evaluate(evaluate, model, loader, where=f"after torch.manual_seed({start})")
            after.append(torch.get_rng_state())
    expect(not torch.equal(*after), f"the global random stream after evaluate, called after torch.manual_seed"
           f"({seed + 301}) and after torch.manual_seed({seed + 302})", "two different states: evaluate leaves the "
           "caller's stream where its own draws (a DataLoader's) left it", "the same state both times: evaluate "
           "reseeds the global random stream, so every epoch after a validation draws the same Dropout masks",
           "do not call torch.manual_seed inside evaluate: the evaluation itself draws nothing (eval mode), and "
           "seeding is the script's, once, at the start.")


def _expect_every_sample(w, loader, c):
    """Every sample the loader yields goes through the model once: the accuracy is over all of them."""
    sizes = [len(y) for _, y in loader]
    seen = [c_["batch"] for c_ in w.calls]
    rows = sum(int(o.shape[0]) for o in w.outputs if o.dim())
    if rows == sum(sizes):
        return
    hint = ""
    if seen == sizes[:-1] and sizes[-1] < sizes[0]:
        hint = (f"the short last batch ({sizes[-1]} samples) never went through the model: evaluate every batch the "
                "loader yields (in eval mode, BatchNorm copes with any batch size, even one).")
    expect(False, f"the samples run through the model inside evaluate ({_describe(c)})",
           f"all {sum(sizes)}, once each ({len(sizes)} batches of {', '.join(map(str, sizes))})",
           f"{rows} (forward passes on batches of {', '.join(map(str, seen))})", hint)


def _dropped_last(evaluate, model, loader, device, c):
    """The accuracy over a loader that yields only part of its data set (drop_last=True skips the short batch)."""
    bs = c["batch_size"]
    part = DataLoader(loader.dataset, batch_size=bs, shuffle=False, drop_last=True)
    seen = len(part) * bs
    if seen in (0, len(loader.dataset)):
        return
    _, ref_acc = _reference(model, part, device)
    model.train()
    got, _ = _evaluate(evaluate, model, part, where="on a loader with drop_last=True")
    acc = _accuracy(got)
    correct = round(ref_acc * seen)
    total = len(loader.dataset)
    expect(abs(acc - ref_acc) < 1e-6, f"the accuracy returned on a loader with drop_last=True ({seen} of the "
           f"data set's {total} samples yielded, in batches of {bs})",
           f"{ref_acc:.4f} (correct / the {seen} samples the loader yielded)", f"{acc:.4f}",
           f"that is {correct} / {total}, the size of loader.dataset: divide by the samples the loader yielded "
           "(count len(y) of each batch): a loader may skip some (drop_last, a sampler)."
           if total and abs(acc - correct / total) < 1e-9 else "")


def _shuffled(evaluate, model, loader, device, c, seed):
    """The accuracy over a loader that yields its data set in another order (as shuffle=True or a sampler does).

    An untrained model predicts nearly one class, so any pairing of predictions and labels scores alike: here the
    samples are picked for predictions of every class, and labelled so that the right pairing scores about 2/3."""
    n, classes = len(loader.dataset), c["classes"]
    g = torch.Generator().manual_seed(seed + 11)
    pool = torch.randn(40 * n, c["inputs"], generator=g, dtype=torch.float64).to(c["dtype"]) * 3
    ref = copy.deepcopy(model).eval()
    with torch.no_grad():
        predicted = ref(pool.to(device)).argmax(1).cpu()
    by_class = [torch.nonzero(predicted == k).flatten().tolist() for k in range(classes)]
    by_class = [idx for idx in by_class if idx]
    if len(by_class) < 2:
        return  # this model predicts one class whatever the input: the order cannot show
    picked = [by_class[i % len(by_class)][i // len(by_class)] for i in range(n)
              if i // len(by_class) < len(by_class[i % len(by_class)])]
    x, pred = pool[picked], predicted[picked]
    y = torch.where(torch.rand(len(picked), generator=g) < 1 / 3, (pred + 1) % classes, pred)
    dataset = TensorDataset(x, y)
    order = torch.randperm(len(picked), generator=g).tolist()
    mixed = DataLoader(dataset, batch_size=c["batch_size"], sampler=order)
    ref_logits, ref_acc = _reference(model, mixed, device)
    model.train()
    got, _ = _evaluate(evaluate, model, mixed, where="on a loader in another order")
    acc = _accuracy(got)
    if abs(acc - ref_acc) < 1e-6:
        return
    in_dataset_order = (ref_logits.argmax(1) == y).double().mean().item()
    expect(False, f"the accuracy returned on a loader that yields its {len(picked)} samples in another order (a "
           f"sampler, as shuffle=True uses; batches of {c['batch_size']})",
           f"{ref_acc:.4f} (correct / total, each prediction against the label yielded with its sample)", f"{acc:.4f}",
           f"that is the predictions compared with the labels in the data set's order ({in_dataset_order:.4f}): "
           "compare each batch's predictions with the labels the loader yields with that batch."
           if abs(acc - in_dataset_order) < 1e-6 else "")


@check("evaluate_no_grad")
def check_evaluate_no_grad(evaluate, seed=0, n=None, batch_size=None):
    """evaluate(model, loader) builds no autograd graph: every forward pass runs with gradient tracking off."""
    c = case(seed, n, batch_size)
    model, loader, device = _setup(seed, c)
    _, w = _evaluate(evaluate, model, loader)
    expect(w.calls, "forward passes of the model inside evaluate", "at least one", "none")
    with_grad = [c for c in w.calls if c["grad_enabled"] or c["requires_grad"]]
    expect(not with_grad and w.meter.saved == 0, "forward passes with autograd recording a graph",
           "none (torch.is_grad_enabled() False, outputs without grad_fn)",
           f"{len(with_grad)} of {len(w.calls)}, {w.meter.saved} tensors saved for a backward pass that never comes "
           f"({w.meter.nbytes / 1024:.1f} KiB)",
           "wrap the loop in `with torch.no_grad():` (or torch.inference_mode()); model.eval() alone does not turn "
           "autograd off.")
    expect(w.grad_after, "autograd after evaluate returns (torch.is_grad_enabled())",
           "on again, as it was before the call", "still off",
           "turn autograd off for the evaluation only, with a block: `with torch.no_grad():` (or a decorator); "
           "torch.set_grad_enabled(False) as a statement switches it off for everything that runs afterwards, "
           "and the next training step fails with 'element 0 of tensors does not require grad'.")
    model.eval()  # a model handed over in eval mode (after an earlier evaluation): no graph either
    _, w_eval = _evaluate(evaluate, model, loader, where="on a model handed over in eval mode")
    graphed = [c for c in w_eval.calls if c["grad_enabled"] or c["requires_grad"]]
    expect(not graphed and w_eval.meter.saved == 0, "forward passes with autograd recording a graph, on a model "
           "handed over in eval mode", "none, as for a model in training mode",
           f"{len(graphed)} of {len(w_eval.calls)}, {w_eval.meter.saved} tensors saved for a backward pass",
           "turn autograd off whatever mode the model comes in (`with torch.no_grad():`): a grad mode keyed on "
           "model.training (read before model.eval()) is on for a model that is already in eval mode.")
    model.train()
    with torch.no_grad():  # a caller that had autograd off (inside its own no_grad block) must find it off again
        _, w_off = _evaluate(evaluate, model, loader, where="called with autograd off (inside torch.no_grad())")
    expect(not w_off.grad_after, "autograd after evaluate returns, when called with autograd off (inside the "
           "caller's `with torch.no_grad():`)", "still off, as it was before the call", "on",
           "evaluate turned autograd on and left it on (e.g. torch.set_grad_enabled(True) as a statement): turn it "
           "off for the evaluation with a block (`with torch.no_grad():`), which gives back the mode it found.")
    return (f"{len(w.calls)} forward passes, all with autograd off, 0 tensors saved for backward, autograd as it was "
            "after (on after a call with it on, off after a call with it off)")


@check("evaluate_restores")
def check_evaluate_restores(evaluate, seed=0, n=None, batch_size=None):
    """evaluate(model, loader) leaves the model in the mode it found it: training stays training, eval stays eval."""
    c = case(seed, n, batch_size)
    for start in ("train", "eval"):
        model, loader, _ = _setup(seed, c)
        model.train(start == "train")
        _, w = _evaluate(evaluate, model, loader, where=f"on a model in {start} mode")
        hint = ("remember `was_training = model.training` before model.eval() and call `model.train(was_training)` at "
                "the end (a try/finally makes it survive errors).")
        observed = w.mode_after
        if w.mode_after == "mixed":
            on = sorted({type(m).__name__ for m in model.modules() if m is not model and m.training})
            off = sorted({type(m).__name__ for m in model.modules() if m is not model and not m.training})
            observed = (f"mixed: the model's own flag model.training={model.training}, submodules in training mode: "
                        f"{', '.join(on) or 'none'}; in eval mode: {', '.join(off) or 'none'}")
            subs = {m.training for m in model.modules() if m is not model}
            if model.training == (start == "train"):
                why = ("the model's own flag is right, its layers are not: `model.training = ...` sets only the top "
                       "module's flag; ")
            elif subs == {start == "train"}:
                why = ("the layers are right, the model's own flag is not: switching the layers one by one misses the "
                       "model itself; ")
            else:
                why = ""
            hint = why + "model.train(mode) / model.eval() switch the model and every submodule together. " + hint
        elif start == "train":
            hint = "after the loop, put the model back: model.train() when it was training. " + hint
        else:
            hint = "a model that was already in eval mode must stay in eval mode: do not call model.train() " \
                   "unconditionally. " + hint
        expect(w.mode_after == start, f"the model's mode after evaluate, on a model in {start} mode", start,
               observed, hint)
    return "a training model is back in training mode, an eval model stays in eval mode"


def _rng_state(device):
    """The state of the generator Dropout draws from on `device` (CUDA's own on a GPU, MPS's on Apple, else the CPU's)."""
    if device.type == "cuda":
        return torch.cuda.get_rng_state(device)
    if device.type == "mps" and hasattr(torch, "mps"):
        return torch.mps.get_rng_state()
    return torch.get_rng_state()


def _set_rng_state(device, state):
    if device.type == "cuda":
        torch.cuda.set_rng_state(state, device)
    elif device.type == "mps" and hasattr(torch, "mps"):
        torch.mps.set_rng_state(state)
    else:
        torch.set_rng_state(state)


@contextlib.contextmanager
def _rng_kept(device):
    """Restore the generator of `device` after the block (@check restores the CPU's)."""
    state = _rng_state(device)
    try:
        yield
    finally:
        _set_rng_state(device, state)


def _record_dropout_rng(model, device):
    """Record the RNG state before each Dropout call of `model` (learner code may reseed or draw numbers), in the
    forward passes with autograd on (the training steps'; a probe under no_grad is not one)."""
    states = []
    handles = [m.register_forward_pre_hook(lambda module, args: states.append(_rng_state(device))
                                           if torch.is_grad_enabled() else None)
               for m in model.modules() if isinstance(m, _DROPOUT)]
    return states, handles


def _reference_epoch(model, loader, lr, states, device):
    """The epoch a correct train_epoch runs, on a copy, replaying the Dropout masks the learner's run drew."""
    ref = copy.deepcopy(model)
    opt = torch.optim.SGD(ref.parameters(), lr=lr)
    replay = iter(states)

    def reuse(module, args):
        state = next(replay, None)
        if state is not None:
            _set_rng_state(device, state)

    handles = [m.register_forward_pre_hook(reuse) for m in ref.modules() if isinstance(m, _DROPOUT)]
    losses = []
    try:
        with torch.random.fork_rng(devices=[]), _rng_kept(device):
            ref.train()
            for x, y in loader:
                opt.zero_grad()
                loss = F.cross_entropy(ref(x.to(device)), y.to(device))
                loss.backward()
                opt.step()
                losses.append(loss.item())
    finally:
        for h in handles:
            h.remove()
    return ref, losses


def _steps(w):
    """The forward passes run with autograd on: the training steps' (a probe under no_grad is not a step)."""
    return [c_ for c_ in w.calls if c_["grad_enabled"]]


def _in_train_mode(c_):
    return c_["dropout_active"] or c_["bn_batch_stats"]


def _eval_passes_hint(calls):
    """Why some training forward passes ran in eval mode, from their order (else the general advice)."""
    train = [_in_train_mode(c_) for c_ in calls]
    if train and train[0] and not all(train):
        later = train.index(False)
        return (f"forward pass 1 ran in training mode and pass {later + 1} (and {train.count(False) - 1} more) in eval "
                "mode: the model was switched to eval mode during the epoch and not back; every step must train in "
                "training mode (call model.train() again after anything that switches it).")
    return ("call model.train() at the start of every epoch (with the parentheses: it switches every submodule; "
            "`model.training = True` only flags the top module): evaluate() puts the model in eval mode.")


def _mixed_start(train_epoch, seed, c, lr):
    """A model whose own flag says training while its layers are in eval mode (model.training set alone); the random
    states its Dropout layers drew from, begun from another seed than the main run's."""
    model, loader, device = _setup(seed, c)
    model.eval()
    model.training = True
    layers = sorted({type(m).__name__ for m in model.modules() if m is not model})
    with _rng_kept(device):
        torch.random.default_generator.manual_seed(seed + 200)
        if device.type == "cuda":
            torch.cuda.manual_seed(seed + 200)
        states, handles = _record_dropout_rng(model, device)
        try:
            with watch_validation(model) as w, _grad_mode_kept():
                call(train_epoch, model, loader, torch.optim.SGD(model.parameters(), lr=lr), name="train_epoch",
                     where="on a model whose layers are in eval mode but model.training is True")
        finally:
            for h in handles:
                h.remove()
    steps = _steps(w)
    evals = sum(not _in_train_mode(c_) for c_ in steps)
    expect(steps and evals == 0, "forward passes of train_epoch with autograd on (the training steps') on a model "
           f"whose layers are in eval mode ({', '.join(layers)}) while its own flag model.training is True",
           "all in training mode (Dropout active, BatchNorm updating)", f"{evals} of {len(steps)} in eval mode",
           "model.training is the top module's flag only: it says nothing of the layers inside; call model.train() "
           "at the start of every epoch, whatever model.training says." if steps and evals == len(steps) else "")
    return states


@check("train_epoch")
def check_train_epoch(train_epoch, seed=0, n=None, batch_size=None, lr=0.1):
    """train_epoch(model, loader, optimizer) trains in training mode even when evaluate left the model in eval mode."""
    c = case(seed, n, batch_size, train=True)
    model, loader, device = _setup(seed, c)
    model.eval()  # as evaluate leaves it, or a model.eval() somewhere earlier
    start = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    with _rng_kept(device):
        torch.random.default_generator.manual_seed(seed + 100)  # deterministic Dropout masks (@check restores the RNG)
        if device.type == "cuda":
            torch.cuda.manual_seed(seed + 100)
        states, handles = _record_dropout_rng(model, device)
        begun = _rng_state(device)
        try:
            with watch_validation(model) as w, _grad_mode_kept(), _graphs_kept(model) as alive:
                got = call(train_epoch, model, loader, opt, name="train_epoch", where="on a model left in eval mode")
        finally:
            for h in handles:
                h.remove()
        moved = not torch.equal(_rng_state(device), begun)
    batches = len(loader)
    expect(w.calls, "forward passes of the model inside train_epoch", "at least one", "none")
    steps = _steps(w)
    expect(steps, "forward passes of the model with autograd on inside train_epoch (the training steps')",
           "at least one", f"none ({len(w.calls)} with autograd off)")
    evals = sum(not _in_train_mode(c_) for c_ in steps)
    expect(evals == 0, "forward passes of train_epoch with autograd on (the training steps') on a model that "
           "evaluate() left in eval mode", "all in training mode (Dropout active, BatchNorm updating)",
           f"{evals} of {len(steps)} in eval mode", _eval_passes_hint(steps))
    partial = [c_ for c_ in steps if c_["modules_eval"]]
    expect(not partial, "forward passes of train_epoch with every module in training mode (model.training and each "
           "layer's own flag), of those with autograd on (the training steps')", f"all {len(steps)}", f"{len(steps) - len(partial)} (in eval mode: "
           + ("the model's own flag, model.training is False)" if partial[0]["modules_eval"] == [type(model).__name__]
              else f"{', '.join(partial[0]['modules_eval'])})") if partial else "",
           "call model.train() on the model itself: it sets the model's own flag and every layer's; switching only "
           "its children or some layer classes leaves the rest in eval mode")
    expect(w.bn_batches == batches, "BatchNorm's num_batches_tracked during the epoch", f"+{batches} (one per batch)",
           f"+{w.bn_batches}",
           f"{w.bn_batches - batches} forward passes in training mode beyond one per batch: each of them updates "
           "BatchNorm's running statistics, with autograd off too (e.g. a loss recomputed after optimizer.step()); "
           "run one forward pass per batch and record that pass's loss.item()." if w.bn_batches > batches else "")
    ref, losses = _reference_epoch(start, loader, lr, states, device)
    diff = max((p - q).abs().max().item() for p, q in zip(model.parameters(), ref.parameters()))
    expect(diff < 1e-4, "the parameters after the epoch", f"those of {batches} SGD steps in training mode",
           f"a max difference of {diff:.3g}",
           "for each batch: optimizer.zero_grad(), loss = F.cross_entropy(model(x), y) (on the logits), "
           "loss.backward(), optimizer.step().")
    ref_loss = sum(losses) / len(losses)
    loss = python_float(got, "train_epoch's return value (the mean training loss)")
    per_sample = sum(l * len(y) for l, (_, y) in zip(losses, loader)) / c["n"]
    hint = ""
    if abs(loss - per_sample) < 1e-6 and abs(per_sample - ref_loss) > 1e-6:
        hint = ("that is the mean over samples (each batch weighted by its size); the text asks for the mean of the "
                "batch losses: each batch's loss.item() counts once, the short last batch too.")
    elif abs(loss - losses[-1]) < 1e-6:
        hint = "that is the last batch's loss; return the mean over all the batches of the epoch."
    else:
        tail = next((k for k in range(2, batches) if abs(loss - sum(losses[-k:]) / k) < 1e-6), None)
        if tail is not None and abs(ref_loss - sum(losses[-tail:]) / tail) > 1e-6:
            hint = (f"that is the mean of the last {tail} batch losses only; return the mean over all the {batches} "
                    "batches of the epoch.")
    expect(abs(loss - ref_loss) < 1e-4, f"the mean loss of the epoch ({_describe(c)})",
           f"{ref_loss:.5f} (the mean of the {batches} batch losses: their sum / {batches})", f"{loss:.5f}", hint)
    piled = max(alive, default=0)
    expect(piled < 2, "the autograd graphs of earlier steps while train_epoch runs",
           "freed once the next step has begun (each step's loss.item(), a float, is what the epoch keeps)",
           f"{piled} graphs of steps before the previous one still alive when step {alive.index(piled) + 1} began: "
           "something keeps each step's loss tensor (a running total that is a tensor, or a list of losses)",
           "add loss.item() to a float total (or append it to a list of floats): a loss tensor holds its step's "
           "autograd graph, and summing them keeps every step's graph alive until the epoch ends.")

    expect(moved, "the global random stream Dropout draws from, after train_epoch",
           f"moved on by the epoch's {batches} Dropout masks, as a plain epoch moves it",
           "as it was before the epoch: train_epoch put the random state back (e.g. torch.random.fork_rng around "
           "it, or set_rng_state), so the next epoch draws the same masks again",
           "leave the random stream alone inside train_epoch: each epoch must draw new masks from where the last "
           "one left the stream.")
    other = _mixed_start(train_epoch, seed, c, lr)
    expect(not (states and other and torch.equal(states[0], other[0])),
           "the first Dropout mask of two epochs begun from different random states (the caller's "
           f"torch.manual_seed({seed + 100}), then {seed + 200})", "different masks, drawn from the caller's stream",
           "the same random state at the first Dropout in both: train_epoch reseeds the global random stream, so "
           "every epoch draws the same masks (and a shuffling DataLoader the same order)",
           "do not call torch.manual_seed (or set the random state) inside train_epoch: seed once, at the start of "
           "the program.")

    def probe(fake, cpu_loader):
        fake.eval()
        call(train_epoch, fake, cpu_loader, torch.optim.SGD(fake.parameters(), lr=lr), name="train_epoch",
             where="with CPU batches, the model on another device")

    where = _device_probe("train_epoch", probe, c)
    return (f"{batches} steps in training mode from a model left in eval mode (and from one whose layers alone were), mean loss {ref_loss:.4f} as expected, "
            f"a Python float ({_describe(c)}, on {device}){where}")
