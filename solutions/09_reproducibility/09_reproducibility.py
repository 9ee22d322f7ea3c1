# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false, "task": false}
# # Lesson 09 · Reproducibility
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/trainclinic/trainclinic/blob/main/notebooks/09_reproducibility/09_reproducibility.ipynb)
#
# **The failure:** you run the same script twice and get two different models. Nothing raises: the weights, the
# loss curve and the metric just differ. Or the runs match, but every DataLoader worker hands out the same
# "random" augmentations, epoch after epoch. And when you ask PyTorch for determinism, it may refuse an operation:
# `RuntimeError: put_ does not have a deterministic implementation, but you set 'torch.use_deterministic_algorithms(True)'`.
#
# **What you will learn**
# - the sources of randomness in a training run (Python's `random`, NumPy, torch, the DataLoader's shuffling and
#   workers) and how to seed each one;
# - why a seeded run still differs in another process: a `set` of strings is ordered by a hash that Python salts
#   per process (`PYTHONHASHSEED`);
# - the DataLoader worker bug as it exists today: a Dataset holding its own NumPy Generator gives the same
#   augmentations in every worker, and the same ones every epoch; and the `worker_init_fn` that fixes it;
# - what seeds and `torch.use_deterministic_algorithms` promise, and what they do not (the same bits with another
#   number of threads, on another machine, or with another PyTorch version);
# - to find the first stage where two runs part (a fingerprint, a hash of the weights, per stage), and to write a
#   pipeline that reproduces bit-for-bit in two separate processes.
#
# **Prerequisites:** a PyTorch training loop and a `DataLoader`. Runs on the CPU (every device seeds the same way).

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false, "task": false}
# Setup. In Colab this installs trainclinic once, with --no-deps: Colab's own torch is never touched.
import importlib.util, subprocess, sys
if importlib.util.find_spec("trainclinic") is None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "git+https://github.com/trainclinic/trainclinic@main"], check=True)
import torch
import trainclinic as tc
torch.set_num_threads(1)  # tiny models: one CPU thread is the fastest (and section 1 changes it on purpose)
device = tc.pick_device()
tc.banner(device);

# %% [markdown] nbgrader={"grade": false, "grade_id": "reproduce_md", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 1 · Reproduce the failure
#
# A tiny text classifier: sixteen short reviews, a vocabulary, bag-of-words counts, a `Linear` layer, SGD for two
# epochs. The Dataset augments each review (it drops words and adds a little noise to the counts) with its **own**
# NumPy Generator, `self.rng`, as many augmentation pipelines do. `fingerprint(model)` hashes every bit of the
# weights: two runs match only when their fingerprints do.
#
# A fresh Python interpreter starts now, in the background (it imports torch once, a few seconds): section 1 and
# the checks run code in it, each call in a fork of the freshly started interpreter, as a second run of your script
# would be. Its `PYTHONHASHSEED` is chosen to differ from this kernel's (`processes.other_hashseed()` checks it).

# %%
import random
import numpy as np
from torch import nn
from torch.utils.data import DataLoader, Dataset
from trainclinic import processes
from trainclinic.fingerprint import fingerprint, first_difference

other = processes.interpreter(hashseed=processes.other_hashseed())
processes.warm_workers()  # torch 2.4: spares each DataLoader worker seconds of imports (see processes.warm_workers)

TEXTS = ["a great fun film", "great acting and a fun plot", "a dull plot", "dull and slow", "fun for all",
         "slow and dull acting", "a great cast", "the plot was dull", "great fun", "the cast was great",
         "slow film", "a dull cast", "fun and great", "the acting was slow", "all great", "a slow dull film"]
LABELS = [1, 1, 0, 0, 1, 0, 1, 0, 1, 1, 0, 0, 1, 0, 1, 0]


