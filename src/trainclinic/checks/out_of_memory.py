"""Checks for lesson 03, CUDA out of memory: accumulate_step (gradient accumulation over micro-batches).

accumulate_step(model, batch, loss_fn, optimizer, micro_batches) must take ONE optimizer step whose gradients
equal the full batch's, while holding only one micro-batch's activations at a time. The gradients are read at
the moment optimizer.step() runs (a recording SGD); the forward passes are watched (how many, how many samples
each); the peak memory is measured with the live-bytes tracker on the CPU, deterministic on every machine,
against a budget that the full batch breaks. The seed drives a sweep: micro-batch counts (1 to 8, including
counts that do not divide by 4), piece sizes down to one sample, widths, float32 and float64, and a loss_fn
other than plain cross-entropy (label smoothing), so that a hard-coded count or loss shows.
"""
import contextlib
import copy
import gc
import random
import re

import torch
from torch import nn

from ..device import SimulatedCuda, default_device, pick_device
from ..memory import LiveBytes, fmt
from . import CheckFailed, call, check, close, devices, expect, flat, python_float, quiet, seeded, stale_grads

__all__ = ["check_accumulated_grads", "check_one_step", "check_peak_memory", "RecordingSGD",
           "reference_accumulate_step"]


class RecordingSGD(torch.optim.SGD):
    """SGD that counts its steps and records the gradients it updates with (clones, or only their presence): with
    optimizer.step(closure), the ones the closure leaves, as the update uses them."""

    def __init__(self, params, lr, record=True, momentum=0.0):
        super().__init__(params, lr=lr, momentum=momentum)
        self.steps = 0
        self.record = record
        self.grads = []  # per step: [grad clone or None per parameter]
        self.complete = []  # per step: did every parameter have a gradient?
        self.kept = []  # per step: was the state the steps before left (momentum buffers) still there?
        self._left = set()  # ids of the parameters holding a momentum buffer after the last step

    def step(self, closure=None):
        self.steps += 1
        loss = None
        if closure is not None:  # SGD runs the closure first, then updates with the gradients it leaves
            with torch.enable_grad():
                loss = closure()
        params = [p for group in self.param_groups for p in group["params"]]
        self.complete.append(all(p.grad is not None for p in params))
        held = {id(p) for p in params if "momentum_buffer" in self.state.get(p, {})}
        self.kept.append(self._left <= held)
        if self.record:
            self.grads.append([None if p.grad is None else p.grad.detach().clone() for p in params])
        super().step()
        self._left = {id(p) for p in params if "momentum_buffer" in self.state.get(p, {})}
        return loss


class _OtherSteps:
    """While active: the optimizers other than `mine` that stepped (torch's global optimizer step pre-hook)."""

    def __init__(self, mine):
        self.mine, self.stepped, self._handle = mine, [], None

    def __enter__(self):
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        self._handle = register_optimizer_step_pre_hook(
            lambda opt, args, kwargs: self.stepped.append(opt) if opt is not self.mine else None)
        return self

    def __exit__(self, *exc):
        self._handle.remove()
        return False

    def hint(self, what):
        """A hint naming the optimizer that stepped instead of the one passed in, or `what` when none did."""
        if not self.stepped:
            return what
        other = self.stepped[0]
        return (f"the optimizer passed in never stepped, while another one, a torch.optim.{type(other).__name__} (not "
                f"the `optimizer` argument), stepped {len(self.stepped)} time(s): step the `optimizer` argument (it "
                "carries the caller's settings and state, e.g. momentum).")


def _loss_fns(smoothing, soft=False, function=False):
    """(loss_fn, its name) for a case: plain cross-entropy, or with label smoothing (not F.cross_entropy's default),
    on class indices or (soft) on class probabilities; an nn loss module, or (function) a plain function, which has no
    `reduction` to switch: a loss_fn is any callable that returns the mean loss."""
    on = " on class-probability targets" if soft else ""
    if function:
        def loss_fn(output, target):
            return nn.functional.cross_entropy(output, target, label_smoothing=smoothing)
        args = f", label_smoothing={smoothing}" if smoothing else ""
        return loss_fn, f"a plain function, F.cross_entropy(output, target{args}){on}"
    if smoothing:
        return nn.CrossEntropyLoss(label_smoothing=smoothing), f"nn.CrossEntropyLoss(label_smoothing={smoothing}){on}"
    return nn.CrossEntropyLoss(), f"nn.CrossEntropyLoss(){on}"


def _hooks(model):
    """How many hooks the model's parameters and modules hold (tensor hooks, module forward/backward hooks)."""
    n = 0
    for p in model.parameters():
        for attr in ("_backward_hooks", "_post_accumulate_grad_hooks"):
            n += len(getattr(p, attr, None) or {})
    for m in model.modules():
        for attr in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks"):
            n += len(getattr(m, attr, None) or {})
    return n


def _soft(y, classes, dtype, seed):
    """Class-probability targets (rows summing to 1, in the inputs' dtype) for class indices y: what a loss_fn with
    soft labels takes, and what a cast of the targets to int64 breaks."""
    g = torch.Generator().manual_seed(seed)
    noise = torch.softmax(torch.randn(len(y), classes, generator=g, dtype=torch.float64), dim=1)
    onehot = nn.functional.one_hot(y.cpu(), classes).to(torch.float64)
    return (0.7 * onehot + 0.3 * noise).to(y.device, dtype)


# the lesson's own hints for errors in accumulate_step (the shared ones come after)
_HINTS = {
    "target with class probabilities": "the batch's targets here are class probabilities (floats, one row per "
    "sample), which loss_fn takes as they are: pass each micro-batch's targets to loss_fn unchanged (no cast).",
    "'NoneType' object has no attribute 'zero_'": "zero_() was called on None: a parameter's .grad is None until a "
    "backward() writes it (the check's model is new and has not been trained yet; optimizer.zero_grad() also leaves "
    "None by default). optimizer.zero_grad() zeroes the gradients whatever state they are in.",
}


