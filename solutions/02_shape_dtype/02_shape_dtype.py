# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false, "task": false}
# # Lesson 02 · Shape and dtype errors
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/trainclinic/trainclinic/blob/main/notebooks/02_shape_dtype/02_shape_dtype.ipynb)
#
# **The failure:** `RuntimeError: mat1 and mat2 shapes cannot be multiplied (8x5 and 4x16)`, and its relatives:
# a conv layer that wants 3 channels and gets 1, `Expected input batch_size (2) to match target batch_size (8)`,
# `mat1 and mat2 must have the same dtype, but got Double and Float`, and float labels, which torch words by version:
# torch ≥ 2.13 says `expected target dtype to be Long or Byte, but got Float`,
# torch ≤ 2.12 says `expected scalar type Long but found Float`.
# And the worst one, which raises nothing: an `MSELoss` that broadcasts `(N, 1)` against `(N,)` and trains on the wrong number.
#
# **What you will learn**
# - to read the two shapes (or two dtypes) in the message: which one is the data, which one is the layer;
# - to trace backward from the layer that raised to the line that produced the wrong shape;
# - a tool, `shapes.trace`, that prints the shape and dtype leaving every layer and names the first layer whose input does not fit;
# - to fix a small broken pipeline: the channel dimension, the flatten and the first `Linear`, the label dtype, the regression loss.
#
# **Prerequisites:** `nn.Linear`, `nn.Conv2d`, a loss and `backward()`. Runs on a CPU in seconds; no GPU needed.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Setup. In Colab this installs trainclinic once, with --no-deps: Colab's own torch is never touched.
import importlib.util, subprocess, sys
if importlib.util.find_spec("trainclinic") is None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "git+https://github.com/trainclinic/trainclinic@main"], check=True)
import torch
import trainclinic as tc
from trainclinic import shapes
device = tc.pick_device()
tc.banner(device);

# %% [markdown]
# ## 1 · Reproduce the failures
#
# Every error below is raised by PyTorch itself, on real tensors. First the classic: a model built for 4 features
# meets data that now has 5 (someone added a column).

# %%
import warnings
from torch import nn
from torch.nn import functional as F

tc.seed_everything(0)
model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))   # built for 4 features
x = torch.randn(8, 5)                                                # a batch of 8 samples with 5 features
print(model)

# %% tags=["raises-exception"]
logits = model(x)

# %% [markdown]
# ### How to read the message
#
# `mat1 and mat2 shapes cannot be multiplied (8x5 and 4x16)`
#
# - `nn.Linear` computes `input @ weight.T + bias`. **mat1 is your data**: `8x5` = batch of 8, 5 features.
#   **mat2 is the layer's weight, transposed**: `4x16` = `in_features=4`, `out_features=16`.
# - A product `(a x b) @ (c x d)` needs `b == c`: here **5 ≠ 4**. The first number of mat2 is what the layer was
#   built for; the second number of mat1 is what really arrived.
# - Which layer? The one with `in_features=4, out_features=16` (print the model). Then trace **backward**: who produced a
#   tensor with 5 features? Here, the data. Deeper in a network it is the layer (or the `view`) just before.
#
# A convolution says the same in its own words: its weight is `[out_channels, in_channels, kH, kW]`.

# %% tags=["raises-exception"]
conv_net = nn.Sequential(nn.Conv2d(3, 8, kernel_size=3, padding=1), nn.ReLU())   # written for RGB images
gray = torch.rand(8, 1, 12, 12)                                                   # our images are grayscale
conv_net(gray)

# %% [markdown]
# `weight of size [8, 3, 3, 3]` = 8 filters over **3** input channels;
# `expected input[8, 1, 12, 12] to have 3 channels, but got 1`. The input's shape is `[N, C, H, W]`: channel count is its
# second number.
#
# Now a conv built for grayscale, fed images that **lack** the channel dimension, `(8, 12, 12)` as they come out of
# a NumPy array. PyTorch accepts `(C, H, W)` as *one unbatched image*, so it reads your batch of 8 as 8 channels:

# %% tags=["raises-exception"]
conv1 = nn.Conv2d(1, 8, kernel_size=3, padding=1)
images = torch.rand(8, 12, 12)          # 8 grayscale images, no channel dimension
conv1(images)


