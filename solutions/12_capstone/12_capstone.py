# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false, "task": false}
# # Lesson 12 · Capstone: the clinic
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/trainclinic/trainclinic/blob/main/notebooks/12_capstone/12_capstone.ipynb)
#
# **The failure**, as a real script meets it: several of the course's bugs at once. The first one raises
# (torch ≥ 2.13: `expected target dtype to be Long or Byte, but got Double`;
# torch ≤ 2.12: `expected scalar type Long but found Double`), and behind it the silent ones wait: a learning rate
# that makes the loss climb, gradients four times too large, a validation accuracy that changes from call to call,
# DataLoader workers that repeat each other's augmentations, and labels left on the CPU that only a GPU notices.
#
# **What you will learn**
# - to take a realistic training script apart: which bug raises, which ones stay silent, and how each one shows in
#   numbers (loss, gradient norm, accuracy, augmentations);
# - to run `tc.clinic.examine` on a script, read its report (each finding names its lesson, its evidence and a fix),
#   and know what it cannot see;
# - to fix six independent pieces of the script, each graded on its own: fixing three of them earns exactly those
#   three points.
#
# **Prerequisites:** lessons 01, 02, 03, 04, 06 and 09 (each piece is one of their fixes, in a new script); the rest of
# the course helps. Everything runs on the CPU; on a GPU the device bug raises too.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Setup. In Colab this installs trainclinic once, with --no-deps: Colab's own torch is never touched.
import importlib.util, subprocess, sys
if importlib.util.find_spec("trainclinic") is None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "git+https://github.com/trainclinic/trainclinic@main"], check=True)
import torch
import trainclinic as tc
device = tc.pick_device()
tc.banner(device);

# %% [markdown] nbgrader={"grade": false, "grade_id": "reproduce_md", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 1 · Reproduce the failure
#
# The script: a classifier of sensor recordings. Each recording is a small spectrogram (8 frequency bands x 8 time
# steps), and each of the 3 classes puts its energy in its own band. The sensor library hands the spectrograms over as
# `float64` NumPy arrays, the classes come from a CSV (so as `float64` too), and the Dataset augments every recording
# with noise from its own NumPy Generator, `dataset.rng` (`tc.data.Spectrograms`). The model is a small CNN with
# BatchNorm and Dropout (`tc.models.sensor_net`). Batches of 32, computed in 4 micro-batches (the accumulation of
# lesson 03), SGD, two DataLoader workers. Here it is as it was handed over, every piece as found:

# %%
import math
import numpy as np
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Subset, TensorDataset

torch.set_num_threads(1)  # tiny models: one CPU thread is the fastest
train_set = tc.data.Spectrograms(n=256, seed=0)
val_set = tc.data.Spectrograms(n=128, seed=1)
val_loader = DataLoader(TensorDataset(*val_set.tensors()), batch_size=64)  # no augmentation, model-ready tensors
print(f"{len(train_set)} recordings; one item: {train_set[0][0].dtype} {train_set[0][0].shape}, "
      f"label {train_set[0][1]!r} ({type(train_set[0][1]).__name__})")

LR_AS_FOUND = 8.0                               # "the loss was too slow, so I raised it"
MICRO_BATCHES = 4


def to_device_as_found(batch, device):
    inputs, labels = batch
    return inputs.to(device), labels            # the labels stay where they are


def prepare_batch_as_found(images, labels):
    return images.unsqueeze(1).float(), labels  # (N, 1, 8, 8) float32 images; the labels as they came


def accumulate_step_as_found(model, batch, loss_fn, optimizer, micro_batches):
    inputs, targets = batch
    optimizer.zero_grad()
    total = 0.0
    for xb, yb in zip(inputs.chunk(micro_batches), targets.chunk(micro_batches)):
        loss = loss_fn(model(xb), yb)           # each piece's mean loss, backpropagated as it is
        loss.backward()
        total += loss.item() / micro_batches
    optimizer.step()
    return total


def evaluate_as_found(model, loader):
    device = next(model.parameters()).device
    correct = total = 0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        correct += (model(x).argmax(dim=1) == y).sum().item()
        total += y.numel()
    return correct / total


