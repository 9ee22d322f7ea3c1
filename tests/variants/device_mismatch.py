"""Lesson 01 (device mismatch): plausible wrong fixes and correct fixes written differently.

`blind1_*` are blind round 1 (written from the release notebook alone, without the checks); every misgrade
they exposed was fixed in the checks, and they stay here as regression cases. Where a blind case expected a
wrong `to_device` to lose only its own check, it also loses check_train_step: the reference train_step calls the
learner's to_device, so that train_step really leaves the batch behind (or asks for CUDA) too.
Messages are asserted by substrings that hold on every torch 2.4-2.13 wording (the hints, not torch's text).
"""

TRAIN_STEP_MODEL_ONLY = '''def train_step(model, batch, loss_fn, optimizer, device):
    model.to(device)                 # moves the model... and forgets the batch
    inputs, labels = batch
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), labels)
    loss.backward()
    optimizer.step()
    return loss.item()'''

WEIGHTS_ON_CPU = '''def class_weighted_loss(logits, targets, class_counts):
    counts = torch.tensor(class_counts, dtype=logits.dtype)      # created on the CPU
    weights = counts.sum() / (len(class_counts) * counts)
    return nn.functional.cross_entropy(logits, targets, weight=weights)'''

ONLY_INPUTS_MOVED = '''def to_device(batch, device):
    if isinstance(batch, dict):
        return {**batch, "inputs": batch["inputs"].to(device)}     # labels forgotten
    return type(batch)([batch[0].to(device), *batch[1:]])'''

NO_ZERO_GRAD = '''def train_step(model, batch, loss_fn, optimizer, device):
    inputs, labels = to_device(batch, device)
    loss = loss_fn(model(inputs), labels)
    loss.backward()
    optimizer.step()
    return loss.item()'''

RETURNS_TENSOR = '''def train_step(model, batch, loss_fn, optimizer, device):
    inputs, labels = to_device(batch, device)
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), labels)
    loss.backward()
    optimizer.step()
    return loss'''

ALT_TO_DEVICE = '''def to_device(batch, device):
    if torch.is_tensor(batch):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, dict):
        return {key: to_device(value, device) for key, value in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)([to_device(value, device) for value in batch])
    return batch'''

ALT_LOSS = '''def class_weighted_loss(logits, targets, class_counts):
    counts = torch.as_tensor(class_counts, dtype=torch.float64)   # the formula in float64, then to the logits'
    criterion = nn.CrossEntropyLoss(weight=(counts.sum() / (counts.numel() * counts)).to(logits))
    return criterion(logits, targets)'''

ALT_STEP = '''def train_step(model, batch, loss_fn, optimizer, device):
    x, y = (t.to(device) for t in batch)
    optimizer.zero_grad(set_to_none=True)
    out = model(x)
    loss = loss_fn(out, y)
    loss.backward()
    optimizer.step()
    return float(loss.detach().cpu())'''

ENABLE_GRAD_STEP = '''def train_step(model, batch, loss_fn, optimizer, device):
    with torch.enable_grad():                      # re-enables autograd inside the simulated cuda:0 probe
        inputs, labels = to_device(batch, device)
        optimizer.zero_grad()
        loss = loss_fn(model(inputs), labels)
        loss.backward()
        optimizer.step()
    return loss.item()'''

GRAD_ON_GLOBALLY = '''def train_step(model, batch, loss_fn, optimizer, device):
    torch.set_grad_enabled(True)                   # a bare call: grad mode stays on after the function
    model.train()
    x, y = batch
    x, y = x.to(device), y.to(device)
    optimizer.zero_grad()
    with torch.set_grad_enabled(model.training):
        loss = loss_fn(model(x), y)
    torch.autograd.backward(loss)
    optimizer.step()
    return float(loss)'''

GLOBAL_DEVICE = '''def to_device(batch, device_):
    move = lambda v: v.to(device) if torch.is_tensor(v) else v      # the notebook's `device`, not the argument
    if isinstance(batch, dict):
        return {k: move(v) for k, v in batch.items()}
    return type(batch)(move(v) for v in batch)'''

MANUAL_WEIGHTS_FLOAT32 = '''def class_weighted_loss(logits, targets, class_counts):
    total = sum(class_counts)
    weights = torch.tensor([total / (len(class_counts) * c) for c in class_counts], device=logits.device)  # float32
    picked = -torch.log_softmax(logits, dim=1).gather(1, targets[:, None])[:, 0]
    w = weights[targets]
    return (w * picked).sum() / w.sum()         # float64 logits: promoted to float64; bfloat16: to float32'''

DEVICE = 'two tensors of one operation are on different devices'  # the hint, on every torch wording

VARIANTS = {
    "batch_left_on_cpu": {"cells": {"train_step": TRAIN_STEP_MODEL_ONLY}, "lost": {"check_train_step": DEVICE}},
    "class_weights_on_cpu": {"cells": {"class_weighted_loss": WEIGHTS_ON_CPU}, "lost": {"check_class_weighted_loss": DEVICE}},
    "labels_not_moved": {
        "cells": {"to_device": ONLY_INPUTS_MOVED},
        "lost": {"check_to_device": "but batch[1] on cpu", "check_train_step": DEVICE},
    },
    "no_zero_grad": {"cells": {"train_step": NO_ZERO_GRAD}, "lost": {"check_train_step": "optimizer.zero_grad()"}},
    "returns_tensor": {"cells": {"train_step": RETURNS_TENSOR}, "lost": {"check_train_step": "Python float"}},
    "written_differently": {"cells": {"to_device": ALT_TO_DEVICE, "class_weighted_loss": ALT_LOSS, "train_step": ALT_STEP}, "lost": {}},
    "enable_grad_in_the_step": {"cells": {"train_step": ENABLE_GRAD_STEP}, "lost": {}},
    "grad_mode_switched_on": {"cells": {"train_step": GRAD_ON_GLOBALLY}, "lost": {}},
    "to_device_ignores_its_device": {"cells": {"to_device": GLOBAL_DEVICE},
                                     "lost": {"check_to_device": "still on cpu, where they were",
                                              "check_train_step": DEVICE}},
    "weights_in_float32_by_hand": {"cells": {"class_weighted_loss": MANUAL_WEIGHTS_FLOAT32},
                                   "lost": {"check_class_weighted_loss": "dtype=logits.dtype"}},
}

