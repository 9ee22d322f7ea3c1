"""trainclinic.nonfinite: the first NaN/inf is found at the right step, module and phase; nothing leaks."""
import math
import warnings

import pytest
import torch
from torch import nn

import trainclinic as tc
from trainclinic import nonfinite


@pytest.fixture(autouse=True)
def _strict():
    """Any warning is an error here: the tool must stay quiet (nbgrader scores stderr as a failure)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


class LogFeatures(nn.Module):
    """Finite input -> NaN output for negative inputs (a forward culprit)."""

    def forward(self, h):
        return torch.log(h)


class WhereSqrt(nn.Module):
    """Finite forward, NaN backward: torch.where over sqrt of negative values (a backward culprit)."""

    def forward(self, h):
        return torch.where(h > 0, torch.sqrt(h), h)


class ScaledSqrt(nn.Module):
    """Like WhereSqrt with a parameter: its weight's gradient is NaN."""

    def __init__(self, n):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))

    def forward(self, h):
        return torch.where(h > 0, torch.sqrt(h) * self.weight, h * self.weight)


class LogBetween(nn.Module):
    """Children are fine; the parent's own forward code makes the NaN between them."""

    def __init__(self):
        super().__init__()
        self.first, self.second = nn.Linear(4, 8), nn.Linear(8, 1)

    def forward(self, x):
        return self.second(torch.log(self.first(x)))


def batch(n=16, features=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, features, generator=g), torch.randn(n, 1, generator=g)


def first(model, x, y, loss_fn=nn.functional.mse_loss):
    """The finding raised by one watched step, checked to be a NonFiniteError and a FloatingPointError."""
    with pytest.raises(nonfinite.NonFiniteError) as info:
        with nonfinite.watch_nonfinite(model) as w:
            w.check("the loss", loss_fn(model(x), y)).backward()
    assert isinstance(info.value, FloatingPointError)
    assert str(info.value) == str(info.value.finding)
    return info.value.finding


def no_hooks(model):
    return all(not m._forward_hooks and not m._forward_pre_hooks and not m._backward_hooks for m in model.modules()) and \
        all(not p._backward_hooks for p in model.parameters())


def test_forward_culprit_named():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), LogFeatures(), nn.Linear(8, 1))
    x, y = batch()
    # reference: PyTorch itself says the Linear output is finite and the log output is not
    h = model[0](x)
    assert torch.isfinite(h).all() and not torch.isfinite(torch.log(h)).all()
    f = first(model, x, y)
    assert (f.module, f.phase, f.kind, f.step) == ("1", "forward", "forward", 0)
    assert "module '1' (LogFeatures)" in str(f) and "forward output" in str(f)
    assert no_hooks(model)


def test_backward_culprit_named():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), WhereSqrt(), nn.Linear(8, 1))
    x, y = batch()
    out = model(x)
    assert torch.isfinite(out).all()  # the forward pass is clean...
    out.sum().backward()
    assert not torch.isfinite(model[0].weight.grad).all()  # ...the backward pass is not (PyTorch's own gradients)
    model.zero_grad()
    f = first(model, x, y)
    assert (f.module, f.phase, f.kind) == ("1", "backward", "gradient")
    assert "module '1' (WhereSqrt)" in str(f)


def test_parameter_gradient_of_first_module():
    torch.manual_seed(0)
    model = nn.Sequential(ScaledSqrt(4), nn.Linear(4, 1))  # its input needs no gradient: only its weight's is NaN
    f = first(model, *batch())
    assert (f.module, f.phase, f.kind) == ("0", "backward", "parameter gradient")
    assert "'0.weight'" in str(f)


def test_nan_input_is_data():
    x, y = batch()
    x[3, 2] = float("nan")
    f = first(tc.mlp(inputs=4, hidden=8, outputs=1), x, y)
    assert (f.module, f.phase, f.kind) == ("model", "forward", "data")
    assert "1 NaN in 64 values" in str(f)


def test_gradient_from_the_loss():
    def root_error(out, y):
        d = out - y
        return torch.where(d > 0, torch.sqrt(d), torch.zeros_like(d)).mean()

    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1), nn.Identity())
    f = first(model, *batch(), loss_fn=root_error)
    assert (f.module, f.phase, f.kind) == ("model", "backward", "gradient from outside")


