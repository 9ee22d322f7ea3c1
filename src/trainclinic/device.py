"""Pick the device, describe it, find tensors on the wrong one, and simulate a GPU where none is present."""
import contextlib
import copy
import os
import platform
import warnings

import torch
from torch import nn

__all__ = [
    "pick_device", "banner", "accelerator", "SimulatedCuda", "strays", "is_simulated", "simulation_limit",
    "gpu_checkpoint", "DEVICE_MISMATCH", "default_device", "put_defaults",
]

_FAKE_CUDA = torch.device("cuda", 0)

# What torch 2.4-2.13 says when two tensors of one operation sit on different devices: on a real GPU, the
# dispatcher's device check ("... but got mat1 is on cpu, different from other tensors on cuda:0 ...", or before
# that "... but found at least two devices, cuda:0 and cpu! (when checking argument for argument mat1 ...)") and
# TensorIterator ("... found at least two devices ..."); in the simulation, FakeTensorMode: torch >= 2.13 raises
# FakeTensorDeviceMismatchError with the same first words, older torch "Unhandled FakeTensor Device Propagation for
# aten.mm.default, found two different devices cpu, cuda:0".
DEVICE_MISMATCH = ("Expected all tensors to be on the same device", "found two different devices")

# What the simulation cannot run, in every build's words: data-dependent ops (FakeTensorMode's own exceptions),
# and code that asks the real CUDA runtime for something (a CPU-only build, or a CUDA build without a driver).
_CUDA_RUNTIME = (
    "not linked with support for cuda",  # CPU-only build, torch >= 2.5 or so
    "Torch not compiled with CUDA enabled",  # CPU-only build: torch.cuda.* (an AssertionError)
    "Found no NVIDIA driver",  # CUDA build, no driver (Colab's CPU runtime)
    "CUDA driver version is insufficient",  # CUDA build, no driver, some calls
    "No CUDA GPUs are available",
    "no CUDA-capable device is detected",
    "Cannot access accelerator device when none is available",
)


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
    """True when `exc` marks what the simulated GPU cannot run (data-dependent ops, the real CUDA runtime), not a bug."""
    from torch._subclasses import fake_tensor

    limits = tuple(getattr(fake_tensor, name) for name in (
        "DynamicOutputShapeException", "DataDependentOutputException", "UnsupportedOperatorException",
        "UnsupportedFakeTensorException") if hasattr(fake_tensor, name))
    text = str(exc)
    return isinstance(exc, limits) or any(s in text for s in _CUDA_RUNTIME)


def _cuda0(arg):
    """'cuda' / torch.device('cuda') -> cuda:0 (the simulation must not ask CUDA for its current device)."""
    if isinstance(arg, (str, torch.device)):
        try:
            dev = torch.device(arg)
        except (RuntimeError, TypeError):
            return arg
        if dev.type == "cuda" and dev.index is None:
            return _FAKE_CUDA
    return arg


def _placeholder(t):
    """What `.item()` of a fake tensor gives: nan for floats, 0 for integers, False for bools (data is not simulated)."""
    if t.dtype == torch.bool:
        return False
    if t.dtype.is_floating_point or t.dtype.is_complex:
        return float("nan")
    return 0


def _placeholder_array(t):
    """What `.numpy()` of a fake tensor gives: an array of its shape filled with `_placeholder`."""
    import numpy as np

    value = _placeholder(t)
    return np.full(tuple(t.shape), value, dtype=bool if t.dtype == torch.bool else type(value))


def _guard_class():
    from torch.overrides import TorchFunctionMode

    class _Guard(TorchFunctionMode):
        """Every torch call inside the simulation: real tensors become fake first, autograd stays off, cuda is cuda:0."""

        def __init__(self, sim):
            super().__init__()
            self.sim = sim

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if self.sim._converting or getattr(func, "__name__", "") == "__get__":  # attribute reads: untouched
                return func(*args, **kwargs)
            args, kwargs = self.sim._fakes(args), self.sim._fakes(kwargs)
            if "device" in kwargs:
                kwargs["device"] = _cuda0(kwargs["device"])
            handler = self.sim._handlers.get(func)
            prev = torch.is_grad_enabled()
            torch._C._set_grad_enabled(False)  # autograd on a fake cuda tensor aborts the process: never record
            try:
                return handler(*args, **kwargs) if handler else func(*args, **kwargs)
            except Exception as exc:
                if not _guarded(exc):
                    raise
                return _on_cpu_twins(func, args, kwargs, exc)
            finally:
                torch._C._set_grad_enabled(prev)

    return _Guard