BLIND1 = {'to_device_recursive': {'to_device': 'def to_device(batch, device):\n'
                                      '    """Return `batch` (tuple, list or dict) with every tensor moved to '
                                      '`device`."""\n'
                                      '    # recursive: also copes with nested containers\n'
                                      '    if torch.is_tensor(batch):\n'
                                      '        return batch.to(device)\n'
                                      '    if isinstance(batch, dict):\n'
                                      '        return type(batch)((key, to_device(value, device)) for key, value in '
                                      'batch.items())\n'
                                      '    if isinstance(batch, (list, tuple)):\n'
                                      '        return type(batch)(to_device(item, device) for item in batch)\n'
                                      '    return batch\n'},
 'to_device_pytree': {'to_device': 'from torch.utils._pytree import tree_map\n'
                                   '\n'
                                   '\n'
                                   'def to_device(batch, device):\n'
                                   '    """Return `batch` (tuple, list or dict) with every tensor moved to '
                                   '`device`."""\n'
                                   '    return tree_map(\n'
                                   '        lambda leaf: leaf.to(device=device, non_blocking=True) if '
                                   'isinstance(leaf, torch.Tensor) else leaf,\n'
                                   '        batch,\n'
                                   '    )\n'},
 'to_device_explicit_loops': {'to_device': 'def to_device(batch, device):\n'
                                           '    """Return `batch` (tuple, list or dict) with every tensor moved to '
                                           '`device`."""\n'
                                           '    if isinstance(batch, dict):\n'
                                           '        moved = {}\n'
                                           '        for key in batch:\n'
                                           '            value = batch[key]\n'
                                           '            if isinstance(value, torch.Tensor):\n'
                                           '                value = value.to(device=device, copy=False)\n'
                                           '            moved[key] = value\n'
                                           '        return moved\n'
                                           '    moved = []\n'
                                           '    for value in batch:\n'
                                           '        if isinstance(value, torch.Tensor):\n'
                                           '            value = value.to(device=device, copy=False)\n'
                                           '        moved.append(value)\n'
                                           '    if isinstance(batch, tuple):\n'
                                           '        return tuple(moved)\n'
                                           '    return moved\n'},
 'to_device_inplace_mutables': {'to_device': 'def to_device(batch, device):\n'
                                             '    """Return `batch` (tuple, list or dict) with every tensor moved to '
                                             '`device`."""\n'
                                             '    if isinstance(batch, dict):\n'
                                             '        for key, value in batch.items():\n'
                                             '            if torch.is_tensor(value):\n'
                                             '                batch[key] = value.to(device)\n'
                                             '        return batch\n'
                                             '    if isinstance(batch, list):\n'
                                             '        for i, value in enumerate(batch):\n'
                                             '            if torch.is_tensor(value):\n'
                                             '                batch[i] = value.to(device)\n'
                                             '        return batch\n'
                                             '    return tuple(v.to(device) if torch.is_tensor(v) else v for v in '
                                             'batch)\n'},
 'to_device_ducktyped_nograd': {'to_device': '@torch.no_grad()\n'
                                             'def to_device(batch, device):\n'
                                             '    """Return `batch` (tuple, list or dict) with every tensor moved to '
                                             '`device`."""\n'
                                             '    move = lambda x: x.to(device) if hasattr(x, "to") else x\n'
                                             '    if isinstance(batch, dict):\n'
                                             '        return {k: move(v) for k, v in batch.items()}\n'
                                             '    return type(batch)(map(move, batch))\n'},
 'to_device_always_list': {'to_device': 'def to_device(batch, device):\n'
                                        '    """Return `batch` (tuple, list or dict) with every tensor moved to '
                                        '`device`."""\n'
                                        '    if isinstance(batch, dict):\n'
                                        '        return {k: v.to(device) if torch.is_tensor(v) else v for k, v in '
                                        'batch.items()}\n'
                                        '    return [b.to(device) if torch.is_tensor(b) else b for b in batch]\n'},
 'to_device_always_tuple': {'to_device': 'def to_device(batch, device):\n'
                                         '    """Return `batch` (tuple, list or dict) with every tensor moved to '
                                         '`device`."""\n'
                                         '    if isinstance(batch, dict):\n'
                                         '        return {k: v.to(device) if torch.is_tensor(v) else v for k, v in '
                                         'batch.items()}\n'
                                         '    return tuple(b.to(device) if torch.is_tensor(b) else b for b in '
                                         'batch)\n'},
 'to_device_not_assigned': {'to_device': 'def to_device(batch, device):\n'
                                         '    """Return `batch` (tuple, list or dict) with every tensor moved to '
                                         '`device`."""\n'
                                         '    items = batch.values() if isinstance(batch, dict) else batch\n'
                                         '    for item in items:\n'
                                         '        if torch.is_tensor(item):\n'
                                         '            item.to(device)          # forgot that .to() on a tensor '
                                         'returns a NEW tensor\n'
                                         '    return batch\n'},
 'to_device_moves_everything': {'to_device': 'def to_device(batch, device):\n'
                                             '    """Return `batch` (tuple, list or dict) with every tensor moved to '
                                             '`device`."""\n'
                                             '    if isinstance(batch, dict):\n'
                                             '        return {k: v.to(device) for k, v in batch.items()}\n'
                                             '    return type(batch)(b.to(device) for b in batch)\n'},
 'to_device_dict_drops_nontensors': {'to_device': 'def to_device(batch, device):\n'
                                                  '    """Return `batch` (tuple, list or dict) with every tensor '
                                                  'moved to `device`."""\n'
                                                  '    if isinstance(batch, dict):\n'
                                                  '        return {k: v.to(device) for k, v in batch.items() if '
                                                  'torch.is_tensor(v)}\n'
                                                  '    return type(batch)(b.to(device) if torch.is_tensor(b) else b '
                                                  'for b in batch)\n'},
 'to_device_first_two_only': {'to_device': 'def to_device(batch, device):\n'
                                           '    """Return `batch` (tuple, list or dict) with every tensor moved to '
                                           '`device`."""\n'
                                           '    if isinstance(batch, dict):\n'
                                           '        return {k: v.to(device) if torch.is_tensor(v) else v for k, v in '
                                           'batch.items()}\n'
                                           '    inputs, labels, *extra = batch\n'
                                           '    moved = [inputs.to(device), labels.to(device), *extra]   # extras '
                                           'are ids/metadata... or so I assumed\n'
                                           '    return type(batch)(moved)\n'},
 'to_device_hardcoded_cuda': {'to_device': 'def to_device(batch, device):\n'
                                           '    """Return `batch` (tuple, list or dict) with every tensor moved to '
                                           '`device`."""\n'
                                           '    if isinstance(batch, dict):\n'
                                           '        return {k: v.cuda() if torch.is_tensor(v) else v for k, v in '
                                           'batch.items()}\n'
                                           '    return type(batch)(b.cuda() if torch.is_tensor(b) else b for b in '
                                           'batch)\n'},
 'to_device_no_dict_branch': {'to_device': 'def to_device(batch, device):\n'
                                           '    """Return `batch` (tuple, list or dict) with every tensor moved to '
                                           '`device`."""\n'
                                           '    return type(batch)(b.to(device) if isinstance(b, torch.Tensor) else '
                                           'b for b in batch)\n'},
 'cwl_python_floats': {'class_weighted_loss': 'def class_weighted_loss(logits, targets, class_counts):\n'
                                              '    """Cross-entropy with balanced class weights, built on the '
                                              'logits\' device."""\n'
                                              '    n_total = sum(class_counts)\n'
                                              '    n_classes = len(class_counts)\n'
                                              '    weights = [n_total / (n_classes * count) for count in '
                                              'class_counts]\n'
                                              '    weight = torch.tensor(weights, device=logits.device, '
                                              'dtype=logits.dtype)\n'
                                              '    return nn.functional.cross_entropy(logits, targets, '
                                              'weight=weight)\n'},
 'cwl_new_tensor': {'class_weighted_loss': 'import torch.nn.functional as F\n'
                                           '\n'
                                           '\n'
                                           'def class_weighted_loss(logits, targets, class_counts):\n'
                                           '    """Cross-entropy with balanced class weights, built on the logits\' '
                                           'device."""\n'
                                           '    counts = logits.new_tensor(class_counts)          # same device and '
                                           'dtype as the logits\n'
                                           '    weight = counts.sum() / (counts.numel() * counts)\n'
                                           '    return F.cross_entropy(logits, targets, weight=weight)\n'},
 'cwl_module_api_to_other': {'class_weighted_loss': 'def class_weighted_loss(logits, targets, class_counts):\n'
                                                    '    """Cross-entropy with balanced class weights, built on the '
                                                    'logits\' device."""\n'
                                                    '    counts = torch.as_tensor(class_counts, '
                                                    'dtype=torch.float64)\n'
                                                    '    weight = (counts.sum() / (len(class_counts) * '
                                                    'counts)).to(logits)\n'
                                                    '    criterion = nn.CrossEntropyLoss(weight=weight)\n'
                                                    '    return criterion(logits, targets)\n'},
 'cwl_manual_gather': {'class_weighted_loss': 'def class_weighted_loss(logits, targets, class_counts):\n'
                                              '    """Cross-entropy with balanced class weights, built on the '
                                              'logits\' device."""\n'
                                              '    total, k = float(sum(class_counts)), len(class_counts)\n'
                                              '    weight = torch.tensor([total / (k * c) for c in class_counts], '
                                              'dtype=logits.dtype, device=logits.device)\n'
                                              '    log_probs = torch.log_softmax(logits, dim=1)\n'
                                              '    picked = log_probs.gather(1, targets.unsqueeze(1)).squeeze(1)\n'
                                              '    w = weight[targets]\n'
                                              '    return -(w * picked).sum() / w.sum()\n'},
 'cwl_empty_fill_nll': {'class_weighted_loss': 'def class_weighted_loss(logits, targets, class_counts):\n'
                                               '    """Cross-entropy with balanced class weights, built on the '
                                               'logits\' device."""\n'
                                               '    n_classes = len(class_counts)\n'
                                               '    n_total = sum(class_counts)\n'
                                               '    weight = torch.empty(n_classes, device=logits.device, '
                                               'dtype=logits.dtype)\n'
                                               '    for c in range(n_classes):\n'
                                               '        weight[c] = n_total / (n_classes * class_counts[c])\n'
                                               '    return '
                                               'torch.nn.functional.nll_loss(torch.nn.functional.log_softmax(logits, '
                                               'dim=-1), targets, weight=weight)\n'},
 'cwl_weights_on_cpu': {'class_weighted_loss': 'def class_weighted_loss(logits, targets, class_counts):\n'
                                               '    """Cross-entropy with balanced class weights, built on the '
                                               'logits\' device."""\n'
                                               '    n_total, n_classes = sum(class_counts), len(class_counts)\n'
                                               '    weight = torch.tensor([n_total / (n_classes * c) for c in '
                                               'class_counts])\n'
                                               '    return nn.functional.cross_entropy(logits, targets, '
                                               'weight=weight)\n'},
 'cwl_device_but_not_dtype': {'class_weighted_loss': 'def class_weighted_loss(logits, targets, class_counts):\n'
                                                     '    """Cross-entropy with balanced class weights, built on the '
                                                     'logits\' device."""\n'
                                                     '    n_total, n_classes = sum(class_counts), len(class_counts)\n'
                                                     '    weight = torch.tensor([n_total / (n_classes * c) for c in '
                                                     'class_counts], device=logits.device)\n'
                                                     '    return nn.functional.cross_entropy(logits, targets, '
                                                     'weight=weight)\n'},
 'cwl_global_device': {'class_weighted_loss': 'def class_weighted_loss(logits, targets, class_counts):\n'
                                              '    """Cross-entropy with balanced class weights, built on the '
                                              'logits\' device."""\n'
                                              '    n_total, n_classes = sum(class_counts), len(class_counts)\n'
                                              '    weight = torch.tensor([n_total / (n_classes * c) for c in '
                                              'class_counts], device=device, dtype=logits.dtype)\n'
                                              '    return nn.functional.cross_entropy(logits, targets, '
                                              'weight=weight)\n'},
 'cwl_cuda_if_available': {'class_weighted_loss': 'def class_weighted_loss(logits, targets, class_counts):\n'
                                                  '    """Cross-entropy with balanced class weights, built on the '
                                                  'logits\' device."""\n'
                                                  '    n_total, n_classes = sum(class_counts), len(class_counts)\n'
                                                  '    weight = torch.FloatTensor([n_total / (n_classes * c) for c '
                                                  'in class_counts])\n'
                                                  '    if torch.cuda.is_available():\n'
                                                  '        weight = weight.cuda()\n'
                                                  '    return nn.functional.cross_entropy(logits, targets, '
                                                  'weight=weight)\n'},
 'cwl_inverted_weights': {'class_weighted_loss': 'def class_weighted_loss(logits, targets, class_counts):\n'
                                                 '    """Cross-entropy with balanced class weights, built on the '
                                                 'logits\' device."""\n'
                                                 '    n_total, n_classes = sum(class_counts), len(class_counts)\n'
                                                 '    weight = torch.tensor([n_classes * c / n_total for c in '
                                                 'class_counts], device=logits.device, dtype=logits.dtype)\n'
                                                 '    return nn.functional.cross_entropy(logits, targets, '
                                                 'weight=weight)\n'},
 'cwl_floor_division': {'class_weighted_loss': 'def class_weighted_loss(logits, targets, class_counts):\n'
                                               '    """Cross-entropy with balanced class weights, built on the '
                                               'logits\' device."""\n'
                                               '    n_total, n_classes = sum(class_counts), len(class_counts)\n'
                                               '    weight = torch.tensor([n_total // (n_classes * c) for c in '
                                               'class_counts], device=logits.device, dtype=logits.dtype)\n'
                                               '    return nn.functional.cross_entropy(logits, targets, '
                                               'weight=weight)\n'},
 'cwl_returns_item': {'class_weighted_loss': 'def class_weighted_loss(logits, targets, class_counts):\n'
                                             '    """Cross-entropy with balanced class weights, built on the '
                                             'logits\' device."""\n'
                                             '    n_total, n_classes = sum(class_counts), len(class_counts)\n'
                                             '    weight = torch.tensor([n_total / (n_classes * c) for c in '
                                             'class_counts], device=logits.device, dtype=logits.dtype)\n'
                                             '    return nn.functional.cross_entropy(logits, targets, '
                                             'weight=weight).item()\n'},
 'cwl_mean_over_batch': {'class_weighted_loss': 'def class_weighted_loss(logits, targets, class_counts):\n'
                                                '    """Cross-entropy with balanced class weights, built on the '
                                                'logits\' device."""\n'
                                                '    n_total, n_classes = sum(class_counts), len(class_counts)\n'
                                                '    weight = torch.tensor([n_total / (n_classes * c) for c in '
                                                'class_counts], device=logits.device, dtype=logits.dtype)\n'
                                                '    per_sample = nn.functional.cross_entropy(logits, targets, '
                                                'reduction="none")\n'
                                                '    return (weight[targets] * per_sample).mean()\n'},
 'cwl_batch_bincount': {'class_weighted_loss': 'def class_weighted_loss(logits, targets, class_counts):\n'
                                               '    """Cross-entropy with balanced class weights, built on the '
                                               'logits\' device."""\n'
                                               '    n_classes = logits.shape[1]\n'
                                               '    counts = torch.bincount(targets, '
                                               'minlength=n_classes).to(logits.dtype).clamp(min=1)\n'
                                               '    weight = counts.sum() / (n_classes * counts)\n'
                                               '    return nn.functional.cross_entropy(logits, targets, '
                                               'weight=weight)\n'},
 'cwl_everything_to_cpu': {'class_weighted_loss': 'def class_weighted_loss(logits, targets, class_counts):\n'
                                                  '    """Cross-entropy with balanced class weights, built on the '
                                                  'logits\' device."""\n'
                                                  '    n_total, n_classes = sum(class_counts), len(class_counts)\n'
                                                  '    weight = torch.tensor([n_total / (n_classes * c) for c in '
                                                  'class_counts], dtype=logits.dtype)\n'
                                                  '    return nn.functional.cross_entropy(logits.cpu(), '
                                                  'targets.cpu(), weight=weight)\n'},
 'train_step_tutorial_style': {'train_step': 'def train_step(model, batch, loss_fn, optimizer, device):\n'
                                             '    """One training step on `device`; returns the loss as a float."""\n'
                                             '    model.train()\n'
                                             '    inputs, labels = batch\n'
                                             '    inputs = inputs.to(device)\n'
                                             '    labels = labels.to(device)\n'
                                             '\n'
                                             '    optimizer.zero_grad()\n'
                                             '    outputs = model(inputs)\n'
                                             '    loss = loss_fn(outputs, labels)\n'
                                             '    loss.backward()\n'
                                             '    optimizer.step()\n'
                                             '\n'
                                             '    return loss.item()\n'},
 'train_step_nonblocking_float': {'train_step': 'def train_step(model, batch, loss_fn, optimizer, device):\n'
                                                '    """One training step on `device`; returns the loss as a '
                                                'float."""\n'
                                                '    inputs, labels = (t.to(device, non_blocking=True) for t in '
                                                'batch)\n'
                                                '    optimizer.zero_grad(set_to_none=True)\n'
                                                '    loss = loss_fn(model(inputs), labels)\n'
                                                '    loss.backward()\n'
                                                '    optimizer.step()\n'
                                                '    return float(loss)\n'},
 'train_step_param_device_model_zero_grad': {'train_step': 'def train_step(model, batch, loss_fn, optimizer, '
                                                           'device):\n'
                                                           '    """One training step on `device`; returns the loss '
                                                           'as a float."""\n'
                                                           '    target_device = next(model.parameters()).device      '
                                                           '# the model is already on `device`\n'
                                                           '    x, y = batch[0].to(device=target_device), '
                                                           'batch[1].to(device=target_device)\n'
                                                           '    model.zero_grad()\n'
                                                           '    loss = loss_fn(model(x), y)\n'
                                                           '    loss.backward()\n'
                                                           '    optimizer.step()\n'
                                                           '    return loss.detach().item()\n'},
 'train_step_reuses_to_device': {'train_step': 'def train_step(model, batch, loss_fn, optimizer, device):\n'
                                               '    """One training step on `device`; returns the loss as a '
                                               'float."""\n'
                                               '    inputs, labels = to_device(batch, device)\n'
                                               '    optimizer.zero_grad()\n'
                                               '    loss = loss_fn(model(inputs), labels)\n'
                                               '    loss.backward()\n'
                                               '    optimizer.step()\n'
                                               '    return loss.item()\n'},
 'train_step_set_grad_enabled': {'train_step': 'def train_step(model, batch, loss_fn, optimizer, device):\n'
                                               '    """One training step on `device`; returns the loss as a '
                                               'float."""\n'
                                               '    inputs, labels = batch\n'
                                               '    inputs, labels = inputs.to(device), labels.to(device)\n'
                                               '    optimizer.zero_grad()\n'
                                               '    with torch.set_grad_enabled(True):\n'
                                               '        outputs = model(inputs)\n'
                                               '        loss = loss_fn(outputs, labels)\n'
                                               '        loss.backward()\n'
                                               '        optimizer.step()\n'
                                               '    return loss.item()\n'},
 'train_step_closure': {'train_step': 'def train_step(model, batch, loss_fn, optimizer, device):\n'
                                      '    """One training step on `device`; returns the loss as a float."""\n'
                                      '    inputs, labels = batch\n'
                                      '    inputs, labels = inputs.to(device), labels.to(device)\n'
                                      '\n'
                                      '    def closure():\n'
                                      '        optimizer.zero_grad()\n'
                                      '        loss = loss_fn(model(inputs), labels)\n'
                                      '        loss.backward()\n'
                                      '        return loss\n'
                                      '\n'
                                      '    loss = optimizer.step(closure)\n'
                                      '    return loss.item()\n'},
 'train_step_numpy_float': {'train_step': 'def train_step(model, batch, loss_fn, optimizer, device):\n'
                                          '    """One training step on `device`; returns the loss as a float."""\n'
                                          '    inputs, labels = batch\n'
                                          '    inputs = inputs.to(device)\n'
                                          '    labels = labels.to(device)\n'
                                          '    optimizer.zero_grad()\n'
                                          '    loss = loss_fn(model(inputs), labels)\n'
                                          '    loss.backward()\n'
                                          '    optimizer.step()\n'
                                          '    return float(loss.detach().cpu().numpy())\n'},
 'train_step_to_not_assigned': {'train_step': 'def train_step(model, batch, loss_fn, optimizer, device):\n'
                                              '    """One training step on `device`; returns the loss as a '
                                              'float."""\n'
                                              '    inputs, labels = batch\n'
                                              '    inputs.to(device)\n'
                                              '    labels.to(device)\n'
                                              '    optimizer.zero_grad()\n'
                                              '    loss = loss_fn(model(inputs), labels)\n'
                                              '    loss.backward()\n'
                                              '    optimizer.step()\n'
                                              '    return loss.item()\n'},
 'train_step_labels_left_behind': {'train_step': 'def train_step(model, batch, loss_fn, optimizer, device):\n'
                                                 '    """One training step on `device`; returns the loss as a '
                                                 'float."""\n'
                                                 '    inputs, labels = batch\n'
                                                 '    inputs = inputs.to(device)\n'
                                                 '    optimizer.zero_grad()\n'
                                                 '    loss = loss_fn(model(inputs), labels)\n'
                                                 '    loss.backward()\n'
                                                 '    optimizer.step()\n'
                                                 '    return loss.item()\n'},
 'train_step_returns_tensor': {'train_step': 'def train_step(model, batch, loss_fn, optimizer, device):\n'
                                             '    """One training step on `device`; returns the loss as a float."""\n'
                                             '    inputs, labels = batch[0].to(device), batch[1].to(device)\n'
                                             '    optimizer.zero_grad()\n'
                                             '    loss = loss_fn(model(inputs), labels)\n'
                                             '    loss.backward()\n'
                                             '    optimizer.step()\n'
                                             '    return loss\n'},
 'train_step_no_zero_grad': {'train_step': 'def train_step(model, batch, loss_fn, optimizer, device):\n'
                                           '    """One training step on `device`; returns the loss as a float."""\n'
                                           '    inputs, labels = batch[0].to(device), batch[1].to(device)\n'
                                           '    loss = loss_fn(model(inputs), labels)\n'
                                           '    loss.backward()\n'
                                           '    optimizer.step()\n'
                                           '    return loss.item()\n'},
 'train_step_zero_grad_at_end': {'train_step': 'def train_step(model, batch, loss_fn, optimizer, device):\n'
                                               '    """One training step on `device`; returns the loss as a '
                                               'float."""\n'
                                               '    inputs, labels = batch[0].to(device), batch[1].to(device)\n'
                                               '    loss = loss_fn(model(inputs), labels)\n'
                                               '    loss.backward()\n'
                                               '    optimizer.step()\n'
                                               '    optimizer.zero_grad()        # "clean up for the next step"\n'
                                               '    return loss.item()\n'},
 'train_step_zero_between_backward_and_step': {'train_step': 'def train_step(model, batch, loss_fn, optimizer, '
                                                             'device):\n'
                                                             '    """One training step on `device`; returns the loss '
                                                             'as a float."""\n'
                                                             '    inputs, labels = batch[0].to(device), '
                                                             'batch[1].to(device)\n'
                                                             '    loss = loss_fn(model(inputs), labels)\n'
                                                             '    loss.backward()\n'
                                                             '    optimizer.zero_grad()\n'
                                                             '    optimizer.step()\n'
                                                             '    return loss.item()\n'},
 'train_step_step_before_backward': {'train_step': 'def train_step(model, batch, loss_fn, optimizer, device):\n'
                                                   '    """One training step on `device`; returns the loss as a '
                                                   'float."""\n'
                                                   '    inputs, labels = batch[0].to(device), batch[1].to(device)\n'
                                                   '    optimizer.zero_grad()\n'
                                                   '    loss = loss_fn(model(inputs), labels)\n'
                                                   '    optimizer.step()\n'
                                                   '    loss.backward()\n'
                                                   '    return loss.item()\n'},
 'train_step_reports_loss_after_update': {'train_step': 'def train_step(model, batch, loss_fn, optimizer, device):\n'
                                                        '    """One training step on `device`; returns the loss as a '
                                                        'float."""\n'
                                                        '    inputs, labels = batch[0].to(device), '
                                                        'batch[1].to(device)\n'
                                                        '    optimizer.zero_grad()\n'
                                                        '    loss_fn(model(inputs), labels).backward()\n'
                                                        '    optimizer.step()\n'
                                                        '    with torch.no_grad():\n'
                                                        '        return loss_fn(model(inputs), labels).item()\n'},
 'train_step_hardcoded_cuda': {'train_step': 'def train_step(model, batch, loss_fn, optimizer, device):\n'
                                             '    """One training step on `device`; returns the loss as a float."""\n'
                                             '    inputs, labels = batch\n'
                                             '    inputs, labels = inputs.cuda(), labels.cuda()\n'
                                             '    optimizer.zero_grad()\n'
                                             '    loss = loss_fn(model(inputs), labels)\n'
                                             '    loss.backward()\n'
                                             '    optimizer.step()\n'
                                             '    return loss.item()\n'},
 'train_step_forward_in_no_grad': {'train_step': 'def train_step(model, batch, loss_fn, optimizer, device):\n'
                                                 '    """One training step on `device`; returns the loss as a '
                                                 'float."""\n'
                                                 '    inputs, labels = batch[0].to(device), batch[1].to(device)\n'
                                                 '    optimizer.zero_grad()\n'
                                                 '    with torch.no_grad():                  # "saves memory"\n'
                                                 '        outputs = model(inputs)\n'
                                                 '    loss = loss_fn(outputs, labels)\n'
                                                 '    loss.backward()\n'
                                                 '    optimizer.step()\n'
                                                 '    return loss.item()\n'}}