def _cases(seed, count=2):
    """The sweep for a seed: (batch_size, micro_batches, dtype, smoothing, inputs, hidden, classes) per case.

    Seed 0's first case is the lesson's (32 in 4 pieces); every seed has a case whose micro-batch count is not
    a divisor of 4 and whose batch is not a multiple of 4 (a hard-coded 4 then splits unevenly), one with label
    smoothing, and the hidden seeds reach one micro-batch, pieces of one sample, and float64.
    """
    rng = random.Random(1009 * seed + 17)
    cases = []
    for i in range(count):
        if i == 0:
            mb, piece = (4, 8) if seed == 0 else (rng.choice([1, 2, 4, 6, 8]), rng.randint(1, 8))
        else:
            mb, piece = rng.choice([3, 5, 7]), rng.choice([1, 3, 5])
        dtype = torch.float64 if (seed + i) % 3 == 2 else torch.float32
        smoothing = 0.0 if i == 0 else rng.choice([0.1, 0.2])
        cases.append((mb * piece, mb, dtype, smoothing, rng.choice([4, 8, 12]), rng.choice([16, 24, 32]),
                      rng.choice([2, 3, 5])))
    return cases


def _grads(model, x, y, loss_fn):
    """Gradients (and loss) of loss_fn on (x, y), computed on a copy of `model`."""
    ref = copy.deepcopy(model)
    ref.zero_grad(set_to_none=True)
    with torch.enable_grad():
        loss = loss_fn(ref(x), y)
        loss.backward()
    return [p.grad.detach().clone() for p in ref.parameters()], loss.item()


def _matches(got, want, dtype=torch.float32):
    """Equal up to the rounding of the dtype: summing micro-batches reorders the sums (float32: about 1e-7 relative;
    float64: about 1e-16, so a float32 cast of a float64 computation shows)."""
    rtol, atol = (1e-9, 1e-12) if dtype == torch.float64 else (1e-4, 1e-6)
    return all(close(a, b, rtol=rtol, atol=atol) for a, b in zip(got, want))


def _scaled(grads, factor):
    return [g * factor for g in grads]


class _Calls(list):
    """The forward calls: (autograd on?, number of samples); `in_eval`: those with autograd on while some layer of
    the model was in eval mode."""
    in_eval = 0


def _watch(model):
    """Record every forward call of `model`: (autograd on?, number of samples). Returns (calls, hook handle)."""
    calls = _Calls()

    def pre(module, args):
        first = args[0] if args else None
        calls.append((torch.is_grad_enabled(), first.shape[0] if torch.is_tensor(first) and first.dim() else None))
        if torch.is_grad_enabled() and not all(m.training for m in module.modules()):
            calls.in_eval += 1

    return calls, model.register_forward_pre_hook(pre)


def _pieces(batch_size, micro_batches):
    return [len(c) for c in torch.empty(batch_size).chunk(micro_batches)]


def _pieces_of(batch_size, size):
    return [len(c) for c in torch.empty(batch_size).split(size)]


def _hints(batch, width):
    """The lesson's hints for accumulate_step's errors, with the shapes of the check's own batch."""
    return dict(_HINTS, **{"cannot be multiplied": (
        f"the check's model takes {width} features and its batch is {len(batch[0])} samples of {width} (its "
        f"reference runs on them), so the tensor in this error is not a piece of that batch as passed in: split the "
        f"`batch` argument (a notebook variable such as x is another tensor), and keep the pieces' shapes.")})


def _forwards_text(calls):
    sizes = [n for grad, n in calls if grad]
    return f"{len(sizes)} forward pass(es) with autograd on, of {sizes} samples" if sizes else "no forward pass with autograd on"