def test_nan_made_between_modules():
    torch.manual_seed(0)
    f = first(LogBetween(), *batch())
    assert (f.module, f.kind) == ("second", "input")


def test_nan_parameter_and_step_count():
    model = tc.mlp(inputs=4, hidden=8, outputs=1)
    x, y = batch()
    with pytest.raises(nonfinite.NonFiniteError) as info:
        with nonfinite.watch_nonfinite(model) as w:
            for step in range(3):
                if step == 2:
                    with torch.no_grad():
                        model[2].weight[0, 0] = float("inf")  # as a bad optimizer step would
                nn.functional.mse_loss(model(x), y).backward()
    f = info.value.finding
    assert (f.step, f.module, f.kind) == (2, "2", "parameter")
    assert w.step == 2 and "'2.weight'" in str(f)


def test_record_without_stopping():
    model = nn.Sequential(nn.Linear(4, 8), LogFeatures(), nn.Linear(8, 1))
    x, y = batch()
    with nonfinite.watch_nonfinite(model, stop=False) as w:
        for _ in range(3):
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
    assert not math.isfinite(loss.item())
    assert (w.first.step, w.first.module) == (0, "1") and w.step == 2
    assert no_hooks(model)


def test_clean_run_finds_nothing():
    model = tc.mlp(inputs=4, hidden=8, outputs=1)
    x, y = batch()
    assert nonfinite.locate(model, (x, y), nn.functional.mse_loss) is None
    assert no_hooks(model) and nonfinite.scan(model) == {}
    with nonfinite.watch_nonfinite(model) as w, torch.no_grad():
        model(x)  # evaluation under no_grad: fine
    assert w.first is None


def test_too_high_learning_rate_found_at_the_loss():
    """The lesson's blow-up: SGD at lr=100 overflows the loss (a value outside the model) a few steps in."""
    torch.manual_seed(0)
    ds = tc.regression(n=128, features=8, seed=0)
    model = tc.mlp(inputs=8, hidden=32, outputs=1, activation=nn.Tanh)
    opt = torch.optim.SGD(model.parameters(), lr=100)
    with pytest.raises(nonfinite.NonFiniteError) as info:
        with nonfinite.watch_nonfinite(model) as w:
            for _ in range(5):
                for x, y in tc.loader(ds, batch_size=32):
                    opt.zero_grad()
                    w.check("the loss", nn.functional.mse_loss(model(x), y)).backward()
                    opt.step()
    f = info.value.finding
    assert f.place == "the loss" and 2 <= f.step <= 12
    assert nonfinite.scan(model) == {}  # stopped before the weights were corrupted


def test_locate_returns_the_finding():
    model = nn.Sequential(nn.Linear(4, 8), LogFeatures(), nn.Linear(8, 1))
    f = nonfinite.locate(model, batch(), nn.functional.mse_loss)
    assert isinstance(f, nonfinite.Finding) and f.module == "1"
    assert no_hooks(model)


def test_anomaly_raises_pytorchs_error_quietly(capsys):
    model = nn.Sequential(nn.Linear(4, 8), WhereSqrt(), nn.Linear(8, 1))
    x, y = batch()
    with pytest.raises(RuntimeError, match=r"Function 'SqrtBackward0' returned nan values"):
        with nonfinite.anomaly() as a:
            nn.functional.mse_loss(model(x), y).backward()
    out = capsys.readouterr()
    assert out.err == ""
    assert "torch.sqrt(h)" in a.trace and "test_nonfinite.py" in a.trace and "site-packages" not in a.trace
    assert "torch.sqrt(h)" in out.out
    assert not torch.is_anomaly_enabled()


def test_describe_finite_scan():
    t = torch.tensor([1.0, float("nan"), float("inf"), -2.0])
    assert nonfinite.summarize(t) == "1 NaN, 1 inf in 4 values; largest finite |x| 2"
    assert nonfinite.summarize(torch.ones(1)) == "no NaN or inf in 1 value; largest finite |x| 1"
    assert nonfinite.finite(torch.ones(3)) and not nonfinite.finite((torch.ones(2), {"a": t}))
    assert nonfinite.finite(torch.tensor([1, 2])) and not nonfinite.finite(float("nan"))
    model = nn.Linear(2, 1)
    with torch.no_grad():
        model.bias.fill_(float("nan"))
    assert set(nonfinite.scan(model)) == {"bias"}


