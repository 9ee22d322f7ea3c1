"""trainclinic.memory: the simulated OOM, the live-bytes tracker, measure/limit, and gpu_report's logic on the CPU."""
import types
import weakref

import pytest
import torch
from torch.utils._python_dispatch import _get_current_dispatch_mode

from trainclinic import memory
from trainclinic.models import mlp

MB = 2**20


def _step(model, x, y):
    model.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    return loss.item()


def _data(batch, features=32, classes=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, features, generator=g), torch.randint(0, classes, (batch,), generator=g)


def test_fmt_matches_cuda_format_size():
    assert memory.fmt(512) == "512 bytes"
    assert memory.fmt(1024) == "1024 bytes"
    assert memory.fmt(3 * 1024) == "3.00 KiB"
    assert memory.fmt(20 * MB) == "20.00 MiB"
    assert memory.fmt(int(1.5 * 2**30)) == "1.50 GiB"


def test_simulated_oom_has_cuda_message_shape_and_says_simulated():
    err = memory.simulated_oom(2 * MB, 8 * MB, 7 * MB)
    assert isinstance(err, torch.OutOfMemoryError) and isinstance(err, RuntimeError)
    text = str(err)
    assert text.startswith("SIMULATED on the cpu (no GPU here")
    for part in ("CUDA out of memory. Tried to allocate 2.00 MiB. GPU 0 has a total capacity of 8.00 MiB of which "
                 "1024.00 KiB is free. Including non-PyTorch memory, this process has 7.00 MiB memory in use. "
                 "Of the allocated memory 7.00 MiB is allocated by PyTorch, and 0 bytes is reserved by PyTorch but "
                 "unallocated.",):  # CUDA's own wording (c10/cuda/CUDACachingAllocator.cpp), values filled in
        assert part in text, part


def test_live_bytes_counts_new_storages_until_freed():
    before = torch.ones(1000)
    with memory.LiveBytes() as live:
        a = torch.zeros(256, 256)                 # 256 KiB
        assert live.allocated == 256 * 1024
        view = a[:10]                             # a view: no new storage
        before.add_(1)                            # in place on an older tensor: nothing new
        t = before.t() if before.dim() == 2 else before.view(10, 100)  # view of an older tensor
        assert live.allocated == 256 * 1024
        b = a * 2
        assert live.allocated == 512 * 1024
        del a
        assert live.allocated == 512 * 1024       # the view keeps a's storage alive
        del view, b
        assert live.allocated == 0
        assert live.peak == 512 * 1024
        del t
    assert _get_current_dispatch_mode() is None


def test_live_bytes_sees_backward_and_optimizer():
    model = mlp(inputs=32, hidden=64, outputs=4, depth=2)
    x, y = _data(64)
    grads = sum(p.numel() * p.element_size() for p in model.parameters())
    with memory.LiveBytes() as live:
        _step(model, x, y)
        assert live.allocated >= grads            # the gradients were created under the mode
        model.zero_grad(set_to_none=True)
        assert live.allocated == 0
    assert live.peak > grads


def test_peak_grows_with_batch_size():
    model = mlp(inputs=32, hidden=128, outputs=4, depth=3)
    peaks = []
    for batch in (64, 128, 256, 512):
        x, y = _data(batch)
        with memory.measure("cpu") as m:
            _step(model, x, y)
        assert m.simulated
        peaks.append(m.peak)
    assert peaks == sorted(peaks) and len(set(peaks)) == 4
    assert peaks[-1] > 3 * peaks[0]               # activations dominate: close to linear in the batch
    step = [b - a for a, b in zip(peaks, peaks[1:])]
    assert step[2] == pytest.approx(2 * step[1], rel=0.1)