def _explain(got, want, model, batch, loss_fn, plain, micro_batches, step, steps, held=None, before=""):
    """(what the gradients at a step are, hint): a hint only when they match a known mistake exactly."""
    x, y = batch
    if x.dtype == torch.float64 and _matches(got, want):
        diff = max((a - b).abs().max().item() for a, b in zip(got, want))
        rel = max(((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item() for a, b in zip(got, want))
        return (f"they differ from them by up to {diff:.3g} ({rel:.2g} relative): float32-sized rounding (float32 "
                f"keeps about 7 digits, float64 about 16) on a float64 model and batch",
                "keep the computation in the batch's dtype (float64 here): a cast to float32 (.float(), a float32 "
                "tensor, autocast) on the way rounds the gradients to float32's precision.")
    parts = [_grads(model, xb, yb, loss_fn)[0] for xb, yb in zip(x.chunk(micro_batches), y.chunk(micro_batches))]
    m = micro_batches
    known = [
        (_scaled(want, m), f"{m} times the full-batch gradients",
         f"divide each micro-batch loss by micro_batches ({m}) before backward(): the loss is a mean over its "
         "micro-batch, and backward() adds the gradients of every micro-batch."),
        (_scaled(parts[-1], 1 / m), f"the gradients of the last micro-batch only (divided by {m})",
         "call optimizer.zero_grad() once, before the loop over micro-batches: zero_grad() inside the loop throws "
         "away what the earlier micro-batches accumulated."),
        (parts[-1], "the gradients of the last micro-batch only", "call optimizer.zero_grad() once, before the loop: "
         "zero_grad() inside the loop throws away what the earlier micro-batches accumulated."),
        ([w + h for w, h in zip(want, held)] if held is not None else [w + 0.5 for w in want],
         f"the full-batch gradients plus {before or 'the 0.5 that .grad held before the call'}",
         "call optimizer.zero_grad() at the start of every call, before the loop: backward() adds to whatever "
         ".grad held, and a training loop calls accumulate_step once per batch."),
        (_scaled(want, m / len(x)), f"the full batch's gradients times micro_batches / batch size ({m}/{len(x)}): "
         "each micro-batch's mean loss divided by the batch size",
         f"loss_fn returns each micro-batch's MEAN loss (whatever it is: an nn loss module, or a plain function whose "
         f"reduction cannot be switched), so divide it by micro_batches ({m}), not by the batch size."),
    ]
    if steps > 1:
        partial = [sum(gs) / m for gs in zip(*parts[:step])]
        first = "the first micro-batch's gradients" if step == 1 else f"the first {step} micro-batches' gradients"
        known.append((partial, f"{first} / {m} only, not yet the whole batch's",
                      "call optimizer.step() once, after the loop: a step inside the loop uses partial gradients."))
    if plain is not None:
        known.append((plain, "the gradients of plain cross-entropy, not of the loss_fn passed in",
                      "compute each micro-batch's loss with the loss_fn argument: the caller chooses the loss."))
    for candidate, what, hint in known:
        if _matches(got, candidate):
            return f"they are {what}", hint
    g, w = flat(got), flat(want)
    diff = max((a - b).abs().max().item() for a, b in zip(got, want))
    ratio = float(g @ w / (w @ w))
    if float(g.norm()) > 0 and float(g @ w) / float(g.norm() * w.norm()) > 1 - 1e-9 and abs(ratio - 1) > 1e-3:
        return (f"the full batch's gradients all scaled by one factor, {ratio:.3g} (the same direction; norm "
                f"{float(w.norm()):.3g} -> {float(g.norm()):.3g})"), ""
    return f"a max difference of {diff:.3g} from them (ratio {ratio:.3g})", ""


_DEVICE_ERROR = re.compile(r"same device|two different devices|at least two devices|device propagation", re.I)


def _device_probe(accumulate_step, seed):
    """Run accumulate_step with model and batch on a simulated cuda:0 when no GPU is here: a tensor made or moved
    to the CPU inside it raises PyTorch's device error. Returns a label for the success line."""
    if pick_device().type in ("cuda", "mps"):
        return ""  # the present-device run already used a real GPU
    model, (x, y) = seeded(seed, 12, device="cpu")
    try:
        with SimulatedCuda(say=False) as sim:
            fake = sim.model(model)
            batch = (sim.tensor(x), sim.tensor(y))
            opt = torch.optim.SGD(fake.parameters(), lr=0.1)
            seen, real_loss = set(), nn.CrossEntropyLoss()

            def loss_fn(*args, **kwargs):  # where the tensors it is given live
                seen.update(str(t.device) for t in (*args, *kwargs.values()) if torch.is_tensor(t))
                return real_loss(*args, **kwargs)

            default = default_device()

            def same_default(when):  # (SimulatedCuda puts it back when it ends)
                now = default_device()
                expect(now == default, f"torch's default device when accumulate_step {when}, with the model and the "
                       "batch on a simulated cuda:0", f"{default}, as it was", f"{now}: a process-wide setting, so "
                       "every tensor and model the caller makes afterwards would be made on the GPU",
                       "create new tensors where the batch is (device=inputs.device) instead of "
                       "torch.set_default_device(...), or put the default back before returning (try/finally)")

            try:
                with quiet():
                    accumulate_step(fake, batch, loss_fn, opt, 3)
                same_default("returned")
            except CheckFailed:
                raise
            except Exception as exc:  # only a device error is a verdict; the rest is what a simulation cannot follow
                same_default("stopped")  # (what it had done until then: setting the default comes first)
                if not _DEVICE_ERROR.search(str(exc)):
                    return f" (the simulated cuda:0 could not follow this code, so its device check was skipped: " \
                           f"{type(exc).__name__}: {str(exc).splitlines()[0][:100] if str(exc) else ''})"
                raise CheckFailed(
                    "accumulate_step with the model and the batch on a simulated cuda:0 (no GPU here: PyTorch's "
                    "FakeTensorMode): expected every tensor to stay on the batch's device, observed PyTorch's device "
                    f"error {type(exc).__name__}: {str(exc).splitlines()[0][:300]}\nHint: keep the micro-batches "
                    "on the device the batch is on, and create new tensors there (device=inputs.device).") from None
    except CheckFailed:
        raise
    except Exception as exc:  # the simulation itself could not start here
        return f" (no simulated cuda:0 here, device check skipped: {type(exc).__name__})"
    expect(seen <= {"cuda:0"}, "the tensors loss_fn received, with the model and the batch on a simulated cuda:0 (no "
           "GPU here: PyTorch's FakeTensorMode)", "on cuda:0, the batch's device", ", ".join(sorted(seen)),
           "keep every tensor on the batch's device: moving the outputs and targets to the CPU for the loss copies "
           "them out of the GPU at every micro-batch")
    return " and on a simulated cuda:0 (device check)"


def _call_step(fn, *args, own_mode=False, **kwargs):
    """call() for accumulate_step (or a runner of it); with own_mode (check_one_step's, the one check that grades it),
    the grad mode it leaves behind: a step called step after step must leave autograd as it found it. The other
    checks put the grad mode back and grade only their own part. torch's default dtype and device: every check (the
    text asks the step to leave them alone)."""
    if not own_mode:
        return call(fn, *args, defaults=True, **kwargs)
    before, anomaly = torch.is_grad_enabled(), torch.is_anomaly_enabled()
    try:
        out = call(fn, *args, restore_grad=False, defaults=True, **kwargs)
        after, anomaly_after = torch.is_grad_enabled(), torch.is_anomaly_enabled()
    finally:
        torch.set_grad_enabled(before)
        torch.set_anomaly_enabled(anomaly)
    expect(after == before, "autograd when accumulate_step returns (torch.is_grad_enabled())",
           f"{before}, as it was when the step was called", f"{after}: the step switched autograd "
           f"{'off' if before else 'on'} for the whole process and left it so"
           + (", so the next step's forward builds no graph and its backward() raises" if before else ""),
           "leave the grad mode as you found it: optimizer.step() records no graph anyway, and `with torch.no_grad():` "
           "around a part that needs none switches it back when the block ends (torch.set_grad_enabled(False) on its "
           "own line does not).")
    expect(anomaly_after == anomaly, "autograd's anomaly detection when accumulate_step returns "
           "(torch.is_anomaly_enabled())", f"{'on' if anomaly else 'off'}, as it was when the step was called",
           f"{'on' if anomaly_after else 'off'}: a process-wide setting the step changed and left so (with it on, "
           "every later forward records a traceback and runs slower)",
           "leave autograd's modes as you found them: to debug a step, use the block `with "
           "torch.autograd.detect_anomaly():`, which puts the mode back when it ends.")
    return out


def _held_after(fn, model, batch, micro_batches, calls=3):
    """The live bytes that `calls` consecutive steps (one optimizer, as in a training loop) leave after each returns,
    counting only tensors created during the steps; when they grow at every call, the last figure is taken after a
    garbage collection (what only a reference cycle holds is not kept; gc.collect() takes most of a second, so only
    then)."""
    opt = RecordingSGD(model.parameters(), lr=0.1, record=False)
    stale_grads(model, 0.5)  # as earlier steps leave them
    held = []
    with LiveBytes() as live:
        for k in range(calls):
            # a batch of its own at each call, as a loader gives (made here, dropped after: what keeps it is the step)
            fresh = tuple(t.roll(k, 0).clone() for t in batch)
            with torch.enable_grad():  # (a step that leaves autograd off is check_one_step's to fail, not this one's)
                fn(model, fresh, nn.CrossEntropyLoss(), opt, micro_batches)
            del fresh
            held.append(live.allocated)
        if all(b > a for a, b in zip(held, held[1:])):
            gc.collect()
            held[-1] = live.allocated
    return held


def _frozen_stays(accumulate_step, seed):
    """On a model whose first layer is frozen (fine-tuning), with an optimizer of the trainable parameters only: the
    frozen layer stays frozen and gets no gradient, as the full batch's backward gives it none."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed + 23)
        model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
        x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
    frozen = list(model[0].parameters())
    for p in frozen:
        p.requires_grad_(False)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.1)
    try:
        call(accumulate_step, model, (x, y), nn.CrossEntropyLoss(), opt, 2, name="accumulate_step", defaults=True,
             where="on a model whose first layer is frozen (requires_grad=False), micro_batches=2")
    except CheckFailed as failed:
        if "` on a model whose first layer is frozen" in str(failed) and " raised " in str(failed):
            return  # a step that cannot run with a frozen layer (.grad None there): the text promises no such model
        raise
    thawed = [p for p in frozen if p.requires_grad or p.grad is not None]
    expect(not thawed, "the frozen first layer after accumulate_step (requires_grad=False, as in fine-tuning)",
           "still frozen: requires_grad False and no .grad, as after the full batch's backward",
           f"{len(thawed)} of its {len(frozen)} parameters with requires_grad True or a .grad",
           "leave requires_grad as the caller set it (no model.requires_grad_(True)): a frozen layer is the "
           "caller's choice, and unfreezing it trains what should stay fixed.")


def _other_counts(accumulate_step, seed):
    """One model and its optimizer, stepped with micro_batches=2, then 4, then 2 again (a loop that changes the
    count, e.g. to fit a longer sequence): each step's gradients are the full batch's, whatever the count before."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed + 29)
        model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
        x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
    want = _grads(model, x, y, nn.CrossEntropyLoss())[0]
    stale_grads(model, 0.5)  # as a previous step leaves them
    # two parameter groups (biases apart, as for another lr or no weight decay): the step's gradients come in
    # group order, put back in the model's order
    names = [n for n, _ in model.named_parameters()]
    groups = [[p for n, p in model.named_parameters() if not n.endswith("bias")],
              [p for n, p in model.named_parameters() if n.endswith("bias")]]
    order = [n for n in names if not n.endswith("bias")] + [n for n in names if n.endswith("bias")]
    opt = RecordingSGD([{"params": groups[0]}, {"params": groups[1]}], lr=0.0)
    counts = []
    for m in (2, 4, 2):
        counts.append(m)
        before = len(opt.grads)
        call(accumulate_step, model, (x, y), nn.CrossEntropyLoss(), opt, m, name="accumulate_step", defaults=True,
             where=f"with micro_batches={m} on a model stepped before with micro_batches={counts[:-1]}"
             if counts[:-1] else f"with micro_batches={m}")
        got = opt.grads[-1] if len(opt.grads) > before else None
        if got is not None:
            got = [got[order.index(n)] for n in names]
        ok = got is not None and all(g is not None for g in got) and _matches(got, want)
        ratio = ""
        if got is not None and all(g is not None for g in got):
            r = sum(g.double().norm() for g in got).item() / max(sum(w.double().norm() for w in want).item(), 1e-30)
            ratio = f" (x{r:.3g} the full batch's)"
        biases = [i for i, n in enumerate(names) if n.endswith("bias")]
        bias_off = got is not None and all(g is not None for g in got) and not _matches(
            [got[i] for i in biases], [want[i] for i in biases])
        expect(ok, f"the gradients at optimizer.step() with micro_batches={m} (an optimizer with two parameter groups: "
               "the weights, the biases)" + (f", the same model and optimizer stepped before with micro_batches="
                                             f"{', '.join(map(str, counts[:-1]))}" if len(counts) > 1 else ""),
               "the full batch's", f"others{ratio}" + (" (the biases' group off)" if bias_off else ""),
               "scale every parameter's gradient, in every group of the optimizer (or scale each piece's loss): "
               "an optimizer may hold several groups" if bias_off and len(counts) == 1 else
               "compute the scale from this call's micro_batches, every call: nothing kept from an earlier call (no "
               "cache keyed on the model) may decide this one's loss")


def _own_stream(accumulate_step, seed):
    """On a model with Dropout, from two different states of the caller's random stream: the step draws its masks
    from that stream and leaves it moved on (not reseeded inside, not put back), so each step gets masks of its own."""
    def run(start_seed, drawn=0):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed + 17)
            model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 3))
            x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            stale_grads(model, 0.5)  # as earlier steps leave them
            torch.manual_seed(start_seed)
            torch.rand(drawn)  # the stream a few numbers on from its seed, as a training loop leaves it
            start = torch.get_rng_state()
            call(accumulate_step, model, (x, y), nn.CrossEntropyLoss(), opt, 2, name="accumulate_step", defaults=True,
                 where="on a model with a Dropout layer (batch 8, micro_batches=2)")
            return start, torch.get_rng_state()

    (start, after), (_, other), (_, later) = run(seed + 31), run(seed + 32), run(seed + 31, drawn=5)
    where = "the global random stream after accumulate_step on a model with Dropout"
    expect(not torch.equal(after, other), f"{where}, started from two different states",
           "two different states: the step draws its dropout masks from the caller's stream and leaves it moved on",
           "the same state both times: the step reseeds the global generator, so every step draws the same masks",
           "leave the global random stream alone (no torch.manual_seed in a step): seeding is the script's, once, "
           "at the start; a step reseeded at every call repeats its dropout masks at every step")
    expect(not torch.equal(after, start), where, "moved on by the step's dropout masks, as a plain step moves it",
           "as it was before the step: the step put the random state back, so every step draws the same masks",
           "leave the random stream alone: fork_rng or set_rng_state around a step replays one mask at every step")
    expect(not torch.equal(after, later), f"{where}, started from one seed, then from the same seed 5 numbers on",
           "two different states: the step goes on from wherever the caller's stream stands",
           "the same state both times: the step restarts the stream from its seed (torch.manual_seed(torch."
           "initial_seed()) or the like), so every step draws the same masks",
           "leave the global random stream alone inside the step: no torch.manual_seed, whatever the seed.")


