"""Checks for lesson 06, missing model.eval() / torch.no_grad(): evaluate and train_epoch.

The model has Dropout and BatchNorm with warmed-up running statistics, so evaluating in training mode
shows: logits that change from call to call, running statistics that move, and a different accuracy.
`evaluation.watch` records the mode and autograd state of every forward pass.
"""
import copy

import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

from .. import data
from ..device import pick_device
from ..evaluation import bn_mlp, watch
from . import CheckFailed, call, check, close, expect

__all__ = ["check_evaluate_eval", "check_evaluate_no_grad", "check_evaluate_restores", "check_train_epoch"]

BATCH_OF_ONE = "Expected more than 1 value per channel when training"


def _setup(seed, n, batch_size, p=0.5, device=None):
    """A warmed-up Dropout+BatchNorm model in training mode on `device`, and a CPU loader (not shuffled)."""
    device = device or pick_device()
    model = bn_mlp(inputs=4, hidden=16, outputs=3, p=p, seed=seed)
    x, y = data.blobs(n=n + 64, features=4, classes=3, spread=1.5, seed=seed).tensors
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for i in range(4):  # running statistics away from their (0, 1) start
            model(x[n + 16 * i: n + 16 * (i + 1)] * 1.5 + 0.5)
    model.train()
    loader = DataLoader(TensorDataset(x[:n], y[:n]), batch_size=batch_size, shuffle=False)
    return model.to(device), loader, device


def _reference(model, loader, device):
    """Eval-mode logits (CPU, float64) and accuracy, computed on a copy."""
    ref = copy.deepcopy(model).eval()
    with torch.no_grad():
        logits = torch.cat([ref(x.to(device)).to("cpu", torch.float64) for x, _ in loader])
    labels = torch.cat([y for _, y in loader])
    return logits, (logits.argmax(1) == labels).double().mean().item()


def _evaluate(evaluate, model, loader, keep_outputs=False, where=""):
    """Run the learner's evaluate under `watch`; a batch-of-one BatchNorm error gets its hint."""
    try:
        with watch(model, keep_outputs=keep_outputs) as w:
            got = call(evaluate, model, loader, name="evaluate", where=where)
    except CheckFailed as exc:
        if BATCH_OF_ONE in str(exc):
            raise CheckFailed(f"{exc}\nHint: the last batch has one sample and BatchNorm was still in training mode: "
                              "call model.eval() before the loop.") from None
        raise
    return got, w


def _number(got):
    """The learner's metric as a float, or CheckFailed."""
    if torch.is_tensor(got) and got.numel() == 1:
        return float(got)
    expect(isinstance(got, (float, int)) and not isinstance(got, bool), "evaluate's return value",
           "the accuracy as a number (a Python float)", type(got).__name__)
    return float(got)


@check("evaluate_eval")
def check_evaluate_eval(evaluate, seed=0, n=40, batch_size=16):
    """evaluate(model, loader) runs in eval mode: same logits every call, BatchNorm untouched, right accuracy."""
    model, loader, device = _setup(seed, n, batch_size)
    ref_logits, ref_acc = _reference(model, loader, device)
    buffers = {k: v.clone() for k, v in model.named_buffers()}
    first, w1 = _evaluate(evaluate, model, loader, keep_outputs=True)
    model.train()  # whatever the first call left, the second starts from training mode too
    second, w2 = _evaluate(evaluate, model, loader, keep_outputs=True)
    expect(w1.outputs and w2.outputs, "forward passes of the model inside evaluate", "at least one", "none",
           "call model(inputs) on every batch of the loader.")
    a, b = torch.cat(w1.outputs), torch.cat(w2.outputs)
    diff = (a - b).abs().max().item() if a.shape == b.shape else float("inf")
    expect(diff < 1e-5, "the logits of two evaluations of the same data", "identical",
           f"a max difference of {diff:.3g} ({w1.train_calls} of {len(w1.calls)} forward passes with Dropout active)",
           "call model.eval() before the loop: in training mode Dropout zeroes a random half of the units on every call.")
    moved = max(((model.get_buffer(k).float().cpu() - v.float().cpu()).abs().max().item() for k, v in buffers.items()),
                default=0.0)
    expect(moved == 0, "the BatchNorm running statistics after evaluate", "untouched",
           f"changed by up to {moved:.3g}",
           "call model.eval() before the loop: in training mode BatchNorm updates its running mean and variance "
           "with the validation batches.")
    expect(a.shape == ref_logits.shape and close(a, ref_logits), "the logits seen inside evaluate",
           "those of the model in eval mode (BatchNorm using its running statistics)",
           f"a max difference of {(a - ref_logits).abs().max().item() if a.shape == ref_logits.shape else 'other shapes'}",
           "put the whole model in eval mode with model.eval(), not only some layers.")
    for got in (first, second):
        acc = _number(got)
        expect(abs(acc - ref_acc) < 1e-6, "the accuracy returned", f"{ref_acc:.4f} (correct / total over all {n} samples)",
               f"{acc:.4f}", "count correct predictions (argmax of the logits == label) over every batch and divide by "
               "the number of samples, not by the number of batches.")
    return (f"identical logits on two calls, BatchNorm buffers untouched, accuracy {ref_acc:.3f} as in eval mode "
            f"({n} samples, batches of {batch_size}, on {device})")


