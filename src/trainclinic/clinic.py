"""The clinic: run a few steps of any training loop on copies of its objects and report the course's failures.

`examine(model, loader, loss_fn, optimizer)` runs `steps` steps of the loop (the user's own `step` function, or a
standard one) on deep copies of the model and optimizer, watching them with the course's tools, and returns a
`Report`: one `Finding` per problem (its evidence with numbers, the lesson that explains it, a one-line fix) and
the measurements it took. The user's objects are never trained: the model, optimizer, scaler, loader generators,
the random states of random/numpy/torch/cuda, grad mode, thread count and warning filters are restored exactly.

    report = tc.clinic.examine(model, loader, loss_fn, optimizer)
    print(report)
"""
import copy
import math
import random
import signal
import sys
import threading
import time
import warnings

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from . import evaluation, fingerprint, memory, monitor, nonfinite
from .device import DEVICE_MISMATCH, strays

__all__ = ["Finding", "Report", "examine", "standard_step", "THRESHOLDS", "TITLES"]

# Every threshold a detector uses, chosen from measurements on the course's references (README, "The clinic").
THRESHOLDS = {
    "vanishing_ratio": 1e-2,  # first layer's gradient norm / last layer's below this: vanishing (lesson 05's own bar)
    "exploding_ratio": 1e3,  # ... above this: exploding (lesson 05)
    "exploding_norm": 30.0,  # total gradient norm at the first step (before any update) above this: exploding (05)
    "loss_rise": 2.0,  # loss on the first batch after the steps / before, above this: learning rate too high (04)
    "loss_spike": 100.0,  # a later step's training loss / the first step's, above this: learning rate too high (04)
    "headroom": 0.10,  # estimated peak above (1 - this) x the memory budget: out of memory soon (03)
    "accumulation": 1e-6,  # same batch twice: |g2 - g1| / |g1| above this, along g1: zero_grad forgotten (10)
    "accumulation_cosine": 0.99,  # ... and cos(g2 - g1, g1) above this (nondeterministic noise points anywhere)
    "probabilities": 1e-3,  # float CrossEntropy targets whose rows miss a sum of 1 by more than this (02)
}

TITLES = {
    "device": "device strays",
    "broadcast": "shape broadcasting in the loss",
    "labels": "label dtype / class-probability targets",
    "memory": "peak memory near the budget",
    "nonfinite": "non-finite values (NaN/inf)",
    "lr": "learning rate too high",
    "exploding": "exploding gradients",
    "vanishing": "vanishing gradients",
    "validation_mode": "validation in training mode",
    "validation_grad": "validation records autograd graphs",
    "scaler": "disabled GradScaler",
    "unused": "unused parameters",
    "zero_grad": "gradients accumulate (zero_grad forgotten)",
    "reproducibility": "non-reproducible run",
    "error": "the step raised an exception",
    "hang": "the step did not finish",
}

# elementwise losses, whose input and target must have one shape: their arguments' shapes are checked. A loss of
# your own (a lambda, a function) may reshape inside: there the clinic looks at the ops it runs (_Broadcasts), and
# PyTorch's own broadcast warning counts too.
_ELEMENTWISE_LOSSES = (nn.MSELoss, nn.L1Loss, nn.SmoothL1Loss, nn.HuberLoss, nn.SoftMarginLoss, nn.KLDivLoss,
                       nn.PoissonNLLLoss)
_ELEMENTWISE_FUNCTIONS = {"mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "soft_margin_loss", "kl_div",
                          "poisson_nll_loss"}
_BROADCAST_WARNING = "different to the input size"  # PyTorch's UserWarning in mse_loss, l1_loss, ...

# (words in an exception's message, lesson, problem, one-line fix) for a step that raised
_ERRORS = [
    ((*DEVICE_MISMATCH, "is not on the expected device"), "01", "device",
     "move the model once (`model.to(device)`) and every batch tensor in the step (`x.to(device)`)"),
    (("out of memory",), "03", "memory", "a smaller batch, gradient accumulation, or mixed precision (lesson 03)"),
    (("expected target dtype", "expected scalar type Long", "Expected floating point type for target"), "02", "labels",
     "class labels as int64 indices of shape (N,) (`y.long()`); float targets only as probability rows"),
    (("shapes cannot be multiplied", "size of tensor", "Expected target size", "expected scalar type",
      "multi-target not supported", "Found dtype", "but expected", "must match the size"), "02", "error",
     "print the shapes and dtypes at each layer (`tc.shapes.trace`) and fix the one that disagrees"),
    (("modified by an inplace operation", "backward through the graph a second time",
      "does not require grad and does not have a grad_fn"), "10", "error",
     "see lesson 10: no in-place change of a saved tensor, one backward per graph, detach carried state"),
]


class Finding:
    """One problem: `problem` (a key of TITLES), `evidence` (with numbers), `lesson` ('01'..'10'), `fix` (one line)."""

    __slots__ = ("problem", "evidence", "lesson", "fix")

    def __init__(self, problem, evidence, lesson, fix):
        self.problem, self.evidence, self.lesson, self.fix = problem, evidence, lesson, fix

    @property
    def title(self):
        """The problem in words."""
        return TITLES.get(self.problem, self.problem)

    def __iter__(self):
        return iter((self.problem, self.evidence, self.lesson, self.fix))

    def __eq__(self, other):
        return isinstance(other, Finding) and tuple(self) == tuple(other)

    def __repr__(self):
        return f"Finding({self.problem!r}, lesson {self.lesson}: {self.evidence!r})"