def _nth(k):
    return {1: "1st", 2: "2nd", 3: "3rd"}.get(k, f"{k}th")


@check("accumulated_grads")
def check_accumulated_grads(accumulate_step, seed=0):
    """The gradients at optimizer.step() equal the full batch's (allclose) for the loss_fn passed in, on the present
    device and the CPU, for several micro-batch counts, at two calls in a row with one model and optimizer (as a
    training loop makes them); and a simulated cuda:0 raises no device error."""
    seen = []
    for device in devices():
        for k, (batch_size, m, dtype, smoothing, inputs, hidden, classes) in enumerate(_cases(seed)):
            model, (x, y) = seeded(seed + k, batch_size, inputs, hidden, classes, dtype=dtype, device=device)
            soft = bool(smoothing)  # the other loss: label smoothing, on class probabilities
            loss_fn, loss_name = _loss_fns(smoothing, soft, function=(seed + k) % 2 == 1)
            # two calls in a row, one model and one optimizer, a new batch each (a training loop's next step)
            batches = []
            for j in range(2):
                if j:
                    _, (x, y) = seeded(seed + k + 100, batch_size, inputs, hidden, classes, dtype=dtype, device=device)
                batch = (x, _soft(y, classes, dtype, seed + k + 100 * j) if soft else y)
                plain = _grads(model, *batch, nn.CrossEntropyLoss())[0] if smoothing else None
                batches.append((batch, _grads(model, *batch, loss_fn)[0], plain))
            stale_grads(model, 0.5)  # as a previous step leaves them
            opt = RecordingSGD(model.parameters(), lr=0.0)  # lr 0: the parameters stay where the reference was taken
            calls, hook = _watch(model)
            where = f"on {device}, batch {batch_size} ({str(dtype).removeprefix('torch.')}), micro_batches={m}"
            left = 0  # hooks the earlier calls left on the model
            try:
                for j, (batch, want, plain) in enumerate(batches):
                    held = [None if p.grad is None else p.grad.detach().clone() for p in model.parameters()]
                    first, hooks = len(opt.grads), _hooks(model)
                    del calls[:]
                    calls.in_eval = 0
                    with _OtherSteps(opt) as others:
                        _call_step(accumulate_step, model, batch, loss_fn, opt, m, name="accumulate_step",
                                   where=where if not j else f"{where}, called a 2nd time in a row",
                                   hints=_hints(batch, inputs))
                    _expect_call(model, batch, want, plain, loss_fn, loss_name, m, dtype, where, opt, first, calls,
                                 others, j, held, left)
                    expect(not calls.in_eval, f"the model's mode in accumulate_step's forward passes ({where})",
                           "training mode, as the caller set it (a training step's gradients are those of the model "
                           "in training mode)", f"{calls.in_eval} of {sum(g for g, _ in calls)} with autograd on ran "
                           "with the model (or some of its layers) in eval mode",
                           "leave the model's mode alone: in eval mode Dropout is off and BatchNorm uses its running "
                           "statistics, so the gradients are not those of the batch in training mode (this check's "
                           "model has neither, the lesson's capstone model has both).")
                    left += _hooks(model) - hooks
            finally:
                hook.remove()
            expect(not left, f"hooks on the model after accumulate_step returns ({where}, 2 calls)",
                   "none left: what a call registers goes with it", f"{left} more than before the calls",
                   "remove every hook you register before returning (keep the handle that register_*_hook returns "
                   "and call handle.remove() in a finally block): a hook left behind runs at every later forward or "
                   "backward, and one more piles up at each call.")
            seen.append(f"{batch_size}/{m}")
    _frozen_stays(accumulate_step, seed)
    _other_counts(accumulate_step, seed)
    _own_stream(accumulate_step, seed)
    probe = _device_probe(accumulate_step, seed)
    return (f"gradients accumulated over micro-batches (batch/micro_batches {', '.join(dict.fromkeys(seen))}) equal "
            f"the full batch's on {', '.join(map(str, devices()))}, at two calls in a row{probe}")


