"""Lesson 10 tools: graphs.graph_size, Forecaster / forecaster, sine_batches."""
import torch
from torch.nn import functional as F

from trainclinic import graphs


def test_graph_size_counts_nodes_and_grows_with_a_carried_graph():
    assert graphs.graph_size(torch.ones(3)) == 0
    w = torch.ones(3, requires_grad=True)
    assert graphs.graph_size(w) == 0                       # a leaf has no grad_fn
    y = (w * 2).sum()
    assert graphs.graph_size(y) == 3                       # SumBackward0, MulBackward0, AccumulateGrad
    model = graphs.forecaster(hidden=4, seed=0)
    batches = graphs.sine_batches(n_batches=3, batch_size=2, length=5)
    h, sizes = None, []
    for x, _ in batches:
        _, h = model(x, h)
        sizes.append(graphs.graph_size(h))
    assert sizes[0] < sizes[1] < sizes[2]                  # not detached: each chunk adds its nodes
    h, sizes = None, []
    for x, _ in batches:
        _, h = model(x, None if h is None else h.detach())
        sizes.append(graphs.graph_size(h))
    assert sizes[0] == sizes[1] == sizes[2]


def test_forecaster_is_seeded_and_returns_predictions_and_hidden_state():
    a, b = graphs.forecaster(hidden=6, seed=3), graphs.forecaster(hidden=6, seed=3)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert not torch.equal(graphs.forecaster(hidden=6, seed=4).head.weight, a.head.weight)
    rng = torch.get_rng_state()
    graphs.forecaster(seed=1)
    assert torch.equal(rng, torch.get_rng_state())         # the global RNG is untouched
    x = torch.randn(2, 5, 1)
    pred, h = a(x)
    assert pred.shape == (2, 5, 1) and h.shape == (1, 2, 6)


def test_sine_batches_are_consecutive_chunks():
    batches = graphs.sine_batches(n_batches=4, batch_size=3, length=5, seed=0, dtype=torch.float64)
    assert len(batches) == 4
    for x, y in batches:
        assert x.shape == y.shape == (3, 5, 1) and x.dtype == torch.float64
        assert torch.equal(x[:, 1:], y[:, :-1])            # y is x shifted by one step
    for (x0, y0), (x1, _) in zip(batches, batches[1:]):
        assert torch.equal(y0[:, -1], x1[:, 0])            # chunk k + 1 continues chunk k
    again = graphs.sine_batches(n_batches=4, batch_size=3, length=5, seed=0, dtype=torch.float64)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(batches, again))


def test_truncated_bptt_trains_the_forecaster():
    model = graphs.forecaster(hidden=16, seed=0)
    batches = graphs.sine_batches(n_batches=12, seed=0)
    h, losses = None, []
    for x, y in batches * 2:
        model.zero_grad()
        pred, h = model(x, None if h is None else h.detach())
        loss = F.mse_loss(pred, y)
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= 0.1 * p.grad
        losses.append(loss.item())
    assert sum(losses[-6:]) < 0.5 * sum(losses[:6])
