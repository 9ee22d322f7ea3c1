"""LivePlot (loss and gradient norm while a loop trains) and explore (sliders that rerun and redraw).

ipywidgets and matplotlib are imported lazily: `import trainclinic` works without them.
Under nbgrader (NBGRADER_EXECUTION set) or without a Jupyter kernel, both draw one static figure.
"""
import io
import math
import os

__all__ = ["LivePlot", "explore", "live_frontend", "draw"]


def live_frontend():
    """True in a Jupyter kernel with ipywidgets, outside grading: widgets can update live."""
    if os.environ.get("NBGRADER_EXECUTION") or os.environ.get("TRAINCLINIC_STATIC"):
        return False
    try:
        from IPython import get_ipython

        shell = get_ipython()
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return shell is not None and getattr(shell, "kernel", None) is not None


def _in_ipython():
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    return get_ipython() is not None


def _finite(values):
    return [v if v is not None and math.isfinite(v) else float("nan") for v in values]


def draw(history, title=""):
    """Render {'loss': [...], 'grad_norm': [...], other lists...} as PNG bytes, one panel each (log scales for
    wide ranges; first non-finite step marked; history['limits'] = {panel: value} draws a limit line there;
    history['reference'] = {panel: [...]} draws another run there, dashed, one value per step from 0)."""
    from matplotlib.figure import Figure

    def present(key):
        return any(v is not None for v in history.get(key) or [])

    limits = history.get("limits") or {}
    extra = [k for k, v in history.items() if k not in ("step", "loss", "grad_norm") and isinstance(v, list)
             and (present(k) or k in limits) and all(isinstance(x, (int, float)) or x is None for x in v)]
    panels = [k for k in ("loss", "grad_norm") if present(k)] + extra
    fig = Figure(figsize=(4 * max(len(panels), 2), 3), dpi=80)
    for i, key in enumerate(panels or ["loss"]):
        ax = fig.add_subplot(1, max(len(panels), 1), i + 1)
        values = list(history.get(key, []))
        steps = list(history.get("step", []))
        aligned = len(steps) == len(values)
        steps = steps if aligned else list(range(len(values)))  # e.g. one value per epoch
        ys = _finite(values)
        positive = [v for v in ys if v == v and v > 0]
        ax.plot(steps, ys, lw=1.5, color={"loss": "tab:blue", "grad_norm": "tab:orange"}.get(key, "tab:green"),
                marker="o" if len(ys) == 1 else None)  # a single point shows
        reference = (history.get("reference") or {}).get(key)  # a run to compare with: grey, dashed, underneath
        if reference:
            ax.plot(range(len(reference)), _finite(reference), lw=1.2, ls="--", color="grey", zorder=0)
        if positive and max(positive) / min(positive) > 50:
            ax.set_yscale("log")
        limit = limits.get(key)  # e.g. {"peak_MiB": budget}: a red line on that panel
        if limit is not None:
            ax.axhline(limit, color="red", ls="--", lw=1)
            ax.text(0.01, limit, f" limit {limit:.3g}", color="red", transform=ax.get_yaxis_transform(), va="bottom")
        bad = [s for s, v in zip(steps, values) if v is not None and not math.isfinite(v)]
        if bad:
            ax.axvline(bad[0], color="red", ls="--", lw=1)
            ax.text(bad[0], 0.95, f" non-finite at step {bad[0]}", color="red", transform=ax.get_xaxis_transform(), va="top")
        ax.set_xlabel("step" if aligned else "epoch")
        ax.set_title(key.replace("_", " "))
        ax.grid(alpha=0.3)
    if title:
        fig.suptitle(title)
    # fixed margins, not tight_layout(): that measures every tick label and doubled the time of a redraw
    failed = bool(history.get("failure"))
    fig.subplots_adjust(left=0.07 if len(panels) > 2 else 0.1, right=0.97, wspace=0.3, top=0.8,
                        bottom=0.3 if failed else 0.17)
    if failed:  # what went wrong in this run, in the lesson's words
        fig.text(0.01, 0.01, f"FAILURE: {history['failure']}"[:160], color="red", fontsize=9, va="bottom")
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _show_png(png):
    from IPython.display import Image, display

    display(Image(data=png, format="png"))


def _png_output(png):
    """PNG bytes as one display_data output (nbformat dict), as an Output widget's `outputs` holds them."""
    import base64

    data = {"image/png": base64.b64encode(png).decode("ascii"), "text/plain": "<loss and gradient-norm plot>"}
    return {"output_type": "display_data", "data": data, "metadata": {}}


