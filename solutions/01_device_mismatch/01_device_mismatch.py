# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false, "task": false}
# # Lesson 01 · Device mismatch
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/trainclinic/trainclinic/blob/main/notebooks/01_device_mismatch/01_device_mismatch.ipynb)
#
# **The failure:** a `RuntimeError` naming two devices. On a real GPU, torch ≥ 2.9 prints `Expected all tensors to be on the same device, but got mat1 is on cpu, different from other tensors on cuda:0 (when checking argument in method wrapper_CUDA_addmm)`
#
# **What you will learn**
# - to reproduce the error and read its message: *which* two devices, *which* argument;
# - why `.to()` moves a **model** in place but returns a **new tensor**;
# - where strays hide: a batch left behind, and tensors created inside the loop (class weights, masks, indices);
# - to find every stray with a tool, then write a device-correct training step.
#
# **Prerequisites:** a PyTorch training loop (`zero_grad`, `backward`, `step`). No GPU needed: without one, the
# GPU half of this lesson runs on a *simulated* `cuda:0` built from PyTorch's own `FakeTensorMode`, and says so.

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
# A tiny classifier, a data loader, and the classic mistake: the model goes to the GPU, the batch stays on the CPU.
# `tc.accelerator(device)` gives you the real GPU when there is one; on a CPU-only machine it gives a simulated `cuda:0`
# on which PyTorch runs its real device checks (shapes and devices are real, the numbers are not).

# %%
from torch import nn

tc.seed_everything(0)
train_set = tc.blobs(n=512, features=8, classes=3, seed=0)
train_loader = tc.loader(train_set, batch_size=32, seed=0)
loss_fn = nn.CrossEntropyLoss()
x, y = next(iter(train_loader))
print("batch:", tuple(x.shape), x.device, "| labels:", tuple(y.shape), y.device)

# %% tags=["raises-exception"]
with tc.accelerator(device) as gpu:
    model = gpu.model(tc.mlp(inputs=8, hidden=32, outputs=3))   # the model moves to the GPU...
    logits = model(x)                                           # ...but x is still on the CPU

# %% [markdown]
# ### How to read the message
#
# The error above is PyTorch's own, and its wording depends on where it runs. On a real GPU, the CUDA kernel checks
# its arguments' devices; here, without one, `FakeTensorMode` does (that is the simulation's wording, and it changed
# in torch 2.13). The same mistake, in each wording:
#
# | where | what PyTorch says |
# |---|---|
# | real GPU, torch ≥ 2.9 | `Expected all tensors to be on the same device, but got mat1 is on cpu, different from other tensors on cuda:0 (when checking argument in method wrapper_CUDA_addmm)` |
# | real GPU, torch ≤ 2.4 | `Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu! (when checking argument for argument mat1 in method wrapper_CUDA_addmm)` |
# | simulation, torch ≥ 2.13 | `Expected all tensors to be on the same device, but found at least two devices, cpu and cuda:0!` |
# | simulation, torch ≤ 2.12 | `Unhandled FakeTensor Device Propagation for aten.mm.default, found two different devices cpu, cuda:0` |
#
# - **Two devices are named**: `cuda:0`, where the model's weights live, and `cpu`, where the stray is. The
#   simulation names them in the order it met them; a real GPU says which one is the odd one out ("`mat1` is on
#   `cpu`, different from other tensors on `cuda:0`").
# - **Which argument** (a real GPU says it): `addmm` computes `bias + mat1 @ mat2`, the matrix multiply inside
#   `nn.Linear`. `mat1` is the layer's *input*, the batch; the weights are `mat2`. For the labels below a real GPU
#   names `target`, for the class weights `weight`. The simulation names the operation instead (`aten.mm.default`
#   is that same matrix multiply).
# - **Where**: the traceback's last line of **your** code is the operation that met the two tensors. The stray was
#   made earlier: find where that tensor came from.
#
# The same error with labels: the model and inputs are fine, the targets are not.
#

# %% tags=["raises-exception"]
with tc.accelerator(device) as gpu:
    model = gpu.model(tc.mlp(inputs=8, hidden=32, outputs=3))
    logits = model(gpu.tensor(x))            # inputs moved
    loss = loss_fn(logits, y)                # labels forgotten