def _expect_call(model, batch, want, plain, loss_fn, loss_name, m, dtype, where, opt, first, calls, others, j, held,
                 left):
    """The gradients at the optimizer steps of one call of accumulate_step (the j-th in a row, from 0), and its
    forward passes."""
    batch_size = len(batch[0])
    steps = opt.steps - first
    nth = "" if not j else (f"; the {_nth(j + 1)} call in a row, with the same model and optimizer and a new batch, as "
                            "a training loop makes it (the 1st call's gradients were right)")
    expect(steps > 0, f"optimizer.step() calls ({where}{nth})", "one, after the loop", "none",
           others.hint("call optimizer.step() once, after every micro-batch has been backpropagated."))
    pieces = _pieces(batch_size, m)
    sizes = [n for grad, n in calls if grad]
    forwards = "" if sorted(sizes) == sorted(pieces) else (
        f"; accumulate_step ran {_forwards_text(calls)}, where micro_batches={m} means {m} piece(s) of {pieces[0]}")
    before = "the previous call's gradients, which .grad held when this call began" if j else ""
    for step, got in enumerate(opt.grads[first:], 1):
        missing = [name for (name, _), g in zip(model.named_parameters(), got) if g is None]
        expect(not missing, f"gradients at optimizer.step() ({where}{nth})", "one for every parameter",
               f"none for {missing}", "call backward() on each micro-batch's loss before optimizer.step().")
        if not _matches(got, want, dtype):
            observed, hint = _explain(got, want, model, batch, loss_fn, plain, m, step, steps,
                                      held=[torch.zeros_like(w) if h is None else h for h, w in zip(held, want)],
                                      before=before)
            if j and left > 0:
                observed += (f"; the earlier call(s) left {left} hook(s) registered on the model (its parameters' "
                             "register_hook, or its modules' hooks), still acting on this call's backward()")
                hint = ("remove every hook you register before returning (keep the handle that register_hook "
                                "returns and call handle.remove()), or scale the loss instead (loss / micro_batches): "
                                "a hook left on a parameter acts on every later backward(), call after call.")
            at = "optimizer.step()" if steps == 1 else f"the {_nth(step)} of {steps} optimizer.step() calls"
            raise CheckFailed(
                f"the gradients at {at} ({where}{nth}, loss_fn {loss_name}): expected the full batch's gradients "
                f"for that loss_fn, observed {observed}{forwards}." + (f"\nHint: {hint}" if hint else
                "\nExpected: zero_grad() once before the loop, backward() on each micro-batch's loss / "
                "micro_batches, step() once after it."))
    # finer pieces than micro_batches asks for (coarser ones are check_peak_memory's: they break the budget)
    if any(n is not None and n < min(pieces) for n in sizes):
        split = _pieces_of(batch_size, m)
        hint = (f"micro_batches is the number of pieces, not their size: inputs.chunk({m}) gives {m} pieces "
                f"of {pieces[0]} samples; inputs.split({m}) gives pieces of {m} samples."
                if sorted(sizes) == sorted(split) and split != pieces else "")
        expect(False, f"the forward passes with autograd on ({where})",
               f"{m}, one per micro-batch of {pieces[0]} samples (micro_batches={m} is the number of pieces)",
               _forwards_text(calls), hint)


