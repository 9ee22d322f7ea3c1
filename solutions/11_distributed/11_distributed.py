# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false, "task": false}
# # Lesson 11 · Distributed data parallel
#
# [![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.research.google.com/github/trainclinic/trainclinic/blob/main/notebooks/11_distributed/11_distributed.ipynb)
#
# **The failure:** a training loop that ran on one process, moved to `DistributedDataParallel` (DDP) on two: the
# second iteration raises `Expected to have finished reduction in the prior iteration before starting a new one`;
# a barrier on one rank only ends in gloo's `for recv operation to complete` timeout (or hangs forever without a
# timeout); and the silent ones: every rank trains on the same data, every epoch in the same order, a checkpoint
# written by every rank that does not load (`Missing key(s) in state_dict`).
#
# **What you will learn**
# - to run real DDP with `torch.distributed` on the gloo backend, in real processes on this machine (127.0.0.1); on
#   GPUs the same code runs with the NCCL backend, launched by `torchrun`;
# - why a function defined in a notebook cell cannot be started with `mp.spawn`, and how to launch from a notebook;
# - to reproduce and read DDP's own errors: unused parameters, a rank-dependent branch, a barrier on one rank,
#   uneven inputs (and `Join`), validation through the wrapper on one rank, the checkpoint race and the `module.`
#   prefix, and SyncBatchNorm on a CPU;
# - to fix a DDP training function, checked in 2 real processes.
#
# **Prerequisites:** a PyTorch training loop (`zero_grad`, `backward`, `step`), a `DataLoader`, and
# `state_dict()` / `load_state_dict()` (lesson 08). No GPU needed: everything runs on the CPU with gloo.

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
# DDP runs one process per **rank** (one per GPU, on GPUs). Each rank holds a full copy of the model, reads its own
# part of the data, and after every `backward()` the ranks **all-reduce** (average) their gradients, so every rank
# takes the same step and the copies stay identical. The ranks find each other through a *process group*:
# `torch.distributed.init_process_group("gloo")` on the CPU (`"nccl"` on GPUs), with the address and port of rank 0 in
# `MASTER_ADDR` / `MASTER_PORT`.
#
# ### Launching from a notebook
#
# The usual launchers start **fresh** Python interpreters: `torchrun` runs a script, `torch.multiprocessing.spawn`
# (`mp.spawn`) pickles the function *by name* and the new interpreter imports it. A function defined in a notebook
# cell lives in the kernel's `__main__`, which a fresh interpreter does not have. Python's own `multiprocessing`
# with the `"spawn"` start method (what `mp.spawn` uses) shows it in a twentieth of a second, without torch:

# %%
import os
import tempfile
import time
import warnings
from datetime import timedelta

import torch.distributed as dist
from torch import nn
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
from trainclinic.distributed import launch, TwoHeads, Recorded, params_digest

torch.set_num_threads(1)  # tiny models: one CPU thread is the fastest
work = tempfile.mkdtemp(prefix="lesson11-")  # the lesson's checkpoints go here, not beside the notebook
GRADING = bool(os.environ.get("NBGRADER_EXECUTION"))  # under the grader, the slow demos take a quick path


def cell_worker(rank):
    print("rank", rank, "started")


if GRADING:  # a spawned interpreter leaves multiprocessing's resource tracker behind: not under the grader
    print("(skipped under the grader: multiprocessing's spawn of a cell-defined function)")
else:
    start = time.perf_counter()
    stderr, exitcode = tc.distributed.spawn_cell_function(cell_worker)
    print(f"the spawned child exited with code {exitcode} after {time.perf_counter() - start:.2f} s; its stderr ends:")
    print("\n".join(stderr.strip().splitlines()[-1:]))

# %% [markdown]
# **`Can't get attribute 'cell_worker'`** on `<module '__main__' (built-in)>`: the child unpickled the name
# `__main__.cell_worker` and found no such thing in its own, empty, `__main__`. With `mp.spawn` every child prints this
# and the parent raises ProcessExitedException ("process 0 terminated with exit code 1"), after 4 s per child of
# `import torch`. Two ways out: put the worker in an importable module (a `.py` file next to the notebook, or one the
# notebook writes with the `%%writefile` magic and launches with torchrun), or **fork**: a forked child is a copy of the kernel, cell functions included.
#
# This lesson forks, with `tc.distributed.launch(fn, world=2, args=(...), timeout=...)`: it picks a free port on
# 127.0.0.1, forks `world` ranks, runs `fn(rank, world, *args)` in each inside a gloo process group, and brings back
# each rank's return value or exception and what it printed. It imports `torch._dynamo` in the parent once first:
# DDP's constructor imports it (hundreds of modules: seconds), and forked ranks inherit it, so a 2-rank run takes
# a fraction of a second where a spawn takes 15-20 s. And every launch is **bounded**: each collective gives up after
# the process group's `timeout`, and the parent kills the ranks still running at its deadline.

