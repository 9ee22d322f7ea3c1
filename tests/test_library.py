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
    from torch._subclasses import fake_tensor

    text = str(err.value)
    assert "cuda:0" in text and "cpu" in text
    if hasattr(fake_tensor, "FakeTensorDeviceMismatchError"):  # torch >= 2.13
        assert isinstance(err.value, fake_tensor.FakeTensorDeviceMismatchError)  # raised by PyTorch, not by us
        assert "Expected all tensors to be on the same device, but found at least two devices" in text
    else:  # torch <= 2.12: FakeTensorMode's own wording
        assert "Unhandled FakeTensor Device Propagation for aten." in text and "found two different devices" in text
    assert any(key in text for key in tc.device.DEVICE_MISMATCH)
    hint = next(h for key, h in checks.HINTS.items() if key in text)
    assert "different devices" in hint


@pytest.mark.parametrize("text", [
    "Expected all tensors to be on the same device, but got mat1 is on cpu, different from other tensors on cuda:0 "
    "(when checking argument in method wrapper_CUDA_addmm)",  # a real GPU, recent torch
    "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu! (when checking "
    "argument for argument mat1 in method wrapper_CUDA_addmm)",  # a real GPU, torch 2.4
    "Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!",  # sim, 2.13
    "Unhandled FakeTensor Device Propagation for aten.mm.default, found two different devices cpu, cuda:0",  # sim, 2.12
])
def test_every_device_wording_gets_the_device_hint(text):
    def mismatch():
        raise RuntimeError(text)

    with pytest.raises(CheckFailed, match=r"(?s)raised RuntimeError: .*Hint: two tensors of one operation are on "
                                          r"different devices"):
        checks.call(mismatch)


@pytest.mark.parametrize("text", [
    "PyTorch is not linked with support for cuda devices", "Torch not compiled with CUDA enabled",
    "Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a driver",
    "CUDA error: CUDA driver version is insufficient for CUDA runtime version",
])
def test_simulation_limit_knows_every_builds_words_for_the_cuda_runtime(text):
    assert tc.device.simulation_limit(RuntimeError(text))
    assert not tc.device.simulation_limit(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))


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


# Learner code the simulated cuda:0 must run without a real device move (CPU-only builds and CUDA builds without a
# driver alike) and without ever aborting the process, whatever grad mode it sets. Each runs in its own process.
TRAINING_IDIOMS = {
    "plain": "loss = F.cross_entropy(model(x.to(dev)), y.to(dev)); loss.backward(); opt.step()",
    "enable_grad": "with torch.enable_grad():\n    loss = F.cross_entropy(model(x.cuda()), y.cuda()); loss.backward()\nopt.step()",
    "set_grad_enabled": "model.train()\nwith torch.set_grad_enabled(model.training):\n"
                        "    loss = F.cross_entropy(model(x.to('cuda')), y.to(device='cuda')); loss.backward(); opt.step()",
    "grad_on_globally": "torch.set_grad_enabled(True)\nloss = F.cross_entropy(model(x.to(dev)), y.to(dev))\n"
                        "torch.autograd.backward(loss); opt.step()",
    "closure": "def closure():\n    opt.zero_grad(); l = F.cross_entropy(model(x.to(dev)), y.to(dev)); l.backward(); return l\n"
               "loss = opt.step(closure)",
    "autograd_grad": "with torch.enable_grad():\n    w = torch.zeros(3, device=dev, requires_grad=True)\n"
                     "    loss = (model(x.to(dev)) * w).sum(); g, = torch.autograd.grad(loss, [w])\nassert g.device == dev",
    "new_model_inside": "m = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3)).to(dev)\n"
                        "o = torch.optim.AdamW(m.parameters())\nwith torch.enable_grad():\n"
                        "    loss = F.cross_entropy(m(x.to(dev)), y.to(dev)); loss.backward()\n"
                        "torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0); o.step(); m.eval()\nm(x.to(dev))",
    "creating_and_indexing": "w = torch.as_tensor(x, device=dev); v = x.to(w); b = torch.empty(6, 4, device=dev).copy_(x)\n"
                             "z = w.new_tensor([1.0, 2.0]); w[0] = 1.0; i = w[0, 1:]; p = x.pin_memory().to(dev)\n"
                             "loss = model(b).sum()",
    "numbers_out": "out = model(x.to(dev)); loss = out.sum()\n"
                   "n = [float(loss.detach().cpu().numpy()), out.argmax(1).tolist(), int(out.argmax(1)[0]), loss.item()]",
}


def test_simulated_training_idioms_never_abort():
    """All idioms in one child process (autograd on fake cuda would kill it): each prints its name when it survived."""
    script = """
import torch, trainclinic as tc
from torch import nn
from torch.nn import functional as F
x, y = torch.randn(6, 4), torch.tensor([0, 1, 2, 0, 1, 2])
for name, code in IDIOMS.items():
    print("start", name, flush=True)
    with tc.SimulatedCuda(say=False) as sim:
        dev = sim.device
        model = sim.model(tc.mlp(inputs=4, hidden=8, outputs=3))
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        exec(code)
    assert torch.is_grad_enabled(), name
    print("survived", name, flush=True)
"""
    env = dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(__file__), "..", "src"), OMP_NUM_THREADS="1")
    proc = subprocess.run([sys.executable, "-c", f"IDIOMS = {TRAINING_IDIOMS!r}\n" + script], capture_output=True,
                          text=True, env=env, timeout=300)
    survived = [line.split()[1] for line in proc.stdout.splitlines() if line.startswith("survived")]
    assert proc.returncode == 0 and survived == list(TRAINING_IDIOMS), (proc.returncode, proc.stdout[-500:],
                                                                       proc.stderr[-1500:])


