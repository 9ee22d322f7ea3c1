# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false, "task": false}
# # Lesson 10 · Autograd errors
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/trainclinic/trainclinic/blob/main/notebooks/10_autograd_errors/10_autograd_errors.ipynb)
#
# **The failure:** `loss.backward()` refuses, with one of autograd's own messages:
# `RuntimeError: Trying to backward through the graph a second time (or directly access saved tensors after they have already been freed)`,
# `one of the variables needed for gradient computation has been modified by an inplace operation`,
# `element 0 of tensors does not require grad and does not have a grad_fn`,
# `a leaf Variable that requires grad is being used in an in-place operation`. Or it does not refuse, and the
# bug is silent: a validation loop that holds every batch's graph, gradients that double because nobody zeroed them.
#
# **What you will learn**
# - what autograd records in the forward pass (a graph of operations, and the tensors each one saves for backward),
#   and when it frees it: that is what each message is about;
# - to reproduce each error from a realistic loop: an RNN's hidden state carried across batches, a GAN reusing the
#   generator's output, `ReLU(inplace=True)` after a sigmoid, a loss rebuilt from `.item()`, a hand-written SGD update;
# - to find the guilty forward line with `torch.autograd.detect_anomaly`, and a growing graph with `graphs.graph_size`;
# - to fix a training loop (truncated backpropagation through time with a hand-written SGD step) and its validation
#   loop, checked automatically.
#
# **Prerequisites:** a PyTorch training loop (`zero_grad`, `backward`, `step`), and what an RNN's hidden state is.
# Everything runs on the CPU: no GPU needed (on a GPU it runs there; the messages are the same).

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
# The task: predict the next value of 8 noisy sine waves. The sequences are long, so they come in consecutive chunks
# of 16 time steps (`graphs.sine_batches`): chunk 2 continues chunk 1. The model (`graphs.Forecaster`) is a small
# `nn.RNN` and a linear head; `model(x, h)` returns the predictions and the hidden state after the chunk. To remember
# across chunks, the hidden state is **carried**: the last chunk's `h` goes into the next call. That is truncated
# backpropagation through time, and here is the loop as it is often first written, with a hand-written SGD step:

# %%
import math
import time
import warnings
from torch import nn
from torch.nn import functional as F
from trainclinic import graphs

torch.set_num_threads(1)  # tiny models: one CPU thread is the fastest
batches = [(x.to(device), y.to(device)) for x, y in graphs.sine_batches(n_batches=12, batch_size=8, length=16, seed=0)]
print(len(batches), "chunks; x and y:", tuple(batches[0][0].shape), "(sequences, time steps, features)")


def train_as_found(model, batches, lr):
    losses, h = [], None
    for x, y in batches:
        pred, h = model(x, h)              # h comes from the previous chunk... with its graph
        loss = F.mse_loss(pred, y)
        loss.backward()
        for p in model.parameters():
            p.data -= lr * p.grad          # (the hand-written step: more on it below)
        losses.append(loss.item())
    return losses


# %% tags=["raises-exception"]
model = graphs.forecaster(hidden=16, seed=0).to(device)
train_as_found(model, batches, lr=0.1)

# %% [markdown]
# ### How to read the message
#
# - **`Trying to backward through the graph a second time`**: the forward pass records a graph of operations, and
#   each operation saves the tensors its backward needs (a `tanh` saves its output, a matrix product its inputs).
#   `backward()` walks the graph and then **frees** those saved tensors, to give the memory back.
# - Which graph, the second time? The first chunk's. `h` came out of chunk 1's forward pass, so chunk 2's loss
#   depends on chunk 1's operations too, and the second `backward()` walks into chunk 1's graph, already freed.
# - **`Specify retain_graph=True`**: the message's suggestion, and nearly always the wrong fix here. The graph is then
#   kept, and every backward goes through **every** earlier chunk: slower at each step, memory growing without end
#   (section 2 measures it). What you want is to cut the graph: `h = h.detach()` before the next chunk. The value is
#   carried; the history is not.
#
# Here is `retain_graph=True` in the loop, with the hand-written update written under `torch.no_grad()`:

