"""Tiny seeded models for the lessons."""
import torch
from torch import nn

__all__ = ["mlp"]


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
