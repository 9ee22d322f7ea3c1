"""Checks for lesson 11, distributed data parallel: the learner's `train(rank, world, model, dataset, epochs, ckpt_path)`
run in 2 real processes (gloo on 127.0.0.1, forked by `trainclinic.distributed.launch`).

Everything is watched from outside: in each rank the dataset records the indices read from it (in order), torch.save
records who saved what, and the model's parameters are hashed before and after; the parent then looks at the
checkpoint folder and loads the file into an unwrapped model with strict=True. Every run is bounded (the process
group's timeout, then a join deadline that kills the ranks): wrong code fails in seconds, never hangs the grader.
`seed` drives a sweep: data set sizes (some not divisible by the world size), epochs, model and data seeds.
"""
import hashlib
import io
import math
import os
import random
import tempfile
import time

import torch

from .. import data
from ..distributed import Recorded, TwoHeads, launch, params_digest
from . import CheckFailed, check, expect

__all__ = ["check_train_completes", "check_same_parameters", "check_sharding", "check_epoch_order",
           "check_checkpoint", "run_train", "WORLD", "TIMEOUT", "BATCH_SIZE",
           "LEARNER_CODE_IN_OTHER_PROCESSES"]

# The learner's train runs only in the forked ranks, never in the checking process: whatever it patches there
# (the checks' own helpers included) stays there (autograder/corpus.py reads this).
LEARNER_CODE_IN_OTHER_PROCESSES = True
WORLD = 2
TIMEOUT = 4.0  # the process group's timeout: a collective that waits longer raises in its rank
DEADLINE = 8.0  # then the parent kills what still runs
BATCH_SIZE = 8
_SLOW_SAVE = 0.5  # seconds each torch.save takes in the checks' ranks: a rank that does not wait for it (no barrier)
# reads no file, unless it stalls longer than this between its last all-reduce and its return (a loaded machine)

_UNUSED = ("the auxiliary head `aux` gets no gradient (the loss uses the main logits only), and DDP by default waits "
           "for a gradient of every parameter before the next iteration: DDP(model, find_unused_parameters=True) (or "
           "freeze the head with model.aux.requires_grad_(False) before wrapping).")
_ONE_RANK = ("a collective (dist.barrier(), an all_reduce) ran on some ranks only: every rank must call every "
             "collective, in the same order (no barrier inside `if rank == 0:`).")
HINTS = {
    "Expected to have finished reduction in the prior iteration": _UNUSED,
    "sampler option is mutually exclusive with shuffle": "a DataLoader takes either shuffle=True or a sampler: "
    "the DistributedSampler shuffles (shuffle=True is its default), so drop the DataLoader's shuffle.",
    "Timed out waiting": _ONE_RANK,
    "Missing key(s) in state_dict": "save model.module.state_dict() (the wrapped model's), not the DDP wrapper's.",
    "initialize the default process group twice": "the process group is already started in each rank when train "
    "runs (as torchrun's script would do first): do not call init_process_group in train.",
}


# ---- cases and runs ---------------------------------------------------------------------------------------------

def _case(seed):
    """n (data set size), epochs, model and data seeds: seed 0 is the notebook's visible case."""
    if seed == 0:
        return {"n": 32, "epochs": 2, "model_seed": 0, "data_seed": 1, "world": WORLD}
    if seed == 1:  # 17 and 16 samples: a split by hand gives one rank a third batch, and it waits for the other
        return {"n": 33, "epochs": 2, "model_seed": 1, "data_seed": 101, "world": WORLD}
    rng = random.Random(seed)
    return {"n": rng.choice([21, 27, 30, 33, 40]), "epochs": rng.choice([2, 3]), "model_seed": seed,
            "data_seed": seed + 100, "world": 3 if seed % 4 == 2 else WORLD}  # 3 ranks: `world` is not always 2