def make_loader(dataset, seed, worker_init_fn=None):
    return DataLoader(dataset, batch_size=32, shuffle=True, num_workers=2, worker_init_fn=worker_init_fn,
                      generator=torch.Generator().manual_seed(seed))


def first_batch(loader):
    """The loader's first batch, read to the end: a worker iterator dropped half-read is shut down while its workers
    still send batches, and a worker can print a BrokenPipeError then."""
    return list(loader)[0]


def run_script(to_device, prepare_batch, accumulate_step, evaluate, lr, worker_init_fn=None, epochs=2, plot=None):
    """The whole script, from its pieces: train `epochs` epochs, validate after each; the history."""
    tc.seed_everything(0)
    model = tc.models.sensor_net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    history = {"step": [], "loss": [], "grad_norm": [], "val_accuracy": []}
    for epoch in range(epochs):
        model.train()
        for images, labels in make_loader(train_set, seed=epoch, worker_init_fn=worker_init_fn):
            batch = to_device(prepare_batch(images, labels), device)
            loss = accumulate_step(model, batch, F.cross_entropy, optimizer, MICRO_BATCHES)
            step = len(history["step"])
            history["step"].append(step)
            history["loss"].append(loss)
            history["grad_norm"].append(tc.grad_norm(model))
            if plot is not None:
                plot.update(step, loss, history["grad_norm"][-1])
        history["val_accuracy"].append(evaluate(model, val_loader))
    return history


# %% tags=["raises-exception"]
run_script(to_device_as_found, prepare_batch_as_found, accumulate_step_as_found, evaluate_as_found, LR_AS_FOUND)

# %% [markdown]
# ### How to read the message
#
# - **`RuntimeError`** from `cross_entropy` (the traceback's last frames are in `torch/nn/functional.py`): the first
#   step's loss refuses its inputs.
# - torch ≥ 2.13: **`expected target dtype to be Long or Byte, but got Double`**.
# - torch ≤ 2.12: **`expected scalar type Long but found Double`** (it does not say which tensor).
# - The **target** is the one: class indices must be `int64` (`Long`), and the CSV's labels came as `float64`
#   (`Double`). Lesson 02.
# - The fix is one `.long()`, and it is one bug of six. A script stops at its first error: the others are silent,
#   and only show in numbers. Here is the script again with only the labels fixed (`labels.long()`), everything else
#   as found (on a GPU, the labels are moved too: there the device bug would raise first, as shown below), the loss
#   and gradient norm drawn live:

# %%
def prepare_labels_fixed(images, labels):
    return images.unsqueeze(1).float(), labels.long()


def to_device_both(batch, device):   # the demonstrations' mover: both tensors (the device bug has its own cell)
    return tuple(t.to(device) for t in batch)


with tc.LivePlot(f"the script as found, labels fixed: lr={LR_AS_FOUND:g}", every=4) as plot:
    found = run_script(to_device_both, prepare_labels_fixed, accumulate_step_as_found, evaluate_as_found,
                       LR_AS_FOUND, plot=plot)
print(plot.summary())
print(f"loss: first step {found['loss'][0]:.3f}, last step {found['loss'][-1]:.3f}; largest gradient norm "
      f"{max(found['grad_norm']):.3g}; validation accuracy after each epoch: {found['val_accuracy']}")

# %% [markdown]
# No error, and no learning: the loss ends above where it started, the gradient norm jumps by orders of magnitude, and
# the accuracy is near a guess (1/3). Four more bugs are in there, and none of them raises on a CPU. Each in
# its own numbers:

# %%
tc.seed_everything(0)
model = tc.models.sensor_net().to(device)
batch = to_device_both(prepare_labels_fixed(*first_batch(make_loader(train_set, seed=0))), device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.0)            # lr 0: look at the gradients, move nothing
state = torch.random.get_rng_state()
accumulate_step_as_found(model, batch, F.cross_entropy, optimizer, MICRO_BATCHES)
accumulated = tc.grad_norm(model)
torch.random.set_rng_state(state)                                   # the same Dropout masks
optimizer.zero_grad()
for xb, yb in zip(batch[0].chunk(MICRO_BATCHES), batch[1].chunk(MICRO_BATCHES)):
    F.cross_entropy(model(xb), yb).backward()                       # the same pieces...
