"""Lesson 02's library: shapes.trace (against PyTorch's own errors) and the shape_dtype checks."""
import re
import time
import warnings

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from trainclinic import shapes
from trainclinic.checks import CheckFailed
from trainclinic.checks import shape_dtype as checks


def torch_error(fn):
    """PyTorch's own message for what `fn` raises: the reference the tool must repeat."""
    with pytest.raises(Exception) as info:
        fn()
    return f"{type(info.value).__name__}: {info.value}"


def cnn(linear_in):
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(linear_in, 3))


class ViewNet(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.conv, self.pool, self.fc, self.k = nn.Conv2d(1, 8, 3, padding=1), nn.MaxPool2d(2), nn.Linear(k, 3), k

    def forward(self, x):
        return self.fc(self.pool(self.conv(x)).view(-1, self.k))


def test_trace_fitting_model_lists_every_layer(capsys):
    model, x = cnn(288), torch.randn(5, 1, 12, 12)
    rows = shapes.trace(model, x)
    assert [r["layer"] for r in rows] == ["0", "1", "2", "3", "4"]
    assert all(r["error"] is None for r in rows)
    assert rows[3]["output"] == "5x288 float32" and rows[4]["output"] == "5x3 float32"
    assert rows[-1]["shapes"] == ((5, 288), (5, 3))
    out = capsys.readouterr().out
    assert "Flatten" in out and "✗" not in out


def test_trace_names_first_layer_that_does_not_fit(capsys):
    model, x = cnn(1152), torch.randn(8, 1, 12, 12)
    want = torch_error(lambda: model(x))
    rows = shapes.trace(model, x)
    bad = rows[-1]
    assert bad["layer"] == "4" and bad["type"] == "Linear" and bad["error"] == want
    assert "mat1 and mat2 shapes cannot be multiplied (8x288 and 1152x3)" in want
    assert bad["input"] == "8x288 float32" and bad["expects"] == "(*, 1152) float32"
    out = capsys.readouterr().out
    assert "first layer whose input does not fit: `4`" in out and want in out


def test_trace_names_conv_channel_mismatch():
    model, x = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU()), torch.randn(4, 1, 10, 10)
    rows = shapes.trace(model, x, show=False)
    assert len(rows) == 1 and rows[0]["layer"] == "0"
    assert rows[0]["error"] == torch_error(lambda: model(x)) and "3 channels" in rows[0]["error"]
    assert rows[0]["expects"] == "(N, 3, H, W) float32"


def test_trace_dtype_mismatch():
    model, x = nn.Sequential(nn.Linear(4, 2)), torch.randn(3, 4, dtype=torch.float64)
    rows = shapes.trace(model, x, show=False)
    assert rows[0]["input"] == "3x4 float64"
    assert "Double and Float" in rows[0]["error"] and rows[0]["error"] == torch_error(lambda: model(x))


def test_trace_error_between_layers_and_batch_note(capsys):
    model, x = ViewNet(8 * 6 * 7), torch.randn(8, 1, 12, 12)
    rows = shapes.trace(model, x)
    assert rows[-1]["layer"] == "ViewNet" and rows[-1]["after"] == "pool"
    assert rows[-1]["error"] == torch_error(lambda: model(x))
    assert "own forward code, after layer `pool`" in capsys.readouterr().out
    merged = ViewNet(8 * 12 * 12)  # the view merges 4 samples per row: no error in the model
    rows = shapes.trace(merged, x, target=torch.randint(0, 3, (8,)), loss_fn=nn.CrossEntropyLoss())
    fc = next(r for r in rows if r["layer"] == "fc")
    assert fc["input"] == "2x1152 float32" and "batch has 8" in fc["note"]
    assert rows[-1]["layer"] == "loss" and "Expected input batch_size (2) to match target batch_size (8)" in rows[-1]["error"]


def test_trace_loss_dtype_and_silent_broadcast():
    head, x = nn.Linear(3, 1), torch.randn(6, 3)
    rows = shapes.trace(head, x, target=torch.randn(6), loss_fn=nn.MSELoss(), show=False)
    loss = rows[-1]
    assert loss["error"] is None and loss["output"] == "scalar float32"
    assert "different to the input size" in loss["warning"] and "broadcasts them to 6x6" in loss["note"]
    rows = shapes.trace(nn.Linear(3, 2), x, target=torch.zeros(6), loss_fn=F.cross_entropy, show=False)
    assert rows[-1]["type"] == "cross_entropy"  # torch <= 2.12 and >= 2.13 word it differently:
    assert re.search(r"expected scalar type Long but found Float|expected target dtype to be Long", rows[-1]["error"])