class Report(list):
    """The clinic's findings (a list of Finding), its measurements, and which checks ran; prints as a table."""

    def __init__(self, findings=()):
        super().__init__(findings)
        self.measurements = {}  # name -> number or text
        self.skipped = {}  # check -> why it did not run
        self.device = None
        self.steps = 0
        self.seconds = 0.0

    @property
    def ok(self):
        """True when nothing was found."""
        return not self

    @property
    def problems(self):
        """The problem keys of the findings, in order, each once."""
        return list(dict.fromkeys(f.problem for f in self))

    def add(self, problem, evidence, lesson, fix):
        """Record a finding (once per problem: a second one for the same problem extends the first's evidence)."""
        for f in self:
            if f.problem == problem:
                if evidence not in f.evidence:
                    f.evidence += "; " + evidence
                return f
        f = Finding(problem, evidence, lesson, fix)
        self.append(f)
        return f

    def _head(self):
        n = len(self)
        found = "no problem found" if not n else f"{n} problem{'s' if n > 1 else ''} found"
        return f"clinic: {self.steps} step{'s' if self.steps != 1 else ''} of your loop on {self.device}, " \
               f"{self.seconds:.2f} s: {found}"

    def __str__(self):
        lines = [self._head()]
        for i, f in enumerate(self, 1):
            lesson = f"lesson {f.lesson}" if f.lesson else "no lesson"
            lines += [f"[{i}] {f.title} ({lesson})", f"    evidence: {f.evidence}", f"    fix: {f.fix}"]
        if self.measurements:
            lines.append("measured:")
            lines += [f"    {k}: {v}" for k, v in self._measured()]
        if self.skipped:
            lines.append("not checked:")
            lines += [f"    {k}: {v}" for k, v in self.skipped.items()]
        return "\n".join(lines)

    def _measured(self):
        order = ["loss", "loss on the first batch", "gradient norm", "first/last layer gradient", "peak memory",
                 "memory headroom"]
        keys = [k for k in order if k in self.measurements] + [k for k in self.measurements if k not in order]
        return [(k, self.measurements[k]) for k in keys]

    def __repr__(self):
        return f"<Report {self.problems or 'ok'}>"

    def _repr_pretty_(self, p, cycle):
        p.text(str(self))

    def _repr_html_(self):
        import html

        rows = "".join(
            f"<tr><td>{html.escape(f.title)}</td><td>{f.lesson or ''}</td><td>{html.escape(f.evidence)}</td>"
            f"<td>{html.escape(f.fix)}</td></tr>" for f in self)
        table = (f"<table><tr><th>problem</th><th>lesson</th><th>evidence</th><th>fix</th></tr>{rows}</table>"
                 if self else "")
        sections = (("measured", self._measured()), ("not checked", list(self.skipped.items())))
        extra = "".join(f"<p>{what}: " + "; ".join(f"{html.escape(k)} {html.escape(str(v))}" for k, v in items)
                        + "</p>" for what, items in sections if items)
        return f"<p><b>{html.escape(self._head())}</b></p>{table}{extra}"


def _move(value, device):
    if torch.is_tensor(value):
        return value.to(device)
    if isinstance(value, (tuple, list)):
        return type(value)(_move(v, device) for v in value)
    if isinstance(value, dict):
        return {k: _move(v, device) for k, v in value.items()}
    return value


def _model_device(model):
    for t in model.parameters():
        return t.device
    for t in model.buffers():
        return t.device
    return torch.device("cpu")


def standard_step(model, batch, loss_fn, optimizer):
    """One plain step: (inputs, targets) to the model's device, zero_grad, forward, loss, backward, step; the loss."""
    inputs, targets = _move(tuple(batch), _model_device(model))
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    optimizer.step()
    return loss


def _all_tensors(value):
    """Every tensor in a nested batch (tuples, lists, dicts), in order."""
    if torch.is_tensor(value):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _all_tensors(v)]
    if isinstance(value, dict):
        return [t for k in value for t in _all_tensors(value[k])]
    return []


def _shape(t):
    return tuple(t.shape)


class _LossProbe:
    """Stands in for the loss function: records each call's input and target (shapes, dtypes, checks) and loss."""

    def __init__(self, loss_fn, report, state):
        self._fn, self._report, self._state = loss_fn, report, state

    def __getattr__(self, name):
        if name.startswith("_"):  # not set yet (a copy being made): never recurse
            raise AttributeError(name)
        return getattr(self._fn, name)

    def _elementwise(self):
        fn = self._fn
        return isinstance(fn, _ELEMENTWISE_LOSSES) or getattr(fn, "__name__", "") in _ELEMENTWISE_FUNCTIONS

    def __call__(self, *args, **kwargs):
        tensors = [a for a in args[:2] if torch.is_tensor(a)]
        watch = None
        if len(tensors) == 2:
            self._inspect(*tensors)
            if not self._elementwise() and _widens(*tensors):
                watch = _Broadcasts(*tensors)  # a loss of your own: look inside it
        if watch is None:
            out = self._fn(*args, **kwargs)
        else:
            with watch:
                out = self._fn(*args, **kwargs)
            if watch.seen is not None:
                a, b, both = watch.seen
                self._report.add(
                    "broadcast", f"inside the loss function, {watch.seen_op}() of {a} and {b} (the output's and "
                    f"the target's shapes) broadcast to {both}: {math.prod(both)} terms instead of {max(math.prod(a), math.prod(b))}",
                    "02", "make the shapes equal before combining them: `output.squeeze(-1)` or `target.view_as(output)`")
        if torch.is_tensor(out):
            self._state.setdefault("losses", []).append(out.detach())
        return out

    def _inspect(self, inp, target):
        name = getattr(self._fn, "__name__", "")
        cross_entropy = isinstance(self._fn, nn.CrossEntropyLoss) or name == "cross_entropy"
        if cross_entropy and target.is_floating_point() and target.shape == inp.shape and target.numel():
            t = target.detach().to("cpu", torch.float64)  # MPS has no float64
            gap = (t.sum(dim=1) - 1).abs().max().item() if t.dim() > 1 else float("inf")
            if t.min().item() < 0 or gap > THRESHOLDS["probabilities"]:
                self._report.add(
                    "labels", f"CrossEntropyLoss got float targets of shape {_shape(target)}, the input's shape: "
                    f"it reads them as class probabilities, but their rows sum to up to {gap + 1:.3g} away from 1 "
                    f"(smallest entry {t.min().item():.3g})", "02",
                    "class labels as int64 indices of shape (N,) (`y.long()`), or probability rows that sum to 1")
        if not self._elementwise() or not (inp.is_floating_point() and target.is_floating_point()):
            return
        if inp.shape == target.shape:
            return
        try:
            both = torch.broadcast_shapes(inp.shape, target.shape)
        except RuntimeError:
            return
        size = math.prod(both)
        if size > max(inp.numel(), target.numel()):
            self._report.add(
                "broadcast", f"loss input {_shape(inp)} and target {_shape(target)} broadcast to {tuple(both)}: "
                f"{size} differences instead of {max(inp.numel(), target.numel())}", "02",
                f"make the shapes equal: `output.squeeze(-1)` or `target.view({', '.join(map(str, inp.shape))})`")


