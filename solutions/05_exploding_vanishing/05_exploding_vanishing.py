# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false, "task": false}
# # Lesson 05 · Exploding and vanishing gradients
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/trainclinic/trainclinic/blob/main/notebooks/05_exploding_vanishing/05_exploding_vanishing.ipynb)
#
# **The failure:** the loss turns into `inf`, then `nan`, a few steps into training, or it never moves at all.
# Ask PyTorch to measure the gradient and it says why:
# ``RuntimeError: The total norm of order 2.0 for gradients from `parameters` is non-finite, so it cannot be clipped.``
#
# **What you will learn**
# - to make gradients **explode** (a deep net with a too-large initialisation) and **vanish** (a deep sigmoid stack),
#   and to recognise both from numbers instead of guessing;
# - to read a **gradient-norm dashboard**: the total norm and every layer's norm over the training steps;
# - to compute per-layer gradient norms yourself, and why norms combine as a square root of a sum of squares;
# - to **clip** the gradient norm correctly (after `backward`, before `step`, all parameters together) and to log
#   the norm *before* clipping;
# - to fix vanishing gradients with ReLU and He initialisation, residual connections or normalisation.
#
# **Prerequisites:** a PyTorch training loop (`zero_grad`, `backward`, `step`) and lesson 01. Everything here runs on
# any machine, CPU included: no part of this lesson is simulated.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Setup. In Colab this installs trainclinic once, with --no-deps: Colab's own torch is never touched.
import importlib.util, subprocess, sys
if importlib.util.find_spec("trainclinic") is None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "git+https://github.com/trainclinic/trainclinic@main"], check=True)
import torch
import trainclinic as tc
from trainclinic import gradients
device = tc.pick_device()
tc.banner(device);

# %% [markdown] nbgrader={"grade": false, "grade_id": "reproduce_md", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 1 · Reproduce the failure
#
# ### Exploding gradients
#
# A 10-layer ReLU network whose weights start **3 times** larger than PyTorch's default, trained with plain SGD
# (`lr=0.1`) on a small classification set. The loop measures the total gradient norm at every step with
# `clip_grad_norm_(..., max_norm=inf, error_if_nonfinite=True)`: with an infinite ceiling it clips nothing (while the
# norm is finite, it scales every gradient by 1), it only returns the norm, and it raises the moment the norm stops
# being a finite number (without `error_if_nonfinite` it would scale the gradients by inf / inf, that is `nan`).

# %%
import math

from torch import nn

if device.type == "cpu":
    torch.set_num_threads(1)                                  # tiny models: one CPU thread is the fastest
train_set = tc.blobs(n=256, features=8, classes=3, seed=0)
x, y = (t.to(device) for t in train_set.tensors)             # the whole set is one batch
loss_fn = nn.CrossEntropyLoss()


def exploding_net(gain=3.0, depth=10, seed=0):
    """A deep ReLU MLP whose weights start `gain` times larger than PyTorch's default."""
    model = tc.mlp(inputs=8, hidden=32, outputs=3, depth=depth, seed=seed)
    with torch.no_grad():
        for layer in model:
            if isinstance(layer, nn.Linear):
                layer.weight.mul_(gain)
    return model.to(device)


# %% tags=["raises-exception"]
model = exploding_net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(12):
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=float("inf"), error_if_nonfinite=True)
    print(f"step {step:2d}   loss {loss.item():10.4g}   gradient norm {norm.item():10.4g}")
    optimizer.step()

# %% [markdown]
# ### How to read it
#
# - **The message** comes from `clip_grad_norm_`: the total norm (the square root of the sum of the squares of *every*
#   gradient entry) is `inf` or `nan`. It does not say which layer; the dashboard below does.
# - **The numbers before it** tell the story: the gradient norm goes from about 80 to about a million in five steps
#   (not at every step: a step can shrink it for a while), the loss follows, and at the last step the gradients are no
#   longer finite numbers.
# - **Without the guard nothing raises.** The loss becomes `nan`, every weight becomes `nan` after the next `step`,
#   and the loop runs on, silently, to the end. `error_if_nonfinite=True` turns the silent failure into an error at
#   the first bad step.
# - **Why it explodes: the steps feed on themselves.** At step 0 nothing is extreme yet: the profile in section 2
#   shows every layer's gradient within a factor of 5 of the others, a total norm of about 80. But `lr=0.1` times a
#   norm of 80 is a step far too large for this net: it makes the weights larger, larger weights make the next
#   gradient larger, and the next step larger still. Depth makes it worse: a deeper net starts with a larger gradient
#   (below: about 19 at depth 4, 80 at depth 10), and each step's change to the weights is multiplied through more
#   layers on its way to the output. The same initialisation and learning rate with fewer layers survive:

# %%
for depth in (4, 6, 8, 10, 12):
    model = exploding_net(depth=depth)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    norms = []
    for step in range(40):
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        norms.append(torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=float("inf")).item())
        if not math.isfinite(norms[-1]):
            break
        optimizer.step()
    fate = f"non-finite at step {step}" if not math.isfinite(norms[-1]) else "trains (40 steps)"
    largest = max(v for v in norms if math.isfinite(v))
    print(f"depth {depth:2d}: gradient norm {norms[0]:5.1f} at step 0, largest {largest:9.3g}: {fate}")

# %% [markdown]
# Recurrent networks explode *through time*, and there depth does multiply from the start: the same matrix
# multiplies the gradient once per time step (section 2 shows it).
#
# **A non-finite norm is not always a non-finite gradient.** The L2 norm squares every entry, and in float32 the
# squares overflow (above about `3.4e38`) long before the entries do: as soon as the total norm passes about
# `1.8e19`, `clip_grad_norm_` raises while every gradient is still finite.

# %%
g = torch.full((4,), 1e19)                        # four finite gradient entries: the true norm is 2e19
print("every entry finite:", torch.isfinite(g).all().item())
print("norm in float32:", torch.linalg.vector_norm(g).item(), "| in float64:", torch.linalg.vector_norm(g.double()).item())

# %% [markdown]
# Either way the step is already out of control; `all(torch.isfinite(p.grad).all() for p in model.parameters())`
# tells which of the two you have.
#
# ### Vanishing gradients
#
# Now the opposite: the same depth with **sigmoid** activations and PyTorch's default initialisation. Nothing
# overflows and nothing raises. Watch the loss.

# %%
sigmoid_net = tc.mlp(inputs=8, hidden=32, outputs=3, depth=10, activation=nn.Sigmoid).to(device)
optimizer = torch.optim.SGD(sigmoid_net.parameters(), lr=0.05)
losses = []
for step in range(80):
    optimizer.zero_grad()
    loss = loss_fn(sigmoid_net(x), y)
    loss.backward()
    optimizer.step()
    losses.append(loss.item())
prior = torch.bincount(y.cpu(), minlength=3) / len(y)
print(f"loss at steps 0, 40 and 79: {losses[0]:.4f}, {losses[40]:.4f}, {losses[-1]:.4f}")
print(f"the loss of always guessing the class frequencies: {-(prior * prior.log()).sum().item():.4f}")

# %% [markdown]
# The net has learned the class frequencies and nothing else. The last layer gets a useful gradient; the first
# layers get almost none, so they never change. The derivative of the sigmoid is at most `0.25`: every layer
# multiplies the gradient flowing back by at most 0.25 times its weights, and ten of them shrink it by many orders of
# magnitude. There is no error message for this: the symptom is a **flat loss**, and the diagnosis is a number.
#
# ## 2 · Diagnose: per-layer gradient norms
#
# `gradients.profile(model, batch, loss_fn)` runs one forward and backward pass and returns every layer's gradient norm;
# `gradients.table(norms)` prints them on a log scale, with the ratio of the first layer to the last.

# %%
print("sigmoid, depth 10")
print(gradients.table(gradients.profile(tc.mlp(8, 32, 3, depth=10, activation=nn.Sigmoid).to(device), (x, y), loss_fn)))
print("\nReLU, weights x3, depth 10")
print(gradients.table(gradients.profile(exploding_net(), (x, y), loss_fn)))

# %% [markdown]
# Sigmoid: the first layer's gradient is about **eight orders of magnitude** smaller than the last one's: that is
# vanishing, and it is there from the first step. The exploding net at step 0 is not extreme: its layers are within a
# factor of 5 of each other (first/last about 0.2). Its explosion happens over the *training steps*, as the dashboard
# shows; depth only made each step more violent.
#
# ### The same thing through time
#
# Here depth really multiplies. A recurrent network applies **one** matrix `W` at every time step, so backpropagation through `T` steps multiplies the
# gradient by `W` (transposed) `T` times. Below, `W` is a rotation scaled by `scale`: the gradient reaching the first state is `scale ** T` times
# the one leaving the last state. Autograd computes it; nothing is
# faked. A factor of 1.2 per step is a disaster after 100 steps, and so is 0.8.