full = sum(p.grad.detach().pow(2).sum() for p in model.parameters()).sqrt().item() / MICRO_BATCHES
print(f"accumulation: gradient norm {accumulated:.3f} at optimizer.step(), the full batch's is {full:.3f} "
      f"(x{accumulated / full:.2f}: each piece's loss was not divided by {MICRO_BATCHES})")

model.train()
accuracies = [evaluate_as_found(model, val_loader) for _ in range(3)]
mean_before = model[1].running_mean.clone()
evaluate_as_found(model, val_loader)
moved = (model[1].running_mean - mean_before).abs().max().item()
print(f"validation: accuracy on three calls on the same model {accuracies}; BatchNorm's running mean moved by "
      f"{moved:.3f} during one validation; the model is still in training mode: {model.training}")

loader = DataLoader(Subset(train_set, range(64)), batch_size=32, num_workers=2)  # worker 0: batch 0; worker 1: 1
noise = [[images - torch.from_numpy(train_set.images[32 * i: 32 * (i + 1)]) for i, (images, _) in
          enumerate(loader)] for epoch in range(2)]
print(f"augmentation: batch 0 (worker 0) vs batch 1 (worker 1), largest difference of their noise: "
      f"{(noise[0][0] - noise[0][1]).abs().max().item():.1e} (float64 rounding: the same draws); "
      f"epoch 0 vs epoch 1, batch 0: {(noise[0][0] - noise[1][0]).abs().max().item():.1e}")

# %% [markdown]
# - **Accumulation** (lesson 03): the gradient at `optimizer.step()` is 4.00 times the full batch's: each micro-batch's
#   mean loss was backpropagated as if it were the whole batch. The step is 4 times too large, on top of the rate.
# - **Validation** (lesson 06): the same model gives a different accuracy on each call (Dropout is on), and validating
#   moves BatchNorm's running statistics: `evaluate` never calls `model.eval()` (nor `torch.no_grad()`).
# - **Augmentation** (lesson 09): worker 1's noise is worker 0's noise (the same draws, up to float64 rounding), and
#   epoch 1 repeats epoch 0: each worker holds a copy of the same `dataset.rng`, in the same state, every epoch.
# - **The device** (lesson 01): `to_device_as_found` leaves the labels on the CPU. Here that is harmless, since
#   everything is on the CPU; on a GPU the loss raises. With the model on a GPU (a real one, or the simulated `cuda:0`
#   of lesson 01 on a CPU-only machine):

# %% tags=["raises-exception"]
images, labels = first_batch(make_loader(train_set, seed=0))
with tc.accelerator(device) as gpu:
    model = gpu.model(tc.models.sensor_net())
    inputs, labels = to_device_as_found(prepare_labels_fixed(images, labels), gpu.device)
    F.cross_entropy(model(inputs), labels)

# %% [markdown]
# Both tensors of the loss must be on one device; the message names the two. And the learning rate (lesson 04):
# 8.0 is far too high for this model (with the 4x of the accumulation, the step is 32 times what a rate of 1 gives).
#
# ## 2 · Diagnose
#
# Finding six bugs by hand took a page. `tc.clinic.examine` runs a few steps of a loop on copies (your model,
# optimizer, random states and loader are left exactly as they were) and reports each problem the course teaches
# that it finds: the evidence in numbers, the lesson, a one-line fix. Hand it the script's pieces as a step and a
# validation (and `prepare`, what turns a loader's batch into `(inputs, targets)`: the clinic computes the loss on the
# first batch with it, before and after its steps):

# %%
def examine(to_device, prepare_batch, accumulate_step, evaluate, lr, worker_init_fn=None):
    tc.seed_everything(0)
    model = tc.models.sensor_net().to(device)
    return tc.clinic.examine(
        model, make_loader(train_set, seed=0, worker_init_fn=worker_init_fn), F.cross_entropy,
        torch.optim.SGD(model.parameters(), lr=lr),
        step=lambda model, batch, loss_fn, optimizer: accumulate_step(
            model, to_device(prepare_batch(*batch), device), loss_fn, optimizer, MICRO_BATCHES),
        validate=lambda model: evaluate(model, val_loader), prepare=lambda batch: prepare_batch(*batch))