class Reviews(Dataset):
    """Bag-of-words counts of each review, augmented: words dropped and noise added with the Dataset's own Generator."""

    def __init__(self, texts, labels, vocab, seed=0):
        self.texts, self.labels, self.vocab = texts, labels, vocab
        self.rng = np.random.default_rng(seed)   # created once, in the main process

    def __len__(self):
        return len(self.texts)

    def __getitem__(self, i):
        counts = torch.zeros(len(self.vocab))
        for word in self.texts[i].split():
            counts[self.vocab[word]] += 1
        keep = torch.from_numpy(self.rng.random(len(self.vocab)) > 0.2)                 # word dropout
        noise = torch.from_numpy(self.rng.normal(0, 0.05, len(self.vocab))).float()   # noise
        return counts * keep + noise, self.labels[i]


def train_once(seed=None, order=sorted, workers=0, init=None, epochs=2, plot=None):
    """One training run; `order` orders the vocabulary's words (sorted, or list: the set's own order).
    Returns fingerprints of the stages: vocabulary, initial weights, batches, final weights.
    `plot` (a tc.LivePlot) draws every step's loss and gradient norm."""
    if seed is not None:
        random.seed(seed); np.random.seed(seed); torch.manual_seed(seed)
    words = order({w for t in TEXTS for w in t.split()})
    vocab = {w: i for i, w in enumerate(words)}
    model = nn.Linear(len(vocab), 2)
    stages = {"vocabulary": ",".join(words)[:40], "initial weights": fingerprint(model)}
    loader = DataLoader(Reviews(TEXTS, LABELS, vocab), batch_size=4, shuffle=True, num_workers=workers,
                        worker_init_fn=init)
    batches = []
    for epoch in range(epochs):
        for x, y in loader:
            batches.append(x)
            model.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            if plot is not None:
                plot.update(len(batches) - 1, loss.item(), tc.grad_norm(model))
            with torch.no_grad():      # plain SGD, lr 0.5, written out
                for p in model.parameters():
                    p -= 0.5 * p.grad
    stages["batches"] = fingerprint(batches)
    stages["final weights"] = fingerprint(model)
    return stages


print("in this process, no seed:    ", train_once()["final weights"], train_once()["final weights"])
print("in this process, seed 0:     ", train_once(0)["final weights"], train_once(0)["final weights"])

# %% [markdown]
# Watch one unseeded run train, its loss and gradient norm live. Run the cell again: without a seed, every run
# draws other curves (another initialisation, another order, other augmentations); with `train_once(0, ...)` every
# run draws the same ones.

# %%
with tc.LivePlot("no seed: one run among many possible ones", every=2) as plot:
    train_once(epochs=6, plot=plot)
print(plot.summary())

# %% [markdown]
# In one process, seeding makes two runs match. A second run of a script is a second **process**, though. Below,
# the same `train_once` runs here and in the fresh interpreter at the same time (`processes.here_and_in` sends the
# function there), first without a seed, then with seed 0, then with seed 0 and the vocabulary in the `set`'s own
# order (`order=list`), as `{w: i for i, w in enumerate(set(words))}` would build it:

# %%
for label, args in [("no seed", (None,)), ("seed 0", (0,)), ("seed 0, set order", (0, list))]:
    a, b = processes.here_and_in(other, train_once, *args, timeout=60)
    verdict = "identical" if a == b else f"DIFFERENT from the {next(k for k in a if a[k] != b[k])} on"
    print(f"{label:18} this process: {a['final weights']}  the other: {b['final weights']}  {verdict}")
print("the set-ordered vocabulary here:", a["vocabulary"], "...")
print("                   in the other:", b["vocabulary"], "...")