def test_limit_raises_simulated_oom_and_cleans_up(capsys):
    model = mlp(inputs=32, hidden=128, outputs=4, depth=3)
    x, y = _data(512)
    with memory.measure("cpu") as m:
        _step(model, x, y)
    with pytest.raises(torch.OutOfMemoryError, match="SIMULATED") as info:
        with memory.limit("cpu", m.peak // 2):
            _step(model, x, y)
    assert "SIMULATED" in capsys.readouterr().out
    assert "Tried to allocate" in str(info.value)
    assert _get_current_dispatch_mode() is None
    with memory.limit("cpu", m.peak + 1, say=False):   # the same step fits a budget just above its peak
        _step(model, x, y)


def test_limit_drops_the_failed_steps_tensors():
    refs = []

    def step():
        big = torch.ones(64, 1024)
        refs.append(weakref.ref(big.untyped_storage()))
        return big * 2                                  # over budget

    with pytest.raises(torch.OutOfMemoryError) as info:
        with memory.limit("cpu", 300 * 1024, say=False):
            step()
    assert info.value.__traceback__ is not None       # the traceback is still held...
    assert refs[0]() is None                          # ...but no longer keeps `big` alive


def test_oom_in_backward_is_still_out_of_memory_error():
    model = mlp(inputs=32, hidden=128, outputs=4, depth=3)
    x, y = _data(512)
    with memory.LiveBytes() as live:
        loss = torch.nn.functional.cross_entropy(model(x), y)
    forward = live.peak
    with pytest.raises(torch.OutOfMemoryError, match="SIMULATED"):
        with memory.limit("cpu", forward + 64 * 1024, say=False):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()


def test_gpu_report_logic_on_cpu():
    r = memory.gpu_report("cpu")
    assert r["simulated"] is True
    assert r["oom_reproduced"] is True and "SIMULATED" in r["oom_message"]
    assert r["accumulated_fits"] is True
    assert r["memory_released"] is True
    assert r["peak_full_batch_bytes"] > r["budget_bytes"] > r["peak_accumulated_bytes"] > 0


class FakeCuda:
    """Stands in for torch.cuda's memory API, backed by a LiveBytes tracker: drives the CUDA branches on a CPU."""

    total = 2**30

    def __init__(self):
        self.live = memory.LiveBytes()
        self.fraction = 1.0
        self.fractions = []
        self.empty_cache_calls = 0

    def set_per_process_memory_fraction(self, fraction, device=None):
        self.fraction = fraction
        self.fractions.append(fraction)
        self.live.budget = None if fraction >= 1.0 else int(fraction * self.total)

    def get_per_process_memory_fraction(self, device=None):
        return self.fraction

    def memory_allocated(self, device=None):
        return self.live.allocated

    memory_reserved = memory_allocated

    def max_memory_allocated(self, device=None):
        return self.live.peak

    def reset_peak_memory_stats(self, device=None):
        self.live.reset_peak()

    def get_device_properties(self, device=None):
        return types.SimpleNamespace(total_memory=self.total, name="fake")

    def empty_cache(self):
        self.empty_cache_calls += 1

    def synchronize(self, device=None):
        pass


@pytest.fixture(params=["getter", "no getter"])
def fake_cuda(monkeypatch, request):
    """torch.cuda's memory API on a CPU; 'no getter' is torch < 2.5, which has no get_per_process_memory_fraction."""
    fake = FakeCuda()
    for name in ("set_per_process_memory_fraction", "memory_allocated", "memory_reserved", "max_memory_allocated",
                 "reset_peak_memory_stats", "get_device_properties", "empty_cache", "synchronize"):
        monkeypatch.setattr(torch.cuda, name, getattr(fake, name))
    if request.param == "getter":
        monkeypatch.setattr(torch.cuda, "get_per_process_memory_fraction", fake.get_per_process_memory_fraction,
                            raising=False)  # torch 2.4 lacks it: added here either way
    else:
        monkeypatch.delattr(torch.cuda, "get_per_process_memory_fraction", raising=False)
    monkeypatch.setattr(memory, "_FRACTIONS", {})
    monkeypatch.setattr(memory, "_cuda", lambda device: True)
    with fake.live:
        yield fake


def test_cuda_branch_of_limit_caps_and_restores(fake_cuda, capsys):
    model = mlp(inputs=32, hidden=128, outputs=4, depth=3)
    x, y = _data(512)
    with pytest.raises(torch.OutOfMemoryError):
        with memory.limit("cpu", 64 * 1024):
            _step(model, x, y)
    assert "set_per_process_memory_fraction" in capsys.readouterr().out
    assert fake_cuda.fractions[0] < 1.0 and fake_cuda.fraction == 1.0   # capped, then restored
    assert fake_cuda.empty_cache_calls >= 2


def test_cuda_branch_of_gpu_report(fake_cuda):
    r = memory.gpu_report("cpu", width=64, batch=256)
    assert r["simulated"] is False
    assert r["oom_reproduced"] and r["accumulated_fits"] and r["memory_released"] and r["fraction_restored"]
    assert r["peak_full_batch_bytes"] > r["peak_accumulated_bytes"] > 0
    assert fake_cuda.fraction == 1.0


def test_cuda_branch_of_limit_restores_an_earlier_cap(fake_cuda):
    memory._set_fraction(0.5, "cpu")                    # a cap set before (by trainclinic, or torch's getter knows)
    model = mlp(inputs=32, hidden=128, outputs=4, depth=3)
    x, y = _data(512)
    with pytest.raises(torch.OutOfMemoryError):
        with memory.limit("cpu", 64 * 1024, say=False):
            _step(model, x, y)
    assert fake_cuda.fractions[-2] < 0.5 and fake_cuda.fraction == 0.5   # capped lower, then back to 0.5


# ---- lesson 03's checks: accumulate_step, right and wrong

from torch import nn  # noqa: E402

from trainclinic.checks import CheckFailed  # noqa: E402
from trainclinic.checks import out_of_memory as checks  # noqa: E402

ALL_CHECKS = (checks.check_accumulated_grads, checks.check_one_step, checks.check_peak_memory)


def accumulate(model, batch, loss_fn, optimizer, micro_batches, *, divide=True, zero="before", step="after",
               loss=None, pieces=None, total_tensor=False, retain=False, full_forward=False, to_cpu=False):
    """The reference accumulation step, with switches for the classic mistakes."""
    x, y = batch
    loss_fn = loss or loss_fn
    if zero == "before":
        optimizer.zero_grad()
    reported = loss_fn(model(x), y).item() if full_forward else None
    total = 0.0
    n = pieces or micro_batches
    for xb, yb in zip(x.chunk(n), y.chunk(n)):
        if to_cpu:
            xb, yb = xb.cpu(), yb.cpu()
        if zero == "inside":
            optimizer.zero_grad()
        part = loss_fn(model(xb), yb) / (n if divide else 1)
        part.backward(retain_graph=retain)
        total = total + (part.detach() if total_tensor and not retain else part if retain else part.item())
        if step == "inside":
            optimizer.step()
    if step == "after":
        optimizer.step()
    if reported is not None:
        return reported
    return total.item() if torch.is_tensor(total) and not total_tensor else total


def test_out_of_memory_checks_pass_the_reference_on_a_sweep(capsys):
    for seed in range(6):
        for run in ALL_CHECKS:
            run(accumulate, seed=seed)
    out = capsys.readouterr()
    assert out.out.count("✓") == 18 and out.err == ""
    assert checks._cases(0)[0][:2] == (32, 4) and {c[1] for s in range(20) for c in checks._cases(s)} >= {1, 3, 5, 7, 8}


def test_out_of_memory_checks_fail_the_blank():
    def blank(*args):
        raise NotImplementedError()

    for run in ALL_CHECKS:
        with pytest.raises(CheckFailed, match="not written yet"):
            run(blank)


@pytest.mark.parametrize("options,check,message", [
    (dict(divide=False), "accumulated_grads", "4 times the full-batch gradients"),
    (dict(zero="inside"), "accumulated_grads", "the last micro-batch only"),
    (dict(zero="never"), "accumulated_grads", "plus the 0.5 that .grad held"),
    (dict(step="inside"), "accumulated_grads", "the first micro-batch's gradients / 4 only"),
    (dict(step="inside"), "one_step", "expected 1, observed 4"),
    (dict(loss=nn.CrossEntropyLoss()), "accumulated_grads", "plain cross-entropy, not of the loss_fn passed in"),
    (dict(pieces=4), "accumulated_grads", "of [4, 4, 4, 3] samples"),   # a hard-coded 4: uneven pieces show
    (dict(total_tensor=True), "one_step", "observed a tensor of shape ()"),
    (dict(full_forward=True), "peak_memory", "of [256, 64, 64, 64, 64] samples"),
    (dict(retain=True), "peak_memory", "kept growing"),
])
def test_out_of_memory_checks_say_what_they_saw(options, check, message):
    fn = lambda *args: accumulate(*args, **options)  # noqa: E731
    with pytest.raises(CheckFailed) as info:
        for seed in range(3):
            getattr(checks, f"check_{check}")(fn, seed=seed)
    assert message in str(info.value)


def test_peak_memory_sees_all_forwards_before_backward():
    def sum_then_backward(model, batch, loss_fn, optimizer, micro_batches):
        optimizer.zero_grad()
        total = sum(loss_fn(model(xb), yb) / micro_batches for xb, yb in zip(batch[0].chunk(micro_batches),
                                                                            batch[1].chunk(micro_batches)))
        total.backward()
        optimizer.step()
        return total.item()

    with pytest.raises(CheckFailed, match="all 4 forwards ran before the first backward"):
        checks.check_peak_memory(sum_then_backward)


def test_accumulated_grads_probes_the_device_on_a_simulated_gpu():
    if checks.pick_device().type != "cpu":
        pytest.skip("a real GPU is here: the check runs on it instead of the simulation")
    with pytest.raises(CheckFailed, match="simulated cuda:0") as info:
        checks.check_accumulated_grads(lambda *args: accumulate(*args, to_cpu=True))
    assert "device" in str(info.value)


@pytest.mark.parametrize("grad_mode", ["enable_grad", "set_grad_enabled"])
def test_accumulated_grads_survives_grad_mode_idioms(grad_mode, capsys):
    """Correct code that turns autograd on itself must pass, on the simulated cuda:0 too (no crash, no skip needed)."""
    def step(*args):
        ctx = torch.enable_grad() if grad_mode == "enable_grad" else torch.set_grad_enabled(True)
        with ctx:
            return accumulate(*args)

    for run in ALL_CHECKS:
        run(step)
    assert capsys.readouterr().out.count("✓") == 3