examine(to_device_as_found, prepare_batch_as_found, accumulate_step_as_found, evaluate_as_found, LR_AS_FOUND)

# %% [markdown]
# The first step raised, so the clinic's steps stop there, as the script did: the label dtype, lesson 02 (on a GPU
# the device error may come first, lesson 01; the "not checked" lines say what it could not measure without steps). The validation runs on its own copy of the
# model, so its two problems show already (lesson 06). Fix the labels (and move them, for a GPU) and examine again:

# %%
examine(to_device_both, prepare_labels_fixed, accumulate_step_as_found, evaluate_as_found, LR_AS_FOUND)

# %% [markdown]
# Now its five steps run, and the learning rate joins the validation's two problems: the training loss thrown up a
# hundredfold, or the loss on the same first batch, with the same Dropout masks, after the steps against before
# (lesson 04). Each finding has its evidence in numbers, its lesson and a one-line fix.
#
# **What it does not see**, and why (the README's "honest limits"): the labels left on the CPU (on a CPU-only
# machine the code is correct; on a GPU the step raises and the clinic reports it, lesson 01); the accumulation
# (a gradient 4 times too large is a legal gradient: only a comparison with the full batch, as above, tells); and the
# workers (each run repeats itself exactly, so the run is reproducible: only comparing workers, as above, tells). A
# clean report is not a proof: three of this script's six bugs are invisible to it on this machine.
#
# ## 3 · Fix it
#
# Six pieces, each a function (or a number) that the script calls, each graded by its own check, which calls only
# that piece, with the course's reference for everything else. Fix three and you get exactly those three points.
# Each piece is a fix you wrote in an earlier lesson; the checks are those lessons' checks.

# %% [markdown] nbgrader={"grade": false, "grade_id": "fix_md", "locked": true, "schema_version": 3, "solution": false, "task": false}
# **3a. The device (lesson 01).** `to_device(batch, device)`: return the batch with **every tensor** moved to
# `device` (only its device changes: its dtype, its values and, for a tensor that requires grad, its autograd graph
# stay; no `.detach()`). A batch can be a tuple, a list or a dict; keep its type (a tuple stays a tuple, a list a
# list, a dict a dict), and leave non-tensor items (ids, strings, numbers, NumPy arrays) as they are: not converted,
# not deep-copied. The batch's own items are what counts: a list or dict inside it is an item like any other, which
# a mover may leave as it is or, if it recurses, hand back rebuilt, holding the same items.

# %% nbgrader={"grade": false, "grade_id": "to_device", "locked": false, "schema_version": 3, "solution": true, "task": false}
def to_device(batch, device):
    """Return `batch` (tuple, list or dict) with every tensor moved to `device`."""
    ### BEGIN SOLUTION
    move = lambda v: v.to(device) if torch.is_tensor(v) else v
    if isinstance(batch, dict):
        return {k: move(v) for k, v in batch.items()}
    return type(batch)(move(v) for v in batch)
    ### END SOLUTION


# %% [markdown]
# **3b. The labels (lesson 02).** `prepare_batch(images, labels)`: the loader hands over `float64` spectrograms of
# shape `(N, H, W)` and `float64` class ids of shape `(N,)`. Return `(inputs, targets)` ready for a conv net and
# `CrossEntropyLoss`: inputs `float32` of shape `(N, 1, H, W)`, targets `int64` of shape `(N,)`. Keep the values as
# they are, whatever their range (no clamping, no rescaling). It must work for a batch of one.

# %% nbgrader={"grade": false, "grade_id": "prepare_batch", "locked": false, "schema_version": 3, "solution": true, "task": false}
def prepare_batch(images, labels):
    """float64 (N, H, W) images and float64 (N,) labels -> float32 (N, 1, H, W) inputs and int64 (N,) targets."""
    ### BEGIN SOLUTION
    return images.unsqueeze(1).float(), labels.long()
    ### END SOLUTION


