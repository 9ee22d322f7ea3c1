# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false, "task": false}
# # Lesson 07 · Mixed precision
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/trainclinic/trainclinic/blob/main/notebooks/07_mixed_precision/07_mixed_precision.ipynb)
#
# **The failure:** mostly silent. Under `torch.autocast` with float16, small gradients underflow to exactly 0 and the
# weights stop learning; a `torch.amp.GradScaler()` built without its device disables itself on a machine without
# CUDA, with only a warning, `torch.cuda.amp.GradScaler is enabled, but CUDA is not available.  Disabling.`; clipping
# before `unscale_` makes every update up to as many times too small as the loss scale (1024x below). The one
# that raises: an autocast output that reaches float32 code,
# `RuntimeError: mat1 and mat2 must have the same dtype, but got Half and Float`.
#
# **What you will learn**
# - what float16 and bfloat16 can hold: float16 overflows above 65504 and rounds values below about 3·10⁻⁸ to 0;
#   bfloat16 has float32's range but only about 3 significant digits, so pure-bfloat16 weights never move;
# - how `GradScaler` rescues small float16 gradients: it scales the loss up, unscales the gradients, **skips** a step
#   whose gradients overflowed and halves its scale;
# - the traps: `GradScaler()` without a device, clipping before `scaler.unscale_(optimizer)`, autocast outputs
#   leaking into float32 code;
# - to measure what mixed precision buys on *this* device (speed and peak memory), and why a CPU may be slower;
# - to write a mixed-precision training step, checked automatically.
#
# **Prerequisites:** a PyTorch training loop (`zero_grad`, `backward`, `step`), gradient clipping (lesson 05).
# Runs on any device: everything in sections 1 to 4 happens for real on a CPU too (the CPU has float16 and bfloat16
# autocast); only the speed-up needs a GPU.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Setup. In Colab this installs trainclinic once, with --no-deps: Colab's own torch is never touched.
import importlib.util, subprocess, sys
if importlib.util.find_spec("trainclinic") is None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "git+https://github.com/trainclinic/trainclinic@main"], check=True)
import torch
import trainclinic as tc
torch.set_num_threads(1)  # tiny models: one CPU thread is the fastest
device = tc.pick_device()
tc.banner(device);

# %% [markdown] nbgrader={"grade": false, "grade_id": "reproduce_md", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 1 · Reproduce the failure
#
# Mixed precision runs the big matrix products in a 16-bit float and keeps everything else in float32. Two 16-bit
# formats exist, and they fail differently. First, what each can hold:

# %%
import warnings
from torch import nn
from trainclinic import precision

if device.type == "mps":  # autocast and GradScaler on Apple GPUs are recent and untested with this course: the CPU
    device = torch.device("cpu")

values = torch.tensor([70000.0, 65504.0, 1e-8, 6e-8, 1 + 1e-3], dtype=torch.float64)
print(f"{'value':>12} {'float32':>16} {'float16':>16} {'bfloat16':>16}")
for v in values:
    print(f"{v.item():>12.6g} " + " ".join(f"{v.to(dt).item():>16.10g}" for dt in (torch.float32, torch.float16, torch.bfloat16)))
for dt in (torch.float16, torch.bfloat16):
    f = torch.finfo(dt)
    print(f"{str(dt)[6:]:9} max {f.max:.6g}, smallest normal {f.tiny:.3g}, eps {f.eps:.3g}")

# %% [markdown]
# **float16** turns 70000 into `inf` (its largest value is 65504) and 1e-8 into 0 (less than half its smallest
# subnormal, about 6·10⁻⁸). **bfloat16** keeps float32's range (no `inf`, no 0) but has 8 bits of mantissa: 1 + 0.001 is 1.0.
#
# ### Gradients underflow to zero
#
# Small gradients are normal: a loss averaged over a big batch, a loss weighted by a small factor, the deep layers of a
# network. Here a loss multiplied by 1e-7, under `torch.autocast` in float16. The weights stay float32, but the
# gradients flowing back through the float16 activations are float16 too, and below about 3·10⁻⁸ they become 0:

# %%
half = torch.float16  # float16 autocast: on a GPU, and on the CPU (torch >= 2.4 at least; bfloat16 everywhere)
x16 = torch.randn(64, 16, generator=torch.Generator().manual_seed(0)).to(device)
layer = nn.Linear(16, 1).to(device)

def grads_of(k, dtype, scaler=None):
    """The weight gradient of mean(layer(x)) * k under autocast(dtype), with or without a GradScaler."""
    layer.zero_grad()
    with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
        loss = layer(x16).float().mean() * k
    (scaler.scale(loss) if scaler else loss).backward()
    g = layer.weight.grad.clone()
    return g / scaler.get_scale() if scaler else g   # what scaler.unscale_ does

reference = grads_of(1e-7, torch.float32)  # no autocast: the true (float32) gradients
for dtype, scaler in ((half, None), (half, torch.amp.GradScaler(device.type)), (torch.bfloat16, None)):
    g = grads_of(1e-7, dtype, scaler)
    err = ((g - reference).norm() / reference.norm()).item()
    print(f"{str(dtype)[6:]:9} {'with GradScaler' if scaler else 'no scaler      '}: "
          f"{precision.zero_fraction([g]):4.0%} of the gradients are 0, relative error {err:.2g}")

# %% [markdown]
# Every float16 gradient is 0 without a scaler: the weights never move, and nothing raises. `GradScaler` multiplies
# the loss by 65536 before `backward()` (the gradients are then big enough for float16) and divides them back, in
# float32, before the step. bfloat16 needs no scaler: its range is float32's.
#
# ### The scaler that switched itself off
#
# The usual first attempt: `torch.amp.GradScaler()`. Its device defaults to `"cuda"`, and on a machine without
# CUDA (Colab's CPU runtime, a laptop) it disables itself: `scale(loss)` then returns the loss unchanged, and the
# float16 gradients underflow exactly as above. It only warns:

# %%
def build_default_scaler():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scaler = torch.amp.GradScaler()      # no device: "cuda"
    for w in caught:
        print(f"{w.category.__name__}: {w.message}")
    loss = torch.tensor(1e-7)
    print(f"enabled: {scaler.is_enabled()}; scaler.scale(1e-7) = {scaler.scale(loss).item():.3g}")

if torch.cuda.is_available():  # here CUDA exists: show a machine without it, in a child process that cannot see the GPU
    import inspect, os, textwrap
    code = "import torch, warnings\n" + textwrap.dedent(inspect.getsource(build_default_scaler)) + "build_default_scaler()"
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    print("a real child process with CUDA_VISIBLE_DEVICES='' (no GPU visible):")
    print(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True).stdout)
else:
    build_default_scaler()
print("torch.amp.GradScaler(device.type):", torch.amp.GradScaler(device.type).is_enabled())

# %% [markdown]
# ### An autocast output leaking into float32 code
#
# The one failure that raises. `autocast` casts inside its block only: a tensor computed there stays float16, and
# a float32 layer called on it outside the block cannot multiply the two:

# %% tags=["raises-exception"]
encoder, head = nn.Linear(16, 32).to(device), nn.Linear(32, 3).to(device)
with torch.autocast(device.type, dtype=half):
    features = encoder(x16)        # float16
logits = head(features)            # outside autocast: float32 weights, float16 input

# %% [markdown]
# ### How to read the message
#
# - `mat1 and mat2`: the two matrices of the matrix product inside `nn.Linear` (`addmm`): `mat1` is the input, `mat2`
#   the layer's weight (transposed).
# - `but got Half and Float`: the input is float16 (`Half`; `BFloat16` under bfloat16 autocast), the weight float32
#   (`Float`). A GPU may word it differently; the cause and the fix are the same.
# - The line is the first float32 operation **after** the autocast block. Compute the model's output and the loss
#   inside one `with torch.autocast(...)` block, or cast at the seam with `.float()`.
#
# The silent failures have no message at all: the zero gradients above, and the ones in section 2. The
# warning `torch.cuda.amp.GradScaler is enabled, but CUDA is not available.  Disabling.` is the only trace of the
# scaler that switched itself off (and in a script, it scrolls past).

