"""Lesson 09 (reproducibility): plausible wrong fixes (each loses exactly its checks, with the message) and correct
fixes written differently.

Format: tests/variants/__init__.py."""

SEED = '''def seed_everything(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)'''

WORKER = '''def worker_init_fn(worker_id):
    info = torch.utils.data.get_worker_info()
    info.dataset.rng = np.random.default_rng(info.seed)'''

VOCAB = '''def build_vocab(texts):
    words = sorted({w for text in texts for w in text.split()})
    return {w: i for i, w in enumerate(words)}'''

LOADER = '''def make_loader(dataset, seed):
    return DataLoader(dataset, batch_size=4, shuffle=True, num_workers=2, worker_init_fn=worker_init_fn,
                      generator=torch.Generator().manual_seed(seed))'''


def with_(reference, old, new):
    """The reference with one piece changed (the variants below name the change)."""
    assert old in reference, old
    return reference.replace(old, new)


VARIANTS = {
    # seed_everything
    "seed_without_numpy": {"cells": {"seed_everything": with_(SEED, "    np.random.seed(seed)\n", "")},
                           "lost": {"check_seed_everything": "np.random.random() after seed_everything(0)"}},
    "seed_numpy_default_rng": {
        "cells": {"seed_everything": with_(SEED, "np.random.seed(seed)", "rng = np.random.default_rng(seed)")},
        "lost": {"check_seed_everything": "does not seed the global generator"}},
    "seed_constant": {"cells": {"seed_everything": SEED.replace(".seed(seed)", ".seed(0)").replace("manual_seed(seed)", "manual_seed(0)")},
                      "lost": {"check_seed_everything": "random.random() after seed_everything(7)"}},
    "seed_cuda_only": {
        "cells": {"seed_everything": "def seed_everything(seed):\n    random.seed(seed)\n    np.random.seed(seed)\n"
                                     "    torch.cuda.manual_seed_all(seed)   # seeds the GPUs only"},
        "lost": {"check_seed_everything": "torch.rand(3) after seed_everything(0)",
                 "check_pipeline": "the initial weights in two processes"}},
    # worker_init_fn
    "worker_seeds_global_numpy": {
        "cells": {"worker_init_fn": "def worker_init_fn(worker_id):\n    np.random.seed(worker_id)"},
        # reproducible duplicates: worker_init_fn's fault alone (check_pipeline asks for reproduction, which holds)
        "lost": {"check_worker_init_fn": "items [0, 1, 2, 3, 4, 5] repeat each other"}},
    "worker_rng_from_worker_id": {
        "cells": {"worker_init_fn": with_(WORKER, "default_rng(info.seed)", "default_rng(worker_id)")},
        "lost": {"check_worker_init_fn": "epoch 1's augmentations"}},
    "worker_rng_from_entropy": {
        "cells": {"worker_init_fn": with_(WORKER, "default_rng(info.seed)", "default_rng()")},
        "lost": {"check_worker_init_fn": "a second loader with the same generator seed",
                 "check_pipeline": "the same items in the same order, other augmentations"}},
    "worker_np_seed_64_bit": {
        "cells": {"worker_init_fn": with_(WORKER, "    info.dataset.rng", "    np.random.seed(info.seed)\n    info.dataset.rng")},
        "lost": {"check_worker_init_fn": "Seed must be between 0 and 2**32 - 1",
                 "check_pipeline": "Seed must be between 0 and 2**32 - 1"}},
    # build_vocab
    "vocab_in_set_order": {
        "cells": {"build_vocab": "def build_vocab(texts):\n    words = set(w for text in texts for w in text.split())\n"
                                 "    return {w: i for i, w in enumerate(words)}"},
        "lost": {"check_pipeline": "a set of strings is ordered by their hashes"}},
    "vocab_counts_not_indices": {
        "cells": {"build_vocab": "import collections\n\ndef build_vocab(texts):\n"
                                 "    return dict(sorted(collections.Counter(w for t in texts for w in t.split()).items()))"},
        "lost": {"check_pipeline": "build_vocab's indices"}},
    # make_loader
    "loader_without_generator": {
        "cells": {"make_loader": with_(LOADER, ",\n                      generator=torch.Generator().manual_seed(seed))", ")")},
        "lost": {"check_pipeline": "two loaders with the same seed, made after different draws"}},
    "loader_without_worker_init": {
        "cells": {"make_loader": with_(LOADER, " worker_init_fn=worker_init_fn,", "")},
        "lost": {"check_pipeline": "the DataLoader's worker_init_fn: expected your worker_init_fn, observed None"}},
    "loader_without_workers": {
        "cells": {"make_loader": with_(LOADER, "num_workers=2", "num_workers=0")},
        "lost": {"check_pipeline": "the DataLoader's num_workers: expected 2, observed 0"}},
    # correct, written differently
    "written_differently": {
        "cells": {
            "seed_everything": "import os\n\ndef seed_everything(seed):\n"
                               "    os.environ['PYTHONHASHSEED'] = str(seed)   # only for child processes\n"
                               "    random.seed(seed)\n    np.random.seed(seed % 2**32)\n    torch.manual_seed(seed)\n"
                               "    torch.cuda.manual_seed_all(seed)\n    torch.use_deterministic_algorithms(True)",
            "worker_init_fn": "from torch.utils.data import get_worker_info\n\ndef worker_init_fn(worker_id):\n"
                              "    get_worker_info().dataset.rng = np.random.default_rng(torch.initial_seed())",
            "build_vocab": "def build_vocab(texts):\n"
                           "    order = dict.fromkeys(w for t in texts for w in t.split())   # first-seen order\n"
                           "    return {w: i for i, w in enumerate(order)}",
            "make_loader": "def make_loader(dataset, seed):\n    g = torch.Generator()\n    g.manual_seed(seed)\n"
                           "    return DataLoader(dataset, 4, shuffle=True, num_workers=2, generator=g,\n"
                           "                      worker_init_fn=worker_init_fn, persistent_workers=True)"},
        "lost": {}},
    "seed_sequence_and_class": {
        "cells": {
            "worker_init_fn": "class Reseed:\n    def __call__(self, worker_id):\n"
                              "        info = torch.utils.data.get_worker_info()\n"
                              "        info.dataset.rng = np.random.default_rng([worker_id, info.seed])\n\n"
                              "worker_init_fn = Reseed()",
            "build_vocab": "VOCAB_SIZE_LIMIT = 10_000\n\ndef build_vocab(texts):\n"
                           "    words = sorted(set(' '.join(texts).split()))[:VOCAB_SIZE_LIMIT]\n"
                           "    return dict(zip(words, range(len(words))))"},
        "lost": {}},
}