# %% [markdown]
# **3c. The workers (lesson 09).** `worker_init_fn(worker_id)`: the DataLoader calls it in each worker before its
# first item; there `torch.utils.data.get_worker_info()` gives `.dataset` (the worker's own copy of the Dataset) and
# `.seed` (the worker's seed, drawn anew for every worker at every epoch from the loader's generator). Give the
# worker's copy a new Generator, `dataset.rng = np.random.default_rng(...)`, seeded from the worker's seed: the
# augmentations must then all differ, across workers and epochs, and repeat exactly under the same loader seed.

# %% nbgrader={"grade": false, "grade_id": "worker_init_fn", "locked": false, "schema_version": 3, "solution": true, "task": false}
def worker_init_fn(worker_id):
    """Reseed the worker's copy of the Dataset's Generator (dataset.rng) from the worker's own seed."""
    ### BEGIN SOLUTION
    info = torch.utils.data.get_worker_info()
    info.dataset.rng = np.random.default_rng(info.seed)
    ### END SOLUTION


# %% [markdown]
# **3d. The accumulation (lesson 03).** `accumulate_step(model, batch, loss_fn, optimizer, micro_batches)`: one
# optimizer step on the whole batch `(inputs, targets)` (already on the model's device; its size a multiple of
# `micro_batches`), computed in `micro_batches` pieces (`tensor.chunk(micro_batches)`): zero the gradients once before
# the loop, backpropagate each piece's loss (from `loss_fn`, called as it is, on the targets as they come) **divided
# by `micro_batches`**, step once after the loop, so that the gradients at the step equal the full batch's. Return the
# full batch's mean loss as a Python float (the sum of the scaled pieces' losses, each with `.item()`). Do not
# reseed or restore the global random stream inside the step: a model with Dropout draws each step's masks from it.

# %% nbgrader={"grade": false, "grade_id": "accumulate_step", "locked": false, "schema_version": 3, "solution": true, "task": false}
def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):
    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""
    ### BEGIN SOLUTION
    inputs, targets = batch
    optimizer.zero_grad()
    total = 0.0
    for xb, yb in zip(inputs.chunk(micro_batches), targets.chunk(micro_batches)):
        loss = loss_fn(model(xb), yb) / micro_batches
        loss.backward()
        total += loss.item()
    optimizer.step()
    return total
    ### END SOLUTION


# %% [markdown]
# **3e. The learning rate (lesson 04).** `LR`: a learning rate for the script's SGD, with every other piece fixed. The
# check trains the script (the reference pieces, no workers) for 60 steps on 3 seeds, and on other seeds and
# spectrogram sizes in the grader: the loss must stay finite and end below 10% of where it started. Pick one well
# inside the range that works (the explore section below has a slider).

# %% nbgrader={"grade": false, "grade_id": "stable_lr", "locked": false, "schema_version": 3, "solution": true, "task": false}
LR = None  # your stable learning rate
### BEGIN SOLUTION
LR = 0.1
### END SOLUTION

# %% [markdown]
# **3f. The validation (lesson 06).** `evaluate(model, loader)`: return the classification **accuracy** as a Python
# float: correct predictions (the argmax of the logits) over the number of samples, over all batches. It must switch
# the model to eval mode, run with gradient tracking off inside a block (`with torch.no_grad():` or
# `torch.inference_mode()`, so autograd is as it was when it returns), move each batch to the model's device
# (`next(model.parameters()).device`), and leave the model in the mode it found it (training or eval).

# %% nbgrader={"grade": false, "grade_id": "evaluate", "locked": false, "schema_version": 3, "solution": true, "task": false}
def evaluate(model, loader):
    """Accuracy of `model` on `loader`, in eval mode without autograd; the model's mode is restored."""
    ### BEGIN SOLUTION
    was_training = model.training
    device = next(model.parameters()).device
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            correct += (model(x).argmax(dim=1) == y).sum().item()
            total += y.numel()
    model.train(was_training)
    return correct / total
    ### END SOLUTION