# ---- what lesson 04 says about PyTorch, checked on the installed torch -----------------------------------------

def test_norm_gradient_at_zero():
    """torch's norm has a zero gradient at 0; a hand-written sqrt((x**2).sum()) has a NaN one (lesson 04's table)."""
    x = torch.zeros(3, requires_grad=True)
    x.norm().backward()
    assert torch.equal(x.grad, torch.zeros(3))
    x.grad = None
    torch.linalg.vector_norm(x).backward()
    assert torch.equal(x.grad, torch.zeros(3))
    x.grad = None
    torch.sqrt((x ** 2).sum()).backward()
    assert torch.isnan(x.grad).all()


def _amp_steps(dtype, steps=6):
    torch.manual_seed(0)
    model = tc.mlp(inputs=8, hidden=32, outputs=1, activation=nn.ReLU, seed=0)
    x, y = torch.randn(32, 8) * 1e5, torch.randn(32, 1)  # unnormalised features: activations above 65504
    opt = torch.optim.SGD(model.parameters(), lr=1e-12)
    scaler = torch.amp.GradScaler("cpu", enabled=dtype == torch.float16)
    before = [p.detach().clone() for p in model.parameters()]
    losses, skipped = [], 0
    for _ in range(steps):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=dtype):
            loss = nn.functional.mse_loss(model(x), y)
        scale = scaler.get_scale() if scaler.is_enabled() else 0.0
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        skipped += scaler.is_enabled() and scaler.get_scale() < scale
        losses.append(loss.item())
    moved = max((p.detach() - b).abs().max().item() for p, b in zip(model.parameters(), before))
    return losses, skipped, moved


def test_gradscaler_cannot_rescue_a_forward_overflow():
    """float16 overflows in the forward pass: GradScaler skips every step and the weights never change; bfloat16
    has float32's range and trains (lesson 04's mixed-precision cell and table row)."""
    losses, skipped, moved = _amp_steps(torch.float16)
    assert not any(math.isfinite(v) for v in losses) and skipped == len(losses) and moved == 0
    losses, skipped, moved = _amp_steps(torch.bfloat16)
    assert all(math.isfinite(v) for v in losses) and moved > 0


# ---- lesson 04's checks: pieces that need no notebook ----------------------------------------------------------

def test_step_named_accepts_reasonable_forms():
    from trainclinic.checks.nan_loss import step_named

    for text in ("non-finite loss at step 7", "Step 7/20: NaN", "loss is nan (step=7)", "at step #7", "STEP: 7",
                 "global_step=7", "step no. 7", "steps 7"):
        assert 7 in step_named(text), text
    for text in ("non-finite loss at 7", "timestep 7", "stepped 7 times", "iteration 7 failed"):
        assert 7 not in step_named(text), text


def test_checks_restore_global_state():
    """Learner code that switches grad mode off or changes the default dtype leaves no trace after a check."""
    from trainclinic.checks import nan_loss

    def train(model, loader, lr, steps):
        torch.set_default_dtype(torch.float64)
        torch.set_grad_enabled(False)
        raise FloatingPointError("step 0")

    with pytest.raises(tc.CheckFailed):
        nan_loss.check_train(train)
    assert torch.is_grad_enabled() and torch.get_default_dtype() == torch.float32


def test_check_train_stops_a_train_that_never_ends():
    """A train that skips a NaN step without counting it loops for ever; the check stops it and says so (the lesson's
    own scan cell would hang on it too, so this is a unit test rather than a graded variant)."""
    from trainclinic.checks import nan_loss

    def train(model, loader, lr, steps):
        optimizer = torch.optim.SGD(model.parameters(), lr=lr)
        history = {"step": [], "loss": [], "grad_norm": []}
        step = 0
        while step < steps:
            for batch in loader:
                if step == steps:
                    break
                loss = nan_loss.reference_safe_step(model, batch, nn.MSELoss(), optimizer)
                if loss is None:
                    continue  # never counted: never ends
                history["step"].append(step)
                history["loss"].append(loss)
                history["grad_norm"].append(tc.grad_norm(model))
                step += 1
        return history

    with pytest.raises(tc.CheckFailed, match="so the check stopped it"):
        nan_loss.check_train(train)
