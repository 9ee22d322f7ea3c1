"""Lesson 05 tools: gradients.profile / ratio / table / draw_layers / Dashboard, and the checks against PyTorch itself."""
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
from trainclinic.checks import exploding_vanishing as checks

REFERENCE = textwrap.dedent('''
def grad_norms(model):
    layers = {}
    for name, module in model.named_modules():
        grads = [p.grad for p in module.parameters(recurse=False) if p.grad is not None]
        if grads:
            layers[name] = torch.cat([g.flatten() for g in grads]).norm().item()
    grads = [p.grad for p in model.parameters() if p.grad is not None]   # each parameter once, even a shared one
    total = torch.cat([g.flatten() for g in grads]).norm().item() if grads else 0.0
    return total, layers

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
    png = gradients.draw_layers(history, "t", max_norm=1.0)
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000
    assert gradients.draw_layers({"step": [], "loss": [], "grad_norm": [], "layers": {}})[:4] == b"\x89PNG"


def test_reference_norms_agree_with_clip_grad_norm():
    for seed in range(10):
        model = checks._random_model(seed)
        total, layers = checks.reference_norms(model)
        rel = 2e-2 if next(model.parameters()).dtype == torch.bfloat16 else 1e-5
        want = torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.grad is not None], float("inf"))
        assert math.isclose(total, want.item(), rel_tol=rel)
        own = [p for m in model.modules() for p in checks._own(m)]
        if len({id(p) for p in own}) == len(own):  # no shared weight: the layers add up to the total
            assert math.isclose(math.sqrt(sum(v * v for v in layers.values())), total, rel_tol=rel)


def test_checks_pass_the_reference(capsys):
    ns = namespace()
    for name, check in CHECKS.items():
        check(ns[name])
    out = capsys.readouterr().out
    assert out.count("✓") == 3


def load_variants():
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    from variants.exploding_vanishing import VARIANTS

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
                for seed in (0, 1, 2):  # as the hidden tests: some wrong fixes show only on other sizes
                    check(ns[answer], seed=seed)
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


def test_random_models_sweep_dtypes_shared_weights_root_parameters_and_zero_gradients():
    seen = set()
    for seed in range(48):
        model = checks._random_model(seed)
        seen.add(next(model.parameters()).dtype)
        own = [(n, m) for n, m in model.named_modules() if checks._own(m)]
        if any(n == "" for n, _ in own):
            seen.add("root")
        if len({id(p) for _, m in own for p in checks._own(m)}) < sum(len(checks._own(m)) for _, m in own):
            seen.add("shared")
        if any(all(float(p.grad.abs().sum()) == 0 for p in checks._own(m)) for _, m in own):
            seen.add("zero")
    assert {torch.float32, torch.float64, torch.bfloat16, "root", "shared", "zero"} <= seen


def test_build_deep_net_cases_vary_every_size():
    cases = [checks.deep_case(seed) for seed in range(50)]
    assert cases[0] == {"inputs": 8, "hidden": 32, "outputs": 3, "depth": 10}  # the lesson's
    for key in ("inputs", "hidden", "outputs", "depth"):
        assert len({c[key] for c in cases}) >= 3, key
    assert all(c["hidden"] not in (c["inputs"], c["outputs"]) for c in cases)


def test_python_floats_are_required_and_say_why():
    with pytest.raises(CheckFailed, match="holds its autograd graph"):
        checks.python_float(torch.ones(2, requires_grad=True).sum(), "the loss")
    with pytest.raises(CheckFailed, match="observed a 0-d tensor"):
        checks.python_float(torch.tensor(1.0), "the norm")
    with pytest.raises(CheckFailed, match="observed str"):
        checks.python_float("1.0", "the norm")
    assert checks.python_float(2, "n") == 2.0 and checks.python_float(0.5, "x") == 0.5


def test_failure_names_an_explosion_and_a_dead_net():
    exploded = {"step": [0, 1, 2], "loss": [1.0, 50.0, float("nan")], "grad_norm": [3.0, 900.0, float("inf")]}
    assert gradients.failure(exploded) == ("exploded: the gradient norm went from 3 to 900 in 2 steps, then it was "
                                           "non-finite at step 2 (loss nan)")
    model = tc.mlp(8, 16, 3, depth=2)
    with torch.no_grad():
        model[2].bias.fill_(-100.0)  # the second ReLU layer outputs 0 everywhere
    stuck = {"step": [0, 1], "loss": [1.2, 1.1], "grad_norm": [0.1, 0.01]}
    line = gradients.failure(stuck, guess=1.0986, model=model, inputs=batch()[0])
    assert line.startswith("not learning: loss 1.1 after 2 steps") and "ReLU layer 3 is dead" in line
    assert gradients.failure({"step": [0], "loss": [0.3], "grad_norm": [1.0]}, guess=1.0986) is None


def test_no_gradients_dtypes_and_eval_mode_nets():
    """A model with no gradients gives (0.0, {}); converting the model is caught; a net is trained as returned."""
    unguarded = ("def grad_norms(model):\n"
                 "    grads = [p.grad for p in model.parameters() if p.grad is not None]\n"
                 "    layers = {n: torch.cat([p.grad.flatten() for p in m.parameters(recurse=False) if p.grad is not None])"
                 ".norm().item() for n, m in model.named_modules() if any(p.grad is not None for p in m.parameters(recurse=False))}\n"
                 "    return torch.stack([g.norm() for g in grads]).norm().item(), layers\n")
    with pytest.raises(CheckFailed, match="no gradients at all"):
        checks.check_grad_norms(namespace([unguarded])["grad_norms"])
    upcast = ("_ref = grad_norms\n"
              "def grad_norms(model):\n"
              "    model.float()\n"
              "    return _ref(model)\n")
    with pytest.raises(CheckFailed, match="dtypes of the model's parameters and gradients"):
        checks.check_grad_norms(namespace([upcast])["grad_norms"])
    in_eval = ("def build_deep_net(inputs, hidden, outputs, depth):\n"
               "    layers, width = [], inputs\n"
               "    for _ in range(depth):\n"
               "        layers += [nn.Linear(width, hidden), nn.BatchNorm1d(hidden), nn.ReLU()]\n"
               "        width = hidden\n"
               "    return nn.Sequential(*layers, nn.Linear(width, outputs)).eval()\n")
    with pytest.raises(CheckFailed, match="came back in eval mode"):
        checks.check_build_deep_net(namespace([in_eval])["build_deep_net"])
    trained = in_eval.replace(".eval()", "")
    checks.check_build_deep_net(namespace([trained])["build_deep_net"])