# %% [markdown]
# The script with your six pieces (not graded: the checks below grade each piece on its own), then the clinic on it:

# %%
if LR is None:
    raise NotImplementedError("3e: set LR first")
with tc.LivePlot("the script, fixed", every=4) as plot:
    fixed = run_script(to_device, prepare_batch, accumulate_step, evaluate, LR, worker_init_fn, plot=plot)
print(plot.summary())
print(f"validation accuracy after each epoch: {fixed['val_accuracy']}")
examine(to_device, prepare_batch, accumulate_step, evaluate, LR, worker_init_fn)

# %% [markdown] nbgrader={"grade": false, "grade_id": "check_md", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 4 · Check
#
# One cell per piece, one point each. Each check calls only its piece (with the reference for the rest of the
# script), on seeded inputs, and prints `✓ ...` or raises `CheckFailed` saying what was expected, what happened and a
# hint (the lesson to revisit). They are the checks of lessons 01, 02, 03, 04 (on this script), 06 and 09. The grader
# runs them again on other seeds, sizes and dtypes.

# %% nbgrader={"grade": true, "grade_id": "check_to_device", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""to_device moves every tensor of a tuple, list or dict batch, and keeps the rest (lesson 01)"""
from trainclinic.checks import capstone as checks
checks.check_to_device(to_device)
### BEGIN HIDDEN TESTS
checks.check_to_device(to_device, seed=1)
checks.check_to_device(to_device, seed=2)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "check_prepare_batch", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""prepare_batch gives float32 (N, 1, H, W) inputs and int64 (N,) targets (lesson 02)"""
from trainclinic.checks import capstone as checks
checks.check_prepare_batch(prepare_batch)
### BEGIN HIDDEN TESTS
checks.check_prepare_batch(prepare_batch, seed=1)
checks.check_prepare_batch(prepare_batch, seed=2)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "check_worker_init_fn", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""worker_init_fn makes every worker's augmentations differ, reproducibly (lesson 09)"""
from trainclinic.checks import capstone as checks
checks.check_worker_init_fn(worker_init_fn)
### BEGIN HIDDEN TESTS
checks.check_worker_init_fn(worker_init_fn, seed=1)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "check_accumulated_grads", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""accumulate_step's gradients at optimizer.step() equal the full batch's, one step, the mean loss returned, one micro-batch per forward (lesson 03)"""
from trainclinic.checks import capstone as checks
checks.check_accumulated_grads(accumulate_step)
### BEGIN HIDDEN TESTS
checks.check_accumulated_grads(accumulate_step, seed=1)
checks.check_accumulated_grads(accumulate_step, seed=2)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "check_stable_lr", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""LR trains the script: finite, the loss below 10% of its start, on several seeds (lesson 04)"""
from trainclinic.checks import capstone as checks
checks.check_stable_lr(LR)
### BEGIN HIDDEN TESTS
checks.check_stable_lr(LR, seed=3)
checks.check_stable_lr(LR, seed=7)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "check_evaluate", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""evaluate runs in eval mode without autograd, and restores the model's mode (lesson 06)"""
from trainclinic.checks import capstone as checks
checks.check_evaluate(evaluate)
### BEGIN HIDDEN TESTS
checks.check_evaluate(evaluate, seed=1)
checks.check_evaluate(evaluate, seed=2)
### END HIDDEN TESTS

# %% [markdown]
# ## 5 · Explore
#
# The script (its own code here, not your pieces) with each bug behind a switch: `long_labels`
# (off: the labels stay `float64`), `divide_loss` (off: the accumulation without `/ micro_batches`), `eval_mode` (off:
# validation in training mode, without `no_grad`), and the learning rate. **Show the failure** puts the rate back to
# 8 and the accumulation unscaled: the loss climbs and the gradient norm leaps. Turn `long_labels` off to see the
# error. (The workers are left out here: they cost time at every redraw, and their bug does not show in a loss.)

# %%
explore_loader = DataLoader(train_set, batch_size=32, shuffle=True, generator=torch.Generator().manual_seed(0))


