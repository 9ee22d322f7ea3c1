"""Tiny seeded models for the lessons."""
import torch
from torch import nn

__all__ = ["mlp", "sensor_net"]


def mlp(inputs=8, hidden=32, outputs=3, depth=2, activation=nn.ReLU, seed=0):
    """A seeded MLP: `depth` hidden Linear layers of width `hidden`, each followed by `activation`."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        layers, width = [], inputs
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), activation()]
            width = hidden
        layers.append(nn.Linear(width, outputs))
        return nn.Sequential(*layers)


def sensor_net(size=8, classes=3, channels=8, p=0.3, seed=0):
    """A seeded small CNN for (N, 1, size, size) spectrograms: Conv2d, BatchNorm2d, ReLU, Dropout, a Linear head."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return nn.Sequential(nn.Conv2d(1, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU(), nn.Dropout(p),
                             nn.Flatten(), nn.Linear(channels * size * size, classes))
