"""Trace shapes and dtypes through a model: one row per layer, and the first layer whose input does not fit.

`trace(model, x)` runs the model once on a sample batch with forward hooks, prints what enters and leaves
each layer, and, when PyTorch raises, names the layer that raised next to PyTorch's own error message.
With `loss_fn` and `target` it traces the loss too, and reports the warnings PyTorch gives there (the
silent `MSELoss` broadcast of `(N, 1)` against `(N,)`).
"""
import warnings

import torch
from torch import nn

__all__ = ["trace", "describe", "expects"]


def describe(value):
    """'8x1x12x12 float32' for a tensor; tuples and lists of tensors joined with ', '."""
    if torch.is_tensor(value):
        shape = "x".join(str(s) for s in value.shape) or "scalar"
        return f"{shape} {str(value.dtype).removeprefix('torch.')}"
    if isinstance(value, (tuple, list)):
        return ", ".join(describe(v) for v in value if v is not None) or "-"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {describe(v)}" for k, v in value.items())
    return type(value).__name__


def expects(module):
    """What a layer accepts, as text ('(*, 1152) float32' for Linear(1152, ...)); '' when not known."""
    params = [p for p in module.parameters(recurse=False)]
    dtype = f" {str(params[0].dtype).removeprefix('torch.')}" if params else ""
    if isinstance(module, nn.Linear):
        return f"(*, {module.in_features}){dtype}"
    if isinstance(module, nn.modules.conv._ConvNd):
        spatial = {1: "L", 2: "H, W", 3: "D, H, W"}[len(module.kernel_size)]
        return f"(N, {module.in_channels}, {spatial}){dtype}"
    if isinstance(module, nn.modules.batchnorm._BatchNorm):
        return f"(N, {module.num_features}, ...){dtype}"
    if isinstance(module, nn.LayerNorm):
        return f"(*, {', '.join(map(str, module.normalized_shape))}){dtype}"
    if isinstance(module, nn.Embedding):
        return "integer indices (int64), any shape"
    return ""


def _first(value):
    if torch.is_tensor(value):
        return value
    if isinstance(value, (tuple, list)):
        return next((v for v in map(_first, value) if v is not None), None)
    return None


def _print(rows, failure):
    width = max([len(r["layer"]) for r in rows] + [5])
    kind = max([len(r["type"]) for r in rows] + [4])
    print(f"{'layer':<{width}}  {'type':<{kind}}  {'input':<24}  output")
    for r in rows:
        out = r["output"] if r["error"] is None else "✗ raised"
        print(f"{r['layer']:<{width}}  {r['type']:<{kind}}  {r['input']:<24}  {out}")
        if r.get("note"):
            print(f"{'':<{width}}  ⚠ {r['note']}")
        if r.get("warning"):
            print(f"{'':<{width}}  ⚠ PyTorch warned: {r['warning']}")
    if failure is None:
        return
    r = failure
    if r["layer"] == "loss":
        print(f"\n✗ the loss does not fit: it got {r['input']}.")
    elif r["leaf"]:
        want = f" It expects {r['expects']}." if r["expects"] else ""
        print(f"\n✗ first layer whose input does not fit: `{r['layer']}` ({r['module']}), input {r['input']}.{want}")
    else:
        after = f", after layer `{r['after']}`" if r["after"] else ""
        print(f"\n✗ the error is in `{r['layer']}`'s own forward code{after}, between layers (a view, reshape, cat...).")
    print(f"  PyTorch says: {r['error']}")


def trace(model, *inputs, target=None, loss_fn=None, show=True):
    """Run `model(*inputs)` (and `loss_fn(output, target)`) once; print and return one row per layer.

    Each row is a dict: layer, type, input, output (as 'shape dtype' text), shapes, error (PyTorch's message
    or None) and warning. The row whose error is set is the first layer whose input does not fit.
    """
    rows, stack, handles = [], [], []
    first = _first(inputs)
    batch = first.shape[0] if first is not None and first.dim() > 1 else None
    state = {"failure": None, "last": "", "noted": False}
    names = {m: n for n, m in model.named_modules()}

    def pre(module, args):
        stack.append((module, args))

    def post(module, args, output):
        stack.pop()
        if not any(True for _ in module.children()):
            rows.append({
                "layer": names[module] or type(module).__name__, "type": type(module).__name__,
                "input": describe(args), "output": describe(output), "error": None, "warning": None,
                "shapes": (tuple(_first(args).shape) if _first(args) is not None else None,
                           tuple(_first(output).shape) if _first(output) is not None else None),
            })
            state["last"] = rows[-1]["layer"]
            _note_batch(rows[-1], args)

    def _note_batch(row, args):
        got = _first(args)
        if batch is not None and not state["noted"] and got is not None and got.dim() > 0 and got.shape[0] != batch:
            row["note"] = (f"`{row['layer']}` receives {got.shape[0]} rows but the batch has {batch} samples: "
                           "the batch dimension changed before it (a view/reshape mixing samples?)")
            state["noted"] = True

    for module in names:
        handles.append(module.register_forward_pre_hook(pre))
        handles.append(module.register_forward_hook(post))
    output = None
    try:
        with torch.no_grad():
            output = model(*inputs)
    except Exception as exc:  # the point of the tool: report PyTorch's own error, do not crash
        module, args = stack[-1] if stack else (model, inputs)
        leaf = not any(True for _ in module.children())
        row = {
            "layer": names.get(module) or type(module).__name__, "type": type(module).__name__,
            "input": describe(args), "output": None, "error": f"{type(exc).__name__}: {exc}", "warning": None,
            "shapes": (tuple(_first(args).shape) if _first(args) is not None else None, None),
            "leaf": leaf, "module": repr(module) if leaf else type(module).__name__,
            "expects": expects(module) if leaf else "", "after": state["last"],
        }
        _note_batch(row, args)
        rows.append(row)
        state["failure"] = row
    finally:
        for h in handles:
            h.remove()
        stack.clear()

    if state["failure"] is None and loss_fn is not None and target is not None:
        kind = type(loss_fn).__name__ if isinstance(loss_fn, nn.Module) else getattr(loss_fn, "__name__", "loss")
        row = {"layer": "loss", "type": kind, "input": f"output {describe(output)}, target {describe(target)}",
               "output": None, "error": None, "warning": None, "shapes": (tuple(output.shape), tuple(target.shape))}
        if output.shape != target.shape and target.is_floating_point():
            try:
                wide = "x".join(map(str, torch.broadcast_shapes(output.shape, target.shape)))
                row["note"] = (f"output and target shapes differ ({describe(output).split()[0]} vs "
                               f"{describe(target).split()[0]}): an elementwise loss broadcasts them to {wide}")
            except RuntimeError:
                pass
        try:
            with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                loss = loss_fn(output, target)
            row["output"] = describe(loss)
            row["warning"] = "; ".join(str(w.message) for w in caught) or None
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {exc}"
            state["failure"] = row
        rows.append(row)
    if show:
        _print(rows, state["failure"])
    return rows