@check("one_step")
def check_one_step(accumulate_step, seed=0):
    """One optimizer step per effective batch, the full batch's mean loss returned as a Python float, and the grad
    mode left as the step found it (on or off)."""
    device = pick_device()
    batch_size, m, _, smoothing, inputs, hidden, classes = _cases(seed)[1 if seed % 2 else 0]
    dtype = torch.float32  # (float64 is check_accumulated_grads's: a step that fails there loses only that check)
    if seed:
        smoothing = 0.1
    soft = seed % 2 == 1  # odd seeds: class-probability targets, which loss_fn takes as they come
    model, _ = seeded(seed, batch_size, inputs, hidden, classes, dtype=dtype, device=device)
    loss_fn, loss_name = _loss_fns(smoothing, soft, function=seed % 4 >= 2)  # seeds 2, 3: a plain function
    opt = RecordingSGD(model.parameters(), lr=0.1, record=False, momentum=0.9)  # state carried from step to step
    # the sum of the scaled micro-batch losses equals the full batch's mean up to float32 rounding (the text asks the
    # gradients, not the returned loss, to agree to float64's precision: check_accumulated_grads sees a float32 cast)
    rtol = 2e-6
    batch = None
    for k in range(2):
        _, (x, y) = seeded(seed + 10 * (k + 1), batch_size, inputs, hidden, classes, dtype=dtype, device=device)
        y = _soft(y, classes, dtype, seed + 10 * (k + 1)) if soft else y
        batch = None  # the previous batch freed first, as a loop's is: CPython may give the new one its id
        batch = (x, y)
        _, want = _grads(model, *batch, loss_fn)
        with torch.no_grad():
            pieces = [loss_fn(model(xb), yb).item() for xb, yb in zip(batch[0].chunk(m), batch[1].chunk(m))]
        with _OtherSteps(opt) as others:
            got = _call_step(accumulate_step, model, batch, loss_fn, opt, m, name="accumulate_step",
                             hints=_hints(batch, inputs), own_mode=True)
        expect(opt.steps == k + 1, f"optimizer.step() calls after {k + 1} effective batch(es) of {m} "
               "micro-batches", k + 1, opt.steps,
               "step once per effective batch, after the loop: a step inside the loop is plain small-batch training "
               "(more, noisier steps), not accumulation." if opt.steps > k + 1 else
               others.hint("") if opt.steps == k else "")
        if torch.is_tensor(got):
            held = " that still holds its autograd graph (and the memory the graph keeps alive)" if got.requires_grad else ""
            expect(False, "accumulate_step's return value", "the loss as a Python float",
                   f"a tensor of shape {tuple(got.shape)}{held}", "return a float: add each micro-batch's loss.item().")
        got = python_float(got, "accumulate_step's return value (the loss)")
        ratio = got / want if want else float("nan")
        hint = ""
        if abs(ratio - m) < 1e-3 * m and m > 1:
            hint = (f"it is {m} times the mean: the sum of the unscaled micro-batch losses. Add the scaled ones "
                    f"(loss / micro_batches) instead.")
        elif abs(ratio * batch_size / m - 1) < 1e-3 and batch_size != m:
            hint = (f"it is the mean times micro_batches / batch size ({m}/{batch_size}): each micro-batch's loss, a "
                    "mean, was divided by the batch size. loss_fn returns the MEAN loss of what it is given (whatever "
                    "it is: an nn loss module, or a plain function whose reduction cannot be switched): divide it by "
                    "micro_batches.")
        elif abs(ratio * m - 1) < 1e-3 and m > 1:
            hint = (f"it is the mean divided by micro_batches ({m}) once more: the sum of the scaled micro-batch "
                    f"losses (loss / micro_batches) is already the full batch's mean; return it as it is.")
        elif m > 1:
            tol = 1e-4 * max(1.0, abs(want))  # a known mistake's value, recognised up to float32 rounding
            one = next((i for i, p in enumerate(pieces) if abs(got - p) <= tol or abs(got - p / m) <= tol), None)
            if one is not None and abs(got - want) > 1e-3 * max(1.0, abs(want)):
                scaled = "" if abs(got - pieces[one]) <= tol else f" divided by {m}"
                hint = (f"it is the loss of micro-batch {one + 1} of {m} alone{scaled} ({got:.5f}): add every micro-batch's "
                        "scaled loss (loss.item() after loss / micro_batches) over the loop and return the sum.")
        expect(abs(got - want) <= rtol * max(1.0, abs(want)), f"the returned loss (batch {batch_size}, "
               f"micro_batches={m}, loss_fn {loss_name})",
               f"the full batch's mean loss {want:.9g} (to {rtol:.0e} relative: float32 rounding)",
               f"{got:.9g}, off by {abs(got - want):.3g}", hint)
    expect(all(opt.kept[1:]), "the optimizer's state (SGD's momentum buffers) at the second effective batch's "
           "step", "still there, carried from the first step", "gone: the step started from no momentum",
           "leave optimizer.state alone: zero_grad() clears only the gradients, and the optimizer's state (momentum, "
           "Adam's moments) must carry from step to step")
    _off_stays_off(accumulate_step, seed, m, loss_fn)
    return (f"one optimizer.step() per effective batch of {m} micro-batches, the optimizer's momentum kept; the "
            "full-batch loss returned as a float")