# %%
def hello(rank, world):
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)  # every rank contributes, every rank gets the sum
    return f"rank {rank} of {world}: all_reduce gives {t.item():g}"

run = launch(hello, world=2)
print(run.values, f"({run.seconds:.2f} s)")

# %% [markdown]
# ### The loop as first moved to DDP
#
# The data set: 32 samples of 3 blobs. The model, `TwoHeads`: a body, a main head and an auxiliary head (used by
# another loss in another project); `forward` returns `(logits, aux_logits)`. The loop wraps the model in DDP and
# trains on the main logits, as it did on one process:

# %%
def make_data(n=32, seed=1):
    return Recorded(tc.blobs(n=n, features=8, classes=3, seed=seed))  # Recorded: notes each index read, in order


def train_as_found(rank, world, model, dataset, epochs, ckpt_path):
    ddp = DDP(model)
    loader = DataLoader(dataset, batch_size=8, shuffle=True)   # every rank reads the whole data set
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for epoch in range(epochs):
        for step, (x, y) in enumerate(loader):
            print(f"epoch {epoch} iteration {step}")
            opt.zero_grad()
            logits, aux = ddp(x)
            F.cross_entropy(logits, y).backward()              # the aux head gets no gradient
            opt.step()
    torch.save(ddp.state_dict(), ckpt_path)                     # every rank saves, with the wrapper's keys


def job(rank, world, train, ckpt_path, epochs=2):
    model, dataset = TwoHeads(seed=0), make_data()
    result = train(rank, world, model, dataset, epochs, ckpt_path)
    return {"seen": dataset.seen, "digest": params_digest(model), "result": result}


run = launch(job, args=(train_as_found, os.path.join(work, "found.pt")), timeout=4)
print(run.report(width=1200))

# %% [markdown]
# ### How to read the message
#
# - **Which rank, which iteration:** each rank raised it; both printed `epoch 0 iteration 0` and `iteration 1`: the
#   first iteration **passed**. DDP finds out at the *start* of iteration 1 that iteration 0's gradient reduction
#   never finished.
# - **`Expected to have finished reduction in the prior iteration before starting a new one`**: DDP all-reduces the
#   gradients in buckets, as they are produced by `backward()`, and waits for a gradient of **every** parameter.
#   The aux head took no part in the loss, so its gradients never came.
# - **`This error indicates that your module has parameters that were not used in producing loss`**: the cause, in
#   PyTorch's words, and the fix: `find_unused_parameters=True` (DDP then walks the graph after each forward to find
#   the parameters that will get no gradient), or make every output take part in the loss, or freeze the unused
#   parameters (`requires_grad_(False)` before wrapping: DDP ignores those).
# - **`Parameter indices which did not receive grad for rank 0: 4 5`**: positions in `model.parameters()`: 0-1 the
#   body's Linear, 2-3 `head`, **4-5 `aux`** (its weight and bias). `TORCH_DISTRIBUTED_DEBUG=INFO` names them (section 2).
#
# **A rank-dependent branch** gives the same error, each rank naming different parameters: here rank 1 uses the aux
# head and rank 0 the main one.

# %%
def branchy(rank, world):
    ddp = DDP(TwoHeads(seed=0))
    x, y = torch.randn(8, 8), torch.randint(0, 3, (8,))
    for step in range(2):
        logits, aux = ddp(x)
        F.cross_entropy(aux if rank == 1 else logits, y).backward()   # each rank its own branch

run = launch(branchy, timeout=4)
for r in run.ranks:
    print(f"rank {r.rank}:", r.error[1].splitlines()[-2].strip() if r.error else r.describe())

# %% [markdown]
# With `find_unused_parameters=True` both run; on every rank the unused head's gradient is then a zero that
# the all-reduce averages with the other rank's real one, so both copies stay equal.
#
# ### The silent ones: the same data on every rank, the same order every epoch
#
# With `find_unused_parameters=True` the loop as found runs. What did each rank read? `Recorded` noted it:

# %%
def train_unused_fixed(rank, world, model, dataset, epochs, ckpt_path):
    ddp = DDP(model, find_unused_parameters=True)
    loader = DataLoader(dataset, batch_size=8, shuffle=True)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for epoch in range(epochs):
        for x, y in loader:
            opt.zero_grad()
            F.cross_entropy(ddp(x)[0], y).backward()
            opt.step()

run = launch(job, args=(train_unused_fixed, os.path.join(work, "unused.pt")), timeout=4)
for r in run.ranks:
    print(f"rank {r.rank} read {len(r.value['seen'])} samples in 2 epochs; epoch 0 starts {r.value['seen'][:8]}")

# %% [markdown]
# Both ranks read all 32 samples every epoch, and in the **same** shuffled order: the forked ranks share the parent's
# random state (under `torchrun`, a script that seeds every rank alike does the same). Two ranks did the work of one, on the
# same batches; no error says so. A `DistributedSampler` gives each rank its own share. It needs no process group to
# look at (`num_replicas` and `rank` given):

# %%
data = tc.blobs(n=10, features=8, seed=1)
for rank in range(3):
    sampler = DistributedSampler(data, num_replicas=3, rank=rank, shuffle=True, seed=0)
    orders = []
    for epoch in range(2):
        orders.append(list(sampler))            # no set_epoch: the same order every epoch
    sampler.set_epoch(1)
    print(f"rank {rank}: epoch 0 {orders[0]}, epoch 1 without set_epoch {orders[1]}, with set_epoch(1) {list(sampler)}")

# %% [markdown]
# - Each rank gets `ceil(10 / 3) = 4` indices: 12 slots for 10 samples, so two samples are **repeated** (padding,
#   `drop_last=False`): harmless for training, a small bias in an evaluation metric.
# - **Without `sampler.set_epoch(epoch)`** each epoch is shuffled with the same seed: the same order, every epoch.
#   `set_epoch` reseeds it with `seed + epoch`.
#
# ### A barrier on rank 0 only: a bounded hang
#
# A collective (`barrier`, `all_reduce`, DDP's gradient all-reduce) returns when **every** rank has called it. Put one
# inside `if rank == 0:` and rank 0 waits for a rank that never comes. Here with a 2 s process group timeout, while
# rank 1 goes on with 30 s of other work (on a real job: forever, or NCCL's 10 minute default):

# %%
def barrier_on_rank0(rank, world):
    if rank == 0:
        dist.barrier()          # "wait until the others are done"... inside the if
    else:
        time.sleep(30)          # rank 1 never calls it
    return "done"

run = launch(barrier_on_rank0, timeout=2, deadline=3)
print(run.report(output=False, width=400))

# %% [markdown]
# Two bounds: rank 0's barrier gives up after the process group's 2 s (gloo's `Timed out waiting 2000ms`
# `for recv operation to complete`), and the parent kills rank 1 at its 3 s deadline. Without both, a notebook cell
# never returns. In a script, pass `timeout=timedelta(seconds=...)` to `init_process_group`.
#
# ### Uneven inputs, and `Join`
#
# Rank 0 has 3 batches, rank 1 only 2 (a data set split by hand). At rank 0's third `backward()` DDP all-reduces the
# gradients with... nobody:

# %%
def uneven(rank, world, use_join):
    from torch.distributed.algorithms.join import Join
    ddp = DDP(nn.Linear(8, 3))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    batches = [(torch.randn(8, 8), torch.randint(0, 3, (8,))) for _ in range(3 - rank)]
    with Join([ddp], enable=use_join):  # the ranks that finish early shadow the others' all-reduces
        for x, y in batches:
            opt.zero_grad()
            F.cross_entropy(ddp(x), y).backward()
            opt.step()
    dist.barrier()
    return params_digest(ddp.module)

run = launch(uneven, args=(False,), timeout=2, deadline=4)
print("without Join:", run.report(output=False, width=250))
run = launch(uneven, args=(True,), timeout=2, deadline=4)
print("with Join:   ", run.report(output=False))