# %% [markdown]
# ## 2 · Diagnose: the gradient norm, and the scaler's state
#
# Underflow raises nothing, but the **gradient norm** shows it. A small classifier trained under float16 autocast on
# a loss multiplied by 1e-6 (the learning rate is multiplied by 1e6 to make up for it), `tc.LivePlot` drawing the
# loss and the gradient norm, first without a scaler, then with one. The norm is taken after `scaler.unscale_`, so
# both runs are on the same (true) scale:

# %%
data = tc.blobs(n=256, features=16, classes=4, seed=0)
xb, yb = data.tensors[0][:64].to(device), data.tensors[1][:64].to(device)

def make_model():
    return tc.mlp(inputs=16, hidden=64, outputs=4, seed=0).to(device)

def train_tiny(use_scaler, plot, steps=40):
    """float16 autocast on a loss x 1e-6, with or without a (working) GradScaler."""
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=2e5)
    scaler = torch.amp.GradScaler(device.type, enabled=use_scaler)  # enabled=False: scale() and unscale_ do nothing
    for step in range(steps):
        optimizer.zero_grad()
        with torch.autocast(device.type, dtype=half):
            loss = nn.functional.cross_entropy(model(xb), yb) * 1e-6
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        plot.update(step, loss.item() * 1e6, tc.grad_norm(model))
        scaler.step(optimizer)
        scaler.update()
    zeros = precision.zero_fraction([p.grad for p in model.parameters()])
    loss = plot.history["loss"]
    print(f"{plot.title}: loss {loss[0]:.4g} -> {loss[-1]:.4g}, {zeros:.0%} of the last gradients are exactly 0")

with tc.LivePlot("float16, no GradScaler (loss x 1e-6)", every=4) as plot:
    train_tiny(False, plot)
with tc.LivePlot("float16 with GradScaler (loss x 1e-6)", every=4) as plot:
    train_tiny(True, plot)

# %% [markdown]
# Without the scaler the loss is flat and the gradient norm is 0 (nothing to draw on a log scale): every gradient
# underflowed. With it, the same model trains. **A gradient norm of exactly 0 under float16 means underflow.**
#
# ### The scaler's state
#
# `GradScaler` has state worth looking at: `scaler.get_scale()`, before and after each step. When a scaled gradient
# overflows (inf or NaN), `scaler.step(optimizer)` **skips** the step (the weights stay as they were) and
# `scaler.update()` **halves** the scale; after 2000 good steps in a row (`growth_interval`) it doubles it. Below,
# step 1's batch is planted to overflow (its inputs times 1e4):

# %%
model = make_model()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler(device.type)
for step in range(3):
    inputs = xb * 1e4 if step == 1 else xb
    before = [p.detach().clone() for p in model.parameters()]
    scale = scaler.get_scale()
    optimizer.zero_grad()
    with torch.autocast(device.type, dtype=half):
        loss = nn.functional.cross_entropy(model(inputs), yb)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)    # (scaler.step would do it; done here to look at the true gradients)
    finite = all(torch.isfinite(p.grad).all() for p in model.parameters())
    scaler.step(optimizer)
    scaler.update()
    moved = any(not torch.equal(p, b) for p, b in zip(model.parameters(), before))
    print(f"step {step}: loss {loss.item():9.4g}  gradients finite {finite!s:5}  weights updated {moved!s:5}  "
          f"scale {scale:g} -> {scaler.get_scale():g}")

# %% [markdown]
# A skipped step now and then (and the scale settling) is the scaler working. A scale that keeps falling and steps
# that keep being skipped mean the **forward** pass overflows: no loss scale fixes that (lesson 04, float16's 65504).
#
# ### Clipping before `unscale_`
#
# The gradients in `p.grad` after `scaler.scale(loss).backward()` are multiplied by the scale. Clip them there and
# `clip_grad_norm_` sees a norm 65536 times too large, shrinks them to `max_norm`, and then the scaler divides them by
# 65536 again: every update is far too small, and nothing warns. The right order is `scaler.unscale_(optimizer)`,
# then clip, then `scaler.step(optimizer)` (which does not unscale twice).

