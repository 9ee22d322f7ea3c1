# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false, "task": false}
# # Lesson 03 · CUDA out of memory
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/trainclinic/trainclinic/blob/main/notebooks/03_out_of_memory/03_out_of_memory.ipynb)
#
# **The failure**, as a real GPU prints it (here a full 15 GB card, nothing capped):
#
# ```
# torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 MiB. GPU 0 has a total capacity of 14.74 GiB of which
# 3.12 MiB is free. Including non-PyTorch memory, this process has 14.73 GiB memory in use. Of the allocated memory 14.52 GiB
# is allocated by PyTorch, and 87.41 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large ...
# ```
#
# **What you will learn**
# - to reproduce the error on purpose and read its message: *tried to allocate*, *capacity*, *free*, *allocated* vs *reserved*;
# - to **measure** a training step's peak memory, and see it grow with the batch size;
# - to fit a big batch into a small GPU with **gradient accumulation**, without changing the gradients;
# - to recognise the slow leak (`total_loss += loss`) and the other levers: mixed precision, activation checkpointing.
#
# **Prerequisites:** a PyTorch training loop (`zero_grad`, `backward`, `step`); lesson 01 helps. No GPU needed: on a GPU the
# lesson caps its own memory to a small budget (and lifts the cap afterwards); without one, a *simulated* budget counts the
# bytes of every live tensor and raises the same exception type, worded like CUDA's, marked SIMULATED.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Setup. In Colab this installs trainclinic once, with --no-deps: Colab's own torch is never touched.
import importlib.util, subprocess, sys
if importlib.util.find_spec("trainclinic") is None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "git+https://github.com/trainclinic/trainclinic@main"], check=True)
import torch
import trainclinic as tc
from trainclinic import memory
device = tc.pick_device()
tc.banner(device);

# %% [markdown] nbgrader={"grade": false, "grade_id": "reproduce_md", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 1 · Reproduce the failure
#
# A 4-layer MLP and one big batch. "Your GPU" is a **budget**: on a real GPU, `memory.limit(device, budget)` caps this
# process with `torch.cuda.set_per_process_memory_fraction` at what it holds now plus `budget`, so the error is CUDA's own on
# any GPU, and never touches memory that other people share; the cap is lifted and the cache emptied when the cell ends,
# even when it fails. Without a GPU, the same call gives a simulated budget (see the printed note).

# %%
from torch import nn

cuda = device.type == "cuda"
WIDTH, BATCH = (2048, 8192) if cuda else (128, 1024)      # a real GPU gets a workload worth measuring
BUDGET = (256 if cuda else 2) * 2**20                      # bytes the step may use on top of what is held now

