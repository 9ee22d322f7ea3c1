"""A run's fingerprint: a short hash of a model's weights (or any tensors), equal only when every bit is equal."""
import hashlib

import torch

__all__ = ["fingerprint", "first_difference"]


def _tensors(obj):
    """(name, tensor) pairs of a module (its state_dict), a dict of tensors, a list of tensors or one tensor."""
    if isinstance(obj, torch.nn.Module):
        obj = obj.state_dict()
    if torch.is_tensor(obj):
        return [("", obj)]
    if isinstance(obj, dict):
        return [(str(k), v) for k, v in obj.items() if torch.is_tensor(v)]
    return [(str(i), t) for i, t in enumerate(obj)]


def fingerprint(obj, length=16):
    """A hex digest of the names, dtypes, shapes and exact bytes of a model's weights (or tensors)."""
    h = hashlib.sha256()
    for name, t in _tensors(obj):
        t = t.detach().to("cpu").contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()[:length]


def first_difference(a, b):
    """Where two models (or tensor collections) first differ, as text; None when they are bit-for-bit equal."""
    ta, tb = _tensors(a), _tensors(b)
    if [n for n, _ in ta] != [n for n, _ in tb]:
        return f"different tensors: {[n for n, _ in ta]} vs {[n for n, _ in tb]}"
    for (name, x), (_, y) in zip(ta, tb):
        x, y = x.detach().cpu(), y.detach().cpu()
        if x.dtype != y.dtype or x.shape != y.shape:
            return f"{name}: {x.dtype} {tuple(x.shape)} vs {y.dtype} {tuple(y.shape)}"
        if not torch.equal(x.reshape(-1).view(torch.uint8), y.reshape(-1).view(torch.uint8)):
            gap = (x.double() - y.double()).abs().max().item()
            return f"{name}: largest difference {gap:.3g}"
    return None
