# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false, "task": false}
# # Lesson 06 · Missing `model.eval()` and `torch.no_grad()`
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/trainclinic/trainclinic/blob/main/notebooks/06_missing_eval/06_missing_eval.ipynb)
#
# **The failure:** mostly silent. Validation accuracy that changes when you run it twice, BatchNorm statistics that
# drift while you "only validate", validation that eats memory, and one loud symptom:
# `ValueError: Expected more than 1 value per channel when training, got input size torch.Size([1, 32])`.
#
# **What you will learn**
# - what `model.train()` / `model.eval()` switch (Dropout, BatchNorm) and what they do **not** switch (autograd);
# - to see each symptom happen: random validation scores, moving running statistics, the batch-of-one error, and the
#   memory and time autograd spends on a backward pass that never comes;
# - to measure what a validation pass does to a model with a tool;
# - to write an `evaluate` that switches to eval mode, turns autograd off and puts the model back as it found it,
#   and a `train_epoch` that switches back to training mode every epoch.
#
# **Prerequisites:** a PyTorch training loop (`zero_grad`, `backward`, `step`), and what Dropout and BatchNorm do.
# Everything runs on the CPU: no GPU needed (on a GPU it runs there).

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Setup. In Colab this installs trainclinic once, with --no-deps: Colab's own torch is never touched.
import importlib.util, subprocess, sys
if importlib.util.find_spec("trainclinic") is None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "git+https://github.com/trainclinic/trainclinic@main"], check=True)
import torch
import trainclinic as tc
from trainclinic import evaluation as ev
device = tc.pick_device()
tc.banner(device);

# %% [markdown] nbgrader={"grade": false, "grade_id": "reproduce_md", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 1 · Reproduce the failure
#
# A classifier with the two layers that behave differently in training and in evaluation: `BatchNorm1d` (normalises
# with the batch's statistics while training, with its running averages in evaluation, and updates those averages
# on every training-mode forward pass) and `Dropout(p=0.5)` (zeroes half the units at random while training, does
# nothing in evaluation). We train it for a few epochs, then validate it the way many first loops do.

# %%
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

full = tc.blobs(n=1024, features=8, classes=4, spread=2.2, seed=0)
x_all, y_all = full.tensors
train_set = TensorDataset(x_all[:256], y_all[:256])
val_set = TensorDataset(x_all[256:], y_all[256:])          # 768 samples
val_loader = DataLoader(val_set, batch_size=64)            # no shuffling for validation

tc.seed_everything(0)
model = ev.bn_mlp(inputs=8, hidden=32, outputs=4, p=0.5, seed=0).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
model.train()
for epoch in range(3):
    for x, y in tc.loader(train_set, batch_size=32, seed=epoch):
        optimizer.zero_grad()
        F.cross_entropy(model(x.to(device)), y.to(device)).backward()
        optimizer.step()
print(model)


# %%
def validate_naive(model, loader):
    """The bug: no model.eval(), no torch.no_grad()."""
    correct = total = 0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        logits = model(x)
        correct += (logits.argmax(1) == y).sum().item()
        total += len(y)
    return correct / total

print("validation accuracy, run 1:", validate_naive(model, val_loader))
print("validation accuracy, run 2:", validate_naive(model, val_loader))
print("validation accuracy, run 3:", validate_naive(model, val_loader))

# %% [markdown]
# **Dropout is still active.** The same model on the same data scores differently every run: each forward pass
# drops a different random half of the hidden units. The reported number is noisy *and* too low, because the model
# is judged with half its units missing.
#
# **BatchNorm keeps learning from the validation set.** In training mode every forward pass moves BatchNorm's
# `running_mean` and `running_var` towards the current batch, and counts it in `num_batches_tracked`. "Validation"
# changes the model:

# %%
bn = model[1]
before_mean, before_count = bn.running_mean.clone(), int(bn.num_batches_tracked)
validate_naive(model, val_loader)
print(f"num_batches_tracked: {before_count} -> {int(bn.num_batches_tracked)}")
print(f"running_mean moved by up to {(bn.running_mean - before_mean).abs().max().item():.4f}")

# %% [markdown]
# **The loud one: a batch of one.** In training mode BatchNorm needs at least two values per channel to compute
# a batch variance. 768 validation samples in batches of 59 leave a last batch of exactly one sample
# (768 = 13 × 59 + 1), and PyTorch refuses:

# %% tags=["raises-exception"]
odd_loader = DataLoader(val_set, batch_size=59)     # the last batch holds 1 sample
validate_naive(model, odd_loader)

# %% [markdown]
# **Autograd is still recording.** Without `torch.no_grad()`, every forward pass builds a graph and saves the
# activations a backward pass would need. Validation never calls `backward()`, so this is pure waste: memory
# while the outputs live, and time. (The MiB below are summed over the loop's batches: each batch's graph is freed
# when `logits` is overwritten, unless something keeps it.) `ev.graph_meter()` counts what autograd saves, through PyTorch's own
# `torch.autograd.graph.saved_tensors_hooks`, and times the block with `time.perf_counter`. A wider model on a larger
# validation set, in eval mode both times, with autograd on and then off (best of three runs each):

# %%
big = ev.bn_mlp(inputs=8, hidden=512, outputs=4, p=0.5, seed=1).to(device).eval()
big_loader = DataLoader(tc.blobs(n=4096, features=8, classes=4, seed=2), batch_size=512)

def measure(grad):
    runs = []
    for _ in range(3 if tc.plots.live_frontend() else 1):  # under the grader nobody reads the timing: one run
        with torch.set_grad_enabled(grad), ev.graph_meter(big) as meter:
            for x, _ in big_loader:
                logits = big(x.to(device))
        runs.append(meter)
    return min(runs, key=lambda m: m.seconds), logits

on, logits_on = measure(True)
off, logits_off = measure(False)
print("autograd on :", on)
print("autograd off:", off)
print(f"time ratio on/off: {on.seconds / off.seconds:.2f} (times jitter on a busy machine; the memory does not)")
print("logits with autograd on : requires_grad =", logits_on.requires_grad, "| grad_fn =", logits_on.grad_fn)
print("logits with autograd off: requires_grad =", logits_off.requires_grad, "| grad_fn =", logits_off.grad_fn)

# %% [markdown]
# ### How to read the symptoms
#
# - **Different accuracy on every run of the same data**: something random runs at evaluation time. That is Dropout
#   in training mode.
# - **`running_mean` / `num_batches_tracked` changing during validation**: BatchNorm in training mode. The model you
#   save after "validating" is not the model you trained, and its statistics have seen the validation set.
# - **`ValueError: Expected more than 1 value per channel when training, got input size torch.Size([1, 32])`**: the
#   message says it: *when training*. A BatchNorm layer got a batch of one (32 channels, one value each) while in
#   training mode. It typically appears only on the last, smaller batch, or when you predict a single sample.
# - **Logits with a `grad_fn`** (`requires_grad=True`) in validation: autograd is on. It costs memory for every
#   saved activation, and if you keep the outputs (`all_logits.append(logits)`, `total_loss += loss`) every batch's
#   graph stays alive and memory grows with the size of the validation set.
#
# Note that **`model.eval()` does not turn autograd off**, and **`torch.no_grad()` does not switch Dropout or
# BatchNorm**: the two fix different things, and validation needs both.

# %% [markdown]
# ## 2 · Diagnose: watch what validation does to the model
#
# `ev.watch_validation(model)` records, inside a `with` block, every forward pass of the model (training mode or not, autograd
# on or not), what autograd saved, whether the BatchNorm buffers moved, and the mode the model is left in.

# %%
with ev.watch_validation(model) as w:
    validate_naive(model, val_loader)
print(w)

# %% [markdown]
# Half a fix: `model.eval()` alone. Dropout and BatchNorm now behave, but autograd still records every batch,
# and the model is left in eval mode: the next training epoch would run without Dropout, with frozen BatchNorm.

# %%
model.train()
with ev.watch_validation(model) as w:
    model.eval()
    validate_naive(model, val_loader)
print(w)
model.train();