# %%
rotation = torch.linalg.qr(torch.randn(16, 16, generator=torch.Generator().manual_seed(0)))[0]   # orthogonal
for scale in (0.8, 1.0, 1.2):
    norms = []
    for T in (10, 50, 100):
        h0 = torch.zeros(16, requires_grad=True)
        h = h0
        for _ in range(T):
            h = (scale * rotation) @ h + 0.1           # the recurrence h_t = W h_(t-1) + input
        h.sum().backward()                          # d(loss)/d(h_T) is a vector of ones: norm 4
        norms.append(h0.grad.norm().item() / 4)
    print(f"scale {scale}:  gradient norm at h_0 / at h_T after T = 10, 50, 100 steps:  "
          + "   ".join(f"{n:9.2e}" for n in norms))


# %% [markdown]
# ### The gradient-norm dashboard
#
# `gradients.Dashboard` records, at every step, the loss, the **total** gradient norm and **every layer's** norm, and
# redraws them while the loop trains (call `dash.update(step, loss, model)` after `backward()`, before `step()`).
# Read it like this:
#
# | panel | exploding | vanishing | healthy |
# |---|---|---|---|
# | loss | shoots up, then a red `non-finite` line | flat at the constant-guess value | goes down |
# | total gradient norm | grows by large factors within a few steps | small, and shrinking | steady or slowly shrinking |
# | per-layer norms (dark = first layer) | all lines rise together | lines orders of magnitude apart, first at the bottom | lines within a decade or two |