# What a CUDA device guard raises where CUDA cannot run: a CPU-only build, a CUDA build without a driver.
_NO_GUARD = ("not linked with support for cuda", "Found no NVIDIA driver", "CUDA driver version is insufficient")


def _guarded(exc):
    """True when a call failed only because torch's Python binding took a device guard for the fake cuda tensor."""
    return isinstance(exc, RuntimeError) and any(s in str(exc) for s in _NO_GUARD)


# Tensor methods whose real kernels accept tensors on two devices (a cuda tensor indexed by cpu indices, copy_).
_CROSS_DEVICE = {"copy_", "__getitem__", "__setitem__", "index_put_", "index_put", "to", "type", "new_tensor",
                 "new_zeros", "new_ones", "new_empty", "new_full", "new"}


def _on_cpu_twins(func, args, kwargs, exc):
    """Run `func` on fake cpu twins of the fake cuda tensors, then put its new tensors back on cuda:0.

    Some of torch's Python bindings (indexing, copy_, new_*) take a CUDA device guard before dispatching, which a
    build without CUDA (or without a driver) cannot give, even for a fake tensor. Data is not simulated, so running
    them on fake cpu twins checks the same shapes and dtypes; an in-place call returns its own (cuda) tensor.
    """
    from torch.utils._pytree import tree_flatten, tree_map

    flat = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
    devices = {t.device for t in flat if t.dim() > 0}
    if not any(t.device.type == "cuda" for t in flat):
        raise exc
    if len(devices) > 1 and getattr(func, "__name__", "") not in _CROSS_DEVICE:
        raise exc  # a real mismatch would be hidden: let the simulation's limit say so
    twins = {}  # id(twin) -> (twin, original): the twins stay alive until the results are mapped back

    def cpu(t):
        if isinstance(t, torch.Tensor) and t.device.type == "cuda":
            twin = t.to("cpu")
            twins[id(twin)] = (twin, t)
            return twin
        return t

    out = func(*tree_map(cpu, args), **tree_map(cpu, kwargs))

    def back(t):
        if not isinstance(t, torch.Tensor):
            return t
        if id(t) in twins and twins[id(t)][0] is t:
            return twins[id(t)][1]  # an in-place call: its own tensor
        return t.to(_FAKE_CUDA) if t.device.type == "cpu" else t

    return tree_map(back, out)


def default_device():
    """torch's default device: where a tensor made without `device=` goes."""
    try:
        return torch.get_default_device()
    except AttributeError:  # torch 2.4, after torch.set_default_device(None): its getter fails; the CPU it is
        return torch.device("cpu")


def put_defaults(dtype, device):
    """Set torch's default dtype and device back to these, where they changed."""
    if torch.get_default_dtype() != dtype:
        torch.set_default_dtype(dtype)
    if default_device() != device:
        torch.set_default_device(None if device.type == "cpu" else device)