class LivePlot:
    """Loss and gradient-norm curves that redraw every `every` steps while a loop trains."""

    def __init__(self, title="", every=5):
        self.title = title
        self.every = max(int(every), 1)
        self.history = {"step": [], "loss": [], "grad_norm": []}
        self.live = live_frontend()
        self.draws = 0
        self._out = None
        if self.live:
            import ipywidgets as widgets
            from IPython.display import display

            self._out = widgets.Output()
            display(self._out)

    def update(self, step, loss, grad_norm=None):
        """Record one step (floats); redraw when live and the step is due."""
        self.history["step"].append(int(step))
        self.history["loss"].append(float(loss))
        self.history["grad_norm"].append(None if grad_norm is None else float(grad_norm))
        self._tick()

    def _tick(self):
        if self.live and len(self.history["step"]) % self.every == 0:
            self._redraw()

    def render(self):
        """The current figure as PNG bytes."""
        return draw(self.history, self.title)

    def _redraw(self):
        # Replace the widget's outputs from the kernel: one comm update per redraw, swapped in place (no flicker).
        # Not `with self._out: clear_output(wait=True); display(...)`: that capture makes the front end send every
        # image back to the kernel on the shell channel while the cell runs, and nbclient/jupyter_client (raw send
        # on the socket it is awaiting the cell's reply on) can then miss that reply until the cell timeout.
        self._out.outputs = (_png_output(self.render()),)
        self.draws += 1

    def show(self):
        """Draw the final figure: into the live widget, or once, statically (a summary line without IPython)."""
        if self.live:
            self._redraw()
        elif _in_ipython():
            _show_png(self.render())
            self.draws += 1
        else:
            print(self.summary())

    def summary(self):
        """One line: steps, first and last loss, last gradient norm."""
        loss = self.history["loss"]
        if not loss:
            return f"{self.title}: no steps recorded"
        gn = [g for g in self.history["grad_norm"] if g is not None]
        tail = f", last grad norm {gn[-1]:.3g}" if gn else ""
        return f"{self.title or 'training'}: {len(loss)} steps, loss {loss[0]:.4g} -> {loss[-1]:.4g}{tail}"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if exc[0] is None:
            self.show()
        return False


def _slider(name, spec):
    import ipywidgets as widgets

    kind, value = spec[0], spec[-1]
    common = dict(description=name, continuous_update=False, value=value)
    if kind == "bool":
        return widgets.Checkbox(description=name, value=bool(value), indent=False)
    low, high = spec[1], spec[2]
    if kind == "log":
        return widgets.FloatLogSlider(min=math.log10(low), max=math.log10(high), step=0.1, base=10, **common)
    if kind == "int":
        return widgets.IntSlider(min=low, max=high, **common)
    return widgets.FloatSlider(min=low, max=high, step=(high - low) / 100, **common)


def _run_outputs(render):
    """Call render() (PNG bytes), capturing its prints and any error, as an Output widget's `outputs` tuple.

    Set from the kernel, not captured by `with out:`, which makes the front end send every output back on the
    shell channel while the cell runs (the stall LivePlot._redraw describes).
    """
    import contextlib
    import traceback

    text, outputs = io.StringIO(), []
    try:
        with contextlib.redirect_stdout(text), contextlib.redirect_stderr(text):
            png = render()
    except Exception as exc:  # the learner's error shows under the sliders, like a cell's
        png, lines = None, [line.rstrip("\n") for line in traceback.format_exception(type(exc), exc, exc.__traceback__)]
        error = {"output_type": "error", "ename": type(exc).__name__, "evalue": str(exc), "traceback": lines}
    if text.getvalue():
        outputs.append({"output_type": "stream", "name": "stdout", "text": text.getvalue()})
    outputs.append(_png_output(png) if png is not None else error)
    return tuple(outputs)


def _values(values):
    return ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in values.items())


def explore(run, title="", failure=None, **controls):
    """Sliders that rerun `run(**values)` (returning a history dict) and redraw it.

    Each control is (kind, low, high, default) with kind 'log', 'int' or 'float', or ('bool', default) for a
    switch. `failure` maps controls to the values that show the lesson's failure: a button sets them. `run`
    shows a failure by raising (the error appears under the sliders) or by a `history["failure"]` text.
    Without a live front end it runs once with the defaults and draws one static figure.
    """
    defaults = {name: spec[-1] for name, spec in controls.items()}
    unknown = set(failure or {}) - set(controls)
    if unknown:
        raise ValueError(f"failure names controls that do not exist: {sorted(unknown)}")
    if not live_frontend():
        history = run(**defaults)
        if _in_ipython():
            _show_png(draw(history, f"{title} {_values(defaults)}".strip()))
        return history
    import ipywidgets as widgets
    from IPython.display import display

    sliders = {name: _slider(name, spec) for name, spec in controls.items()}
    out = widgets.Output()

    def redraw(_=None):  # what run() prints and raises shows under the sliders, with the figure
        values = {name: s.value for name, s in sliders.items()}
        out.outputs = _run_outputs(lambda: draw(run(**values), f"{title} {_values(values)}".strip()))

    for slider in sliders.values():
        slider.observe(redraw, names="value")
    redraw()
    row = list(sliders.values())
    if failure:
        button = widgets.Button(description="show the failure", button_style="danger",
                                tooltip=", ".join(f"{k}={v}" for k, v in failure.items()))
        reset = widgets.Button(description="reset", tooltip="back to the defaults")

        def apply(values):  # each changed control reruns once
            for name, value in values.items():
                sliders[name].value = value

        button.on_click(lambda _: apply(failure))
        reset.on_click(lambda _: apply(defaults))
        row += [button, reset]
    display(widgets.VBox([widgets.HBox(row), out]))
    return sliders