def _widens(a, b):
    """The broadcast shape of two floating-point tensors when it has more elements than either, else None."""
    if a.shape == b.shape or not (a.is_floating_point() and b.is_floating_point()):
        return None
    try:
        both = tuple(torch.broadcast_shapes(a.shape, b.shape))
    except RuntimeError:
        return None
    return both if math.prod(both) > max(a.numel(), b.numel()) else None


class _Broadcasts(TorchFunctionMode):
    """Inside a loss of your own: the first elementwise op between a tensor of the output's shape and one of the
    target's shape that broadcasts to more elements than either (`(N, 1) - (N,)` -> `(N, N)`)."""

    OPS = {"sub", "rsub", "add", "mul", "div", "true_divide", "__sub__", "__rsub__", "__add__", "__radd__", "__mul__",
           "__rmul__", "__truediv__", "__rtruediv__", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss"}

    def __init__(self, output, target):
        super().__init__()
        self.shapes = {tuple(output.shape), tuple(target.shape)}
        self.seen = self.seen_op = None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = getattr(func, "__name__", "")
        if self.seen is None and name in self.OPS and len(args) >= 2 and torch.is_tensor(args[0]) \
                and torch.is_tensor(args[1]) and {tuple(args[0].shape), tuple(args[1].shape)} == self.shapes:
            both = _widens(args[0], args[1])
            if both is not None:
                self.seen, self.seen_op = (tuple(args[0].shape), tuple(args[1].shape), both), name.strip("_")
        return func(*args, **(kwargs or {}))


class _Timeout(BaseException):
    """Raised inside the user's step by the clinic's alarm (a BaseException so `except Exception` cannot swallow it)."""


class _Alarm:
    """SIGALRM after `seconds` raising _Timeout in the step (main thread on Unix only; elsewhere no limit)."""

    def __init__(self, seconds):
        self.seconds = seconds
        self.active = bool(seconds) and hasattr(signal, "setitimer") and \
            threading.current_thread() is threading.main_thread()

    def __enter__(self):
        if self.active:
            def ring(signum, frame):
                raise _Timeout()
            self._old = signal.signal(signal.SIGALRM, ring)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
        return self

    def __exit__(self, *exc):
        if self.active:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._old)
        return False


def _generators(loader):
    """The torch/numpy/python generators a loader and its dataset own (their states are saved and restored)."""
    found, seen = [], set()

    def add(obj):
        if obj is None or id(obj) in seen:
            return
        numpy_rng = type(obj).__module__.startswith("numpy") and type(obj).__name__ in ("Generator", "RandomState")
        if isinstance(obj, (torch.Generator, random.Random)) or numpy_rng:
            seen.add(id(obj))
            found.append(obj)

    batch_sampler = getattr(loader, "batch_sampler", None)
    for owner in (loader, getattr(loader, "sampler", None), getattr(batch_sampler, "sampler", None),
                  getattr(loader, "dataset", None)):
        if owner is None:
            continue
        add(getattr(owner, "generator", None))
        for value in list(getattr(owner, "__dict__", {}).values()):
            add(value)
    return found


def _gen_state(g):
    if isinstance(g, torch.Generator):
        return g.get_state()
    if isinstance(g, random.Random):
        return g.getstate()
    if type(g).__name__ == "RandomState":
        return g.get_state()
    return copy.deepcopy(g.bit_generator.state)


def _set_gen_state(g, state):
    if isinstance(g, torch.Generator):
        g.set_state(state)
    elif isinstance(g, random.Random):
        g.setstate(state)
    elif type(g).__name__ == "RandomState":
        g.set_state(state)
    else:
        g.bit_generator.state = copy.deepcopy(state)


class _Saved:
    """Everything global the clinic may touch, saved on entry and restored exactly on exit."""

    def __init__(self, loader, scaler):
        self.loader, self.scaler = loader, scaler

    def __enter__(self):
        self.python = random.getstate()
        self.numpy = sys.modules.get("numpy")
        self.numpy_state = self.numpy.random.get_state() if self.numpy is not None else None
        self.torch = torch.get_rng_state()
        cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        self.cuda = torch.cuda.get_rng_state_all() if cuda else None
        mps = getattr(torch, "mps", None)
        self.mps = None
        try:
            if mps is not None and torch.backends.mps.is_available():
                self.mps = mps.get_rng_state()
        except Exception:
            self.mps = None
        self.gens = [(g, _gen_state(g)) for g in _generators(self.loader)]
        self.scaler_dict = copy.deepcopy(self.scaler.__dict__) if self.scaler is not None else None
        self.grad = torch.is_grad_enabled()
        self.threads = torch.get_num_threads()
        self.deterministic = (torch.are_deterministic_algorithms_enabled(),
                              torch.is_deterministic_algorithms_warn_only_enabled())
        self.cudnn = (torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic)
        self.dtype = torch.get_default_dtype()
        return self

    def rewind(self):
        """Put every random state back where it was on entry (the start of each run)."""
        random.setstate(self.python)
        if self.numpy is not None:
            self.numpy.random.set_state(self.numpy_state)
        torch.set_rng_state(self.torch)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)
        if self.mps is not None:
            torch.mps.set_rng_state(self.mps)
        for g, state in self.gens:
            _set_gen_state(g, state)
        if self.scaler is not None:
            self.scaler.__dict__.clear()
            self.scaler.__dict__.update(copy.deepcopy(self.scaler_dict))

    def __exit__(self, *exc):
        self.rewind()
        torch.set_grad_enabled(self.grad)
        torch.set_num_threads(self.threads)
        torch.use_deterministic_algorithms(self.deterministic[0], warn_only=self.deterministic[1])
        torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic = self.cudnn
        torch.set_default_dtype(self.dtype)
        return False