# %% [markdown]
# ### Strays created inside the loop
#
# Moving the batch is not enough when the loop *creates* tensors: class weights for the loss, a mask, an index.
# `torch.tensor(...)`, `torch.ones(...)`, `torch.arange(...)` all default to the **CPU**.

# %% tags=["raises-exception"]
with tc.accelerator(device) as gpu:
    model = gpu.model(tc.mlp(inputs=8, hidden=32, outputs=3))
    xb, yb = gpu.tensor(x), gpu.tensor(y)
    class_weights = torch.tensor([1.0, 2.0, 0.5])   # created on the CPU, every step
    loss = nn.functional.cross_entropy(model(xb), yb, weight=class_weights)

# %% [markdown]
# ### `.to()` moves a module in place, but returns a new tensor
#
# `model.to(device)` changes the model's parameters in place and returns the same model, so forgetting the
# assignment is harmless, and an optimizer built before the move still holds the same parameters. `x.to(device)`
# leaves `x` where it was and returns a **new** tensor: without `x = x.to(device)` nothing moved. The same rule holds
# for dtypes, which we can show on any machine:
#

# %%
m = tc.mlp(inputs=8, hidden=32, outputs=3)
optimizer = torch.optim.SGD(m.parameters(), lr=0.1)
print("module: m.to(float64) is m ->", m.to(torch.float64) is m, "| weight dtype now", m[0].weight.dtype,
      "| the optimizer holds that same weight ->", optimizer.param_groups[0]["params"][0] is m[0].weight)
t = torch.zeros(3)
print("tensor: t.to(float64) is t ->", t.to(torch.float64) is t, "| t dtype still", t.dtype)

# %% [markdown]
# ### A checkpoint from a GPU machine
#
# `torch.save` records each tensor's device, and `torch.load` puts it back there. A checkpoint written on a GPU
# machine therefore asks for `cuda:0` when it is loaded; on a machine without CUDA that fails, and
# `map_location=device` is the fix. (The optimizer's own state needs nothing: `optimizer.load_state_dict` moves it
# to each parameter's device, so load it after `model.to(device)`.) `tc.device.gpu_checkpoint` writes a checkpoint
# as a GPU machine does:
#

# %%
import io
checkpoint = tc.device.gpu_checkpoint(tc.mlp(inputs=8, hidden=32, outputs=3).state_dict())  # bytes, tagged cuda:0
try:
    state = torch.load(io.BytesIO(checkpoint), weights_only=True)             # no map_location
    print("loaded without map_location, onto", state["0.weight"].device)      # a machine with CUDA
except Exception as err:                                                     # no CUDA here
    message = str(err)
    print(f"{type(err).__name__}: {message[message.find('Attempting'):].splitlines()[0]}")
state = torch.load(io.BytesIO(checkpoint), weights_only=True, map_location=device)
print("with map_location=device:", state["0.weight"].device)

# %% [markdown]
# ## 2 · Diagnose: list the strays
#
# `tc.strays(device, model, **tensors)` lists every parameter, buffer and named tensor that is **not** on the
# device you expect. Run it whenever the error appears: it names the culprits instead of making you guess. Here the
# model was moved and the labels too, but not the inputs:
#

# %%
with tc.accelerator(device) as gpu:
    model = gpu.model(tc.mlp(inputs=8, hidden=32, outputs=3))                  # moved: 6 tensors on the GPU
    tc.strays(gpu.device, model, x=x, y=gpu.tensor(y));                        # x was never moved