# %% tags=["raises-exception"]
def train_retain_graph(model, batches, lr):
    h = None
    for x, y in batches:
        pred, h = model(x, h)
        loss = F.mse_loss(pred, y)
        loss.backward(retain_graph=True)   # the message's suggestion
        with torch.no_grad():
            for p in model.parameters():
                p -= lr * p.grad

train_retain_graph(graphs.forecaster(hidden=16, seed=0).to(device), batches, lr=0.1)

# %% [markdown]
# Another message, `is at version 2; expected version 1 instead` (read it in the next section): chunk 1's kept graph
# saved the RNN's `[16, 16]` weight matrix `weight_hh_l0` to compute gradients through it, the update changed that
# weight in place, and chunk 2's backward, walking back into chunk 1, finds it changed. Where nothing is changed
# in place, `retain_graph=True` runs, and the graph grows with every chunk (section 2 measures it).
#
# The same first message, from a GAN that reuses the generator's output `fake` for the discriminator's loss and then for
# the generator's:

# %% tags=["raises-exception"]
tc.seed_everything(0)
G, D = nn.Linear(4, 8), nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
real, noise = torch.randn(32, 8), torch.randn(32, 4)
bce = nn.BCEWithLogitsLoss()
fake = G(noise)
d_loss = bce(D(real), torch.ones(32, 1)) + bce(D(fake), torch.zeros(32, 1))
d_loss.backward()                                  # frees the graph through G as well
g_loss = bce(D(fake), torch.ones(32, 1))           # a new pass through D, but fake's graph (through G) is gone
g_loss.backward()

# %% [markdown]
# The fix: the discriminator's loss must not reach into G at all, `D(fake.detach())`; then the generator's
# `backward()` is the first through G's graph. (It also stops D's step from filling G's gradients.)
#
# ### An in-place change to a tensor backward needs
#
# A head that squashes with a sigmoid, then "cleans up" with `nn.ReLU(inplace=True)` (a no-op on values in (0, 1),
# added to save memory):

# %% tags=["raises-exception"]
tc.seed_everything(0)
head = nn.Sequential(nn.Linear(16, 8), nn.Sigmoid(), nn.ReLU(inplace=True), nn.Linear(8, 1))
features = torch.randn(4, 16)
head(features).sum().backward()

# %% [markdown]
# - **`one of the variables needed for gradient computation has been modified by an inplace operation`**: sigmoid's
#   backward is `grad × s × (1 − s)` with `s` its **output**, so autograd saved that output. `ReLU(inplace=True)`
#   then wrote into the same memory.
# - **`[torch.FloatTensor [4, 8]], which is output 0 of Sigmoid`**: the tensor: its type and shape, and which
#   operation made it (torch 2.13 names the forward op, `Sigmoid`; earlier versions its backward node, `SigmoidBackward0`).
# - **`is at version 1; expected version 0 instead`**: every tensor counts its in-place changes. Autograd wrote down
#   version 0 when it saved it; at backward it found 1, so the saved values are no longer the ones the forward used.
#   Nothing is computed from wrong values: it refuses.
# - **`Hint: enable anomaly detection`**: the message names the tensor, not the line. Anomaly detection does (section 2).
#
# The same with plain tensors: `h += 1` on a sigmoid's output (`h = h + 1` makes a new tensor and is fine):

# %% tags=["raises-exception"]
tc.seed_everything(0)
layer = nn.Linear(16, 8)
h = torch.sigmoid(layer(features))
h += 1
h.sum().backward()

# %% [markdown]
# ### A loss with no graph at all
#
# `element 0 of tensors does not require grad and does not have a grad_fn`: the loss is not connected to any
# parameter, so there is nothing to differentiate. Four ways to get there, each common:

