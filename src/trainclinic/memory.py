"""Memory: measure a step's peak, cap the budget to reproduce an out-of-memory error, simulate one without a GPU.

On CUDA everything is real: the caching allocator's statistics (`torch.cuda.max_memory_allocated`) and a
per-process cap (`torch.cuda.set_per_process_memory_fraction`) that makes PyTorch raise its own
`torch.OutOfMemoryError`. Elsewhere `LiveBytes`, a TorchDispatchMode, counts the bytes of every tensor storage
created under it until the storage is freed (weakref finalizers), and with a budget raises a
`torch.OutOfMemoryError` shaped like CUDA's message that says plainly it is simulated.
"""
import contextlib
import gc
import traceback
import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["OutOfMemoryError", "fmt", "simulated_oom", "LiveBytes", "Measure", "measure", "limit", "gpu_report"]

OutOfMemoryError = getattr(torch, "OutOfMemoryError", None) or torch.cuda.OutOfMemoryError  # torch < 2.5: cuda's


def fmt(n):
    """Bytes the way PyTorch's CUDA messages write them: '512 bytes', '3.00 KiB', '20.00 MiB', '1.50 GiB'."""
    n = int(n)
    if n <= 1024:
        return f"{n} bytes"
    if n <= 2**20:
        return f"{n / 1024:.2f} KiB"
    if n <= 2**30:
        return f"{n / 2**20:.2f} MiB"
    return f"{n / 2**30:.2f} GiB"


def simulated_oom(tried, capacity, allocated, device="cpu"):
    """A torch.OutOfMemoryError worded like CUDA's caching allocator, saying first that it is simulated (not raised)."""
    free = max(capacity - allocated, 0)
    return OutOfMemoryError(
        f"SIMULATED on the {torch.device(device).type} (no GPU here: trainclinic's live-bytes budget plays a "
        f"{fmt(capacity)} GPU, and keeps no cache): CUDA out of memory. Tried to allocate {fmt(tried)}. GPU 0 has a "
        f"total capacity of {fmt(capacity)} of which {fmt(free)} is free. Including non-PyTorch memory, this process "
        f"has {fmt(allocated)} memory in use. Of the allocated memory {fmt(allocated)} is allocated by PyTorch, and "
        "0 bytes is reserved by PyTorch but unallocated."
    )