BLIND1_LOST = {'cwl_new_tensor': {'check_class_weighted_loss': "past float16's largest number"},  # (since round 14)
               'to_device_always_list': {'check_to_device': "expected a tuple (keep the batch's type"},
 'to_device_always_tuple': {'check_to_device': "expected a list (keep the batch's type"},
 'to_device_not_assigned': {'check_to_device': 'still on cpu, where they were',
                            'check_train_step': 'two tensors of one operation are on different devices'},
 'to_device_moves_everything': {'check_to_device': 'raised AttributeError'},
 'to_device_dict_drops_nontensors': {'check_to_device': 'expected the same items'},
 'to_device_first_two_only': {'check_to_device': 'but batch[2] on cpu'},
 'to_device_hardcoded_cuda': {'check_to_device': 'the code asked for CUDA itself',
                              'check_train_step': 'the code asked for CUDA itself'},
 'to_device_no_dict_branch': {'check_to_device': 'raised ValueError'},
 'cwl_weights_on_cpu': {'check_class_weighted_loss': 'with float64 logits (float32 ones worked)'},
 'cwl_device_but_not_dtype': {'check_class_weighted_loss': "create the weight tensor with the logits' dtype"},
 'cwl_global_device': {'check_class_weighted_loss': 'two tensors of one operation are on different devices'},
 'cwl_cuda_if_available': {'check_class_weighted_loss': 'with float64 logits (float32 ones worked)'},
 'cwl_inverted_weights': {'check_class_weighted_loss': 'weight class c by n_total / (n_classes * class_counts[c])'},
 'cwl_floor_division': {'check_class_weighted_loss': 'weight class c by n_total / (n_classes * class_counts[c])'},
 'cwl_returns_item': {'check_class_weighted_loss': 'expected a tensor'},
 'cwl_mean_over_batch': {'check_class_weighted_loss': 'its mean divides by the sum of the picked weights'},
 'cwl_batch_bincount': {'check_class_weighted_loss': 'the loss for float32 logits on cpu'},
 'cwl_everything_to_cpu': {'check_class_weighted_loss': 'the loss on a simulated cuda:0: expected on cuda:0'},
 'train_step_to_not_assigned': {'check_train_step': 'two tensors of one operation are on different devices'},
 'train_step_labels_left_behind': {'check_train_step': 'two tensors of one operation are on different devices'},
 'train_step_returns_tensor': {'check_train_step': 'the loss as a Python float'},
 'train_step_no_zero_grad': {'check_train_step': 'PLUS the stale ones already in .grad'},
 'train_step_zero_grad_at_end': {'check_train_step': 'PLUS the stale ones already in .grad'},
 'train_step_zero_between_backward_and_step': {'check_train_step': 'parameters that did not change'},
 'train_step_step_before_backward': {'check_train_step': 'parameters that did not change'},
 'train_step_reports_loss_after_update': {'check_train_step': 'the loss of the batch before the step'},
 'train_step_hardcoded_cuda': {'check_train_step': 'the code asked for CUDA itself'},
 'train_step_forward_in_no_grad': {'check_train_step': 'has no graph back to the parameters'}}