BLIND6 = {  # blind round 6: cases that were misgraded, graded right since
    # lowercases the words: texts with capitals get keys that are not their words (and 'The' / 'the' merge), so the 
    'bv_lowercased': {'cells': {'seed_everything': 'def seed_everything(seed):\n    """Seed random, numpy\'s global generator and torch with `seed`."""\n    random.seed(seed)\n    np.random.seed(seed)\n    torch.manual_seed(seed)\n', 'worker_init_fn': 'def worker_init_fn(worker_id):\n    """Reseed the worker\'s copy of the Dataset\'s Generator (dataset.rng) from the worker\'s own seed."""\n    info = torch.utils.data.get_worker_info()\n    info.dataset.rng = np.random.default_rng(info.seed)\n', 'build_vocab': 'def build_vocab(texts):\n    """{word: index} for every distinct word, the same in every process."""\n    words = sorted({w.lower() for t in texts for w in t.split()})\n    return {w: i for i, w in enumerate(words)}\n', 'make_loader': 'def make_loader(dataset, seed):\n    """A shuffled DataLoader with 2 workers whose batches and augmentations depend on `seed` alone."""\n    return DataLoader(dataset, batch_size=4, shuffle=True, num_workers=2, worker_init_fn=worker_init_fn,\n                      generator=torch.Generator().manual_seed(seed))\n'},
        'lost': {'check_pipeline': "build_vocab's words"}},
    # splits on ' ' instead of whitespace (3c: 'words split on whitespace'): double spaces add the empty word '', ta
    'bv_split_on_single_space': {'cells': {'seed_everything': 'def seed_everything(seed):\n    """Seed random, numpy\'s global generator and torch with `seed`."""\n    random.seed(seed)\n    np.random.seed(seed)\n    torch.manual_seed(seed)\n', 'worker_init_fn': 'def worker_init_fn(worker_id):\n    """Reseed the worker\'s copy of the Dataset\'s Generator (dataset.rng) from the worker\'s own seed."""\n    info = torch.utils.data.get_worker_info()\n    info.dataset.rng = np.random.default_rng(info.seed)\n', 'build_vocab': 'def build_vocab(texts):\n    """{word: index} for every distinct word, the same in every process."""\n    words = sorted(set(" ".join(texts).split(" ")))\n    return {w: i for i, w in enumerate(words)}\n', 'make_loader': 'def make_loader(dataset, seed):\n    """A shuffled DataLoader with 2 workers whose batches and augmentations depend on `seed` alone."""\n    return DataLoader(dataset, batch_size=4, shuffle=True, num_workers=2, worker_init_fn=worker_init_fn,\n                      generator=torch.Generator().manual_seed(seed))\n'},
        'lost': {'check_pipeline': "build_vocab's words"}},
    # sorted by str.casefold: words that differ only in case ('Great', 'great') compare equal and keep the set's ord
    'bv_casefold_sort_ties_in_set_order': {'cells': {'seed_everything': 'def seed_everything(seed):\n    """Seed random, numpy\'s global generator and torch with `seed`."""\n    random.seed(seed)\n    np.random.seed(seed)\n    torch.manual_seed(seed)\n', 'worker_init_fn': 'def worker_init_fn(worker_id):\n    """Reseed the worker\'s copy of the Dataset\'s Generator (dataset.rng) from the worker\'s own seed."""\n    info = torch.utils.data.get_worker_info()\n    info.dataset.rng = np.random.default_rng(info.seed)\n', 'build_vocab': 'def build_vocab(texts):\n    """{word: index} for every distinct word, the same in every process."""\n    words = sorted({w for t in texts for w in t.split()}, key=str.casefold)   # alphabetical, ignoring case\n    return {w: i for i, w in enumerate(words)}\n', 'make_loader': 'def make_loader(dataset, seed):\n    """A shuffled DataLoader with 2 workers whose batches and augmentations depend on `seed` alone."""\n    return DataLoader(dataset, batch_size=4, shuffle=True, num_workers=2, worker_init_fn=worker_init_fn,\n                      generator=torch.Generator().manual_seed(seed))\n'},
        'lost': {'check_pipeline': 'the vocabulary in two processes (two fresh interpreters, PYTHONHASHSEED=1 and 2, seed 0)'}},
    # generator=torch.manual_seed(seed) passes torch's GLOBAL default generator (and reseeds it): the shuffle and wo
    'ml_generator_is_torch_manual_seed': {'cells': {'seed_everything': 'def seed_everything(seed):\n    """Seed random, numpy\'s global generator and torch with `seed`."""\n    random.seed(seed)\n    np.random.seed(seed)\n    torch.manual_seed(seed)\n', 'worker_init_fn': 'def worker_init_fn(worker_id):\n    """Reseed the worker\'s copy of the Dataset\'s Generator (dataset.rng) from the worker\'s own seed."""\n    info = torch.utils.data.get_worker_info()\n    info.dataset.rng = np.random.default_rng(info.seed)\n', 'build_vocab': 'def build_vocab(texts):\n    """{word: index} for every distinct word, the same in every process."""\n    words = sorted({w for t in texts for w in t.split()})\n    return {w: i for i, w in enumerate(words)}\n', 'make_loader': 'def make_loader(dataset, seed):\n    """A shuffled DataLoader with 2 workers whose batches and augmentations depend on `seed` alone."""\n    return DataLoader(dataset, batch_size=4, shuffle=True, num_workers=2, worker_init_fn=worker_init_fn,\n                      generator=torch.manual_seed(seed))   # manual_seed returns a seeded Generator\n'},
        'lost': {'check_pipeline': "two loaders with the same seed, made after different draws from torch's global generator ("}},
    # the seeded Generator goes to a RandomSampler only, not to the DataLoader (3d: pass it as generator=): the orde
    'ml_seeded_sampler_unseeded_worker_seeds': {'cells': {'seed_everything': 'def seed_everything(seed):\n    """Seed random, numpy\'s global generator and torch with `seed`."""\n    random.seed(seed)\n    np.random.seed(seed)\n    torch.manual_seed(seed)\n', 'worker_init_fn': 'def worker_init_fn(worker_id):\n    """Reseed the worker\'s copy of the Dataset\'s Generator (dataset.rng) from the worker\'s own seed."""\n    info = torch.utils.data.get_worker_info()\n    info.dataset.rng = np.random.default_rng(info.seed)\n', 'build_vocab': 'def build_vocab(texts):\n    """{word: index} for every distinct word, the same in every process."""\n    words = sorted({w for t in texts for w in t.split()})\n    return {w: i for i, w in enumerate(words)}\n', 'make_loader': 'from torch.utils.data import RandomSampler\n\n\ndef make_loader(dataset, seed):\n    """A shuffled DataLoader with 2 workers whose batches and augmentations depend on `seed` alone."""\n    sampler = RandomSampler(dataset, generator=torch.Generator().manual_seed(seed))\n    return DataLoader(dataset, batch_size=4, sampler=sampler, num_workers=2, worker_init_fn=worker_init_fn)\n'},
        'lost': {'check_pipeline': "two loaders with the same seed, made after different draws from torch's global generator ("}},
    # drop_last=True: with a dataset whose size is not a multiple of 4 the short last batch is never seen (3d asks b
    'ml_drop_last': {'cells': {'seed_everything': 'def seed_everything(seed):\n    """Seed random, numpy\'s global generator and torch with `seed`."""\n    random.seed(seed)\n    np.random.seed(seed)\n    torch.manual_seed(seed)\n', 'worker_init_fn': 'def worker_init_fn(worker_id):\n    """Reseed the worker\'s copy of the Dataset\'s Generator (dataset.rng) from the worker\'s own seed."""\n    info = torch.utils.data.get_worker_info()\n    info.dataset.rng = np.random.default_rng(info.seed)\n', 'build_vocab': 'def build_vocab(texts):\n    """{word: index} for every distinct word, the same in every process."""\n    words = sorted({w for t in texts for w in t.split()})\n    return {w: i for i, w in enumerate(words)}\n', 'make_loader': 'def make_loader(dataset, seed):\n    """A shuffled DataLoader with 2 workers whose batches and augmentations depend on `seed` alone."""\n    return DataLoader(dataset, batch_size=4, shuffle=True, num_workers=2, worker_init_fn=worker_init_fn,\n                      generator=torch.Generator().manual_seed(seed), drop_last=True)   # equal-sized batches\n'},
        'lost': {'check_pipeline': "the items of one epoch of make_loader's DataLoader (10 items)"}},
    # its own torch.Generator() but never seeded with `seed` (3d): every seed gives the same order and worker seeds 
    'ml_unseeded_own_generator': {'cells': {'seed_everything': 'def seed_everything(seed):\n    """Seed random, numpy\'s global generator and torch with `seed`."""\n    random.seed(seed)\n    np.random.seed(seed)\n    torch.manual_seed(seed)\n', 'worker_init_fn': 'def worker_init_fn(worker_id):\n    """Reseed the worker\'s copy of the Dataset\'s Generator (dataset.rng) from the worker\'s own seed."""\n    info = torch.utils.data.get_worker_info()\n    info.dataset.rng = np.random.default_rng(info.seed)\n', 'build_vocab': 'def build_vocab(texts):\n    """{word: index} for every distinct word, the same in every process."""\n    words = sorted({w for t in texts for w in t.split()})\n    return {w: i for i, w in enumerate(words)}\n', 'make_loader': 'def make_loader(dataset, seed):\n    """A shuffled DataLoader with 2 workers whose batches and augmentations depend on `seed` alone."""\n    generator = torch.Generator()   # its own generator, not torch\'s global one\n    return DataLoader(dataset, batch_size=4, shuffle=True, num_workers=2, worker_init_fn=worker_init_fn,\n                      generator=generator)\n'},
        'lost': {'check_pipeline': 'a loader made with seed 1 instead of 0'}},
}
for _name, _spec in BLIND6.items():
    VARIANTS[f"blind6_{_name}"] = _spec