# %%
def watch(model, lr, steps, title):
    """Train `model` with plain SGD for `steps` steps, drawing the dashboard."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    with gradients.Dashboard(title, every=max(steps // 4, 1)) as dash:
        for step in range(steps):
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            dash.update(step, loss.item(), model)
            optimizer.step()
    print(dash.summary())


watch(exploding_net(), lr=0.1, steps=12, title="exploding: ReLU, weights x3")
watch(tc.mlp(8, 32, 3, depth=10, activation=nn.Sigmoid).to(device), lr=0.05, steps=40, title="vanishing: sigmoid")


# %% [markdown]
# ## 3 · Fix it
#
# **3a.** `grad_norms(model)`: measure the gradients, as the dashboard does. Return a pair `(total, layers)`:
# - `layers`: a dict `{module name: norm}` with one entry per module that has gradients **of its own**: the names come
#   from `model.named_modules()` (the model itself is named `''`), the parameters from
#   `module.parameters(recurse=False)`, and parameters whose `.grad` is `None` (frozen from the start, or unused) are
#   skipped; a parameter frozen after a backward pass (`requires_grad=False`) still holds its `.grad`, and counts. The
#   norm of a layer is the L2 norm of all its gradient entries together (weight and bias).
# - `total`: the L2 norm of **all** the model's gradients, each parameter counted once (a weight shared by two layers
#   is in both layers' entries, but once in the total), as `torch.nn.utils.clip_grad_norm_` measures it (it returns
#   that norm; from torch 2.6, `torch.nn.utils.get_total_norm` computes it alone).
# - a model with no gradients at all (before its first backward pass) gives `(0.0, {})`, as `clip_grad_norm_` does.
#
# Return Python floats (`.item()`), not tensors, and leave the model and its gradients untouched (values and dtypes:
# measure, do not convert), even when they are not finite
# (the dashboard measures exploded steps too: a norm of `inf` is a reading, not a reason to change them). The checks
# try many small models: other widths and depths, frozen and shared layers, an `inf` gradient, float32, float64 and
# bfloat16.

# %% nbgrader={"grade": false, "grade_id": "grad_norms", "locked": false, "schema_version": 3, "solution": true, "task": false}
def grad_norms(model):
    """(total gradient norm, {layer name: gradient norm of that layer's own parameters})."""
    ### BEGIN SOLUTION
    layers = {}
    for name, module in model.named_modules():
        grads = [p.grad for p in module.parameters(recurse=False) if p.grad is not None]
        if grads:
            layers[name] = torch.cat([g.flatten() for g in grads]).norm().item()
    grads = [p.grad for p in model.parameters() if p.grad is not None]   # each parameter once, even a shared one
    total = torch.cat([g.flatten() for g in grads]).norm().item() if grads else 0.0
    return total, layers
    ### END SOLUTION


# %% [markdown]
# **3b.** `clipped_step(model, batch, loss_fn, optimizer, max_norm)`: one training step on `batch = (inputs, targets)`
# with **gradient-norm clipping**: when the total gradient norm is above `max_norm`, scale *all* gradients by the same
# factor so that their total norm is `max_norm` (the direction stays the same); below it, leave them alone.
# Return `(loss, grad_norm)` as Python floats (`.item()`: a loss tensor still holds the step's autograd graph, and a
# history of them would keep every step's activations alive), where `grad_norm` is the total norm **before**
# clipping (that is what a dashboard must show). Use the `loss_fn` you are given. It runs step after step in a training
# loop (section 4): leave autograd on when it returns, as you found it, or the next step cannot call `backward()`. `torch.nn.utils.clip_grad_norm_` exists; where it goes in the step is the point.

# %% nbgrader={"grade": false, "grade_id": "clipped_step", "locked": false, "schema_version": 3, "solution": true, "task": false}
def clipped_step(model, batch, loss_fn, optimizer, max_norm):
    """One training step with the total gradient norm clipped to max_norm; returns (loss, norm before clipping)."""
    ### BEGIN SOLUTION
    inputs, targets = batch
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.item(), norm.item()
    ### END SOLUTION


# %% [markdown]
# **3c.** `build_deep_net(inputs, hidden, outputs, depth)`: the vanishing net was
# `tc.mlp(inputs, hidden, outputs, depth=depth, activation=nn.Sigmoid)`. Build a network just as deep (at least `depth`
# hidden `nn.Linear` layers of width `hidden`, then an output layer) whose gradients reach its first layer. The check
# uses the net as your function returns it, in the mode it is in (it does not call `model.train()`): it measures the
# ratio of the first `nn.Linear`'s gradient norm to the last one's (it must be at least `1e-2`), then trains it with
# plain SGD (`lr=0.05`, 80 steps) and expects the loss to fall below half the constant-guess loss. It
# calls your function with other sizes too (`inputs`, `hidden`, `outputs`, `depth`): use the arguments.
# Any of the classic fixes works: ReLU with He initialisation (`nn.init.kaiming_normal_`), residual connections,
# or normalisation layers.

# %% nbgrader={"grade": false, "grade_id": "build_deep_net", "locked": false, "schema_version": 3, "solution": true, "task": false}
def build_deep_net(inputs, hidden, outputs, depth):
    """A `depth`-layer MLP whose gradients reach its first layer."""
    ### BEGIN SOLUTION
    model = tc.mlp(inputs=inputs, hidden=hidden, outputs=outputs, depth=depth, activation=nn.ReLU)
    for layer in model:
        if isinstance(layer, nn.Linear):
            nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
            nn.init.zeros_(layer.bias)
    return model
    ### END SOLUTION


# %% [markdown]
# ## 4 · Check
#
# Each cell below calls a check on your function with seeded inputs, using PyTorch's own total norm and `clip_grad_norm_`
# as the reference. It prints `✓ ...` when your code behaves, and otherwise raises `CheckFailed`
# saying what was expected, what happened and a hint. The grader runs more cases than you see here.

# %% nbgrader={"grade": true, "grade_id": "check_grad_norms", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""grad_norms agrees with PyTorch's total norm on many random models"""
from trainclinic.checks import exploding_vanishing as checks
checks.check_grad_norms(grad_norms)
### BEGIN HIDDEN TESTS
for seed in (1, 2):
    checks.check_grad_norms(grad_norms, seed=seed)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "check_clipped_step", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""clipped_step clips the total norm, keeps the direction and reports the norm before clipping"""
from trainclinic.checks import exploding_vanishing as checks
checks.check_clipped_step(clipped_step)
### BEGIN HIDDEN TESTS
for seed in (1, 2, 3):
    checks.check_clipped_step(clipped_step, seed=seed)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "check_build_deep_net", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""build_deep_net keeps the gradient alive down to the first layer, and trains"""
from trainclinic.checks import exploding_vanishing as checks
checks.check_build_deep_net(build_deep_net)
### BEGIN HIDDEN TESTS
for seed in (1, 2):
    checks.check_build_deep_net(build_deep_net, seed=seed)
### END HIDDEN TESTS

# %% [markdown]
# ## 5 · Explore
#
# First, your two fixes on the dashboard. The exploding net with your `clipped_step` (`max_norm=1`): the total-norm
# panel shows the norm **before** clipping against the dotted ceiling, the per-layer panel the gradients the optimizer
# actually used, measured with your `grad_norms`. Then your `build_deep_net` at depth 10 with plain SGD.

# %%
def train(lr=0.1, clip=True, max_norm=1.0, steps=40, dashboard=None):
    """Train the exploding net: with your clipped_step when `clip`, else plain SGD steps; returns the history."""
    model = exploding_net()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    history = {"step": [], "loss": [], "grad_norm": []}
    for step in range(steps):
        if clip:
            loss, norm = clipped_step(model, (x, y), loss_fn, optimizer, max_norm)
        else:                                             # the same step, without clipping
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            loss, norm = loss.item(), grad_norms(model)[0]
            optimizer.step()
        history["step"].append(step); history["loss"].append(loss); history["grad_norm"].append(norm)
        if dashboard is not None:
            dashboard.update(step, loss, total=norm, layers=grad_norms(model)[1])
        if not (math.isfinite(loss) and math.isfinite(norm)):
            break                                         # nan from here on: nothing more to see
    guess = math.log(3)                                   # the loss of a constant guess (3 balanced classes)
    history["failure"] = gradients.failure(history, guess, model, x)
    return history


with gradients.Dashboard("exploding net, clipped at max_norm=1", every=10, max_norm=1.0) as dash:
    history = train(dashboard=dash)
print(dash.summary())

torch.manual_seed(0)
deep_net = build_deep_net(8, 32, 3, depth=10).to(device)
watch(deep_net, lr=0.05, steps=80, title="your build_deep_net, plain SGD")

# %% [markdown]
# Now the controls: they rerun 40 steps of the exploding net and redraw the loss and the (pre-clip) gradient norm;
# a failed run is named in red under the plot. **Show the failure** switches clipping off: at `lr=0.1` the net explodes
# within six steps. Switch `clip` back on: with `max_norm=1` the same learning rate trains, and so does `lr=1`. Then
# raise `max_norm` to 100 or 1000: the ceiling now binds on only a few steps, the steps it lets through are huge, and
# at `lr=0.1` and `max_norm=1000` the net does not explode but dies: its loss stays at the constant guess and a whole
# ReLU layer outputs 0 for every sample. With clipping off, lower the learning rate until training survives (0.05
# does). Clipping bounds the size of each step; it does not repair the initialisation, and too low a ceiling makes
# training crawl.

# %%
tc.explore(train, title="clipping on/off, lr, max_norm", failure={"clip": False},
           lr=("log", 1e-3, 1.0, 0.1), clip=("bool", True), max_norm=("log", 0.1, 1000.0, 1.0));

# %% [markdown] nbgrader={"grade": false, "grade_id": "recap", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 6 · Troubleshooting
#
# | Symptom | Cause | Fix |
# |---|---|---|
# | loss `inf` then `nan` after a few steps; the gradient norm grows by large factors | exploding gradients: steps too large for the gradient feed on themselves (too high a learning rate; a large init and depth make each step more violent), or a long recurrence | clip the total norm (`clip_grad_norm_` after `backward`, before `step`); lower the learning rate; default or He init |
# | `The total norm ... is non-finite, so it cannot be clipped` | a gradient is already `inf`/`nan`, **or** every gradient is finite but the total norm is above about `1.8e19`, whose square overflows float32 (section 1); `torch.isfinite(p.grad).all()` tells which | either way the step is out of control and clipping cannot rescue it: find the first bad step on the dashboard; lower the learning rate or clip from the start; skip the step when the norm is not finite |
# | loss flat at the constant-guess value | vanishing gradients: saturating activations (sigmoid, tanh) stacked deep | ReLU/GELU with He init, residual connections, BatchNorm/LayerNorm |
# | first-layer gradient norm orders of magnitude below the last | vanishing gradients | same fixes; check with `gradients.table(gradients.profile(...))` |
# | loss stuck at the constant guess after a spike, a ReLU layer all zeros | a huge step (no clipping, or a ceiling too high) killed a ReLU layer: no signal forward, no gradient back | a lower learning rate or `max_norm`; He init |
# | clipping "does nothing" | clipped before `backward()` (no gradients yet) or after `step()` (too late), or given a used-up generator (`params = model.parameters()` iterated once already) | `backward()` -> `clip_grad_norm_(model.parameters(), ...)` -> `step()` |
# | logged gradient norm never above `max_norm` | you logged the norm after clipping | log the value `clip_grad_norm_` returns (the norm before clipping) |
# | clipping changes the update's direction | each parameter clipped on its own, or `clip_grad_value_` | one total norm for all parameters |
# | with AMP (`GradScaler`) the norms are huge | the gradients are still scaled | `scaler.unscale_(optimizer)` before clipping |
#
# **Recap.** Watch the gradient norm, total and per layer: it tells exploding (rising everywhere, then `nan`) from
# vanishing (first layers orders of magnitude below the last) long before the loss curve does. Clip the **total** norm,
# after `backward()` and before `step()`, and log the norm from before clipping. Keep deep nets trainable with ReLU and
# He initialisation, residual connections or normalisation.