# %% [markdown]
# ### How to read it
#
# - **No seed: different in every run**, even in one process. Python's `random`, NumPy's global generator and
#   torch's each start from a seed drawn from the operating system, and the DataLoader's shuffle draws from torch's.
# - **Seed 0: identical**, in one process and in two. `random.seed`, `np.random.seed` and `torch.manual_seed` (which
#   seeds every device) fix every draw, if every draw comes from them. Here the Dataset's own Generator is seeded
#   too: `np.random.default_rng(seed)` in `__init__`.
# - **Seed 0 and a set-ordered vocabulary: different again**, from the vocabulary on (the line names the first
#   stage that differs). A `set` of strings is ordered by the strings' hashes, and Python salts that hash with a
#   random value per process (or with `PYTHONHASHSEED`, when it is set before Python starts). The two processes
#   salt differently: the same words, two orders, so every word gets another column, and the weights differ. No seed reaches it: the order is fixed
#   when the interpreter starts, so setting `os.environ["PYTHONHASHSEED"]` inside a running program changes
#   nothing (only in the processes it starts). The fix is to not depend on it: `sorted(set(words))`.
#
# The hash salt, with nothing else involved: the same line in five new interpreters (no torch: milliseconds each).

# %%
import os

def set_order(hashseed):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONHASHSEED"}
    if hashseed is not None:
        env["PYTHONHASHSEED"] = str(hashseed)
    code = "print(list({'great', 'fun', 'dull', 'slow', 'plot', 'cast', 'acting', 'film'}))"
    return subprocess.run([sys.executable, "-S", "-c", code], env=env, capture_output=True, text=True, timeout=30).stdout.strip()

for hashseed in [None, None, 1, 1, 2]:
    print(f"PYTHONHASHSEED={hashseed if hashseed is not None else 'unset':6}", set_order(hashseed))

# %% [markdown]
# Unset, two runs usually order the set differently; `1` and `1` always agree; `1` and `2` differ. (Dicts keep
# insertion order, so `dict` and `list` are safe; `set`, `frozenset` and anything built by iterating over them are
# not.)
#
# ### The DataLoader worker bug, as it is today
#
# With `num_workers=2`, the DataLoader starts two worker processes, and each gets a **copy** of the Dataset, its
# `self.rng` included: the same Generator in the same state in both. Each worker seeds Python's `random`, NumPy's
# global generator and torch for itself (PyTorch has done that since 1.9), but it cannot know about a Generator
# the Dataset made for itself. Eight reviews, two workers, two epochs; the noise each item got:

# %%
def noise_of(loader, epochs=2):
    """The first noise value of every item the loader gives, epoch after epoch (exact: count distinct ones on these,
    round only to print)."""
    values = []
    for epoch in range(epochs):
        for x, y in loader:
            values.append((x - x.round()).select(1, 0).tolist())
    return values

vocab = {w: i for i, w in enumerate(sorted({w for t in TEXTS for w in t.split()}))}
eight = Reviews(TEXTS[:8], LABELS[:8], vocab)
seen = noise_of(DataLoader(eight, batch_size=2, num_workers=2))
print("\n".join(f"epoch {e}: {[round(v, 4) for v in sum(seen[e * 4:(e + 1) * 4], [])]}" for e in range(2)))
flat = sum(seen, [])
print(f"{len(set(flat))} distinct values out of {len(flat)}")

# %% [markdown]
# Worker 0 gives batches 0 and 2, worker 1 batches 1 and 3: worker 1 repeats worker 0 draw for draw, and epoch 1
# repeats epoch 0, because every epoch starts new workers from the same copy. Of the sixteen augmentations you paid
# for, four are distinct, and the "random" ones never change. The famous version of this bug (the global `np.random` in `__getitem__`, pytorch
# issue #5059) no longer happens; this one does, in every PyTorch version.
#
# A common first fix seeds NumPy's global generator in each worker from the worker's seed. It fails, and would
# not touch `self.rng` anyway: the worker's seed is a 64-bit number, and `np.random.seed` takes 32 bits.

# %%
def seed_global_numpy(worker_id):   # a common first attempt
    np.random.seed(torch.utils.data.get_worker_info().seed)

try:
    next(iter(DataLoader(eight, batch_size=2, num_workers=2, worker_init_fn=seed_global_numpy)))