# %%
def no_graph_cases():
    tc.seed_everything(0)
    model = graphs.forecaster(hidden=16, seed=0)
    x, y = graphs.sine_batches(n_batches=1)[0]

    def under_no_grad():          # the loss computed in a block meant for evaluation
        with torch.no_grad():
            return F.mse_loss(model(x)[0], y)

    def detached_prediction():    # .detach() "to be safe" (or .numpy() and back)
        return F.mse_loss(model(x)[0].detach(), y)

    def frozen_parameters():      # every parameter frozen (a fine-tuning freeze that froze the head too)
        frozen = graphs.forecaster(hidden=16, seed=0).requires_grad_(False)
        return F.mse_loss(frozen(x)[0], y)

    def rebuilt_from_item():      # a "loss" assembled from Python floats
        return torch.tensor(F.mse_loss(model(x)[0], y).item())

    for case in (under_no_grad, detached_prediction, frozen_parameters, rebuilt_from_item):
        loss = case()
        try:
            loss.backward()
        except RuntimeError as err:
            print(f"{case.__name__:20} loss.requires_grad={loss.requires_grad!s:5}  grad_fn={loss.grad_fn}  ->  RuntimeError: {err}")

no_graph_cases()

# %% [markdown]
# `loss.grad_fn` is `None` in every case: that is the test to print when you meet this message. Then walk back to
# where the chain broke: a `no_grad` block, a `.detach()`, `.item()` / `.numpy()` / `torch.tensor(...)`, or
# parameters with `requires_grad=False` (print `[n for n, p in model.named_parameters() if p.requires_grad]`).
#
# ### The hand-written SGD step
#
# Parameters are **leaves**: tensors you created (`requires_grad=True`), not results of operations. Autograd
# accumulates into their `.grad`. Written the obvious way, the update is refused:

# %% tags=["raises-exception"]
tc.seed_everything(0)
w = torch.randn(8, 1, requires_grad=True)
x, y = torch.randn(32, 8), torch.randn(32, 1)
F.mse_loss(x @ w, y).backward()
w -= 0.1 * w.grad

# %% [markdown]
# **`a leaf Variable that requires grad is being used in an in-place operation`**: outside `torch.no_grad()`, an
# in-place change of a leaf would have to be recorded in a graph that the leaf itself starts. Write the update under
# `with torch.no_grad():`, which is what `torch.optim.SGD` does. Changing part of it is the same error, from a view:

# %% tags=["raises-exception"]
w[:2].zero_()

# %% [markdown]
# And the "fix" that runs, once: `w = w - lr * w.grad` is not an update, it makes a **new** tensor, the result of
# an operation (a non-leaf), and names it `w`. The next `backward()` fills the gradient of the old leaf, not of the
# new `w`, whose `.grad` stays `None`:

# %% tags=["raises-exception"]
tc.seed_everything(0)
w = torch.randn(8, 1, requires_grad=True)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        for step in range(2):
            F.mse_loss(x @ w, y).backward()
            print(f"step {step}: w.is_leaf={w.is_leaf}, w.grad is None: {w.grad is None}")
            w = w - 0.1 * w.grad
    finally:
        for warning in caught:
            print("UserWarning:", str(warning.message)[:130], "...")

# %% [markdown]
# `The .grad attribute of a Tensor that is not a leaf Tensor is being accessed`, then
# `unsupported operand type(s) for *: 'float' and 'NoneType'`: the leaf was lost at step 0. Inside a model it is
# subtler still: `for p in model.parameters(): p = p - lr * p.grad` raises nothing and trains nothing (the loop
# variable is rebound, the parameter untouched).
#
# ### The silent ones
#
# **A validation loop without `torch.no_grad()`** that adds up the loss **tensors**: each `loss` holds its batch's
# graph, and `total += loss` chains them all together, so nothing is freed until `total` is. `tc.memory.measure`
# counts the bytes the block leaves allocated (on a CPU, the live tensors it created; on a GPU, CUDA's own counter),
# and `graphs.graph_size` counts the autograd nodes behind `total`:

# %%
val_batches = [(x.to(device), y.to(device)) for x, y in graphs.sine_batches(n_batches=12, batch_size=32, length=32, seed=1)]