# %% [markdown]
# ## 3 · Fix it
#
# Write three small functions. Each is checked on this machine's device, on the CPU, and (without a GPU) on the
# simulated `cuda:0`, so a tensor left on the CPU is caught even here.
#
# **3a.** `to_device(batch, device)`: return the batch with **every tensor** moved to `device` (only its device
# changes: its dtype, its values and, for a tensor that requires grad, its autograd graph stay; no `.detach()`). A
# batch can be a tuple, a list or a dict; keep its type (a tuple stays a tuple, a list a list, a dict a dict), and
# leave non-tensor items (ids, strings, numbers, NumPy arrays) as they are: not converted, not deep-copied. The
# batch's own items are what counts: a list or dict inside it (of ids, say) is an item like any other, which a mover
# may leave as it is or, if it recurses, hand back rebuilt, holding the same items.

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
# **3b.** `class_weighted_loss(logits, targets, class_counts)`: cross-entropy where class `c` has the weight
# `n_total / (n_classes * class_counts[c])` (rare classes count more). `class_counts` is a Python list. The weight
# tensor must be created **on the logits' device, with their dtype**. Compute the weights before that conversion,
# as Python numbers (or in float64 on the CPU): with float16 logits (mixed precision) and a data set of more than
# 65504 samples, a total computed in float16 is `inf`. The loss must stay finite wherever the cross-entropy is: a
# confidently wrong row (its target's logit 120 below the largest) costs about 120, not `inf`, in float32 (in float16
# already at 20). Return the loss tensor.

# %% nbgrader={"grade": false, "grade_id": "class_weighted_loss", "locked": false, "schema_version": 3, "solution": true, "task": false}
def class_weighted_loss(logits, targets, class_counts):
    """Cross-entropy with balanced class weights, built on the logits' device."""
    ### BEGIN SOLUTION
    total = sum(class_counts)
    weights = torch.tensor([total / (len(class_counts) * c) for c in class_counts],
                           dtype=logits.dtype, device=logits.device)
    return nn.functional.cross_entropy(logits, targets, weight=weights)
    ### END SOLUTION


# %% [markdown]
# **3c.** `train_step(model, batch, loss_fn, optimizer, device)`: one training step. The model is already on
# `device`; the batch `(inputs, labels)` comes from the loader, on the CPU. Move it, zero the gradients, compute the
# loss, backpropagate, step with the `optimizer` you are given (its learning rate, momentum and state are the caller's
# choice), and return the loss as a Python float (`loss.item()`). Change nothing else of the caller's: the labels
# keep their dtype (the `loss_fn` may take class indices or float targets), frozen parameters stay frozen, the
# optimizer keeps its parameter groups and state, the model stays in training mode (its forward in the step too),
# and global settings (autograd, anomaly detection, the random seed, matmul precision, the default dtype and
# device) are as they were, the caller's values, which need not be PyTorch's defaults: autograd is on when
# `train_step` is called and must still be on when it returns.

# %% nbgrader={"grade": false, "grade_id": "train_step", "locked": false, "schema_version": 3, "solution": true, "task": false}
def train_step(model, batch, loss_fn, optimizer, device):
    """One training step on `device`; returns the loss as a float."""
    ### BEGIN SOLUTION
    inputs, labels = to_device(batch, device)
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), labels)
    loss.backward()
    optimizer.step()
    return loss.item()
    ### END SOLUTION


# %% [markdown]
# ## 4 · Check
#
# Each cell below calls a check on your function with seeded inputs. It prints `✓ ...` when your code behaves, and
# otherwise raises `CheckFailed` saying what was expected, what happened and a hint. The grader runs more cases
# (other seeds and sizes) than you see here.

