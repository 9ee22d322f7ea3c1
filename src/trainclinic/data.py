"""Tiny seeded synthetic data sets: no downloads, the same numbers on every machine."""
import random

import torch
from torch.utils.data import DataLoader, TensorDataset

__all__ = ["seed_everything", "blobs", "regression", "loader"]


def seed_everything(seed=0):
    """Seed python, numpy (if present) and torch (all devices); return the seed.

    It does not touch PYTHONHASHSEED: a running interpreter's str hashes are fixed at its start (lesson 09)."""
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:
        pass
    torch.manual_seed(seed)  # seeds every CUDA device too
    return seed


def blobs(n=512, features=8, classes=3, spread=1.0, seed=0):
    """A classification set: `classes` Gaussian blobs in `features` dimensions (float32 x, int64 y)."""
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(classes, features, generator=g) * 1.5
    y = torch.randint(0, classes, (n,), generator=g)
    x = centers[y] + spread * torch.randn(n, features, generator=g)
    return TensorDataset(x, y)


def regression(n=512, features=8, noise=0.1, seed=0):
    """A regression set: y = x @ w + noise, shapes (n, features) and (n, 1)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, features, generator=g)
    w = torch.randn(features, 1, generator=g)
    y = x @ w + noise * torch.randn(n, 1, generator=g)
    return TensorDataset(x, y)


def loader(dataset, batch_size=32, shuffle=True, seed=0):
    """A DataLoader whose shuffling is seeded (same batches every run)."""
    g = torch.Generator().manual_seed(seed)
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, generator=g)