for _name, _cells in BLIND1.items():
    VARIANTS[f"blind1_{_name}"] = {"cells": _cells, "lost": BLIND1_LOST.get(_name, {})}

# Blind round 2: the cases it misgraded (now fixed in the checks), and cases whose message misled.
BLIND2 = {
    "to_device_skips_scalar_tensors": ('to_device', '''def to_device(batch, device):
    """Return `batch` (tuple, list or dict) with every tensor moved to `device`."""
    def move(x):
        if torch.is_tensor(x) and x.dim() > 0:
            return x.to(device)
        return x

    if isinstance(batch, dict):
        return {k: move(v) for k, v in batch.items()}
    return type(batch)(move(x) for x in batch)''', {"check_to_device": "is a 0-d tensor"}),
    "cwl_mutates_class_counts": ('class_weighted_loss', '''def class_weighted_loss(logits, targets, class_counts):
    """Cross-entropy with balanced class weights, built on the logits' device."""
    n_total, k = sum(class_counts), len(class_counts)
    for c in range(k):
        class_counts[c] = n_total / (k * class_counts[c])      # reuse the list for the weights
    weight = torch.tensor(class_counts, device=logits.device, dtype=logits.dtype)
    return nn.functional.cross_entropy(logits, targets, weight=weight)''',
                                 {"check_class_weighted_loss": "the class_counts list after the call: expected unchanged"}),
    # the hint blamed the weights' formula; the loss is the weighted one, summed
    "cwl_sum_reduction": ('class_weighted_loss', '''def class_weighted_loss(logits, targets, class_counts):
    """Cross-entropy with balanced class weights, built on the logits' device."""
    n_total, k = sum(class_counts), len(class_counts)
    weight = torch.tensor([n_total / (k * c) for c in class_counts], device=logits.device, dtype=logits.dtype)
    return nn.functional.cross_entropy(logits, targets, weight=weight, reduction="sum")''',
                          {"check_class_weighted_loss": "which is the weighted cross-entropy summed over the batch"}),
    # the hint blamed the weights' formula; the cause (nll_loss on raw logits) is not one the check can name
    "cwl_nll_without_log_softmax": ('class_weighted_loss', '''def class_weighted_loss(logits, targets, class_counts):
    """Cross-entropy with balanced class weights, built on the logits' device."""
    n_total, k = sum(class_counts), len(class_counts)
    weight = torch.tensor([n_total / (k * c) for c in class_counts], device=logits.device, dtype=logits.dtype)
    return nn.functional.nll_loss(logits, targets, weight=weight)''',
                                    {"check_class_weighted_loss": "Expected: weight class c by n_total"}),
}
for _name, (_cell, _source, _lost) in BLIND2.items():
    VARIANTS[f"blind2_{_name}"] = {"cells": {_cell: _source}, "lost": _lost}

# Blind round 3: the cases it misgraded (now fixed in the check), and cases whose message misled.
BLIND3 = {
    # correct: skipping a non-finite loss changes nothing on real data; the simulated cuda:0's .item() is a
    # placeholder nan, so there it skips backward() (the probe failed it for that)
    "train_step_guard_nonfinite": ('train_step', '''import math


def train_step(model, batch, loss_fn, optimizer, device):
    """One training step on `device`; returns the loss as a float."""
    inputs, labels = batch[0].to(device), batch[1].to(device)
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), labels)
    value = loss.item()
    if not math.isfinite(value):
        print(f"non-finite loss {value}: step skipped")
        return value
    loss.backward()
    optimizer.step()
    return value''', {}),
    # the check's optimizer was a fresh SGD(lr=0.1): its first momentum step equals a plain one
    "train_step_builds_own_optimizer": ('train_step', '''def train_step(model, batch, loss_fn, optimizer, device):
    """One training step on `device`; returns the loss as a float."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    inputs, labels = batch
    inputs, labels = inputs.to(device), labels.to(device)
    opt.zero_grad()
    loss = loss_fn(model(inputs), labels)
    loss.backward()
    opt.step()
    return loss.item()''', {"check_train_step": "changed without the given optimizer: its step() was not called"}),
    "train_step_manual_sgd_update": ('train_step', '''def train_step(model, batch, loss_fn, optimizer, device):
    """One training step on `device`; returns the loss as a float."""
    inputs, labels = batch
    inputs, labels = inputs.to(device), labels.to(device)
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), labels)
    loss.backward()
    lr = optimizer.param_groups[0]["lr"]
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p -= lr * p.grad
    return loss.item()''', {"check_train_step": "changed without the given optimizer: its step() was not called"}),
    # the hint said "call loss.backward()", which it did: the gradient stopped at the detached logits
    "train_step_detached_logits_requires_grad": ('train_step', '''def train_step(model, batch, loss_fn, optimizer, device):
    """One training step on `device`; returns the loss as a float."""
    inputs, labels = batch
    inputs, labels = inputs.to(device), labels.to(device)
    optimizer.zero_grad()
    logits = model(inputs).detach().requires_grad_()   # detached for the stats, made differentiable again
    loss = loss_fn(logits, labels)
    loss.backward()
    optimizer.step()
    return loss.item()''', {"check_train_step": "no gradient reached them, backward() computed none"}),
    # the hint blamed the weights' dtype: the weights match the logits, which were cast to float32 first
    "cwl_logits_cast_to_float32": ('class_weighted_loss', '''def class_weighted_loss(logits, targets, class_counts):
    """Cross-entropy with balanced class weights, built on the logits' device."""
    logits = logits.float()
    n_total, n_classes = sum(class_counts), len(class_counts)
    weight = torch.tensor([n_total / (n_classes * c) for c in class_counts],
                          device=logits.device, dtype=logits.dtype)
    return nn.functional.cross_entropy(logits, targets, weight=weight)''',
                                   {"check_class_weighted_loss": "no conversion of the logits or of the loss"}),
}
for _name, (_cell, _source, _lost) in BLIND3.items():
    VARIANTS[f"blind3_{_name}"] = {"cells": {_cell: _source}, "lost": _lost}

