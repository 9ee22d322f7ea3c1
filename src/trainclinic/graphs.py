"""Autograd graphs, looked at, and a small recurrent model to grow one.

`graph_size(t)` counts the autograd nodes behind a tensor: it grows batch after batch when an RNN's hidden state is
carried without `detach()`, or when a validation loop adds up loss tensors. `Forecaster` and `sine_batches` are a
seeded RNN and consecutive chunks of noisy sine waves, for truncated backpropagation through time.
"""
import torch
from torch import nn

__all__ = ["graph_size", "Forecaster", "forecaster", "sine_batches"]


def graph_size(t):
    """The number of autograd nodes reachable from `t.grad_fn` (0 for a tensor without one)."""
    root = getattr(t, "grad_fn", None)
    if root is None:
        return 0
    seen, todo = {root}, [root]
    while todo:
        node = todo.pop()
        for child, _ in getattr(node, "next_functions", ()):
            if child is not None and child not in seen:
                seen.add(child)
                todo.append(child)
    return len(seen)


class Forecaster(nn.Module):
    """A one-layer RNN and a linear head: predicts the next value of each sequence. forward(x, h) -> (pred, h)."""

    def __init__(self, hidden=16):
        super().__init__()
        self.rnn = nn.RNN(1, hidden, batch_first=True)
        self.head = nn.Linear(hidden, 1)

    def forward(self, x, h=None):
        out, h = self.rnn(x, h)
        return self.head(out), h


def forecaster(hidden=16, seed=0):
    """A seeded Forecaster."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return Forecaster(hidden)


def sine_batches(n_batches=12, batch_size=8, length=16, noise=0.05, seed=0, dtype=torch.float32):
    """Consecutive chunks of `batch_size` noisy sine waves: [(x, y)] with x, y of shape (batch_size, length, 1),
    y the next value of x. Chunk k+1 continues chunk k, so an RNN's hidden state can be carried across them."""
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(n_batches * length + 1, dtype=torch.float64)
    freq = 0.1 + 0.3 * torch.rand(batch_size, 1, generator=g, dtype=torch.float64)
    phase = 6.283 * torch.rand(batch_size, 1, generator=g, dtype=torch.float64)
    series = torch.sin(freq * t + phase) + noise * torch.randn(batch_size, t.numel(), generator=g, dtype=torch.float64)
    series = series.to(dtype).unsqueeze(-1)
    return [(series[:, k * length:(k + 1) * length].clone(), series[:, k * length + 1:(k + 1) * length + 1].clone())
            for k in range(n_batches)]
