"""Find the first non-finite value (NaN or inf) in training: which step, which module, forward or backward.

`watch_nonfinite(model)` hooks every module (forward pre-hooks and forward hooks; tensor hooks on the gradients of
its inputs, outputs and parameters) and stops at the first NaN or inf, naming the step, the module, and
whether it was the data, a parameter, a forward output or a gradient. `locate` runs one watched step.
`anomaly()` is PyTorch's own heavy option, `torch.autograd.detect_anomaly`, with its warnings captured
instead of written to stderr. Tensor hooks rather than full backward hooks: those warn when a module's
inputs need no gradient (the first layer always), and nothing here may write to stderr.
"""
import math
import re
import warnings

import torch

__all__ = ["NonFiniteError", "Finding", "NonFiniteWatch", "watch_nonfinite", "locate", "anomaly", "summarize", "finite", "scan"]


def _tensors(value):
    """The floating-point tensors inside a value (tensor, tuple, list, dict), in order."""
    if torch.is_tensor(value):
        return [value] if value.is_floating_point() or value.is_complex() else []
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _tensors(v)]
    return []


def finite(value):
    """True when every floating-point tensor in `value` (tensor, tuple, list, dict; a float) is finite."""
    if isinstance(value, (int, float)):
        return math.isfinite(value)
    return all(bool(torch.isfinite(t.detach()).all()) for t in _tensors(value) if t.device.type != "meta")  # meta: no data


def summarize(value):
    """'2 NaN, 1 inf in 64 values; largest finite |x| 3.1e+38' for a tensor (or the tensors in a value)."""
    ts = [t.detach().reshape(-1) for t in _tensors(value)]
    if not ts:
        return "no floating-point tensors"
    t = torch.cat([x.to("cpu", torch.float64) if not x.is_complex() else x.abs().cpu().double() for x in ts])
    nan, inf = int(torch.isnan(t).sum()), int(torch.isinf(t).sum())
    bad = ", ".join(f"{k} {what}" for k, what in ((nan, "NaN"), (inf, "inf")) if k) or "no NaN or inf"
    ok = t[torch.isfinite(t)]
    big = f"; largest finite |x| {ok.abs().max().item():.3g}" if ok.numel() else ""
    return f"{bad} in {t.numel()} value{'s' if t.numel() != 1 else ''}{big}"


def scan(model):
    """{name: description} for every parameter or gradient of `model` holding NaN or inf ({} when all finite)."""
    out = {}
    for name, p in model.named_parameters():
        if not finite(p):
            out[name] = summarize(p)
        if p.grad is not None and not finite(p.grad):
            out[f"{name}.grad"] = summarize(p.grad)
    return out


class Finding:
    """Where the first non-finite value appeared: step, module name, phase ('forward'/'backward'), kind, place."""

    WHY = {
        "data": "The data itself holds NaN/inf: check the batch before training on it.",
        "input": "It was computed between modules, in the forward code of the module that calls this one.",
        "parameter": "The weights were already non-finite before this forward pass: an earlier optimizer step wrote "
                     "them (learning rate too high? a step taken on a NaN loss?).",
        "forward": "Its inputs were finite: this module overflowed or computed NaN (log(0), sqrt(<0), 0/0, inf-inf).",
        "value": "Everything the model computed before it was finite: the loss (or this computation) overflowed or "
                 "computed NaN.",
        "gradient from outside": "It came from the loss (or whatever follows the model), not from the model.",
        "gradient": "The gradient arriving at its output was finite: this module's backward produced it.",
        "parameter gradient": "This module's backward produced it.",
    }

    def __init__(self, step, place, kind, detail, module=None):
        self.step, self.place, self.kind, self.detail, self.module = step, place, kind, detail, module
        self.phase = "backward" if "gradient" in kind else "forward"

    def __str__(self):
        return f"step {self.step}: {self.place} is non-finite ({self.detail}). {self.WHY[self.kind]}"

    def __repr__(self):
        return f"Finding(step={self.step}, module={self.module!r}, phase={self.phase!r}, kind={self.kind!r})"


class NonFiniteError(FloatingPointError):
    """Raised by `watch_nonfinite(model)` at the first NaN or inf; `.finding` says where."""

    def __init__(self, finding):
        super().__init__(str(finding))
        self.finding = finding