def validate_as_found(model, batches, accumulate="tensor", no_grad=False):
    total, h = 0.0, None
    with torch.set_grad_enabled(not no_grad):
        for x, y in batches:
            pred, h = model(x, h)
            loss = F.mse_loss(pred, y)
            total += loss if accumulate == "tensor" else loss.item()
    return total / len(batches)

model = graphs.forecaster(hidden=16, seed=0).to(device)
for name, kwargs in [("total += loss", {}), ("total += loss.item()", {"accumulate": "item"}),
                     ("under torch.no_grad()", {"accumulate": "item", "no_grad": True})]:
    with tc.memory.measure(device) as m:
        result = validate_as_found(model, val_batches, **kwargs)
        nodes = graphs.graph_size(result)
        held = m.allocated
    print(f"{name:22} still held after the loop: {tc.memory.fmt(held):>10} | graph nodes behind the result: {nodes}")
    del result

# %% [markdown]
# With `total += loss`, the memory of all 12 batches' graphs stays held by one number; on a real validation set it
# is an out-of-memory error that appears "only during validation". `.item()` frees each graph at the next batch, and
# `torch.no_grad()` never builds one (less time, less memory).
#
# **A forgotten `zero_grad()`**: `backward()` **adds** into `.grad`. Two backward passes over the same batch without
# zeroing in between, and the gradient is exactly twice what it should be:

# %%
model = graphs.forecaster(hidden=16, seed=0).to(device)
x, y = batches[0]
F.mse_loss(model(x)[0], y).backward()
once = tc.grad_norm(model)
F.mse_loss(model(x)[0], y).backward()      # no zero_grad in between
print(f"gradient norm after one backward: {once:.4f}; after a second one: {tc.grad_norm(model):.4f} "
      f"(x{tc.grad_norm(model) / once:.3f})")

# %% [markdown]
# In a loop the stale gradients of every earlier step pile up: a momentum nobody asked for, and steps that grow
# (section 2 plots it).
#
# ## 2 · Diagnose
#
# **Which line? `torch.autograd.detect_anomaly()`.** In anomaly mode, autograd records the traceback of every
# forward operation, and when a backward node fails it warns `Error detected in SigmoidBackward0. Traceback of forward call that caused the error`,
# pointing at the line that made the tensor. It is slow (a traceback per operation): one step, to debug, never a
# whole run. The warnings are caught here and the forward traceback printed without PyTorch's own frames:

# %%
def forward_line(fn):
    """Run fn() under anomaly detection; print the error and the forward traceback (learner frames only)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with torch.autograd.detect_anomaly(check_nan=False):
                fn()
        except RuntimeError as err:
            print("RuntimeError:", str(err)[:100], "...", str(err)[-120:])
    for warning in caught:
        text = str(warning.message)
        if text.startswith("Error detected in"):
            lines = text.splitlines()
            print(lines[0])
            for i, line in enumerate(lines):  # the notebook's own frames: its cells' files
                if line.strip().startswith("File") and any(k in line for k in ("ipykernel_", "<ipython-input", "<cell")):
                    source = lines[i + 1].strip() if i + 1 < len(lines) and not lines[i + 1].strip().startswith("File") else ""
                    print("   ", line.strip(), ("\n        " + source) if source else "")

def sigmoid_then_inplace_relu():
    out = head(features)                         # the Sigmoid and the ReLU(inplace=True) run here
    out.sum().backward()

forward_line(sigmoid_then_inplace_relu)

# %% [markdown]
# It names `SigmoidBackward0` (the node whose saved tensor changed) and the forward line that ran the sigmoid; the
# culprit is "in there or anywhere later": here the `ReLU(inplace=True)` right after it. Replace it with
# `nn.ReLU()` (or remove it).
#
# **A graph that grows: `graphs.graph_size(t)`** counts the autograd nodes behind a tensor. With the hidden state
# carried and `retain_graph=True` (the message's suggestion), the graph behind `h` gains a chunk's worth of nodes
# per batch, and each backward walks all of it; with `h.detach()`, it stays one chunk deep. The plot is the same
# training with the `zero_grad()` forgotten: the gradient norm climbs as stale gradients pile up.

# %%
def carried_graph(detach, n=8):
    model = graphs.forecaster(hidden=16, seed=0).to(device)
    h, sizes, start = None, [], time.perf_counter()
    for x, y in batches[:n]:
        if detach and h is not None:
            h = h.detach()
        pred, h = model(x, h)
        model.zero_grad()
        F.mse_loss(pred, y).backward(retain_graph=not detach)
        sizes.append(graphs.graph_size(h))
    return sizes, time.perf_counter() - start

for detach in (False, True):
    sizes, seconds = carried_graph(detach)
    print(f"{'h.detach()' if detach else 'retain_graph=True':18} graph nodes behind h, batch by batch: {sizes} ({seconds:.2f} s)")

def run_no_zero_grad(lr=0.1, plot=None):
    model = graphs.forecaster(hidden=16, seed=0).to(device)
    h = None
    for step, (x, y) in enumerate(batches * 2):
        if h is not None:
            h = h.detach()
        pred, h = model(x, h)
        loss = F.mse_loss(pred, y)
        loss.backward()                          # no zero_grad: .grad keeps every earlier step's gradient
        with torch.no_grad():
            for p in model.parameters():
                p -= lr * p.grad
        plot.update(step, loss.item(), tc.grad_norm(model))

with tc.LivePlot("no zero_grad(): stale gradients pile up", every=4) as plot:
    run_no_zero_grad(plot=plot)
print(plot.summary())

# %% [markdown] nbgrader={"grade": false, "grade_id": "fix_md", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 3 · Fix it
#
# Three functions, each checked on its own (the checks call them on their own models and data, float32 and float64,
# on the present device and on the CPU).
#
# **3a.** `sgd_update(params, lr)`: the hand-written SGD step. For every tensor in `params` (an iterable, e.g.
# `model.parameters()`, or a list of leaf tensors) whose `.grad` is not `None`, subtract `lr * p.grad` from `p`
# **in place**, in `p`'s own memory (anything sharing it, such as a view of `p`, sees the new values), so that each
# parameter stays the same leaf tensor (same object, `is_leaf`, `requires_grad`), whatever the grad mode it is called
# in; and leave the grad mode as it found it. Skip tensors whose `.grad` is `None`, and update the ones after them.
# (What happens to `.grad` after the update is up to you: `train` zeroes the gradients at each step.)

# %% nbgrader={"grade": false, "grade_id": "sgd_update", "locked": false, "schema_version": 3, "solution": true, "task": false}
def sgd_update(params, lr):
    """p <- p - lr * p.grad, in place, for every p with a gradient: each p stays the same leaf tensor."""
    ### BEGIN SOLUTION
    with torch.no_grad():
        for p in params:
            if p.grad is not None:
                p -= lr * p.grad
    ### END SOLUTION


# %% [markdown]
# **3b.** `train(model, batches, lr)`: one training step per chunk of `batches` (a list of `(x, y)`), in order, with
# the hidden state carried from chunk to chunk as above (the first chunk gets `h=None`) and **detached** before it goes
# into the next chunk. Each step, in this order: zero the gradients (`model.zero_grad()`: the model may arrive with
# gradients from an earlier `backward()`), `pred, h = model(x, h)`, `loss = F.mse_loss(pred, y)`, `loss.backward()`,
# then `sgd_update(model.parameters(), lr)`. Each call of `train` starts from `h=None` (a second epoch is a second
# call, on the same model). Return the list of the chunks' losses as Python floats. No optimizer, no `retain_graph`.

# %% nbgrader={"grade": false, "grade_id": "train", "locked": false, "schema_version": 3, "solution": true, "task": false}
def train(model, batches, lr):
    """Truncated BPTT with a hand-written SGD step: one step per chunk, hidden state carried and detached."""
    ### BEGIN SOLUTION
    losses, h = [], None
    for x, y in batches:
        model.zero_grad()
        if h is not None:
            h = h.detach()
        pred, h = model(x, h)
        loss = F.mse_loss(pred, y)
        loss.backward()
        sgd_update(model.parameters(), lr)
        losses.append(loss.item())
    return losses
    ### END SOLUTION


# %% [markdown]
# **3c.** `validate(model, batches)`: the mean of the chunks' `F.mse_loss`, as a Python float, with the hidden state
# carried from chunk to chunk as in `train`. It must build **no** autograd graph (run the model under
# `torch.no_grad()`), leave the grad mode as it found it, and hold no graph after it returns.

# %% nbgrader={"grade": false, "grade_id": "validate", "locked": false, "schema_version": 3, "solution": true, "task": false}
def validate(model, batches):
    """Mean MSE over the chunks (hidden state carried), as a float, without building a graph."""
    ### BEGIN SOLUTION
    total, h = 0.0, None
    with torch.no_grad():
        for x, y in batches:
            pred, h = model(x, h)
            total += F.mse_loss(pred, y).item()
    return total / len(batches)
    ### END SOLUTION


# %% [markdown]
# Your loop, on the lesson's data (two passes over the chunks), with the validation loss before and after:

# %%
model = graphs.forecaster(hidden=16, seed=0).to(device)
print(f"validation loss before: {validate(model, val_batches):.4f}")
with tc.LivePlot("train: truncated BPTT, hand-written SGD", every=6) as plot:
    step = 0
    for epoch in range(2):
        for loss in train(model, batches, lr=0.1):
            plot.update(step, loss)
            step += 1
print(plot.summary())
print(f"validation loss after:  {validate(model, val_batches):.4f}")

# %% [markdown] nbgrader={"grade": false, "grade_id": "check_md", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 4 · Check
#
# Each cell below calls a check on your function with seeded inputs. It prints `✓ ...` when your code behaves, and
# otherwise raises `CheckFailed` saying what was expected, what happened and a hint. The grader runs more cases
# (other seeds, sizes and dtypes) than you see here. The checks of `train` run it with the reference `sgd_update`
# in place of yours, so that each cell is graded on its own.

# %% nbgrader={"grade": true, "grade_id": "check_sgd_update", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""sgd_update updates in place: the parameters stay the same leaves, with the right values"""
from trainclinic.checks import autograd_errors as checks
checks.check_sgd_update(sgd_update)
### BEGIN HIDDEN TESTS
checks.check_sgd_update(sgd_update, seed=1)
checks.check_sgd_update(sgd_update, seed=2)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "check_train", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""train runs one step per chunk without an exception, and returns the losses as floats, falling"""
from trainclinic.checks import autograd_errors as checks
checks.check_train(train)
### BEGIN HIDDEN TESTS
checks.check_train(train, seed=1)
checks.check_train(train, seed=2)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "check_hidden_detached", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""train starts each call from h=None and carries the hidden state to the next chunk, detached"""
from trainclinic.checks import autograd_errors as checks
checks.check_hidden_detached(train)
### BEGIN HIDDEN TESTS
checks.check_hidden_detached(train, seed=1)
checks.check_hidden_detached(train, seed=2)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "check_train_gradients", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""each step of train moves the weights by lr times that chunk's own gradient (the reference's)"""
from trainclinic.checks import autograd_errors as checks
checks.check_train_gradients(train)
### BEGIN HIDDEN TESTS
checks.check_train_gradients(train, seed=1)
checks.check_train_gradients(train, seed=2)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "check_validate", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""validate returns the mean loss as a float, builds no graph and holds none"""
from trainclinic.checks import autograd_errors as checks
checks.check_validate(validate)
### BEGIN HIDDEN TESTS
checks.check_validate(validate, seed=1)
checks.check_validate(validate, seed=2)
### END HIDDEN TESTS