except ValueError as err:
    print(str(err).splitlines()[0], "...")
    print(str(err).strip().splitlines()[-1])
    err.__traceback__ = None  # its frames hold the loader's iterator: freed now, its workers stop now, not at the
                              # next garbage collection (whose shutdown then waits 5 s for each worker)

# %% [markdown]
# ### What determinism does not promise
#
# Seeds make the *same program* draw the *same numbers*. The same arithmetic is another matter. A sum over
# millions of values is split among the CPU threads, each thread adds its part, and the parts are added at the end:
# with another number of threads the additions happen in another order, and floating point addition is not
# associative. One tensor, three thread counts:

# %%
big = torch.randn(10_000_000, generator=torch.Generator().manual_seed(0))
sums = {}
for threads in (1, 2, 3):
    torch.set_num_threads(threads)
    sums[threads] = big.sum().item()
torch.set_num_threads(1)
print("the same sum on 1, 2, 3 threads:", sums)
print("bit-for-bit equal:", len(set(sums.values())) == 1)
del big

# %% [markdown]
# Small tensors stay on one thread (PyTorch splits work above a size threshold), so a tiny model can look
# thread-proof until the data grows. Other machines (another CPU instruction set, another GPU, another BLAS) and
# other PyTorch versions pick other kernels for the same operation; PyTorch's documentation says it plainly:
#
# > Completely reproducible results are not guaranteed across PyTorch releases, individual commits, or different
# > platforms.
#
# So compare fingerprints between runs on the same machine, the same versions and the same thread count (and
# record them: `tc.banner` prints the versions).
#
# ### `torch.use_deterministic_algorithms(True)`
#
# Seeds cannot help an operation that is nondeterministic by construction (on a GPU, many run their atomic
# additions in whatever order the threads arrive). `torch.use_deterministic_algorithms(True)` makes PyTorch use a
# deterministic implementation where it has one, and **raise** where it has none. On the CPU most operations are
# deterministic already; `Tensor.put_` is one that is not. The mode also fills the memory `torch.empty` hands out
# with NaN (`torch.utils.deterministic.fill_uninitialized_memory`), so reading memory you never wrote shows up
# instead of giving yesterday's garbage:

# %% tags=["raises-exception"]
torch.use_deterministic_algorithms(True)
try:
    print("torch.empty(3) in deterministic mode:", torch.empty(3))
    print("fill_uninitialized_memory:", torch.utils.deterministic.fill_uninitialized_memory)
    target = torch.zeros(5)
    target.put_(torch.tensor([0, 2]), torch.tensor([1.0, 2.0]))
finally:
    torch.use_deterministic_algorithms(False)   # back to the default, whatever happened

# %% [markdown]
# How to read it: the operation (`put_`), what you asked for (`use_deterministic_algorithms(True)`), and your
# options. `torch.use_deterministic_algorithms(True, warn_only=True)` turns the error into a `UserWarning` and runs
# the nondeterministic version; or rewrite the step with an operation that has a deterministic implementation (for
# `put_`, indexing: `target.view(-1)[index] = values`). On a GPU two more messages are common, and cannot be shown
# on a CPU: cuBLAS asks for the environment variable `CUBLAS_WORKSPACE_CONFIG=:4096:8` (set before the first CUDA
# call), and, on a real GPU, `index_add_cuda_ does not have a deterministic implementation` (or another CUDA
# kernel's name) comes from a backward of `index_add_`, `scatter_add_` and the like. The mode costs speed on a GPU;
# it is a debugging and auditing tool more than a default.

# %% [markdown]
# ## 2 · Diagnose: the first stage where two runs part
#
# A final fingerprint says *whether* two runs differ, not *where*. `train_once` fingerprints each stage in order:
# the vocabulary, the initial weights, the batches (data order and augmentation), the final weights. The first
# stage that differs is where to look; everything after it differs because of it. Here the worker bug (two
# workers, the Dataset's own Generator) in this process, next to the set-ordered vocabulary here and in the other:

# %%
def first_stage(a, b):
    """The first stage where two runs' fingerprints differ, or None."""
    return next((stage for stage in a if a[stage] != b[stage]), None)

run_a, run_b = train_once(0, workers=2), train_once(0, workers=2)
print("two workers, the same seed, one process -> first difference:", first_stage(run_a, run_b))
a, b = processes.here_and_in(other, train_once, 0, list, timeout=60)
print("set-ordered vocabulary, two processes   -> first difference:", first_stage(a, b))
print("between two models, first_difference():", first_difference(nn.Linear(3, 1), nn.Linear(3, 1)))

# %% [markdown]
# The worker bug is **reproducible**: the same seed gives the same duplicates in every run, so comparing two runs
# never finds it. Count distinct augmentations instead, as section 1 did. A run that is identical
# twice can still be wrong.

# %% [markdown] nbgrader={"grade": false, "grade_id": "fix_md", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 3 · Fix it
#
# Four functions that together make the pipeline reproduce bit-for-bit in another process.
#
# **3a.** `seed_everything(seed)`: seed Python's `random`, NumPy's global generator (`np.random.seed`) and torch
# (`torch.manual_seed`, which seeds every device), all with `seed`, at every call. After it, `random.random()`,
# `np.random.random()` and `torch.rand(3)` must give what they give after seeding each with `seed` yourself (a
# second call with the same seed starts every stream over again).

# %% nbgrader={"grade": false, "grade_id": "seed_everything", "locked": false, "schema_version": 3, "solution": true, "task": false}
def seed_everything(seed):
    """Seed random, numpy's global generator and torch with `seed`."""
    ### BEGIN SOLUTION
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    ### END SOLUTION


# %% [markdown]
# **3b.** `worker_init_fn(worker_id)`: the DataLoader calls it in each worker process before the worker's first
# item. There, `torch.utils.data.get_worker_info()` describes the worker: `.dataset` is the worker's own copy of
# the Dataset, and `.seed` is the worker's seed, which PyTorch draws anew for every worker at every epoch from
# the loader's generator (so it repeats when the generator is seeded). Give the worker's copy of the Dataset a new
# Generator, `dataset.rng = np.random.default_rng(...)`, seeded from the worker's seed. The augmentations must then
# all differ, across workers and across epochs, and repeat exactly when the loader's generator gets the same seed.

# %% nbgrader={"grade": false, "grade_id": "worker_init_fn", "locked": false, "schema_version": 3, "solution": true, "task": false}
def worker_init_fn(worker_id):
    """Reseed the worker's copy of the Dataset's Generator (dataset.rng) from the worker's own seed."""
    ### BEGIN SOLUTION
    info = torch.utils.data.get_worker_info()
    info.dataset.rng = np.random.default_rng(info.seed)
    ### END SOLUTION


# %% [markdown]
# **3c.** `build_vocab(texts)`: a dict `{word: index}` of every distinct word of the texts (words split on
# whitespace), with the indices 0, 1, ..., n-1, the **same** in every process whatever its `PYTHONHASHSEED`.

# %% nbgrader={"grade": false, "grade_id": "build_vocab", "locked": false, "schema_version": 3, "solution": true, "task": false}
def build_vocab(texts):
    """{word: index} for every distinct word, the same in every process."""
    ### BEGIN SOLUTION
    words = sorted({w for text in texts for w in text.split()})
    return {w: i for i, w in enumerate(words)}
    ### END SOLUTION


# %% [markdown]
# **3d.** `make_loader(dataset, seed)`: a `DataLoader` over `dataset` with `batch_size=4`, `shuffle=True`,
# `num_workers=2` and your `worker_init_fn`, whose shuffling and worker seeds come from its own
# `torch.Generator` seeded with `seed` itself (a new one for each loader, passed as `generator=`, not a number made
# from `seed`), so that the batches depend on `seed` alone, and are those of any other program's loader seeded so:
# not on how much of torch's global random stream the model's construction used, nor on other loaders.

