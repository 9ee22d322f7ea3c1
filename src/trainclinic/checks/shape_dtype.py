"""Checks for lesson 02, shape and dtype errors: prepare_batch, build_model, regression_loss.

Each feeds the learner's function seeded batches of several sizes, runs forward and backward through
PyTorch, and compares shapes, dtypes and loss values with PyTorch's own reference computation.
"""
import warnings

import torch
from torch import nn
from torch.nn import functional as F

from . import CheckFailed, call, check, close, expect

__all__ = ["HINTS", "check_prepare_batch", "check_build_model", "check_regression_loss", "raw_batch", "reference_model"]


HINTS = {
    "channels instead": "a conv layer wants (N, C, H, W): give grayscale images their channel dimension with "
    "images.unsqueeze(1) (position 1, after the batch).",
    "expected target dtype": "CrossEntropyLoss wants class indices as int64 (Long): labels.long().",
    "0D or 1D target": "labels must have shape (N,): one class index per sample.",
    "should be the same": "inputs and weights must share one dtype: keep the model float32 and convert the data "
    "with .float().",
    "must have the same dtype": "inputs and weights must share one dtype: keep the model float32 and convert the data "
    "with .float().",
    "cannot be multiplied": "mat1 is what reaches the Linear (N x features), mat2 its weight transposed "
    "(in_features x out_features): size in_features for what really arrives, 8 channels x (size // 2) x (size // 2) "
    "after the pool, computed from `size`.",
    "batch_size": "logits need one row per sample: keep dimension 0 as the batch (x.flatten(1) or nn.Flatten()).",
}


def _call(fn, *args, **kwargs):
    """checks.call, with this lesson's hint in place of the generic one where a message matches."""
    try:
        return call(fn, *args, **kwargs)
    except CheckFailed as exc:
        text = str(exc).split("\nHint:")[0]
        hint = next((h for key, h in HINTS.items() if key in text), None)
        if hint is None:
            raise
        raise CheckFailed(f"{text}\nHint: {hint}") from None


def raw_batch(n, size=12, classes=3, seed=0):
    """A batch as a NumPy loader hands it over: float64 images (n, size, size), float64 labels (n,)."""
    g = torch.Generator().manual_seed(seed)
    images = torch.rand(n, size, size, generator=g, dtype=torch.float64)
    labels = torch.randint(0, classes, (n,), generator=g).to(torch.float64)
    return images, labels