def _version(t):
    try:
        return t._version  # bumped by every in-place change
    except RuntimeError:  # an inference tensor: it cannot be changed in place outside inference mode
        return None


class _Guard:
    """Watches the user's own model and optimizer; if a step touched them anyway (a global), puts them back."""

    def __init__(self, model, optimizer):
        self.model, self.optimizer = model, optimizer

    def _versions(self):
        ts = list(self.model.parameters()) + list(self.model.buffers())
        ts += [p.grad for p in self.model.parameters() if p.grad is not None]
        ts += [v for s in self.optimizer.state.values() for v in s.values() if torch.is_tensor(v)]
        return [(id(t), _version(t)) for t in ts]

    def __enter__(self):
        self.before = self._versions()
        self.training = [m.training for m in self.model.modules()]
        self.requires = [p.requires_grad for p in self.model.parameters()]
        self.groups = copy.deepcopy(self._hyper())
        return self

    def __exit__(self, *exc):
        return False

    def _hyper(self):
        return [{k: v for k, v in g.items() if k != "params"} for g in self.optimizer.param_groups]

    def _groups_changed(self):
        try:
            return bool(self._hyper() != self.groups)
        except Exception:  # tensors as hyperparameters: compare their text
            return repr(self._hyper()) != repr(self.groups)

    def touched(self):
        """True when a tensor of the user's model or optimizer was changed, or their modes or hyperparameters."""
        return (self._versions() != self.before or [m.training for m in self.model.modules()] != self.training
                or [p.requires_grad for p in self.model.parameters()] != self.requires or self._groups_changed())

    def restore(self, pristine_model, pristine_opt):
        """Copy the pristine state back into the user's objects."""
        with torch.no_grad():
            for p, q in zip(self.model.parameters(), pristine_model.parameters()):
                p.copy_(q)
                p.grad = None if q.grad is None else q.grad.detach().clone()
            for b, c in zip(self.model.buffers(), pristine_model.buffers()):
                b.copy_(c)
        for m, flag in zip(self.model.modules(), self.training):
            m.training = flag
        for p, flag in zip(self.model.parameters(), self.requires):
            p.requires_grad_(flag)
        self.optimizer.load_state_dict(pristine_opt.state_dict())
        for g, saved in zip(self.optimizer.param_groups, self.groups):
            g.update(copy.deepcopy(saved))


class _Log:
    """What one run saw at each step."""

    def __init__(self):
        self.batches, self.losses, self.grads, self.params = [], [], [], []
        self.loss_values = []
        self.layer_norms = None  # {layer: norm} at the first optimizer step, layers in forward order
        self.total_norms = []
        self.unused = None  # names of parameters with no gradient at every optimizer step
        self.steps_seen = 0  # optimizer steps observed
        self.half = False  # a float16 activation was seen
        self.order = []  # modules with parameters of their own, in forward order (first step)
        self.weight_layers = set()  # those with a `weight` of 2 or more dimensions (Linear, Conv, Embedding...)
        self.error = None
        self.resident, self.peak, self.simulated = 0, None, None
        self.nonfinite = self.nonfinite_loss = None  # (step, Finding) / (step, summary) of the first non-finite value


def _hash(tensors):
    return fingerprint.fingerprint([t for t in tensors if t is not None and t.device.type != "meta"])


class _Run:
    """One run of the user's loop on fresh copies, instrumented."""

    def __init__(self, clinic, n, record, watch=False, measure_at=None, hashed=None):
        self.c, self.n, self.record, self.watch, self.measure_at = clinic, n, record, watch, measure_at
        self.hashed = n if hashed is None else hashed  # steps whose weights and gradients are fingerprinted
        self.log = _Log()
        self._index = 0
        self.model, self.opt = clinic.copies()
        self.names = {id(p): name for name, p in self.model.named_parameters()}
        self.state = {}
        self.loss = _LossProbe(clinic.loss_fn, clinic.report if record else Report(), self.state)

    def _pre_step(self, optimizer, args, kwargs):
        log = self.log
        params = [p for g in optimizer.param_groups for p in g["params"]]
        grads = [p.grad for p in params if p.grad is not None]
        if self.record:
            log.steps_seen += 1
            none = {self.names.get(id(p), "?") for p in params if p.requires_grad and p.grad is None}
            log.unused = none if log.unused is None else log.unused & none
            log.total_norms.append(monitor.grad_norm(params))
            if log.layer_norms is None:
                by_module = monitor.layer_grad_norms(self.model)
                order = [name for name in log.order if name in by_module]
                order += [name for name in by_module if name not in order]
                log.layer_norms = {name: by_module[name] for name in order}
        self._grad_hash = _hash(grads) if self._index < self.hashed else ""
        self._grads_now = [g.detach().to("cpu", torch.float64) for g in grads] if self.c.keep_grads else None

    def _forward_hook(self, name):
        def hook(module, args, output):
            if name not in self.log.order:
                self.log.order.append(name)
                weight = getattr(module, "weight", None)
                if isinstance(weight, torch.Tensor) and weight.dim() >= 2:
                    self.log.weight_layers.add(name)
            for t in _all_tensors(output):
                if t.dtype == torch.float16:
                    self.log.half = True
        return hook

    def run(self, batches):
        c, log = self.c, self.log
        handles = [self.opt.register_step_pre_hook(self._pre_step)]
        if self.record:
            for name, module in self.model.named_modules():
                if any(True for _ in module.parameters(recurse=False)):
                    handles.append(module.register_forward_hook(self._forward_hook(name or type(module).__name__)))
        watch = nonfinite.NonFiniteWatch(self.model, stop=False) if self.watch else None
        try:
            if watch is not None:
                watch.__enter__()
            self.model.train()
            for i, batch in enumerate(batches):
                if i == self.n:
                    break
                log.batches.append(_hash(_all_tensors(batch)) if i < self.hashed else "")
                self._grad_hash = None
                self._index = i
                self.state["losses"] = []
                if i == self.measure_at:
                    log.resident = _resident(self.model, self.opt)
                    with memory.measure(c.device) as m:
                        ok = self._step(batch, i)
                    log.peak, log.simulated = m.peak, m.simulated
                else:
                    ok = self._step(batch, i)
                losses = self.state["losses"]
                if watch is not None and watch.first is not None and log.nonfinite is None:
                    log.nonfinite = (i, watch.first)
                if losses and not nonfinite.finite(losses) and log.nonfinite_loss is None:
                    log.nonfinite_loss = (i, nonfinite.summarize(losses[-1]))
                if not ok:
                    break
                log.losses.append(_hash(losses) if i < self.hashed else "")
                log.loss_values.append(float(losses[-1].float().mean()) if losses else float("nan"))
                if i < self.hashed:
                    if self._grad_hash is None:  # no optimizer step seen: the gradients as the step left them
                        self._grad_hash = _hash([p.grad for p in self.model.parameters()])
                    log.grads.append(self._grad_hash)
                    log.params.append(_hash(list(self.model.state_dict().values())))
        finally:
            if watch is not None:
                watch.remove()
            for h in handles:
                h.remove()
        return log

    def _step(self, batch, i):
        c = self.c
        try:
            torch.set_grad_enabled(True)
            with torch.inference_mode(False), _Alarm(c.step_timeout):
                c.step(self.model, batch, self.loss, self.opt)
            return True
        except _Timeout:
            self.log.error = ("hang", i, None)
        except Exception as exc:  # the user's step raised: a finding, never a crash
            self.log.error = ("error", i, exc)
        return False