# %%
def one_update(unscale_first, max_norm=1.0):
    """The size of one clipped SGD update, with or without scaler.unscale_ before clipping."""
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler(device.type, init_scale=1024.0)
    before = [p.detach().clone() for p in model.parameters()]
    with torch.autocast(device.type, dtype=half):
        loss = nn.functional.cross_entropy(model(xb), yb)
    scaler.scale(loss).backward()
    if unscale_first:
        scaler.unscale_(optimizer)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    step = torch.cat([(p.detach() - b).flatten() for p, b in zip(model.parameters(), before)]).norm().item()
    print(f"unscale_ {'before' if unscale_first else 'after '} clipping: clip_grad_norm_ saw a norm of {norm.item():9.4g}, "
          f"the update's size is {step:.3g}")
    return step

ratio = one_update(True) / one_update(False)
print(f"clipping the scaled gradients made the update {ratio:.0f}x too small")

# %% [markdown]
# The scaler does check the *order* of its own calls, and raises. `unscale_` twice in one step, or a new step
# without `scaler.update()` after the last one:

# %%
def misuse(kind):
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler(device.type)
    try:
        for step in range(2):
            optimizer.zero_grad()
            with torch.autocast(device.type, dtype=half):
                loss = nn.functional.cross_entropy(model(xb), yb)
            scaler.scale(loss).backward()
            if kind != "no update, no clipping":
                scaler.unscale_(optimizer)
                if kind == "unscale_ twice":
                    scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(optimizer)
            if kind == "unscale_ twice":
                scaler.update()
    except RuntimeError as err:
        print(f"{kind:22}: RuntimeError: {err}")

for kind in ("unscale_ twice", "no update", "no update, no clipping"):
    misuse(kind)

# %% [markdown]
# ### Pure bfloat16 weights never move
#
# "bfloat16 needs no scaler" tempts a shortcut: `model.to(torch.bfloat16)`, no autocast. The forward pass is
# fine, but the **update** is computed on the weights in bfloat16: a weight of 1 plus a step of 0.001 rounds back to
# 1 (8 bits of mantissa, the table above). Autocast keeps the weights in float32 (the *master* weights) and casts a
# bfloat16 copy for each matrix product:

# %%
def moved_weights(pure_bf16, steps=20, lr=1e-3):
    """The share of weights that changed after `steps` SGD steps, pure bfloat16 or float32 + autocast."""
    model = make_model()
    if pure_bf16:
        model = model.to(torch.bfloat16)
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(1.0) if p.dim() == 1 else None  # biases at 1.0: their steps are well below bfloat16's spacing
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    start = [p.detach().clone() for p in model.parameters()]
    for _ in range(steps):
        optimizer.zero_grad()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=not pure_bf16):
            loss = nn.functional.cross_entropy(model(xb.to(torch.bfloat16) if pure_bf16 else xb), yb)
        loss.backward()
        optimizer.step()
    biases = [(p, s) for p, s in zip(model.parameters(), start) if p.dim() == 1]
    return sum(int((p != s).sum()) for p, s in biases) / sum(p.numel() for p, _ in biases)

print(f"pure bfloat16 weights:           {moved_weights(True):4.0%} of the biases moved in 20 steps")
print(f"float32 weights + bf16 autocast: {moved_weights(False):4.0%} of the biases moved in 20 steps")

# %% [markdown]
# ### What mixed precision buys, measured here
#
# The reason to put up with all this is speed and memory: on a GPU with tensor cores, float16 matrix products run
# several times faster, and the activations saved for backward take half the bytes. The figure usually quoted is a
# training step about 1.9x faster with 41% less memory on a T4 (real GPU, not measured here). `precision.compare` times
# one training step of an MLP in float32 and under autocast on **this** device, and measures each step's peak memory
# (CUDA's allocator on a GPU; elsewhere the bytes of the live tensors). `make gpu-check` records the same figures.