# %% nbgrader={"grade": false, "grade_id": "make_loader", "locked": false, "schema_version": 3, "solution": true, "task": false}
def make_loader(dataset, seed):
    """A shuffled DataLoader with 2 workers whose batches and augmentations depend on `seed` alone."""
    ### BEGIN SOLUTION
    return DataLoader(dataset, batch_size=4, shuffle=True, num_workers=2, worker_init_fn=worker_init_fn,
                      generator=torch.Generator().manual_seed(seed))
    ### END SOLUTION


# %% [markdown]
# Your pipeline, here: the worker bug's eight reviews again, then the whole run twice in this process.

# %%
seed_everything(0)
seen = noise_of(make_loader(eight, seed=0))
flat = sum(seen, [])
print(f"with worker_init_fn: {len(set(flat))} distinct values out of {len(flat)}")

# %% [markdown] nbgrader={"grade": false, "grade_id": "check_md", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 4 · Check
#
# Each cell calls a check on your functions. It prints `✓ ...` when your code behaves, and otherwise raises
# `CheckFailed` saying what was expected, what happened and, when the cause is clear, a hint. `check_pipeline`
# first tries `build_vocab` and `make_loader` here (every word, every item of an epoch, the same batches whatever
# torch's global stream did before or after, and with another loader made in between), then runs the check's
# training pipeline with your four functions in two fresh interpreters whose `PYTHONHASHSEED` differ (your
# functions' compiled code travels there, as `processes.here_and_in` sends it), and compares the fingerprints stage
# by stage. The grader runs more cases (other seeds, sizes and worker counts).

# %% nbgrader={"grade": true, "grade_id": "check_seed_everything", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""seed_everything seeds random, numpy and torch with its seed"""
from trainclinic.checks import reproducibility as checks
checks.check_seed_everything(seed_everything)
### BEGIN HIDDEN TESTS
checks.check_seed_everything(seed_everything, seed=1)
checks.check_seed_everything(seed_everything, seed=2)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "check_worker_init_fn", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""worker_init_fn: augmentations distinct across workers and epochs, and repeated under the same loader seed"""
from trainclinic.checks import reproducibility as checks
checks.check_worker_init_fn(worker_init_fn)
### BEGIN HIDDEN TESTS
checks.check_worker_init_fn(worker_init_fn, seed=1)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "check_pipeline", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""the pipeline reproduces bit-for-bit in two processes whose PYTHONHASHSEED differs"""
from trainclinic.checks import reproducibility as checks
checks.check_pipeline(seed_everything, build_vocab, make_loader)
### BEGIN HIDDEN TESTS
checks.check_pipeline(seed_everything, build_vocab, make_loader, seed=1)
### END HIDDEN TESTS

# %% [markdown]
# ## 5 · Explore: seed, workers and threads
#
# Two runs of a pipeline like section 1's, in this process: run A on one thread, run B on `threads` threads. The
# features are normalised by a statistic over four million values (a mean), the kind of large reduction that
# PyTorch splits across threads. Switch the seed off, drop the `worker_init_fn`, change the workers or run B's
# threads, and watch which settings keep the two runs identical (the right panel: the loss gap between A and B,
# zero when they match) and which give duplicate augmentations. **show the failure** turns the seed off.

# %%
CORPUS = torch.rand(4_000_000, generator=torch.Generator().manual_seed(0))  # "all the unlabelled text"

def reseed_worker(worker_id):  # the explorer's own worker_init_fn
    info = torch.utils.data.get_worker_info()
    info.dataset.rng = np.random.default_rng(info.seed)