BLIND7 = {  # blind round 7: cases that were misgraded, graded right since
    # tokens are \w+ runs, not whitespace-split words (3c): 'fun!' becomes 'fun' and "don't" two tokens, so texts wi
    'bv_word_regex_tokens': {'cells': {'seed_everything': 'def seed_everything(seed):\n    """Seed random, numpy\'s global generator and torch with `seed`."""\n    random.seed(seed)\n    np.random.seed(seed)\n    torch.manual_seed(seed)\n', 'worker_init_fn': 'def worker_init_fn(worker_id):\n    """Reseed the worker\'s copy of the Dataset\'s Generator (dataset.rng) from the worker\'s own seed."""\n    info = torch.utils.data.get_worker_info()\n    info.dataset.rng = np.random.default_rng(info.seed)\n', 'build_vocab': 'import re\n\n\ndef build_vocab(texts):\n    """{word: index} for every distinct word, the same in every process."""\n    words = sorted({w for t in texts for w in re.findall(r"\\w+", t)})\n    return {w: i for i, w in enumerate(words)}\n', 'make_loader': 'def make_loader(dataset, seed):\n    """A shuffled DataLoader with 2 workers whose batches and augmentations depend on `seed` alone."""\n    return DataLoader(dataset, batch_size=4, shuffle=True, num_workers=2, worker_init_fn=worker_init_fn,\n                      generator=torch.Generator().manual_seed(seed))\n'},
        'lost': {'check_pipeline': "build_vocab's words"}},
    # shuffle=False (3d asks shuffle=True): the order never depends on `seed`; reproducible, but not the loader the 
    'ml_no_shuffle': {'cells': {'seed_everything': 'def seed_everything(seed):\n    """Seed random, numpy\'s global generator and torch with `seed`."""\n    random.seed(seed)\n    np.random.seed(seed)\n    torch.manual_seed(seed)\n', 'worker_init_fn': 'def worker_init_fn(worker_id):\n    """Reseed the worker\'s copy of the Dataset\'s Generator (dataset.rng) from the worker\'s own seed."""\n    info = torch.utils.data.get_worker_info()\n    info.dataset.rng = np.random.default_rng(info.seed)\n', 'build_vocab': 'def build_vocab(texts):\n    """{word: index} for every distinct word, the same in every process."""\n    words = sorted({w for t in texts for w in t.split()})\n    return {w: i for i, w in enumerate(words)}\n', 'make_loader': 'def make_loader(dataset, seed):\n    """A shuffled DataLoader with 2 workers whose batches and augmentations depend on `seed` alone."""\n    return DataLoader(dataset, batch_size=4, shuffle=False, num_workers=2, worker_init_fn=worker_init_fn,\n                      generator=torch.Generator().manual_seed(seed))   # a fixed order: nothing to reproduce\n'},
        'lost': {'check_pipeline': "the order of one epoch of make_loader's DataLoader (10 items)"}},
}
for _name, _spec in BLIND7.items():
    VARIANTS[f"blind7_{_name}"] = _spec