class NonFiniteWatch:
    """Hooks on a model that record (and, with stop=True, raise at) the first non-finite value.

    Forward: a pre-hook on each module checks the model's input and the module's own parameters, a forward
    hook checks its output (children run first, so the innermost module is named). Backward: tensor hooks
    on each module's inputs and outputs, and on each parameter, check gradients as autograd computes them;
    a module is blamed when the gradient leaving its input is non-finite while the one arriving at its
    output was finite.
    """

    def __init__(self, model, stop=True):
        self.model, self.stop = model, stop
        self.step = -1  # counts the model's forward passes: step 0 is the first
        self.first = None
        self._handles = []
        self._names = {m: (name or "model") for name, m in model.named_modules()}
        self._roles = {}  # id(tensor) -> (tensor, [(role, module)]) for the current forward pass
        self._out_ok = {}  # module -> whether the gradient arriving at its output was finite

    def _label(self, module):
        return f"module '{self._names[module]}' ({type(module).__name__})"

    def _found(self, place, kind, value, module=None):
        if self.first is not None:
            return
        name = self._names[module] if isinstance(module, torch.nn.Module) else module
        self.first = Finding(self.step, place, kind, summarize(value), name)
        if self.stop:
            raise NonFiniteError(self.first)

    def _param_name(self, module, name):
        prefix = self._names[module]
        return name if prefix == "model" else f"{prefix}.{name}"

    def _track(self, value, role, module):
        for t in _tensors(value):
            if not t.requires_grad:
                continue
            key = id(t)
            if key not in self._roles:
                self._roles[key] = (t, [])
                t.register_hook(self._grad_hook(key))
            self._roles[key][1].append((role, module))

    def _grad_hook(self, key):
        def hook(grad):
            entry = self._roles.get(key)
            if entry is None:
                return
            roles = entry[1]
            ok = finite(grad)
            for role, module in roles:
                if role == "out":
                    self._out_ok[module] = ok
            if ok or self.first is not None:
                return
            if ("out", self.model) in roles:
                self._found(f"the gradient arriving at the output of {self._label(self.model)}", "gradient from outside",
                            grad, self.model)
            blamed = [m for role, m in roles if role == "in" and self._out_ok.get(m)]
            if blamed:
                self._found(f"the gradient leaving {self._label(blamed[-1])} in backward", "gradient", grad, blamed[-1])
        return hook

    def _pre(self, module, args, kwargs):
        if module is self.model:
            self.step += 1
            self._roles.clear()
            self._out_ok.clear()
        if self.first is None and not finite((args, kwargs)):
            kind = "data" if module is self.model else "input"
            self._found(f"the input of {self._label(module)}", kind, (args, kwargs), module)
        for name, p in module.named_parameters(recurse=False):
            if self.first is None and not finite(p):
                self._found(f"parameter '{self._param_name(module, name)}'", "parameter", p, module)
        if self.first is None and torch.is_grad_enabled():
            self._track((args, kwargs), "in", module)

    def _post(self, module, args, kwargs, output):
        if self.first is None and not finite(output):
            self._found(f"the forward output of {self._label(module)}", "forward", output, module)
        if self.first is None and torch.is_grad_enabled():
            self._track(output, "out", module)

    def _param_hook(self, name):
        owner = name.rpartition(".")[0] or "model"

        def hook(grad):
            if self.first is None and not finite(grad):
                self._found(f"the gradient of parameter '{name}'", "parameter gradient", grad, owner)
        return hook

    def check(self, label, value):
        """Check any value outside the model (the loss, a metric); returns `value` unchanged."""
        if self.first is None and not finite(value):
            self._found(label, "value", value, None)
        return value

    def __enter__(self):
        for module in self._names:
            self._handles.append(module.register_forward_pre_hook(self._pre, with_kwargs=True))
            self._handles.append(module.register_forward_hook(self._post, with_kwargs=True))
        for name, p in self.model.named_parameters():
            if p.requires_grad:
                self._handles.append(p.register_hook(self._param_hook(name)))
        return self

    def __exit__(self, *exc):
        self.remove()
        return False

    def remove(self):
        """Remove every hook (done on leaving the `with` block)."""
        for h in self._handles:
            h.remove()
        self._handles.clear()
        self._roles.clear()


def watch_nonfinite(model, stop=True):
    """`with watch_nonfinite(model) as w:` raises NonFiniteError at the first NaN/inf (stop=False: only records `w.first`)."""
    return NonFiniteWatch(model, stop=stop)


def locate(model, batch, loss_fn):
    """One forward, loss and backward (no optimizer step) under watch_nonfinite(model): the first Finding, or None if all finite."""
    inputs, targets = batch
    try:
        with watch_nonfinite(model) as w:
            loss = w.check("the loss", loss_fn(model(inputs), targets))
            loss.backward()
    except NonFiniteError as err:
        return err.finding
    return None


def _user_frames(trace):
    """Keep the header and the frames of the user's own code (drop Python, Jupyter and library frames)."""
    head, _, body = trace.partition("\n")
    frames, keep = re.split(r"\n(?=  File )", "\n" + body), []
    for frame in frames:
        m = re.match(r'\s*File "([^"]+)"', frame)
        if m and not re.search(r"<frozen|site-packages|dist-packages|/lib/python3", m.group(1)):
            keep.append(frame.strip("\n"))
    return "\n".join([head, *keep]) if keep else trace


class _Anomaly:
    def __init__(self, show):
        self.show = show
        self.warnings = []
        self.trace = ""

    def __enter__(self):
        self._catch = warnings.catch_warnings(record=True)
        self.warnings = self._catch.__enter__()
        warnings.simplefilter("always")
        self._mode = torch.autograd.detect_anomaly(check_nan=True)
        self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        self._mode.__exit__(*exc)
        self._catch.__exit__(*exc)
        traces = [str(w.message) for w in self.warnings if "Traceback of forward call" in str(w.message)]
        if traces:
            text = _user_frames(traces[-1].split(" (Triggered internally")[0])
            self.trace = text
            if self.show:
                print("detect_anomaly recorded (captured from its warning):\n" + text)
        return False


def anomaly(show=True):
    """torch.autograd.detect_anomaly with its warnings captured; prints the forward trace of the op that made the NaN."""
    return _Anomaly(show)