tc.seed_everything(0)
model = tc.mlp(inputs=WIDTH // 2, hidden=WIDTH, outputs=10, depth=4).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
loss_fn = nn.CrossEntropyLoss()
train_set = tc.blobs(n=BATCH, features=WIDTH // 2, classes=10, seed=0)
x, y = (t.to(device) for t in train_set.tensors)

def train_step(model, batch, loss_fn, optimizer):
    optimizer.zero_grad()
    loss = loss_fn(model(batch[0]), batch[1])
    loss.backward()
    optimizer.step()
    return loss.item()

params = sum(p.numel() * p.element_size() for p in model.parameters())
print(f"model: {memory.fmt(params)} of parameters | batch: {tuple(x.shape)} | budget: {memory.fmt(BUDGET)}")

# %% tags=["raises-exception"]
with memory.limit(device, BUDGET):
    train_step(model, (x, y), loss_fn, optimizer)     # the whole batch in one go

# %%
# The cap is gone and the failed step's tensors are freed: nothing stays held.
if cuda:
    print(f"after the failure: {memory.fmt(torch.cuda.memory_allocated(device))} allocated, "
          f"{memory.fmt(torch.cuda.memory_reserved(device))} reserved by this process")
else:
    print("the simulated budget ended with its cell; the failed step's tensors were freed")

# %% [markdown]
# ### How to read the message
#
# The simulation and a real GPU word it the same way:
# `CUDA out of memory. Tried to allocate <A>. GPU 0 has a total capacity of <T> of which <F> is free. ... Of the allocated memory <X> is allocated by PyTorch, and <R> is reserved by PyTorch but unallocated.`
# In the middle: `Including non-PyTorch memory, this process has <P> memory in use.` (or, where the driver lists them, one
# `Process <pid> has <P> memory in use` per process on the card), and under a cap, `<C> allowed;`.
#
# - **Tried to allocate A**: the one allocation that did not fit. It is the last straw, rarely the culprit: the memory
#   was filled by everything before it.
# - **T and F**: the card's capacity and what is free on the **whole card** *now*. On a shared GPU, F can be small because
#   of *other* processes (`nvidia-smi` shows them): that is the example at the top, a full card.
# - **Under a cap, F is not your limit.** This lesson caps its process with `torch.cuda.set_per_process_memory_fraction`
#   (`memory.limit`). On a real GPU under such a cap the message reads `... of which <F> is free. ... <C> allowed; ...`: F is still
#   the whole card's free memory, often many GiB, far more than the step asked for, and the limit that was hit is C, the
#   **allowed** figure. (In the simulation the budget *is* the card: T is the budget and there is no `allowed`.)
# - **X allocated by PyTorch**: live tensors: parameters, gradients, optimizer state, and the activations saved for backward.
# - **R reserved but unallocated**: PyTorch's cache of freed blocks. If R is large while A does not fit, memory is
#   fragmented: `PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True"` helps. If R is small, you really need less memory.
#   (The simulation keeps no cache: R is 0 there.)
# - **When** it fails tells you **why**: on the *first* step, the step is too big (batch, model, sequence length);
#   after *many* steps or in validation, something keeps memory alive across steps (a leak, section 2b).

# %% [markdown]
# ## 2 · Diagnose: measure the peak
#
# `memory.measure(device)` measures the **peak** memory of its block, above what was allocated when it began. On CUDA it reads
# the allocator's statistics (`torch.cuda.reset_peak_memory_stats`, `torch.cuda.max_memory_allocated`); without a GPU it counts
# the live bytes of every tensor the block creates (a `TorchDispatchMode` that sees each operation's outputs and a finalizer
# on each storage), which is what the simulated budget uses too. Measure one training step at growing batch sizes:

# %%
peaks = {}
for batch_size in (BATCH // 8, BATCH // 4, BATCH // 2, BATCH):
    with memory.measure(device) as m:
        train_step(model, (x[:batch_size], y[:batch_size]), loss_fn, optimizer)
    peaks[batch_size] = m.peak
    bar = "#" * round(40 * m.peak / (2 * BUDGET))
    verdict = "fits" if m.peak < BUDGET else "over budget"
    print(f"batch {batch_size:>5}: peak {memory.fmt(m.peak):>11} {bar:<40} {verdict}")
print(f"budget: {memory.fmt(BUDGET)} ({'CUDA allocator statistics' if cuda else 'SIMULATED: live tensor bytes'})")


# %% [markdown]
# The peak grows **linearly with the batch size**: the activations saved for backward (each layer's output, for every
# example) dominate it. The part that does not grow (gradients, here; optimizer state with Adam or momentum) is paid once per
# model. So the first lever against an OOM is the batch: but a smaller batch means noisier gradients and a different
# training run. Section 3 keeps the batch and cuts the memory.
#
# ### 2b · The slow leak: `total_loss += loss`
#
# An OOM that comes after hundreds of steps, or in the validation loop, is a leak: something keeps memory alive across steps.
# The classic one is summing the loss **tensor**: every `loss` drags its whole autograd graph along, and `total` keeps all of
# them alive. In an evaluation loop (no `backward()` to free anything) that graph holds every batch's activations:

# %%
def validation_loss(model, batches, keep_tensor):
    """The classic evaluation loop; returns the mean loss and the memory held after each batch."""
    total, held = 0.0, []
    with memory.measure(device) as m:
        for xb, yb in batches:
            loss = loss_fn(model(xb), yb)
            total = total + (loss if keep_tensor else loss.item())
            held.append(m.allocated)
    return (total.item() if torch.is_tensor(total) else total) / len(batches), held

batches = [(x[i:i + BATCH // 8], y[i:i + BATCH // 8]) for i in range(0, BATCH, BATCH // 8)]
for keep_tensor, label in ((True, "total += loss       "), (False, "total += loss.item()")):
    _, held = validation_loss(model, batches, keep_tensor)
    print(label, "held after each batch:", " ".join(memory.fmt(h) for h in held))


# %% [markdown]
# With `loss.item()` the memory stays flat (one batch's graph, freed at the next); with `loss` it grows by one batch of
# activations per batch until it does not fit. (Evaluate under `torch.no_grad()` too: then no graph is built at all.)
#
# In a *training* loop, `backward()` has already freed each graph's saved activations, so `total_loss += loss` leaks less
# visibly: what piles up is the graph itself, step after step, as host memory. Count its nodes:

# %%
def graph_nodes(t):
    """How many autograd nodes a tensor keeps alive."""
    seen, todo = set(), [t.grad_fn]
    while todo:
        fn = todo.pop()
        if fn is not None and fn not in seen:
            seen.add(fn)
            todo.extend(f for f, _ in fn.next_functions)
    return len(seen)

total_loss = 0.0
with memory.measure(device) as m:
    for step, (xb, yb) in enumerate(batches, 1):
        optimizer.zero_grad()
        loss = loss_fn(model(xb), yb)
        loss.backward()
        optimizer.step()
        total_loss += loss                         # the leak: use loss.item()
        if step in (1, 4, 8):
            print(f"step {step}: {graph_nodes(total_loss):>4} graph nodes kept alive, {memory.fmt(m.allocated)} of tensors held")
total_loss = total_loss.item()


# %% [markdown]
# ## 3 · Fix it: gradient accumulation
#
# To keep the batch **and** fit the budget, split it into `micro_batches` pieces and run forward *and* backward on one piece
# at a time: `backward()` frees a piece's activations before the next forward, and **adds** its gradients to `.grad`. After the
# last piece, `.grad` holds the full batch's gradient, and one `optimizer.step()` takes the same step as the full batch would.
#
# Two details make the gradients *equal*:
# - the loss is a **mean** over its micro-batch, so divide each micro-batch loss by `micro_batches` (pieces of equal size);
# - zero the gradients **once** per call, before the loop, and step **once**, after it.
#
# Write `accumulate_step(model, batch, loss_fn, optimizer, micro_batches)`: `batch = (inputs, targets)` is already on
# the model's device (keep every tensor there) and its size is a multiple of `micro_batches`
# (`tensor.chunk(micro_batches)` splits it). Compute each micro-batch's loss with the `loss_fn` you are given, called as
# it is (any callable that returns the mean loss of what it is given: an `nn` loss module or a plain function such as
# `F.cross_entropy`), on the targets as they come (a loss may take class probabilities rather than class indices), in
# the batch's dtype. Return the full batch's mean loss as a Python float (the sum of the scaled micro-batch losses, each
# with `.item()`): a number to log, checked to float32's precision, while the gradients must match the full batch's to
# the batch's own precision. Do not reseed or restore the global random stream inside the step: a model with Dropout
# draws each step's masks from it, and a step that reseeds or puts back the random state repeats the same masks. Leave
# torch's defaults alone too (no `torch.set_default_dtype` or `torch.set_default_device`: they hold for the whole
# process after the step returns).

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
# Try it against the budget that broke the full batch:

# %%
with memory.limit(device, BUDGET), memory.measure(device) as m:
    loss = accumulate_step(model, (x, y), loss_fn, optimizer, micro_batches=4)
print(f"the full batch of {BATCH} in 4 micro-batches: loss {loss:.4f}, peak {memory.fmt(m.peak)} "
      f"(full batch at once: {memory.fmt(peaks[BATCH])}, budget {memory.fmt(BUDGET)})")

# %% [markdown]
# ## 4 · Check
#
# Each cell below calls a check on your function with seeded inputs. It prints `✓ ...` when your code behaves, and
# otherwise raises `CheckFailed` saying what was expected, what happened and a hint. The grader runs more cases than you
# see here: other micro-batch counts (from 1 to 8), batch sizes, widths, float64 (where the gradients must agree to
# float64's precision), and another loss (label smoothing, on class-probability targets; a module or a plain function).
# The gradients are read at the moment your `optimizer.step()` updates the weights (after the closure, if you pass one);
# the forward passes are counted and their sizes noted (`micro_batches` pieces, no finer); the peak memory is measured
# with the live-bytes tracker on the CPU, so it is the same on every machine. Your function is also called several times
# in a row, with the same model and optimizer and a new batch each time, as a training loop calls it: each step must use
# its own batch's gradients alone (nothing a call registers, such as a hook, may outlive it), it must leave autograd's
# grad mode as it found it, and the memory it leaves alive after each call must not grow from call to call (keep floats,
# not tensors, across steps). Without a GPU, your function also runs once with the model and the batch on a *simulated*
# cuda:0, where a tensor left on the CPU raises PyTorch's device error.

# %% nbgrader={"grade": true, "grade_id": "check_accumulated_grads", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""accumulate_step's gradients equal the full batch's"""
from trainclinic.checks import out_of_memory as checks
checks.check_accumulated_grads(accumulate_step)
### BEGIN HIDDEN TESTS
for seed in (1, 2, 3):
    checks.check_accumulated_grads(accumulate_step, seed=seed)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "check_one_step", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""accumulate_step takes one optimizer step per effective batch, returns its mean loss and leaves the grad mode as it found it"""
from trainclinic.checks import out_of_memory as checks
checks.check_one_step(accumulate_step)
### BEGIN HIDDEN TESTS
for seed in (1, 2, 3):
    checks.check_one_step(accumulate_step, seed=seed)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "check_peak_memory", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""accumulate_step's peak memory fits a budget that the full batch breaks"""
from trainclinic.checks import out_of_memory as checks
checks.check_peak_memory(accumulate_step)
### BEGIN HIDDEN TESTS
for seed in (1, 2, 3):
    checks.check_peak_memory(accumulate_step, seed=seed)
### END HIDDEN TESTS

# %% [markdown]
# ## 5 · The other levers (no exercise)
#
# Two more ways to cut the peak, measured on this device. **Mixed precision** (`torch.autocast`) computes the big matrix
# products in 16-bit floats, so the saved activations take half the bytes (on a GPU, use `torch.amp.GradScaler` with
# float16 when you train for real). **Activation checkpointing** (`torch.utils.checkpoint`) keeps only a few activations and
# recomputes the rest during backward: less memory, more compute. How much each saves depends on the model (how many
# activations a checkpointed segment hides, how much of the peak is activations at all): measure it.

# %%
import warnings
from torch.utils.checkpoint import checkpoint_sequential

half = torch.float16 if cuda else torch.bfloat16

def step_with(lever):
    optimizer.zero_grad()
    if lever == "mixed precision":
        with torch.autocast(device.type, dtype=half):
            loss = loss_fn(model(x), y)
    elif lever == "checkpointing":
        loss = loss_fn(checkpoint_sequential(model, 2, x, use_reentrant=False), y)
    else:
        loss = loss_fn(model(x), y)
    loss.backward()
    optimizer.step()

for lever in ("float32 (as before)", "mixed precision", "checkpointing"):
    with memory.measure(device) as m, warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch 2.4's checkpoint warns about its own torch.cpu.amp call
        step_with(lever)
    print(f"{lever:<20} peak {memory.fmt(m.peak):>11}")

# %% [markdown]
# ## 6 · Explore: the same training, in micro-batches, under a budget
#
# Your `accumulate_step` trains a fresh copy of the model on batches of `BATCH // 4`, under a budget: one step in 4
# micro-batches plus 15%, a GPU on which this batch fits in 4 pieces but not in 2. On a GPU the budget is a real cap
# (`memory.limit`); without one it is the simulated budget. First a run at the healthy setting, `tc.LivePlot` drawing the loss
# and the gradient norm:

# %%
EXPLORE_BATCH = BATCH // 4

def fresh_model():
    tc.seed_everything(0)
    return tc.mlp(inputs=WIDTH // 2, hidden=WIDTH, outputs=10, depth=4).to(device)

def shuffled(seed=0):
    return torch.randperm(BATCH, generator=torch.Generator().manual_seed(seed)).to(device)

def explore_budget():
    """The budget: what one step in 4 micro-batches of your accumulate_step needs, plus 15%."""
    net, idx = fresh_model(), shuffled()[:EXPLORE_BATCH]
    with memory.measure(device) as m:
        batch = (x[idx], y[idx])
        accumulate_step(net, batch, loss_fn, torch.optim.SGD(net.parameters(), lr=0.05), 4)
    return int(1.15 * m.peak)

def train(batch_size=EXPLORE_BATCH, micro_batches=4, lr=0.2, steps=6, plot=None):
    """Train under explore_budget() with accumulate_step; peak memory per step in MiB; an OOM ends the run."""
    budget = explore_budget()
    net = fresh_model()
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    batch_size -= batch_size % micro_batches                # a multiple of micro_batches
    history = {"step": [], "loss": [], "grad_norm": [], "peak_MiB": [], "limits": {"peak_MiB": budget / 2**20}}
    order, per_epoch = shuffled(), BATCH // batch_size
    try:
        with memory.limit(device, budget, say=False):
            for step in range(steps):
                if step and step % per_epoch == 0:
                    order = shuffled(step)
                i = (step % per_epoch) * batch_size
                with memory.measure(device) as m:                 # the step: its batch, forward, backward, update
                    batch = (x[order[i:i + batch_size]], y[order[i:i + batch_size]])
                    loss = accumulate_step(net, batch, loss_fn, opt, micro_batches)
                del batch
                gn = tc.grad_norm(net)
                history["step"].append(step); history["loss"].append(loss); history["grad_norm"].append(gn)
                history["peak_MiB"].append(m.peak / 2**20)
                if plot is not None:
                    plot.update(step, loss, gn)
    except memory.OutOfMemoryError as exc:                  # PyTorch's own exception (simulated without a GPU)
        print(f"{type(exc).__name__}: {str(exc).split(' If reserved')[0]}")
        spare = fresh_model()                               # the same step without the budget: what it needed
        with memory.measure(device) as m:
            batch = (x[order[i:i + batch_size]], y[order[i:i + batch_size]])
            accumulate_step(spare, batch, loss_fn, torch.optim.SGD(spare.parameters(), lr=lr), micro_batches)
        del spare, batch
        history["step"].append(step); history["loss"].append(None); history["grad_norm"].append(None)
        history["peak_MiB"].append(m.peak / 2**20)
        history["failure"] = (f"{type(exc).__name__} at step {step}: batch {batch_size} in {micro_batches} micro-batch(es) "
                              f"needs {memory.fmt(m.peak)} > budget {memory.fmt(budget)}"
                              + ("" if cuda else " (SIMULATED)"))
    return history

with tc.LivePlot("lesson 03: training in micro-batches", every=10) as plot:
    history = train(steps=40 if plot.live else 4, plot=plot)   # a short run where nobody watches (grading)
print(plot.summary(), f"| peak memory of a step {max(history['peak_MiB']):.3f} MiB, budget {history['limits']['peak_MiB']:.3f} MiB")

# %%
for k in (1, 2, 4, 8):
    h = train(micro_batches=k, steps=1)
    print(f"micro_batches={k}:", h.get("failure") or f"fits, peak {max(h['peak_MiB']):.3f} MiB")

# %% [markdown]
# Now move the sliders. The **peak MiB** panel shows each step's peak memory against the budget (red line). With the same
# batch, the number of micro-batches changes the memory, not the curves; with too few, the first step raises PyTorch's
# `torch.OutOfMemoryError` (simulated, and saying so, without a GPU), printed under the sliders. *show the failure* sets
# `micro_batches = 1`; a bigger `batch_size` needs more micro-batches.

# %%
tc.explore(train, title="batch size / micro-batches", failure={"micro_batches": 1},
           batch_size=("int", 16, BATCH // 2, EXPLORE_BATCH), micro_batches=("int", 1, 8, 4), lr=("log", 1e-3, 1.0, 0.2));

# %% [markdown] nbgrader={"grade": false, "grade_id": "recap", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 7 · Troubleshooting
#
# | Symptom | Cause | Fix |
# |---|---|---|
# | OOM on the **first** step | the step needs more than the GPU has: batch, sequence length, model | measure with `memory.measure`; smaller micro-batches with gradient accumulation; mixed precision; checkpointing |
# | OOM after many steps, memory creeping up | something keeps graphs alive across steps (`total += loss`, a list of losses or outputs) | `.item()` / `.detach()` what you keep |
# | OOM in validation only | evaluation without `torch.no_grad()`, or outputs accumulated as tensors | `with torch.no_grad():` and `.item()` |
# | large *reserved but unallocated* in the message | fragmentation of PyTorch's cache | `PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True"`; steady shapes |
# | *free* is tiny but your process holds little | another process uses the GPU | `nvidia-smi`; restart the other kernel |
# | OOM although *free* shows GiB to spare, and the message says *allowed* | a per-process cap (`torch.cuda.set_per_process_memory_fraction`); *free* is the whole card's | the cap (*allowed*) is your limit: less memory per step, or lift the cap |
# | accumulation trains differently from the big batch | loss not divided by the micro-batch count, or `zero_grad` inside the loop | divide; zero once before, step once after |
# | memory not released after an OOM in a notebook | the traceback keeps the failed step's tensors | `del` them, `gc.collect()`, `torch.cuda.empty_cache()`; or restart the kernel |
#
# **Recap.** Read the message: the allocation that failed, what is free, what PyTorch holds (allocated) and caches
# (reserved). Measure the peak of one step: it grows with the batch. Gradient accumulation keeps the batch and divides the
# memory: zero once, backward each micro-batch's loss / `micro_batches`, step once. Keep floats, not tensors, across steps.
# Mixed precision and checkpointing are the next levers.
