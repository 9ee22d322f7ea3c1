"""The helper library: device choice, the GPU simulation, data, monitors, plots and the check framework."""
import os
import subprocess
import sys

import pytest
import torch
from torch import nn

import trainclinic as tc
from trainclinic import checks
from trainclinic.checks import CheckFailed


def test_pick_device_cpu_here_and_env_override(monkeypatch):
    monkeypatch.delenv("TRAINCLINIC_DEVICE", raising=False)
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert tc.pick_device().type in (expected, "mps")
    monkeypatch.setenv("TRAINCLINIC_DEVICE", "cpu")
    assert tc.pick_device() == torch.device("cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="asserts the refusal on a machine without CUDA")
def test_pick_device_refuses_cuda_without_gpu(monkeypatch):
    monkeypatch.setenv("TRAINCLINIC_DEVICE", "cuda")
    with pytest.raises(RuntimeError, match="torch.cuda.is_available"):
        tc.pick_device()


def test_banner_names_device_and_simulation(capsys):
    text = tc.banner(torch.device("cpu"))
    assert torch.__version__ in text and "SIMULATED" in text and "Runtime > Change runtime type" in text
    assert capsys.readouterr().out.strip() == text


def test_simulation_raises_pytorchs_own_device_error():
    model = tc.mlp(inputs=4, hidden=8, outputs=2)
    x = torch.randn(3, 4)
    with pytest.raises(RuntimeError) as err:
        with tc.SimulatedCuda(say=False) as sim:
            sim.model(model)(x)
    from torch._subclasses.fake_tensor import FakeTensorDeviceMismatchError

    assert isinstance(err.value, FakeTensorDeviceMismatchError)  # raised by PyTorch, not by us
    assert "Expected all tensors to be on the same device, but found at least two devices" in str(err.value)
    assert "cuda:0" in str(err.value) and "cpu" in str(err.value)


def test_simulation_says_so_and_restores_autograd(capsys):
    before = torch.Tensor.backward
    with tc.SimulatedCuda() as sim:
        fake = sim.model(tc.mlp(inputs=4, hidden=8, outputs=2))
        out = fake(sim.tensor(torch.randn(3, 4)))
        assert out.device == torch.device("cuda", 0) and tc.device.is_simulated(out)
        out.sum().backward()  # counted, never run: autograd on a fake cuda tensor aborts the process
        assert sim.backward_calls == 1 and out.sum().item() != out.sum().item()  # nan
    assert "SIMULATED cuda:0" in capsys.readouterr().out
    assert torch.Tensor.backward is before and torch.is_grad_enabled()
    loss = (tc.mlp(inputs=4, hidden=8, outputs=2)(torch.randn(3, 4)) ** 2).sum()
    loss.backward()  # real autograd works again


def test_accelerator_is_real_on_gpu_and_simulated_on_cpu():
    assert isinstance(tc.accelerator(torch.device("cpu"), say=False), tc.SimulatedCuda)
    assert not isinstance(tc.accelerator(torch.device("cuda", 0), say=False), tc.SimulatedCuda)


def test_strays_lists_what_is_elsewhere(capsys):
    model = tc.mlp(inputs=4, hidden=8, outputs=2)
    rows = tc.strays(torch.device("cpu"), model, x=torch.zeros(2))
    assert rows == [] and "no strays" in capsys.readouterr().out
    rows = tc.strays(torch.device("cuda", 0), model, x=torch.zeros(2), note="not a tensor")
    assert len(rows) == 2 * 3 + 1 and rows[-1][0] == "tensor x"


def test_data_is_seeded_and_shaped():
    a, b = tc.blobs(n=20, seed=1).tensors, tc.blobs(n=20, seed=1).tensors
    assert torch.equal(a[0], b[0]) and a[0].shape == (20, 8) and a[1].dtype == torch.int64
    x, y = tc.regression(n=10, features=3).tensors
    assert x.shape == (10, 3) and y.shape == (10, 1)
    first = [y for _, y in tc.loader(tc.blobs(n=20), batch_size=5, seed=3)]
    again = [y for _, y in tc.loader(tc.blobs(n=20), batch_size=5, seed=3)]
    assert all(torch.equal(p, q) for p, q in zip(first, again))


def test_mlp_is_seeded_and_leaves_global_rng_alone():
    torch.manual_seed(123)
    state = torch.get_rng_state()
    m1, m2 = tc.mlp(seed=4), tc.mlp(seed=4)
    assert torch.equal(torch.get_rng_state(), state)
    assert all(torch.equal(p, q) for p, q in zip(m1.parameters(), m2.parameters()))


def test_grad_norm_matches_pytorch():
    model = tc.mlp(inputs=4, hidden=8, outputs=2, depth=3)
    assert tc.grad_norm(model) == 0.0
    model(torch.randn(5, 4)).pow(2).sum().backward()
    reference = nn.utils.clip_grad_norm_(model.parameters(), float("inf"))
    assert tc.grad_norm(model) == pytest.approx(float(reference), rel=1e-6)
    per_layer = tc.layer_grad_norms(model)
    assert len(per_layer) == 4
    assert sum(v**2 for v in per_layer.values()) ** 0.5 == pytest.approx(float(reference), rel=1e-5)


def test_checks_print_one_line_and_capture_warnings(capsys):
    @checks.check("demo")
    def check_demo(fn):
        checks.call(fn)
        return "it ran"

    def noisy():
        import warnings

        warnings.warn("a learner-triggered warning")
        print("to stderr", file=sys.stderr)

    check_demo(noisy)
    out = capsys.readouterr()
    assert out.out == "✓ demo: it ran\n" and out.err == ""


def test_call_turns_learner_errors_into_verdicts():
    def blank():
        raise NotImplementedError

    def broken():
        return torch.zeros(2, 3) @ torch.zeros(4, 5)

    with pytest.raises(CheckFailed, match="not written yet"):
        checks.call(blank)
    with pytest.raises(CheckFailed, match=r"(?s)raised RuntimeError: mat1 and mat2 shapes cannot be multiplied.*Hint"):
        checks.call(broken)
    with pytest.raises(CheckFailed, match="to be a function"):
        checks.call(None, name="train_step")
    assert issubclass(CheckFailed, AssertionError)


def test_checks_do_not_disturb_the_learners_rng():
    @checks.check("rng")
    def check_rng():
        torch.randn(100)
        return "drew numbers"

    torch.manual_seed(0)
    expected = torch.randn(3)
    torch.manual_seed(0)
    check_rng()
    assert torch.equal(torch.randn(3), expected)


def test_expect_and_close():
    checks.expect(True, "x", "1", "1")
    with pytest.raises(CheckFailed, match=r"the loss: expected 1\.0, observed 2\.0\.\nHint: h"):
        checks.expect(False, "the loss", "1.0", "2.0", "h")
    assert checks.close(torch.tensor([1.0]), [1.0 + 1e-7]) and not checks.close(torch.zeros(2), torch.zeros(3))


def test_liveplot_static_without_frontend(capsys):
    with tc.LivePlot("demo") as plot:
        for step in range(5):
            plot.update(step, 1.0 / (step + 1), 0.5)
    assert not plot.live and "5 steps, loss 1 -> 0.2" in capsys.readouterr().out


def test_draw_marks_non_finite_and_renders_png():
    png = tc.plots.draw({"step": [0, 1, 2, 3], "loss": [1.0, 10.0, float("inf"), float("nan")], "grad_norm": [1, 2, 3, 4]})
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000


def test_explore_runs_once_statically(monkeypatch):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    seen = []

    def run(lr, batch):
        seen.append((lr, batch))
        return {"loss": [1.0, 0.5]}

    tc.explore(run, lr=("log", 1e-3, 1.0, 0.1), batch=("int", 1, 64, 8))
    assert seen == [(0.1, 8)]


def test_import_needs_neither_ipywidgets_nor_matplotlib():
    code = (
        "import sys; sys.modules['ipywidgets'] = None; sys.modules['matplotlib'] = None\n"
        "import trainclinic as tc\n"
        "assert 'matplotlib.pyplot' not in sys.modules\n"
        "p = tc.LivePlot('x'); p.update(0, 1.0); print(p.summary())"
    )
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "1 steps" in proc.stdout


def test_every_module_declares_all():
    import importlib
    import pkgutil

    for info in pkgutil.walk_packages(tc.__path__, "trainclinic."):
        mod = importlib.import_module(info.name)
        assert hasattr(mod, "__all__"), f"{info.name} has no __all__"
        for name in mod.__all__:
            assert hasattr(mod, name), f"{info.name}.__all__ names missing {name}"


def test_simulation_routes_cuda_spellings_to_cuda0():
    """A CPU-only build cannot ask CUDA for its current device: the simulation must still accept the usual spellings."""
    with tc.SimulatedCuda(say=False) as sim:
        logits = sim.tensor(torch.randn(4, 3))
        made = [logits.new_tensor([1.0, 2.0, 3.0]), torch.zeros(3).to("cuda"), torch.zeros(3).cuda(),
                torch.zeros(3).to(device="cuda"), torch.as_tensor([1, 2], device=logits.device)]
        assert all(t.device == torch.device("cuda", 0) for t in made)
    assert torch.zeros(1).new_tensor([2.0]).device.type == "cpu"  # restored


def test_simulation_limits_skip_the_probe_instead_of_failing_the_learner():
    from trainclinic.checks import device_mismatch

    def class_weighted_loss(logits, targets, class_counts):
        counts = torch.bincount(targets, minlength=logits.shape[1]).to(logits.dtype)  # data-dependent: not simulable
        counts = counts * 0 + torch.as_tensor(class_counts, dtype=logits.dtype, device=logits.device)
        return nn.functional.cross_entropy(logits, targets, weight=counts.sum() / (len(class_counts) * counts))

    import io
    from contextlib import redirect_stdout

    out = io.StringIO()
    with redirect_stdout(out):
        device_mismatch.check_class_weighted_loss(class_weighted_loss)
    assert "device check was skipped: DynamicOutputShapeException" in out.getvalue()


def test_liveplot_keeps_grad_norms_aligned_when_some_are_missing():
    plot = tc.LivePlot("gaps")
    plot.update(0, 1.0)
    plot.update(1, 0.5, 2.0)
    assert plot.history["grad_norm"] == [None, 2.0] and "last grad norm 2" in plot.summary()
    assert tc.plots.draw(plot.history)[:4] == b"\x89PNG"
    no_norms = tc.LivePlot("none")
    no_norms.update(0, 1.0)
    assert tc.plots.draw(no_norms.history)[:4] == b"\x89PNG"