def _tensors(obj):
    """The tensors in an operation's arguments or outputs (nested tuples, lists and dicts)."""
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (tuple, list)):
        for item in obj:
            yield from _tensors(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _tensors(item)


def _storage(t):
    try:
        s = t.untyped_storage()
        return s._cdata, s
    except Exception:  # sparse, nested or storage-less tensors: nothing to count
        return None, None


class LiveBytes(TorchDispatchMode):
    """Count the bytes of the live tensor storages created under it; with `budget`, raise a simulated OOM.

    Storages that existed before (parameters, a batch built outside) are not counted, nor are views and
    in-place results of them. `allocated` is the current total, `peak` its maximum.
    """

    def __init__(self, budget=None, device="cpu"):
        super().__init__()
        self.budget = budget
        self.device = torch.device(device)
        self.allocated = 0
        self.peak = 0
        self._live = {}

    @classmethod
    def _should_skip_dynamo(cls):
        return False  # torch >= 2.9 would otherwise import torch._dynamo (seconds) on the first operation

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        known = {_storage(t)[0] for t in _tensors((args, kwargs))}
        new = {}
        for t in _tensors(out):
            key, s = _storage(t)
            if key is not None and key not in known and key not in self._live:
                new[key] = s
        size = sum(s.nbytes() for s in new.values())
        if self.budget is not None and size and self.allocated + size > self.budget:
            del out, new
            raise simulated_oom(size, self.budget, self.allocated, self.device)
        for key, s in new.items():
            self._live[key] = weakref.finalize(s, self._free, key, s.nbytes())
        self.allocated += size
        self.peak = max(self.peak, self.allocated)
        return out

    def _free(self, key, n):
        if self._live.pop(key, None) is not None:
            self.allocated -= n

    def reset_peak(self):
        """Restart the peak from the current allocation."""
        self.peak = self.allocated

    def __exit__(self, *exc):
        for fin in self._live.values():
            fin.detach()  # stop counting: the figures stay as they were at exit
        self._live.clear()
        return super().__exit__(*exc)


def _cuda(device):
    return torch.device(device).type == "cuda"


class Measure:
    """Peak and current memory of a block, in bytes above what was allocated when it began.

    CUDA: torch.cuda.max_memory_allocated / memory_allocated (every tensor of the process; do not nest two).
    Elsewhere: LiveBytes (the tensors created inside the block). `simulated` says which.
    """

    def __init__(self, device):
        self.device = torch.device(device)
        self.simulated = not _cuda(self.device)
        self.peak = 0
        self.baseline = 0
        self._mode = None

    @property
    def allocated(self):
        """Bytes allocated now above the baseline (live while inside the block)."""
        if self._mode is not None:
            return self._mode.allocated
        return torch.cuda.memory_allocated(self.device) - self.baseline

    def __enter__(self):
        if self.simulated:
            self._mode = LiveBytes(device=self.device).__enter__()
        else:
            torch.cuda.synchronize(self.device)
            self.baseline = torch.cuda.memory_allocated(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        return self

    def __exit__(self, *exc):
        if self.simulated:
            self._mode.__exit__(*exc)
            self.peak = self._mode.peak
        else:
            torch.cuda.synchronize(self.device)
            self.peak = torch.cuda.max_memory_allocated(self.device) - self.baseline
            torch.cuda.empty_cache()  # hand the cached blocks back: a shared GPU is not ours to hold
        return False

    def __repr__(self):
        kind = "simulated (live tensor bytes)" if self.simulated else "CUDA allocator"
        return f"Measure({self.device}, peak {fmt(self.peak)}, {kind})"


def measure(device):
    """Context manager measuring the peak memory of its block on `device` (see Measure)."""
    return Measure(device)


_FRACTIONS = {}  # device -> the last fraction trainclinic set: torch < 2.5 has no getter to ask


def _key(device):
    return str(torch.device(device))


def _get_fraction(device):
    """The process's memory fraction on `device`: torch's own getter where it exists (torch >= 2.5), else the last
    fraction set through `_set_fraction` (1.0, no cap, if none)."""
    get = getattr(torch.cuda, "get_per_process_memory_fraction", None)
    if get is not None:
        try:
            return float(get(device))
        except Exception:
            pass
    return _FRACTIONS.get(_key(device), 1.0)


def _set_fraction(fraction, device):
    torch.cuda.set_per_process_memory_fraction(fraction, device)
    _FRACTIONS[_key(device)] = float(fraction)


def _release(tb, collect=False):
    """Drop the locals the traceback's finished frames hold (activations), so their memory can be freed."""
    if tb is not None:
        traceback.clear_frames(tb)
    if collect:
        gc.collect()


@contextlib.contextmanager
def limit(device, budget, say=True):
    """Give the block only `budget` more bytes: a real CUDA cap, or a simulated one elsewhere. Always undone.

    CUDA: empty the cache, cap the process with torch.cuda.set_per_process_memory_fraction at what is reserved now
    plus `budget`, and on the way out restore the previous fraction, drop the failed step's tensors and empty the
    cache again. Elsewhere: a LiveBytes budget raising a simulated torch.OutOfMemoryError.
    """
    device = torch.device(device)
    if _cuda(device):
        gc.collect()
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
        total = torch.cuda.get_device_properties(device).total_memory
        before = _get_fraction(device)
        cap = torch.cuda.memory_reserved(device) + int(budget)
        if say:
            print(f"{device}: capped at {fmt(cap)} of {fmt(total)} (what is reserved now + {fmt(budget)}) "
                  "with torch.cuda.set_per_process_memory_fraction; the cap is lifted after this cell.")
        _set_fraction(min(cap / total, 1.0), device)
        try:
            yield
        except BaseException as exc:
            _release(exc.__traceback__, collect=True)
            raise
        finally:
            _set_fraction(before, device)
            gc.collect()
            torch.cuda.empty_cache()
    else:
        if say:
            print(f"SIMULATED out-of-memory budget of {fmt(budget)} on the {device.type} (no CUDA GPU here): "
                  "every tensor created in this block counts until it is freed, and going over raises "
                  "torch.OutOfMemoryError with CUDA's message, marked SIMULATED.")
        try:
            with LiveBytes(budget=int(budget), device=device):
                yield
        except BaseException as exc:
            _release(exc.__traceback__)
            raise


def _workload(device, width, batch, seed=0):
    """A seeded MLP and one batch on `device` (the lesson's kind of step, sized by width and batch)."""
    from .data import blobs
    from .models import mlp

    model = mlp(inputs=width // 2, hidden=width, outputs=10, depth=3, seed=seed).to(device)
    x, y = blobs(n=batch, features=width // 2, classes=10, seed=seed).tensors
    return model, x.to(device), y.to(device)


def _accumulate(model, optimizer, x, y, micro_batches):
    """Reference: one optimizer step over (x, y) in `micro_batches` pieces; the mean loss as a float."""
    optimizer.zero_grad(set_to_none=True)
    total = 0.0
    for xb, yb in zip(x.chunk(micro_batches), y.chunk(micro_batches)):
        loss = torch.nn.functional.cross_entropy(model(xb), yb) * (len(xb) / len(x))
        loss.backward()
        total += loss.item()
    optimizer.step()
    return total


def gpu_report(device=None, micro_batches=4, width=None, batch=None):
    """Reproduce an OOM under a capped budget, fix it by accumulation, check the memory comes back; a dict.

    On CUDA all of it is real (a small cap that is always restored). Elsewhere the same steps run against the
    simulated budget and the dict says "simulated": True.
    """
    from .device import pick_device

    device = torch.device(device) if device is not None else pick_device()
    cuda = _cuda(device)
    width = width or (2048 if cuda else 64)
    batch = batch or (8192 if cuda else 256)
    model, x, y = _workload(device, width, batch)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    report = {"device": str(device), "simulated": not cuda, "oom_reproduced": False, "oom_message": "",
              "accumulated_fits": False}
    fraction_before = _get_fraction(device) if cuda else None
    _accumulate(model, opt, x, y, micro_batches)  # warm-up: lazy CUDA/cuBLAS state is allocated here, not below
    opt.zero_grad(set_to_none=True)
    watch = contextlib.nullcontext() if cuda else LiveBytes(device=device)
    with watch:
        if cuda:
            gc.collect()
            torch.cuda.synchronize(device)
            torch.cuda.empty_cache()
        baseline = torch.cuda.memory_allocated(device) if cuda else watch.allocated
        with measure(device) as full:
            _accumulate(model, opt, x, y, 1)
        with measure(device) as acc:
            _accumulate(model, opt, x, y, micro_batches)
        budget = (full.peak + acc.peak) // 2
        try:
            with limit(device, budget, say=False):
                _accumulate(model, opt, x, y, 1)
        except OutOfMemoryError as exc:
            report["oom_reproduced"] = True
            report["oom_message"] = str(exc).split(" If reserved")[0]
        try:
            with limit(device, budget, say=False):
                _accumulate(model, opt, x, y, micro_batches)
            report["accumulated_fits"] = True
        except OutOfMemoryError as exc:
            report["accumulated_error"] = str(exc).split(" If reserved")[0]
        opt.zero_grad(set_to_none=True)
        if cuda:
            gc.collect()
            torch.cuda.synchronize(device)
            torch.cuda.empty_cache()
        after = torch.cuda.memory_allocated(device) if cuda else watch.allocated
    report.update(
        peak_full_batch_bytes=int(full.peak),
        peak_accumulated_bytes=int(acc.peak),
        budget_bytes=int(budget),
        baseline_bytes=int(baseline),
        after_bytes=int(after),
        memory_released=bool(after <= baseline),
    )
    if cuda:
        report["fraction_restored"] = _get_fraction(device) == fraction_before
        report["reserved_after_bytes"] = int(torch.cuda.memory_reserved(device))
    del model, opt, x, y
    if cuda:
        gc.collect()
        torch.cuda.empty_cache()
    return report