BLIND8 = {  # blind round 8: cases that were misgraded, graded right since
    # torch.manual_seed is skipped when torch.initial_seed() already equals the seed: a second seed_everything(seed)
    'se_skips_torch_when_initial_seed_matches': {'cells': {'seed_everything': 'def seed_everything(seed):\n    """Seed random, numpy\'s global generator and torch with `seed`."""\n    random.seed(seed)\n    np.random.seed(seed)\n    if torch.initial_seed() != seed:   # already seeded with it: reseeding every device is slow on big machines\n        torch.manual_seed(seed)\n', 'worker_init_fn': 'def worker_init_fn(worker_id):\n    """Reseed the worker\'s copy of the Dataset\'s Generator (dataset.rng) from the worker\'s own seed."""\n    info = torch.utils.data.get_worker_info()\n    info.dataset.rng = np.random.default_rng(info.seed)\n', 'build_vocab': 'def build_vocab(texts):\n    """{word: index} for every distinct word, the same in every process."""\n    words = sorted({w for t in texts for w in t.split()})\n    return {w: i for i, w in enumerate(words)}\n', 'make_loader': 'def make_loader(dataset, seed):\n    """A shuffled DataLoader with 2 workers whose batches and augmentations depend on `seed` alone."""\n    return DataLoader(dataset, batch_size=4, shuffle=True, num_workers=2, worker_init_fn=worker_init_fn,\n                      generator=torch.Generator().manual_seed(seed))\n'},
        'lost': {'check_seed_everything': 'torch.rand(3) after a second seed_everything(0), called after draws from every generator'}},
    # 3d: each loader's OWN torch.Generator seeded with seed: one module-level Generator shared by every loader is r
    'ml_one_shared_module_generator': {'cells': {'seed_everything': 'def seed_everything(seed):\n    """Seed random, numpy\'s global generator and torch with `seed`."""\n    random.seed(seed)\n    np.random.seed(seed)\n    torch.manual_seed(seed)\n', 'worker_init_fn': 'def worker_init_fn(worker_id):\n    """Reseed the worker\'s copy of the Dataset\'s Generator (dataset.rng) from the worker\'s own seed."""\n    info = torch.utils.data.get_worker_info()\n    info.dataset.rng = np.random.default_rng(info.seed)\n', 'build_vocab': 'def build_vocab(texts):\n    """{word: index} for every distinct word, the same in every process."""\n    words = sorted({w for t in texts for w in t.split()})\n    return {w: i for i, w in enumerate(words)}\n', 'make_loader': 'LOADER_GENERATOR = torch.Generator()   # one generator for the loaders, reseeded for each\n\n\ndef make_loader(dataset, seed):\n    """A shuffled DataLoader with 2 workers whose batches and augmentations depend on `seed` alone."""\n    LOADER_GENERATOR.manual_seed(seed)\n    return DataLoader(dataset, batch_size=4, shuffle=True, num_workers=2, worker_init_fn=worker_init_fn,\n                      generator=LOADER_GENERATOR)\n'},
        'lost': {'check_pipeline': 'a loader made with seed 0, then a second loader made with seed 1 before the first is itera'}},
}
for _name, _spec in BLIND8.items():
    VARIANTS[f"blind8_{_name}"] = _spec

