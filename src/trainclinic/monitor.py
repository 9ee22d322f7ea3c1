"""Measure a training step: gradient norms (total and per layer)."""
import torch

__all__ = ["grad_norm", "layer_grad_norms"]


def _grads(params):
    if isinstance(params, torch.nn.Module):
        params = params.parameters()
    elif torch.is_tensor(params):
        params = [params]
    return [p.grad for p in params if p.grad is not None]


def grad_norm(params, norm_type=2.0):
    """Total gradient norm of a model or parameters, as a float (0.0 when no gradients)."""
    grads = _grads(params)
    if not grads:
        return 0.0
    get_total_norm = getattr(torch.nn.utils, "get_total_norm", None)  # torch >= 2.6
    if get_total_norm is not None:
        return float(get_total_norm(grads, norm_type))
    norms = [torch.linalg.vector_norm(g.detach(), norm_type).to(grads[0].device) for g in grads]
    return float(torch.linalg.vector_norm(torch.stack(norms), norm_type))


def layer_grad_norms(model, norm_type=2.0):
    """{module name: gradient norm of its own parameters} for every module that has gradients."""
    out = {}
    for name, module in model.named_modules():
        grads = _grads(list(module.parameters(recurse=False)))
        if grads:
            out[name or type(module).__name__] = grad_norm(list(module.parameters(recurse=False)), norm_type)
    return out