# %% [markdown]
# ## 5 · Explore
#
# The training loop with its bugs behind switches: `detach` (off: the hidden state keeps its graph), `zero_grad`
# (off: gradients pile up), and the learning rate. **Show the failure** turns `detach` off: PyTorch's error shows
# under the switches. Then turn `zero_grad` off at a rate of 0.3 or more and watch the gradient norm.

# %%
def run(lr=0.1, detach=True, zero_grad=True):
    """Two passes of truncated BPTT over the chunks with the hand-written SGD step; the bugs behind switches."""
    model = graphs.forecaster(hidden=16, seed=0).to(device)
    history = {"step": [], "loss": [], "grad_norm": []}
    h = None
    for step, (x, y) in enumerate(batches * 2):
        if zero_grad:
            model.zero_grad()
        if detach and h is not None:
            h = h.detach()
        pred, h = model(x, h)
        loss = F.mse_loss(pred, y)
        loss.backward()                  # without detach: the second chunk raises PyTorch's error here
        with torch.no_grad():            # the hand-written SGD step (what your sgd_update does)
            for p in model.parameters():
                p -= lr * p.grad
        history["step"].append(step)
        history["loss"].append(loss.item())
        history["grad_norm"].append(tc.grad_norm(model))
        if not math.isfinite(loss.item()):
            history["failure"] = f"loss {loss.item()} at step {step}: lr={lr:g} is too high"
            break
    return history