# %% [markdown]
# Without `Join`, rank 0's third gradient all-reduce meets rank 1's `barrier()`: the ranks wait in different
# collectives until the timeout (what each rank reports depends on the torch version; both fail). With
# `torch.distributed.algorithms.join.Join([ddp])` the rank that ran out of batches joins the others' all-reduces
# with zeros, and both copies end equal. A `DistributedSampler` avoids the problem in the first place: it gives every
# rank the same number of samples.
#
# ### Validation through the DDP wrapper on rank 0 only
#
# A model with BatchNorm: DDP broadcasts rank 0's buffers (running statistics) at every forward of the wrapper, a
# collective. Validate through `ddp(...)` on rank 0 only, and rank 0 broadcasts to a rank that is not listening:

# %%
def validate_on_rank0(rank, world, through_wrapper):
    net = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 3))
    ddp = DDP(net)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    x, y = torch.randn(8, 8), torch.randint(0, 3, (8,))
    for epoch in range(2):
        opt.zero_grad()
        F.cross_entropy(ddp(x), y).backward()
        opt.step()
        if rank == 0:                                   # validation on rank 0 only
            model = ddp if through_wrapper else ddp.module
            model.eval()
            with torch.no_grad():
                model(torch.randn(16, 8))
            model.train()
    return params_digest(ddp.module)

run = launch(validate_on_rank0, args=(True,), timeout=2, deadline=4)
print("through ddp(...):   ", run.report(output=False, width=200))
run = launch(validate_on_rank0, args=(False,), timeout=2, deadline=4)
print("through ddp.module: ", run.report(output=False))

# %% [markdown]
# Through the wrapper, rank 0's buffer broadcast pairs with rank 1's next training collective: the sizes do not match,
# and a rank fails (gloo aborts the process or a collective times out, depending on the version). Validate with
# `ddp.module(x)`, the plain model: no collective.
#
# ### Saving: every rank, the load race, the `module.` prefix
#
# Rank 0 saves (it takes a moment: here half a second), and rank 1 loads the checkpoint at once to resume:

# %%
def save_then_load(rank, world, path, barrier):
    ddp = DDP(TwoHeads(seed=0), find_unused_parameters=True)
    if rank == 0:
        time.sleep(0.5)                      # a large checkpoint takes a while to write
        torch.save(ddp.state_dict(), path)
    if barrier:
        dist.barrier()                       # every rank waits until rank 0 has written it
    state = torch.load(path, weights_only=True)
    return sorted(state)[:2]

path = os.path.join(work, "ddp_ckpt.pt")
if os.path.exists(path):
    os.remove(path)
run = launch(save_then_load, args=(path, False), timeout=4)
print("without a barrier:", run.report(output=False, width=200))
run = launch(save_then_load, args=(path, True), timeout=4)
print("with a barrier:   ", run.report(output=False))

# %% [markdown]
# Without a barrier, rank 1 raised `FileNotFoundError: [Errno 2] No such file or directory` (or, a little later, it
# reads a half-written file). With `dist.barrier()` after rank 0's save, every rank loads it. Saving from every rank
# is the other mistake: every rank holds the same model, so one writer is enough, and several processes writing the
# same file can leave it torn.
#
# And the keys: `ddp.state_dict()` is the **wrapper's**, every key prefixed with `module.`. Loaded into the plain
# model, to evaluate or to resume on one process:

# %% tags=["raises-exception"]
TwoHeads(seed=0).load_state_dict(torch.load(path, weights_only=True))

# %% [markdown]
# `Missing key(s) in state_dict: "body.0.weight"...` and `Unexpected key(s) in state_dict: "module.body.0.weight"...`:
# save `ddp.module.state_dict()` (lesson 08 shows how to strip the prefix from a checkpoint already written that way).
#
# ### BatchNorm across ranks: SyncBatchNorm refuses the CPU
#
# Each rank's BatchNorm normalises with its **own** batch's statistics: with small per-rank batches they are noisy,
# and the running statistics differ between ranks (DDP then copies rank 0's at each forward). `SyncBatchNorm`
# computes them over all ranks' batches. On a CPU, in 2 ranks (SyncBatchNorm only synchronises inside a process
# group; outside one it behaves as a plain BatchNorm):

# %%
def sync_bn_on_cpu(rank, world):
    net = nn.SyncBatchNorm.convert_sync_batchnorm(nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)))
    try:
        DDP(net)
    except ValueError as err:
        print("DDP(net) raised ValueError:", err)
    net(torch.randn(8, 4))                 # without DDP: the forward itself

run = launch(sync_bn_on_cpu, timeout=4)
print(next(line for line in run.ranks[0].output.splitlines() if line.startswith("DDP(net)")))
print(run.ranks[0].describe())