# %%
if device.type == "cuda":
    size = dict(width=4096, batch=8192, steps=10)
else:  # a CPU: a small step, and a smaller one when nobody watches (the grader)
    size = dict(width=256, batch=1024, steps=5) if tc.plots.live_frontend() else dict(width=128, batch=512, steps=2)
result = precision.compare(device, **size)
f32, mixed = result["float32"], result["mixed"]
print(f"{device.type}, an MLP of width {size['width']}, batch {size['batch']}, autocast in {result['dtype'][6:]}:")
print(f"  float32 {f32['seconds_per_step'] * 1e3:8.2f} ms per step, peak {tc.memory.fmt(f32['peak_bytes'])}")
print(f"  mixed   {mixed['seconds_per_step'] * 1e3:8.2f} ms per step, peak {tc.memory.fmt(mixed['peak_bytes'])}")
print(f"  speed: x{result['speedup']:.2f} ({'faster' if result['speedup'] > 1 else 'SLOWER'}); "
      f"peak memory: x{result['memory_ratio']:.2f}")
if device.type == "cpu":
    native = precision.cpu_bf16_hardware()
    print(f"  this CPU has native bfloat16 instructions (AVX512-BF16 or AMX): {'unknown' if native is None else native}")

# %% [markdown]
# **On a GPU** the step should be faster (the speed ratio above 1) and the peak smaller. **On a CPU without native
# bfloat16 instructions** (no AVX512-BF16, no AMX: most laptops and cloud CPUs), autocast is *slower*, often several
# times: every bfloat16 matrix product is widened back to float32 to be computed, and the casts come on top. That is
# not a bug in your code (pytorch/pytorch#86550): on such a CPU, train in float32. The memory saving does show: the
# activations saved for backward are 16-bit; the weights, their gradients and the optimizer's state stay float32, so
# the saving is largest when activations dominate (big batches, narrow layers).

# %% [markdown] nbgrader={"grade": false, "grade_id": "fix_md", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 3 · Fix it
#
# **3a.** `make_scaler(device)`: return a `torch.amp.GradScaler` for `device` (a `torch.device` or a name such as
# `"cpu"`) that is **enabled** on that device (the CPU's too, on a machine without CUDA): built for that device's
# type (a CUDA device gets a scaler for `"cuda"`, the CPU one for `"cpu"`, an Apple GPU one for `"mps"`), whichever
# device is passed. Keep the default initial scale (65536).

# %% nbgrader={"grade": false, "grade_id": "make_scaler", "locked": false, "schema_version": 3, "solution": true, "task": false}
def make_scaler(device):
    """An enabled torch.amp.GradScaler for `device`."""
    ### BEGIN SOLUTION
    return torch.amp.GradScaler(torch.device(device).type)
    ### END SOLUTION


# %% [markdown]
# **3b.** `amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.float16)`: one
# mixed-precision training step. `batch` is `(inputs, targets)`, already on the model's device; the model's weights
# are float32 and must stay float32. In this order:
# - zero the gradients;
# - compute the model's output **and** the loss inside `torch.autocast` for the device of `inputs`, in `dtype`
#   (or the loss just after the block on `output.float()`, cast at the seam: a float32 loss either way);
# - backpropagate the **scaled** loss (`scaler.scale(loss).backward()`);
# - if `max_norm` is not `None`: `scaler.unscale_(optimizer)`, then clip the total gradient norm to `max_norm`
#   (`torch.nn.utils.clip_grad_norm_`);
# - step through the scaler (`scaler.step(optimizer)`, which skips the step when a gradient overflowed), then
#   `scaler.update()`;
# - return the loss (unscaled) as a Python float.
#
# `scaler` may be disabled (`torch.amp.GradScaler(device.type, enabled=False)`: bfloat16 needs no loss scaling). Its
# `scale(loss)` then returns the loss as it is, `unscale_` and `update` do nothing and `step` calls `optimizer.step()`;
# `amp_step` still computes under autocast in `dtype`, as above.