def one_run(seeded, workers, init, threads):
    torch.set_num_threads(threads)
    try:
        scale = CORPUS.mean()            # a reduction split across threads
    finally:
        torch.set_num_threads(1)
    if seeded:
        torch.manual_seed(0)
    model = nn.Linear(len(vocab), 2)
    data = Reviews(TEXTS[:8], LABELS[:8], vocab)  # a new Dataset: its Generator starts at seed 0 in every run
    loader = DataLoader(data, batch_size=2, shuffle=True, num_workers=workers, worker_init_fn=init,
                        generator=torch.Generator().manual_seed(0) if seeded else None,
                        persistent_workers=workers > 0)  # workers start once per run, not once per epoch
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    losses, noise = [], []
    for epoch in range(2):
        for x, y in loader:
            noise += (x - x.round())[:, 0].tolist()
            loss = nn.functional.cross_entropy(model(x / scale), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
    return losses, noise, fingerprint(model)

def run(seeded=True, workers=2, worker_init=True, threads_b=1):
    init = reseed_worker if worker_init else None
    loss_a, noise_a, print_a = one_run(seeded, workers, init, 1)
    loss_b, noise_b, print_b = one_run(seeded, workers, init, threads_b)
    history = {"step": list(range(len(loss_a))), "loss": loss_a, "loss_gap_A_B": [abs(a - b) for a, b in zip(loss_a, loss_b)]}
    problems = []
    if print_a != print_b:
        problems.append(f"the runs differ (fingerprints {print_a} and {print_b})")
    if len(set(noise_a)) < len(noise_a):
        problems.append(f"only {len(set(noise_a))} of {len(noise_a)} augmentations are distinct")
    if problems:
        history["failure"] = "; ".join(problems)
    return history

tc.explore(run, title="two runs", failure={"seeded": False}, seeded=("bool", True), workers=("int", 0, 2, 2),
           worker_init=("bool", True), threads_b=("int", 1, 3, 1));

# %% [markdown] nbgrader={"grade": false, "grade_id": "recap", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 6 · Troubleshooting
#
# | Symptom | Cause | Fix |
# |---|---|---|
# | two runs of the same script differ from the first step | nothing seeded (each generator starts from the OS) | seed `random`, `np.random` and torch at the start (`seed_everything`) |
# | seeded runs match in a notebook but not between two runs of the script | a set of strings iterated (vocabulary, labels, file lists): its order depends on `PYTHONHASHSEED` | `sorted(...)`; setting `os.environ["PYTHONHASHSEED"]` in the program is too late |
# | DataLoader workers repeat each other's augmentations, and every epoch repeats the first | a Generator made in the Dataset's `__init__` is copied into every worker | `worker_init_fn` reseeding `get_worker_info().dataset.rng` from `get_worker_info().seed` |
# | the shuffle order changes when you add a layer | the sampler draws from torch's global stream, which the model's construction also uses | `DataLoader(..., generator=torch.Generator().manual_seed(seed))` |
# | `ValueError: Seed must be between 0 and 2**32 - 1` in a worker | `np.random.seed(get_worker_info().seed)`: the worker seed is 64-bit | `np.random.default_rng(seed)` takes any size, or `seed % 2**32` |
# | the same seed, other bits on another thread count or machine | large reductions split across threads; other kernels elsewhere | compare runs with the same threads, machine and versions |
# | `RuntimeError: put_ does not have a deterministic implementation...` | `use_deterministic_algorithms(True)` and an op without a deterministic version | another op, or `warn_only=True` |
# | `torch.empty` gives NaN | deterministic mode fills uninitialised memory | write before you read (`torch.zeros`) |
#
# **Recap.** Seed every generator (`random`, NumPy, torch), give the DataLoader its own seeded `generator`, reseed a
# Dataset's own Generator in each worker from `get_worker_info().seed`, and never let a `set`'s order decide
# anything. Then two processes give the same bits, on the same machine, versions and thread count; that is all
# determinism promises. Fingerprint each stage to find where two runs part, and count distinct augmentations,
# because a run can be identical twice and still be wrong.