def _rank_job(rank, world, train, case, ckpt_path):
    """In a rank: the learner's train on a recorded dataset; what it read, saved, and the parameters after."""
    saves, original = [], torch.save

    def recording_save(obj, f, *args, **kwargs):
        saves.append(os.fspath(f) if isinstance(f, (str, os.PathLike)) else repr(f))
        if not isinstance(f, (str, os.PathLike)):
            time.sleep(_SLOW_SAVE)  # a real checkpoint takes a while to write: the other ranks must wait for it
            return original(obj, f, *args, **kwargs)
        buffer = io.BytesIO()
        original(obj, buffer, *args, **kwargs)
        data = buffer.getvalue()
        with open(f, "wb") as out:  # the file exists from here, half written for a while: only a barrier waits
            out.write(data[: len(data) // 2])
            out.flush()
            time.sleep(_SLOW_SAVE)
            out.write(data[len(data) // 2:])
        return None

    torch.save = recording_save  # this rank's own process: the parent's torch is untouched

    def slow(rename):  # a file renamed onto ckpt_path (an atomic write) arrives a while later: only a barrier waits
        def renaming(src, dst, *args, **kwargs):
            if os.path.abspath(os.fspath(dst)) == os.path.abspath(ckpt_path):
                time.sleep(_SLOW_SAVE)
            return rename(src, dst, *args, **kwargs)
        return renaming

    os.replace, os.rename = slow(os.replace), slow(os.rename)
    # each rank's wall clock 1.5 s apart, as ranks started at different moments (or on machines whose clocks differ)
    # read it: a seed taken from the clock is then not the same on every rank (time differences are unchanged)
    clock, clock_ns, skew = time.time, time.time_ns, 1.5 * rank
    time.time = lambda: clock() + skew
    time.time_ns = lambda: clock_ns() + int(skew * 1e9)
    torch.manual_seed(7919 * (rank + 1) + case["model_seed"])  # each rank its own stream, as separate processes
    steps = [0]
    from torch.optim.optimizer import register_optimizer_step_post_hook
    register_optimizer_step_post_hook(lambda *_: steps.__setitem__(0, steps[0] + 1))  # any optimizer, this process
    model = TwoHeads(seed=case["model_seed"])
    backwards, fed = [0], [0]  # gradients computed for the model's parameters; samples trained on (backpropagated)
    for p in model.parameters():
        p.register_hook(lambda g: backwards.__setitem__(0, backwards[0] + 1))

    def feeding(module, args, output):  # counted when backward reaches this forward's output (not a logging pass)
        out = output[0] if isinstance(output, (tuple, list)) and output else output
        if torch.is_tensor(out) and out.requires_grad and out.dim():
            n = int(out.shape[0])
            out.register_hook(lambda g: fed.__setitem__(0, fed[0] + n))

    model.register_forward_hook(feeding)
    before = {n: params_digest(m) for n, m in (("body", model.body), ("head", model.head), ("aux", model.aux))}
    dataset = _TrainingReads(data.blobs(n=case["n"], features=8, classes=3, seed=case["data_seed"]))
    loader_iter = torch.utils.data.DataLoader.__iter__

    def marked(loader):  # each pass over a DataLoader may start an epoch: where in the reads, and the weights then
        dataset.marks.append((len(dataset.seen), params_digest(model), steps[0], backwards[0]))
        return loader_iter(loader)

    torch.utils.data.DataLoader.__iter__ = marked  # this rank's own process, as torch.save above
    train(rank, world, model, dataset, case["epochs"], ckpt_path)
    after = {n: params_digest(m) for n, m in (("body", model.body), ("head", model.head), ("aux", model.aux))}
    dataset.marks.append((len(dataset.seen), params_digest(model), steps[0], backwards[0]))  # the last pass's end
    finite = all(bool(torch.isfinite(p).all()) for p in model.parameters())
    dtypes = sorted({str(p.dtype).removeprefix("torch.") for p in model.parameters()})
    try:
        with open(ckpt_path, "rb") as f:
            written = hashlib.sha256(f.read()).hexdigest()  # what this rank would read now, if it loaded it
    except OSError:
        written = None
    # as lists: pickling a tensor in a fresh fork first imports torch's serialization machinery (3 s)
    state = {k: v.detach().tolist() for k, v in model.state_dict().items()} if rank == 0 else None
    return {"written": written, "before": before, "after": after, "finite": finite, "seen": dataset.seen, "saves": saves,
            "state": state, "steps": steps[0], "evaluated": dataset.evaluated, "marks": dataset.marks,
            "fed": fed[0], "dtypes": dtypes}


class _TrainingReads(Recorded):
    """Records in `seen` the reads made in grad mode (training); those under torch.no_grad() or inference_mode (an
    evaluation pass over the data set) go to `evaluated`, not counted as the epochs' reads."""

    def __init__(self, dataset):
        super().__init__(dataset)
        self.evaluated, self.marks = [], []

    def __getitem__(self, i):
        if torch.is_grad_enabled():
            return super().__getitem__(i)
        self.evaluated.append(int(i))
        return self.dataset[i]


def run_train(train, seed=0, world=None, timeout=TIMEOUT, deadline=DEADLINE):
    """Run `train` on `world` ranks for the seed's case: (case, Launch, files left in the checkpoint folder,
    {file: loaded object or the exception's text}, the checkpoint's path)."""
    case = _case(seed)
    if world is not None:
        case["world"] = world
    world = case["world"]
    with tempfile.TemporaryDirectory(prefix="trainclinic-ckpt-") as folder:
        path = os.path.join(folder, "checkpoint.pt")
        torch.save(_stale(case), path)  # an older run's checkpoint is there: this run's must replace it
        run = launch(_rank_job, world=world, args=(train, case, path), timeout=timeout, deadline=deadline)
        files = sorted(os.listdir(folder))
        loaded = {}
        for name in files:
            try:
                loaded[name] = torch.load(os.path.join(folder, name), weights_only=True)
            except Exception as exc:  # noqa: BLE001 - reported by the checkpoint check
                loaded[name] = f"{type(exc).__name__}: {str(exc)[:200]}"
    return case, run, files, loaded, path


def _stale(case):
    """The state dict of an earlier run's model, left at ckpt_path before train runs."""
    return TwoHeads(seed=case["model_seed"] + 1).state_dict()


def _describe(case):
    return f"{case['world']} ranks, {case['n']} samples, {case['epochs']} epochs"


_PEER = ("Connection closed by peer", "Connection reset by peer", "Application timeout caused pair closure")


def _grading_cache():
    """Under the grader (NBGRADER_EXECUTION set: a notebook run once, top to bottom), the check cells share one
    2-rank run per (train, seed) instead of one per cell. Held in a closure: no module attribute to overwrite."""
    runs = {}

    def get(train, seed):
        if not os.environ.get("NBGRADER_EXECUTION"):
            return run_train(train, seed)
        key = (id(train), seed)
        hit = runs.get(key)
        if hit is None or hit[0] is not train or hit[1] is not getattr(train, "__code__", None):
            if len(runs) >= 64:  # small entries; the 50-seed sweep runs check by check over every seed
                runs.clear()
            hit = runs[key] = (train, getattr(train, "__code__", None), run_train(train, seed))
        return hit[2]

    return get


_run_once = _grading_cache()


def _completed(train, seed):
    """run_train, then CheckFailed unless every rank returned within the time limits."""
    if not callable(train):
        raise CheckFailed(f"expected `train` to be a function, found {type(train).__name__}")
    case, run, files, loaded, path = _run_once(train, seed)
    if run.ok:
        return case, run, files, loaded, path
    errors = [r.error for r in run.ranks if r.error]
    if errors and all(kind == "NotImplementedError" for kind, _, _ in errors):
        raise CheckFailed("`train` is not written yet: replace `raise NotImplementedError` with your code")
    # a rank's own error first; "connection closed" on the others is its consequence
    ranks = sorted(run.ranks, key=lambda r: (r.ok, r.hung is False and r.error is not None
                                             and any(p in r.error[1] for p in _PEER)))
    lines = []
    for r in ranks:
        if not r.ok:
            line = r.describe()
            line = line if len(line) <= 420 else line[:420] + " ..."
            if line.split(" ", 2)[2] not in [l.split(" ", 2)[2] for l in lines]:
                lines.append(line)
            else:
                lines.append(f"rank {r.rank}: the same")
    text = "\n".join(lines)
    hint = next((h for key, h in HINTS.items() if key in text), "")
    if not hint and any(r.ok for r in run.ranks) and any(p in text for p in _PEER):
        hint = ("one rank returned while another still waited in a collective for it (a barrier or an all_reduce "
                "called on some ranks only?): " + _ONE_RANK)
    hung = any(r.hung for r in run.ranks)
    if hung:
        hint = hint or _ONE_RANK
        text += ("\n(a hang: a rank waited in a collective, a barrier or DDP's gradient all-reduce, for a rank that "
                 "never joined it)")
    what = (f"did not finish within the time limits ({TIMEOUT:g} s for a collective, {DEADLINE:g} s in all)" if hung
            else "failed")
    raise CheckFailed(f"`train` on {_describe(case)} {what}:\n{text}" + (f"\nHint: {hint}" if hint else ""))


# ---- the checks -------------------------------------------------------------------------------------------------

@check("train_completes")
def check_train_completes(train, seed=0):
    """train runs on 2 ranks and every rank trains (reads its epochs of data, steps) and returns, in time."""
    case, run, *_ = _completed(train, seed)
    least = case["n"] // case["world"]  # how many samples each epoch reads (the sampler's share is checked apart)
    for r, out in enumerate(run.values):
        share = math.ceil(case["n"] / case["world"])
        expect(len(out["seen"]) >= case["epochs"] * least, f"rank {r}'s samples read in {case['epochs']} epochs",
               f"at least {case['epochs'] * least} ({least} per epoch: {case['n']} samples over {case['world']} "
               "ranks)", len(out["seen"]),
               f"each rank's share is {share} samples, fewer than a batch of {BATCH_SIZE}: a DataLoader with "
               "drop_last=True drops all of it" if not out["seen"] and share < BATCH_SIZE else
               "train for `epochs` epochs over the DataLoader (with its default num_workers=0: the checks watch the "
               "reads in each rank's own process)")
        parts = _segments(out)
        expect(parts is None or len(parts) == case["epochs"], f"rank {r}'s epochs (passes over a DataLoader that "
               f"read samples and trained, {case['n']} samples on {case['world']} ranks)", case["epochs"],
               len(parts or ()), "train for `epochs` epochs, the argument: for epoch in range(epochs)")
        expect(out["steps"] or out["after"]["body"] != out["before"]["body"], f"rank {r}'s training steps",
               "optimizer steps, or parameters changed by the training", "no optimizer.step() and the parameters "
               "unchanged", "step an optimizer over the DDP model's parameters")
    return f"{_describe(case)}: every rank trained and returned, in {run.seconds:.1f} s"


@check("same_parameters")
def check_same_parameters(train, seed=0):
    """After train, the parameters are identical on every rank, and the body and the main head have trained."""
    case, run, *_ = _completed(train, seed)
    outs = run.values
    for r, out in enumerate(outs):
        expect(out["finite"], f"rank {r}'s parameters after training", "finite values", "NaN or inf")
        expect(out["dtypes"] == ["float32"], f"the dtype of rank {r}'s model (the caller's) after training",
               "float32, as the caller gave it", ", ".join(out["dtypes"]),
               "train the model in the dtype it comes in: converting it (model.double()) changes the caller's "
               "model, whose float32 inputs then no longer fit it")
        for part in ("body", "head"):
            share = math.ceil(case["n"] / case["world"])
            expect(out["after"][part] != out["before"][part], f"rank {r}'s `{part}` parameters after training",
                   "changed by the training steps", "the initial values, unchanged" + (
                       "" if out["seen"] else f": rank {r} read no samples to train on"),
                   "train the model DDP wraps: its optimizer over ddp.parameters() (or model.parameters())"
                   if out["seen"] else f"each rank's share is {share} samples, fewer than a batch of {BATCH_SIZE}: a "
                   "DataLoader with drop_last=True drops all of it" if share < BATCH_SIZE else
                   "iterate over the DataLoader in each epoch, in grad mode")
    initial = TwoHeads(seed=case["model_seed"]).state_dict()
    # (rank 0's values: an all-reduce of the parameters at the end, every rank's the same, may move them by a rounding)
    aux_kept = all(torch.allclose(torch.tensor(v, dtype=torch.float64), initial[k].double(), rtol=1e-6, atol=1e-9)
                   for k, v in outs[0]["state"].items() if k.startswith("aux."))
    for r, out in enumerate(outs):
        expect(out["after"]["aux"] == out["before"]["aux"] or aux_kept and out["after"]["aux"] == outs[0]["after"]["aux"],
               f"rank {r}'s `aux` head after training",
               "unchanged (the text: the main logits only, the aux head is not trained here)", "changed",
               "the loss is F.cross_entropy(logits, y) on the main logits alone")
    digests = [out["after"] for out in outs]
    for part in ("body", "head", "aux"):
        expect(len({d[part] for d in digests}) == 1, f"the `{part}` parameters across ranks",
               "identical on every rank (DDP averages the gradients, so every rank takes the same step)",
               ", ".join(f"rank {r}: {d[part]}" for r, d in enumerate(digests)),
               "wrap the model in DistributedDataParallel and step an optimizer over its parameters on every rank")
    blind = [r for r, out in enumerate(outs) if not out["seen"]]
    expect(not blind, "the batches each rank trained on", "read through the data set train is given (dataset[i], "
           "as its DataLoader does), so that the parameters can be compared with SGD's on them",
           f"no sample read through it on rank {', '.join(map(str, blind))}: the parameters cannot be checked",
           "iterate a DataLoader over `dataset` itself (with its default num_workers=0): the checks see the batches "
           "through its reads")
    want = _replay(case, outs)
    if want is not None:  # reads that do not split into the sampler's batches: check_sharding says why
        got = {k: torch.tensor(v, dtype=torch.float64) for k, v in outs[0]["state"].items()}
        gap = max((got[k] - v.double()).abs().max().item() for k, v in want.items())
        # float32 rounding leaves 3e-8 here (DDP's bucketed all-reduce against this sum); a weight decay of 1e-4
        # moves them by 1e-5 and more
        expect(gap <= 2e-6 + 2e-6 * max(v.abs().max().item() for v in want.values()),
               "the parameters after train", "those of torch.optim.SGD(lr=0.1) on F.cross_entropy(logits, y) with DDP's "
               "averaged gradients, over the batches each rank read", f"others (largest difference {gap:.3g})",
               "one SGD step at lr 0.1 per batch (no momentum, no scaled rate), zero_grad before each backward, the "
               "loss on the main logits alone")
    return f"{_describe(case)}: parameters identical on every rank ({digests[0]['head']}), body and head trained" + (
        " as SGD(lr=0.1) with averaged gradients does" if want is not None else "")


def _replay(case, outs):
    """The state_dict the text's training gives (SGD, lr 0.1, cross-entropy of the main logits, DDP's gradients
    averaged over the ranks) on the batches each rank read, epoch by epoch (a pass over its DataLoader); None when
    the ranks' epochs do not pair up (their counts or lengths differ: check_sharding says why)."""
    from torch.nn import functional as F

    world = case["world"]
    parts = []
    for out in outs:
        mine = _segments(out)
        if mine is None:  # read through no DataLoader: `epochs` equal parts
            seen, epochs = out["seen"], case["epochs"]
            mine = [seen[e * len(seen) // epochs:(e + 1) * len(seen) // epochs] for e in range(epochs)]
        parts.append(mine)
    if len({len(p) for p in parts}) != 1 or not parts[0] or any(len({len(p[e]) for p in parts}) != 1
                                                                  for e in range(len(parts[0]))) \
            or not all(out["seen"] for out in outs):
        return None
    dataset = data.blobs(n=case["n"], features=8, classes=3, seed=case["data_seed"])
    model = TwoHeads(seed=case["model_seed"])
    params = [p for name, p in model.named_parameters() if not name.startswith("aux.")]
    with torch.enable_grad():
        for e in range(len(parts[0])):
            for start in range(0, len(parts[0][e]), BATCH_SIZE):
                total = None
                for r in range(world):
                    items = [dataset[i] for i in parts[r][e][start:start + BATCH_SIZE]]
                    x, y = torch.stack([x for x, _ in items]), torch.stack([torch.as_tensor(y) for _, y in items])
                    grads = torch.autograd.grad(F.cross_entropy(model(x)[0], y), params)
                    total = grads if total is None else [a + b for a, b in zip(total, grads)]
                with torch.no_grad():
                    for p, g in zip(params, total):
                        p -= 0.1 * (g / world)
    return {k: v.detach() for k, v in model.state_dict().items()}


def _segments(out):
    """A rank's epochs: its reads cut at each pass over a DataLoader, keeping the passes that read samples and changed
    the weights, stepped an optimizer or computed gradients for the model (an evaluation pass, even in grad mode,
    trains nothing); None when it read through no DataLoader."""
    seen, marks = out["seen"], out["marks"]
    if len(marks) < 2:
        return None
    parts = []
    if marks[0][0]:  # reads before the first pass: not through a DataLoader
        parts.append(seen[:marks[0][0]])
    passes = [(start, end, after != before or steps > stepped or backs > back)  # (steps: on a model's copy, too)
              for (start, before, stepped, back), (end, after, steps, backs) in zip(marks, marks[1:]) if end > start]
    # passes that trained nothing at all (every batch skipped, say) are still the epochs: whether they trained is
    # check_same_parameters's
    trained = any(t for _, _, t in passes)
    parts += [seen[start:end] for start, end, t in passes if t or not trained]
    return parts


def _epochs(case, run):
    """Each rank's indices cut into epochs, one per pass over its DataLoader: {rank: [epoch lists]}; read through no
    DataLoader, cut in `epochs` equal parts (CheckFailed when the counts do not split)."""
    per_rank = {}
    for r, out in enumerate(run.values):
        seen, epochs = out["seen"], case["epochs"]
        expect(bool(seen), f"rank {r}'s samples read (in the rank's own process)", "the data set's samples", "none",
               "the checks watch the reads in each rank's process: keep the DataLoader's default num_workers=0")
        parts = _segments(out)
        if parts is not None:
            expect(bool(parts), f"rank {r}'s epochs (passes over a DataLoader that read samples and trained)",
                   f"{epochs}", "none", "train over the DataLoader in each epoch (its reads in grad mode)")
            per_rank[r] = parts
            continue
        expect(len(seen) % epochs == 0, f"rank {r}'s samples read over {epochs} epochs",
               f"the same number each epoch ({math.ceil(case['n'] / case['world'])}: ceil({case['n']} / "
               f"{case['world']}))",
               f"{len(seen)} in all")
        k = len(seen) // epochs
        per_rank[r] = [seen[e * k:(e + 1) * k] for e in range(epochs)]
    return per_rank


@check("sharding")
def check_sharding(train, seed=0):
    """Each epoch, the ranks read disjoint parts of the data set (DistributedSampler's padding aside) that cover it."""
    case, run, *_ = _completed(train, seed)
    world = case["world"]
    n, share = case["n"], math.ceil(case["n"] / world)
    per_rank = _epochs(case, run)
    for e in range(min(map(len, per_rank.values()))):  # the epochs every rank ran (their count: completes)
        lists = [per_rank[r][e] for r in range(world)]
        sizes = [len(x) for x in lists]
        same = set(lists[0]) == set(lists[1])
        expect(not same or n <= 1, f"epoch {e}: the samples rank 0 and rank 1 read",
               "different parts of the data set", f"the same {len(set(lists[0]))} samples on both ranks",
               "without a DistributedSampler every rank trains on the whole data set: DataLoader(dataset, "
               "batch_size=8, sampler=DistributedSampler(dataset, num_replicas=world, rank=rank))")
        expect(sizes == [share] * world, f"epoch {e}: samples read per rank", f"{share} on each (ceil({n} / {world}))",
               ", ".join(f"rank {r}: {s}" for r, s in enumerate(sizes)),
               "num_replicas=world and rank=rank: the sampler splits the data set into `world` shares" if world != 2
               and sizes == [math.ceil(n / 2)] * world else "")
        union = set().union(*map(set, lists))
        missing = sorted(set(range(n)) - union)
        seeds = ("every rank's DistributedSampler must shuffle with the same seed (the default, or one number "
                 "passed to every rank; not the clock or the rank): each rank takes its share of the permutation its "
                 "own seed gives, so ranks with different seeds read overlapping shares")
        expect(not missing, f"epoch {e}: the data set covered by the ranks together", f"all {n} samples",
               f"{len(missing)} never read ({missing[:8]}{' ...' if len(missing) > 8 else ''})",
               seeds if sizes == [share] * world else "")
        overlap = sum(sizes) - len(union)
        expect(overlap <= world * share - n, f"epoch {e}: samples read by more than one rank",
               f"at most {world * share - n} (DistributedSampler's padding, for {n} samples on {world} ranks)",
               overlap, seeds if sizes == [share] * world else "")
    return f"{_describe(case)}: each epoch the ranks read disjoint shares of {share} that cover the {n} samples"


@check("epoch_order")
def check_epoch_order(train, seed=0):
    """Each rank reads its samples in a different order every epoch (shuffled, reseeded per epoch)."""
    case, run, *_ = _completed(train, seed)
    per_rank = _epochs(case, run)
    for r, out in enumerate(run.values):
        read = len(out["seen"])
        expect(out["fed"] <= read, f"rank {r}: the samples its model trained on (backward through their output), "
               "against those it read",
               f"at most the {read} it read (each epoch's batches read anew from the DataLoader)",
               f"{out['fed']}: batches read once were given to the model again (a list of batches kept, or "
               "itertools.cycle, replays an epoch in the same order)",
               "iterate the DataLoader itself in every epoch (for x, y in loader), after sampler.set_epoch(epoch): "
               "each pass reads the rank's share anew, in that epoch's order")
    for r in range(case["world"]):
        orders = per_rank[r]
        for e in range(1, len(orders)):
            expect(orders[e] != orders[e - 1], f"rank {r}: the order of epoch {e} against epoch {e - 1}",
                   "a different order (a new shuffle every epoch)", f"the same order {orders[e][:6]} ...",
                   "call sampler.set_epoch(epoch) at the start of every epoch (the DistributedSampler shuffles with "
                   "seed + epoch), and keep its shuffle=True")
    return f"{_describe(case)}: every epoch in a new order on each rank"


def _same_state(saved, state):
    """Whether a checkpoint's tensors hold exactly the values of rank 0's state_dict as train left it (lists)."""
    try:
        return set(saved) == set(state) and all(
            torch.equal(saved[k].detach().double().cpu(), torch.tensor(v, dtype=torch.float64)) for k, v in state.items())
    except (TypeError, RuntimeError, AttributeError):
        return False


@check("checkpoint")
def check_checkpoint(train, seed=0):
    """Exactly one checkpoint, saved by rank 0 only, that loads into the unwrapped model with strict=True."""
    case, run, files, loaded, path = _completed(train, seed)
    savers = {r: out["saves"] for r, out in enumerate(run.values)}
    others = {r: s for r, s in savers.items() if r != 0 and s}
    expect(not others, "the ranks that called torch.save", "rank 0 only",
           ", ".join(f"rank {r}: {len(s)} save(s)" for r, s in savers.items()),
           "every rank holds the same model: save from one, `if rank == 0: torch.save(...)`; several processes "
           "writing one file can leave it torn")
    expect(files == [os.path.basename(path)], "the files in the checkpoint folder",
           f"exactly one, {os.path.basename(path)}", files or "none", "" if files else
           "rank 0 saves to ckpt_path: torch.save(ddp.module.state_dict(), ckpt_path)")
    state = loaded[files[0]]
    expect(not isinstance(state, str), "torch.load of the checkpoint", "a state_dict", state)
    expect(isinstance(state, dict), "the checkpoint", "a state_dict (a dict of tensors)", type(state).__name__)
    stale = {k: v.tolist() for k, v in _stale(case).items()}
    expect(not _same_state(state, stale), "the checkpoint at ckpt_path after train",
           "this run's trained model (ckpt_path held an older checkpoint before the run)",
           "the older checkpoint, as it was before the run: nothing replaced it",
           "rank 0 saves to ckpt_path at the end of every run, over any file already there: "
           "torch.save(ddp.module.state_dict(), ckpt_path) (a checkpoint left by an earlier run is not this one's)"
           if savers.get(0) or not any(savers.values()) else "")
    model = TwoHeads(seed=case["model_seed"])
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        prefixed = any(str(k).startswith("module.") for k in state)
        raise CheckFailed(f"loading the checkpoint into the unwrapped model with strict=True: expected it to load, "
                          f"observed RuntimeError: {str(exc)[:300]}"
                          + ("\nHint: save model.module.state_dict() (the wrapped model's), not the DDP wrapper's: "
                             "its keys start with `module.`." if prefixed else "")) from None
    final = run.values[0]["written"]  # rank 0's, after its own torch.save returned
    late = [r for r, out in enumerate(run.values) if out["written"] != final]
    expect(not late, "when train returned on each rank, the checkpoint", "completely written (on every rank)",
           f"not there yet, or half written, on rank {', '.join(map(str, late))}",
           "rank 0's save takes a while: after it, dist.barrier() on every rank (outside the `if rank == 0:`)")
    final = run.values[0]["after"]
    loaded_digest = {n: params_digest(m) for n, m in (("body", model.body), ("head", model.head), ("aux", model.aux))}
    if loaded_digest != final and final["body"] == run.values[0]["before"]["body"]:
        # the model passed in was not trained (a copy was, a same_parameters matter): the checkpoint is compared with
        # what training on the batches rank 0 read gives
        want = _replay(case, run.values)
        if want is not None and max((v.double() - want[k].double()).abs().max().item()
                                    for k, v in model.state_dict().items()) <= 2e-6:
            final = loaded_digest
    if loaded_digest != final and _same_state(state, run.values[0]["state"]):
        final = loaded_digest  # rank 0's model as train left it, in another dtype (float64): the same values
    expect(loaded_digest == final, "the checkpoint's parameters", f"the trained ones ({final['head']})",
           f"others ({loaded_digest['head']})", "save after the last epoch")
    return f"{_describe(case)}: one checkpoint, saved by rank 0, loads with strict=True, holds the trained parameters"
