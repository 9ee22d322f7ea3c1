"""Tiny seeded synthetic data sets: no downloads, the same numbers on every machine."""
import random

import torch
from torch.utils.data import DataLoader, Dataset, TensorDataset

__all__ = ["seed_everything", "blobs", "regression", "loader", "Spectrograms"]


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


class Spectrograms(Dataset):
    """Sensor recordings as small spectrograms, as a sensor library hands them over: float64 NumPy arrays of shape
    (size, size) (frequency x time), and the class of each recording read from a CSV, so a float64 label. Class k
    puts its energy in its own frequency band. `__getitem__` augments with noise drawn from the dataset's own
    NumPy Generator, `self.rng` (what DataLoader workers copy: lesson 09)."""

    def __init__(self, n=256, size=8, classes=3, noise=0.5, seed=0):
        import numpy as np

        g = np.random.default_rng(seed)
        self.labels = g.integers(0, classes, n).astype(np.float64)
        bands = np.zeros((classes, size, size))
        for k in range(classes):
            bands[k, (k * size) // classes: ((k + 1) * size) // classes, :] = 1.0
        self.images = bands[self.labels.astype(int)] + 0.5 * g.standard_normal((n, size, size))
        self.noise = noise
        self.rng = np.random.default_rng(seed + 1)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        image = self.images[i] + self.noise * self.rng.standard_normal(self.images[i].shape)
        return image, self.labels[i]

    def tensors(self):
        """The recordings without augmentation, ready for the model: float32 (n, 1, size, size) and int64 (n,)
        labels (a validation set's TensorDataset)."""
        return torch.from_numpy(self.images).unsqueeze(1).float(), torch.from_numpy(self.labels).long()