# %% [markdown]
# **`SyncBatchNorm layers only work with GPU modules`** from DDP's constructor, and from the forward
# **`SyncBatchNorm expected input tensor to be on GPU`**: SyncBatchNorm has GPU kernels only.

# %% [markdown]
# What synchronised statistics change, with an **honest CPU stand-in** (not SyncBatchNorm: a `BatchNorm1d` that
# all-reduces the batch's sums before normalising; statistics only, no gradient through them, written for this demo).
# Each rank gets half of a batch of 16 whose two halves differ (as shards of a sorted or grouped data set do):

# %%
class AllReducedBatchNorm1d(nn.BatchNorm1d):
    """CPU stand-in for SyncBatchNorm (statistics only): mean and variance over every rank's batch."""

    def forward(self, x):
        if not self.training:
            return super().forward(x)
        stats = torch.cat([x.sum(0), (x * x).sum(0), torch.tensor([float(x.shape[0])])]).detach()
        dist.all_reduce(stats)
        c = x.shape[1]
        n = stats[-1]
        mean, var = stats[:c] / n, stats[c:2 * c] / n - (stats[:c] / n) ** 2
        with torch.no_grad():
            self.running_mean.mul_(1 - self.momentum).add_(self.momentum * mean)
            self.running_var.mul_(1 - self.momentum).add_(self.momentum * var * n / (n - 1))
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


full = torch.randn(16, 4, generator=torch.Generator().manual_seed(0)) + torch.arange(16.0)[:, None] / 8

def bn_stats(rank, world, layer_class):
    bn = layer_class(4)
    with torch.no_grad():
        bn(full[rank * 8:(rank + 1) * 8])       # this rank's half
    return [round(v, 3) for v in bn.running_mean.tolist()]

single = nn.BatchNorm1d(4)
with torch.no_grad():
    single(full)
print("one process, the whole batch:   ", [round(v, 3) for v in single.running_mean.tolist()])
for cls in (nn.BatchNorm1d, AllReducedBatchNorm1d):
    run = launch(bn_stats, args=(cls,), timeout=4)
    print(f"{cls.__name__:22} per rank:", run.values)

# %% [markdown]
# Plain BatchNorm: each rank's running mean is its own half's (and they differ); the stand-in's is the whole batch's,
# equal on both ranks and equal to one process on the full batch. On GPUs, `nn.SyncBatchNorm` does this (and the
# gradients too); it costs a collective per BatchNorm layer, per forward.

# %% [markdown] nbgrader={"grade": false, "grade_id": "diagnose_md", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 2 · Diagnose it
#
# Three tools, each asked of every rank:
#
# - **`TORCH_DISTRIBUTED_DEBUG=INFO`** (set in the ranks before the process group starts): the unused-parameter error
#   then names the parameters. (Not `DETAIL` with DDP: on torch 2.13's CPU build it crashes DDP's constructor.)
# - **what each rank read** (`Recorded` here; in your own code, log the sampler's indices) and **a digest of each
#   rank's parameters** (`params_digest`): after a step, equal digests on every rank, or DDP is not doing its job.
# - **the launcher's report**: every rank's outcome and output, a hang named as one.

# %%
run = launch(job, args=(train_as_found, os.path.join(work, "found.pt")), timeout=4, env={"TORCH_DISTRIBUTED_DEBUG": "INFO"})
for r in run.ranks:
    named = [line for line in (r.error[1] if r.error else "").splitlines() if line.startswith("Parameters which")]
    print(f"rank {r.rank}:", named[0].strip() if named else r.describe())


