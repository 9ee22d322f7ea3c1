"""Exploding and vanishing gradients: a per-layer profile and a live gradient-norm dashboard.

`profile` measures every layer's gradient norm on one batch; `table` prints it on a log scale;
`Dashboard` records loss, total and per-layer gradient norms while a loop trains and redraws them
(live in Jupyter, one static figure under nbgrader); `failure` says in one line what went wrong in a
run (an explosion, or a loss stuck at the constant guess, with the ReLU layers that died).
matplotlib and ipywidgets load lazily.
"""
import io
import math

import torch

from . import monitor, plots

__all__ = ["profile", "ratio", "table", "draw_layers", "Dashboard", "dead_relus", "failure"]


def profile(model, batch, loss_fn):
    """{layer: gradient norm} after one forward and backward on `batch` = (inputs, targets); gradients are cleared."""
    inputs, targets = batch
    model.zero_grad(set_to_none=True)
    loss_fn(model(inputs), targets).backward()
    norms = monitor.layer_grad_norms(model)
    model.zero_grad(set_to_none=True)
    return norms


def ratio(norms):
    """First layer's gradient norm divided by the last layer's (in the dict's order; nan if the last is 0)."""
    values = list(norms.values())
    if not values or not values[-1]:
        return float("nan")
    return float(values[0]) / float(values[-1])


def table(norms, width=40):
    """A text table of per-layer norms with log-scale bars, and the first/last ratio."""
    if not norms:
        return "no gradients: call loss.backward() first"
    logs = {k: math.log10(v) if v > 0 and math.isfinite(v) else None for k, v in norms.items()}
    finite = [v for v in logs.values() if v is not None]
    low, high = (min(finite), max(finite)) if finite else (0.0, 0.0)
    span = max(high - low, 1e-9)
    name_w = max(len(k) for k in norms)
    lines = []
    for k, v in norms.items():
        lg = logs[k]
        bar = "#" * (1 + round((lg - low) / span * (width - 1))) if lg is not None else "(non-finite or zero)"
        lines.append(f"{k:>{name_w}}  {v:9.2e}  {bar}")
    r = ratio(norms)
    if r > 0 and math.isfinite(r):
        lines.append(f"first/last = {r:.2e}  ({abs(math.log10(r)):.1f} orders of magnitude {'below' if r < 1 else 'above'})")
    return "\n".join(lines)


def _clean(values):
    return [v if v is not None and math.isfinite(v) else float("nan") for v in values]


def draw_layers(history, title="", max_norm=None):
    """Render a dashboard history as PNG bytes: loss, total gradient norm, per-layer gradient norms (log scales)."""
    from matplotlib import colormaps
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 3.2), dpi=80)
    steps = list(history.get("step", []))
    axes = [fig.add_subplot(1, 3, i + 1) for i in range(3)]
    for ax, key, color in ((axes[0], "loss", "tab:blue"), (axes[1], "grad_norm", "tab:orange")):
        values = list(history.get(key, []))
        ax.plot(steps[: len(values)], _clean(values), color=color, lw=1.5)
        bad = [s for s, v in zip(steps, values) if not math.isfinite(v)]
        if bad:
            ax.axvline(bad[0], color="red", ls="--", lw=1)
            ax.text(bad[0], 0.5, f"non-finite at step {bad[0]} ", color="red", transform=ax.get_xaxis_transform(),
                    rotation=90, ha="right", va="center")
        clipped = " (before clipping)" if max_norm is not None else ""
        ax.set_title("loss" if key == "loss" else f"total gradient norm{clipped}")
    if max_norm is not None and math.isfinite(max_norm):
        axes[1].axhline(max_norm, color="gray", ls=":", lw=1.2, label=f"max_norm {max_norm:g}")
        axes[1].legend(loc="best", fontsize=8)
    layers = history.get("layers", {})
    cmap = colormaps["viridis"]
    for i, (name, values) in enumerate(layers.items()):
        shade = cmap(i / max(len(layers) - 1, 1))
        edge = i in (0, len(layers) - 1)
        ax_label = f"{'first' if i == 0 else 'last'}: {name}" if edge else None
        axes[2].plot(steps[: len(values)], _clean(values), color=shade, lw=2 if edge else 0.8, label=ax_label)
    if layers:
        axes[2].legend(loc="best", fontsize=8)
    axes[2].set_title("per-layer gradient norm (dark = first)")
    for ax in axes:
        ys = [v for line in ax.get_lines() for v in line.get_ydata() if v == v and v > 0]
        if ys and max(ys) / min(ys) > 50:
            ax.set_yscale("log")
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.subplots_adjust(left=0.06, right=0.99, bottom=0.15, top=0.8 if title else 0.9, wspace=0.25)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