# %% [markdown]
# Look at `input[1, 8, 12, 12]`: PyTorch added a batch dimension of 1 and took your batch size for the channel count.
# The fix is `images.unsqueeze(1)`, giving `(8, 1, 12, 12)`.
#
# ### A flatten that eats the batch
#
# A small CNN, written for 12x12 images. Its author sized the flatten and the first `Linear` for the conv output
# **before** pooling (8 x 12 x 12 = 1152), but the pool halves each side: 8 x 6 x 6 = 288 numbers per image.
# `view(-1, 1152)` does not fail: 8 images x 288 = 2304 numbers fit exactly into **2 rows** of 1152. The error comes later,
# in the loss.

# %%
class BrokenNet(nn.Module):
    def __init__(self, classes=3):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, kernel_size=3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(8 * 12 * 12, classes)       # sized as if there were no pooling

    def forward(self, x):
        x = self.pool(torch.relu(self.conv(x)))
        x = x.view(-1, 8 * 12 * 12)                     # -1 lets PyTorch change the batch size
        return self.fc(x)

broken = BrokenNet()
xb = torch.rand(8, 1, 12, 12)
yb = torch.randint(0, 3, (8,))

# %% tags=["raises-exception"]
loss = F.cross_entropy(broken(xb), yb)

# %% [markdown]
# `Expected input batch_size (2) to match target batch_size (8)`: the **input** is the logits (2 rows), the **target**
# the labels (8). Logits must have one row per sample, so something between the images and the logits merged samples.
# The `Linear` did not complain because it was sized with the same wrong number as the `view`: the two mistakes hid each
# other. Never `view(-1, k)` after a conv: flatten with `x.flatten(1)` or `nn.Flatten()`, which keep dimension 0 as the
# batch, so that a wrongly sized `Linear` fails right where it is (see the trace below).
#
# ### Dtypes: labels as floats, Double meets Float
#
# Labels read from a CSV or a NumPy array are often floats. `CrossEntropyLoss` wants **class indices**, as integers:

# %% tags=["raises-exception"]
logits = torch.randn(8, 3)
labels = torch.tensor([0., 2., 1., 1., 0., 2., 2., 1.])      # class ids, but stored as float
F.cross_entropy(logits, labels)

# %% [markdown]
# The words depend on your torch version; both say that the **target** (the labels) has the wrong dtype:
# - torch ≥ 2.13: `expected target dtype to be Long or Byte, but got Float`: it names the target.
# - torch ≤ 2.12: `expected scalar type Long but found Float`: it does not say which tensor. The logits are meant to be
#   float, so the Long that was expected is the target's.
#
# `Long` is `int64`, `Float` is `float32`, `Byte` is `uint8`: class indices are integers. Convert the labels with
# `labels.long()`.
#
# Labels as a column, shape `(N, 1)` (one per CSV row), fail in other words:

# %% tags=["raises-exception"]
F.cross_entropy(logits, labels.long().unsqueeze(1))      # labels of shape (8, 1)

# %% [markdown]
# `0D or 1D target tensor expected, multi-target not supported`: one class index per sample means shape `(N,)`.
# `labels.squeeze(1)` removes that dimension. Not `labels.squeeze()`: it removes **every** dimension of size 1, and on a
# batch of one it also removes the batch, leaving a 0-d tensor.
#
# And features from NumPy are `float64` (`torch.from_numpy` keeps NumPy's dtype), while a model's weights are `float32`:

# %% tags=["raises-exception"]
features = torch.rand(8, 4, dtype=torch.float64)   # as torch.from_numpy(array) gives
model(features)                                    # the 4-feature model from above

# %% [markdown]
# `Double` is `float64`, `Float` is `float32`. mat1 (your data) is Double, mat2 (the weight) is Float.
# Convert the **data** (`features.float()`), not the model: `model.double()` doubles memory and is much slower on GPUs.
#
# ### The silent one: MSELoss on `(N, 1)` against `(N,)`
#
# A regression head `nn.Linear(8, 1)` outputs `(N, 1)`; targets often come as `(N,)`. Elementwise ops **broadcast**:
# `(6, 1) - (6,)` is a `(6, 6)` table comparing every prediction with every target. No error: a warning, and a wrong loss.

# %%
tc.seed_everything(0)
head = nn.Linear(8, 1)
xr, yr = tc.regression(n=6, features=8, seed=0).tensors
target = yr.squeeze(1)                      # (6,), as a loader often hands it over
pred = head(xr)                             # (6, 1)

with warnings.catch_warnings(record=True) as caught:   # we show the warning here instead of on stderr
    warnings.simplefilter("always")
    wrong = F.mse_loss(pred, target)