def run(lr=0.1, long_labels=True, divide_loss=True, eval_mode=True):
    """Two epochs of the script (no workers), each bug behind a switch; validation accuracy in the failure line."""
    tc.seed_everything(0)
    model = tc.models.sensor_net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    history = {"step": [], "loss": [], "grad_norm": []}
    for epoch in range(2):
        model.train()
        for images, labels in explore_loader:
            x, y = images.unsqueeze(1).float().to(device), (labels.long() if long_labels else labels).to(device)
            optimizer.zero_grad()
            total = 0.0
            for xb, yb in zip(x.chunk(MICRO_BATCHES), y.chunk(MICRO_BATCHES)):
                loss = F.cross_entropy(model(xb), yb) / (MICRO_BATCHES if divide_loss else 1)
                loss.backward()                    # with float labels: PyTorch's error, under the switches
                total += loss.item() / (1 if divide_loss else MICRO_BATCHES)
            history["grad_norm"].append(tc.grad_norm(model))
            optimizer.step()
            history["step"].append(len(history["loss"]))
            history["loss"].append(total)
    model.train(not eval_mode)                     # eval_mode off: Dropout on, BatchNorm on batch statistics
    with torch.set_grad_enabled(not eval_mode):
        accuracy = sum((model(x.to(device)).argmax(1) == y.to(device)).sum().item() for x, y in val_loader) / len(val_set)
    if not math.isfinite(history["loss"][-1]) or history["loss"][-1] > 0.5 * history["loss"][0]:
        history["failure"] = (f"the loss went from {history['loss'][0]:.3g} to {history['loss'][-1]:.3g}: lr={lr:g}"
                              f"{'' if divide_loss else ' x4 (accumulation unscaled)'} is too high; "
                              f"validation accuracy {accuracy:.2f}")
    return history


tc.explore(run, title="the capstone script", failure={"lr": 8.0, "divide_loss": False},
           lr=("log", 0.01, 10.0, 0.1), long_labels=("bool", True), divide_loss=("bool", True),
           eval_mode=("bool", True));

# %% [markdown] nbgrader={"grade": false, "grade_id": "recap", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 6 · Troubleshooting
#
# | Symptom | Cause | Fix |
# |---|---|---|
# | torch ≥ 2.13: `expected target dtype to be Long or Byte, but got Double` at the first step | class labels read as floats (a CSV, NumPy) | `labels.long()` in `prepare_batch` |
# | torch ≤ 2.12: `expected scalar type Long but found Double` at the first step | the same | the same |
# | on a GPU only: a device error at the loss, naming `cuda:0` and `cpu` | `to_device` moved the inputs and not the labels | move every tensor of the batch |
# | the loss ends above where it started, the gradient norm leaps by orders of magnitude; the clinic says `learning rate too high` | the rate (8.0) is far too high | a rate that trains on several seeds (0.1) |
# | the gradient norm at `optimizer.step()` is exactly `micro_batches` times the full batch's | each micro-batch's loss backpropagated without `/ micro_batches` | divide each piece's loss by `micro_batches` |
# | the validation accuracy changes between calls on one model; BatchNorm's running mean moves while validating; the clinic says `validation in training mode` and `validation records autograd graphs` | `evaluate` without `model.eval()` and `torch.no_grad()` | both, and the model's mode put back |
# | two workers' augmentations are identical, and every epoch repeats the last; the clinic says nothing | each worker holds a copy of the Dataset's Generator in the same state | `worker_init_fn` reseeding `get_worker_info().dataset.rng` from `get_worker_info().seed` |
#
# **Recap.** A real script rarely has one bug. The first one raises and hides the others; the silent ones show in
# numbers: a loss that climbs, a gradient norm that leaps or is a round multiple of what it should be, a validation
# that changes between calls, augmentations that repeat. Take it apart into pieces that can be called on their own
# (that is also what makes them testable), and examine the loop: on your own training loop, run
# `report = tc.clinic.examine(model, loader, loss_fn, optimizer, step=your_step, validate=your_validation)` before a
# long run, read each finding's evidence and lesson, and remember what it cannot see (devices on a CPU-only machine,
# accumulation scale, workers' generators): for those, the checks of this course are the tests to copy.