def reference_model(size=12, classes=3, seed=0):
    """The lesson's small CNN, built correctly: conv, ReLU, 2x2 max-pool, flatten, Linear."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(8 * (size // 2) ** 2, classes))


def _pair(out, name):
    expect(isinstance(out, (tuple, list)) and len(out) == 2 and all(torch.is_tensor(t) for t in out),
           f"{name}'s result", "a pair (images, labels) of tensors", repr(type(out).__name__))
    return out


@check("prepare_batch")
def check_prepare_batch(prepare_batch, seed=0, cases=((8, 12), (1, 12), (5, 16))):
    """prepare_batch(images, labels) gives float32 (N, 1, H, W) images and int64 (N,) labels that train."""
    for n, size in cases:
        images, labels = raw_batch(n, size, seed=seed + n)
        x, y = _pair(_call(prepare_batch, images.clone(), labels.clone(), name="prepare_batch"), "prepare_batch")
        model = reference_model(size, seed=seed)

        def train_once():  # PyTorch's own verdict on the batch first: the real error, if any
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            return loss

        where = f"(a conv net and cross_entropy on prepare_batch's output, batch of {n} images {size}x{size})"
        loss = _call(train_once, name="training", where=where)
        expect(x.shape == (n, 1, size, size), f"images shape for a batch of {n}", f"({n}, 1, {size}, {size})",
               tuple(x.shape), "add the channel dimension at position 1: images.unsqueeze(1).")
        expect(x.dtype == torch.float32, "images dtype", "torch.float32 (the model's dtype)", x.dtype,
               "convert with .float() or .to(torch.float32).")
        expect(close(x.squeeze(1), images), "images values", "unchanged (only dtype and shape change)",
               "different values")
        expect(y.shape == (n,), f"labels shape for a batch of {n}", f"({n},)", tuple(y.shape),
               "keep one class index per sample; beware .squeeze() on a batch of one.")
        expect(y.dtype == torch.int64, "labels dtype", "torch.int64 (Long class indices)", y.dtype,
               "CrossEntropyLoss wants class indices as int64: labels.long().")
        expect(torch.equal(y, labels.long()), "labels values", labels.long().tolist(), y.tolist())
        want = F.cross_entropy(model(images.unsqueeze(1).float()), labels.long())
        expect(loss.dtype == torch.float32 and close(loss, want), "the cross-entropy on your batch",
               f"{want.item():.5f} (float32)", f"{loss.item():.5f} ({loss.dtype})")
    sizes = ", ".join(f"{n}x{s}x{s}" for n, s in cases)
    return f"float32 (N, 1, H, W) images and int64 (N,) labels; forward, loss and backward run for batches {sizes}"


def _grads_ok(model, n, size):
    for name, p in model.named_parameters():
        expect(p.grad is not None, f"the gradient of `{name}` after backward (batch of {n}, size {size})",
               "a tensor", "None", "every parameter should be used in forward.")
        expect(bool(torch.isfinite(p.grad).all()), f"the gradient of `{name}`", "finite", "inf or nan")


@check("build_model")
def check_build_model(build_model, seed=0, size=12, classes=3, batch_sizes=(8, 1, 5)):
    """build_model(size, classes) maps (N, 1, size, size) float32 images to (N, classes) logits, per sample."""
    torch.manual_seed(seed)
    model = _call(build_model, size, classes, name="build_model")
    expect(isinstance(model, nn.Module), "build_model's result", "an nn.Module", type(model).__name__)
    g = torch.Generator().manual_seed(seed)
    for n in batch_sizes:
        x = torch.rand(n, 1, size, size, generator=g)
        y = torch.randint(0, classes, (n,), generator=g)
        model.train()
        model.zero_grad(set_to_none=True)
        where = f"on a batch of {n} images 1x{size}x{size} (float32)"
        out = _call(model, x, name="your model", where=where)
        expect(torch.is_tensor(out) and out.shape == (n, classes), f"the model's output {where}",
               f"shape ({n}, {classes})", tuple(out.shape) if torch.is_tensor(out) else type(out).__name__,
               "flatten with nn.Flatten() or x.flatten(1), which keep the batch dimension, and size the first "
               "Linear for what really arrives: 8 channels x (size // 2) x (size // 2).")
        expect(out.dtype == torch.float32, "the output dtype", "torch.float32", out.dtype,
               "keep the model in float32 and convert the inputs instead (.double() on a model doubles memory).")
        loss = _call(lambda: F.cross_entropy(out, y), name="cross_entropy", where="on the model's output")
        expect(loss.dtype == torch.float32, "the loss dtype", "torch.float32", loss.dtype)
        _call(loss.backward, name="loss.backward", where=where)
        _grads_ok(model, n, size)
        model.eval()
        with torch.no_grad():
            whole = _call(model, x, name="your model", where=where)
            alone = torch.cat([_call(model, x[i:i + 1], name="your model", where="on single images") for i in range(n)])
        expect(close(whole, alone, rtol=1e-3, atol=1e-4), f"the outputs for a batch of {n} (eval mode)",
               "each sample's logits independent of the other samples", "rows that mix samples",
               "never reshape across the batch dimension: keep dim 0 as N (x.flatten(1), not x.view(-1, k)).")
    return (f"(N, 1, {size}, {size}) -> (N, {classes}) float32 logits for N = {', '.join(map(str, batch_sizes))}, "
            "finite gradients, samples independent")


def _reference_mse(pred, target):
    return F.mse_loss(pred.detach().reshape(-1), target.to(pred.dtype).reshape(-1))


@check("regression_loss")
def check_regression_loss(regression_loss, seed=0, batch_sizes=(6, 1, 11)):
    """regression_loss(pred, target) is the float32 MSE of pred (N, 1) against float64 targets (N,)."""
    g = torch.Generator().manual_seed(seed)
    for n in batch_sizes:
        leaf = torch.randn(n, 1, generator=g, requires_grad=True)
        pred = leaf * 1.0  # a non-leaf (N, 1) float32 output, as a Linear(..., 1) gives
        target = torch.randn(n, generator=g, dtype=torch.float64)

        def run():
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                out = regression_loss(pred, target.clone())
            return out, [str(w.message) for w in caught]

        got, warned = _call(run, name="regression_loss", where=f"on a batch of {n}")
        expect(torch.is_tensor(got), "the loss", "a tensor", type(got).__name__,
               "return the loss tensor (not .item()) so it can be backpropagated.")
        expect(got.dim() == 0, f"the loss for a batch of {n}", "a scalar", f"shape {tuple(got.shape)}",
               "average over the batch (F.mse_loss does).")
        want = _reference_mse(pred, target)
        said = f" (PyTorch warned: {warned[0].rstrip('.')})" if warned else ""
        expect(close(got, want, rtol=1e-4, atol=1e-6), f"the loss for a batch of {n}", f"{want.item():.5f}",
               f"{got.item():.5f}{said}",
               f"pred is ({n}, 1) and target is ({n},): they broadcast to ({n}, {n}) and every prediction is compared "
               "with every target. Make the shapes equal first: pred.squeeze(1), or target.unsqueeze(1).")
        expect(got.dtype == torch.float32, "the loss dtype", "torch.float32 (the model's dtype)", got.dtype,
               "the float64 target promotes the loss (and its backward) to float64: convert the target with "
               "target.to(pred.dtype) or .float().")
        expect(got.requires_grad, "the loss", "connected to pred (requires_grad)", "no gradient path")
        _call(got.backward, name="loss.backward")
        ref_leaf = leaf.detach().clone().requires_grad_()
        F.mse_loss((ref_leaf * 1.0).squeeze(1), target.float()).backward()
        expect(leaf.grad is not None and close(leaf.grad, ref_leaf.grad, rtol=1e-4, atol=1e-6),
               "the gradient reaching pred", "that of the MSE", "a different gradient")
    return f"float32 MSE equal to PyTorch's, same gradient, for batches of {', '.join(map(str, batch_sizes))}"
