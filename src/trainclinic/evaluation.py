"""Validation tools: a Dropout + BatchNorm MLP, `watch_validation` (what a block did to a model) and `graph_meter`.

`watch_validation(model)` records every forward pass of the model inside a `with` block: was it in training mode,
was autograd on, what did autograd save for a backward pass, did the BatchNorm running statistics move,
and which mode the model was left in. `graph_meter()` counts only what autograd saved, and the time.
"""
import contextlib
import time

import torch
from torch import nn

__all__ = ["bn_mlp", "GraphMeter", "graph_meter", "ValidationWatch", "watch_validation", "mode", "plot_curves"]

_DROPOUT = nn.modules.dropout._DropoutNd
_BATCHNORM = nn.modules.batchnorm._BatchNorm


def bn_mlp(inputs=8, hidden=32, outputs=3, p=0.5, depth=2, seed=0):
    """A seeded MLP whose hidden layers are Linear -> BatchNorm1d -> ReLU -> Dropout(p)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        layers, width = [], inputs
        for _ in range(depth):
            layers += [nn.Linear(width, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Dropout(p)]
            width = hidden
        layers.append(nn.Linear(width, outputs))
        return nn.Sequential(*layers)


def mode(model):
    """'train', 'eval', or 'mixed' (some submodules in each mode)."""
    flags = {m.training for m in model.modules()}
    return "mixed" if len(flags) > 1 else ("train" if flags.pop() else "eval")


class GraphMeter:
    """What autograd saved for backward inside a `graph_meter()` block: tensors, activation bytes, seconds."""

    def __init__(self, model=None):
        self.saved = 0
        self.nbytes = 0
        self.seconds = 0.0
        self._params = set()
        if model is not None:
            self._params = {p.untyped_storage().data_ptr() for p in model.parameters()}

    def _pack(self, t):
        self.saved += 1
        if t.untyped_storage().data_ptr() not in self._params:  # parameters exist anyway: count activations
            self.nbytes += t.numel() * t.element_size()
        return t

    def __str__(self):
        return (f"{self.saved} tensors saved for backward ({self.nbytes / 2**20:.2f} MiB of activations in all), "
                f"{self.seconds * 1e3:.1f} ms")


@contextlib.contextmanager
def graph_meter(model=None):
    """Count tensors (and activation bytes, excluding `model`'s parameters) autograd saves in the block; time it."""
    meter = GraphMeter(model)
    start = time.perf_counter()
    try:
        with torch.autograd.graph.saved_tensors_hooks(meter._pack, lambda t: t):
            yield meter
    finally:
        meter.seconds = time.perf_counter() - start


class ValidationWatch:
    """What a block did to a model: forward passes (mode, autograd), BatchNorm buffers, saved tensors, time."""

    def __init__(self, model, keep_outputs=False):
        self.model = model
        self.keep_outputs = keep_outputs
        self.calls = []  # one dict per forward pass of the model
        self.outputs = []  # detached CPU copies when keep_outputs
        self.mode_before = mode(model)
        self.mode_after = None
        self.meter = None
        self._buffers = {n: b.detach().clone() for n, b in model.named_buffers()}
        self.bn_change = 0.0  # largest change of a running mean or variance
        self.bn_batches = 0  # increase of num_batches_tracked (summed over BatchNorm layers, first layer only)

    def _hook(self, module, args, output):
        dropout = [m.training for m in module.modules() if isinstance(m, _DROPOUT)]
        norm = [m.training for m in module.modules() if isinstance(m, _BATCHNORM)]
        self.calls.append({
            "training": module.training,
            "modules_training": sorted({type(m).__name__ for m in module.modules() if m.training}),
            "modules_eval": sorted({type(m).__name__ for m in module.modules() if not m.training}),
            "dropout_active": any(dropout),
            "bn_batch_stats": any(norm),
            "grad_enabled": torch.is_grad_enabled(),
            "requires_grad": torch.is_tensor(output) and output.requires_grad,
            "batch": int(args[0].shape[0]) if args and torch.is_tensor(args[0]) and args[0].dim() else None,
        })
        if self.keep_outputs and torch.is_tensor(output):
            self.outputs.append(output.detach().to("cpu", torch.float64).clone())

    def _finish(self):
        self.mode_after = mode(self.model)
        after = dict(self.model.named_buffers())
        first = True
        for name, before in self._buffers.items():
            now = after.get(name)
            if now is None:
                continue
            if name.endswith("num_batches_tracked"):
                if first:
                    self.bn_batches = int(now) - int(before)
                    first = False
            elif now.is_floating_point():
                self.bn_change = max(self.bn_change, (now.detach().cpu() - before.cpu()).abs().max().item() if now.numel() else 0.0)

    @property
    def train_calls(self):
        """Forward passes with Dropout active or BatchNorm using batch statistics."""
        return sum(c["dropout_active"] or c["bn_batch_stats"] for c in self.calls)

    @property
    def grad_calls(self):
        """Forward passes run with autograd recording."""
        return sum(c["grad_enabled"] for c in self.calls)

    def __str__(self):
        n = len(self.calls)
        lines = [f"forward passes     : {n}"]
        t = self.train_calls
        lines.append(f"  in training mode : {t}" + (" (Dropout active, BatchNorm normalising with batch statistics)" if t else ""))
        lines.append(f"  autograd on      : {self.grad_calls}" + (f" -> {self.meter}" if self.grad_calls else ""))
        moved = "CHANGED" if self.bn_change > 0 or self.bn_batches else "untouched"
        detail = f" (running stats moved by up to {self.bn_change:.3g}; num_batches_tracked +{self.bn_batches})" if moved == "CHANGED" else ""
        lines.append(f"BatchNorm buffers  : {moved}{detail}")
        lines.append(f"mode before / after: {self.mode_before} / {self.mode_after}")
        lines.append(f"time               : {self.meter.seconds * 1e3:.1f} ms")
        return "\n".join(lines)

    def _repr_pretty_(self, p, cycle):
        p.text(str(self))


@contextlib.contextmanager
def watch_validation(model, keep_outputs=False):
    """Record what the block does to `model` (forward modes, autograd, BatchNorm buffers, mode after); yield a ValidationWatch."""
    w = ValidationWatch(model, keep_outputs)
    # a plain function, not the bound method: copy.deepcopy(model) keeps it, so a copy's passes are recorded too
    handle = model.register_forward_hook(lambda module, args, output: w._hook(module, args, output))
    try:
        with graph_meter(model) as w.meter:
            yield w
    finally:
        handle.remove()
        w._finish()


def plot_curves(curves, title="", ylabel="", xlabel="epoch"):
    """Draw {label: [values per epoch]} as one static figure (printed as text outside IPython)."""
    try:
        from IPython import get_ipython

        ipython = get_ipython() is not None
    except ImportError:
        ipython = False
    if not ipython:
        for label, ys in curves.items():
            print(f"{label}: " + " ".join(f"{y:.3f}" for y in ys))
        return
    import io

    from IPython.display import Image, display
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7, 3.2), dpi=80)
    ax = fig.add_subplot(1, 1, 1)
    for label, ys in curves.items():
        ax.plot(range(1, len(ys) + 1), ys, marker="o", ms=3, lw=1.5, label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    display(Image(data=buf.getvalue(), format="png"))
