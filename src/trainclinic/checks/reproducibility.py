"""Checks for lesson 09, reproducibility: seed_everything, worker_init_fn, and the whole pipeline in two processes.

Everything is watched from outside, never read: what the generators give after the learner's seeding, the
augmentations a real DataLoader's workers produce (fork: the learner's functions are used as they are), and, for
the pipeline, fingerprints (hashes of the bytes) of each stage of a training run done in two fresh interpreters
whose PYTHONHASHSEEDs salt str hashes differently (`trainclinic.processes`: the learner's functions travel as
compiled code, never as source text). Every process is bounded by a timeout that ends in a CheckFailed.
"""
import functools
import multiprocessing
import random
import re
import types
from unittest import mock

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from .. import processes
from ..fingerprint import fingerprint
from . import CheckFailed, call, check, expect

__all__ = ["check_seed_everything", "check_worker_init_fn", "check_pipeline", "NoisyItems", "pipeline_run"]

HASHSEEDS = (1, 2)  # the pipeline's two fresh interpreters: fixed salts, so that a grade never depends on chance
TIMEOUT = 20.0  # seconds for any DataLoader batch and any call in another process (a hang becomes a CheckFailed)


# ---- seed_everything ----------------------------------------------------------------------------------------

def _draws():
    return random.random(), float(np.random.random()), torch.rand(3)


def _states():
    """The three global generators' states, comparable with ==."""
    py = random.getstate()
    npy = np.random.get_state()
    return py, (npy[0], npy[1].tobytes(), *npy[2:]), torch.get_rng_state().numpy().tobytes()