BLIND9 = {  # blind round 9: cases that were misgraded, graded right since
    # 3d: 'its own torch.Generator seeded with `seed`': seed + 1 gives the batches and worker seeds of another seed 
    'ml_generator_seeded_seed_plus_one': {'cells': {'seed_everything': 'def seed_everything(seed):\n    """Seed random, numpy\'s global generator and torch with `seed`."""\n    random.seed(seed)\n    np.random.seed(seed)\n    torch.manual_seed(seed)\n', 'worker_init_fn': 'def worker_init_fn(worker_id):\n    """Reseed the worker\'s copy of the Dataset\'s Generator (dataset.rng) from the worker\'s own seed."""\n    info = torch.utils.data.get_worker_info()\n    info.dataset.rng = np.random.default_rng(info.seed)\n', 'build_vocab': 'def build_vocab(texts):\n    """{word: index} for every distinct word, the same in every process."""\n    words = sorted({w for t in texts for w in t.split()})\n    return {w: i for i, w in enumerate(words)}\n', 'make_loader': 'def make_loader(dataset, seed):\n    """A shuffled DataLoader with 2 workers whose batches and augmentations depend on `seed` alone."""\n    generator = torch.Generator().manual_seed(seed + 1)   # keep it apart from torch.manual_seed(seed)\n    return DataLoader(dataset, batch_size=4, shuffle=True, num_workers=2, worker_init_fn=worker_init_fn,\n                      generator=generator)\n'},
        'lost': {'check_pipeline': "whose generator is seeded with 1: seed it with `seed` itself"}},
    # 3a: seeds 'at every call' ('a second call with the same seed starts every stream over again'): with @lru_cache
    'se_lru_cache_memoized': {'cells': {'seed_everything': 'import functools\n\n\n@functools.lru_cache(maxsize=None)\ndef seed_everything(seed):\n    """Seed random, numpy\'s global generator and torch with `seed`."""\n    random.seed(seed)\n    np.random.seed(seed)\n    torch.manual_seed(seed)\n', 'worker_init_fn': 'def worker_init_fn(worker_id):\n    """Reseed the worker\'s copy of the Dataset\'s Generator (dataset.rng) from the worker\'s own seed."""\n    info = torch.utils.data.get_worker_info()\n    info.dataset.rng = np.random.default_rng(info.seed)\n', 'build_vocab': 'def build_vocab(texts):\n    """{word: index} for every distinct word, the same in every process."""\n    words = sorted({w for t in texts for w in t.split()})\n    return {w: i for i, w in enumerate(words)}\n', 'make_loader': 'def make_loader(dataset, seed):\n    """A shuffled DataLoader with 2 workers whose batches and augmentations depend on `seed` alone."""\n    return DataLoader(dataset, batch_size=4, shuffle=True, num_workers=2, worker_init_fn=worker_init_fn,\n                      generator=torch.Generator().manual_seed(seed))\n'},
        'lost': {'check_seed_everything': 'at every call'}},  # shipped to the pipeline's interpreters in a fresh cache, as a script
}
for _name, _spec in BLIND9.items():
    VARIANTS[f"blind9_{_name}"] = _spec