def test_trace_leaves_model_untouched():
    model = cnn(288).train()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        shapes.trace(model, torch.randn(2, 1, 12, 12), target=torch.tensor([0, 1]), loss_fn=nn.CrossEntropyLoss(), show=False)
        shapes.trace(model, torch.randn(2, 1, 12, 13), show=False)
    assert model.training and all(p.grad is None for p in model.parameters())
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())


def test_describe_and_expects():
    assert shapes.describe(torch.zeros(2, 3, dtype=torch.int64)) == "2x3 int64"
    assert shapes.describe(torch.tensor(1.0)) == "scalar float32"
    assert shapes.describe((torch.zeros(1), None, torch.zeros(2, 2))) == "1 float32, 2x2 float32"
    assert shapes.expects(nn.Conv1d(4, 2, 3)) == "(N, 4, L) float32"
    assert shapes.expects(nn.BatchNorm2d(5)) == "(N, 5, ...) float32"
    assert shapes.expects(nn.ReLU()) == ""


# ---- the checks, with the reference fixes, blank stubs and plausible wrong fixes


def prepare_batch(images, labels):
    return images.unsqueeze(1).float(), labels.long()


def build_model(size=12, classes=3):
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(8 * (size // 2) ** 2, classes))


def regression_loss(pred, target):
    return F.mse_loss(pred.squeeze(1), target.to(pred.dtype))


def blank(*args):
    raise NotImplementedError()


def test_checks_pass_reference(capsys):
    for run, fn, kw in [(checks.check_prepare_batch, prepare_batch, {}), (checks.check_build_model, build_model, {}),
                        (checks.check_build_model, build_model, {"seed": 1}),
                        (checks.check_regression_loss, regression_loss, {})]:
        start = time.perf_counter()
        run(fn, **kw)
        assert time.perf_counter() - start < 10  # < 2 s on an idle 2-core CPU; slack for a shared one
    out = capsys.readouterr()
    assert out.out.count("✓") == 4 and out.err == ""


def test_checks_fail_blank():
    for run, name in [(checks.check_prepare_batch, "prepare_batch"), (checks.check_build_model, "build_model"),
                      (checks.check_regression_loss, "regression_loss")]:
        with pytest.raises(CheckFailed, match=f"`{name}` is not written yet"):
            run(blank)


@pytest.mark.parametrize("fn,message", [
    (lambda i, l: (i.float(), l.long()), "channels instead"),
    (lambda i, l: (i.float(), l.long()), "images.unsqueeze(1)"),
    (lambda i, l: (i.unsqueeze(1).float(), l.int()), "labels dtype: expected torch.int64"),
    (lambda i, l: (i.unsqueeze(1).float(), l.squeeze().long()), "which is what .squeeze() does to a batch of one"),
    (lambda i, l: (i.reshape(-1, 1, i.shape[1], i.shape[1]).float(), l.long()), "is invalid for input of size"),
    (lambda i, l: (i.unsqueeze(1).float(), l.to(torch.uint8)), "labels dtype: expected torch.int64"),
    (lambda i, l: (i.unsqueeze(1), l.long()), "bias type (float)"),
    (lambda i, l: (i.unsqueeze(1).float(), l.long().view(-1, 1)), "0D or 1D target tensor expected"),
])
def test_check_prepare_batch_wrong(fn, message):
    with pytest.raises(CheckFailed) as info:
        checks.check_prepare_batch(fn)
    assert message in str(info.value)


def test_check_build_model_wrong():
    with pytest.raises(CheckFailed, match="cannot be multiplied"):
        checks.check_build_model(lambda size, classes: build_model(2 * size, classes))
    with pytest.raises(CheckFailed, match="cannot be multiplied"):  # hard-coded for 12x12
        checks.check_build_model(lambda size, classes: build_model(12, classes), seed=1)
    with pytest.raises(CheckFailed, match=r"bias type \(double\)"):
        checks.check_build_model(lambda size, classes: build_model(size, classes).double())

    class Mixer(nn.Module):  # right shape, but the flatten mixes samples across the batch
        def __init__(self):
            super().__init__()
            self.net = build_model(12, 3)

        def forward(self, x):
            h = self.net[:4](x)
            return self.net[4](h.reshape(h.shape[1], -1).t().contiguous())  # (N*288) read as 288 x N

    with pytest.raises(CheckFailed, match="independent of the other samples"):
        checks.check_build_model(lambda size, classes: Mixer())


@pytest.mark.parametrize("fn,message", [
    (lambda p, t: F.mse_loss(p, t.float()), "broadcast to (6, 6)"),
    (lambda p, t: ((p - t.float()) ** 2).mean(), "broadcast to (6, 6)"),
    (lambda p, t: F.mse_loss(p.squeeze(1), t), "torch.float64"),
    (lambda p, t: F.mse_loss(p.squeeze(1), t.float()).item(), "a tensor"),
    (lambda p, t: F.mse_loss(p.squeeze(1).detach(), t.float()), "requires_grad"),
    (lambda p, t: F.mse_loss(p.squeeze(1), t.float(), reduction="sum"), "the loss for a batch of 6"),
])
def test_check_regression_loss_wrong(fn, message):
    with pytest.raises(CheckFailed) as info:
        checks.check_regression_loss(fn)
    assert message in str(info.value)


def test_check_regression_loss_reports_pytorch_warning():
    with pytest.raises(CheckFailed, match="PyTorch warned: Using a target size"):
        checks.check_regression_loss(lambda p, t: F.mse_loss(p, t.float()))


def test_checks_keep_learner_rng():
    torch.manual_seed(123)
    want = torch.rand(3)
    torch.manual_seed(123)
    checks.check_build_model(build_model)
    assert torch.equal(torch.rand(3), want)


def test_check_prepare_batch_hint_names_the_bug_it_saw():
    """The labels' 0-d shape on a batch of one gets the .squeeze() message, not a hint about flattening logits."""
    with pytest.raises(CheckFailed) as info:
        checks.check_prepare_batch(lambda i, l: (i.unsqueeze(1).float(), l.squeeze().long()))
    text = str(info.value)
    assert "labels shape for a batch of 1: expected (1,), observed () (a 0-d tensor)" in text
    assert ".squeeze()" in text and "flatten" not in text


def test_check_build_model_sees_the_layers():
    """A layer dropped (the next one resized to compensate, or nothing to resize) fails; other idioms pass."""
    def no_pool(size, classes):
        return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * size * size, classes))

    def no_relu(size, classes):
        return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.MaxPool2d(2), nn.Flatten(),
                             nn.Linear(8 * (size // 2) ** 2, classes))

    def softmax(size, classes):
        return nn.Sequential(build_model(size, classes), nn.Softmax(dim=1))

    for fn, message in [(no_pool, "the feature maps reach it at full size"), (no_relu, "without the ReLU"),
                        (softmax, "followed by a softmax")]:
        with pytest.raises(CheckFailed, match=re.escape(message)):
            checks.check_build_model(fn)

    class Functional(nn.Module):  # pool before ReLU, functional calls, LazyLinear: the same network
        def __init__(self, classes):
            super().__init__()
            self.conv, self.fc = nn.Conv2d(1, 8, 3, padding=1), nn.LazyLinear(classes)

        def forward(self, x):
            return self.fc(torch.flatten(F.max_pool2d(self.conv(x), 2).relu(), 1))

    for seed in range(4):
        checks.check_build_model(lambda size, classes: Functional(classes), seed=seed)


@pytest.mark.parametrize("fn,message,absent", [
    (lambda p, t: torch.sqrt(F.mse_loss(p.squeeze(1), t.float())), "the square root of the MSE", "broadcast"),
    (lambda p, t: F.mse_loss(p.squeeze(1).double(), t).float(), "float32 data computed in float64", "broadcast"),
    (lambda p, t: ((p.squeeze(1) - t) ** 2).mean().float(), "sub(float32 (6,), float64 (6,)) -> float64", "broadcast"),
    (lambda p, t: F.mse_loss(p, t.float()), "expand((6, 1)) -> (6, 6)", "square root"),
])
def test_check_regression_loss_says_what_it_saw(fn, message, absent):
    with pytest.raises(CheckFailed) as info:
        checks.check_regression_loss(fn)
    assert message in str(info.value) and absent not in str(info.value)


def test_checks_sweep_with_the_seed():
    """Other seeds: other batch, image and class sizes (non-square images for prepare_batch), all passing the reference."""
    assert checks._batch_cases(0) != checks._batch_cases(1)
    assert any(h != w for n, h, w in checks._batch_cases(1)) and any(n == 1 for n, h, w in checks._batch_cases(5))
    for seed in range(6):
        checks.check_prepare_batch(prepare_batch, seed=seed)
        checks.check_build_model(build_model, seed=seed)
        checks.check_regression_loss(regression_loss, seed=seed)
