"""Mixed precision: which half dtype a device runs fast, and fp32 against autocast for speed and peak memory.

`compare` times one training step of an MLP in float32 and under `torch.autocast` and measures each step's peak
memory (`memory.measure`: CUDA's allocator statistics on a GPU, live tensor bytes elsewhere). `make gpu-check`
and lesson 07 report the same figures. `cpu_bf16_hardware` says whether this CPU has native bfloat16 instructions,
without which CPU autocast is slower than float32.
"""
import time

import torch
from torch import nn

__all__ = ["half_dtype", "cpu_bf16_hardware", "compare", "zero_fraction"]


def half_dtype(device):
    """The autocast dtype to use on `device`: float16 on cuda (and mps), bfloat16 on the CPU."""
    return torch.bfloat16 if torch.device(device).type == "cpu" else torch.float16


def cpu_bf16_hardware():
    """True when the CPU has native bfloat16 instructions (AVX512-BF16 or AMX), False when not, None if unknown."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), None)
    except OSError:
        return None
    if flags is None:
        return None
    return any(flag in flags for flag in ("avx512_bf16", "amx_bf16"))


def zero_fraction(tensors):
    """The share of entries that are exactly 0 in a list of tensors (None entries skipped)."""
    ts = [t.detach() for t in tensors if t is not None]
    total = sum(t.numel() for t in ts)
    return sum(int((t == 0).sum()) for t in ts) / total if total else 0.0


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def compare(device, dtype=None, width=4096, batch=8192, steps=10, seed=0):
    """One SGD step of a 3-layer MLP (width x width) in float32 and under autocast(`dtype`), on `device`.

    Returns {"device", "dtype", "width", "batch", "steps", "float32": {"seconds_per_step", "peak_bytes"}, "mixed": {...}, "speedup" (float32 time /
    mixed time), "memory_ratio" (mixed peak / float32 peak)}. Each mode: one warm-up step, `steps` timed steps,
    then one step whose peak memory is measured."""
    from . import memory

    device = torch.device(device)
    half = dtype or half_dtype(device)
    gen = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                              nn.Linear(width, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(batch, width, generator=gen).to(device)
    y = torch.randint(0, 10, (batch,), generator=gen).to(device)
    result = {"device": str(device), "dtype": str(half), "width": width, "batch": batch, "steps": steps}
    for name, autocast in (("float32", False), ("mixed", True)):
        def step():
            opt.zero_grad(set_to_none=True)
            with torch.autocast(device.type, dtype=half, enabled=autocast):
                loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()

        step()  # warm-up: kernels chosen, optimizer state and caches allocated
        _sync(device)
        start = time.perf_counter()
        for _ in range(steps):
            step()
        _sync(device)
        seconds = (time.perf_counter() - start) / steps
        with memory.measure(device) as m:  # apart from the timing: off a GPU, measuring costs time per operation
            step()
        result[name] = {"seconds_per_step": round(seconds, 6), "peak_bytes": int(m.peak)}
    opt.zero_grad(set_to_none=True)
    result["speedup"] = round(result["float32"]["seconds_per_step"] / result["mixed"]["seconds_per_step"], 2)
    result["memory_ratio"] = round(result["mixed"]["peak_bytes"] / max(result["float32"]["peak_bytes"], 1), 3)
    return result