print("PyTorch warned:", caught[0].message)
print("pred", tuple(pred.shape), "- target", tuple(target.shape), "->", tuple((pred - target).shape))
right = F.mse_loss(pred.squeeze(1), target)
print(f"loss as written: {wrong.item():.4f}   the real MSE: {right.item():.4f}")
by_hand = (pred - target).pow(2).mean()     # written by hand: the same wrong number, and NO warning at all
print(f"by hand: {by_hand.item():.4f}")

# %% [markdown]
# ## 2 · Diagnose: trace the shapes, layer by layer
#
# `shapes.trace(model, batch)` runs the model once on a sample batch with forward hooks. It prints the shape and dtype
# entering and leaving each layer, and when PyTorch raises, it names the **first layer whose input does not fit**, next to
# PyTorch's own message. With `loss_fn=` and `target=` it traces the loss too.
#
# The `BrokenNet`: the table shows the batch shrinking from 8 to 2 between `pool` and `fc`, the `view` in between.

# %%
rows = shapes.trace(broken, xb, target=yb, loss_fn=nn.CrossEntropyLoss())

# %% [markdown]
# The same model written as an `nn.Sequential` with `nn.Flatten()` keeps the batch, and the oversized `Linear`
# now fails where it should, named by the trace: it expects 1152 features, 288 arrive.

# %%
seq = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 12 * 12, 3))
rows = shapes.trace(seq, xb)
print("\nthe failing row:", rows[-1]["layer"], rows[-1]["type"], "| input", rows[-1]["input"])

# %% [markdown]
# Dtypes show up in the same table (a `Linear` and a conv each say it their own way), and the regression head's silent
# broadcast appears on the loss row:

# %%
shapes.trace(model, features);
print()
shapes.trace(conv1, images.unsqueeze(1).double());     # the grayscale conv from above, fed float64 images
print()
shapes.trace(head, xr, target=target, loss_fn=nn.MSELoss());


# %% [markdown]
# ## 3 · Fix it
#
# The pipeline: a loader hands over grayscale images as `float64` of shape `(N, H, W)` and their labels as `float64`
# class ids of shape `(N,)`, just as NumPy arrays give them. Write three small functions.
#
# **3a.** `prepare_batch(images, labels)`: return `(inputs, targets)` ready for a conv net and `CrossEntropyLoss`:
# inputs `float32` of shape `(N, 1, H, W)`, targets `int64` of shape `(N,)`. Keep the values as they are, whatever their range
# (no clamping, no rescaling). It must work for a batch of one.

# %% nbgrader={"grade": false, "grade_id": "prepare_batch", "locked": false, "schema_version": 3, "solution": true, "task": false}
def prepare_batch(images, labels):
    """float64 (N, H, W) images and float64 (N,) labels -> float32 (N, 1, H, W) inputs and int64 (N,) targets."""
    ### BEGIN SOLUTION
    return images.unsqueeze(1).float(), labels.long()
    ### END SOLUTION


# %% [markdown]
# **3b.** `build_model(size, classes)`: the `BrokenNet`, repaired, for square images of any even `size`: a
# `Conv2d(1, 8, kernel_size=3, padding=1)`, a ReLU, a `MaxPool2d(2)`, a flatten that **keeps the batch**, and a `Linear`
# sized for what really reaches it, giving `classes` logits. Input `(N, 1, size, size)`, output `(N, classes)`.
# Create every layer when the model is built (the caller makes its optimizer from `model.parameters()` right after
# `build_model`), and compute each sample from its own pixels only.