# %% nbgrader={"grade": false, "grade_id": "amp_step", "locked": false, "schema_version": 3, "solution": true, "task": false}
def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.float16):
    """One autocast + GradScaler step (clipping the unscaled gradients to max_norm); returns the loss as a float."""
    ### BEGIN SOLUTION
    inputs, targets = batch
    optimizer.zero_grad()
    with torch.autocast(inputs.device.type, dtype=dtype):
        loss = loss_fn(model(inputs), targets)
    scaler.scale(loss).backward()
    if max_norm is not None:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.item()
    ### END SOLUTION


# %% [markdown]
# Try it: a few steps on the batch from section 2, with a planted overflow at step 3.

# %%
model = make_model()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = make_scaler(device)
for step in range(6):
    loss = amp_step(model, (xb * 1e4 if step == 3 else xb, yb), nn.functional.cross_entropy, optimizer, scaler, max_norm=1.0)
    print(f"step {step}: loss {loss:9.4g}, scale {scaler.get_scale():g}")

# %% [markdown] nbgrader={"grade": false, "grade_id": "check_md", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 4 · Check
#
# Each cell calls a check on your code with seeded inputs (on the CPU, and on the GPU too when there is one). It
# prints `✓ ...` when your code behaves, and otherwise raises `CheckFailed` saying what was expected, what happened
# and, when the cause is clear, a hint. The grader runs more cases than you see (other sizes, optimizers, bfloat16).

# %% nbgrader={"grade": true, "grade_id": "check_make_scaler", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""make_scaler returns an enabled GradScaler for the device, also on a machine without CUDA"""
from trainclinic.checks import mixed_precision as checks
checks.check_make_scaler(make_scaler)
### BEGIN HIDDEN TESTS
checks.check_make_scaler(make_scaler, seed=1)
checks.check_make_scaler(make_scaler, seed=2)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "check_amp_trains", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""amp_step computes under autocast (float16 by default, also with a disabled scaler), keeps float32 weights, returns the loss, trains, and leaves the grad mode as it found it"""
from trainclinic.checks import mixed_precision as checks
checks.check_amp_trains(amp_step)
### BEGIN HIDDEN TESTS
checks.check_amp_trains(amp_step, seed=1)
checks.check_amp_trains(amp_step, seed=2)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "check_overflow_skipped", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""amp_step skips an overflowing step (weights untouched) and the scale halves"""
from trainclinic.checks import mixed_precision as checks
checks.check_overflow_skipped(amp_step)
### BEGIN HIDDEN TESTS
checks.check_overflow_skipped(amp_step, seed=1)
checks.check_overflow_skipped(amp_step, seed=2)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "check_grads_match_fp32", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""amp_step steps with the float32 gradients, also for a tiny loss (a working scaler)"""
from trainclinic.checks import mixed_precision as checks
checks.check_grads_match_fp32(amp_step)
### BEGIN HIDDEN TESTS
checks.check_grads_match_fp32(amp_step, seed=1)
checks.check_grads_match_fp32(amp_step, seed=2)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "check_clip_unscaled", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""amp_step clips the unscaled gradients to max_norm"""
from trainclinic.checks import mixed_precision as checks
checks.check_clip_unscaled(amp_step)
### BEGIN HIDDEN TESTS
checks.check_clip_unscaled(amp_step, seed=1)
checks.check_clip_unscaled(amp_step, seed=2)
### END HIDDEN TESTS

# %% [markdown]
# ## 5 · Explore: loss scale, dtype, overflow
#
# Your `amp_step` trains the model of section 2 on a loss multiplied by 1e-6 (a loss this small is common: averaged
# over many tokens, or one weighted term of several). The sliders set the scaler's initial scale (its growth is off,
# so the scale only falls), the dtype (the `bfloat16` switch), and `overflow` plants an overflowing batch every 8 steps.
# The third panel is the scaler's scale. **show the failure** sets the scale to 1 in float16: the gradients underflow,
# the figure says how many are 0, and the loss stays flat. Then find the smallest scale that trains, and see what
# `overflow` does to the scale.

