"""Checkpoint fixtures and inspection: a file as a GPU machine writes it, and what a file holds, read without running it.

`save_tagged` writes with torch.save, every storage recorded under another device's location tag (torch's own
`torch.serialization.location_tag`, swapped for the call): on a CPU-only machine it makes the checkpoint a GPU
machine writes, whose `torch.load` fails as that one does. `describe` lists a checkpoint's location tags, the Python
globals its pickle names and its top-level keys, without importing or calling any of them.
"""
import collections
import contextlib
import io
import os
import pickle
import re
import zipfile

import torch

__all__ = ["save_tagged", "describe", "weights_only_default", "without_cuda"]


def save_tagged(obj, f=None, location="cuda:0"):
    """torch.save(obj, f) with every storage tagged `location` (as a GPU machine saves); f=None returns the bytes."""
    from torch import serialization

    target = io.BytesIO() if f is None else f
    real = serialization.location_tag
    serialization.location_tag = lambda storage: location  # what torch.save records for a tensor on `location`
    try:
        torch.save(obj, target)
    finally:
        serialization.location_tag = real
    return target.getvalue() if f is None else f


class _Stub:
    """Stands for any object the pickle builds: records the global it came from, its arguments and its state."""

    def __init__(self, *args, **kwargs):
        self.args, self.state, self.items = args, None, {}

    def __setstate__(self, state):
        self.state = state

    def __setitem__(self, key, value):
        self.items[key] = value

    def append(self, value):
        self.items[len(self.items)] = value

    def extend(self, values):
        for v in values:
            self.append(v)


class _Reader(pickle.Unpickler):
    """An unpickler that imports and calls nothing: every global becomes a stub class, every storage a record."""

    def __init__(self, file):
        super().__init__(file)
        self.globals, self.locations = [], collections.Counter()

    def find_class(self, module, name):
        module = "builtins" if module == "__builtin__" else module  # pickle protocol 2 spells it the Python 2 way
        self.globals.append(f"{module}.{name}")
        return type(name, (_Stub,), {"qualname": f"{module}.{name}"})

    def persistent_load(self, pid):
        if isinstance(pid, tuple) and len(pid) >= 4 and pid[0] == "storage":  # (storage, type, key, location, numel)
            self.locations[str(pid[3])] += 1
        return pid


def describe(f):
    """What a checkpoint holds, read without importing or calling anything: {'locations', 'globals', 'keys'}.

    `locations` counts the storages per device tag ('cpu', 'cuda:0'...), `globals` lists the Python globals its
    pickle names (sorted, unique: what weights_only=True must allow), `keys` its top-level keys when it is a dict."""
    data = f.getvalue() if isinstance(f, io.BytesIO) else open(f, "rb").read() if isinstance(f, (str, os.PathLike)) else f
    with zipfile.ZipFile(io.BytesIO(data)) as z:  # torch.save's format since torch 1.6: a zip with */data.pkl
        name = next(n for n in z.namelist() if re.fullmatch(r"[^/]+/data\.pkl", n))
        reader = _Reader(io.BytesIO(z.read(name)))
    obj = reader.load()
    keys = None
    if isinstance(obj, dict):
        keys = list(obj)
    elif isinstance(obj, _Stub) and obj.items:  # an OrderedDict (a state dict) arrives as a stub with items
        keys = list(obj.items)
    return {"locations": dict(reader.locations), "globals": sorted(set(reader.globals)), "keys": keys}


def weights_only_default():
    """True when a plain torch.load(f) loads with weights_only=True (torch >= 2.6, unless an environment variable forces it)."""
    if os.environ.get("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "0") not in ("0", ""):
        return False
    if os.environ.get("TORCH_FORCE_WEIGHTS_ONLY_LOAD", "0") not in ("0", ""):
        return True
    major, minor = (int(x) for x in re.findall(r"\d+", torch.__version__)[:2])
    return (major, minor) >= (2, 6)


@contextlib.contextmanager
def without_cuda():
    """While active, torch.cuda.is_available() says False: torch.load then behaves as on a CPU-only machine."""
    real = torch.cuda.is_available
    torch.cuda.is_available = lambda: False
    try:
        yield
    finally:
        torch.cuda.is_available = real