# %% nbgrader={"grade": true, "grade_id": "check_to_device", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""to_device moves every tensor of a batch"""
from trainclinic.checks import device_mismatch as checks
checks.check_to_device(to_device)
### BEGIN HIDDEN TESTS
checks.check_to_device(to_device, seed=1)
checks.check_to_device(to_device, seed=2)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "check_class_weighted_loss", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""class_weighted_loss builds its weights on the logits' device"""
from trainclinic.checks import device_mismatch as checks
checks.check_class_weighted_loss(class_weighted_loss)
### BEGIN HIDDEN TESTS
checks.check_class_weighted_loss(class_weighted_loss, seed=1)
checks.check_class_weighted_loss(class_weighted_loss, seed=4)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "check_train_step", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""train_step moves the batch and takes one correct step"""
from trainclinic.checks import device_mismatch as checks
checks.check_train_step(train_step)
### BEGIN HIDDEN TESTS
checks.check_train_step(train_step, seed=2)
checks.check_train_step(train_step, seed=3)
### END HIDDEN TESTS

# %% [markdown]
# ## 5 · Explore: put the strays back
#
# Your `train_step` and `class_weighted_loss` on the real device, with `tc.LivePlot` drawing the loss and the
# gradient norm as it trains. Then the explorer: the learning rate and batch size rerun a short training, and the two
# switches put a stray back (the batch left on the CPU, or class weights created on the CPU). With a stray, the
# step runs on the GPU (simulated here) and you see the strays list, then PyTorch's own error under the sliders.
#

# %%
def train(lr=0.1, batch_size=32, epochs=3, plot=None):
    tc.seed_everything(0)
    model = tc.mlp(inputs=8, hidden=32, outputs=3).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    counts = torch.bincount(train_set.tensors[1], minlength=3).tolist()
    loss_fn = lambda logits, labels: class_weighted_loss(logits, labels, counts)
    history = {"step": [], "loss": [], "grad_norm": []}
    step = 0
    for epoch in range(epochs):
        for batch in tc.loader(train_set, batch_size=batch_size, seed=epoch):
            loss = train_step(model, batch, loss_fn, optimizer, device)
            gn = tc.grad_norm(model)
            history["step"].append(step); history["loss"].append(loss); history["grad_norm"].append(gn)
            if plot is not None:
                plot.update(step, loss, gn)
            step += 1
    return history

with tc.LivePlot("lesson 01: device-correct training", every=8) as plot:
    history = train(plot=plot)
print(plot.summary())


# %%
def step_with_strays(batch_size=32, batch_on_cpu=False, weights_on_cpu=False):
    """One step on the GPU with the chosen strays put back: list them, then let PyTorch raise."""
    with tc.accelerator(device) as gpu:
        model = gpu.model(tc.mlp(inputs=8, hidden=32, outputs=3))
        x, y = next(iter(tc.loader(train_set, batch_size=batch_size, seed=0)))
        if not batch_on_cpu:
            x, y = to_device((x, y), gpu.device)
        weights = torch.tensor([1.0, 2.0, 0.5], device="cpu" if weights_on_cpu else gpu.device)
        tc.strays(gpu.device, model, x=x, y=y, class_weights=weights)
        return nn.functional.cross_entropy(model(x), y, weight=weights)

def run(lr=0.1, batch_size=32, batch_on_cpu=False, weights_on_cpu=False):
    if batch_on_cpu or weights_on_cpu:
        step_with_strays(batch_size, batch_on_cpu, weights_on_cpu)
    return train(lr=lr, batch_size=batch_size, epochs=1)

tc.explore(run, title="lesson 01", failure={"batch_on_cpu": True}, lr=("log", 1e-3, 3.0, 0.1),
           batch_size=("int", 4, 128, 32), batch_on_cpu=("bool", False), weights_on_cpu=("bool", False));

# %% [markdown] nbgrader={"grade": false, "grade_id": "recap", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 6 · Troubleshooting
#
# | Symptom | Cause | Fix |
# |---|---|---|
# | the device error in the model's forward (a real GPU names `mat1`) | the batch was not moved | `x = x.to(device)` (assign it!) |
# | the same error in the loss (a real GPU names `target` or `weight`) | labels not moved, or a tensor made in the loop (class weights, a mask) on the CPU | move the labels; create new tensors with `device=logits.device, dtype=logits.dtype` |
# | `x.to(device)` "did nothing" | tensors are not moved in place | `x = x.to(device)` |
# | torch says it has no CUDA, or finds no NVIDIA driver | `.cuda()` or `device="cuda"` hard-coded on a machine without a GPU | `device = tc.pick_device()`, then `.to(device)` |
# | `torch.load` says `Attempting to deserialize object on a CUDA device` | a checkpoint saved on a GPU, loaded where CUDA is unavailable | `torch.load(path, map_location=device)` |
# | resuming training: the optimizer's state on another device | `optimizer.load_state_dict` moved it to the parameters' device *at load time*, before `model.to(device)` | `model.to(device)` first, then build the optimizer and load its state |
# | the same error naming `mps:0` on a Mac | the same stray, another accelerator | the same fix |
#
# **Recap.** Move the model once, before the loop. Move every batch (inputs and labels) inside the loop, and
# create every new tensor on an existing tensor's device, with its dtype. Read the message for its two devices
# (and, on a GPU, the argument); when you cannot see the stray, `tc.strays` names it.
#