def _off_stays_off(accumulate_step, seed, m, loss_fn):
    """Called inside torch.no_grad() (a caller with autograd off): whether it then runs or raises (backward without a
    graph) is its own business, but autograd must still be off when it returns."""
    model, batch = seeded(seed, 4 * m, inputs=8, hidden=8, classes=3, device=torch.device("cpu"))
    opt = RecordingSGD(model.parameters(), lr=0.1, record=False)
    outer = torch.is_grad_enabled()
    try:
        torch.set_grad_enabled(False)
        with contextlib.suppress(CheckFailed):
            call(accumulate_step, model, batch, loss_fn, opt, m, restore_grad=False, name="accumulate_step",
                 where="called inside torch.no_grad()")
        after = torch.is_grad_enabled()
    finally:
        torch.set_grad_enabled(outer)
    expect(not after, "autograd when accumulate_step returns, called inside torch.no_grad() (a caller with autograd "
           "off)", "still off, as the caller had it", "on: the step switched autograd on for the caller and left it "
           "so (the caller's later operations build graphs)",
           "switch autograd on only inside a block: `with torch.enable_grad():` puts back what it found when it "
           "ends; torch.set_grad_enabled(True) on its own line does not.")


def _peak(fn, model, batch, micro_batches):
    """Peak live bytes of one accumulation step (CPU tracker), the recording optimizer, the forward calls, and the
    order of events: ("forward", bytes held when it began) and ("backward", None) as the first layer's gradient
    is computed."""
    opt = RecordingSGD(model.parameters(), lr=0.1, record=False)
    stale_grads(model, 0.5)
    calls, events = [], []
    live = LiveBytes()

    def pre(module, args):
        first = args[0] if args else None
        calls.append((torch.is_grad_enabled(), first.shape[0] if torch.is_tensor(first) and first.dim() else None))
        if torch.is_grad_enabled():
            events.append(("forward", live.allocated))

    first = next(model.parameters())
    handles = [model.register_forward_pre_hook(pre), first.register_hook(lambda g: events.append(("backward", None)))]
    try:
        with live:
            fn(model, batch, nn.CrossEntropyLoss(), opt, micro_batches)
    finally:
        for h in handles:
            h.remove()
    return live.peak, opt, calls, events


def _memory_story(events):
    """What the event order shows about why memory piled up, and the matching hint; ('', '') when it shows nothing."""
    kinds = [k for k, _ in events]
    forwards = kinds.count("forward")
    if forwards > 1 and "backward" in kinds and kinds.index("backward") > max(i for i, k in enumerate(kinds) if k == "forward"):
        return (f"; all {forwards} forwards ran before the first backward, so every micro-batch's activations were "
                "alive at once",
                "call backward() on each micro-batch's loss before the next forward: its backward frees that "
                "micro-batch's activations (summing the losses and calling backward() once keeps them all).")
    held = [b for k, b in events if k == "forward"]
    if forwards > 2 and all(b2 > b1 for b1, b2 in zip(held[1:], held[2:])) and held[-1] > held[1]:
        return (f"; backward ran after each forward, yet the memory held when each forward began kept growing "
                f"({', '.join(fmt(b) for b in held)}): what each micro-batch left alive piled up",
                "backward() frees a graph's saved activations unless it is told to keep them "
                "(backward(retain_graph=True)) or something still holds the graph (a running total that is a tensor: "
                "add loss.item()).")
    return "", ""


def reference_accumulate_step(model, batch, loss_fn, optimizer, micro_batches):
    """The lesson's accumulate_step: zero_grad once, each micro-batch's loss / micro_batches backward, one step."""
    optimizer.zero_grad()
    total = 0.0
    x, y = batch
    for xb, yb in zip(x.chunk(micro_batches), y.chunk(micro_batches)):
        loss = loss_fn(model(xb), yb) / micro_batches
        loss.backward()
        total += loss.item()
    optimizer.step()
    return total


def _retaining_step(model, batch, loss_fn, optimizer, micro_batches):
    """The reference, keeping each micro-batch's graph alive until the next forward (backward(retain_graph=True)):
    the smallest pile-up, one graph too many."""
    optimizer.zero_grad()
    x, y = batch
    for xb, yb in zip(x.chunk(micro_batches), y.chunk(micro_batches)):
        loss = loss_fn(model(xb), yb) / micro_batches
        loss.backward(retain_graph=True)
    optimizer.step()