def _resident(model, opt):
    ts = list(model.parameters()) + list(model.buffers())
    ts += [p.grad for p in model.parameters() if p.grad is not None]
    ts += [v for s in opt.state.values() for v in s.values() if torch.is_tensor(v)]
    seen, total = set(), 0
    for t in ts:
        if t.device.type == "meta":
            continue
        try:
            s = t.untyped_storage()
        except Exception:
            continue
        if s.data_ptr() not in seen:
            seen.add(s.data_ptr())
            total += s.nbytes()
    return total


def _budget(device, memory_budget):
    if memory_budget is not None:
        return int(memory_budget), "the given budget"
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory, f"{device}'s total memory"
    if device.type == "mps":
        recommended = getattr(getattr(torch, "mps", None), "recommended_max_memory", None)
        if recommended is not None:
            return int(recommended()), "MPS's recommended maximum"
    return None, None


class _Clinic:
    def __init__(self, model, loader, loss_fn, optimizer, step, validate, steps, device, memory_budget, scaler,
                 step_timeout, report, prepare=None):
        self.model, self.loader, self.loss_fn, self.optimizer = model, loader, loss_fn, optimizer
        self.prepare = prepare or tuple
        self.step = step or (standard_step if prepare is None else
                             lambda model, batch, loss_fn, optimizer: standard_step(model, prepare(batch), loss_fn,
                                                                                    optimizer))
        self.validate, self.steps, self.scaler = validate, steps, scaler
        self.device = torch.device(device) if device is not None else _model_device(model)
        self.memory_budget, self.step_timeout, self.report = memory_budget, step_timeout, report
        self.keep_grads = False

    def copies(self):
        model, opt = copy.deepcopy((self.pristine_model, self.pristine_opt))
        for p in model.parameters():
            p.grad = None
        return model, opt

    def batches(self, n):
        """The loader's first `n` batches (a fresh iteration, from the saved random states)."""
        out = []
        for batch in self.loader:
            out.append(batch)
            if len(out) == n:
                break
        return out

    def run(self, saved):
        report = self.report
        self.pristine_model, self.pristine_opt = copy.deepcopy((self.model, self.optimizer))
        self.check_device()
        self.check_scaler_static()
        n = max(int(self.steps), 1)
        repro = min(3, max(n - 1, 1))
        one_shot = hasattr(self.loader, "__next__")  # an iterator: its batches are drawn once and reused
        saved.rewind()
        batches = self.batches(n)  # every run draws its batches first, then steps: the same random state at step 0
        if not batches:
            report.skipped["every step"] = "the loader gave no batch"
            return
        n = len(batches)  # a loader shorter than `steps`: all its batches
        repro = min(repro, max(n - 1, 1))
        main = _Run(self, n, record=True, watch=True, measure_at=n - 1 if n > 1 else None, hashed=repro)
        log = main.run(batches)
        report.steps = len(log.losses)
        if log.error is not None:
            self.report_error(log.error)
        self.check_gradients(log)
        self.check_nonfinite(log)
        self.check_memory(log)
        never_scaled = self.scaler is not None and saved.scaler_dict.get("_scale") is None \
            and getattr(self.scaler, "_scale", None) is None  # scale() sets it: None before and after, never called
        self.check_scaler_dynamic(log, never_scaled)
        if log.error is None and report.steps == n:
            self.check_lr(batches[0], main, log, saved)
            saved.rewind()
            self.check_zero_grad(batches[0], saved)
            saved.rewind()
            twin = _Run(self, repro, record=False, watch=True)
            self.check_reproducibility(log, twin.run(batches[:repro] if one_shot else self.batches(repro)), one_shot)
        else:
            for check in ("learning rate", "zero_grad", "reproducibility"):
                report.skipped[check] = "the steps did not all run"
        if self.validate is not None:
            saved.rewind()
            self.check_validation()
            saved.rewind()
        else:
            report.skipped["validation"] = "no validate function given"
        finite = [v for v in log.loss_values if math.isfinite(v)]
        if finite:
            report.measurements["loss"] = " -> ".join(f"{v:.4g}" for v in log.loss_values)
        if log.total_norms:
            report.measurements["gradient norm"] = " -> ".join(f"{v:.3g}" for v in log.total_norms)

    # -- detectors ---------------------------------------------------------------------------------------------
    def check_device(self):
        rows = strays(self.device, self.model, show=False)
        if rows:
            listed = ", ".join(f"{name} on {dev}" for name, dev in rows[:4]) + (" ..." if len(rows) > 4 else "")
            self.report.add("device", f"{len(rows)} tensor(s) of the model are not on {self.device}: {listed}", "01",
                            f"`model.to({str(self.device)!r})` after building it (and after loading a checkpoint)")

    def report_error(self, error):
        kind, i, exc = error
        if kind == "hang":
            self.report.add("hang", f"step {i} ran longer than {self.step_timeout:g} s and was interrupted", None,
                            "run the step by hand on one batch; look for a loop that never ends or a blocking read")
            return
        text = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"[:300]
        for words, lesson, problem, fix in _ERRORS:
            if any(w in str(exc) for w in words):
                self.report.add(problem, f"step {i} raised {text}", lesson, fix)
                return
        self.report.add("error", f"step {i} raised {text}", None,
                        "read the message's last line and your own frame in the traceback; the lessons' "
                        "troubleshooting tables")

    def check_scaler_static(self):
        s = self.scaler
        if s is None or s.is_enabled():
            return
        made_for = getattr(s, "_device", "cuda")
        if made_for != self.device.type:
            self.report.add("scaler", f"the GradScaler is disabled: it was built for {made_for!r} (the default) and "
                            f"this run is on {self.device.type}, so PyTorch disabled it: is_enabled() False, "
                            f"get_scale() {s.get_scale():g} (an enabled scaler starts at 65536), scale() returns the "
                            "loss as it is",
                            "07",
                            f"`torch.amp.GradScaler({self.device.type!r})`, the device named")

    def check_scaler_dynamic(self, log, unused_scaler=False):
        s = self.scaler
        if s is not None and s.is_enabled() and log.half and unused_scaler:
            self.report.add("scaler", f"float16 activations in {len(log.losses)} steps, but the GradScaler was never "
                            f"used (scale() never called; get_scale() {s.get_scale():g}): small float16 gradients "
                            "underflow to 0", "07",
                            "`scaler.scale(loss).backward()`, `scaler.step(optimizer)`, `scaler.update()`")
            return
        if s is None or s.is_enabled() or getattr(s, "_device", "cuda") != self.device.type or not log.half:
            return
        self.report.add("scaler", "the model computed float16 activations while the GradScaler is disabled "
                        f"(enabled=False, get_scale() {s.get_scale():g}): float16 gradients below 6e-8 underflow to 0",
                        "07",
                        f"`torch.amp.GradScaler({self.device.type!r})` enabled for float16 (bfloat16 needs none)")

    def check_nonfinite(self, log):
        scaled = self.scaler is not None and self.scaler.is_enabled()
        hit = getattr(log, "nonfinite", None)
        if hit is not None and scaled and hit[1].phase == "backward":
            hit = None  # an enabled GradScaler skips steps whose scaled gradients overflowed: its job, not a bug
        loss_hit = getattr(log, "nonfinite_loss", None)
        if hit is None and loss_hit is None:
            return
        if "exploding" in self.report.problems:  # a consequence of the explosion, not a problem of its own
            step = min(x[0] for x in (hit, loss_hit) if x is not None)
            self.report[self.report.problems.index("exploding")].evidence += f"; non-finite from step {step}"
            return
        if hit is not None and hit[1].kind == "parameter":
            values = ", ".join(f"{v:.3g}" for v in log.loss_values[: hit[0] + 1])
            self.report.add("lr", f"the loss went {values} and step {hit[0] - 1 if hit[0] else 0}'s optimizer update "
                            f"wrote non-finite weights ({hit[1].place}: {hit[1].detail})", "04",
                            "a learning rate 10x lower, or clip the gradient norm (`clip_grad_norm_`)")
            return
        if hit is not None:
            f = hit[1]
            fixes = {"data": "drop or repair the rows holding NaN/inf before training (`torch.isfinite(x).all(dim=1)`)",
                     "value": "guard the loss: clamp inside log/sqrt/division (`eps`), or use the stable built-in loss"}
            self.report.add("nonfinite", f"step {hit[0]}: {f.place} is non-finite ({f.detail})", "04",
                            fixes.get(f.kind, "find the op in that module that makes NaN/inf (log(0), x/0, overflow) "
                                                 "and guard it (eps, clamp, float32)"))
        else:
            self.report.add("nonfinite", f"step {loss_hit[0]}: the loss is non-finite ({loss_hit[1]})", "04",
                            "check the loss's inputs for NaN/inf and guard log/sqrt/division with an eps")

    def check_gradients(self, log):
        norms = log.layer_norms
        if log.steps_seen == 0 or not norms:
            self.report.skipped["gradients"] = "no optimizer step was seen"
            return
        unused = sorted(log.unused or ())
        if unused:
            listed = ", ".join(unused[:5]) + (" ..." if len(unused) > 5 else "")
            self.report.add("unused", f"{len(unused)} parameter(s) got no gradient in any of {log.steps_seen} steps "
                            f"(.grad is None after backward): {listed}", "10",
                            "use them in forward, or freeze them (`requires_grad_(False)`) and leave them out of "
                            "the optimizer")
        first_norm = log.total_norms[0] if log.total_norms else float("nan")
        if math.isfinite(first_norm) and first_norm > THRESHOLDS["exploding_norm"]:
            later = ", ".join(f"{v:.3g}" for v in log.total_norms[1:])
            self.report.add("exploding", f"total gradient norm {first_norm:.3g} at the first step, before any update "
                            f"(> {THRESHOLDS['exploding_norm']:g}: the initialisation or the data's scale, not the "
                            f"learning rate)" + (f"; then {later}" if later else ""), "05",
                            "default or He init (`nn.init.kaiming_normal_`), normalised inputs/targets, and clip "
                            "(`clip_grad_norm_(model.parameters(), 1.0)`)")
        finite = {k: v for k, v in norms.items() if math.isfinite(v) and k in log.weight_layers}
        if len(finite) < 2:
            return
        first, last = list(finite)[0], list(finite)[-1]
        a, b = finite[first], finite[last]
        self.report.measurements["first/last layer gradient"] = f"{a / b:.3g}" if b else "inf"
        if b and a / b < THRESHOLDS["vanishing_ratio"]:
            self.report.add("vanishing", f"first layer '{first}' gradient norm {a:.3g} vs last layer '{last}' {b:.3g}: "
                            f"ratio {a / b:.2e} (< {THRESHOLDS['vanishing_ratio']:g}, "
                            f"{math.log10(b / a) if a else float('inf'):.1f} orders of magnitude)", "05",
                            "ReLU with He init (`nn.init.kaiming_normal_`), residual connections or normalisation "
                            "layers")
        elif "exploding" not in self.report.problems and (a / b > THRESHOLDS["exploding_ratio"] if b else a > 0):
            self.report.add("exploding", f"first layer '{first}' gradient norm {a:.3g} vs last layer '{last}' {b:.3g}: "
                            f"ratio {a / b if b else float('inf'):.2e} (> {THRESHOLDS['exploding_ratio']:g})", "05",
                            "default or He init instead of large weights; clip (`clip_grad_norm_(params, 1.0)`)")

    def check_memory(self, log):
        peak = getattr(log, "peak", None)
        if peak is None:
            self.report.skipped["memory"] = "fewer than 2 steps ran"
            return
        total = log.resident + peak
        how = "live tensor bytes, simulated" if log.simulated else "CUDA allocator"
        self.report.measurements["peak memory"] = (f"{memory.fmt(total)} ({memory.fmt(log.resident)} model and "
                                                   f"optimizer + {memory.fmt(peak)} step peak; {how})")
        budget, what = _budget(self.device, self.memory_budget)
        if budget is None:
            self.report.skipped["memory headroom"] = "no memory_budget given (CPU)"
            return
        self.report.measurements["memory headroom"] = f"{memory.fmt(max(budget - total, 0))} of {memory.fmt(budget)}"
        if total > (1 - THRESHOLDS["headroom"]) * budget:
            self.report.add("memory", f"one step needs about {memory.fmt(total)} ({memory.fmt(log.resident)} resident "
                            f"+ {memory.fmt(peak)} step peak, {how}) of {what}, {memory.fmt(budget)}: "
                            f"{100 * total / budget:.0f}%, headroom {memory.fmt(max(budget - total, 0))}", "03",
                            "a smaller batch with gradient accumulation, mixed precision, or activation checkpointing")

    def loss_on(self, batch, model):
        """The loss of `model` (pristine if None) on `batch`, no_grad, in training mode, buffers untouched."""
        model = model if model is not None else self.pristine_model
        training = [m.training for m in model.modules()]
        buffers = [b.detach().clone() for b in model.buffers()]
        try:
            model.train()
            inputs, targets = _move(tuple(self.prepare(batch)), _model_device(model))
            with torch.no_grad():
                return float(self.loss_fn(model(inputs), targets).float().mean())
        except Exception:
            return None
        finally:
            with torch.no_grad():
                for b, c in zip(model.buffers(), buffers):
                    b.copy_(c)
            for m, flag in zip(model.modules(), training):
                m.training = flag

    def check_lr(self, batch, main, log, saved):
        if any(p in self.report.problems for p in ("lr", "nonfinite", "exploding")):
            return
        losses = log.loss_values
        if len(losses) > 1 and math.isfinite(losses[0]) and losses[0] > 0:
            peak = max(range(1, len(losses)), key=lambda i: losses[i] if math.isfinite(losses[i]) else math.inf)
            if not math.isfinite(losses[peak]) or losses[peak] > THRESHOLDS["loss_spike"] * losses[0]:
                # a loss thrown far up can land anywhere after: the first batch's loss may be back near its start
                values = " -> ".join(f"{v:.4g}" for v in losses[: peak + 1])
                self.report.add("lr", f"the training loss went {values}: step {peak}'s loss is x"
                                f"{losses[peak] / losses[0]:.3g} the first step's (> x{THRESHOLDS['loss_spike']:g})",
                                "04", "a learning rate 10x lower (or clip the gradient norm); watch the loss with "
                                "tc.LivePlot")
                return
        saved.rewind()  # the same random state (dropout masks) for both measurements
        before = self.loss_on(batch, None)
        saved.rewind()
        after = self.loss_on(batch, main.model)
        if before is None or after is None:
            self.report.skipped["learning rate"] = ("the loss could not be computed as loss_fn(model(inputs), targets)"
                                                    " (a batch that needs preparing: pass prepare=)")
            return
        if not math.isfinite(before):
            return
        steps = len(log.losses)
        self.report.measurements["loss on the first batch"] = f"{before:.4g} -> {after:.4g} after {steps} steps"
        if not math.isfinite(after) or after > THRESHOLDS["loss_rise"] * before:
            self.report.add("lr", f"the loss on the same first batch rose from {before:.4g} to {after:.4g} after "
                            f"{steps} steps (x{after / before if before else float('inf'):.2f} > "
                            f"x{THRESHOLDS['loss_rise']:g})", "04",
                            "a learning rate 10x lower (or clip the gradient norm); watch the loss with tc.LivePlot")

    def check_zero_grad(self, batch, saved):
        run = _Run(self, 1, record=False)
        for g in run.opt.param_groups:
            if "lr" in g:
                g["lr"] = 0.0 if not torch.is_tensor(g["lr"]) else torch.zeros_like(g["lr"])
        self.keep_grads = True
        grads = []
        try:
            for _ in range(2):
                saved.rewind()
                run._grads_now = None
                handle = run.opt.register_step_pre_hook(run._pre_step)
                try:
                    if not run._step(batch, 0):
                        return
                finally:
                    handle.remove()
                if run._grads_now is None:
                    return
                grads.append(run._grads_now)
        finally:
            self.keep_grads = False
        g1, g2 = grads
        if len(g1) != len(g2) or not g1:
            return
        n1 = math.sqrt(sum(float(g.pow(2).sum()) for g in g1))  # float64 copies on the CPU
        n2 = math.sqrt(sum(float(g.pow(2).sum()) for g in g2))
        if not (n1 > 0 and math.isfinite(n1) and math.isfinite(n2)):
            return
        # identical weights, batch and random state: the second gradient differs from the first only by what the
        # first call left in .grad (the first gradient itself; 1/scale of it under an enabled GradScaler)
        diff = math.sqrt(sum(float((b - a).pow(2).sum()) for a, b in zip(g1, g2)))
        dot = sum(float(((b - a) * a).sum()) for a, b in zip(g1, g2))
        share, cosine = diff / n1, (dot / (diff * n1) if diff else 0.0)
        if share > THRESHOLDS["accumulation"] and cosine > THRESHOLDS["accumulation_cosine"]:
            self.report.add("zero_grad", f"your step twice on the same batch (learning rate 0, on a copy, same random "
                            f"state): gradient norm {n1:.4g} then {n2:.4g}; the second is the first plus {share:.3g}x "
                            f"the first (cosine {cosine:.4f}): the gradient left in .grad was added to"
                            + (f" (under the GradScaler the leftover enters at 1/scale, 1/{self.scaler.get_scale():g}; "
                               "an overflow's inf would stay in .grad and skip every later step)"
                               if self.scaler is not None and self.scaler.is_enabled() else ""), "10",
                            "`optimizer.zero_grad()` at the start of every step")

    def check_reproducibility(self, a, b, one_shot):
        stages = (("batches", "the batch", "the data pipeline draws from a random source the seeds do not reach: "
                   "seed it (a DataLoader `generator=`, the dataset's rng from a seed; `worker_init_fn`)"),
                  ("losses", "the loss (same batch, same weights)", "the forward pass draws from an unseeded source "
                   "(a Generator or rng made without a seed) or a nondeterministic kernel: seed it; "
                   "`torch.use_deterministic_algorithms(True)`"),
                  ("grads", "the gradients (same loss)", "a nondeterministic backward kernel: "
                   "`torch.use_deterministic_algorithms(True)` (and CUBLAS_WORKSPACE_CONFIG=:4096:8 on CUDA)"),
                  ("params", "the weights after the update (same gradients)", "a nondeterministic optimizer step: "
                   "`foreach=False`/`fused=False`, `torch.use_deterministic_algorithms(True)`"))
        for i in range(min(len(b.batches), len(a.batches))):
            for key, what, fix in stages:
                x, y = getattr(a, key), getattr(b, key)
                if i < len(x) and i < len(y) and x[i] != y[i]:
                    if key == "batches" and getattr(self.loader, "persistent_workers", False) \
                            and getattr(self.loader, "num_workers", 0):
                        self.report.skipped["reproducibility"] = ("persistent DataLoader workers keep their own random "
                                                                  "state from one run to the next")
                        return
                    self.report.add("reproducibility", f"two runs from the same seeds and states: step {i}'s {what} "
                                    f"differs (fingerprints {x[i]} vs {y[i]})", "09", fix)
                    return
        if one_shot:
            self.report.skipped["reproducibility of the data"] = ("the loader is a one-shot iterator: its batches "
                                                                  "were reused")

    def check_validation(self):
        model, _ = self.copies()
        model.train()
        torch.set_grad_enabled(True)
        try:
            with torch.inference_mode(False), evaluation.watch_validation(model) as w:
                with _Alarm(self.step_timeout):
                    self.validate(model)
        except _Timeout:
            self.report.add("hang", f"validate ran longer than {self.step_timeout:g} s and was interrupted", None,
                            "run validate by hand; look for a loop that never ends")
            return
        except Exception as exc:
            self.report.add("error", f"validate raised {type(exc).__name__}: {str(exc)[:200]}", None,
                            "call validate(model) by hand and read the message")
            return
        n = len(w.calls)
        if not n:
            self.report.skipped["validation"] = "validate made no forward pass of the model"
            return
        if w.train_calls:
            moved = f"; BatchNorm running statistics moved by up to {w.bn_change:.3g}" if w.bn_change else ""
            self.report.add("validation_mode", f"{w.train_calls} of {n} forward passes in validate ran with Dropout "
                            f"active or BatchNorm on batch statistics{moved}", "06",
                            "`model.eval()` at the start of validation (and `model.train()` before training again)")
        if w.grad_calls:
            self.report.add("validation_grad", f"{w.grad_calls} of {n} forward passes in validate recorded autograd "
                            f"graphs ({w.meter.saved} tensors, {w.meter.nbytes / 2**20:.2f} MiB saved for a backward "
                            "that never comes)", "06", "wrap validation in `with torch.no_grad():` (or inference_mode)")


