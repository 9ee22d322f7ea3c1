"""Pick the device, describe it, find tensors on the wrong one, and simulate a GPU where none is present."""
import contextlib
import copy
import os
import platform
import warnings

import torch
from torch import nn

__all__ = ["pick_device", "banner", "accelerator", "SimulatedCuda", "strays", "is_simulated", "simulation_limit"]

_FAKE_CUDA = torch.device("cuda", 0)


def _mps_available():
    mps = getattr(torch.backends, "mps", None)
    return bool(mps and mps.is_available())


def pick_device(name=None):
    """Return cuda, else mps, else cpu; `name` or env TRAINCLINIC_DEVICE overrides."""
    name = name or os.environ.get("TRAINCLINIC_DEVICE", "").strip()
    if name:
        dev = torch.device(name)
        if dev.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(f"device {name!r} was asked for, but torch.cuda.is_available() is False on this machine")
        if dev.type == "mps" and not _mps_available():
            raise RuntimeError(f"device {name!r} was asked for, but the MPS backend is not available on this machine")
    elif torch.cuda.is_available():
        dev = torch.device("cuda")
    elif _mps_available():
        dev = torch.device("mps")
    else:
        dev = torch.device("cpu")
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def banner(device, show=True):
    """Print (and return) one paragraph naming the device, its memory and the versions."""
    versions = f"torch {torch.__version__}, python {platform.python_version()}"
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        text = f"trainclinic: {device} = {props.name}, {props.total_memory / 2**30:.1f} GiB; {versions}."
    elif device.type == "mps":
        text = f"trainclinic: {device} = Apple GPU (Metal); {versions}."
    else:
        text = (
            f"trainclinic: cpu, no GPU found; {versions}.\n"
            "The GPU-only failures in this course are SIMULATED here with PyTorch's own machinery "
            "(FakeTensorMode, a memory budget) and every simulated output says so.\n"
            "For the real thing in Colab: Runtime > Change runtime type > a GPU, then run all cells again."
        )
    if show:
        print(text)
    return text


def is_simulated(t):
    """True when `t` is a fake tensor made by a simulation (it holds no data)."""
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(t, FakeTensor)


def simulation_limit(exc):
    """True when `exc` marks what FakeTensorMode cannot simulate (data-dependent ops), not a bug in the code run."""
    from torch._subclasses import fake_tensor

    limits = (fake_tensor.DynamicOutputShapeException, fake_tensor.DataDependentOutputException)
    return isinstance(exc, limits) or "not linked with support for cuda" in str(exc)


def _fake_item(real):
    def item(self):
        return float("nan") if is_simulated(self) else real(self)

    return item


def _cuda0(arg):
    """'cuda' / torch.device('cuda') -> cuda:0 (a CPU-only build cannot ask CUDA for its current device)."""
    if isinstance(arg, (str, torch.device)):
        dev = torch.device(arg)
        if dev.type == "cuda" and dev.index is None:
            return _FAKE_CUDA
    return arg


def _patched_to(real):
    def to(self, *args, **kwargs):
        args = tuple(_cuda0(a) for a in args)
        if "device" in kwargs:
            kwargs["device"] = _cuda0(kwargs["device"])
        return real(self, *args, **kwargs)

    return to


def _cuda(self, device=None, non_blocking=False, **kwargs):
    index = device if isinstance(device, int) else (torch.device(device).index if device is not None else 0)
    return self.to(torch.device("cuda", index or 0), non_blocking=non_blocking)


def _new_tensor(self, data, dtype=None, device=None, requires_grad=False, **kwargs):
    dtype, device = dtype or self.dtype, _cuda0(device) if device is not None else self.device
    if torch.is_tensor(data):
        return data.detach().clone().to(device=device, dtype=dtype).requires_grad_(requires_grad)
    return torch.tensor(data, dtype=dtype, device=device, requires_grad=requires_grad)


