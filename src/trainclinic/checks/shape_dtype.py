"""Checks for lesson 02, shape and dtype errors: prepare_batch, build_model, regression_loss.

Each feeds the learner's function seeded batches of several sizes (always one of a single sample), runs forward
and backward through PyTorch, and compares shapes, dtypes and loss values with PyTorch's own reference
computation. build_model's network must compute the lesson's architecture with its own weights (conv, ReLU,
2x2 max-pool, flatten, Linear); regression_loss is watched operation by operation (a TorchDispatchMode) for
broadcasting and float64. The seed drives a sweep of batch sizes, image sizes, class counts and value scales.
"""
import math
import random
import warnings

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from ..device import pick_device
from . import CheckFailed, call, check, close, expect, gpu_probe

__all__ = ["HINTS", "check_prepare_batch", "check_build_model", "check_regression_loss", "raw_batch", "reference_model"]

_LONG = "CrossEntropyLoss wants class indices as int64 (Long): labels.long()."

HINTS = {  # keyed on PyTorch's own wordings, torch 2.4 to 2.13
    "channels instead": "a conv layer wants (N, C, H, W): give grayscale images their channel dimension with "
    "images.unsqueeze(1) (position 1, after the batch).",
    "expected target dtype": _LONG,  # torch >= 2.13: "expected target dtype to be Long or Byte, but got Float"
    "expected scalar type Long": _LONG,  # torch <= 2.12: "expected scalar type Long but found Float"
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




def raw_batch(n, size=12, classes=3, seed=0, width=None):
    """A batch as a NumPy loader hands it over: float64 images (n, size, width or size), float64 labels (n,)."""
    g = torch.Generator().manual_seed(seed)
    images = torch.rand(n, size, width or size, generator=g, dtype=torch.float64)
    labels = torch.randint(0, classes, (n,), generator=g).to(torch.float64)
    labels[0] = classes - 1  # the highest class id always appears
    return images, labels


def reference_model(size=12, classes=3, seed=0, width=None):
    """The lesson's small CNN, built correctly: conv, ReLU, 2x2 max-pool, flatten, Linear (images size x width)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(8 * (size // 2) * ((width or size) // 2), classes))


def _pair(out, name):
    kind = type(out).__name__
    if isinstance(out, (tuple, list)):
        kind = f"a {kind} of {len(out)}: " + ", ".join(type(t).__name__ for t in out)
    expect(isinstance(out, tuple) and len(out) == 2 and all(torch.is_tensor(t) for t in out),
           f"{name}'s result", "the tuple (inputs, targets) of two tensors, as the exercise asks", kind)
    return out


def _unchanged(fn_name, arg_name, before, after):
    """The argument `after` (a tensor passed to the learner's function) must still equal `before`."""
    same = (after.shape == before.shape and after.dtype == before.dtype
            and torch.equal(after.detach(), before.detach()))
    observed = f"{_dt(after.dtype)} of shape {tuple(after.shape)}"
    if after.shape == before.shape and after.dtype == before.dtype:
        observed += " with different values"
    expect(same, f"the {arg_name} tensor passed to {fn_name}, after the call",
           f"unchanged, {_dt(before.dtype)} of shape {tuple(before.shape)} (the caller's tensor)", observed,
           f"{fn_name} changed its argument in place (an in-place method such as unsqueeze_ or squeeze_, or an "
           f"assignment into it): compute new tensors and leave the caller's {arg_name} as it was.")


def _batch_cases(seed):
    """(n, H, W) per case: a batch of one always, images that are not square and sides that are odd (the text says
    (N, H, W), any H and W: only build_model's size is even)."""
    if seed == 0:
        return ((8, 12, 12), (1, 12, 12), (5, 15, 10))
    rng = random.Random(31 * seed + 1)
    h, w = rng.choice([4, 6, 8, 10, 12, 14, 16, 20]), rng.choice([5, 7, 9, 11, 13, 15])
    return ((rng.randint(2, 16), h, h), (1, w, h), (rng.randint(2, 40), h, w))


def _value_scales(seed):
    """(scale, shift) of the pixel values per case: the lesson's own images reach 1.5, standardized ones go negative."""
    if seed == 0:
        return ((1.5, 0.0), (1.0, 0.0), (4.0, -2.0))
    rng = random.Random(17 * seed + 5)
    return tuple(rng.choice(((1.0, 0.0), (1.5, 0.0), (255.0, 0.0), (4.0, -2.0), (2.0, -0.5))) for _ in range(3))


def _values_differ(x, images):
    """How prepare_batch's values differ from the images': the largest difference and both value ranges."""
    got = x.detach().double().reshape(images.shape) if x.numel() == images.numel() else None
    span = f"the images span [{images.min().item():.3g}, {images.max().item():.3g}]"
    if got is None:
        return f"{x.numel()} values for {images.numel()} pixels"
    return (f"values that differ by up to {(got - images).abs().max().item():.3g}: {span}, the inputs "
            f"[{got.min().item():.3g}, {got.max().item():.3g}]")


@check("prepare_batch")
def check_prepare_batch(prepare_batch, seed=0):
    """prepare_batch(images, labels) gives float32 (N, 1, H, W) images and int64 (N,) labels that train."""
    cases = _batch_cases(seed)
    for k, (n, size, width) in enumerate(cases):
        classes = 3 if seed == 0 else 2 + (seed + k) % 9
        images, labels = raw_batch(n, size, classes, seed=seed + n, width=width)
        scale, shift = _value_scales(seed)[k]
        images = images * scale + shift  # pixel values are whatever the loader gives: not always in [0, 1]
        images_arg, labels_arg = images.clone(), labels.clone()
        default64 = k == len(cases) - 1  # a caller whose default dtype is float64: the model's dtype is still float32
        dtype_before = torch.get_default_dtype()
        if default64:
            torch.set_default_dtype(torch.float64)
        try:
            out = call(prepare_batch, images_arg, labels_arg, hints=HINTS, name="prepare_batch")
        finally:
            torch.set_default_dtype(dtype_before)
        _unchanged("prepare_batch", "images", images, images_arg)
        _unchanged("prepare_batch", "labels", labels, labels_arg)
        x, y = _pair(out, "prepare_batch")
        model = reference_model(size, classes, seed=seed, width=width)

        def train_once():  # PyTorch's own verdict on the batch: the real error, if any
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            return loss

        where = f"(a conv net and cross_entropy on prepare_batch's output, batch of {n} images {size}x{width})"
        try:
            loss, verdict, error = call(train_once, hints=HINTS, name="training", where=where), "", None
        except CheckFailed as exc:
            error = exc
            loss, verdict = None, "\nPyTorch's verdict: " + str(exc).split("\nHint:")[0].rstrip(".")
        shape = tuple(x.shape)
        hint = ""
        if shape == (n, size, width):
            hint = ("the images have no channel dimension: a conv reads (N, H, W) as ONE image with N channels. "
                    "Add it at position 1: images.unsqueeze(1).")
        elif shape == (n, size, width, 1):
            hint = "the channel dimension is last: PyTorch's conv wants (N, C, H, W): images.unsqueeze(1)."
        expect(shape == (n, 1, size, width), f"images shape for a batch of {n} images {size}x{width}",
               f"({n}, 1, {size}, {width})",
               f"{shape}{verdict}", hint)
        expect(x.dtype == torch.float32, "images dtype" + (" (the caller's default dtype set to float64)" if default64
                                                           else ""),
               "torch.float32 (the model's dtype)", f"{x.dtype}{verdict}",
               "convert with .float() or .to(torch.float32), which name the dtype: the default dtype is the "
               "caller's setting" if default64 else "convert with .float() or .to(torch.float32).")
        expect(close(x.squeeze(1), images), "images values", "unchanged (only dtype and shape change)",
               _values_differ(x, images))
        hint = ""
        if y.dim() == 0 and n == 1:
            hint = ("the batch of one lost its batch dimension, which is what .squeeze() does to a batch of one "
                    "(it removes EVERY dimension of size 1). The labels are already (N,): .long() alone keeps them.")
        elif y.shape == (n, 1):
            hint = "one class index per sample, without the extra dimension: labels of shape (N,)."
        expect(y.shape == (n,), f"labels shape for a batch of {n}", f"({n},)",
               f"{tuple(y.shape)}{' (a 0-d tensor)' if y.dim() == 0 else ''}{verdict}", hint)
        expect(y.dtype == torch.int64, "labels dtype", "torch.int64 (Long class indices)", f"{y.dtype}{verdict}",
               "CrossEntropyLoss wants class indices as int64: labels.long().")
        expect(torch.equal(y, labels.long()), "labels values", labels.long().tolist(), y.tolist())
        if error is not None:
            raise error
        want = F.cross_entropy(model(images.unsqueeze(1).float()), labels.long())
        expect(loss.dtype == torch.float32 and close(loss, want), "the cross-entropy on your batch",
               f"{want.item():.5f} (float32)", f"{loss.item():.5f} ({loss.dtype})")
    (n, size, width), kept = cases[0], None
    # a corrupt pixel (NaN, inf, -inf) stays what it is: a batch is reshaped and converted, not repaired (a NaN that
    # became 0 would hide a broken loader; lesson 04 finds it in the loss)
    images, labels = raw_batch(n, size, 3, seed=seed + 151, width=width)
    flat_view = images.view(-1)
    flat_view[0], flat_view[size + 1], flat_view[-1] = float("nan"), float("inf"), -float("inf")
    labels[0] = -100  # cross_entropy's ignore_index: a label that is not a class, kept as it is too
    x, y = _pair(call(prepare_batch, images.clone(), labels.clone(), hints=HINTS, name="prepare_batch",
                      where="(images with a NaN, an inf and a -inf pixel; a label -100, cross_entropy's "
                      "ignore_index)"), "prepare_batch")
    expect(torch.equal(y, labels.long()), "labels values, with a label -100 (cross_entropy's ignore_index, which "
           "skips that sample)", labels.long().tolist(), y.tolist(),
           "convert with labels.long() alone: it keeps every whole number, negative ones too (rounding tricks such as "
           "(labels + 0.5).long() truncate toward zero and move them)")
    same = x.numel() == images.numel() and bool(torch.isclose(
        x.detach().double().reshape(images.shape), images.float().double(), rtol=1e-6, atol=0, equal_nan=True).all())
    expect(same, "images values, for images with a NaN, an inf and a -inf pixel",
           "unchanged, NaN and inf included (only dtype and shape change)",
           f"{int(torch.isnan(x).sum())} NaN and {int(torch.isinf(x).sum())} inf among them (the images hold 1 NaN "
           "and 2 inf)" if int(torch.isnan(x).sum()) != 1 or int(torch.isinf(x).sum()) != 2 else "other values",
           "convert and reshape only: no nan_to_num, clamp or other repair (a NaN made 0 hides a broken input, which "
           "the loss would otherwise show)")
    for shift in (0.0, 7.0):  # two calls: the first result must not change when the second is made
        images, labels = raw_batch(n, size, 3, seed=seed + 101, width=width)
        x, y = _pair(call(prepare_batch, images + shift, labels, hints=HINTS, name="prepare_batch"), "prepare_batch")
        if kept is None:
            first, kept = (x, y), (x.clone(), y.clone())
    expect(torch.equal(first[0], kept[0]) and torch.equal(first[1], kept[1]),
           "the first call's (inputs, targets) after a second call of prepare_batch",
           "unchanged: each call returns tensors of its own", "overwritten by the second call's batch",
           "create new tensors in every call: a buffer kept between calls (a global, a default argument, an "
           "attribute) makes every batch returned the same tensor, so a loader's earlier batches change")
    # a training loop's calls, each with a new batch: three of them new tensors (the batch before freed: Python may
    # give its id() to the next), three the same two tensors refilled in place (a loader that reuses its buffers):
    # each result holds its own batch's values
    buffers = None
    for i in range(6):
        images, labels = raw_batch(n, size, 3, seed=seed + 201 + i, width=width)
        if i < 3:
            args, how = (images.clone(), labels.clone()), "new tensors, the batch before freed"
        else:
            buffers = buffers or (images.clone(), labels.clone())
            buffers[0].copy_(images)
            buffers[1].copy_(labels)
            args, how = buffers, "the same two tensors as the call before, refilled in place with a new batch"
        x, y = _pair(call(prepare_batch, *args, hints=HINTS, name="prepare_batch"), "prepare_batch")
        same = x.shape == (n, 1, size, width) and close(x.squeeze(1), images) and torch.equal(y, labels.long())
        expect(same, f"prepare_batch's result at call {i + 1} of 6 in a row ({how})", "that batch's own images and "
               "labels", "other values: " + ("an earlier call's batch: a result kept from an earlier call (a cache "
                                             "keyed on the tensors or their id() hands back an old batch)"
                                             if i else _values_differ(x, images)),
               "convert the batch you are given, every call: keep nothing between calls")
        del args, x, y
    sizes = ", ".join(f"{n}x{h}x{w}" for n, h, w in cases)
    return f"float32 (N, 1, H, W) images and int64 (N,) labels; forward, loss and backward run for batches {sizes}"


def _no_new_parameters(model, returned, size, classes):
    """Fail if a forward created parameters that the model build_model returned did not have."""
    known = {id(p) for p in returned}
    new = [(name, tuple(p.shape)) for name, p in model.named_parameters() if id(p) not in known]
    if new:
        raise CheckFailed(
            f"the parameters of the model build_model({size}, {classes}) returns: expected all of them there on "
            f"return (an optimizer is built from model.parameters() right after build_model, and .to(device) moves "
            f"only those), observed {len(new)} that appeared only during the first forward: "
            f"{', '.join(f'{name} {shape}' for name, shape in new)}.\nHint: create every layer in __init__ (or in "
            f"build_model), sized from `size`: the Linear takes 8 * (size // 2) ** 2 features.")


def _grads_ok(model, n, size):
    for name, p in model.named_parameters():
        expect(p.grad is not None, f"the gradient of `{name}` after backward (batch of {n}, size {size})",
               "a tensor", "None", "every parameter should be used in forward.")
        expect(bool(torch.isfinite(p.grad).all()), f"the gradient of `{name}`", "finite", "inf or nan")


def _shapes(model):
    return [tuple(p.shape) for p in model.parameters()]


def _architecture(model, x, size, classes):
    """The model must compute Linear(flatten(max_pool2d(relu(conv(x)), 2))) with its own weights: find them by
    shape, recompute, compare. Raise CheckFailed saying what differs."""
    features = 8 * (size // 2) ** 2
    want = {"conv weight": (8, 1, 3, 3), "conv bias": (8,), "Linear weight": (classes, features),
            "Linear bias": (classes,)}
    params = list(model.parameters())
    shapes = _shapes(model)
    missing = [name for name, shape in want.items() if shape not in shapes]
    if missing:
        hint = ""
        if (classes, 8 * size * size) in shapes:
            hint = (f"the Linear takes 8 x {size} x {size} = {8 * size * size} features: the feature maps reach it at "
                    f"full size. The MaxPool2d(2) halves each side, so {features} arrive: keep the pool and size the "
                    f"Linear for 8 x (size // 2) x (size // 2).")
        elif (classes, size * size) in shapes or (classes, (size // 2) ** 2) in shapes:
            hint = "the Linear takes one value per pixel: the Conv2d(1, 8, kernel_size=3, padding=1) is missing."
        raise CheckFailed(
            f"the parameters of build_model({size}, {classes}): expected those of the lesson's network, "
            f"Conv2d(1, 8, kernel_size=3, padding=1) {want['conv weight']} + {want['conv bias']} and "
            f"Linear({features}, {classes}) {want['Linear weight']} + {want['Linear bias']} "
            f"(8 channels x {size // 2} x {size // 2} after the 2x2 pool), observed parameter shapes {shapes} "
            f"(none of shape {', '.join(str(want[m]) for m in missing)})." + (f"\nHint: {hint}" if hint else ""))
    conv_w = next(p for p in params if tuple(p.shape) == want["conv weight"])
    lin_w = next(p for p in params if tuple(p.shape) == want["Linear weight"])
    conv_bs = [p for p in params if tuple(p.shape) == want["conv bias"]]
    lin_bs = [p for p in params if tuple(p.shape) == want["Linear bias"]]
    # the batch, and the same images spread over [-20, 20]: an activation that equals ReLU on small values only
    # (ReLU6, a clamp) differs from it there (3a keeps the values as they are, whatever their range)
    x = torch.cat([x, (x - 0.5) * 40])
    model.eval()
    with torch.no_grad():
        got = call(model, x, hints=HINTS, name="your model", where="in eval mode")

        def net(cb, lb, act=F.relu, pool=F.max_pool2d):
            return F.linear(pool(act(F.conv2d(x, conv_w, cb, padding=1)), 2).flatten(1), lin_w, lb)

        pairs = [(cb, lb) for cb in conv_bs for lb in lin_bs if cb is not lb]
        if not pairs:
            raise CheckFailed(f"the parameters of build_model({size}, {classes}): expected a conv bias and a Linear "
                              f"bias, both of shape (8,), observed one parameter of that shape among {shapes}.")
        if any(close(got, net(cb, lb), rtol=1e-4, atol=1e-5) for cb, lb in pairs):
            return
        cb, lb = pairs[0]
        diff = (got.double() - net(cb, lb).double()).abs().max().item()
        layers = "the exercise asks for a conv, a ReLU, a MaxPool2d(2), a flatten and a Linear, in that order."
        logits = "return the Linear's raw logits: CrossEntropyLoss applies the log-softmax itself."
        like = [("without the ReLU", net(cb, lb, act=lambda t: t), layers),
                ("with ReLU6 (activations clipped at 6) instead of ReLU", net(cb, lb, act=F.relu6), layers),
                ("with average pooling instead of max pooling", net(cb, lb, pool=F.avg_pool2d), layers),
                ("followed by a softmax", net(cb, lb).softmax(1), logits),
                ("followed by a log-softmax", net(cb, lb).log_softmax(1), logits)]
        seen = next(((what, hint) for what, out, hint in like if close(got, out, rtol=1e-4, atol=1e-5)), None)
    raise CheckFailed(
        f"the output of build_model({size}, {classes}) in eval mode, on images with values in [0, 1] and the same "
        f"spread over [-20, 20]: expected the lesson's network computed with the "
        "model's own conv and Linear weights, Linear(flatten(MaxPool2d(2)(ReLU(Conv2d(x))))), observed a different "
        f"function (max difference {diff:.3g})" + (f": it equals that network {seen[0]}.\nHint: {seen[1]}" if seen else "."))


def _model_cases(seed):
    """(size, classes, batch sizes): the lesson's for seed 0; else drawn, with a batch of one."""
    if seed == 0:
        return 12, 3, (8, 1, 5)
    rng = random.Random(17 * seed + 5)
    return rng.choice([4, 6, 8, 10, 14, 16, 20]), rng.randint(2, 10), (rng.randint(2, 12), 1)


@check("build_model")
def check_build_model(build_model, seed=0):
    """build_model(size, classes) maps (N, 1, size, size) float32 images to (N, classes) logits, per sample, with the
    lesson's layers (conv, ReLU, 2x2 max-pool, flatten, Linear)."""
    size, classes, batch_sizes = _model_cases(seed)
    torch.manual_seed(seed)
    model = call(build_model, size, classes, hints=HINTS, name="build_model")
    expect(isinstance(model, nn.Module), "build_model's result", "an nn.Module", type(model).__name__)
    returned = list(model.parameters())  # what an optimizer built right after build_model holds (section 5's)
    other = call(build_model, size, classes, hints=HINTS, name="build_model")
    shared = {id(p) for p in returned} & {id(p) for p in other.parameters()} if isinstance(other, nn.Module) else set()
    expect(not shared, "two models from two calls of build_model", "models with parameters of their own",
           f"{len(shared)} of {len(returned)} parameter tensors shared by both",
           "create the layers inside build_model: a layer made once (at module level) is shared by every model "
           "built, so training one changes the others")
    g = torch.Generator().manual_seed(seed)
    for n in batch_sizes:
        x = torch.rand(n, 1, size, size, generator=g)
        y = torch.randint(0, classes, (n,), generator=g)
        model.train()
        model.zero_grad(set_to_none=True)
        where = f"on a batch of {n} images 1x{size}x{size} (float32)"
        out = call(model, x, hints=HINTS, name="your model", where=where)
        _no_new_parameters(model, returned, size, classes)
        expect(torch.is_tensor(out) and out.shape == (n, classes), f"the model's output {where}",
               f"shape ({n}, {classes})", tuple(out.shape) if torch.is_tensor(out) else type(out).__name__,
               "flatten with nn.Flatten() or x.flatten(1), which keep the batch dimension, and size the first "
               "Linear for what really arrives: 8 channels x (size // 2) x (size // 2).")
        expect(out.dtype == torch.float32, "the output dtype", "torch.float32", out.dtype,
               "keep the model in float32 and convert the inputs instead (.double() on a model doubles memory).")
        loss = call(lambda: F.cross_entropy(out, y), hints=HINTS, name="cross_entropy", where="on the model's output")
        expect(loss.dtype == torch.float32, "the loss dtype", "torch.float32", loss.dtype)
        call(loss.backward, hints=HINTS, name="loss.backward", where=where)
        _grads_ok(model, n, size)
        model.eval()
        with torch.no_grad():
            whole = call(model, x, hints=HINTS, name="your model", where=where)
            alone = torch.cat([call(model, x[i:i + 1], hints=HINTS, name="your model", where="on single images") for i in range(n)])
        if not close(whole, alone, rtol=1e-3, atol=1e-4):
            diff = (whole.double() - alone.double()).abs().max().item()
            with torch.no_grad():
                flipped = call(model, x.flip(0), hints=HINTS, name="your model", where=where)
            if close(flipped, whole.flip(0), rtol=1e-3, atol=1e-4):  # the same for any order: a batch statistic
                raise CheckFailed(
                    f"the outputs for a batch of {n} (eval mode): expected each sample's logits independent of the "
                    f"other samples (the same as for that image alone), observed logits that depend on the rest of "
                    f"the batch whatever its order (max difference {diff:.3g} from the images one by one): a "
                    f"statistic of the whole batch (a mean, a std, a norm) enters each sample's logits.\nHint: "
                    f"compute each sample from its own pixels only: the exercise's network is conv, ReLU, "
                    f"MaxPool2d(2), flatten and Linear, with no normalisation inside forward.")
            raise CheckFailed(f"the outputs for a batch of {n} (eval mode): expected each sample's logits independent "
                              f"of the other samples, observed rows that mix samples (max difference {diff:.3g} from "
                              f"the images one by one).\nHint: never reshape across the batch dimension: keep dim 0 "
                              f"as N (x.flatten(1), not x.view(-1, k)).")
        _architecture(model, x, size, classes)
        model.train()
        with torch.no_grad():
            trained = call(model, x, hints=HINTS, name="your model", where=f"{where}, in training mode")
        if not close(trained, whole, rtol=1e-3, atol=1e-4):
            modal = sorted({type(m).__name__ for m in model.modules()
                            if isinstance(m, (nn.modules.dropout._DropoutNd, nn.modules.batchnorm._BatchNorm))})
            diff = (trained.double() - whole.double()).abs().max().item()
            raise CheckFailed(
                f"the output of build_model({size}, {classes}) in training mode (model.train()), {where}: expected "
                "the same logits as in eval mode (the lesson's network, conv, ReLU, MaxPool2d(2), flatten and Linear, "
                f"has no layer that behaves differently in training), observed a max difference of {diff:.3g}"
                + (f"; the model holds {', '.join(modal)}, which differs between the two modes." if modal else ".")
                + "\nExpected: only the lesson's layers, so that training computes the network that eval computes.")
    return (f"(N, 1, {size}, {size}) -> (N, {classes}) float32 logits for N = {', '.join(map(str, batch_sizes))}, "
            "finite gradients, samples independent, conv-ReLU-pool-flatten-Linear with its own weights")


_RESHAPES = {"squeeze", "view", "_unsafe_view", "reshape", "_reshape_alias", "select", "as_strided", "unbind",
             "flatten", "alias"}  # operations that change a shape without reducing values


class _Ops(TorchDispatchMode):
    """Record every operation under it: (name, input shapes and dtypes, output shape and dtype). With `sources`
    (pred and target), it also follows what is computed from them, and notes in `dropped` the first time such a
    tensor lost every dimension by a reshape (no reduction: pred.squeeze() on a batch of one) and was then broadcast
    back to a tensor with dimensions: (the reshape, the broadcasting operation) as text."""

    def __init__(self, sources=()):
        super().__init__()
        self.ops = []
        self.derived = {id(t): t for t in sources}  # the tensors held, so that their ids stay theirs
        self.flat = {}  # id -> (tensor, the reshape that made it 0-d) for 0-d tensors that lost their dimensions
        self.dropped = None

    @classmethod
    def _should_skip_dynamo(cls):
        return False  # torch >= 2.9 would otherwise import torch._dynamo on the first operation

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        ins = [a for a in list(args) + list((kwargs or {}).values()) if torch.is_tensor(a)]
        outs = [out] if torch.is_tensor(out) else [o for o in out if torch.is_tensor(o)] if isinstance(out, (tuple, list)) else []
        name = str(func.overloadpacket.__name__)
        self.ops.append((name, [(tuple(t.shape), t.dtype) for t in ins], [(tuple(t.shape), t.dtype) for t in outs]))
        if self.derived and any(self.derived.get(id(t)) is t for t in ins):
            text = f"{name}({', '.join(str(tuple(t.shape)) for t in ins)}) -> {tuple(outs[0].shape) if outs else ()}"
            flat = [self.flat[id(t)][1] for t in ins if id(t) in self.flat and self.flat[id(t)][0] is t]
            for o in outs:
                self.derived[id(o)] = o
                if o.dim() == 0 and flat:
                    self.flat[id(o)] = (o, flat[0])  # still the 0-d remains of a reshaped tensor
                elif o.dim() == 0 and name in _RESHAPES and any(t.dim() > 0 for t in ins):
                    self.flat[id(o)] = (o, text)
            if flat and self.dropped is None and any(o.dim() > 0 for o in outs):
                self.dropped = (flat[0], text)
        return out


def _dt(dtype):
    return str(dtype).removeprefix("torch.")


def _float64_op(ops):
    """The first operation that turned float32 data into float64 (a promotion or a cast), as text; None if none."""
    for name, ins, outs in ops:
        if any(d == torch.float64 for _, d in outs) and any(d == torch.float32 for _, d in ins):
            args = ", ".join(f"{_dt(d)} {s}" for s, d in ins)
            return f"{name}({args}) -> {_dt(outs[0][1])} {outs[0][0]}"
    return None


def _broadcast_op(ops, n):
    """The first operation that produced a tensor with two dimensions of size n (pred (n, 1) broadcast against
    target (n,) gives (n, n)), or n * n values or more, as text; None if none."""
    if n < 2:
        return None
    for name, ins, outs in ops:
        wide = next((s for s, _ in outs if sum(d == n for d in s) >= 2 or (n > 2 and math.prod(s) >= n * n)), None)
        if wide is not None:
            return f"{name}({', '.join(str(s) for s, _ in ins)}) -> {wide}"
    return None


def _regression_cases(seed):
    """(batch sizes, target scale): the lesson's for seed 0; else drawn, with a batch of one and scales 1e-2..1e3."""
    if seed == 0:
        return (6, 1, 11), 1.0
    rng = random.Random(13 * seed + 7)
    return (rng.randint(2, 64), 1, rng.randint(2, 9)), 10.0 ** rng.choice([-2, -1, 0, 1, 2, 3])


@check("regression_loss")
def check_regression_loss(regression_loss, seed=0):
    """regression_loss(pred, target) is the float32 MSE of pred (N, 1) against float64 targets (N,), computed
    without broadcasting and without float64."""
    batch_sizes, scale = _regression_cases(seed)
    g = torch.Generator().manual_seed(seed)
    for n in batch_sizes:
        leaf = (scale * torch.randn(n, 1, generator=g)).requires_grad_()
        pred = leaf * 1.0  # a non-leaf (N, 1) float32 output, as a Linear(..., 1) gives
        target = scale * torch.randn(n, generator=g, dtype=torch.float64)
        target_arg = target.clone()
        ops = _Ops(sources=(pred, target_arg))

        def run():
            with warnings.catch_warnings(record=True) as caught, ops:
                warnings.simplefilter("always")
                out = regression_loss(pred, target_arg)
            return out, [str(w.message) for w in caught]

        got, warned = call(run, hints=HINTS, name="regression_loss", where=f"on a batch of {n}")
        _unchanged("regression_loss", "target", target, target_arg)
        _unchanged("regression_loss", "pred", leaf * 1.0, pred)
        expect(torch.is_tensor(got), "the loss", "a tensor", type(got).__name__,
               "return the loss tensor (not .item()) so it can be backpropagated.")
        expect(got.dim() == 0, f"the loss for a batch of {n}", "a scalar", f"shape {tuple(got.shape)}",
               f"it holds one value in shape {tuple(got.shape)}: reduce over every dimension (.mean() without dim, "
               "or F.mse_loss) to get a 0-d scalar." if got.numel() == 1 else "average over the batch (F.mse_loss does).")
        want = _reference_mse(pred, target)
        if not close(got, want, rtol=1e-4, atol=1e-6 * scale ** 2):
            value, hint = got.item(), ""
            said = f" (PyTorch warned: {warned[0].rstrip('.')})" if warned else ""
            wide = _broadcast_op(ops.ops, n)
            if wide:
                said += f"; inside regression_loss, {wide}"
                hint = (f"pred is ({n}, 1) and target is ({n},): they broadcast to ({n}, {n}) and every prediction is "
                        "compared with every target. Make the shapes equal first: pred.squeeze(1), or "
                        "target.unsqueeze(1).")
            elif want.item() > 0 and math.isclose(value, math.sqrt(want.item()), rel_tol=1e-4):
                said += ", the square root of the MSE (a root mean squared error)"
                hint = "the exercise asks for the mean squared error itself, without the square root."
            elif n > 1 and math.isclose(value, n * want.item(), rel_tol=1e-4):
                said += f", {n} times the MSE: the sum over the batch, not the mean"
                hint = "average over the batch: F.mse_loss's default reduction='mean'."
            raise CheckFailed(f"the loss for a batch of {n}: expected {want.item():.6g} (the MSE), observed "
                              f"{value:.6g}{said}." + (f"\nHint: {hint}" if hint else ""))
        wide = _broadcast_op(ops.ops, n)
        expect(wide is None, f"the operations inside regression_loss (batch of {n})",
               f"no broadcasting of pred ({n}, 1) against target ({n},): no tensor of {n} x {n} values (the loss value itself "
               "is right)",
               f"{wide}, a table of every prediction against every target ({n} x {n} values, memory and backward "
               "work that grow as the square of the batch)",
               f"pred is ({n}, 1) and target is ({n},): make the shapes equal before the arithmetic, pred.squeeze(1) or "
               "target.unsqueeze(1), so that each prediction meets its own target only.")
        said = f" (PyTorch warned: {warned[0].rstrip('.')})" if warned else ""
        if ops.dropped:
            reshape, spread = ops.dropped
            raise CheckFailed(
                f"the operations inside regression_loss (batch of {n}): expected pred and target to keep their batch "
                f"dimension and meet with equal shapes (no broadcasting), observed {reshape}, a 0-d tensor without "
                f"the batch dimension, then {spread}, broadcast back{said} (the value is right here only because the "
                f"batch holds one sample).\nHint: " + (
                    "a bare .squeeze() removes every dimension of size 1, the batch too on a batch of one: remove the "
                    "column only, pred.squeeze(1) (or target.unsqueeze(1))." if reshape.startswith("squeeze") else
                    "reshape to (N,) for every N, pred.squeeze(1) or pred.view(-1), not to a shape that drops the "
                    "batch dimension."))
        sized = [w for w in warned if "different to the input size" in w]
        expect(not sized, f"PyTorch's warnings inside regression_loss (batch of {n})",
               "none: the loss gets input and target of the same shape (no broadcasting)",
               f"PyTorch warned: {sized[0].rstrip('.') if sized else ''}",
               f"pred is ({n}, 1) and target is ({n},): make the shapes equal before the loss, pred.squeeze(1) or "
               "target.unsqueeze(1).")
        expect(got.dtype == torch.float32, "the loss dtype", "torch.float32 (the model's dtype)", got.dtype,
               "the float64 target promotes the loss (and its backward) to float64: convert the target with "
               "target.to(pred.dtype) or .float().")
        promoted = _float64_op(ops.ops)
        expect(promoted is None, f"the dtypes inside regression_loss (batch of {n})",
               "float32 throughout: no float64 in the loss or its backward",
               f"float32 data computed in float64: {promoted}",
               "convert the float64 target to pred's dtype (target.to(pred.dtype) or .float()) before any arithmetic "
               "with pred; a float64 computation also runs its backward in float64.")
        expect(got.requires_grad, "the loss", "connected to pred (requires_grad)", "no gradient path")
        call(got.backward, hints=HINTS, name="loss.backward")
        ref_leaf = leaf.detach().clone().requires_grad_()
        F.mse_loss((ref_leaf * 1.0).squeeze(1), target.float()).backward()
        if leaf.grad is None:
            raise CheckFailed(f"the gradient reaching pred (batch of {n}): expected that of the MSE, observed none: "
                              "loss.backward() ran but no gradient reached pred.\nExpected: the loss computed from pred "
                              "by operations autograd records (not under torch.no_grad(), not from pred.detach()).")
        if not close(leaf.grad, ref_leaf.grad, rtol=1e-4, atol=1e-6 * scale):
            diff = (leaf.grad - ref_leaf.grad).abs().max().item()
            raise CheckFailed(f"the gradient reaching pred (batch of {n}): expected that of the MSE (largest "
                              f"{ref_leaf.grad.abs().max().item():.6g}), observed a different gradient (differs by up to "
                              f"{diff:.3g}).")
    # a caller that had set torch's default dtype to float64: pred is still float32, and so must the loss be
    n = batch_sizes[-1]
    pred = (scale * torch.randn(n, 1, generator=g)).requires_grad_() * 1.0
    target = scale * torch.randn(n, generator=g, dtype=torch.float64)
    default, where = torch.get_default_dtype(), "for a caller that had set torch.set_default_dtype(torch.float64)"
    try:
        torch.set_default_dtype(torch.float64)
        got = call(regression_loss, pred, target, hints=HINTS, name="regression_loss", where=where)
    finally:
        torch.set_default_dtype(default)
    expect(torch.is_tensor(got) and got.dtype == torch.float32, f"the loss dtype {where} (pred float32)",
           "torch.float32, pred's dtype", got.dtype if torch.is_tensor(got) else type(got).__name__,
           "convert the target to pred's dtype (target.to(pred.dtype) or .float()): torch's default dtype is a "
           "setting of the caller's, not the model's dtype.")
    # a NaN among the targets: the MSE of that batch is NaN (a loss that skips it hides broken data from lesson 04)
    pred = (scale * torch.randn(n, 1, generator=g)).requires_grad_() * 1.0
    target = scale * torch.randn(n, generator=g, dtype=torch.float64)
    target[n // 2] = float("nan")
    got = call(regression_loss, pred, target, hints=HINTS, name="regression_loss",
               where=f"on a batch of {n} with one NaN target")
    value = got.item() if torch.is_tensor(got) and got.numel() == 1 else None
    expect(value is not None and math.isnan(value), f"the loss on a batch of {n} with one NaN target",
           "nan, the MSE of that batch (every sample counts)", value if value is not None else type(got).__name__,
           "take the plain mean over every sample (F.mse_loss): nanmean or a mask drops the NaN sample and hides the "
           "broken data that lesson 04 finds in the loss")
    # section 5 trains with it on `device`: the loss of a model on a GPU, with the targets moved there too (a real
    # CUDA GPU where there is one, else a simulated cuda:0; MPS has no float64 targets to move)

    def probe(to, where):
        pred = to(torch.randn(n, 1)) * 1.0
        target = to(torch.randn(n, dtype=torch.float64))
        got = call(regression_loss, pred, target, name="regression_loss", where=f"with pred and target {where}",
                   hints={**HINTS, "device type tensor to numpy": "convert the target with PyTorch, where it is "
                          "(target.to(pred.dtype)): section 5 trains with pred and target on the GPU, where .numpy() "
                          "raises (and a NumPy detour would bring the loss to the CPU)."})
        expect(torch.is_tensor(got) and got.device == pred.device, f"the loss of pred and target {where}",
               f"a tensor on {pred.device}, where they are",
               f"on {got.device}" if torch.is_tensor(got) else type(got).__name__,
               "compute it with PyTorch operations on the tensors where they are: a detour through NumPy or Python "
               "numbers leaves the GPU (and .numpy() of a GPU tensor raises).")

    device = pick_device()
    if device.type == "cuda":
        probe(lambda t: t.to(device), f"on {device}")
        where = f" and on {device}"
    elif device.type == "cpu":
        where = gpu_probe(lambda sim: probe(sim.tensor, f"on a simulated cuda:0 (no GPU here; batch of {n})"))
    else:
        where = ""
    return (f"float32 MSE equal to PyTorch's, same gradient, for batches of {', '.join(map(str, batch_sizes))}"
            f"{where}")


def _reference_mse(pred, target):
    return F.mse_loss(pred.detach().reshape(-1), target.to(pred.dtype).reshape(-1))
