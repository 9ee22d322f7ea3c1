"""Lesson 05 tools: gradients.profile / ratio / table / draw / Dashboard, and the checks against PyTorch itself."""
import math
import subprocess
import sys
import textwrap

import pytest
import torch
from torch import nn

import trainclinic as tc
from trainclinic import gradients
from trainclinic.checks import CheckFailed
from trainclinic.checks import gradients as checks

REFERENCE = textwrap.dedent('''
def grad_norms(model):
    layers = {}
    for name, module in model.named_modules():
        grads = [p.grad for p in module.parameters(recurse=False) if p.grad is not None]
        if grads:
            layers[name] = torch.cat([g.flatten() for g in grads]).norm().item()
    return sum(v ** 2 for v in layers.values()) ** 0.5, layers

def clipped_step(model, batch, loss_fn, optimizer, max_norm):
    inputs, targets = batch
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.item(), norm.item()

def build_deep_net(inputs, hidden, outputs, depth):
    model = tc.mlp(inputs=inputs, hidden=hidden, outputs=outputs, depth=depth, activation=nn.ReLU)
    for layer in model:
        if isinstance(layer, nn.Linear):
            nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
            nn.init.zeros_(layer.bias)
    return model
''')

CHECKS = {"grad_norms": checks.check_grad_norms, "clipped_step": checks.check_clipped_step,
          "build_deep_net": checks.check_build_deep_net}


def namespace(overrides=()):
    """The reference answers, with some replaced by a variant's sources, as the notebook would hold them."""
    ns = {"torch": torch, "nn": nn, "tc": tc}
    exec(REFERENCE, ns)
    for source in overrides:
        exec(source, ns)
    return ns


@pytest.fixture(autouse=True)
def static(monkeypatch):
    monkeypatch.setenv("NBGRADER_EXECUTION", "1")


def batch(n=64, seed=0):
    return tc.blobs(n=n, features=8, classes=3, seed=seed).tensors


def test_import_is_light():
    code = "import sys, trainclinic.gradients; print('matplotlib' in sys.modules, 'ipywidgets' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]


def test_profile_shows_vanishing_sigmoid_and_clears_gradients():
    model = tc.mlp(8, 32, 3, depth=10, activation=nn.Sigmoid)
    norms = gradients.profile(model, batch(), nn.CrossEntropyLoss())
    assert list(norms) == [str(i) for i in range(0, 21, 2)]  # the 11 Linear layers, first to last
    assert gradients.ratio(norms) < 1e-5  # many orders of magnitude
    assert all(p.grad is None for p in model.parameters())
    relu = tc.mlp(8, 32, 3, depth=10)
    for layer in relu:
        if isinstance(layer, nn.Linear):
            nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
    assert gradients.ratio(gradients.profile(relu, batch(), nn.CrossEntropyLoss())) > 1e-2


def test_profile_total_matches_pytorch():
    model = tc.mlp(8, 16, 3, depth=3)
    norms = gradients.profile(model, batch(), nn.CrossEntropyLoss())
    nn.functional.cross_entropy(model(batch()[0]), batch()[1]).backward()
    total = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf"))
    assert math.isclose(math.sqrt(sum(v * v for v in norms.values())), total.item(), rel_tol=1e-5)


def test_table_and_ratio():
    text = gradients.table({"a": 1e-8, "b": 1e-4, "c": 1.0})
    assert "first/last = 1.00e-08" in text and "8.0 orders of magnitude below" in text
    assert text.splitlines()[0].endswith(" #") and text.splitlines()[2].count("#") == 40
    assert "non-finite or zero" in gradients.table({"a": float("nan"), "b": 0.0, "c": 2.0})
    assert gradients.table({}).startswith("no gradients")
    assert math.isnan(gradients.ratio({"a": 1.0, "b": 0.0}))


def test_dashboard_records_pads_and_summarises(capsys):
    model = tc.mlp(8, 16, 3, depth=2)
    x, y = batch()
    with gradients.Dashboard("demo", every=2) as dash:
        assert not dash.live
        for step in range(3):
            model.zero_grad(set_to_none=True)
            if step == 1:
                model[0].requires_grad_(False)  # a layer without gradient this step
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            dash.update(step, loss.item(), model)
            model[0].requires_grad_(True)
        dash.update(3, float("nan"), total=float("inf"), layers={"0": float("nan"), "4": 1.0})
    h = dash.history
    assert h["step"] == [0, 1, 2, 3] and len(h["grad_norm"]) == 4
    assert set(h["layers"]) == {"0", "2", "4"} and all(len(v) == 4 for v in h["layers"].values())
    assert math.isnan(h["layers"]["0"][1]) and math.isnan(h["layers"]["2"][3])
    assert all(0 < v < math.inf for v in h["grad_norm"][:3]) and h["grad_norm"][3] == math.inf
    summary = dash.summary()
    assert "demo: 4 steps" in summary and "non-finite from step 3" in summary
    assert summary in capsys.readouterr().out  # static, no IPython: the summary is printed


def test_draw_returns_png_even_with_non_finite_values():
    history = {"step": [0, 1, 2], "loss": [1.0, 1e30, float("nan")], "grad_norm": [1.0, 1e6, float("inf")],
               "layers": {"0": [1e-8, 1e-7, float("nan")], "2": [1.0, 2.0, float("nan")]}}
    png = gradients.draw(history, "t", max_norm=1.0)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    assert gradients.draw({"step": [], "loss": [], "grad_norm": [], "layers": {}})[:4] == b"\x89PNG"


def test_reference_norms_agree_with_clip_grad_norm():
    for seed in range(10):
        model = checks._random_model(seed)
        total, layers = checks.reference_norms(model)
        want = torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.grad is not None], float("inf"))
        assert math.isclose(total, want.item(), rel_tol=1e-5)
        assert math.isclose(math.sqrt(sum(v * v for v in layers.values())), total, rel_tol=1e-5)


def test_checks_pass_the_reference(capsys):
    ns = namespace()
    for name, check in CHECKS.items():
        check(ns[name])
    out = capsys.readouterr().out
    assert out.count("✓") == 3


def load_variants():
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    from variants.lesson_05 import VARIANTS

    return VARIANTS


@pytest.mark.parametrize("name", sorted(load_variants()))
def test_variants_fail_the_right_check(name):
    spec = load_variants()[name]
    ns = namespace(spec["cells"].values())
    for answer, check in CHECKS.items():
        lost = spec["lost"].get(f"check_{answer}")
        if lost is None:
            check(ns[answer])
        else:
            with pytest.raises(CheckFailed, match=None) as info:
                check(ns[answer])
            assert lost in str(info.value)


def test_blank_answer_is_a_verdict():
    def blank(*args):
        raise NotImplementedError()

    for check in CHECKS.values():
        with pytest.raises(CheckFailed, match="not written yet"):
            check(blank)


def test_checks_leave_thread_count_and_rng_alone():
    threads = torch.get_num_threads()
    torch.manual_seed(123)
    expected = torch.rand(1)
    torch.manual_seed(123)
    checks.check_clipped_step(namespace()["clipped_step"])
    assert torch.get_num_threads() == threads
    assert torch.equal(torch.rand(1), expected)