class Dashboard(plots.LivePlot):
    """Loss, total and per-layer gradient norms over steps, redrawn every `every` steps (static under grading)."""

    def __init__(self, title="", every=5, max_norm=None):
        super().__init__(title, every)
        self.max_norm = max_norm
        self.history["layers"] = {}

    def update(self, step, loss, model=None, total=None, layers=None):
        """Record one step: the loss, and the gradient norms of `model` (or the given `total` and `layers`)."""
        if layers is None:
            layers = monitor.layer_grad_norms(model) if model is not None else {}
        if total is None:
            total = monitor.grad_norm(model) if model is not None else float("nan")
        n = len(self.history["step"])
        self.history["step"].append(int(step))
        self.history["loss"].append(float(loss))
        self.history["grad_norm"].append(float(total))
        for name, value in layers.items():
            self.history["layers"].setdefault(name, [float("nan")] * n).append(float(value))
        for values in self.history["layers"].values():  # layers without a gradient this step
            values.extend([float("nan")] * (n + 1 - len(values)))
        self._tick()

    def render(self):
        """The dashboard figure as PNG bytes."""
        return draw_layers(self.history, self.title, self.max_norm)

    def last_layers(self):
        """{layer: gradient norm} at the last recorded step."""
        return {k: v[-1] for k, v in self.history["layers"].items() if v}

    def summary(self):
        """One line: steps, loss first -> last, largest total gradient norm, last first/last-layer ratio."""
        loss, gn = self.history["loss"], self.history["grad_norm"]
        if not loss:
            return f"{self.title or 'training'}: no steps recorded"
        finite = [v for v in gn if math.isfinite(v)]
        peak = f", largest grad norm {max(finite):.3g}" if finite else ""
        nonfinite = next((s for s, v in zip(self.history["step"], gn) if not math.isfinite(v)), None)
        bad = f", non-finite from step {nonfinite}" if nonfinite is not None else ""
        r = ratio(self.last_layers())
        rat = f", first/last layer {r:.2g}" if math.isfinite(r) else ""
        return f"{self.title or 'training'}: {len(loss)} steps, loss {loss[0]:.4g} -> {loss[-1]:.4g}{peak}{bad}{rat}"



def dead_relus(model, inputs):
    """Names of the ReLU layers of `model` whose every unit is 0 on every row of `inputs` (a dead layer passes
    no signal forward and no gradient back)."""
    dead, handles = [], []
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.ReLU):
            handles.append(module.register_forward_hook(
                lambda m, args, out, name=name: dead.append(name) if not bool((out > 0).any()) else None))
    try:
        with torch.no_grad():
            model(inputs)
    finally:
        for h in handles:
            h.remove()
    return dead


def failure(history, guess=None, model=None, inputs=None):
    """One line saying how a run failed, with numbers, or None: a non-finite loss or gradient norm (an explosion),
    or a last loss no better than `guess` (the loss of a constant guess), naming the ReLU layers that died."""
    steps, loss, norm = history.get("step", []), history.get("loss", []), history.get("grad_norm", [])
    values = list(zip(steps, loss, norm))
    bad = next((i for i, (_, l, n) in enumerate(values) if not (math.isfinite(l) and math.isfinite(n))), None)
    if bad is not None:
        finite = [n for _, _, n in values[:bad]]
        grew = (f"the gradient norm went from {finite[0]:.3g} to {max(finite):.3g} in {bad} steps, then it "
                if finite else "the gradient norm ")
        return f"exploded: {grew}was non-finite at step {steps[bad]} (loss {loss[bad]:.3g})"
    if guess is not None and loss and loss[-1] >= 0.95 * guess:
        dead = dead_relus(model, inputs) if model is not None and inputs is not None else []
        why = (f"; every unit of ReLU layer{'s' if len(dead) > 1 else ''} {', '.join(dead)} is dead (0 on every sample)"
               if dead else "")
        return (f"not learning: loss {loss[-1]:.3g} after {len(loss)} steps, no better than a constant guess "
                f"({guess:.3g}), gradient norm {norm[-1]:.2g}{why}")
    return None