BLIND11 = {  # blind round 11: cases that were misgraded, graded right since
    # seed_everything seeds torch with torch.default_generator.manual_seed(seed) (the CPU generator object) instead 
    'seed_cpu_generator_only': {'cells': {'seed_everything': 'def seed_everything(seed):\n    """Seed random, numpy\'s global generator and torch with `seed`."""\n    random.seed(seed)\n    np.random.seed(seed)\n    torch.default_generator.manual_seed(seed)   # torch\'s generator\n', 'worker_init_fn': 'def worker_init_fn(worker_id):\n    """Reseed the worker\'s copy of the Dataset\'s Generator (dataset.rng) from the worker\'s own seed."""\n    info = torch.utils.data.get_worker_info()\n    info.dataset.rng = np.random.default_rng(info.seed)\n', 'build_vocab': 'def build_vocab(texts):\n    """{word: index} for every distinct word, the same in every process."""\n    words = sorted({word for text in texts for word in text.split()})\n    return {word: i for i, word in enumerate(words)}\n', 'make_loader': 'def make_loader(dataset, seed):\n    """A shuffled DataLoader with 2 workers whose batches and augmentations depend on `seed` alone."""\n    generator = torch.Generator()\n    generator.manual_seed(seed)\n    return DataLoader(dataset, batch_size=4, shuffle=True, num_workers=2, worker_init_fn=worker_init_fn,\n                      generator=generator)\n'},
        'lost': {'check_seed_everything': "the GPU's (CUDA's) generators after seed_everything"}},
}
for _name, _spec in BLIND11.items():
    VARIANTS[f"blind11_{_name}"] = _spec

BLIND12 = {  # blind round 12: cases that were misgraded, graded right since
    # Correct: build_vocab memoises the sorted word tuple per tuple(texts) in an lru_cache'd helper, and returns a f
    'ok_vocab_lru_cache_helper': {'cells': {'seed_everything': 'def seed_everything(seed):\n    """Seed random, numpy\'s global generator and torch with `seed`."""\n    random.seed(seed)\n    np.random.seed(seed)\n    torch.manual_seed(seed)\n', 'worker_init_fn': 'def worker_init_fn(worker_id):\n    """Reseed the worker\'s copy of the Dataset\'s Generator (dataset.rng) from the worker\'s own seed."""\n    info = torch.utils.data.get_worker_info()\n    info.dataset.rng = np.random.default_rng(info.seed)\n', 'build_vocab': 'import functools\n\n@functools.lru_cache(maxsize=None)\ndef _sorted_words(texts):\n    return tuple(sorted({w for t in texts for w in t.split()}))\n\ndef build_vocab(texts):\n    """{word: index} for every distinct word, the same in every process."""\n    return {w: i for i, w in enumerate(_sorted_words(tuple(texts)))}   # a new dict at every call\n', 'make_loader': 'def make_loader(dataset, seed):\n    """A shuffled DataLoader with 2 workers whose batches and augmentations depend on `seed` alone."""\n    g = torch.Generator()\n    g.manual_seed(seed)\n    return DataLoader(dataset, batch_size=4, shuffle=True, num_workers=2, worker_init_fn=worker_init_fn, generator=g)\n'},
        'lost': {}},
}
for _name, _spec in BLIND12.items():
    VARIANTS[f"blind12_{_name}"] = _spec

BLIND14 = {  # blind round 14: cases that were misgraded, graded right since
    # make_loader returns a DataLoader subclass whose __iter__ reseeds its Generator with `seed` ('every epoch repro
    'loader_reseed_every_epoch': {'cells': {'seed_everything': 'def seed_everything(seed):\n    """Seed random, numpy\'s global generator and torch with `seed`."""\n    random.seed(seed)\n    np.random.seed(seed)\n    torch.manual_seed(seed)\n', 'worker_init_fn': 'def worker_init_fn(worker_id):\n    """Reseed the worker\'s copy of the Dataset\'s Generator (dataset.rng) from the worker\'s own seed."""\n    info = torch.utils.data.get_worker_info()\n    info.dataset.rng = np.random.default_rng(info.seed)\n', 'build_vocab': 'def build_vocab(texts):\n    """{word: index} for every distinct word, the same in every process."""\n    words = sorted({w for t in texts for w in t.split()})\n    return {w: i for i, w in enumerate(words)}\n', 'make_loader': 'class _EpochSeededLoader(DataLoader):\n    def __init__(self, dataset, seed, **kw):\n        self._seed = seed\n        super().__init__(dataset, generator=torch.Generator().manual_seed(seed), **kw)\n\n    def __iter__(self):\n        self.generator.manual_seed(self._seed)   # each epoch starts from the same, known state\n        return super().__iter__()\n\ndef make_loader(dataset, seed):\n    return _EpochSeededLoader(dataset, seed, batch_size=4, shuffle=True, num_workers=2,\n                              worker_init_fn=worker_init_fn)\n'},
        'lost': {'check_pipeline': "the second epoch of make_loader(dataset, 0)'s DataLoader"}},
}
for _name, _spec in BLIND14.items():
    VARIANTS[f"blind14_{_name}"] = _spec