# Blind round 4: the cases it misgraded (now fixed in the check, or the expectation judged against the text).
BLIND4 = {
    # a NumPy array is a non-tensor item: the text says to leave those as they are (the sweep had none)
    "to_device_converts_numpy_arrays": ('to_device', '''import numpy as np

def to_device(batch, device):
    """Return `batch` (tuple, list or dict) with every tensor moved to `device`."""
    def move(v):
        if isinstance(v, np.ndarray):          # arrays from a NumPy dataset: make them tensors too
            v = torch.from_numpy(v)
        return v.to(device) if isinstance(v, torch.Tensor) else v
    if isinstance(batch, dict):
        return {k: move(v) for k, v in batch.items()}
    return type(batch)(move(v) for v in batch)''', {"check_to_device": "move only the tensors"}),
    # judges the whole batch by its first tensor: a batch that arrives partly moved keeps the rest behind
    "to_device_early_exit_first_tensor_on_device": ('to_device', '''def to_device(batch, device):
    """Return `batch` (tuple, list or dict) with every tensor moved to `device`."""
    values = list(batch.values()) if isinstance(batch, dict) else list(batch)
    tensors = [v for v in values if torch.is_tensor(v)]
    if tensors and tensors[0].device == torch.device(device):
        return batch                      # the inputs are already there: nothing to do
    move = lambda v: v.to(device) if torch.is_tensor(v) else v
    if isinstance(batch, dict):
        return {k: move(v) for k, v in batch.items()}
    return type(batch)(move(v) for v in batch)''', {"check_to_device": "already on cuda:0, the rest elsewhere"}),
    # the formula in the logits' dtype: judged correct in round 4 (float16 was not among the dtypes); since round 14
    # the text asks the weights be computed before the conversion, and float16 logits with counts past 65504 show it
    "cwl_counts_in_logits_dtype": ('class_weighted_loss', '''def class_weighted_loss(logits, targets, class_counts):
    """Cross-entropy with balanced class weights, built on the logits' device."""
    counts = torch.tensor(class_counts, device=logits.device, dtype=logits.dtype)
    weight = counts.sum() / (counts.numel() * counts)      # the formula, all in the logits' dtype
    return nn.functional.cross_entropy(logits, targets, weight=weight)''',
                                   {"check_class_weighted_loss": "past float16's largest number"}),
    # leaves autograd off for the caller (the text now says it must still be on when train_step returns)
    "train_step_leaves_grad_disabled": ('train_step', '''def train_step(model, batch, loss_fn, optimizer, device):
    """One training step on `device`; returns the loss as a float."""
    torch.set_grad_enabled(True)
    inputs, labels = batch
    inputs, labels = inputs.to(device), labels.to(device)
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), labels)
    loss.backward()
    optimizer.step()
    torch.set_grad_enabled(False)          # done with autograd for this step
    return loss.item()''', {"check_train_step": "autograd when train_step returns"}),
}
for _name, (_cell, _source, _lost) in BLIND4.items():
    VARIANTS[f"blind4_{_name}"] = {"cells": {_cell: _source}, "lost": _lost}

# blind round 5 (misgraded before the fix)
BLIND5 = {
    # reduces `device` to 'cuda' or 'cpu': caught on the meta device
    'to_device_only_cuda_or_cpu': ('to_device', '''def to_device(batch, device):
    """Return `batch` (tuple, list or dict) with every tensor moved to `device`."""
    target = "cuda" if "cuda" in str(device) else "cpu"     # a GPU or the CPU
    move = lambda v: v.to(target) if isinstance(v, torch.Tensor) else v
    if isinstance(batch, dict):
        return {k: move(v) for k, v in batch.items()}
    return type(batch)(move(v) for v in batch)''', {'check_to_device': 'expected every tensor on cuda:1'}),
    # reseeds the caller's global RNG at every step
    'train_step_reseeds_global_rng': ('train_step', '''def train_step(model, batch, loss_fn, optimizer, device):
    """One training step on `device`; returns the loss as a float."""
    torch.manual_seed(0)                       # reproducible steps
    inputs, labels = batch
    inputs, labels = inputs.to(device), labels.to(device)
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), labels)
    loss.backward()
    optimizer.step()
    return loss.item()''', {'check_train_step': 'reseeded with torch.manual_seed(0)'}),
    # leaves anomaly detection on for the caller
    'train_step_anomaly_mode_left_on': ('train_step', '''def train_step(model, batch, loss_fn, optimizer, device):
    """One training step on `device`; returns the loss as a float."""
    torch.autograd.set_detect_anomaly(True)    # catch NaNs in backward early
    inputs, labels = batch
    inputs, labels = inputs.to(device), labels.to(device)
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), labels)
    loss.backward()
    optimizer.step()
    return loss.item()''', {'check_train_step': 'anomaly detection when train_step returns'}),
    # casts the labels to int64: a float-target loss (MSE) gets truncated targets
    'train_step_labels_forced_long': ('train_step', '''def train_step(model, batch, loss_fn, optimizer, device):
    """One training step on `device`; returns the loss as a float."""
    inputs, labels = batch
    inputs = inputs.to(device)
    labels = labels.to(device, dtype=torch.long)   # class ids must be int64 for the loss
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), labels)
    loss.backward()
    optimizer.step()
    return loss.item()''', {'check_train_step': 'the labels that reached loss_fn'}),
    # unfreezes the layers the caller froze
    'train_step_unfreezes_model': ('train_step', '''def train_step(model, batch, loss_fn, optimizer, device):
    """One training step on `device`; returns the loss as a float."""
    model.requires_grad_(True)                 # make sure every weight gets a gradient
    inputs, labels = batch
    inputs, labels = inputs.to(device), labels.to(device)
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), labels)
    loss.backward()
    optimizer.step()
    return loss.item()''', {'check_train_step': 'requires_grad=True on 0.weight'}),
}
for _name, (_cell, _source, _lost) in BLIND5.items():
    VARIANTS[f"blind5_{_name}"] = {"cells": {_cell: _source}, "lost": _lost}

BLIND6 = {  # blind round 6: cases that were misgraded, graded right since
    # only CPU tensors are moved: a tensor already on another device (the simulated cuda:0, meta, another GPU) stays
    'to_device_only_cpu_tensors': {'cells': {'to_device': 'def to_device(batch, device):\n    """Return `batch` (tuple, list or dict) with every tensor moved to `device`."""\n    def move(v):\n        # the loader hands over CPU tensors: those are the ones to move\n        if isinstance(v, torch.Tensor) and v.device.type == "cpu":\n            return v.to(device)\n        return v\n    if isinstance(batch, dict):\n        return {k: move(v) for k, v in batch.items()}\n    return type(batch)(move(v) for v in batch)\n'},
        'lost': {'check_to_device': "to_device's result for a tuple batch"}},
    # a deep copy of the batch, then the tensors replaced: the non-tensor items come back as copies, not as they are
    'to_device_deepcopy_then_assign': {'cells': {'to_device': 'import copy\n\n\ndef to_device(batch, device):\n    """Return `batch` (tuple, list or dict) with every tensor moved to `device`."""\n    if isinstance(batch, tuple):\n        return tuple(to_device(list(batch), device))\n    out = copy.deepcopy(batch)\n    keys = list(out) if isinstance(out, dict) else range(len(out))\n    for k in keys:\n        if torch.is_tensor(out[k]):\n            out[k] = out[k].to(device)\n    return out\n'},
        'lost': {'check_to_device': "batch['index']"}},
    # a second forward pass in training mode: a model with BatchNorm updates its running statistics twice (and one w
    'train_step_second_forward_for_accuracy': {'cells': {'train_step': 'def train_step(model, batch, loss_fn, optimizer, device):\n    """One training step on `device`; returns the loss as a float."""\n    inputs, labels = batch\n    inputs, labels = inputs.to(device), labels.to(device)\n    optimizer.zero_grad()\n    loss = loss_fn(model(inputs), labels)\n    loss.backward()\n    optimizer.step()\n    with torch.no_grad():                       # accuracy after the update, for the log\n        outputs = model(inputs)\n        if outputs.dim() == 2 and outputs.shape[1] > 1 and labels.dtype == torch.long:\n            acc = (outputs.argmax(1) == labels).float().mean()\n    return loss.item()\n'},
        'lost': {'check_train_step': 'model(...) calls in one step'}},
    # the caller's model is left in eval mode (model.training becomes False): breaks 'Change nothing else of the cal
    'train_step_leaves_eval_mode': {'cells': {'train_step': 'def train_step(model, batch, loss_fn, optimizer, device):\n    """One training step on `device`; returns the loss as a float."""\n    model.train()\n    inputs, labels = batch\n    inputs, labels = inputs.to(device), labels.to(device)\n    optimizer.zero_grad()\n    loss = loss_fn(model(inputs), labels)\n    loss.backward()\n    optimizer.step()\n    model.eval()                                # ready for validation\n    return loss.item()\n'},
        'lost': {'check_train_step': "the model's mode when train_step returns (model.training)"}},
    # squeeze() changes what loss_fn receives: a batch of one gives (C,) logits against (1,) labels (cross-entropy r
    'train_step_squeezes_outputs': {'cells': {'train_step': 'def train_step(model, batch, loss_fn, optimizer, device):\n    """One training step on `device`; returns the loss as a float."""\n    inputs, labels = batch\n    inputs, labels = inputs.to(device), labels.to(device)\n    optimizer.zero_grad()\n    outputs = model(inputs).squeeze()            # drop stray size-1 dims\n    loss = loss_fn(outputs, labels)\n    loss.backward()\n    optimizer.step()\n    return loss.item()\n'},
        'lost': {'check_train_step': '`train_step` raised'}},
    # a global setting (torch's float32 matmul precision, 'highest' by default) is changed and left changed for the 
    'train_step_sets_matmul_precision': {'cells': {'train_step': 'def train_step(model, batch, loss_fn, optimizer, device):\n    """One training step on `device`; returns the loss as a float."""\n    torch.set_float32_matmul_precision("high")       # TF32 matmuls: faster on recent GPUs\n    inputs, labels = batch\n    inputs, labels = inputs.to(device), labels.to(device)\n    optimizer.zero_grad()\n    loss = loss_fn(model(inputs), labels)\n    loss.backward()\n    optimizer.step()\n    return loss.item()\n'},
        'lost': {'check_train_step': "torch's global settings when train_step returns"}},
}
for _name, _spec in BLIND6.items():
    VARIANTS[f"blind6_{_name}"] = _spec

