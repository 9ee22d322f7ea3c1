"""Lesson 12 (the capstone): each wrong piece loses exactly its own check, with the message (the pieces are graded
independently); a correct script written differently gets full marks; half the bugs fixed loses exactly the other
half. Format: tests/variants/__init__.py.

The pieces are the fixes of lessons 01, 02, 03, 04, 06 and 09, and so are most wrong fixes here: they are borrowed
from those lessons' variants (`borrowed`), with what they lose there, renamed to the capstone's check where lesson 06's
three checks of `evaluate` are one here. The rest are the script's pieces as found (the notebook's `*_as_found`)."""
import importlib.util
import pathlib


def _sibling(name):
    """A lesson's variants module, by its file (the grader loads this file by its path, outside the package)."""
    spec = importlib.util.spec_from_file_location(f"_capstone_{name}", pathlib.Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


device_mismatch, missing_eval, nan_loss, out_of_memory, reproducibility, shape_dtype = map(_sibling, (
    "device_mismatch", "missing_eval", "nan_loss", "out_of_memory", "reproducibility", "shape_dtype"))

CHECKS = {"check_to_device", "check_prepare_batch", "check_accumulated_grads", "check_stable_lr", "check_evaluate",
          "check_worker_init_fn"}


def borrowed(module, variant, cells=None):
    """A lesson's variant as a capstone variant: its capstone cells, and what it loses among the capstone's checks
    (lesson 06's check_evaluate_* are the capstone's check_evaluate)."""
    source = module.VARIANTS[variant]
    cells = {c: source["cells"][c] for c in (cells or source["cells"])}
    lost = {}
    for name, message in source["lost"].items():
        name = "check_evaluate" if name.startswith("check_evaluate_") else name
        if name in CHECKS:
            lost[name] = message
    return {"cells": cells, "lost": lost}


PREPARE_AS_FOUND = '''def prepare_batch(images, labels):
    return images.unsqueeze(1).float(), labels  # (N, 1, 8, 8) float32 images; the labels as they came
'''
TO_DEVICE_AS_FOUND = '''def to_device(batch, device):
    inputs, labels = batch
    return inputs.to(device), labels            # the labels stay where they are
'''
LR_AS_FOUND = "LR = 8.0\n"

VARIANTS = {
    # 3a, lesson 01: the script's as found (two items only, the labels left behind); a device argument ignored
    "to_device_as_found": {"cells": {"to_device": TO_DEVICE_AS_FOUND},
                           "lost": {"check_to_device": "raised ValueError: too many values to unpack"}},
    "to_device_ignores_its_device": borrowed(device_mismatch, "to_device_ignores_its_device"),
    # 3b, lesson 02: the labels as they came (float64, the script as found); no channel dimension
    "prepare_batch_as_found": {"cells": {"prepare_batch": PREPARE_AS_FOUND},
                               "lost": {"check_prepare_batch": "labels dtype: expected torch.int64"}},
    "prepare_batch_no_channel_dim": borrowed(shape_dtype, "no_channel_dim"),
    # 3c, lesson 03: each piece's loss not divided (the script as found); zero_grad inside the loop
    "accumulate_without_dividing": borrowed(out_of_memory, "no_divide"),
    "accumulate_zero_grad_inside_loop": borrowed(out_of_memory, "zero_grad_inside_loop"),
    # 3d, lesson 04: the rate as found; a rate too low to train in 60 steps
    "lr_as_found": {"cells": {"stable_lr": LR_AS_FOUND}, "lost": {"check_stable_lr": "this rate is too high"}},
    "lr_too_low": {"cells": {"stable_lr": "LR = 0.001\n"}, "lost": {"check_stable_lr": "too low to get there"}},
    # 3e, lesson 06: no_grad without eval; eval without no_grad
    "evaluate_no_grad_without_eval": borrowed(missing_eval, "no_grad_without_eval"),
    "evaluate_eval_without_no_grad": borrowed(missing_eval, "eval_without_no_grad"),
    # 3f, lesson 09: the global NumPy generator reseeded instead of the dataset's; a Generator seeded by worker id
    "workers_seed_global_numpy": borrowed(reproducibility, "worker_seeds_global_numpy"),
    "workers_seeded_by_worker_id": borrowed(reproducibility, "worker_rng_from_worker_id"),
    # every piece right, written differently (the lessons' own alternative fixes): full marks
    "written_differently": {"cells": {
        **borrowed(device_mismatch, "written_differently", ["to_device"])["cells"],
        **borrowed(shape_dtype, "written_differently", ["prepare_batch"])["cells"],
        **borrowed(out_of_memory, "written_differently", ["accumulate_step"])["cells"],
        **borrowed(nan_loss, "written_differently", ["stable_lr"])["cells"],
        **borrowed(missing_eval, "written_differently", ["evaluate"])["cells"],
        **borrowed(reproducibility, "written_differently", ["worker_init_fn"])["cells"]}, "lost": {}},
    # three bugs of six fixed (accumulation, validation, workers): exactly the other three checks lost
    "half_fixed": {"cells": {"to_device": TO_DEVICE_AS_FOUND, "prepare_batch": PREPARE_AS_FOUND,
                             "stable_lr": LR_AS_FOUND},
                   "lost": {"check_to_device": "too many values to unpack", "check_prepare_batch": "labels dtype: expected torch.int64",
                            "check_stable_lr": "this rate is too high"}},
}

# Blind round 10 (the writer saw only the release notebook): a misgraded case, fixed in the checks, and correct
# fixes written differently.
VARIANTS.update({
    # accumulate_step gets the gradients right but returns the sum of the UNscaled losses (4x the mean; text: 'Retur
    "blind10_bad_accum_returns_sum_lr_as_found": {"cells": {'to_device': 'def to_device(batch, device):\n    """Return `batch` (tuple, list or dict) with every tensor moved to `device`."""\n    if isinstance(batch, dict):\n        return {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}\n    moved = [t.to(device) if torch.is_tensor(t) else t for t in batch]\n    return tuple(moved) if isinstance(batch, tuple) else moved\n', 'prepare_batch': 'def prepare_batch(images, labels):\n    """float64 (N, H, W) images and float64 (N,) labels -> float32 (N, 1, H, W) inputs and int64 (N,) targets."""\n    return images.unsqueeze(1).float(), labels.long()\n', 'worker_init_fn': 'def worker_init_fn(worker_id):\n    """Reseed the worker\'s copy of the Dataset\'s Generator (dataset.rng) from the worker\'s own seed."""\n    info = torch.utils.data.get_worker_info()\n    info.dataset.rng = np.random.default_rng(info.seed)\n', 'accumulate_step': 'def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):\n    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    total = 0.0\n    for xb, yb in zip(inputs.chunk(micro_batches), targets.chunk(micro_batches)):\n        loss = loss_fn(model(xb), yb)\n        (loss / micro_batches).backward()\n        total += loss.item()\n    optimizer.step()\n    return total\n', 'stable_lr': 'LR = None  # your stable learning rate\nLR = LR_AS_FOUND\n', 'evaluate': 'def evaluate(model, loader):\n    """Accuracy of `model` on `loader`, in eval mode without autograd; the model\'s mode is restored."""\n    was_training = model.training\n    device = next(model.parameters()).device\n    model.eval()\n    correct = total = 0\n    with torch.no_grad():\n        for x, y in loader:\n            x, y = x.to(device), y.to(device)\n            correct += (model(x).argmax(dim=1) == y).sum().item()\n            total += y.numel()\n    model.train(was_training)\n    return correct / total\n'},
                         "lost": {'check_accumulated_grads': '4 times the mean', 'check_stable_lr': 'this rate is too high'}},
    # All six correct, other spellings: to_device via type(batch)(...) and a dict comprehension; prepare_batch with 
    "blind10_ok_all_alt_styles": {"cells": {'to_device': 'def to_device(batch, device):\n    """Return `batch` (tuple, list or dict) with every tensor moved to `device`."""\n    def move(x):\n        return x.to(device) if isinstance(x, torch.Tensor) else x\n    if isinstance(batch, dict):\n        return type(batch)((k, move(v)) for k, v in batch.items())\n    return type(batch)(move(x) for x in batch)\n', 'prepare_batch': 'def prepare_batch(images, labels):\n    """float64 (N, H, W) images and float64 (N,) labels -> float32 (N, 1, H, W) inputs and int64 (N,) targets."""\n    n, h, w = images.shape\n    inputs = images.reshape(n, 1, h, w).to(dtype=torch.float32)\n    targets = labels.reshape(n).to(torch.int64)\n    return inputs, targets\n', 'worker_init_fn': 'def worker_init_fn(worker_id):\n    """Reseed the worker\'s copy of the Dataset\'s Generator (dataset.rng) from the worker\'s own seed."""\n    # inside a worker, torch.initial_seed() is the worker\'s seed (base_seed + worker_id)\n    dataset = torch.utils.data.get_worker_info().dataset\n    dataset.rng = np.random.default_rng(torch.initial_seed())\n', 'accumulate_step': 'def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):\n    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""\n    inputs, targets = batch\n    optimizer.zero_grad(set_to_none=True)\n    pieces = list(zip(torch.chunk(inputs, micro_batches), torch.chunk(targets, micro_batches)))\n    mean_loss = 0.0\n    for xb, yb in pieces:\n        scaled = loss_fn(model(xb), yb) * (xb.shape[0] / inputs.shape[0])   # = 1 / micro_batches\n        scaled.backward()\n        mean_loss += scaled.item()\n    optimizer.step()\n    return float(mean_loss)\n', 'stable_lr': 'LR = None  # your stable learning rate\nLR = 5e-2   # well inside 0.01 .. 1 from the slider\n', 'evaluate': 'def evaluate(model, loader):\n    """Accuracy of `model` on `loader`, in eval mode without autograd; the model\'s mode is restored."""\n    mode = model.training\n    device = next(model.parameters()).device\n    model.train(False)\n    try:\n        with torch.inference_mode():\n            preds, ys = [], []\n            for x, y in loader:\n                preds.append(model(x.to(device)).argmax(1))\n                ys.append(y.to(device))\n            return (torch.cat(preds) == torch.cat(ys)).float().mean().item()\n    finally:\n        model.train(mode)\n'},
                         "lost": {}},
    # All correct, defensively: to_device recursive (nested containers kept, non-tensors returned as the same object
    "blind10_ok_defensive_recursive": {"cells": {'to_device': 'def to_device(batch, device):\n    """Return `batch` (tuple, list or dict) with every tensor moved to `device`."""\n    if torch.is_tensor(batch):\n        return batch.to(device, non_blocking=True)\n    if isinstance(batch, dict):\n        return {key: to_device(value, device) for key, value in batch.items()}\n    if isinstance(batch, tuple):\n        return tuple(to_device(item, device) for item in batch)\n    if isinstance(batch, list):\n        return [to_device(item, device) for item in batch]\n    return batch\n', 'prepare_batch': 'def prepare_batch(images, labels):\n    """float64 (N, H, W) images and float64 (N,) labels -> float32 (N, 1, H, W) inputs and int64 (N,) targets."""\n    inputs = images[:, None, :, :].float()\n    targets = torch.round(labels).long()\n    assert inputs.dim() == 4 and targets.dim() == 1\n    return inputs, targets\n', 'worker_init_fn': 'def worker_init_fn(worker_id):\n    """Reseed the worker\'s copy of the Dataset\'s Generator (dataset.rng) from the worker\'s own seed."""\n    info = torch.utils.data.get_worker_info()\n    if info is None:           # called outside a worker: nothing to do\n        return\n    info.dataset.rng = np.random.default_rng([info.seed % 2**32, worker_id])\n', 'accumulate_step': 'def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):\n    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    losses = []\n    for xb, yb in zip(inputs.chunk(micro_batches), targets.chunk(micro_batches)):\n        loss = loss_fn(model(xb), yb)\n        loss.backward()\n        losses.append(loss.item())\n    with torch.no_grad():           # average the summed gradients: same as dividing each loss\n        for group in optimizer.param_groups:\n            for p in group["params"]:\n                if p.grad is not None:\n                    p.grad.div_(micro_batches)\n    optimizer.step()\n    return sum(l / micro_batches for l in losses)\n', 'stable_lr': 'LR = None  # your stable learning rate\nLR = 0.1\n', 'evaluate': 'def evaluate(model, loader):\n    """Accuracy of `model` on `loader`, in eval mode without autograd; the model\'s mode is restored."""\n    modes = {m: m.training for m in model.modules()}\n    model.eval()\n    device = next(model.parameters()).device\n    hits = seen = 0\n    with torch.no_grad():\n        for batch in loader:\n            x, y = batch[0].to(device), batch[1].to(device)\n            hits += int((model(x).argmax(dim=-1) == y).sum())\n            seen += len(y)\n    for m, flag in modes.items():\n        m.training = flag\n    return float(hits / seen)\n'},
                         "lost": {}},
})

BLIND11 = {  # blind round 11: cases that were misgraded, graded right since
    # accumulate_step skips the pieces: one forward/backward on the whole batch ('the same gradient, faster'). With 
    'as_one_forward': {'cells': {'to_device': 'def to_device(batch, device):\n    """Return `batch` (tuple, list or dict) with every tensor moved to `device`."""\n    # YOUR CODE HERE\n    raise NotImplementedError()', 'prepare_batch': 'def prepare_batch(images, labels):\n    """float64 (N, H, W) images and float64 (N,) labels -> float32 (N, 1, H, W) inputs and int64 (N,) targets."""\n    return images.unsqueeze(1).float(), labels.long()\n', 'worker_init_fn': 'def worker_init_fn(worker_id):\n    """Reseed the worker\'s copy of the Dataset\'s Generator (dataset.rng) from the worker\'s own seed."""\n    # YOUR CODE HERE\n    raise NotImplementedError()', 'accumulate_step': 'def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):\n    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    loss = loss_fn(model(inputs), targets)   # the mean over the whole batch = the mean of the pieces\' means\n    loss.backward()\n    optimizer.step()\n    return loss.item()\n', 'stable_lr': 'LR = 0.1  # your stable learning rate\n', 'evaluate': 'def evaluate(model, loader):\n    """Accuracy of `model` on `loader`, in eval mode without autograd; the model\'s mode is restored."""\n    # YOUR CODE HERE\n    raise NotImplementedError()'},
        'lost': {'check_to_device': '`to_device` is not written yet: replace `raise NotImplementedError` wi', 'check_worker_init_fn': '`worker_init_fn` is not written yet: replace `raise NotImplementedErro', 'check_accumulated_grads': 'with autograd on given one micro-batch, at most', 'check_evaluate': '`evaluate` is not written yet: replace `raise NotImplementedError` wit'}},
    # accumulate_step backpropagates each piece's undivided loss, then divides every .grad by micro_batches before t
    'ok_grads_divided_after': {'cells': {'to_device': 'def to_device(batch, device):\n    """Return `batch` (tuple, list or dict) with every tensor moved to `device`."""\n    # YOUR CODE HERE\n    raise NotImplementedError()', 'prepare_batch': 'def prepare_batch(images, labels):\n    """float64 (N, H, W) images and float64 (N,) labels -> float32 (N, 1, H, W) inputs and int64 (N,) targets."""\n    # YOUR CODE HERE\n    raise NotImplementedError()', 'worker_init_fn': 'def worker_init_fn(worker_id):\n    """Reseed the worker\'s copy of the Dataset\'s Generator (dataset.rng) from the worker\'s own seed."""\n    # YOUR CODE HERE\n    raise NotImplementedError()', 'accumulate_step': 'def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):\n    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    total = 0.0\n    for xb, yb in zip(inputs.chunk(micro_batches), targets.chunk(micro_batches)):\n        loss = loss_fn(model(xb), yb)\n        loss.backward()\n        total += loss.item()\n    for group in optimizer.param_groups:           # the sum of the pieces\' gradients -> their mean\n        for p in group["params"]:\n            if p.grad is not None:\n                p.grad.div_(micro_batches)\n    optimizer.step()\n    return total / micro_batches\n', 'stable_lr': 'LR = 1  # an int: SGD takes it\n', 'evaluate': 'def evaluate(model, loader):\n    """Accuracy of `model` on `loader`, in eval mode without autograd; the model\'s mode is restored."""\n    device = next(model.parameters()).device\n    was_training = model.training\n    model.eval()\n    correct = total = 0\n    with torch.no_grad():\n        for x, y in loader:\n            x, y = x.to(device), y.to(device)\n            correct += (model(x).argmax(dim=1) == y).sum().item()\n            total += y.numel()\n    model.train(was_training)\n    return correct / total\n'},
        'lost': {'check_to_device': '`to_device` is not written yet: replace `raise NotImplementedError` wi', 'check_prepare_batch': '`prepare_batch` is not written yet: replace `raise NotImplementedError', 'check_worker_init_fn': '`worker_init_fn` is not written yet: replace `raise NotImplementedErro'}},
}
for _name, _spec in BLIND11.items():
    VARIANTS[f"blind11_{_name}"] = _spec

BLIND14 = {  # blind round 14: cases that were misgraded, graded right since
    # Runs the pieces in eval mode (BatchNorm on running statistics, Dropout off) to 'make the pieces agree': the gr
    'as_pieces_in_eval_mode': {'cells': {'to_device': 'def to_device(batch, device):\n    """Return `batch` (tuple, list or dict) with every tensor moved to `device`."""\n    def move(item):\n        return item.to(device) if isinstance(item, torch.Tensor) else item\n    if isinstance(batch, dict):\n        return {key: move(value) for key, value in batch.items()}\n    if isinstance(batch, list):\n        return [move(item) for item in batch]\n    return tuple(move(item) for item in batch)\n', 'prepare_batch': 'def prepare_batch(images, labels):\n    """float64 (N, H, W) images and float64 (N,) labels -> float32 (N, 1, H, W) inputs and int64 (N,) targets."""\n    return images.unsqueeze(1).float(), labels.long()\n', 'worker_init_fn': 'def worker_init_fn(worker_id):\n    """Reseed the worker\'s copy of the Dataset\'s Generator (dataset.rng) from the worker\'s own seed."""\n    info = torch.utils.data.get_worker_info()\n    info.dataset.rng = np.random.default_rng(info.seed)\n', 'accumulate_step': 'def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):\n    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""\n    inputs, targets = batch\n    was_training = model.training\n    model.eval()      # "BatchNorm on 8 samples is noisy: use the running stats so the pieces match the full batch"\n    optimizer.zero_grad()\n    total = 0.0\n    for xb, yb in zip(inputs.chunk(micro_batches), targets.chunk(micro_batches)):\n        loss = loss_fn(model(xb), yb) / micro_batches\n        loss.backward()\n        total += loss.item()\n    optimizer.step()\n    model.train(was_training)\n    return total\n', 'stable_lr': 'LR = 0.1  # your stable learning rate\n', 'evaluate': 'def evaluate(model, loader):\n    """Accuracy of `model` on `loader`, in eval mode without autograd; the model\'s mode is restored."""\n    device = next(model.parameters()).device\n    was_training = model.training\n    model.eval()\n    correct = total = 0\n    with torch.no_grad():\n        for x, y in loader:\n            x, y = x.to(device), y.to(device)\n            correct += (model(x).argmax(dim=1) == y).sum().item()\n            total += y.numel()\n    model.train(was_training)\n    return correct / total\n'},
        'lost': {'check_accumulated_grads': "(a training step's gradients are those of the model in training mode)"}},
}
for _name, _spec in BLIND14.items():
    VARIANTS[f"blind14_{_name}"] = _spec