class SimulatedCuda:
    """A fake cuda:0 built on PyTorch's FakeTensorMode: shapes, dtypes and devices are real, data is not.

    No real device move ever happens: real tensors (inputs, a model's parameters and buffers) are first turned
    into fake ones with the mode's own `from_tensor`, so it works alike on CPU-only builds and on CUDA builds
    without a driver. Autograd on a fake cuda tensor aborts the process, so every torch call inside runs with
    gradients off, whatever grad mode the code sets (`torch.enable_grad()`, `set_grad_enabled(True)`);
    `backward()` and `torch.autograd.backward` only count their calls, `torch.autograd.grad` returns fake zeros,
    `.item()` gives nan (0 for integers), and `.numpy()`/`.tolist()` give placeholders of the right shape (`.numpy()` of
    a tensor on cuda raises PyTorch's TypeError, as on a GPU).
    A real module moved inside (`model.to(device)`) gets its own tensors back on exit. `.cuda()`, `.to("cuda")`
    and `device="cuda"` mean cuda:0. What cannot be simulated (data-dependent ops such as `nonzero` or
    `if loss > 0`, calls into the real CUDA runtime) raises, and `simulation_limit` recognises it.
    """

    device = _FAKE_CUDA
    active = 0  # how many simulations are open (checks tell simulation limits from learner bugs by it)

    def __init__(self, say=True):
        self.say = say
        self.backward_calls = 0
        self._stack = None
        self._converting = 0

    def __enter__(self):
        from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

        if self.say:
            print(
                "SIMULATED cuda:0 (no GPU here): this runs under PyTorch's FakeTensorMode, which checks shapes, "
                "dtypes and devices like a GPU would. Any error below is PyTorch's own."
            )
        self.mode = FakeTensorMode(allow_non_fake_inputs=True)
        self._restore = {}  # (id(module), "_parameters" or "_buffers", key) -> (module, the real tensor it held)
        self._handlers = self._make_handlers()
        stack = contextlib.ExitStack()
        try:
            stack.callback(torch.set_grad_enabled, torch.is_grad_enabled())
            # code run here may set torch's default device to the fake cuda:0 (or the default dtype): put them back,
            # or every later tensor of the process asks for a CUDA this machine does not have
            stack.callback(put_defaults, torch.get_default_dtype(), default_device())
            stack.callback(self._restore_modules)
            patches = [
                (torch.autograd, "backward", self._count_backward),
                (nn.Module, "_apply", self._module_apply()),
                (FakeTensor, "tolist", lambda t: _placeholder_array(t).tolist()),  # its own is data-dependent
            ]
            for owner, name, fn in patches:
                stack.callback(setattr, owner, name, getattr(owner, name))
                setattr(owner, name, fn)
            stack.enter_context(warnings.catch_warnings())
            warnings.filterwarnings("ignore", message="Accessing the data pointer of FakeTensor")  # torch-internal
            stack.enter_context(torch.no_grad())
            stack.enter_context(self.mode)
            stack.enter_context(self._function_mode())
        except BaseException:
            stack.close()
            raise
        SimulatedCuda.active += 1
        stack.callback(setattr, SimulatedCuda, "active", SimulatedCuda.active - 1)
        self._stack = stack
        return self

    def __exit__(self, *exc):
        self._stack.close()
        return False

    @contextlib.contextmanager
    def _function_mode(self):
        """Our torch-function mode, removed on exit even when learner code left other modes above it."""
        from torch.overrides import _get_current_function_mode_stack

        guard = _guard_class()(self)
        guard.__enter__()
        try:
            yield guard
        finally:
            stack = _get_current_function_mode_stack()
            if guard in stack:
                for _ in range(len(stack) - stack.index(guard) - 1):  # e.g. torch.set_default_device inside
                    torch._C._pop_torch_function_stack()
                guard.__exit__(None, None, None)

    # ---- real tensors become fake ------------------------------------------------------------------------

    def _fake(self, t):
        """A fake twin of a real tensor (same device, shape, dtype, requires_grad): no data is copied or moved."""
        from torch._subclasses.fake_tensor import FakeTensor

        if not isinstance(t, torch.Tensor) or isinstance(t, FakeTensor) or t.device.type == "meta":
            return t
        if type(t) is not torch.Tensor and not isinstance(t, nn.Parameter):
            return t  # another tensor subclass: leave it to FakeTensorMode
        self._converting += 1  # from_tensor's own torch calls must not come back here
        try:
            return self.mode.from_tensor(t)
        finally:
            self._converting -= 1

    def _fakes(self, tree):
        if not tree:
            return tree
        from torch.utils._pytree import tree_map

        return tree_map(self._fake, tree)

    def _on_cuda(self, t):
        with torch.no_grad():
            return self._fake(t).to(self.device)

    def tensor(self, t):
        """A fake copy of `t` on cuda:0 (use it inside the `with` block)."""
        return self._on_cuda(t)

    def model(self, module):
        """A fake copy of `module` whose parameters and buffers sit on cuda:0; the module itself is untouched."""
        memo = {}
        for mod in module.modules():
            for key, p in mod._parameters.items():
                if p is not None and id(p) not in memo:
                    memo[id(p)] = nn.Parameter(self._on_cuda(p.detach()), requires_grad=p.requires_grad)
            for key, b in mod._buffers.items():
                if b is not None and id(b) not in memo:
                    memo[id(b)] = self._on_cuda(b)
        return copy.deepcopy(module, memo)

    # ---- what the fake device does instead -------------------------------------------------------------------

    def _count_backward(self, *args, **kwargs):
        self.backward_calls += 1

    def _make_handlers(self):
        real = torch.Tensor
        sim = self

        def to(t, *args, **kwargs):
            return real.to(t, *(_cuda0(a) for a in args), **kwargs)

        def cuda(t, device=None, non_blocking=False, **kwargs):
            index = device if isinstance(device, int) else (torch.device(device).index if device is not None else 0)
            return real.to(t, torch.device("cuda", index or 0), non_blocking=non_blocking)

        def new_tensor(t, data, dtype=None, device=None, requires_grad=False, **kwargs):
            dtype, device = dtype or t.dtype, _cuda0(device) if device is not None else t.device
            if isinstance(data, torch.Tensor):
                out = real.to(data.detach().clone(), device=device, dtype=dtype)
            else:
                out = torch.tensor(data, dtype=dtype, device=device)
            return out.requires_grad_(requires_grad) if requires_grad else out

        def item(t):
            return _placeholder(t) if is_simulated(t) else real.item(t)

        def as_number(kind, name):
            def convert(t):
                return kind(_placeholder(t)) if is_simulated(t) else getattr(real, name)(t)

            return convert

        def tolist(t):
            return _placeholder_array(t).tolist() if is_simulated(t) else real.tolist(t)

        def numpy(t, *args, **kwargs):
            if not is_simulated(t):
                return real.numpy(t, *args, **kwargs)
            if t.device.type != "cpu" and not kwargs.get("force", args[0] if args else False):
                # PyTorch's message, as its tensor_numpy.cpp words it for any device but the CPU; said to be simulated
                raise TypeError(f"(simulated {t.device}: on a real GPU PyTorch raises) can't convert {t.device} device "
                                "type tensor to numpy. Use Tensor.cpu() to copy the tensor to host memory first.")
            return _placeholder_array(t)

        def array(t, dtype=None, *args, **kwargs):  # np.asarray(t), np.array(t): through .numpy()
            if not is_simulated(t):
                return real.__array__(t, dtype, *args, **kwargs)
            out = numpy(t)
            return out if dtype is None else out.astype(dtype)

        def backward(t, *args, **kwargs):
            sim.backward_calls += 1

        def grad(outputs, inputs, *args, **kwargs):
            sim.backward_calls += 1
            single = isinstance(inputs, torch.Tensor)
            zeros = tuple(torch.zeros_like(i) for i in ([inputs] if single else inputs))
            return zeros

        def pin_memory(t, *args, **kwargs):
            return t

        handlers = {
            real.to: to, real.cuda: cuda, real.new_tensor: new_tensor, real.item: item, real.tolist: tolist,
            real.numpy: numpy, real.__float__: as_number(float, "__float__"), real.__int__: as_number(int, "__int__"),
            real.__index__: as_number(int, "__index__"), real.backward: backward, torch.autograd.grad: grad,
            real.pin_memory: pin_memory, real.__array__: array,
        }
        return handlers

    def _module_apply(self):
        """nn.Module._apply (behind .to, .cuda, .double...) for the simulation: each tensor is replaced by its
        converted copy (fake tensors cannot be swapped in place), and a real module's own tensors come back on exit."""
        sim = self

        def _apply(module, fn, recurse=True):
            if recurse:
                for child in module.children():
                    child._apply(fn)
            for kind in ("_parameters", "_buffers"):
                table = getattr(module, kind)
                for key, t in list(table.items()):
                    if t is None:
                        continue
                    with torch.no_grad():
                        new = fn(t)
                    if new is t:
                        continue
                    if not is_simulated(t):
                        sim._restore.setdefault((id(module), kind, key), (module, t))
                    if kind == "_parameters":
                        new = nn.Parameter(new, requires_grad=t.requires_grad)
                        if t.grad is not None:
                            with torch.no_grad():
                                new.grad = fn(t.grad)
                    table[key] = new
            return module

        return _apply

    def _restore_modules(self):
        for (_, kind, key), (module, t) in self._restore.items():
            getattr(module, kind)[key] = t
        self._restore.clear()


class _Real:
    """The present accelerator (or cpu), with the same small interface as SimulatedCuda."""

    def __init__(self, device):
        self.device = device

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def tensor(self, t):
        """`t` moved to the device."""
        return t.to(self.device)

    def model(self, module):
        """`module` moved to the device (in place, as `.to()` does)."""
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


def gpu_checkpoint(obj):
    """`torch.save(obj)` as a GPU machine writes it (every storage tagged cuda:0), as bytes: a checkpoint from elsewhere."""
    from .checkpoints import save_tagged

    return save_tagged(obj, location="cuda:0")