# %% [markdown]
# ## 3 · Fix it
#
# **3a.** `evaluate(model, loader)`: return the classification **accuracy** as a Python float (not a tensor): correct
# predictions over the number of samples, summed over all batches (a short last batch counts its own size); the
# prediction is the argmax of the logits. It must:
# - switch the model to eval mode (Dropout off, BatchNorm using its running statistics);
# - run with gradient tracking off, inside a block (`with torch.no_grad():` or `torch.inference_mode()`), so that
#   autograd is as it was when `evaluate` returns: back on in a training loop, still off for a caller that had it off;
# - move each batch to the model's device (`next(model.parameters()).device`): the loader yields CPU tensors, and
#   the model may sit on a GPU;
# - leave the model in the mode it found it: back to training mode if it was training, still in eval mode if it
#   already was.

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
# **3b.** `train_epoch(model, loader, optimizer)`: one epoch of training with the cross-entropy loss (`F.cross_entropy`
# on the logits). Return the **mean of the batch losses**: the sum of each batch's `loss.item()` divided by the number
# of batches (a short last batch counts once, like the others), as a Python float. Not a tensor: each batch's loss
# tensor holds that batch's autograd graph, and adding them up keeps every batch's graph alive until the epoch ends.
# The model may arrive **in eval mode**, whole or in part (your `evaluate` at the end of the previous epoch leaves it as
# it found it, but other code may not; `model.training` is the top module's flag only, and may be `True` while its
# layers are in eval mode): make sure every step trains in training mode, every layer of it (a forward pass under
# `torch.no_grad()` between steps, e.g. to measure, is not a step). Move each batch to the model's device. Do not
# reseed the global random stream inside it: every epoch would draw the same Dropout masks.

# %% nbgrader={"grade": false, "grade_id": "train_epoch", "locked": false, "schema_version": 3, "solution": true, "task": false}
def train_epoch(model, loader, optimizer):
    """One epoch in training mode; returns the mean batch loss."""
    ### BEGIN SOLUTION
    model.train()
    device = next(model.parameters()).device
    losses = []
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return sum(losses) / len(losses)
    ### END SOLUTION


# %% [markdown]
# ## 4 · Check
#
# Each check builds a small Dropout + BatchNorm model (its running statistics warmed up away from their starting
# values), runs your function on seeded data and watches every forward pass. It prints `✓ ...` when your code
# behaves, and otherwise raises `CheckFailed` saying what was expected, what happened and a hint. The grader runs more
# cases than you see here: other seeds, sizes and widths, short last batches (of one sample, for `evaluate`),
# float64. On a machine without a GPU, each function also runs on a model on a simulated `cuda:0` (PyTorch's
# `FakeTensorMode`) with CPU batches, so a batch that is never moved is caught here too.

# %% nbgrader={"grade": true, "grade_id": "check_evaluate_eval", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""evaluate runs in eval mode: the same logits on every call, BatchNorm untouched, the right accuracy"""
from trainclinic.checks import missing_eval as checks
checks.check_evaluate_eval(evaluate)
### BEGIN HIDDEN TESTS
for seed in (1, 2, 3):
    checks.check_evaluate_eval(evaluate, seed=seed)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "check_evaluate_no_grad", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""evaluate builds no autograd graph"""
from trainclinic.checks import missing_eval as checks
checks.check_evaluate_no_grad(evaluate)
### BEGIN HIDDEN TESTS
for seed in (1, 2):
    checks.check_evaluate_no_grad(evaluate, seed=seed)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "check_evaluate_restores", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""evaluate leaves the model in the mode it found it"""
from trainclinic.checks import missing_eval as checks
checks.check_evaluate_restores(evaluate)
### BEGIN HIDDEN TESTS
for seed in (1, 2):
    checks.check_evaluate_restores(evaluate, seed=seed)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "check_train_epoch", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""train_epoch trains in training mode, even after evaluate"""
from trainclinic.checks import missing_eval as checks
checks.check_train_epoch(train_epoch)
### BEGIN HIDDEN TESTS
for seed in (1, 2, 3):
    checks.check_train_epoch(train_epoch, seed=seed)
### END HIDDEN TESTS

# %% [markdown]
# Your `evaluate` under the watch: no training-mode pass, autograd off, BatchNorm untouched, the mode restored.

# %%
model.train()
with ev.watch_validation(model) as w:
    acc = evaluate(model, val_loader)
print(w)
print("accuracy:", acc, "| again:", evaluate(model, val_loader))


# %% [markdown] nbgrader={"grade": false, "grade_id": "effect_md", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 5 · The effect on reported validation accuracy
#
# Two trainings from the same seed, 12 epochs each, validating after every epoch:
# - **fixed**: your `train_epoch`, and your `evaluate` after every epoch;
# - **no `eval()`**: the same loop validating with `validate_naive`, in training mode. We also measure that same model
#   with your `evaluate` after each epoch, so you see the number it *reports* next to the number it *should* report.

# %%
def run(validate, epochs=12, p=0.5, lr=0.05):
    tc.seed_everything(0)
    model = ev.bn_mlp(inputs=8, hidden=32, outputs=4, p=p, seed=0).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    reported, measured = [], []
    for epoch in range(epochs):
        train_epoch(model, tc.loader(train_set, batch_size=32, seed=epoch), optimizer)
        reported.append(validate(model, val_loader))
        measured.append(evaluate(model, val_loader))    # eval mode: draws no random numbers, changes nothing
    return reported, measured


def naive_then_put_batchnorm_back(model, loader):
    """validate_naive, then BatchNorm's buffers (running mean, variance, count) put back as they were."""
    saved = {name: b.clone() for name, b in model.named_buffers()}
    accuracy = validate_naive(model, loader)
    with torch.no_grad():
        for name, b in model.named_buffers():
            b.copy_(saved[name])
    return accuracy