def who_read_what(run, epochs=2):
    for r in run.ranks:
        seen = r.value["seen"]
        k = len(seen) // epochs
        parts = [seen[e * k:(e + 1) * k] for e in range(epochs)]
        print(f"  rank {r.rank}: {len(seen)} reads, digest {r.value['digest']}; "
              + "; ".join(f"epoch {e}: {p[:6]}..." for e, p in enumerate(parts)))
    a, b = (set(r.value["seen"][:len(r.value["seen"]) // epochs]) for r in run.ranks[:2])
    print(f"  epoch 0: {len(a & b)} samples read by both ranks, {len(a | b)} distinct of 32")


print("unused parameters fixed, no sampler:")
who_read_what(launch(job, args=(train_unused_fixed, os.path.join(work, "unused.pt")), timeout=4))

# %% [markdown]
# The names: `aux.weight`, `aux.bias`. The digests are equal (DDP keeps the copies identical even when they train on
# the same data), but every sample was read by both ranks: the digests cannot see that; the reads can.
#
# - **a live plot from inside the ranks**: a rank calls `tc.distributed.progress(step=..., loss=..., grad_norm=...)`,
#   and `launch(..., watch=...)` hands each line to the notebook while the ranks train. Here rank 0's loss and gradient
#   norm (after DDP's all-reduce: the same on every rank), on 512 samples, with the sampler and `set_epoch`:

# %%
def watched(rank, world, epochs=4):
    ddp = DDP(TwoHeads(), find_unused_parameters=True)
    dataset = tc.blobs(n=512, features=8, classes=3, seed=1)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    step = 0
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in DataLoader(dataset, batch_size=8, sampler=sampler):
            opt.zero_grad()
            loss = F.cross_entropy(ddp(x)[0], y)
            loss.backward()
            opt.step()
            tc.distributed.progress(step=step, loss=loss.item(), grad_norm=tc.grad_norm(ddp.module))
            step += 1


with tc.LivePlot("rank 0 while 2 ranks train (DDP, gloo)", every=16) as plot:
    run = launch(watched, timeout=4, watch=lambda rank, v: plot.update(v["step"], v["loss"], v["grad_norm"])
                 if rank == 0 else None)
print(run.report(output=False), f"; rank 0 sent {len(plot.history['step'])} steps")
#
# ### Scaling out: `torchrun`, NCCL, several machines
#
# This lesson's launcher is for teaching on one machine. In a script, the launcher is `torchrun`:
#
# ```bash
# torchrun --nproc_per_node=2 train.py
# ```
#
# starts 2 ranks and sets `RANK`, `LOCAL_RANK`, `WORLD_SIZE`, `MASTER_ADDR` and `MASTER_PORT` for each; the script
# calls `init_process_group("nccl")` on GPUs (`"gloo"` on CPUs) and uses
# `torch.device("cuda", int(os.environ["LOCAL_RANK"]))`. On several machines, the same command on each machine, with
# the number of machines, this machine's number (0 on the first) and where they meet:
#
# ```bash
# torchrun --nnodes=2 --node_rank=0 --nproc_per_node=2 --rdzv_endpoint=node0.example:29500 train.py
# ```
#
# The bugs in this lesson are the same there; NCCL's timeout is 10 minutes by default, and its messages differ.

# %% [markdown] nbgrader={"grade": false, "grade_id": "fix_md", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 3 · Fix it
#
# Write `train(rank, world, model, dataset, epochs, ckpt_path)`, run in each rank with the process group already
# started (gloo, `world` ranks; `rank` is this one's). It must:
#
# 1. wrap `model` (a `TwoHeads`) in `DistributedDataParallel` and train it with `torch.optim.SGD` (lr 0.1) on
#    `F.cross_entropy(logits, y)`, the **main logits only** (the aux head is not trained here): so tell DDP that some
#    parameters get no gradient (`find_unused_parameters=True`), or freeze the aux head before wrapping;
# 2. read the data through a `DataLoader(dataset, batch_size=8, sampler=...)` (no worker processes: the default
#    `num_workers=0`, so the checks can watch the reads; an evaluation's reads, under `torch.no_grad()` or in a pass
#    that changes no weight, are not counted) with a
#    `DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True)`, and call `sampler.set_epoch(epoch)`
#    at the start of every epoch: each epoch, each rank reads `ceil(len(dataset) / world)` samples, the ranks together
#    cover the data set (overlapping only by the sampler's padding), and every epoch is in a new order;
# 3. train for `epochs` epochs, then save **one** checkpoint, from rank 0 only, to `ckpt_path`: the unwrapped model's
#    `state_dict()` (`ddp.module.state_dict()`), loadable into a plain `TwoHeads` with `strict=True`; and make every
#    rank wait until it is written (`dist.barrier()`, called by **every** rank), so that it exists when `train`
#    returns on any rank;
# 4. finish well within the process group's timeout (4 s): no collective on some ranks only.
#
# The return value is not used. The checks run your `train` in 2 real processes (3 in a hidden test: use `world`),
# on other data set sizes (some not divisible by 2) and epochs too, and compare the parameters with what those
# batches give under SGD at lr 0.1 with DDP's averaged gradients.

# %% nbgrader={"grade": false, "grade_id": "train", "locked": false, "schema_version": 3, "solution": true, "task": false}
def train(rank, world, model, dataset, epochs, ckpt_path):
    """DDP training on `world` ranks: sharded, reshuffled data; one checkpoint from rank 0."""
    ### BEGIN SOLUTION
    ddp = DDP(model, find_unused_parameters=True)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True)
    loader = DataLoader(dataset, batch_size=8, sampler=sampler)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            logits, aux = ddp(x)
            F.cross_entropy(logits, y).backward()
            opt.step()
    if rank == 0:
        torch.save(ddp.module.state_dict(), ckpt_path)
    dist.barrier()
    ### END SOLUTION


# %% [markdown]
# Your `train`, on the lesson's data, in 2 ranks:

# %%
path = os.path.join(work, "ddp_train.pt")
if os.path.exists(path):
    os.remove(path)
run = launch(job, args=(train, path, 3), timeout=4)
print(run.report(output=False, width=300))
if run.ok:
    who_read_what(run, epochs=3)
    plain = TwoHeads()
    print("the checkpoint loads into a plain TwoHeads:",
          plain.load_state_dict(torch.load(path, weights_only=True), strict=True), "digest", params_digest(plain))

# %% [markdown] nbgrader={"grade": false, "grade_id": "check_md", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 4 · Check
#
# Each cell runs your `train` in 2 real processes (gloo on 127.0.0.1, 4 s timeout per collective, killed at 8 s) and
# prints `✓ ...`, or raises `CheckFailed` saying what was expected, what happened and a hint. The grader runs more
# cases (other data set sizes and epochs) than you see here.

# %% nbgrader={"grade": true, "grade_id": "check_train_completes", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""train runs on 2 ranks (3 in a hidden test), and every rank trains (reads its epochs of data, takes steps) and returns in time"""
from trainclinic.checks import distributed as checks
checks.check_train_completes(train)
### BEGIN HIDDEN TESTS
checks.check_train_completes(train, seed=1)
checks.check_train_completes(train, seed=2)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "check_same_parameters", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""after train, the parameters are identical on every rank, trained as SGD (lr 0.1) on the main logits does, the aux head untouched"""
from trainclinic.checks import distributed as checks
checks.check_same_parameters(train)
### BEGIN HIDDEN TESTS
checks.check_same_parameters(train, seed=1)
checks.check_same_parameters(train, seed=2)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "check_sharding", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""each epoch, the ranks read disjoint shares of the data set that cover it"""
from trainclinic.checks import distributed as checks
checks.check_sharding(train)
### BEGIN HIDDEN TESTS
checks.check_sharding(train, seed=1)
checks.check_sharding(train, seed=2)
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "check_epoch_order", "locked": true, "points": 1, "schema_version": 3, "solution": false, "task": false}
"""each rank reads its share in a new order every epoch"""
from trainclinic.checks import distributed as checks
checks.check_epoch_order(train)
### BEGIN HIDDEN TESTS
checks.check_epoch_order(train, seed=1)
checks.check_epoch_order(train, seed=4)  # 3 epochs of 2 batches on each rank
### END HIDDEN TESTS

# %% nbgrader={"grade": true, "grade_id": "check_checkpoint", "locked": true, "points": 2, "schema_version": 3, "solution": false, "task": false}
"""exactly one checkpoint, saved by rank 0, that loads into the unwrapped model with strict=True"""
from trainclinic.checks import distributed as checks
checks.check_checkpoint(train)
### BEGIN HIDDEN TESTS
checks.check_checkpoint(train, seed=1)
checks.check_checkpoint(train, seed=2)
### END HIDDEN TESTS

# %% [markdown]
# ## 5 · Explore
#
# DDP training on `world` ranks (1 to 4, as cores allow), with the `sampler` and `set_epoch` behind switches. The panels:
# rank 0's loss, then each other rank's, per step; `distinct_per_epoch`: how many different samples the ranks read
# together each epoch (32 is the whole data set). **Show the failure** turns the sampler off: every rank then reads
# all 32 samples, in the same order, and the rank curves lie on top of each other.

# %%
def explore_rank(rank, world, sampler_on, set_epoch, epochs):
    model, dataset = TwoHeads(seed=0), make_data()
    ddp = DDP(model, find_unused_parameters=True)
    sampler = DistributedSampler(dataset, num_replicas=world, rank=rank, shuffle=True) if sampler_on else None
    loader = DataLoader(dataset, batch_size=8, sampler=sampler, shuffle=not sampler_on)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    losses, reads = [], []
    for epoch in range(epochs):
        if sampler_on and set_epoch:
            sampler.set_epoch(epoch)
        start = len(dataset.seen)
        for x, y in loader:
            opt.zero_grad()
            loss = F.cross_entropy(ddp(x)[0], y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        reads.append(dataset.seen[start:])
    return {"losses": losses, "reads": reads}


def run(world=2, sampler=True, set_epoch=True, epochs=4):
    """DDP on `world` ranks; per-rank loss curves and what the ranks read, with the sampler and set_epoch switchable."""
    out = launch(explore_rank, world=world, args=(sampler, set_epoch, epochs), timeout=4)
    if not out.ok:
        raise RuntimeError(out.failure())
    ranks = out.values
    history = {"step": list(range(len(ranks[0]["losses"]))), "loss": ranks[0]["losses"]}
    for r in range(1, world):
        history[f"loss_rank_{r}"] = ranks[r]["losses"]
    history["distinct_per_epoch"] = [len(set().union(*(set(v["reads"][e]) for v in ranks))) for e in range(epochs)]
    if world > 1 and not sampler:
        history["failure"] = (f"no DistributedSampler: each of the {world} ranks read all 32 samples every epoch, in "
                              f"the same order: {world} processes doing the work of one")
    elif world > 1 and all(v["reads"][0] == v["reads"][1] for v in ranks):
        history["failure"] = "no set_epoch: every epoch in the same order on every rank"
    return history


tc.explore(run, title="DDP", failure={"sampler": False},
           world=("int", 1, max(2, min(4, os.cpu_count() or 2)), 2), sampler=("bool", True),
           set_epoch=("bool", True));

# %% [markdown] nbgrader={"grade": false, "grade_id": "recap", "locked": true, "schema_version": 3, "solution": false, "task": false}
# ## 6 · Troubleshooting
#
# | Symptom | Cause | Fix |
# |---|---|---|
# | `Can't get attribute 'cell_worker'` in each child, then `ProcessExitedException` | `mp.spawn` (or a spawn start method) of a function defined in a notebook cell | put the worker in a `.py` module (run it with `torchrun`), or fork |
# | `Expected to have finished reduction in the prior iteration`, at iteration 1 | a parameter got no gradient at iteration 0 (an unused head, a rank-dependent branch) | `DDP(model, find_unused_parameters=True)`, use every output in the loss, or freeze the unused parameters before wrapping; `TORCH_DISTRIBUTED_DEBUG=INFO` names them |
# | `Timed out waiting 2000ms for recv operation to complete` on one rank (or a hang with no timeout) | a collective (`barrier`, `all_reduce`) inside `if rank == 0:` | every rank calls every collective, in the same order |
# | a rank fails or times out at the end of an epoch | uneven inputs: ranks with different numbers of batches | a `DistributedSampler` (equal shares), or `Join([ddp])` |
# | a rank aborts or times out after validation | validation through the DDP wrapper on rank 0 only (buffer broadcast) | validate with `ddp.module(x)` |
# | no error; each rank reads the whole data set | no `DistributedSampler` | `DataLoader(..., sampler=DistributedSampler(ds, num_replicas=world, rank=rank))` |
# | no error; the same order every epoch | no `sampler.set_epoch(epoch)` | call it at the start of every epoch |
# | `FileNotFoundError` on rank 1 when it loads the checkpoint | rank 1 read before rank 0 wrote it | `dist.barrier()` after rank 0's save, on every rank |
# | `Missing key(s) in state_dict`, `Unexpected key(s)` starting with `module.` | the wrapper's `ddp.state_dict()` was saved | save `ddp.module.state_dict()` from rank 0 |
# | `SyncBatchNorm expected input tensor to be on GPU` | SyncBatchNorm on a CPU | GPUs only; on CPUs plain BatchNorm (or a stand-in like the one above) |
#
# **Recap.** DDP keeps one model copy per rank identical by averaging gradients in collectives, and every rank must
# join every collective: a parameter with no gradient, a barrier on one rank, uneven batches or a validation through
# the wrapper on one rank breaks that, with an error at the next collective or a hang (bound every launch with a
# timeout). The silent bugs are in the data and the files: a `DistributedSampler` with `set_epoch` gives each rank its
# own share in a new order each epoch, and rank 0 alone saves `ddp.module.state_dict()`, before a barrier every rank
# calls. From a notebook, fork (or write a module); in production, `torchrun` with NCCL on GPUs.