def _peak_case(seed):
    """(micro_batches, batch_size, hidden, depth) for a seed: micro-batches of 4 samples per unit of width (seed 0)
    to 6 or more, so one micro-batch's saved activations (samples x width per layer) are 3 to 5 times the parameters
    (width x width per layer): a spare copy of the gradients fits the budget, a second micro-batch's graph does
    not."""
    if seed == 0:
        return 4, 256, 16, 6
    rng = random.Random(7 * seed + 3)
    m, hidden = rng.choice([2, 3, 4, 6, 8]), rng.choice([16, 24, 32])
    piece = max(rng.choice([32, 48, 64]), -(-16 * hidden // m), 6 * hidden)
    return m, m * piece, hidden, rng.choice([3, 4, 5, 6])


@check("peak_memory")
def check_peak_memory(accumulate_step, seed=0):
    """Each forward with autograd on sees one micro-batch, and the measured peak of one accumulation step stays
    under a budget that the full batch breaks."""
    m, batch_size, hidden, depth = _peak_case(seed)
    cpu = torch.device("cpu")
    model, batch = seeded(seed, batch_size, inputs=16, hidden=hidden, classes=4, depth=depth, device=cpu)
    full = _peak(reference_accumulate_step, copy.deepcopy(model), batch, 1)[0]
    ref, _, _, ref_events = _peak(reference_accumulate_step, copy.deepcopy(model), batch, m)
    kept = _peak(_retaining_step, copy.deepcopy(model), batch, m)[0]
    grads = sum(p.numel() * p.element_size() for p in model.parameters())
    # one micro-batch at a time, plus three quarters of one more micro-batch's saved activations (what a graph kept
    # alive until the next forward holds): room for a spare copy of the gradients (torch.autograd.grad returns
    # them, so correct work may hold them while the next forward runs), not for a second graph
    budget = ref + 3 * (kept - ref) // 4
    assert full > kept > budget > ref + 2 * grads, "the check's own budget is inconsistent"
    learner = copy.deepcopy(model)
    peak, opt, calls, events = _call_step(_peak, accumulate_step, learner, batch, m, name="accumulate_step",
                                    hints=_hints(batch, 16))
    # the peak is only meaningful for a step that does some work: forwards with autograd on and backward() through
    # the model (whether they cover the whole batch, and the gradients reach optimizer.step(), is
    # check_accumulated_grads's: a step that skips a micro-batch loses that check, not this one)
    covered = sum(n for grad, n in calls if grad and n is not None)
    backwards = sum(1 for k, _ in events if k == "backward")
    expect(covered and backwards, f"the work of one step with micro_batches={m} (batch {batch_size})",
           "forward passes with autograd on and backward() through the model (the peak is measured on that work)",
           f"{_forwards_text(calls)}, and backward() reached the model {backwards} time(s)",
           "run forward and backward() on each micro-batch." if not backwards or not covered else "")
    piece = -(-batch_size // m)
    big = [n for grad, n in calls if grad and n is not None and n > piece]
    expect(not big, f"the forward passes of one step with micro_batches={m} (batch {batch_size})",
           f"each forward with autograd on given one micro-batch, at most {piece} samples",
           f"{_forwards_text(calls)} (a forward with autograd on saves activations for every sample it is given)",
           "run the model on one micro-batch at a time, micro_batches pieces (tensor.chunk(micro_batches)); compute "
           "the returned loss from those pieces' losses, not from an extra forward of the whole batch.")
    story, hint = _memory_story(events)
    held, ref_held = ([b for k, b in ev if k == "forward"] for ev in (events, ref_events))
    if not story and len(held) > 1 and len(ref_held) > 1 and held[1] - ref_held[1] > budget - ref:
        story = (f"; when the second forward began, {fmt(held[1] - ref_held[1])} more was alive than when one "
                 "micro-batch is done at a time: the first micro-batch's graph with its saved activations, or "
                 "other tensors kept from it (copies of the pieces)")
        hint = ("backward() frees a graph's saved activations unless it is told to keep them "
                "(backward(retain_graph=True)) or something still holds the graph until the next forward; and "
                "nothing of a micro-batch need outlive its backward() (no cache of pieces, no list of outputs).")
    expect(peak < budget, f"the peak memory of one step with {m} micro-batches (batch {batch_size})",
           f"under {fmt(budget)}, one micro-batch's activations at a time (a second micro-batch's graph kept "
           f"alive: {fmt(kept)}; full "
           f"batch: {fmt(full)}; one micro-batch at a time: {fmt(ref)})", f"{fmt(peak)}{story}", hint)
    # across steps: what each call leaves alive after it returns must not pile up (the slow leak of section 2b)
    steps = 3
    held = _call_step(_held_after, accumulate_step, copy.deepcopy(model), batch, m, steps, name="accumulate_step",
                      where=f"called {steps} times in a row", hints=_hints(batch, 16))
    growth = [b - a for a, b in zip(held, held[1:])]
    expect(not all(g > 0 for g in growth), f"the memory held after each of {steps} consecutive calls of accumulate_step "
           f"(one optimizer, batch {batch_size}, micro_batches={m}; tensors created by the calls)",
           "the same after every call: a step leaves its gradients, and nothing that piles up from step to step",
           f"{', '.join(fmt(b) for b in held)}: it grows by {', '.join(fmt(g) for g in growth)} per call, so tensors "
           "created in each call stay alive after it returns (kept in a global, a list or an attribute), step after "
           "step",
           "keep floats, not tensors, across steps: loss.item() for what you log, .detach() (or nothing) for what you "
           "keep; an output or a loss kept as it is holds its autograd graph too.")
    return (f"{m} forwards of one micro-batch each; peak {fmt(peak)} under a budget of {fmt(budget)} that the full "
            f"batch ({fmt(full)}) breaks (live tensor bytes, measured on the CPU); the memory held after "
            f"{steps} consecutive steps does not grow")