BLIND17 = {  # blind round 17: cases that were misgraded, graded right since
    # DEVICE-DEPENDENT: on a GPU machine torch's CPU generator (torch.rand(3), nn.Linear's init) is never seeded; on
    'seed_cuda_instead_of_cpu_on_gpu': {'cells': {'seed_everything': 'def seed_everything(seed):\n    """Seed random, numpy\'s global generator and torch with `seed`."""\n    random.seed(seed)\n    np.random.seed(seed)\n    if torch.cuda.is_available():\n        torch.cuda.manual_seed_all(seed)   # "the GPU is where training happens"\n    else:\n        torch.manual_seed(seed)\n', 'worker_init_fn': 'def worker_init_fn(worker_id):\n    """Reseed the worker\'s copy of the Dataset\'s Generator (dataset.rng) from the worker\'s own seed."""\n    info = torch.utils.data.get_worker_info()\n    info.dataset.rng = np.random.default_rng(info.seed)\n', 'build_vocab': 'def build_vocab(texts):\n    """{word: index} for every distinct word, the same in every process."""\n    words = sorted({w for t in texts for w in t.split()})\n    return {w: i for i, w in enumerate(words)}\n', 'make_loader': 'def make_loader(dataset, seed):\n    """A shuffled DataLoader with 2 workers whose batches and augmentations depend on `seed` alone."""\n    return DataLoader(dataset, batch_size=4, shuffle=True, num_workers=2, worker_init_fn=worker_init_fn,\n                      generator=torch.Generator().manual_seed(seed))\n'},
        'lost': {'check_seed_everything': 'torch.rand(3) after seed_everything'}},
}
for _name, _spec in BLIND17.items():
    VARIANTS[f"blind17_{_name}"] = _spec


BLIND18 = {  # blind round 18: cases that were misgraded, graded right since
    # Correct, AMBIGUOUS wording (the text names shuffle=True and batch_size=4 as arguments): the student spells out
    'ok_loader_batch_sampler_shared_generator': {'cells': {'seed_everything': 'def seed_everything(seed):\n    """Seed random, numpy\'s global generator and torch with `seed`."""\n    random.seed(seed)\n    np.random.seed(seed)\n    torch.manual_seed(seed)\n', 'worker_init_fn': 'def worker_init_fn(worker_id):\n    """Reseed the worker\'s copy of the Dataset\'s Generator (dataset.rng) from the worker\'s own seed."""\n    info = torch.utils.data.get_worker_info()\n    info.dataset.rng = np.random.default_rng(info.seed)\n', 'build_vocab': 'def build_vocab(texts):\n    """{word: index} for every distinct word, the same in every process."""\n    words = sorted({w for t in texts for w in t.split()})\n    return {w: i for i, w in enumerate(words)}\n', 'make_loader': 'from torch.utils.data import BatchSampler, RandomSampler\n\ndef make_loader(dataset, seed):\n    """A shuffled DataLoader with 2 workers whose batches and augmentations depend on `seed` alone."""\n    g = torch.Generator()\n    g.manual_seed(seed)\n    batches = BatchSampler(RandomSampler(dataset, generator=g), batch_size=4, drop_last=False)\n    return DataLoader(dataset, batch_sampler=batches, num_workers=2, worker_init_fn=worker_init_fn, generator=g)\n'},
        'lost': {}},
}
for _name, _spec in BLIND18.items():
    VARIANTS[f"blind18_{_name}"] = _spec


BLIND19 = {  # blind round 19: cases that were misgraded, graded right since
    # Reseeds only when there are several workers, reading the bug as 'workers duplicate each other'. With one worke
    'worker_reseeds_only_with_several_workers': {'cells': {'seed_everything': 'def seed_everything(seed):\n    """Seed random, numpy\'s global generator and torch with `seed`."""\n    random.seed(seed)\n    np.random.seed(seed)\n    torch.manual_seed(seed)\n', 'worker_init_fn': 'def worker_init_fn(worker_id):\n    """Reseed the worker\'s copy of the Dataset\'s Generator (dataset.rng) from the worker\'s own seed."""\n    info = torch.utils.data.get_worker_info()\n    if info.num_workers > 1:      # one worker cannot duplicate another: nothing to fix\n        info.dataset.rng = np.random.default_rng(info.seed)\n', 'build_vocab': 'def build_vocab(texts):\n    """{word: index} for every distinct word, the same in every process."""\n    words = sorted({w for t in texts for w in t.split()})\n    return {w: i for i, w in enumerate(words)}\n', 'make_loader': 'def make_loader(dataset, seed):\n    """A shuffled DataLoader with 2 workers whose batches and augmentations depend on `seed` alone."""\n    return DataLoader(dataset, batch_size=4, shuffle=True, num_workers=2, worker_init_fn=worker_init_fn,\n                      generator=torch.Generator().manual_seed(seed))\n'},
        'lost': {'check_worker_init_fn': "epoch 1's augmentations in a DataLoader with"}},
}
for _name, _spec in BLIND19.items():
    VARIANTS[f"blind19_{_name}"] = _spec