def examine(model, loader, loss_fn, optimizer, step=None, validate=None, steps=5, device=None, memory_budget=None,
            scaler=None, step_timeout=60.0, prepare=None):
    """Run `steps` steps of the loop on copies and return a Report of the course's problems it finds (see module doc).

    `step(model, batch, loss_fn, optimizer)` is your step (default: standard_step); `validate(model)` your validation;
    `memory_budget` bytes to compare the peak with (default: the GPU's memory; none on CPU); `scaler` your GradScaler;
    `prepare(batch)` turns a loader's batch into `(inputs, targets)` where the loader's batch is not that already (the
    learning-rate probe computes `loss_fn(model(inputs), targets)` with it, and so does the default step).
    """
    start = time.perf_counter()
    report = Report()
    clinic = _Clinic(model, loader, loss_fn, optimizer, step, validate, steps, device, memory_budget, scaler,
                     step_timeout, report, prepare)
    report.device = clinic.device
    guard = _Guard(model, optimizer)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with _Saved(loader, scaler) as saved, guard:
            try:
                with torch.inference_mode(False):  # copies and steps need autograd, even in your inference_mode block
                    clinic.run(saved)
            except Exception as exc:  # the clinic's own limits (an object that cannot be copied...): a finding
                report.add("error", f"the clinic could not run the loop: {type(exc).__name__}: {str(exc)[:200]}", None,
                           "check that the model and optimizer can be deep-copied and the loader iterated")
            if guard.touched() and hasattr(clinic, "pristine_model"):
                guard.restore(clinic.pristine_model, clinic.pristine_opt)
                report.skipped["your objects"] = ("your step changed the model or optimizer you passed in (a global?): "
                                                  "they were restored")
    for w in caught:
        if _BROADCAST_WARNING in str(w.message) and "broadcast" not in report.problems:
            report.add("broadcast", f"PyTorch warned: {str(w.message).split('. ')[0]}", "02",
                       "make the loss's input and target shapes equal (`squeeze(-1)` or `view`)")
    report.seconds = time.perf_counter() - start
    return report