def test_a_real_module_moved_inside_the_simulation_gets_its_tensors_back():
    model = tc.mlp(inputs=4, hidden=8, outputs=3)
    params = list(model.parameters())
    values = [p.detach().clone() for p in params]
    with tc.SimulatedCuda(say=False) as sim:
        model.to(sim.device)  # learner code moving a real model
        assert next(model.parameters()).device == sim.device
        model(torch.randn(2, 4).to(sim.device))
        moved = sim.model(model)
        assert all(p.device == sim.device for p in moved.parameters())
    assert all(p is q and torch.equal(p, v) for p, q, v in zip(model.parameters(), params, values))
    assert model(torch.randn(2, 4)).shape == (2, 3)


def test_sim_model_leaves_the_real_module_alone():
    model = tc.mlp(inputs=4, hidden=8, outputs=3)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    with tc.SimulatedCuda(say=False) as sim:
        fake = sim.model(model)
        fake.to(sim.device)  # a no-op: already there
        fake.double()
        assert next(fake.parameters()).dtype == torch.float64 and next(fake.parameters()).device == sim.device
        fake.cpu()  # a fake model moved back to the CPU meets a cuda batch: PyTorch's own error
        with pytest.raises(RuntimeError, match="|".join(tc.device.DEVICE_MISMATCH)):
            fake.float()(torch.randn(2, 4).to(sim.device))
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in state.items())
    assert all(p.device.type == "cpu" and p.dtype == torch.float32 for p in model.parameters())


def test_gpu_checkpoint_is_what_a_gpu_machine_saves():
    import io

    state = tc.mlp(inputs=4, hidden=8, outputs=3).state_dict()
    blob = tc.device.gpu_checkpoint(state)
    loaded = torch.load(io.BytesIO(blob), weights_only=True, map_location="cpu")
    assert all(torch.equal(loaded[k], v) for k, v in state.items())
    assert torch.serialization.location_tag(torch.zeros(1).untyped_storage()) == "cpu"  # restored
    if not torch.cuda.is_available():
        with pytest.raises(Exception, match="Attempting to deserialize object on a CUDA device"):
            torch.load(io.BytesIO(blob), weights_only=True)


def test_accelerator_is_real_on_gpu_and_simulated_on_cpu():
    assert isinstance(tc.accelerator(torch.device("cpu"), say=False), tc.SimulatedCuda)
    assert not isinstance(tc.accelerator(torch.device("cuda", 0), say=False), tc.SimulatedCuda)


def test_strays_lists_what_is_elsewhere(capsys):
    model = tc.mlp(inputs=4, hidden=8, outputs=2)
    rows = tc.strays(torch.device("cpu"), model, x=torch.zeros(2))
    assert rows == [] and "no strays" in capsys.readouterr().out
    rows = tc.strays(torch.device("cuda", 0), model, x=torch.zeros(2), note="not a tensor")
    assert len(rows) == 2 * 3 + 1 and rows[-1][0] == "tensor x"
    with tc.accelerator(torch.device("cpu"), say=False) as gpu:  # the lesson's diagnose cell: only the batch strays
        moved = gpu.model(model)
        rows = tc.strays(gpu.device, moved, x=torch.zeros(2), y=gpu.tensor(torch.zeros(2)))
    assert [name for name, _ in rows] == ["tensor x"]


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


def test_call_frees_what_failed_learner_code_held():
    """A learner's error must not keep their frames alive: a DataLoader iterator whose worker_init_fn raised stops
    its workers at once, not at the next garbage collection (which waits 5 s per worker)."""
    import gc
    import multiprocessing

    import numpy as np
    from torch.utils.data import DataLoader

    def seed_numpy(worker_id):
        np.random.seed(torch.utils.data.get_worker_info().seed)  # 64 bits: ValueError in the worker

    def first_batch():
        return next(iter(DataLoader(list(range(8)), batch_size=2, num_workers=2, worker_init_fn=seed_numpy)))

    gc.disable()
    try:
        with pytest.raises(CheckFailed, match="Caught ValueError in DataLoader worker process"):
            checks.call(first_batch)
        alive = multiprocessing.active_children()
    finally:
        gc.enable()
    assert alive == [], f"the failed loader's workers are still running: {alive}"


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
        counts = torch.bincount(targets, minlength=logits.shape[1]).double()  # data-dependent: not simulable
        counts = counts * 0 + torch.as_tensor(class_counts, dtype=torch.float64, device=logits.device)
        weight = (counts.sum() / (len(class_counts) * counts)).to(logits.dtype)
        return nn.functional.cross_entropy(logits, targets, weight=weight)

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


def test_seed_everything_repeats_draws_and_leaves_the_environment_alone():
    """Seeding repeats python, numpy and torch draws; it sets no PYTHONHASHSEED (which a running process ignores)."""
    import random

    import numpy as np

    before = dict(os.environ)
    draws = []
    for _ in range(2):
        assert tc.seed_everything(7) == 7
        draws.append((random.random(), float(np.random.rand()), torch.rand(3).tolist()))
    assert draws[0] == draws[1]
    assert dict(os.environ) == before