fixed, _ = run(evaluate)
naive_reported, naive_measured = run(validate_naive)
_, put_back_measured = run(naive_then_put_batchnorm_back)
curves = {
    "fixed: evaluate()": fixed,
    "no eval(): what it reports": naive_reported,
    "no eval(): the same model measured in eval mode": naive_measured,
}
for name, acc in curves.items():
    print(f"{name:60s} mean of the last 5 epochs: {sum(acc[-5:]) / 5:.3f}")
print(f"{'no eval(), BatchNorm buffers put back after each validation':60s} mean of the last 5 epochs: "
      f"{sum(put_back_measured[-5:]) / 5:.3f}")
ev.plot_curves(curves, title="validation accuracy per epoch", ylabel="accuracy")


# %% [markdown]
# The gap between the two "no eval()" curves is pure reporting error: Dropout removes half the units while the
# model is judged. Early stopping, model selection and learning-rate schedules that read this number all act on a
# wrong, noisy signal.
#
# The gap between **fixed** (about 0.71) and the **no eval()** model measured in eval mode (about 0.69) is damage to
# the model itself. Validation in training mode moved BatchNorm's running statistics, the very numbers eval mode
# normalises with: every validation batch pulled them 10% of the way toward its own statistics (BatchNorm's
# `momentum=0.1`), so after the 12 batches of one validation only about a quarter of what training had set is left.
# The last line above checks this explanation: the same naive loop, with BatchNorm's buffers put back after each
# validation, scores about 0.71 again. What little remains comes from chance: `validate_naive` draws random numbers
# for its Dropout masks, so every later epoch trains with other masks, a different but equally valid run.
#
# The third bug, an `evaluate` that leaves the model in eval mode with a loop that never calls `model.train()`, is
# quieter: from the second epoch on the model trains without Dropout and with frozen BatchNorm statistics. On this
# small problem that costs little; on a model that overfits, it silently removes the regularisation you chose.

# %% [markdown]
# ## 6 · Explore: train with the fixed loop, then break it
#
# The training loop below calls `model.train()` at the start of each epoch and validates at its end; `tc.LivePlot`
# draws the training loss and gradient norm as it trains. `validate` is your `evaluate` when both of its switches are
# on; switch `eval_mode` or `no_grad` off and it validates with that half of the fix removed, as `validate_naive`
# does. Then the controls: the learning rate, the dropout probability `p`, and the two switches rerun a short
# training and redraw. **Show the failure** turns both switches off: the red line under the plot says what changed,
# in numbers: the accuracy that validation in training mode reports against the same model's in eval mode, how far
# each validation moved BatchNorm's running statistics, and the memory autograd kept for a backward pass that never
# comes. With
# a large `p` the training loss (measured in training mode, with Dropout on) gets noisier and higher, even when the
# validation accuracy in eval mode holds up: the two numbers are measured in different modes.

# %%
def validate(model, loader, eval_mode=True, no_grad=True):
    """Validation accuracy: your evaluate when both switches are on, else validate_naive with that half of the fix."""
    if eval_mode and no_grad:
        return evaluate(model, loader)
    was_training = model.training
    if eval_mode:
        model.eval()
    with torch.set_grad_enabled(not no_grad):
        accuracy = validate_naive(model, loader)
    model.train(was_training)
    return accuracy