# %% nbgrader={"grade": false, "grade_id": "build_model", "locked": false, "schema_version": 3, "solution": true, "task": false}
def build_model(size=12, classes=3):
    """A small CNN: (N, 1, size, size) float32 images -> (N, classes) logits."""
    ### BEGIN SOLUTION
    return nn.Sequential(
        nn.Conv2d(1, 8, kernel_size=3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(8 * (size // 2) ** 2, classes),
    )
    ### END SOLUTION


# %% [markdown]
# **3c.** `regression_loss(pred, target)`: the mean squared error of a regression head's output `pred` (`float32`,
# shape `(N, 1)`) against targets as the loader gives them (`float64`, shape `(N,)`). Return a scalar tensor in `pred`'s
# dtype, `float32` (whatever torch's default dtype), that is the real MSE (no broadcasting, for any `N`, a batch of one
# included; no float64 creeping into the loss and its backward: the check watches every operation inside your
# function).

# %% nbgrader={"grade": false, "grade_id": "regression_loss", "locked": false, "schema_version": 3, "solution": true, "task": false}
def regression_loss(pred, target):
    """MSE of pred (N, 1) float32 against target (N,) float64, as a float32 scalar."""
    ### BEGIN SOLUTION
    return F.mse_loss(pred.squeeze(1), target.to(pred.dtype))
    ### END SOLUTION


# %% [markdown]
# ## 4 · Check
#
# Each check runs your function forward **and** backward on several batch sizes (including a batch of one) and compares
# shapes, dtypes and loss values with PyTorch's own computation; `build_model`'s network must compute the layers of 3b with
# its own weights. It prints `✓ ...` when your code behaves, and otherwise raises `CheckFailed` saying what was expected,
# what happened and a hint when the cause is clear. The grader runs more cases than you see here: other batch sizes, image
# sizes (for `prepare_batch`, not all square and some with odd sides), class counts and value scales.

# %% nbgrader={"grade": true, "grade_id": "check_prepare_batch", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""prepare_batch gives float32 (N, 1, H, W) inputs and int64 (N,) targets"""
from trainclinic.checks import shape_dtype as checks
checks.check_prepare_batch(prepare_batch)
### BEGIN HIDDEN TESTS
for seed in (1, 2, 3):
    checks.check_prepare_batch(prepare_batch, seed=seed)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "check_build_model", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""build_model maps (N, 1, size, size) images to (N, classes) logits for any batch size"""
from trainclinic.checks import shape_dtype as checks
checks.check_build_model(build_model)
### BEGIN HIDDEN TESTS
for seed in (1, 2, 3):
    checks.check_build_model(build_model, seed=seed)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "check_regression_loss", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""regression_loss is the real float32 MSE of (N, 1) predictions against (N,) float64 targets"""
from trainclinic.checks import shape_dtype as checks
checks.check_regression_loss(regression_loss)
### BEGIN HIDDEN TESTS
for seed in (1, 2, 3):
    checks.check_regression_loss(regression_loss, seed=seed)
### END HIDDEN TESTS

# %% [markdown]
# ## 5 · Explore
#
# First your whole pipeline at work: `prepare_batch` and `build_model` train the CNN on small synthetic images (a
# horizontal bar, a vertical bar or a diagonal, in noise), with `tc.LivePlot` drawing the loss and the gradient norm.

# %%
def load_images(n=512, size=12, seed=0):
    """Images and labels the way a NumPy-based loader hands them over: float64 (n, size, size) and float64 (n,)."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 3, (n,), generator=g)
    where = torch.randint(0, size, (n,), generator=g)
    images = 0.5 * torch.rand(n, size, size, generator=g, dtype=torch.float64)
    for i in range(n):
        if labels[i] == 0:
            images[i, where[i], :] += 1.0                          # a horizontal bar
        elif labels[i] == 1:
            images[i, :, where[i]] += 1.0                          # a vertical bar
        else:
            images[i] += torch.eye(size, dtype=torch.float64)      # a diagonal
    return images, labels.to(torch.float64)

train_images, train_labels = load_images()

def train_cnn(lr=0.05, batch_size=32, epochs=3, plot=None):
    tc.seed_everything(0)
    net = build_model(12, 3).to(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    history = {"step": [], "loss": [], "grad_norm": []}
    step = 0
    for epoch in range(epochs):
        order = torch.randperm(len(train_labels), generator=torch.Generator().manual_seed(epoch))
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            inputs, targets = prepare_batch(train_images[idx], train_labels[idx])
            inputs, targets = inputs.to(device), targets.to(device)
            optimizer.zero_grad()
            loss = F.cross_entropy(net(inputs), targets)
            loss.backward()
            optimizer.step()
            history["step"].append(step); history["loss"].append(loss.item()); history["grad_norm"].append(tc.grad_norm(net))
            if plot is not None:
                plot.update(step, history["loss"][-1], history["grad_norm"][-1])
            step += 1
    return history

with tc.LivePlot("lesson 02: the repaired CNN", every=8) as plot:
    history = train_cnn(plot=plot)
print(plot.summary())

# %% [markdown]
# Now the silent bug, live. A regression MLP is trained with your `regression_loss`, or, with the switch `broadcast_bug`
# on (*show the failure*), with `F.mse_loss(pred, target)` on `(N, 1)` against `(N,)`. The curve shows the **real** MSE
# either way. With the bug, the model is pushed towards predicting one number for every sample (the best constant for the
# all-pairs loss, the mean), so the real error stalls, and the predictions lose their spread (red line under the plot).
# Move the learning rate and the batch size too.

# %%
import math

reg_x, reg_y = tc.regression(n=512, features=8, noise=0.1, seed=0).tensors
reg_x, reg_t = reg_x.to(device), reg_y.squeeze(1).double().to(device)   # targets as the loader gives them: (N,) float64

def train_regression(lr=0.02, batch_size=32, broadcast_bug=False, epochs=6):
    tc.seed_everything(0)
    net = tc.mlp(inputs=8, hidden=32, outputs=1).to(device)
    optimizer = torch.optim.SGD(net.parameters(), lr=lr, momentum=0.9)
    history = {"step": [], "loss": [], "grad_norm": []}
    step = 0
    for epoch in range(epochs):
        order = torch.randperm(len(reg_t), generator=torch.Generator().manual_seed(epoch))
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            pred = net(reg_x[idx])
            optimizer.zero_grad()
            if broadcast_bug:
                with warnings.catch_warnings():           # the warning would repeat every step
                    warnings.simplefilter("ignore")
                    loss = F.mse_loss(pred, reg_t[idx].float())
            else:
                loss = regression_loss(pred, reg_t[idx])
            loss.backward()
            optimizer.step()
            real = regression_loss(pred.detach(), reg_t[idx]).item()
            history["step"].append(step); history["loss"].append(real); history["grad_norm"].append(tc.grad_norm(net))
            step += 1
    with torch.no_grad():
        spread, wanted = net(reg_x).std().item(), reg_t.std().item()
    if broadcast_bug:
        history["failure"] = (f"F.mse_loss on ({batch_size}, 1) vs ({batch_size},) compared all {batch_size}x{batch_size} "
                              f"pairs: real MSE {history['loss'][0]:.3f} -> {history['loss'][-1]:.3f}, predictions' "
                              f"spread {spread:.3f} vs the targets' {wanted:.3f}")
    elif not all(math.isfinite(v) for v in history["loss"]):
        history["failure"] = f"the loss became non-finite at lr={lr:.3g}"
    return history

for bug in (False, True):
    h = train_regression(broadcast_bug=bug)
    print(f"broadcast_bug={bug}: real MSE {h['loss'][0]:.3f} -> {h['loss'][-1]:.3f}", h.get("failure", ""))
tc.explore(train_regression, title="regression: real MSE", failure={"broadcast_bug": True},
           lr=("log", 1e-3, 0.1, 0.02), batch_size=("int", 16, 128, 32), broadcast_bug=("bool", False));

# %% [markdown] nbgrader={"grade": false, "grade_id": "recap", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 6 · Troubleshooting
#
# | Symptom | Cause | Fix |
# |---|---|---|
# | `mat1 and mat2 shapes cannot be multiplied (<A>x<B> and <C>x<D>)`, B ≠ C | a `Linear` with `in_features=C` gets B features | size the layer for B (or fix what produces B); `shapes.trace` shows where B comes from |
# | `weight of size [<O>, <C>, <k>, <k>], expected input[<...>] to have <C> channels, but got <K>` | wrong channel count, or no channel dimension at all (batch read as channels) | `images.unsqueeze(1)` for grayscale; match `in_channels` |
# | `Expected input batch_size (<A>) to match target batch_size (<B>)` | a `view(-1, k)` / `reshape` merged or split samples | `x.flatten(1)` or `nn.Flatten()`; size the next `Linear` to match |
# | torch ≥ 2.13: `expected target dtype to be Long or Byte, but got Float` | class labels stored as floats | `labels.long()` |
# | torch ≤ 2.12: `expected scalar type Long but found Float` (from a loss) | class labels stored as floats | `labels.long()` |
# | `0D or 1D target tensor expected, multi-target not supported` | labels of shape `(N, 1)` | `labels.squeeze(1)` (not `.squeeze()`: a batch of one becomes 0-d) |
# | `mat1 and mat2 must have the same dtype, but got Double and Float` | NumPy float64 data into a float32 model | `x.float()` on the data |
# | `Input type (double) and bias type (float) should be the same` | the same, in a conv | `x.float()` |
# | warning `Using a target size (<...>) that is different to the input size (<...>)`, loss stalls | `(N, 1)` vs `(N,)` broadcast in an elementwise loss | make shapes equal: `pred.squeeze(1)` or `target.unsqueeze(1)` |
# | loss is `float64`, training slow | float64 targets promote the loss | `target.to(pred.dtype)` |
#
# **Recap.** Read the two shapes (or dtypes) in the message: one is your data, one is the layer. Find the layer by its
# sizes, then trace backward to whatever produced the wrong shape: `shapes.trace(model, batch)` prints every layer's
# shape and dtype and names the first one whose input does not fit. Keep dimension 0 the batch (`flatten(1)`), labels
# `int64`, data `float32`, and make a loss's two shapes **equal**: broadcasting never raises, it just computes something else.