BLIND7 = {  # blind round 7: cases that were misgraded, graded right since
    # only the first parameter group is zeroed: with an optimizer of several groups (a head with its own learning ra
    'train_step_zeroes_first_group_only': {'cells': {'train_step': 'def train_step(model, batch, loss_fn, optimizer, device):\n    """One training step on `device`; returns the loss as a float."""\n    inputs, labels = batch\n    inputs, labels = inputs.to(device), labels.to(device)\n    for p in optimizer.param_groups[0]["params"]:      # clear the gradients of the optimizer\'s parameters\n        p.grad = None\n    loss = loss_fn(model(inputs), labels)\n    loss.backward()\n    optimizer.step()\n    return loss.item()\n'},
        'lost': {'check_train_step': 'the parameters after train_step on cpu'}},
    # anomaly detection is switched off on return whatever it was on entry: a caller who had it on finds it off: bre
    'train_step_anomaly_forced_off': {'cells': {'train_step': 'def train_step(model, batch, loss_fn, optimizer, device):\n    """One training step on `device`; returns the loss as a float."""\n    torch.autograd.set_detect_anomaly(True)      # a readable traceback if backward fails\n    inputs, labels = batch[0].to(device), batch[1].to(device)\n    optimizer.zero_grad()\n    loss = loss_fn(model(inputs), labels)\n    loss.backward()\n    optimizer.step()\n    torch.autograd.set_detect_anomaly(False)     # back to normal\n    return loss.item()\n'},
        'lost': {'check_train_step': "autograd's anomaly detection when train_step returns (torch.is_anomaly_enabled())"}},
}
for _name, _spec in BLIND7.items():
    VARIANTS[f"blind7_{_name}"] = _spec

BLIND8 = {  # blind round 8: cases that were misgraded, graded right since
    # a recursion that rebuilds every list/tuple/dict it meets (a list of ids comes back as an equal new list): the
    # writer expected check_to_device lost ('the same objects, not copies'); correct by the text now made precise
    # (non-tensor items not converted, not deep-copied; a mover that recurses into nested lists and dicts may hand
    # those back rebuilt, holding the same items), like torch.utils._pytree.tree_map and blind1_to_device_recursive
    'to_device_recursion_copies_nested_lists': {'cells': {'to_device': 'def to_device(batch, device):\n    """Return `batch` (tuple, list or dict) with every tensor moved to `device`."""\n    if isinstance(batch, torch.Tensor):\n        return batch.to(device)\n    if isinstance(batch, dict):\n        return {k: to_device(v, device) for k, v in batch.items()}\n    if isinstance(batch, list):\n        return [to_device(v, device) for v in batch]\n    if isinstance(batch, tuple):\n        return tuple(to_device(v, device) for v in batch)\n    return batch\n'},
        'lost': {}},
    # float64 tensors come back float32 (integer and float32 tensors are untouched, so the lesson's own float32 batc
    'to_device_float64_downcast': {'cells': {'to_device': 'def to_device(batch, device):\n    """Return `batch` (tuple, list or dict) with every tensor moved to `device`."""\n    def move(t):\n        if not isinstance(t, torch.Tensor):\n            return t\n        if t.dtype == torch.float64:       # MPS has no float64, so play safe everywhere\n            t = t.float()\n        return t.to(device)\n    if isinstance(batch, dict):\n        return {k: move(v) for k, v in batch.items()}\n    return type(batch)(move(v) for v in batch)\n'},
        'lost': {'check_to_device': "batch[0] in to_device's result for a tuple batch", 'check_train_step': '`train_step` raised RuntimeError'}},
    # weights above 10 are capped: for a class rarer than 1/(10 * n_classes) of the data (strongly imbalanced counts
    'cwl_clamped_weights': {'cells': {'class_weighted_loss': 'def class_weighted_loss(logits, targets, class_counts):\n    """Cross-entropy with balanced class weights, built on the logits\' device."""\n    n_total, n_classes = sum(class_counts), len(class_counts)\n    weight = torch.tensor([n_total / (n_classes * c) for c in class_counts],\n                          device=logits.device, dtype=logits.dtype)\n    weight = weight.clamp(max=10.0)          # a very rare class should not blow the loss up\n    return nn.functional.cross_entropy(logits, targets, weight=weight)\n'},
        'lost': {'check_class_weighted_loss': 'the loss for float32 logits on cpu'}},
    # adds a parameter group to the caller's optimizer for every model parameter it does not hold (a backbone the ca
    'train_step_adds_missing_param_groups': {'cells': {'train_step': 'def train_step(model, batch, loss_fn, optimizer, device):\n    """One training step on `device`; returns the loss as a float."""\n    held = {id(p) for group in optimizer.param_groups for p in group["params"]}\n    missing = [p for p in model.parameters() if p.requires_grad and id(p) not in held]\n    if missing:                           # make sure every trainable weight gets updated\n        optimizer.add_param_group({"params": missing})\n    inputs, labels = batch\n    inputs, labels = inputs.to(device), labels.to(device)\n    optimizer.zero_grad()\n    loss = loss_fn(model(inputs), labels)\n    loss.backward()\n    optimizer.step()\n    return loss.item()\n'},
        'lost': {'check_train_step': "the optimizer's parameter groups after train_step"}},
    # the forward of the training step runs in eval mode: with dropout or BatchNorm the loss (and the gradient, and 
    'train_step_forward_in_eval_mode': {'cells': {'train_step': 'def train_step(model, batch, loss_fn, optimizer, device):\n    """One training step on `device`; returns the loss as a float."""\n    inputs, labels = batch\n    inputs, labels = inputs.to(device), labels.to(device)\n    optimizer.zero_grad()\n    model.eval()                          # a stable loss value for the log (no dropout noise)\n    loss = loss_fn(model(inputs), labels)\n    model.train()\n    loss.backward()\n    optimizer.step()\n    return loss.item()\n'},
        'lost': {'check_train_step': "the model's mode during train_step's forward (model(...))"}},
    # the matmul precision is put back to PyTorch's default ('highest'), not to what the caller had: a caller who se
    'train_step_precision_reset_to_highest': {'cells': {'train_step': 'def train_step(model, batch, loss_fn, optimizer, device):\n    """One training step on `device`; returns the loss as a float."""\n    torch.set_float32_matmul_precision("high")        # TF32 matmuls: faster on Ampere and later\n    try:\n        inputs, labels = batch\n        inputs, labels = inputs.to(device), labels.to(device)\n        optimizer.zero_grad()\n        loss = loss_fn(model(inputs), labels)\n        loss.backward()\n        optimizer.step()\n    finally:\n        torch.set_float32_matmul_precision("highest")  # back to PyTorch\'s default\n    return loss.item()\n'},
        'lost': {'check_train_step': "torch's global settings when train_step returns, for a caller that had set"}},
    # a tensor copied to another device under inference_mode is an inference tensor: the model's Linear must save it
    'train_step_move_in_inference_mode': {'cells': {'train_step': 'def train_step(model, batch, loss_fn, optimizer, device):\n    """One training step on `device`; returns the loss as a float."""\n    with torch.inference_mode():                      # moving data needs no autograd\n        inputs, labels = (t.to(device) for t in batch)\n    optimizer.zero_grad()\n    loss = loss_fn(model(inputs), labels)\n    loss.backward()\n    optimizer.step()\n    return loss.item()\n'},
        'lost': {'check_train_step': 'inference tensors (tensor.is_inference()'}},
}
for _name, _spec in BLIND8.items():
    VARIANTS[f"blind8_{_name}"] = _spec

BLIND9 = {  # blind round 9: cases that were misgraded, graded right since
    # int32 / int16 / uint8 tensors (ids, masks, byte images) come back int64: breaks 'only its device changes: its 
    'to_device_ints_to_int64': {'cells': {'to_device': 'def to_device(batch, device):\n    """Return `batch` (tuple, list or dict) with every tensor moved to `device`."""\n    def move(value):\n        if not torch.is_tensor(value):\n            return value\n        value = value.to(device)\n        if not (value.is_floating_point() or value.is_complex() or value.dtype == torch.bool):\n            value = value.long()          # labels / indices: losses and embeddings want int64\n        return value\n    if isinstance(batch, dict):\n        return {key: move(value) for key, value in batch.items()}\n    return type(batch)(map(move, batch))\n'},
        'lost': {'check_to_device': "expected dtype int32 kept (only the device changes), observed int64"}},
    # when the largest count is under twice the smallest (e.g. [40, 30, 25]) no weights are used: breaks 'class c ha
    'cwl_weights_only_if_imbalanced': {'cells': {'class_weighted_loss': 'def class_weighted_loss(logits, targets, class_counts):\n    """Cross-entropy with balanced class weights, built on the logits\' device."""\n    n_total, n_classes = sum(class_counts), len(class_counts)\n    if max(class_counts) < 2 * min(class_counts):\n        # nearly balanced classes: the weights would be close to 1, skip them\n        return nn.functional.cross_entropy(logits, targets)\n    weights = torch.tensor([n_total / (n_classes * c) for c in class_counts],\n                           device=logits.device, dtype=logits.dtype)\n    return nn.functional.cross_entropy(logits, targets, weight=weights)\n'},
        'lost': {'check_class_weighted_loss': 'nearly balanced: the largest under twice the smallest): expected'}},
    # the forward runs with BatchNorm using running statistics and Dropout off: breaks 'the model stays in training 
    'train_step_norm_and_dropout_frozen': {'cells': {'train_step': 'def train_step(model, batch, loss_fn, optimizer, device):\n    """One training step on `device`; returns the loss as a float."""\n    inputs, labels = batch[0].to(device), batch[1].to(device)\n    for module in model.modules():\n        if isinstance(module, (nn.modules.batchnorm._BatchNorm, nn.Dropout)):\n            module.eval()                  # keep running stats fixed and the step deterministic\n    optimizer.zero_grad()\n    loss = loss_fn(model(inputs), labels)\n    loss.backward()\n    optimizer.step()\n    model.train()\n    return loss.item()\n'},
        'lost': {'check_train_step': "observed eval mode in BatchNorm1d (model[1]), Dropout (model[3])"}},
}
for _name, _spec in BLIND9.items():
    VARIANTS[f"blind9_{_name}"] = _spec