# %%
def run(loss_scale=65536.0, bfloat16=False, overflow=False, steps=40):
    """`steps` amp_steps on a loss x 1e-6; history of loss, gradient norm (unscaled) and scale."""
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=2e5)  # the loss is x 1e-6: a rate x 1e6 makes up for it
    scaler = torch.amp.GradScaler(device.type, init_scale=loss_scale, growth_interval=10**6)
    dtype = torch.bfloat16 if bfloat16 else torch.float16
    tiny = lambda out, target: nn.functional.cross_entropy(out, target) * 1e-6
    history = {"step": [], "loss": [], "grad_norm": [], "scale": []}
    zeros = []
    for step in range(steps):
        planted = overflow and step % 8 == 4
        loss = amp_step(model, (xb * 1e4 if planted else xb, yb), tiny, optimizer, scaler, dtype=dtype)
        grads = [p.grad for p in model.parameters()]
        zeros.append(precision.zero_fraction(grads))
        history["step"].append(step)
        history["loss"].append(loss * 1e6)
        history["grad_norm"].append(tc.grad_norm(model) / scaler.get_scale() if not planted else None)
        history["scale"].append(scaler.get_scale())
    mean_zeros = sum(zeros) / len(zeros)
    if mean_zeros > 0.5:
        history["failure"] = (f"{mean_zeros:.0%} of the gradients were 0 (underflow in {str(dtype)[6:]} at loss scale "
                              f"{loss_scale:g}): the weights barely moved")
    return history


tc.explore(run, title="amp_step", failure={"loss_scale": 1.0, "bfloat16": False},
           loss_scale=("log", 1.0, 65536.0, 65536.0), bfloat16=("bool", False), overflow=("bool", False));

# %% [markdown] nbgrader={"grade": false, "grade_id": "recap", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 6 · Troubleshooting
#
# | Symptom | Cause | Fix |
# |---|---|---|
# | float16 training does not learn; many gradients exactly 0; nothing raises | gradients underflow in float16 (below about 3·10⁻⁸) | `scaler.scale(loss).backward()`, `scaler.step(optimizer)`, `scaler.update()`; or bfloat16 |
# | `torch.cuda.amp.GradScaler is enabled, but CUDA is not available.  Disabling.` | `torch.amp.GradScaler()` (or `torch.cuda.amp.GradScaler()`) defaults to CUDA | `torch.amp.GradScaler(device.type)` |
# | `RuntimeError: mat1 and mat2 must have the same dtype, but got Half and Float` | an autocast output reaches float32 code outside the block | output and loss inside one `torch.autocast` block, or `.float()` at the seam |
# | training with clipping under AMP barely moves; `clip_grad_norm_` returns norms in the hundreds or thousands | clipping the scaled gradients | `scaler.unscale_(optimizer)` before `clip_grad_norm_` |
# | `RuntimeError: unscale_() has already been called on this optimizer since the last update().` | `scaler.unscale_(optimizer)` twice in one step | one `unscale_` per step, before clipping |
# | `RuntimeError: unscale_() is being called after step().` (or, without clipping, `step() has already been called since the last update().`) | no `scaler.update()` after the last `scaler.step` | `scaler.update()` after every `scaler.step(optimizer)` |
# | the scale keeps halving, every step skipped | the forward pass overflows float16 (activations above 65504) | bfloat16; normalise the inputs; run that part in float32 (`autocast(..., enabled=False)`) |
# | bfloat16 model whose weights never change | pure bfloat16 weights: small updates round away | float32 weights + `torch.autocast(..., dtype=torch.bfloat16)` |
# | autocast on a CPU is slower than float32 | no native bfloat16 in this CPU (AVX512-BF16, AMX) | float32 on such a CPU; mixed precision on a GPU |
#
# **Recap.** Mixed precision is float32 weights plus 16-bit matrix products under `torch.autocast`. float16 needs a
# `GradScaler` built for the right device: it scales the loss so small gradients survive, skips the steps whose
# gradients overflow and halves the scale. Unscale before you clip, keep the loss inside autocast, keep the weights
# float32, and measure: the speed-up is a GPU's, not every CPU's.