tc.explore(run, title="truncated BPTT", failure={"detach": False},
           lr=("log", 0.01, 1.0, 0.1), detach=("bool", True), zero_grad=("bool", True));

# %% [markdown] nbgrader={"grade": false, "grade_id": "recap", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 6 · Troubleshooting
#
# | Symptom | Cause | Fix |
# |---|---|---|
# | `Trying to backward through the graph a second time` at the second batch | an RNN hidden state (or any tensor) carried from the previous batch with its graph | `h = h.detach()` before the next batch; not `retain_graph=True` |
# | `is at version 2; expected version 1 instead` at the second batch, after adding `retain_graph=True` | the kept graph saved the weights, and the update changed them in place | `h = h.detach()`, no `retain_graph` |
# | the same message in a GAN | the discriminator's loss used `fake` with its graph, then the generator's backward reused it | `D(fake.detach())` for the discriminator's loss |
# | `modified by an inplace operation`, `output 0 of Sigmoid` | `ReLU(inplace=True)` or `h += 1` on a tensor a backward saved | the out-of-place op (`nn.ReLU()`, `h = h + 1`); `detect_anomaly` names the forward line |
# | `element 0 of tensors does not require grad` | the loss computed under `no_grad`, from a `.detach()`ed prediction, from `.item()`, or with every parameter frozen | print `loss.grad_fn` and walk back to where the chain broke |
# | `a leaf Variable that requires grad is being used in an in-place operation` | a hand-written update `w -= lr * w.grad` outside `no_grad` | `with torch.no_grad(): w -= lr * w.grad` |
# | `unsupported operand type(s) for *: 'float' and 'NoneType'` at step 1, after a warning about a non-leaf `.grad` | `w = w - lr * w.grad` made `w` a non-leaf | update in place under `no_grad` |
# | training does nothing, no error | `for p in model.parameters(): p = p - lr * p.grad` rebinds the loop variable | update in place under `no_grad` |
# | memory grows during validation only | `total += loss` without `no_grad`: every batch's graph stays held | `torch.no_grad()` and `loss.item()` |
# | gradient norm climbs, loss jumps | no `zero_grad()`: `.grad` accumulates every step | `model.zero_grad()` (or `optimizer.zero_grad()`) each step |
#
# **Recap.** Autograd records a graph in the forward pass, saves what backward needs, and frees it at `backward()`.
# Each message says which rule broke: a graph walked twice (carry values with `.detach()`, not graphs), a saved
# tensor changed in place (out-of-place ops; `detect_anomaly` finds the line), a loss with no graph (`loss.grad_fn`
# is `None`), a leaf changed in place outside `no_grad`. The silent ones: validate under `torch.no_grad()` with
# `.item()`, and zero the gradients every step.