BLIND20 = {  # blind round 20: cases that were misgraded, graded right since
    # Caches the vocabulary by id(texts): a list freed after one call and a new list allocated at the same address g
    'vocab_cached_by_id_of_texts': {'cells': {'seed_everything': 'def seed_everything(seed):\n    """Seed random, numpy\'s global generator and torch with `seed`."""\n    random.seed(seed)\n    np.random.seed(seed)\n    torch.manual_seed(seed)\n', 'worker_init_fn': 'def worker_init_fn(worker_id):\n    """Reseed the worker\'s copy of the Dataset\'s Generator (dataset.rng) from the worker\'s own seed."""\n    info = torch.utils.data.get_worker_info()\n    info.dataset.rng = np.random.default_rng(info.seed)\n', 'build_vocab': '_VOCABS = {}\n\ndef build_vocab(texts):\n    """{word: index} for every distinct word, the same in every process."""\n    key = id(texts)                             # building a vocabulary is costly: once per corpus\n    if key not in _VOCABS:\n        words = sorted({w for t in texts for w in t.split()})\n        _VOCABS[key] = {w: i for i, w in enumerate(words)}\n    return _VOCABS[key]\n', 'make_loader': 'def make_loader(dataset, seed):\n    """A shuffled DataLoader with 2 workers whose batches and augmentations depend on `seed` alone."""\n    return DataLoader(dataset, batch_size=4, shuffle=True, num_workers=2, worker_init_fn=worker_init_fn,\n                      generator=torch.Generator().manual_seed(seed))\n'},
        'lost': {'check_pipeline': 'called again after a text was added to the same list'}},
    # Vocabulary habit: the MAX_VOCAB=1000 most frequent words (ties by the word: deterministic, 0..n-1). Exact on a
    'vocab_capped_at_max_size': {'cells': {'seed_everything': 'def seed_everything(seed):\n    """Seed random, numpy\'s global generator and torch with `seed`."""\n    random.seed(seed)\n    np.random.seed(seed)\n    torch.manual_seed(seed)\n', 'worker_init_fn': 'def worker_init_fn(worker_id):\n    """Reseed the worker\'s copy of the Dataset\'s Generator (dataset.rng) from the worker\'s own seed."""\n    info = torch.utils.data.get_worker_info()\n    info.dataset.rng = np.random.default_rng(info.seed)\n', 'build_vocab': 'MAX_VOCAB = 1000\n\ndef build_vocab(texts):\n    """{word: index} for every distinct word, the same in every process."""\n    from collections import Counter\n    counts = Counter(w for t in texts for w in t.split())\n    words = sorted(counts, key=lambda w: (-counts[w], w))[:MAX_VOCAB]   # the most frequent words, as usual\n    return {w: i for i, w in enumerate(words)}\n', 'make_loader': 'def make_loader(dataset, seed):\n    """A shuffled DataLoader with 2 workers whose batches and augmentations depend on `seed` alone."""\n    return DataLoader(dataset, batch_size=4, shuffle=True, num_workers=2, worker_init_fn=worker_init_fn,\n                      generator=torch.Generator().manual_seed(seed))\n'},
        'lost': {'check_pipeline': "build_vocab's words"}},
    # re.split(r'\s+', text.strip()) equals text.split() on every text with a word, but on an empty or whitespace-on
    'vocab_re_split_empty_word': {'cells': {'seed_everything': 'def seed_everything(seed):\n    """Seed random, numpy\'s global generator and torch with `seed`."""\n    random.seed(seed)\n    np.random.seed(seed)\n    torch.manual_seed(seed)\n', 'worker_init_fn': 'def worker_init_fn(worker_id):\n    """Reseed the worker\'s copy of the Dataset\'s Generator (dataset.rng) from the worker\'s own seed."""\n    info = torch.utils.data.get_worker_info()\n    info.dataset.rng = np.random.default_rng(info.seed)\n', 'build_vocab': 'import re\n\ndef build_vocab(texts):\n    """{word: index} for every distinct word, the same in every process."""\n    words = set()\n    for text in texts:\n        words.update(re.split(r"\\s+", text.strip()))      # split on any run of whitespace\n    return {w: i for i, w in enumerate(sorted(words))}\n', 'make_loader': 'def make_loader(dataset, seed):\n    """A shuffled DataLoader with 2 workers whose batches and augmentations depend on `seed` alone."""\n    return DataLoader(dataset, batch_size=4, shuffle=True, num_workers=2, worker_init_fn=worker_init_fn,\n                      generator=torch.Generator().manual_seed(seed))\n'},
        'lost': {'check_pipeline': '(texts with an empty one)'}},
    # Wraps the Dataset in a ConcatDataset: the same items, order and worker seeds, but get_worker_info().dataset is
    'loader_wraps_concat_dataset': {'cells': {'seed_everything': 'def seed_everything(seed):\n    """Seed random, numpy\'s global generator and torch with `seed`."""\n    random.seed(seed)\n    np.random.seed(seed)\n    torch.manual_seed(seed)\n', 'worker_init_fn': 'def worker_init_fn(worker_id):\n    """Reseed the worker\'s copy of the Dataset\'s Generator (dataset.rng) from the worker\'s own seed."""\n    info = torch.utils.data.get_worker_info()\n    info.dataset.rng = np.random.default_rng(info.seed)\n', 'build_vocab': 'def build_vocab(texts):\n    """{word: index} for every distinct word, the same in every process."""\n    words = sorted({w for t in texts for w in t.split()})\n    return {w: i for i, w in enumerate(words)}\n', 'make_loader': 'from torch.utils.data import ConcatDataset\n\ndef make_loader(dataset, seed):\n    """A shuffled DataLoader with 2 workers whose batches and augmentations depend on `seed` alone."""\n    data = ConcatDataset([dataset])              # ready for more corpora later\n    return DataLoader(data, batch_size=4, shuffle=True, num_workers=2, worker_init_fn=worker_init_fn,\n                      generator=torch.Generator().manual_seed(seed))\n'},
        'lost': {'check_pipeline': 'get_worker_info().dataset'}},
}
for _name, _spec in BLIND20.items():
    VARIANTS[f"blind20_{_name}"] = _spec