BLIND14 = {  # blind round 14: cases that were misgraded, graded right since
    # Does the weight ARITHMETIC in the logits' dtype: fine in float32/float64, but with float16 logits and a data s
    'cwl_counts_in_logits_dtype': {'cells': {'to_device': 'def to_device(batch, device):\n    """Return `batch` (tuple, list or dict) with every tensor moved to `device`."""\n    def move(v):\n        if isinstance(v, torch.Tensor):\n            return v.to(device)\n        if isinstance(v, dict):\n            return {k: move(x) for k, x in v.items()}\n        if isinstance(v, tuple):\n            return tuple(move(x) for x in v)\n        if isinstance(v, list):\n            return [move(x) for x in v]\n        return v\n    return move(batch)\n', 'class_weighted_loss': 'def class_weighted_loss(logits, targets, class_counts):\n    """Cross-entropy with balanced class weights, built on the logits\' device."""\n    counts = logits.new_tensor(class_counts)          # on the logits\' device, with their dtype\n    weights = counts.sum() / (len(class_counts) * counts)\n    return torch.nn.functional.cross_entropy(logits, targets, weight=weights)\n', 'train_step': 'def train_step(model, batch, loss_fn, optimizer, device):\n    """One training step on `device`; returns the loss as a float."""\n    inputs, labels = batch\n    inputs, labels = inputs.to(device), labels.to(device)\n    optimizer.zero_grad()\n    loss = loss_fn(model(inputs), labels)\n    loss.backward()\n    optimizer.step()\n    return loss.item()\n'},
        'lost': {'check_class_weighted_loss': 'the loss for float16 logits on cpu (n='}},
    # AMBIGUOUS reading of 'the random seed as it was': forks the RNG so the caller's random state is restored after
    'ts_fork_rng_around_step': {'cells': {'to_device': 'def to_device(batch, device):\n    """Return `batch` (tuple, list or dict) with every tensor moved to `device`."""\n    def move(v):\n        if isinstance(v, torch.Tensor):\n            return v.to(device)\n        if isinstance(v, dict):\n            return {k: move(x) for k, x in v.items()}\n        if isinstance(v, tuple):\n            return tuple(move(x) for x in v)\n        if isinstance(v, list):\n            return [move(x) for x in v]\n        return v\n    return move(batch)\n', 'class_weighted_loss': 'def class_weighted_loss(logits, targets, class_counts):\n    """Cross-entropy with balanced class weights, built on the logits\' device."""\n    n_total, n_classes = sum(class_counts), len(class_counts)\n    weights = torch.tensor([n_total / (n_classes * c) for c in class_counts], device=logits.device, dtype=logits.dtype)\n    return torch.nn.functional.cross_entropy(logits, targets, weight=weights)\n', 'train_step': 'def train_step(model, batch, loss_fn, optimizer, device):\n    """One training step on `device`; returns the loss as a float."""\n    # leave the caller\'s random state as it was (the text: the random seed as it was)\n    with torch.random.fork_rng(devices=[]):        # the CPU generator (dropout on the CPU, shuffles, init)\n        inputs, labels = batch\n        inputs, labels = inputs.to(device), labels.to(device)\n        optimizer.zero_grad()\n        loss = loss_fn(model(inputs), labels)\n        loss.backward()\n        optimizer.step()\n    return loss.item()\n'},
        'lost': {'check_train_step': "odel with Dropout: expected advanced by the two steps' dropout masks"}},
}
for _name, _spec in BLIND14.items():
    VARIANTS[f"blind14_{_name}"] = _spec
BLIND15 = {  # blind round 15: cases that were misgraded, graded right since
    # AMBIGUOUS, verdict False: moves every tensor with v.detach().to(device) ('batches never need grad'): device, d
    'td_detaches_tensors': {'cells': {'to_device': 'def to_device(batch, device):\n    """Return `batch` (tuple, list or dict) with every tensor moved to `device`."""\n    def mv(v):\n        return v.detach().to(device) if isinstance(v, torch.Tensor) else v\n    if isinstance(batch, dict):\n        return {k: mv(v) for k, v in batch.items()}\n    if isinstance(batch, tuple):\n        return tuple(mv(v) for v in batch)\n    return [mv(v) for v in batch]\n', 'class_weighted_loss': 'def class_weighted_loss(logits, targets, class_counts):\n    """Cross-entropy with balanced class weights, built on the logits\' device."""\n    n_total, n_classes = sum(class_counts), len(class_counts)\n    w = [n_total / (n_classes * c) for c in class_counts]\n    weight = torch.tensor(w, device=logits.device, dtype=logits.dtype)\n    return torch.nn.functional.cross_entropy(logits, targets, weight=weight)\n', 'train_step': 'def train_step(model, batch, loss_fn, optimizer, device):\n    """One training step on `device`; returns the loss as a float."""\n    inputs, labels = batch\n    inputs, labels = inputs.to(device), labels.to(device)\n    optimizer.zero_grad()\n    loss = loss_fn(model(inputs), labels)\n    loss.backward()\n    optimizer.step()\n    return loss.item()\n'},
        'lost': {'check_to_device': 'requires_grad=False: cut from its graph'}},
}
for _name, _spec in BLIND15.items():
    VARIANTS[f"blind15_{_name}"] = _spec
BLIND16 = {  # blind round 16: cases that were misgraded, graded right since
    # Moves only the top-level tensors: a tensor inside a nested list/dict (e.g. {'x': x, 'aux': [mask, idx]}) stays
    'td_top_level_only': {'cells': {'to_device': 'def to_device(batch, device):\n    """Return `batch` (tuple, list or dict) with every tensor moved to `device`."""\n    if isinstance(batch, dict):\n        return {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}\n    return type(batch)(v.to(device) if torch.is_tensor(v) else v for v in batch)\n', 'class_weighted_loss': 'def class_weighted_loss(logits, targets, class_counts):\n    """Cross-entropy with balanced class weights, built on the logits\' device."""\n    n_total, n_classes = sum(class_counts), len(class_counts)\n    weights = [n_total / (n_classes * c) for c in class_counts]\n    weight = torch.tensor(weights, device=logits.device, dtype=logits.dtype)\n    return torch.nn.functional.cross_entropy(logits, targets, weight=weight)\n', 'train_step': 'def train_step(model, batch, loss_fn, optimizer, device):\n    """One training step on `device`; returns the loss as a float."""\n    inputs, labels = batch\n    inputs, labels = inputs.to(device), labels.to(device)\n    optimizer.zero_grad()\n    loss = loss_fn(model(inputs), labels)\n    loss.backward()\n    optimizer.step()\n    return loss.item()\n'},
        'lost': {}},
}
for _name, _spec in BLIND16.items():
    VARIANTS[f"blind16_{_name}"] = _spec
BLIND17 = {  # blind round 17: cases that were misgraded, graded right since
    # AMBIGUOUS, verdict False: recursive mover keeps the TOP-level type but rebuilds every nested tuple as a list (
    'td_nested_tuple_rebuilt_as_list': {'cells': {'to_device': 'def to_device(batch, device):\n    """Return `batch` (tuple, list or dict) with every tensor moved to `device`."""\n    def move(v):\n        if isinstance(v, torch.Tensor):\n            return v.to(device)\n        if isinstance(v, dict):\n            return {k: move(x) for k, x in v.items()}\n        if isinstance(v, (list, tuple)):\n            return [move(x) for x in v]          # nested sequences come back as lists\n        return v\n    if isinstance(batch, tuple):\n        return tuple(move(v) for v in batch)     # only the top level keeps its type\n    return move(batch)\n', 'class_weighted_loss': 'def class_weighted_loss(logits, targets, class_counts):\n    """Cross-entropy with balanced class weights, built on the logits\' device."""\n    n_total, n_classes = sum(class_counts), len(class_counts)\n    w = [n_total / (n_classes * c) for c in class_counts]\n    weight = torch.tensor(w, device=logits.device, dtype=logits.dtype)\n    return nn.functional.cross_entropy(logits, targets, weight=weight)\n', 'train_step': 'def train_step(model, batch, loss_fn, optimizer, device):\n    """One training step on `device`; returns the loss as a float."""\n    inputs, labels = batch\n    inputs, labels = inputs.to(device), labels.to(device)\n    optimizer.zero_grad()\n    loss = loss_fn(model(inputs), labels)\n    loss.backward()\n    optimizer.step()\n    return loss.item()\n'},
        'lost': {'check_to_device': "batch['size']: expected unchanged, the same tuple"}},
    # Sets torch's intra-op thread count to 1 on CPU and never restores it: a process-wide setting of the caller cha
    'ts_set_num_threads': {'cells': {'to_device': 'def to_device(batch, device):\n    """Return `batch` (tuple, list or dict) with every tensor moved to `device`."""\n    def move(v):\n        return v.to(device) if isinstance(v, torch.Tensor) else v\n    if isinstance(batch, dict):\n        return {k: move(v) for k, v in batch.items()}\n    if isinstance(batch, tuple):\n        return tuple(move(v) for v in batch)\n    return [move(v) for v in batch]\n', 'class_weighted_loss': 'def class_weighted_loss(logits, targets, class_counts):\n    """Cross-entropy with balanced class weights, built on the logits\' device."""\n    n_total, n_classes = sum(class_counts), len(class_counts)\n    w = [n_total / (n_classes * c) for c in class_counts]\n    weight = torch.tensor(w, device=logits.device, dtype=logits.dtype)\n    return nn.functional.cross_entropy(logits, targets, weight=weight)\n', 'train_step': 'def train_step(model, batch, loss_fn, optimizer, device):\n    """One training step on `device`; returns the loss as a float."""\n    if torch.device(device).type == "cpu":\n        torch.set_num_threads(1)      # tiny MLP: thread overhead dominates, one thread is faster\n    inputs, labels = batch\n    inputs, labels = inputs.to(device), labels.to(device)\n    optimizer.zero_grad()\n    loss = loss_fn(model(inputs), labels)\n    loss.backward()\n    optimizer.step()\n    return loss.item()\n'},
        'lost': {'check_train_step': 'torch.get_num_threads()'}},
    # Forces the default dtype to float32 and leaves it: a caller running with float64 as default (the text: 'the ca
    'ts_forces_default_dtype': {'cells': {'to_device': 'def to_device(batch, device):\n    """Return `batch` (tuple, list or dict) with every tensor moved to `device`."""\n    def move(v):\n        return v.to(device) if isinstance(v, torch.Tensor) else v\n    if isinstance(batch, dict):\n        return {k: move(v) for k, v in batch.items()}\n    if isinstance(batch, tuple):\n        return tuple(move(v) for v in batch)\n    return [move(v) for v in batch]\n', 'class_weighted_loss': 'def class_weighted_loss(logits, targets, class_counts):\n    """Cross-entropy with balanced class weights, built on the logits\' device."""\n    n_total, n_classes = sum(class_counts), len(class_counts)\n    w = [n_total / (n_classes * c) for c in class_counts]\n    weight = torch.tensor(w, device=logits.device, dtype=logits.dtype)\n    return nn.functional.cross_entropy(logits, targets, weight=weight)\n', 'train_step': 'def train_step(model, batch, loss_fn, optimizer, device):\n    """One training step on `device`; returns the loss as a float."""\n    torch.set_default_dtype(torch.float32)   # make sure nothing inside creates float64 tensors\n    inputs, labels = batch\n    inputs, labels = inputs.to(device), labels.to(device)\n    optimizer.zero_grad()\n    loss = loss_fn(model(inputs), labels)\n    loss.backward()\n    optimizer.step()\n    return loss.item()\n'},
        'lost': {'check_train_step': "torch's default dtype when `train_step` (on cpu) for a caller that had set"}},
    # AMBIGUOUS, verdict False: moves the inputs to the model's device AND casts them to the weights' dtype. Right f
    'ts_inputs_cast_to_model_dtype': {'cells': {'to_device': 'def to_device(batch, device):\n    """Return `batch` (tuple, list or dict) with every tensor moved to `device`."""\n    def move(v):\n        return v.to(device) if isinstance(v, torch.Tensor) else v\n    if isinstance(batch, dict):\n        return {k: move(v) for k, v in batch.items()}\n    if isinstance(batch, tuple):\n        return tuple(move(v) for v in batch)\n    return [move(v) for v in batch]\n', 'class_weighted_loss': 'def class_weighted_loss(logits, targets, class_counts):\n    """Cross-entropy with balanced class weights, built on the logits\' device."""\n    n_total, n_classes = sum(class_counts), len(class_counts)\n    w = [n_total / (n_classes * c) for c in class_counts]\n    weight = torch.tensor(w, device=logits.device, dtype=logits.dtype)\n    return nn.functional.cross_entropy(logits, targets, weight=weight)\n', 'train_step': 'def train_step(model, batch, loss_fn, optimizer, device):\n    """One training step on `device`; returns the loss as a float."""\n    inputs, labels = batch\n    param = next(model.parameters())\n    inputs = inputs.to(device=device, dtype=param.dtype)   # device AND dtype of the weights: no Double/Float clash\n    labels = labels.to(device)\n    optimizer.zero_grad()\n    loss = loss_fn(model(inputs), labels)\n    loss.backward()\n    optimizer.step()\n    return loss.item()\n'},
        'lost': {'check_train_step': 'the inputs were converted: an nn.Embedding takes integer token ids'}},
}
for _name, _spec in BLIND17.items():
    VARIANTS[f"blind17_{_name}"] = _spec