def _expected(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return _draws()


class _GlobalState:
    """Python's and NumPy's global generators and torch's deterministic mode, put back after the check."""

    def __enter__(self):
        self.saved = (random.getstate(), np.random.get_state(), torch.are_deterministic_algorithms_enabled(),
                      torch.is_deterministic_algorithms_warn_only_enabled())
        return self

    def __exit__(self, *exc):
        py, npy, det, warn = self.saved
        random.setstate(py)
        np.random.set_state(npy)
        if (det, warn) != (torch.are_deterministic_algorithms_enabled(),
                           torch.is_deterministic_algorithms_warn_only_enabled()):
            torch.use_deterministic_algorithms(det, warn_only=warn)  # its first call imports torch._inductor: seconds
        return False


@check("seed_everything")
def check_seed_everything(seed_everything, seed=0):
    """After seed_everything(s), random, numpy's global generator and torch give what seeding each with s gives."""
    seeds = [seed, seed + 7, 2**32 - 1 - seed] if seed else [0, 7]
    names = ["random.random()", "np.random.random()", "torch.rand(3)"]
    hints = ["random.seed(seed)", "np.random.seed(seed) (a new np.random.default_rng(seed) does not seed the "
             "global generator that np.random.random() uses)", "torch.manual_seed(seed)"]
    shown = (lambda v: [round(x, 4) for x in v.tolist()] if torch.is_tensor(v) else round(v, 6))  # to print only
    with _GlobalState():
        for s in seeds:
            want = _expected(s)
            other = (12345 + s) % 2**32
            random.seed(other), np.random.seed(other), torch.manual_seed(other)  # another state first
            states = _states()
            gpus = []  # the seeds CUDA's generators were given (torch.manual_seed gives every device the seed)
            real_all, real_one = torch.cuda.manual_seed_all, torch.cuda.manual_seed
            with mock.patch.object(torch.cuda, "manual_seed_all", lambda v: (gpus.append(int(v)), real_all(v))[1]), \
                    mock.patch.object(torch.cuda, "manual_seed", lambda v: (gpus.append(int(v)), real_one(v))[1]):
                call(seed_everything, s, name="seed_everything", where=f"with seed {s}")
            untouched = [a == b for a, b in zip(states, _states())]
            got = _draws()
            for name, w, g, hint, kept in zip(names, want, got, hints, untouched):
                same = torch.equal(w, g) if torch.is_tensor(w) else w == g
                expect(same, f"{name} after seed_everything({s})", f"{shown(w)} (what it gives after seeding with {s})",
                       f"{shown(g)}" + (": the call left that generator's state exactly as it was before it" if kept
                                        else ""),
                       f"seed it at every call, whatever happened before (a call that returns early, or a cached "
                       f"result, seeds nothing): {hint}" if kept else f"seed it with the seed you are given: {hint}")
            # (in a fork of a process that used CUDA, torch.manual_seed leaves CUDA alone: nothing to ask then)
            expect(s in gpus or torch.cuda._is_in_bad_fork(), f"the GPU's (CUDA's) generators after seed_everything({s})",
                   f"seeded with {s}", "not seeded (CUDA's manual_seed_all was not called)" if not gpus else
                   f"seeded with {gpus[-1]}", "torch.manual_seed(seed) seeds the CPU's generator and every GPU's; "
                   "torch.default_generator.manual_seed(seed) (or a Generator of your own) seeds the CPU's only, and on "
                   "a GPU dropout and torch.rand(..., device='cuda') stay unseeded")
            # the same seed again, after draws: every generator starts its stream over (torch.initial_seed() still
            # returns s, and a seed remembered from the first call is the same, but the streams have moved on)
            _draws()
            call(seed_everything, s, name="seed_everything", where=f"with seed {s}, a second time")
            again = _draws()
            for name, w, g, hint in zip(names, want, again, hints):
                same = torch.equal(w, g) if torch.is_tensor(w) else w == g
                expect(same, f"{name} after a second seed_everything({s}), called after draws from every generator",
                       f"{shown(w)} (what it gives after seeding with {s})", shown(g),
                       f"the first seed_everything({s}) gave it: seed every generator at every call, even when it "
                       f"was seeded with {s} before (it has drawn since): {hint}")
        # a machine with a GPU (simulated when there is none: torch.cuda.is_available() made True during the call;
        # CUDA's seeding waits until CUDA starts, which it never does here): the CPU's generators are seeded all the
        # same (nn.Linear's initial weights, a DataLoader's shuffle and every CPU random draw come from them)
        extra = ""
        if not torch.cuda.is_available():
            s = seeds[0] + 3
            want = _expected(s)
            other = (54321 + s) % 2**32
            random.seed(other), np.random.seed(other), torch.manual_seed(other)
            try:
                with mock.patch.object(torch.cuda, "is_available", lambda: True), \
                        mock.patch.object(torch.cuda, "device_count", lambda: 1):
                    call(seed_everything, s, name="seed_everything", where=f"with seed {s}, on a machine with a GPU "
                         "(simulated: torch.cuda.is_available() made True)")
            except CheckFailed as exc:  # code that starts CUDA itself cannot run without a GPU: not a verdict
                extra = f"; the simulated GPU machine was skipped, seed_everything needs a real GPU: {str(exc)[:80]}"
            else:
                got = _draws()
                for name, w, g, hint in zip(names, want, got, hints):
                    same = torch.equal(w, g) if torch.is_tensor(w) else w == g
                    expect(same, f"{name} after seed_everything({s}) on a machine with a GPU (simulated: "
                           "torch.cuda.is_available() made True)", f"{shown(w)} (what it gives after seeding with {s})",
                           shown(g), f"seed the CPU's generators on every machine, a GPU or not: {hint} (it seeds the "
                           "CPU and every GPU; torch.cuda.manual_seed_all alone seeds the GPUs only)")
                extra = ", also on a (simulated) machine with a GPU"
    return f"random, numpy and torch seeded with the given seed, every call (seeds {seeds}){extra}"


# ---- worker_init_fn -------------------------------------------------------------------------------------------

class NoisyItems(Dataset):
    """`n` items, each one draw from the Dataset's own Generator, made once in __init__ (the worker bug's shape)."""

    def __init__(self, n=8, seed=0):
        self.n, self.rng = n, np.random.default_rng(seed)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.tensor(self.rng.random(), dtype=torch.float64)


def _context():
    """fork where the platform has it: workers then run the learner's functions as they are."""
    return multiprocessing.get_context("fork") if "fork" in multiprocessing.get_all_start_methods() else None


def _augmentations(worker_init_fn, loader_seed, workers, n, epochs=2):
    """Every item's draw, epoch after epoch, from a DataLoader with `workers` workers and a seeded generator."""
    processes.warm_workers()
    loader = DataLoader(NoisyItems(n), batch_size=2, shuffle=False, num_workers=workers, worker_init_fn=worker_init_fn,
                        generator=torch.Generator().manual_seed(loader_seed), timeout=TIMEOUT,
                        multiprocessing_context=_context())
    out = []
    for _ in range(epochs):
        out.append([v for batch in loader for v in batch.tolist()])
    return out


def _run_loader(worker_init_fn, loader_seed, workers, n):
    try:
        return call(_augmentations, worker_init_fn, loader_seed, workers, n, name="worker_init_fn",
                    where=f"(in a DataLoader with {workers} workers)",
                    hints={"Seed must be between 0 and 2**32 - 1": "the worker's seed is a 64-bit number: "
                           "np.random.default_rng(seed) takes any size (np.random.seed only 32 bits: seed % 2**32)",
                           "timed out": "worker_init_fn did not return (a loop, or waiting for something that never "
                           "comes): it must only reseed the worker's copy of the Dataset"})
    except CheckFailed as exc:
        if "raised" in str(exc) and "DataLoader timed out" in str(exc):
            raise CheckFailed(f"the DataLoader's workers gave no batch within {TIMEOUT:.0f} s: worker_init_fn hangs "
                              "or is very slow; it must only reseed the worker's copy of the Dataset") from None
        raise


@check("worker_init_fn")
def check_worker_init_fn(worker_init_fn, seed=0):
    """In a real DataLoader (2-3 workers, 2 epochs, the Dataset's own Generator), the augmentations all differ, and
    repeat exactly under the same loader seed."""
    workers, n = (2, 8) if seed == 0 else (3, 6 + 2 * (seed % 2))
    runs = _run_loader(worker_init_fn, 100 + seed, workers, n)
    first = runs[0]
    values = [v for epoch in runs for v in epoch]
    distinct = len(set(values))
    if len(set(first)) < len(first):
        dup = [i for i, v in enumerate(first) if first.count(v) > 1]
        expect(False, f"distinct augmentations in epoch 0 ({n} items, {workers} workers)", f"{n} distinct values",
               f"{len(set(first))} (items {dup[:6]} repeat each other: {[round(first[i], 4) for i in dup[:4]]}...)",
               "every worker holds a copy of the same Generator: give the worker's copy "
               "(get_worker_info().dataset.rng) a new Generator seeded from get_worker_info().seed "
               "(np.random.seed seeds NumPy's global generator, not dataset.rng)")
    repeated = [v for v in runs[1] if v in set(first)]
    expect(not repeated, "epoch 1's augmentations", "all new (the workers' seeds change every epoch)",
           f"{len(repeated)} of {n} repeat epoch 0", "seed from get_worker_info().seed, which PyTorch draws anew every "
           "epoch; the worker id alone is the same every epoch")
    expect(distinct == len(values), "distinct augmentations over 2 epochs", len(values), distinct)
    again = _run_loader(worker_init_fn, 100 + seed, workers, n)
    diff = sum(a != b for a, b in zip(values, [v for epoch in again for v in epoch]))
    expect(diff == 0, "a second loader with the same generator seed", "the same augmentations, bit for bit",
           f"{diff} of {len(values)} differ", "seed the new Generator from get_worker_info().seed (drawn from the "
           "loader's seeded generator), not from the clock, the OS or np.random.default_rng() without a seed")
    alone = _run_loader(worker_init_fn, 200 + seed, 1, 4)  # one worker: its copy still restarts at every epoch
    repeated = [v for v in alone[1] if v in set(alone[0])]
    expect(not repeated, "epoch 1's augmentations in a DataLoader with 1 worker", "all new, as with several workers",
           f"{len(repeated)} of 4 repeat epoch 0",
           "reseed the worker's copy whatever the number of workers: a single worker also starts each epoch from a "
           "fresh copy of the Dataset, whose Generator restarts where the main process left it")
    return (f"{len(values)} distinct augmentations ({workers} workers, 2 epochs; 1 worker too), repeated under the "
            "same loader seed")


# ---- the pipeline, in two processes ---------------------------------------------------------------------------

_TEXTS = ["A great fun film", "great acting and a fun plot", "a dull plot", "dull and  slow", "fun for\tall",
          "slow and dull acting", "a great cast", "the plot was dull", "Great fun", "The cast was great",
          "slow film", "a dull cast", "fun and great", "the acting was slow", "all great", "a slow dull film",
          "what a film!", "not fun, at all.", "the best cast", "a slow start"]


def _texts(seed):
    rng = random.Random(seed)
    n = 16 if seed == 0 else rng.choice([12, 16, 20])
    return _TEXTS[:n] if seed == 0 else rng.sample(_TEXTS, n)


class _Reviews(Dataset):
    """Bag-of-words counts, augmented with the Dataset's own Generator (word dropout and noise)."""

    def __init__(self, texts, vocab, seed=0):
        self.texts, self.vocab, self.rng = texts, vocab, np.random.default_rng(seed)

    def __len__(self):
        return len(self.texts)

    def __getitem__(self, i):
        x = torch.zeros(len(self.vocab), dtype=torch.float64)
        for word in self.texts[i].split():
            if self.rng.random() > 0.2:
                x[self.vocab[word]] += 1
        noise = torch.from_numpy(self.rng.normal(0, 0.05, len(self.vocab)))
        return (x + noise).float(), len(self.texts[i]) % 2, noise[0], i


def pipeline_run(seed_everything, build_vocab, make_loader, seed, texts):
    """The check's training run with the learner's functions; fingerprints of each stage, in order."""
    torch.set_num_threads(1)
    stages = {}
    seed_everything(seed)
    vocab = build_vocab(texts)
    stages["vocabulary"] = sorted(vocab.items(), key=lambda kv: kv[1])
    model = torch.nn.Linear(len(vocab), 2)
    stages["initial weights"] = fingerprint(model)
    loader = make_loader(_Reviews(texts, vocab), seed)
    batches, noise, order = [], [], []
    for epoch in range(2):
        for x, y, first, index in loader:
            order += index.tolist()
            batches += [x, y]
            noise += first.tolist()
            model.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            with torch.no_grad():  # plain SGD written out: torch.optim's first use imports torch._dynamo (seconds)
                for p in model.parameters():
                    p -= 0.5 * p.grad
    stages["data order"] = order
    stages["batches"] = fingerprint(batches)
    stages["final weights"] = fingerprint(model)
    stages["noise"] = noise
    return stages


_STAGE_HINTS = {
    "vocabulary": "build_vocab gives another word order in each process: a set of strings is ordered by their "
                  "hashes, which PYTHONHASHSEED salts per process; sort the words (sorted(set(...)))",
    "initial weights": "the model is built right after seed_everything(seed): torch must be seeded with the seed "
                       "(torch.manual_seed(seed))",
    "data order": "make_loader's DataLoader needs its own generator=torch.Generator().manual_seed(seed): it "
                  "shuffles with it",
    "batches": "the same items in the same order, other augmentations: worker_init_fn must seed the worker's "
               "dataset.rng from get_worker_info().seed (drawn from the loader's seeded generator), not from the clock, "
               "the OS or an unseeded generator",
    "final weights": "every input of training was the same, yet the result differs",
}


def _check_vocab_edges(build_vocab):
    """An empty text among the texts (no word in it), more than 1000 distinct words, and the same list called again
    after words were added to it: every distinct word, each time."""
    _check_vocab(build_vocab, ["", "  ", "a b a", "c"], "(texts with an empty one)")
    _check_vocab(build_vocab, [" ".join(f"w{i}" for i in range(k, k + 300)) for k in range(0, 1500, 300)],
                 "(1500 distinct words)")
    texts = ["one two", "two three"]
    call(build_vocab, texts, name="build_vocab")
    texts.append("four five")  # the caller's list grows: a vocabulary kept from the last call is stale
    _check_vocab(build_vocab, texts, "(called again after a text was added to the same list)", same=True)


def _check_vocab(build_vocab, texts, where="", same=False):
    vocab = call(build_vocab, texts if same else list(texts), name="build_vocab", where=where)
    words = {w for t in texts for w in t.split()}
    expect(isinstance(vocab, dict), "build_vocab's return value", "a dict {word: index}", type(vocab).__name__)
    missing, extra = sorted(words - set(vocab)), sorted(set(vocab) - words)
    expect(not missing and not extra, f"build_vocab's words {where}".strip(),
           f"the {len(words)} distinct words of the texts (split on whitespace)",
           f"missing {missing[:5]}, extra {extra[:5]}",
           "every distinct word of these texts, computed at each call (no cap on the size, nothing kept from an "
           "earlier call); str.split() with no argument gives no empty word" if where else "")
    expect(sorted(vocab.values()) == list(range(len(words))), f"build_vocab's indices {where}".strip(),
           f"0 to {len(words) - 1}, each once", sorted(vocab.values())[:10])


class _SeedProbe(Dataset):
    """`n` items, each (its index, the seed of the worker that loaded it): what a loader's generator decides."""

    def __init__(self, n):
        self.n, self.rng = n, np.random.default_rng(0)  # rng: a worker_init_fn may reseed it

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        info = torch.utils.data.get_worker_info()  # -2: the workers see another Dataset (a wrapper of this one)
        return i, (-1 if info is None else info.seed if info.dataset is self else -2)


def _loader_run(make_loader, seed, disturb, n):
    """Make the learner's loader after `disturb` draws from torch's global generator, draw more (a model built after
    it), then read one epoch: [(index, worker seed)] in order."""
    torch.manual_seed(1000 + disturb)  # another global state each time: a layer more or less before it
    loader = call(make_loader, _SeedProbe(n), seed, name="make_loader")
    expect(isinstance(loader, DataLoader), "make_loader's return value", "a DataLoader", type(loader).__name__)
    expect(loader.num_workers == 2, "the DataLoader's num_workers", "2", loader.num_workers)
    expect(loader.worker_init_fn is not None, "the DataLoader's worker_init_fn", "your worker_init_fn",
           "None: the workers keep copies of one Generator and repeat each other's augmentations",
           "pass worker_init_fn=worker_init_fn to the DataLoader")
    torch.rand(3 * disturb)
    batches = call(lambda: [[(int(i), int(s)) for i, s in zip(idx, seeds)] for idx, seeds in loader],
                   name="make_loader", where="(iterating its DataLoader)")
    expect(all(s != -2 for b in batches for _, s in b), "the Dataset the DataLoader's workers see "
           "(get_worker_info().dataset)", "the one passed to make_loader: worker_init_fn reseeds that Dataset's rng",
           "another object wrapping it (its rng, if any, is not the one the items draw from)",
           "build the DataLoader over `dataset` itself: a wrapper (ConcatDataset, Subset) hides the Dataset from "
           "worker_init_fn, and its copies of the Generator repeat each other again")
    sizes = [len(b) for b in batches]  # what batch_size=4 gives (by argument, or by a batch_sampler of 4)
    expect(sizes and all(k == 4 for k in sizes[:-1]) and 0 < sizes[-1] <= 4,
           f"the batch sizes of one epoch of make_loader's DataLoader ({n} items)", "4 (the last one 4 or fewer)",
           sizes)
    return [item for b in batches for item in b], loader


def _no_reseed(worker_id):
    """The reference loader's worker_init_fn (the probe's items need none)."""


def _reference_make_loader(dataset, seed):
    """The lesson's make_loader: its own torch.Generator seeded with `seed`."""
    return DataLoader(dataset, batch_size=4, shuffle=True, num_workers=2, worker_init_fn=_no_reseed,
                      generator=torch.Generator().manual_seed(seed))


def _check_loader(make_loader, seed):
    """The loader: 2 workers, batch 4, every item once per epoch, and an order and worker seeds that depend on `seed`
    alone, not on torch's global stream before or after the loader is made, nor on another loader made after it."""
    n = 10 + 4 * (seed % 2)  # not a multiple of the batch size: the last batch is short
    made = [_loader_run(make_loader, seed, disturb, n) for disturb in (1, 2)]
    runs = [batches for batches, _ in made]
    order = [i for i, _ in runs[0]]
    dropped = sorted(set(range(n)) - set(order))
    expect(sorted(order) == list(range(n)), f"the items of one epoch of make_loader's DataLoader ({n} items)",
           f"all {n}, each once", f"{len(order)} items" + (f", without {dropped}" if dropped else ""),
           "keep the short last batch (drop_last=False, the default): every sample is seen every epoch"
           if dropped and len(order) == n - n % 4 else "")
    expect(order != list(range(n)), f"the order of one epoch of make_loader's DataLoader ({n} items)",
           "shuffled (shuffle=True)", f"{order[:6]}... in the Dataset's order", "pass shuffle=True: the text asks "
           "for a shuffled loader, whose order comes from its generator")
    expect(runs[0] == runs[1], "two loaders with the same seed, made after different draws from torch's global "
           "generator (and iterated after more)", "the same order of items and the same worker seeds",
           "another order" if order != [i for i, _ in runs[1]] else "other worker seeds",
           "give the DataLoader itself its own generator=torch.Generator().manual_seed(seed): it shuffles and draws "
           "the workers' seeds with it; without one (or with torch's global generator, which torch.manual_seed "
           "returns) both come from torch's global stream, so they depend on everything drawn before and after")
    # two loaders alive at once: each one's batches still depend on its own seed alone
    torch.manual_seed(1001)
    first = call(make_loader, _SeedProbe(n), seed, name="make_loader")
    second = call(make_loader, _SeedProbe(n), seed + 1, name="make_loader")
    both = call(lambda: ([(int(i), int(s)) for idx, seeds in first for i, s in zip(idx, seeds)],
                         [(int(i), int(s)) for idx, seeds in second for i, s in zip(idx, seeds)]),
                name="make_loader", where="(iterating two of its DataLoaders)")
    expect(both[0] == runs[0], f"a loader made with seed {seed}, then a second loader made with seed {seed + 1} "
           "before the first is iterated", "the first one's order and worker seeds, as when it is made alone",
           "another order" if [i for i, _ in both[0]] != order else "other worker seeds",
           "the two loaders share state: give each DataLoader its own generator, torch.Generator().manual_seed(seed) "
           "made inside make_loader; one Generator kept for every loader is reseeded by the next make_loader call "
           "and advanced by every other loader's epochs")
    other = _loader_run(make_loader, seed + 1, 1, n)[0]
    expect(other != runs[0], f"a loader made with seed {seed + 1} instead of {seed}",
           "another order or other worker seeds", "the same batches: the seed is not used",
           "seed the loader's Generator with `seed`: torch.Generator().manual_seed(seed) (a Generator never seeded "
           "starts from the same fixed state every time)")
    # seeded with `seed` itself: the batches and worker seeds of any loader whose own generator is seeded with it
    want = _loader_run(_reference_make_loader, seed, 1, n)[0]
    if runs[0] != want:
        same_order = [i for i, _ in want] == order
        hint = ""
        for s in (seed + 1, seed - 1, seed + 2, 0, 42):
            if s != seed and s >= 0 and _loader_run(_reference_make_loader, s, 1, n)[0] == runs[0]:
                hint = (f"they are those of a loader whose generator is seeded with {s}: seed it with `seed` itself, "
                        "torch.Generator().manual_seed(seed), and use it as it comes (no draws from it first), so "
                        "that a seed gives the same batches in every program that uses it")
                break
        expect(False, f"make_loader(dataset, {seed})'s order of items and worker seeds ({n} items)",
               f"those of a DataLoader whose own generator is torch.Generator().manual_seed({seed}) (the text: "
               f"seeded with `seed`): order {[i for i, _ in want][:8]}...",
               "the same order, other worker seeds" if same_order else f"order {order[:8]}...", hint)
    # the next epoch too: a DataLoader draws each epoch's order on from its generator (a new shuffle), the same in
    # two loaders made with the same seed
    read = lambda loader: [(int(i), int(s)) for idx, seeds in loader for i, s in zip(idx, seeds)]  # noqa: E731
    second = [call(read, loader, name="make_loader", where="(iterating its DataLoader a second time)")
              for _, loader in made]
    expect(second[0] != runs[0], f"the second epoch of make_loader(dataset, {seed})'s DataLoader ({n} items)",
           "a new shuffle (the generator, seeded once, draws on)", "the first epoch again (the same order and worker "
           "seeds)", "seed the generator once, when the loader is made: each epoch draws on from it, a new shuffle "
           "(reseeding it at every epoch repeats the first epoch's batches and augmentations)")
    expect(second[0] == second[1], f"the second epoch of two loaders made with seed {seed} ({n} items)",
           "the same order and worker seeds", "different ones", "let the loader's own generator alone decide each "
           "epoch: nothing but `seed` may feed it")


def _unsendable(fn):
    """Why `fn` cannot reach a fresh interpreter ('' when it can, or when the run itself will name the culprit)."""
    try:
        processes.dumps(fn)
    except processes.ProcessError:
        return ""  # the run names it (a global the function uses)
    except Exception as exc:  # noqa: BLE001 - pickle's own error is the reason
        return f"{type(exc).__name__}: {re.sub(r' at 0x[0-9a-f]+', '', str(exc))[:200]}"
    lru = isinstance(fn, functools._lru_cache_wrapper) and isinstance(fn.__wrapped__, types.FunctionType)
    if (not isinstance(fn, (types.FunctionType, type)) and not lru and hasattr(fn, "__qualname__")
            and getattr(fn, "__module__", None) in ("__main__", "__mp_main__")):  # (@lru_cache goes, in a new cache)
        return f"pickle sends it by name, __main__.{fn.__qualname__}, which a fresh interpreter does not define"
    return ""


@check("pipeline")
def check_pipeline(seed_everything, build_vocab, make_loader, seed=0):
    """The check's training run with the learner's four functions in two fresh interpreters whose PYTHONHASHSEED
    salts str hashes differently: every stage's fingerprint equal. Before it, the vocabulary's words and indices,
    and the loader's settings, epoch, and independence from torch's global stream and from other loaders."""
    texts = _texts(seed)
    processes.warm_workers()
    _check_vocab(build_vocab, _TEXTS)
    _check_vocab(build_vocab, texts)
    _check_vocab_edges(build_vocab)
    with _GlobalState():
        _check_loader(make_loader, seed)
    args = (seed_everything, build_vocab, make_loader, seed, texts)
    for name, fn in zip(("seed_everything", "build_vocab", "make_loader"), args):
        why = _unsendable(fn)
        expect(not why, f"`{name}`, sent to the fresh interpreters where the check runs the pipeline",
               "a function the check can send (its compiled code)",
               f"a {type(fn).__module__}.{type(fn).__qualname__}, which cannot be sent ({why})",
               "define it with a plain def: the check sends a function's compiled code, and a wrapper object (such as "
               "functools.lru_cache's) is sent by its name, which another process does not have"
               if not isinstance(fn, types.FunctionType) else "")
    try:
        a, b = processes.run_each([(processes.interpreter(hashseed=h), pipeline_run, args) for h in HASHSEEDS],
                                  timeout=TIMEOUT)
    except processes.ProcessTimeout as exc:
        raise CheckFailed(f"the run in a fresh interpreter did not finish: {exc} (limit {TIMEOUT:.0f} s once the "
                          "interpreter is up). Something in your functions hangs: a DataLoader worker waiting, "
                          "an endless loop") from None
    except processes.ProcessError as exc:
        hint = ("\nHint: create it inside the function, or pass what it needs" if "cannot be sent" in exc.text else "")
        raise CheckFailed(f"in a fresh interpreter, your functions raised {exc}{hint}") from None
    procs = f"two fresh interpreters, PYTHONHASHSEED={HASHSEEDS[0]} and {HASHSEEDS[1]}"
    for stage in ("vocabulary", "initial weights", "data order", "batches", "final weights"):
        show = {"vocabulary": lambda v: str(v[:4])[:-1] + ", ...]",
                "data order": lambda v: str(v[:8])[:-1] + ", ...]"}.get(stage, lambda v: v)
        expect(a[stage] == b[stage], f"the {stage} in two processes ({procs}, seed {seed})",
               "the same in both", f"{show(a[stage])} and {show(b[stage])}", _STAGE_HINTS[stage])
    return f"every stage identical in {procs}: final weights {a['final weights']}"