class SimulatedCuda:
    """A fake cuda:0 built on PyTorch's FakeTensorMode: shapes, dtypes and devices are real, data is not.

    Forward only. Autograd on a fake CUDA tensor aborts the process, so inside this context gradients
    are off, `Tensor.backward` only counts its calls, and `.item()` on a fake tensor gives nan. A CPU-only
    build cannot look up CUDA's current device, so `.cuda()`, `.to("cuda")` and `new_tensor` are routed to
    cuda:0 explicitly. Data-dependent ops (bincount, nonzero, `if loss > 0`) cannot be simulated: see
    `simulation_limit`.
    """

    device = _FAKE_CUDA
    active = 0  # how many simulations are open (checks tell simulation limits from learner bugs by it)

    def __init__(self, say=True):
        self.say = say
        self.backward_calls = 0
        self._stack = None

    def __enter__(self):
        from torch._subclasses.fake_tensor import FakeTensorMode

        if self.say:
            print(
                "SIMULATED cuda:0 (no GPU here): this runs under PyTorch's FakeTensorMode, which checks shapes, "
                "dtypes and devices like a GPU would. Any error below is PyTorch's own."
            )
        self.mode = FakeTensorMode(allow_non_fake_inputs=True)
        stack = contextlib.ExitStack()
        patches = {
            "backward": self._count_backward,
            "item": _fake_item(torch.Tensor.item),
            "__float__": _fake_item(torch.Tensor.__float__),
            "to": _patched_to(torch.Tensor.to),
            "cuda": _cuda,
            "new_tensor": _new_tensor,
        }
        for name, fn in patches.items():
            stack.callback(setattr, torch.Tensor, name, getattr(torch.Tensor, name))
            setattr(torch.Tensor, name, fn)
        stack.enter_context(warnings.catch_warnings())
        warnings.filterwarnings("ignore", message="Accessing the data pointer of FakeTensor")  # torch-internal
        stack.enter_context(torch.no_grad())
        stack.enter_context(self.mode)
        SimulatedCuda.active += 1
        stack.callback(setattr, SimulatedCuda, "active", SimulatedCuda.active - 1)
        self._stack = stack
        return self

    def __exit__(self, *exc):
        self._stack.close()
        return False

    def _count_backward(self, *args, **kwargs):
        self.backward_calls += 1

    def tensor(self, t):
        """A fake copy of `t` on cuda:0."""
        return t.to(self.device)

    def model(self, module):
        """A fake copy of `module` whose parameters and buffers sit on cuda:0; `.to()` on it is a no-op."""
        from torch.utils._python_dispatch import _disable_current_modes

        with _disable_current_modes():
            fake = copy.deepcopy(module)  # real tensors can only be copied outside the fake mode
        return self._finish_model(fake)

    def _finish_model(self, fake):
        for mod in fake.modules():
            for key, p in mod._parameters.items():
                if p is not None:
                    mod._parameters[key] = nn.Parameter(
                        torch.empty(p.shape, dtype=p.dtype, device=self.device), requires_grad=p.requires_grad
                    )
            for key, b in mod._buffers.items():
                if b is not None:
                    mod._buffers[key] = torch.empty(b.shape, dtype=b.dtype, device=self.device)
        fake.to = lambda *args, **kwargs: fake
        fake.cuda = lambda *args, **kwargs: fake
        return fake


class _Real:
    """The present accelerator (or cpu), with the same small interface as SimulatedCuda."""

    def __init__(self, device):
        self.device = device

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def tensor(self, t):
        return t.to(self.device)

    def model(self, module):
        return module.to(self.device)


def accelerator(device, say=True):
    """Context giving the real GPU when `device` is one, else a SimulatedCuda that says so."""
    if device.type in ("cuda", "mps"):
        return _Real(device)
    return SimulatedCuda(say=say)


def strays(device, model=None, show=True, **tensors):
    """List the parameters, buffers and named tensors that are not on `device`; print a table."""
    device = torch.device(device)

    def off(t):
        return t.device.type != device.type or (device.index is not None and t.device.index not in (None, device.index))

    rows = []
    if model is not None:
        rows += [(f"parameter {n}", p.device) for n, p in model.named_parameters() if off(p)]
        rows += [(f"buffer {n}", b.device) for n, b in model.named_buffers() if off(b)]
    rows += [(f"tensor {n}", t.device) for n, t in tensors.items() if torch.is_tensor(t) and off(t)]
    if show:
        if rows:
            print(f"{len(rows)} stray(s): expected everything on {device}")
            for name, dev in rows:
                print(f"  {name:<40} on {dev}")
        else:
            print(f"no strays: everything is on {device}")
    return rows