BLIND18 = {  # blind round 18: cases that were misgraded, graded right since
    # Cross-entropy as log(softmax(...)) instead of a fused log_softmax: equal for moderate logits, but when a proba
    'cwl_softmax_then_log': {'cells': {'to_device': 'def to_device(batch, device):\n    """Return `batch` (tuple, list or dict) with every tensor moved to `device`."""\n    move = lambda v: v.to(device) if isinstance(v, torch.Tensor) else v\n    if isinstance(batch, dict):\n        return {k: move(v) for k, v in batch.items()}\n    if isinstance(batch, tuple):\n        return tuple(move(v) for v in batch)\n    return [move(v) for v in batch]\n', 'class_weighted_loss': 'def class_weighted_loss(logits, targets, class_counts):\n    """Cross-entropy with balanced class weights, built on the logits\' device."""\n    n_total, n_classes = sum(class_counts), len(class_counts)\n    w = torch.tensor([n_total / (n_classes * c) for c in class_counts], device=logits.device, dtype=logits.dtype)\n    probs = torch.softmax(logits, dim=1)                         # cross-entropy = -log p[target], weighted\n    return torch.nn.functional.nll_loss(torch.log(probs), targets, weight=w)\n', 'train_step': 'def train_step(model, batch, loss_fn, optimizer, device):\n    """One training step on `device`; returns the loss as a float."""\n    inputs, labels = batch\n    inputs, labels = inputs.to(device), labels.to(device)\n    optimizer.zero_grad()\n    loss = loss_fn(model(inputs), labels)\n    loss.backward()\n    optimizer.step()\n    return loss.item()\n'},
        'lost': {'check_class_weighted_loss': 'the first row confidently wrong: its logits about 100'}},
}
for _name, _spec in BLIND18.items():
    VARIANTS[f"blind18_{_name}"] = _spec


BLIND19 = {  # blind round 19: cases that were misgraded, graded right since
    # Right weights, device, dtype and weighted-mean formula, but log-sum-exp without subtracting the max: exp overf
    'cwl_logsumexp_without_shift': {'cells': {'to_device': 'def to_device(batch, device):\n    """Return `batch` (tuple, list or dict) with every tensor moved to `device`."""\n    def move(v):\n        return v.to(device) if isinstance(v, torch.Tensor) else v\n    if isinstance(batch, dict):\n        return {k: move(v) for k, v in batch.items()}\n    if isinstance(batch, tuple):\n        return tuple(move(v) for v in batch)\n    return [move(v) for v in batch]\n', 'class_weighted_loss': 'def class_weighted_loss(logits, targets, class_counts):\n    """Cross-entropy with balanced class weights, built on the logits\' device."""\n    n_total, n_classes = sum(class_counts), len(class_counts)\n    w = torch.tensor([n_total / (n_classes * c) for c in class_counts], device=logits.device, dtype=logits.dtype)\n    # cross-entropy written out: log(sum(exp(z))) - z[target], weighted mean\n    lse = logits.exp().sum(dim=1).log()\n    picked = logits.gather(1, targets.unsqueeze(1)).squeeze(1)\n    wt = w[targets]\n    return ((lse - picked) * wt).sum() / wt.sum()\n', 'train_step': 'def train_step(model, batch, loss_fn, optimizer, device):\n    """One training step on `device`; returns the loss as a float."""\n    inputs, labels = batch\n    inputs, labels = inputs.to(device), labels.to(device)\n    optimizer.zero_grad()\n    loss = loss_fn(model(inputs), labels)\n    loss.backward()\n    optimizer.step()\n    return loss.item()\n'},
        'lost': {'check_class_weighted_loss': 'the first row confidently wrong: its logits about'}},
    # Compares only the device TYPE: a tensor on cuda:1 asked to go to cuda:0 (or on cuda:0 asked for cuda:1, as DDP
    'td_moves_only_across_device_types': {'cells': {'to_device': 'def to_device(batch, device):\n    """Return `batch` (tuple, list or dict) with every tensor moved to `device`."""\n    target = torch.device(device)\n    def move(v):\n        # skip the copy when the tensor is already on that kind of device (saves a transfer)\n        if isinstance(v, torch.Tensor) and v.device.type != target.type:\n            return v.to(target)\n        return v\n    if isinstance(batch, dict):\n        return {k: move(v) for k, v in batch.items()}\n    return type(batch)(move(v) for v in batch)\n', 'class_weighted_loss': 'def class_weighted_loss(logits, targets, class_counts):\n    """Cross-entropy with balanced class weights, built on the logits\' device."""\n    n_total, n_classes = sum(class_counts), len(class_counts)\n    weights = [n_total / (n_classes * c) for c in class_counts]\n    w = torch.tensor(weights, device=logits.device, dtype=logits.dtype)\n    return nn.functional.cross_entropy(logits, targets, weight=w)\n', 'train_step': 'def train_step(model, batch, loss_fn, optimizer, device):\n    """One training step on `device`; returns the loss as a float."""\n    inputs, labels = batch\n    inputs, labels = inputs.to(device), labels.to(device)\n    optimizer.zero_grad()\n    loss = loss_fn(model(inputs), labels)\n    loss.backward()\n    optimizer.step()\n    return loss.item()\n'},
        'lost': {'check_to_device': 'but batch[0] on cuda:1'}},
}
for _name, _spec in BLIND19.items():
    VARIANTS[f"blind19_{_name}"] = _spec


BLIND20 = {  # blind round 20: cases that were misgraded, graded right since
    # Keeps float targets but casts integer labels to int64: a no-op for the usual int64 class ids and for floats, b
    'ts_labels_cast_long_if_integer': {'cells': {'to_device': 'def to_device(batch, device):\n    """Return `batch` (tuple, list or dict) with every tensor moved to `device`."""\n    move = lambda v: v.to(device) if isinstance(v, torch.Tensor) else v\n    if isinstance(batch, dict):\n        return {k: move(v) for k, v in batch.items()}\n    if isinstance(batch, tuple):\n        return tuple(move(v) for v in batch)\n    return [move(v) for v in batch]\n', 'class_weighted_loss': 'def class_weighted_loss(logits, targets, class_counts):\n    """Cross-entropy with balanced class weights, built on the logits\' device."""\n    n_total, n_classes = sum(class_counts), len(class_counts)\n    w = [n_total / (n_classes * c) for c in class_counts]\n    weight = torch.tensor(w, device=logits.device, dtype=logits.dtype)\n    return torch.nn.functional.cross_entropy(logits, targets, weight=weight)\n', 'train_step': 'def train_step(model, batch, loss_fn, optimizer, device):\n    """One training step on `device`; returns the loss as a float."""\n    inputs, labels = batch\n    inputs = inputs.to(device)\n    if labels.is_floating_point():\n        labels = labels.to(device)                        # regression / soft targets: as they are\n    else:\n        labels = labels.to(device, dtype=torch.long)      # class indices must be int64\n    optimizer.zero_grad()\n    loss = loss_fn(model(inputs), labels)\n    loss.backward()\n    optimizer.step()\n    return loss.item()\n'},
        'lost': {'check_train_step': "the labels that reached loss_fn: expected the batch's labels as given"}},
}
for _name, _spec in BLIND20.items():
    VARIANTS[f"blind20_{_name}"] = _spec