def fit(lr=0.05, p=0.5, eval_mode=True, no_grad=True, epochs=8, plot=None):
    tc.seed_everything(0)
    model = ev.bn_mlp(inputs=8, hidden=32, outputs=4, p=p, seed=0).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    history = {"step": [], "loss": [], "grad_norm": [], "val_accuracy": []}
    watched = []                                   # what each validation did to the model
    step = 0
    for epoch in range(epochs):
        model.train()
        for x, y in tc.loader(train_set, batch_size=32, seed=epoch):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()
            gn = tc.grad_norm(model)
            history["step"].append(step); history["loss"].append(loss.item()); history["grad_norm"].append(gn)
            if plot is not None:
                plot.update(step, loss.item(), gn)
            step += 1
        with ev.watch_validation(model) as w:
            history["val_accuracy"].append(validate(model, val_loader, eval_mode, no_grad))
        watched.append(w)
    changed = []
    if not eval_mode:
        changed.append(f"reports {history['val_accuracy'][-1]:.3f} in training mode vs {evaluate(model, val_loader):.3f} "
                       f"in eval mode; BatchNorm stats moved up to {max(w.bn_change for w in watched):.2g} per validation")
    if not no_grad:
        changed.append(f"autograd kept {watched[-1].meter.nbytes / 2**20:.1f} MiB per validation")
    history["failure"] = "; ".join(changed) or None
    return history


with tc.LivePlot("lesson 06: training with evaluate() every epoch", every=16) as plot:
    history = fit(plot=plot)
print(plot.summary())
print("validation accuracy per epoch:", " ".join(f"{a:.3f}" for a in history["val_accuracy"]))

# %%
tc.explore(fit, title="lr / dropout p / the fix's two halves", failure={"eval_mode": False, "no_grad": False},
           lr=("log", 1e-3, 1.0, 0.05), p=("float", 0.0, 0.9, 0.5), eval_mode=("bool", True), no_grad=("bool", True));

# %% [markdown]
# Two errors come from the opposite mistake, a `with` block around more than validation. Here they are, for real:
# training code inside `torch.no_grad()`, and a tensor made under `torch.inference_mode()` used in training.

# %%
layer = torch.nn.Linear(8, 4)
with torch.no_grad():
    loss = layer(torch.randn(2, 8)).sum()              # a training step that ended up inside the block
try:
    loss.backward()
except RuntimeError as exc:
    print("RuntimeError:", exc)
with torch.inference_mode():
    features = torch.randn(2, 8)                      # e.g. inputs cached during validation
try:
    layer(features).sum().backward()
except RuntimeError as exc:
    print("RuntimeError:", str(exc).splitlines()[0])
print("with a clone made outside inference mode, it trains:", layer(features.clone()).sum().requires_grad)

# %% [markdown] nbgrader={"grade": false, "grade_id": "recap", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 7 · Troubleshooting
#
# | Symptom | Cause | Fix |
# |---|---|---|
# | validation accuracy differs between two runs on the same data | Dropout active: no `model.eval()` | `model.eval()` before validating |
# | `running_mean` / `num_batches_tracked` change during validation | BatchNorm in training mode | `model.eval()` |
# | `Expected more than 1 value per channel when training` | a batch of one through BatchNorm in training mode (last batch, single prediction) | `model.eval()` for inference; for training, `drop_last=True` in the DataLoader |
# | validation memory grows with the number of batches | autograd on, outputs or losses kept (`total += loss`) | `torch.no_grad()` (or `torch.inference_mode()`), and `.item()` |
# | `RuntimeError: element 0 of tensors does not require grad` right after validation | training code ran inside `no_grad` / `inference_mode` | keep the `with` block around validation only |
# | `RuntimeError: Inference tensors cannot be saved for backward` | a tensor made under `torch.inference_mode()` (cached features, a buffer) is used in training | make it under `torch.no_grad()`, or `.clone()` it outside inference mode |
# | Dropout has no effect after the first epoch, BatchNorm statistics frozen | validation left the model in eval mode | `model.train()` at the start of every epoch; restore the mode in `evaluate` |
# | the model is in training mode after you called `evaluate` on an eval model | `evaluate` ends with `model.train()` unconditionally | remember `model.training`, then `model.train(was_training)` |
#
# **Recap.** `model.eval()` switches what layers do (Dropout off, BatchNorm on its running statistics);
# `torch.no_grad()` switches autograd off. Validation needs both. Write one `evaluate` that does both and puts the
# model back as it found it, and start every training epoch with `model.train()`. `ev.watch_validation` shows what a block of
# code did to your model.