@check("evaluate_no_grad")
def check_evaluate_no_grad(evaluate, seed=0, n=40, batch_size=16):
    """evaluate(model, loader) builds no autograd graph: every forward pass runs with gradient tracking off."""
    model, loader, device = _setup(seed, n, batch_size)
    _, w = _evaluate(evaluate, model, loader)
    expect(w.calls, "forward passes of the model inside evaluate", "at least one", "none")
    with_grad = [c for c in w.calls if c["grad_enabled"] or c["requires_grad"]]
    expect(not with_grad and w.meter.saved == 0, "forward passes with autograd recording a graph",
           "none (torch.is_grad_enabled() False, outputs without grad_fn)",
           f"{len(with_grad)} of {len(w.calls)}, {w.meter.saved} tensors saved for a backward pass that never comes "
           f"({w.meter.nbytes / 1024:.1f} KiB)",
           "wrap the loop in `with torch.no_grad():` (or torch.inference_mode()); model.eval() alone does not turn "
           "autograd off.")
    return f"{len(w.calls)} forward passes, all with autograd off, 0 tensors saved for backward"


@check("evaluate_restores")
def check_evaluate_restores(evaluate, seed=0, n=40, batch_size=16):
    """evaluate(model, loader) leaves the model in the mode it found it: training stays training, eval stays eval."""
    for start in ("train", "eval"):
        model, loader, _ = _setup(seed, n, batch_size)
        model.train(start == "train")
        _, w = _evaluate(evaluate, model, loader, where=f"on a model in {start} mode")
        hint = ("remember `was_training = model.training` before model.eval() and call `model.train(was_training)` at "
                "the end (a try/finally makes it survive errors).")
        if start == "train":
            hint = "after the loop, put the model back: model.train() when it was training. " + hint
        else:
            hint = "a model that was already in eval mode must stay in eval mode: do not call model.train() " \
                   "unconditionally. " + hint
        expect(w.mode_after == start, f"the model's mode after evaluate, on a model in {start} mode", start,
               w.mode_after, hint)
    return "a training model is back in training mode, an eval model stays in eval mode"


def _reference_epoch(model, loader, seed, lr):
    ref = copy.deepcopy(model)
    opt = torch.optim.SGD(ref.parameters(), lr=lr)
    losses = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        ref.train()
        for x, y in loader:
            device = next(ref.parameters()).device
            opt.zero_grad()
            loss = F.cross_entropy(ref(x.to(device)), y.to(device))
            loss.backward()
            opt.step()
            losses.append(loss.item())
    return ref, sum(losses) / len(losses)


@check("train_epoch")
def check_train_epoch(train_epoch, seed=0, n=64, batch_size=16, lr=0.1):
    """train_epoch(model, loader, optimizer) trains in training mode even when evaluate left the model in eval mode."""
    model, loader, device = _setup(seed, n, batch_size)
    model.eval()  # as evaluate leaves it, or a model.eval() somewhere earlier
    ref, ref_loss = _reference_epoch(model, loader, seed + 100, lr)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    torch.manual_seed(seed + 100)  # the same dropout masks as the reference
    with watch(model) as w:
        got = call(train_epoch, model, loader, opt, name="train_epoch", where="on a model left in eval mode")
    batches = len(loader)
    expect(w.calls, "forward passes of the model inside train_epoch", "at least one", "none")
    evals = len(w.calls) - w.train_calls
    expect(evals == 0, "forward passes of train_epoch on a model that evaluate() left in eval mode",
           "all in training mode (Dropout active, BatchNorm updating)", f"{evals} of {len(w.calls)} in eval mode",
           "call model.train() at the start of every epoch: evaluate() puts the model in eval mode.")
    expect(w.bn_batches == batches, "BatchNorm's num_batches_tracked during the epoch", f"+{batches} (one per batch)",
           f"+{w.bn_batches}")
    expect(torch.is_tensor(got) and got.numel() == 1 or isinstance(got, (float, int)), "train_epoch's return value",
           "the mean training loss as a Python float", type(got).__name__)
    expect(abs(float(got) - ref_loss) < 1e-4, "the mean loss of the epoch", f"{ref_loss:.5f}", f"{float(got):.5f}",
           "return the mean of the batch losses (loss.item() of each batch).")
    diff = max((p - q).abs().max().item() for p, q in zip(model.parameters(), ref.parameters()))
    expect(diff < 1e-4, "the parameters after the epoch", f"those of {batches} SGD steps in training mode",
           f"a max difference of {diff:.3g}",
           "for each batch: optimizer.zero_grad(), loss = cross_entropy(model(x), y), loss.backward(), optimizer.step().")
    return f"{batches} steps in training mode from a model left in eval mode, mean loss {ref_loss:.4f} as expected"
