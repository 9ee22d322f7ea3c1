"""Lesson 06 (missing eval / no_grad): plausible wrong fixes and correct fixes written differently."""

EVAL_WITHOUT_NO_GRAD = '''def evaluate(model, loader):
    was_training = model.training
    device = next(model.parameters()).device
    model.eval()                               # eval mode... but autograd still records every batch
    correct = total = 0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        correct += (model(x).argmax(dim=1) == y).sum().item()
        total += y.numel()
    model.train(was_training)
    return correct / total'''

NO_GRAD_WITHOUT_EVAL = '''def evaluate(model, loader):
    device = next(model.parameters()).device
    correct = total = 0
    with torch.no_grad():                      # autograd off... but Dropout and BatchNorm still in training mode
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            correct += (model(x).argmax(dim=1) == y).sum().item()
            total += y.numel()
    return correct / total'''

NOT_RESTORED = '''def evaluate(model, loader):
    device = next(model.parameters()).device
    model.eval()                               # ...and never switched back
    correct = total = 0
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            correct += (model(x).argmax(dim=1) == y).sum().item()
            total += y.numel()
    return correct / total'''

ALWAYS_TRAIN = '''def evaluate(model, loader):
    device = next(model.parameters()).device
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            correct += (model(x).argmax(dim=1) == y).sum().item()
            total += y.numel()
    model.train()                              # even when the model was in eval mode before
    return correct / total'''

MEAN_OF_BATCH_ACCURACIES = '''def evaluate(model, loader):
    was_training = model.training
    device = next(model.parameters()).device
    model.eval()
    accs = []
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            accs.append((model(x).argmax(dim=1) == y).float().mean().item())
    model.train(was_training)
    return sum(accs) / len(accs)               # a short last batch weighs as much as a full one'''

TRAIN_EPOCH_NO_TRAIN = '''def train_epoch(model, loader, optimizer):
    device = next(model.parameters()).device    # no model.train(): stays in eval mode after evaluate()
    losses = []
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return sum(losses) / len(losses)'''

ALT_EVALUATE = '''@torch.inference_mode()
def evaluate(model, loader):
    mode = model.training
    model.eval()
    try:
        device = next(model.parameters()).device
        hits, seen = torch.zeros((), dtype=torch.long), 0
        for inputs, labels in loader:
            preds = model(inputs.to(device)).argmax(-1).cpu()
            hits += (preds == labels).sum()
            seen += len(labels)
        return hits.item() / seen
    finally:
        model.train(mode)'''

ALT_TRAIN_EPOCH = '''def train_epoch(model, loader, optimizer):
    model.train(True)
    device = next(model.parameters()).device
    total, batches = 0.0, 0
    loss_fn = nn.CrossEntropyLoss()
    for inputs, labels in loader:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(inputs.to(device)), labels.to(device))
        loss.backward()
        optimizer.step()
        total += float(loss.detach())
        batches += 1
    return total / batches'''

ALT_TRAIN_EPOCH_IMPORT = "from torch import nn\n" + ALT_TRAIN_EPOCH

EVAL_A_COPY = '''import copy

def evaluate(model, loader):
    frozen = copy.deepcopy(model).eval()   # the model itself is never switched: nothing to restore
    device = next(frozen.parameters()).device
    correct = total = 0
    with torch.no_grad():
        for x, y in loader:
            correct += (frozen(x.to(device)).argmax(dim=1).cpu() == y).sum().item()
            total += y.numel()
    return correct / total'''


# ---- from the first blind round (written from the release notebook alone; see the lesson's report) ----------

TENSOR_ACCURACY = '''def evaluate(model, loader):
    was_training = model.training
    device = next(model.parameters()).device
    model.eval()
    correct, total = 0, 0
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            correct += (model(x).argmax(1) == y).sum()         # a tensor: the result is a 0-d tensor too
            total += len(y)
    model.train(was_training)
    return correct / total'''

EVALUATE_NOT_MOVED = '''def evaluate(model, loader):
    was_training = model.training
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in loader:                                 # never moved to the model's device
            correct += (model(x).argmax(1) == y).sum().item()
            total += len(y)
    model.train(was_training)
    return correct / total'''

GRAD_OFF_GLOBALLY = '''def evaluate(model, loader):
    was_training = model.training
    device = next(model.parameters()).device
    model.eval()
    torch.set_grad_enabled(False)                           # a statement: autograd stays off afterwards
    correct = total = 0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        correct += (model(x).argmax(1) == y).sum().item()
        total += len(y)
    model.train(was_training)
    return correct / total'''

ROOT_FLAG_RESTORED = '''def evaluate(model, loader):
    was_training = model.training
    device = next(model.parameters()).device
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            correct += (model(x).argmax(1) == y).sum().item()
            total += len(y)
    model.training = was_training                           # only the top module's flag
    return correct / total'''

PER_MODULE_MODES = '''def evaluate(model, loader):
    modes = {m: m.training for m in model.modules()}
    model.eval()
    device = next(model.parameters()).device
    hits = torch.zeros((), dtype=torch.long, device=device)
    count = 0
    try:
        with torch.inference_mode():
            for xb, yb in loader:
                logits = model(xb.to(device))
                hits += (logits.argmax(-1) == yb.to(device)).sum()
                count += yb.shape[0]
    finally:
        for m, mode in modes.items():
            m.training = mode
    return hits.item() / count'''

RESEEDS = '''def train_epoch(model, loader, optimizer):
    torch.manual_seed(0)                                    # "reproducible": every epoch the same Dropout masks
    model.train()
    device = next(model.parameters()).device
    total, count = 0.0, 0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item()
        count += 1
    return total / count'''

ENABLE_GRAD_FMEAN = '''import statistics

from torch import nn


def train_epoch(model, loader, optimizer):
    criterion = nn.CrossEntropyLoss()
    model.train(True)
    dev = next(model.parameters()).device
    losses = []
    with torch.enable_grad():                               # autograd on even if the caller turned it off
        for inputs, targets in loader:
            inputs, targets = inputs.to(dev), targets.to(dev)
            optimizer.zero_grad(set_to_none=True)
            loss = criterion(model(inputs), targets)
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
    return statistics.fmean(losses)'''

PER_SAMPLE_MEAN = '''def train_epoch(model, loader, optimizer):
    model.train()
    device = next(model.parameters()).device
    total, seen = 0.0, 0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item() * len(y)                       # each batch weighted by its size
        seen += len(y)
    return total / seen'''

TENSOR_LOSSES = '''def train_epoch(model, loader, optimizer):
    model.train()
    device = next(model.parameters()).device
    total, batches = 0, 0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss                                       # keeps every batch's graph alive
        batches += 1
    return total / batches'''

TRAIN_NOT_MOVED = '''def train_epoch(model, loader, optimizer):
    model.train()
    total, batches = 0.0, 0
    for x, y in loader:                                     # never moved to the model's device
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        total += loss.item()
        batches += 1
    return total / batches'''

VARIANTS = {
    "eval_without_no_grad": {"cells": {"evaluate": EVAL_WITHOUT_NO_GRAD},
                             "lost": {"check_evaluate_no_grad": "autograd recording a graph"}},
    "no_grad_without_eval": {"cells": {"evaluate": NO_GRAD_WITHOUT_EVAL},
                             "lost": {"check_evaluate_eval": "two evaluations of the same data"}},
    "mode_not_restored": {"cells": {"evaluate": NOT_RESTORED},
                          "lost": {"check_evaluate_restores": "on a model in train mode: expected train, observed eval"}},
    "always_train_after": {"cells": {"evaluate": ALWAYS_TRAIN},
                           "lost": {"check_evaluate_restores": "on a model in eval mode: expected eval, observed train"}},
    "mean_of_batch_accuracies": {"cells": {"evaluate": MEAN_OF_BATCH_ACCURACIES},
                                 "lost": {"check_evaluate_eval": "the accuracy returned"}},
    "train_epoch_never_trains": {"cells": {"train_epoch": TRAIN_EPOCH_NO_TRAIN},
                                 "lost": {"check_train_epoch": "call model.train() at the start of every epoch"}},
    "written_differently": {"cells": {"evaluate": ALT_EVALUATE, "train_epoch": ALT_TRAIN_EPOCH_IMPORT}, "lost": {}},
    "evaluates_a_copy": {"cells": {"evaluate": EVAL_A_COPY}, "lost": {}},
    # first blind round
    "accuracy_as_tensor": {"cells": {"evaluate": TENSOR_ACCURACY},
                           "lost": {"check_evaluate_eval": "evaluate's return value: expected a Python float, observed a 0-d tensor"}},
    "evaluate_never_moves_the_batch": {"cells": {"evaluate": EVALUATE_NOT_MOVED},
                                       "lost": {"check_evaluate_eval": "expected every batch moved to the model's device"}},
    "grad_off_globally": {"cells": {"evaluate": GRAD_OFF_GLOBALLY},
                          "lost": {"check_evaluate_no_grad": "autograd after evaluate returns"}},
    "restores_the_root_flag_only": {"cells": {"evaluate": ROOT_FLAG_RESTORED},
                                    "lost": {"check_evaluate_restores": "`model.training = ...` sets only the top module's flag"}},
    "reseeds_the_rng": {"cells": {"train_epoch": RESEEDS},  # (the text forbids it since blind round 18)
                        "lost": {"check_train_epoch": "train_epoch reseeds the global random stream"}},
    "blind_correct_idioms": {"cells": {"evaluate": PER_MODULE_MODES, "train_epoch": ENABLE_GRAD_FMEAN}, "lost": {}},
    "mean_over_samples": {"cells": {"train_epoch": PER_SAMPLE_MEAN},
                          "lost": {"check_train_epoch": "that is the mean over samples"}},
    "loss_as_tensor": {"cells": {"train_epoch": TENSOR_LOSSES},
                       "lost": {"check_train_epoch": "that still holds its autograd graph"}},
    "train_epoch_never_moves_the_batch": {"cells": {"train_epoch": TRAIN_NOT_MOVED},
                                          "lost": {"check_train_epoch": "expected every batch moved to the model's device"}},
    "blind2_ev_moves_model_to_cpu": {  # moves the model to the CPU instead of the batches to the model's device
        "cells": {
        'evaluate': 'import torch\n\ndef evaluate(model, loader):\n    """Accuracy of `model` on `loader`, in eval mode without autograd; the model\'s mode is restored."""\n    was_training = model.training\n    model.eval()\n    model.to("cpu")                                   # the loader yields CPU tensors: put the model with them\n    correct = total = 0\n    with torch.no_grad():\n        for x, y in loader:\n            correct += (model(x).argmax(1) == y).sum().item()\n            total += len(y)\n    model.train(was_training)\n    return correct / total\n',
        },
        "lost": {'check_evaluate_eval': 'observed moved to cpu'}},
    "blind2_ev_switches_only_dropout_bn1d": {  # switches only nn.Dropout/nn.BatchNorm1d: the model itself stays in training mode
        "cells": {
        'evaluate': 'import torch\nfrom torch import nn\n\ndef evaluate(model, loader):\n    """Accuracy of `model` on `loader`, in eval mode without autograd; the model\'s mode is restored."""\n    switched = [m for m in model.modules() if isinstance(m, (nn.Dropout, nn.BatchNorm1d)) and m.training]\n    for m in switched:                                # only the layers that behave differently\n        m.eval()\n    device = next(model.parameters()).device\n    correct = total = 0\n    with torch.no_grad():\n        for x, y in loader:\n            x, y = x.to(device), y.to(device)\n            correct += (model(x).argmax(1) == y).sum().item()\n            total += len(y)\n    for m in switched:\n        m.train()\n    return correct / total\n',
        },
        "lost": {'check_evaluate_eval': 'in training mode: Linear'}},
    "blind2_ev_divides_by_len_dataset": {  # divides by len(loader.dataset), not the samples the loader yielded
        "cells": {
        'evaluate': 'import torch\n\ndef evaluate(model, loader):\n    """Accuracy of `model` on `loader`, in eval mode without autograd; the model\'s mode is restored."""\n    was_training = model.training\n    model.eval()\n    device = next(model.parameters()).device\n    correct = 0\n    with torch.no_grad():\n        for x, y in loader:\n            x, y = x.to(device), y.to(device)\n            correct += (model(x).argmax(1) == y).sum().item()\n    model.train(was_training)\n    return correct / len(loader.dataset)              # the number of samples\n',
        },
        "lost": {'check_evaluate_eval': 'the size of loader.dataset'}},
    "blind3_te_train_only_if_root_flag_false": {  # calls model.train() only when model.training is False: a model whose layers alone are in eval mode is never switched
        "cells": {
        'train_epoch': 'def train_epoch(model, loader, optimizer):\n    """One epoch in training mode; returns the mean batch loss."""\n    if not model.training:                         # switch only when needed\n        model.train()\n    device = next(model.parameters()).device\n    total, batches = 0.0, 0\n    for x, y in loader:\n        x, y = x.to(device), y.to(device)\n        optimizer.zero_grad()\n        loss = F.cross_entropy(model(x), y)\n        loss.backward()\n        optimizer.step()\n        total += loss.item()\n        batches += 1\n    return total / batches\n',
        },
        "lost": {'check_train_epoch': 'while its own flag model.training is True'}},
    "blind3_ev_skips_short_last_batch": {  # misleading message fixed: blamed eval mode/BatchNorm; the short last batch is skipped
        "cells": {
        'evaluate': 'def evaluate(model, loader):\n    """Accuracy of `model` on `loader`, in eval mode without autograd; the model\'s mode is restored."""\n    device = next(model.parameters()).device\n    was_training = model.training\n    model.eval()\n    correct = total = 0\n    with torch.no_grad():\n        for x, y in loader:\n            if len(y) < loader.batch_size:\n                continue                       # a short last batch (of one sample) is what made BatchNorm fail\n            x, y = x.to(device), y.to(device)\n            correct += (model(x).argmax(1) == y).sum().item()\n            total += len(y)\n    model.train(was_training)\n    return correct / total\n',
        },
        "lost": {'check_evaluate_eval': 'never went through the model'}},
    "blind3_ev_restore_inside_loop": {  # misleading message fixed: said 'call model.eval() before the loop'; it does, then restores the mode inside the loop
        "cells": {
        'evaluate': 'def evaluate(model, loader):\n    """Accuracy of `model` on `loader`, in eval mode without autograd; the model\'s mode is restored."""\n    device = next(model.parameters()).device\n    was_training = model.training\n    model.eval()\n    correct = total = 0\n    with torch.no_grad():\n        for x, y in loader:\n            x, y = x.to(device), y.to(device)\n            correct += (model(x).argmax(1) == y).sum().item()\n            total += len(y)\n            model.train(was_training)          # put the mode back\n    return correct / total\n',
        },
        "lost": {'check_evaluate_eval': 'went back to training mode inside the loop'}},
    "blind3_ev_restores_children_not_root": {  # misleading message fixed: blamed `model.training = ...`; it switches the layers back one by one, the root stays in eval mode
        "cells": {
        'evaluate': 'def evaluate(model, loader):\n    """Accuracy of `model` on `loader`, in eval mode without autograd; the model\'s mode is restored."""\n    device = next(model.parameters()).device\n    was_training = model.training\n    model.eval()\n    correct = total = 0\n    with torch.no_grad():\n        for x, y in loader:\n            x, y = x.to(device), y.to(device)\n            correct += (model(x).argmax(1) == y).sum().item()\n            total += len(y)\n    for layer in model:                        # put every layer back in the mode it had\n        layer.train(was_training)\n    return correct / total\n',
        },
        "lost": {'check_evaluate_restores': "the model's own flag model.training=False"}},
    "blind3_te_running_accuracy_leaves_eval_mode": {  # misleading message fixed: said 'call model.train() at the start'; it does, then switches to eval mode inside the epoch
        "cells": {
        'train_epoch': 'def train_epoch(model, loader, optimizer):\n    """One epoch in training mode; returns the mean batch loss."""\n    model.train()\n    device = next(model.parameters()).device\n    total, batches, correct, seen = 0.0, 0, 0, 0\n    for x, y in loader:\n        x, y = x.to(device), y.to(device)\n        optimizer.zero_grad()\n        loss = F.cross_entropy(model(x), y)\n        loss.backward()\n        optimizer.step()\n        total += loss.item()\n        batches += 1\n        model.eval()                               # running training accuracy, measured properly\n        with torch.no_grad():\n            correct += (model(x).argmax(1) == y).sum().item()\n            seen += len(y)\n    print(f"train accuracy {correct / seen:.3f}")\n    return total / batches\n',
        },
        "lost": {'check_train_epoch': 'switched to eval mode during the epoch'}},
}

# Blind round 4: the case it misgraded (now fixed in the check: a loader in another order, with varied predictions).
BLIND4 = {
    # labels from loader.dataset in the data set's order: right only for an unshuffled loader over the whole set
    "ev_labels_taken_from_dataset_order": ('evaluate', '''def evaluate(model, loader):
    """Accuracy of `model` on `loader`, in eval mode without autograd; the model's mode is restored."""
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    predictions = []
    with torch.no_grad():
        for x, _ in loader:
            predictions.append(model(x.to(device)).argmax(1).cpu())
    model.train(was_training)
    predicted = torch.cat(predictions)
    labels = loader.dataset.tensors[1][: len(predicted)]   # the labels, in the dataset's order
    return (predicted == labels).float().mean().item()''',
                                           {"check_evaluate_eval": "compared with the labels in the data set's order"}),
}
for _name, (_cell, _source, _lost) in BLIND4.items():
    VARIANTS[f"blind4_{_name}"] = {"cells": {_cell: _source}, "lost": _lost}

# Blind round 5: a correct train_epoch that takes the device from the parameters that require grad failed the
# simulated cuda:0 probe, whose parameters did not require grad (now they do, as a real model's).
VARIANTS["blind5_te_device_from_trainable_params_autograd_grad"] = {"cells": {'train_epoch': '''def train_epoch(model, loader, optimizer):
    """One epoch in training mode; returns the mean batch loss."""
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    device = params[0].device
    total, count = 0.0, 0
    for x, y in loader:
        loss = F.cross_entropy(model(x.to(device)), y.to(device))
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        for p, g in zip(params, grads):
            p.grad = g                                  # a fresh gradient: nothing accumulated from before
        optimizer.step()
        total += loss.detach().item()
        count += 1
    return total / count
'''}, "lost": {}}

BLIND6 = {  # blind round 6: cases that were misgraded, graded right since
    # calls model.eval() only when model.training is True: a model whose root flag is False but whose Dropout/BatchN
    'ev_eval_only_if_root_training': {'cells': {'evaluate': '\ndef evaluate(model, loader):\n    """Accuracy of `model` on `loader`, in eval mode without autograd; the model\'s mode is restored."""\n    was_training = model.training\n    if was_training:                                  # already in eval mode otherwise: nothing to switch\n        model.eval()\n    device = next(model.parameters()).device\n    correct = total = 0\n    with torch.no_grad():\n        for x, y in loader:\n            x, y = x.to(device), y.to(device)\n            correct += (model(x).argmax(dim=1) == y).sum().item()\n            total += len(y)\n    if was_training:\n        model.train()\n    return correct / total\n', 'train_epoch': '\nimport statistics\n\n\ndef train_epoch(model, loader, optimizer):\n    """One epoch in training mode; returns the mean batch loss."""\n    model.train()\n    device = next(model.parameters()).device\n    losses = []\n    for x, y in loader:\n        x, y = x.to(device), y.to(device)\n        model.zero_grad()\n        loss = F.cross_entropy(model(x), y, reduction="sum") / y.shape[0]   # the batch\'s mean cross-entropy\n        loss.backward()\n        optimizer.step()\n        losses.append(loss.item())\n    return statistics.fmean(losses)\n'},
        'lost': {'check_evaluate_eval': 'forward passes inside evaluate, called on a model whose own flag is off (model.training is'}},
    # calls .train() on model.children() only: a model arriving in eval mode keeps model.training False (the model i
    'te_children_only_train': {'cells': {'evaluate': '\ndef evaluate(model, loader):\n    """Accuracy of `model` on `loader`, in eval mode without autograd; the model\'s mode is restored."""\n    param = next(model.parameters())\n    was_training = model.training\n    model.train(False)                                # the same as model.eval()\n    correct = torch.zeros((), dtype=torch.long, device=param.device)\n    seen = 0\n    with torch.no_grad():\n        for x, y in loader:\n            x = x.to(param)                           # Tensor.to(other): the parameters\' device AND dtype\n            y = y.to(param.device)\n            correct += (model(x).argmax(dim=1) == y).sum()\n            seen += len(y)\n    model.train(was_training)\n    return correct.item() / seen\n', 'train_epoch': '\ndef train_epoch(model, loader, optimizer):\n    """One epoch in training mode; returns the mean batch loss."""\n    for layer in model.children():                    # every layer back to training mode\n        layer.train()\n    device = next(model.parameters()).device\n    losses = []\n    for x, y in loader:\n        x, y = x.to(device), y.to(device)\n        optimizer.zero_grad()\n        loss = F.cross_entropy(model(x), y)\n        loss.backward()\n        optimizer.step()\n        losses.append(loss.item())\n    return sum(losses) / len(losses)\n'},
        'lost': {'check_train_epoch': 'forward passes of train_epoch with every module in training mode (model.training and each '}},
}
for _name, _spec in BLIND6.items():
    VARIANTS[f"blind6_{_name}"] = _spec

BLIND8 = {  # blind round 8: cases that were misgraded, graded right since
    # correct
    'te_eval_mode_accuracy_probe_then_back_to_training': {'cells': {'train_epoch': 'import torch\nfrom torch.nn import functional as F\n\n\ndef train_epoch(model, loader, optimizer):\n    """One epoch in training mode; returns the mean batch loss."""\n    device = next(model.parameters()).device\n    losses, accuracies = [], []\n    for x, y in loader:\n        x, y = x.to(device), y.to(device)\n        model.train()\n        optimizer.zero_grad()\n        loss = F.cross_entropy(model(x), y)\n        loss.backward()\n        optimizer.step()\n        losses.append(loss.item())\n        model.eval()                                   # how well does the updated model do on this batch?\n        with torch.no_grad():\n            accuracies.append((model(x).argmax(1) == y).float().mean().item())\n        model.train()\n    return sum(losses) / len(losses)\n'},
        'lost': {}},
    # gradient tracking is switched with statements, not 'inside a block (with torch.no_grad(): or torch.inference_m
    'ev_grad_mode_switched_by_statements': {'cells': {'evaluate': 'import torch\n\n\ndef evaluate(model, loader):\n    """Accuracy of `model` on `loader`, in eval mode without autograd; the model\'s mode is restored."""\n    device = next(model.parameters()).device\n    was_training = model.training\n    model.eval()\n    torch.set_grad_enabled(False)\n    correct = total = 0\n    for x, y in loader:\n        x, y = x.to(device), y.to(device)\n        correct += (model(x).argmax(dim=1) == y).sum().item()\n        total += y.numel()\n    torch.set_grad_enabled(True)\n    model.train(was_training)\n    return correct / total\n'},
        'lost': {'check_evaluate_no_grad': "when called with autograd off (inside the caller's"}},
    # the mean of the last 10 batch losses only: right when the loader has at most 10 batches, but not the mean over
    'te_mean_of_last_10_batches': {'cells': {'train_epoch': 'from collections import deque\n\nfrom torch.nn import functional as F\n\n\ndef train_epoch(model, loader, optimizer):\n    """One epoch in training mode; returns the mean batch loss."""\n    model.train()\n    device = next(model.parameters()).device\n    recent = deque(maxlen=10)                     # smoothed: the last 10 batches\n    for x, y in loader:\n        optimizer.zero_grad()\n        loss = F.cross_entropy(model(x.to(device)), y.to(device))\n        loss.backward()\n        optimizer.step()\n        recent.append(loss.item())\n    return sum(recent) / len(recent)\n'},
        'lost': {'check_train_epoch': 'the mean of the last 10 batch losses only'}},
}
for _name, _spec in BLIND8.items():
    VARIANTS[f"blind8_{_name}"] = _spec

BLIND9 = {  # blind round 9: cases that were misgraded, graded right since
    # the model may sit on a GPU: .numpy() on the model's (cuda) output raises; only CPU works
    'ev_numpy_on_the_model_device': {'cells': {'evaluate': 'def evaluate(model, loader):\n    """Accuracy of `model` on `loader`, in eval mode without autograd; the model\'s mode is restored."""\n    device = next(model.parameters()).device\n    modes = [(m, m.training) for m in model.modules()]\n    model.eval()\n    correct = total = 0\n    with torch.no_grad():\n        for x, y in loader:\n            pred = model(x.to(device)).argmax(1).numpy()      # fine on the CPU, not for a tensor on a GPU\n            correct += int((pred == y.numpy()).sum())\n            total += len(y)\n    for m, was in modes:\n        m.training = was\n    return correct / total\n', 'train_epoch': 'def train_epoch(model, loader, optimizer):\n    """One epoch in training mode; returns the mean batch loss."""\n    model.train()\n    device = next(model.parameters()).device\n    losses = []\n    for x, y in loader:\n        x, y = x.to(device), y.to(device)\n        optimizer.zero_grad()\n        loss = F.cross_entropy(model(x), y)\n        loss.backward()\n        optimizer.step()\n        losses.append(loss.item())\n    return sum(losses) / len(losses)\n'},
        'lost': {'check_evaluate_eval': 'device type tensor to numpy'}},
}
for _name, _spec in BLIND9.items():
    VARIANTS[f"blind9_{_name}"] = _spec

_TRAIN_EPOCH = BLIND9['ev_numpy_on_the_model_device']['cells']['train_epoch']
BLIND13 = {  # blind round 13 (lesson 12's evaluate): cases that were misgraded, graded right since
    # the device taken from the first buffer: right for a model with BatchNorm, StopIteration for one without buffers
    'ev_device_from_buffers': {'cells': {'evaluate': 'def evaluate(model, loader):\n    """Accuracy of `model` on `loader`, in eval mode without autograd; the model\'s mode is restored."""\n    was_training = model.training\n    device = next(model.buffers()).device      # BatchNorm\'s running stats live where the model lives\n    model.eval()\n    correct = total = 0\n    with torch.no_grad():\n        for x, y in loader:\n            correct += (model(x.to(device)).argmax(dim=1) == y.to(device)).sum().item()\n            total += y.numel()\n    model.train(was_training)\n    return correct / total\n', 'train_epoch': _TRAIN_EPOCH},
        'lost': {'check_evaluate_eval': 'this model has no buffers'}},
    # the same in train_epoch, through the first running mean of a BatchNorm layer
    'te_device_from_running_mean': {'cells': {'evaluate': BLIND9['ev_numpy_on_the_model_device']['cells']['evaluate'].replace('.argmax(1).numpy()', '.argmax(1).cpu().numpy()'), 'train_epoch': 'def train_epoch(model, loader, optimizer):\n    """One epoch in training mode; returns the mean batch loss."""\n    model.train()\n    bn = next(m for m in model.modules() if isinstance(m, torch.nn.BatchNorm1d))\n    device = bn.running_mean.device\n    losses = []\n    for x, y in loader:\n        x, y = x.to(device), y.to(device)\n        optimizer.zero_grad()\n        loss = F.cross_entropy(model(x), y)\n        loss.backward()\n        optimizer.step()\n        losses.append(loss.item())\n    return sum(losses) / len(losses)\n'},
        'lost': {'check_train_epoch': 'a model without BatchNorm'}},
}
for _name, _spec in BLIND13.items():
    VARIANTS[f"blind13_{_name}"] = _spec

BLIND14 = {  # blind round 14: cases that were misgraded, graded right since
    # Returns a Python float of (almost) the right value, but adds up the loss TENSORS: every batch's graph is kept 
    'train_sums_loss_tensors': {'cells': {'evaluate': 'def evaluate(model, loader):\n    """Accuracy of `model` on `loader`, in eval mode without autograd; the model\'s mode is restored."""\n    was_training = model.training\n    device = next(model.parameters()).device\n    model.eval()\n    correct = total = 0\n    try:\n        with torch.no_grad():\n            for x, y in loader:\n                x, y = x.to(device), y.to(device)\n                correct += (model(x).argmax(dim=1) == y).sum().item()\n                total += y.numel()\n    finally:\n        model.train(was_training)\n    return correct / total\n', 'train_epoch': 'def train_epoch(model, loader, optimizer):\n    """One epoch in training mode; returns the mean batch loss."""\n    device = next(model.parameters()).device\n    model.train()\n    running, n = 0, 0\n    for x, y in loader:\n        x, y = x.to(device), y.to(device)\n        optimizer.zero_grad()\n        loss = F.cross_entropy(model(x), y)\n        loss.backward()\n        optimizer.step()\n        running = running + loss             # a tensor: every batch\'s graph stays alive\n        n += 1\n    return (running / n).item()\n'},
        'lost': {'check_train_epoch': 'at, is what the epoch keeps), observed'}},
}
for _name, _spec in BLIND14.items():
    VARIANTS[f"blind14_{_name}"] = _spec


BLIND19 = {  # blind round 19: cases that were misgraded, graded right since
    # The whole epoch inside torch.random.fork_rng: at the end the global generator is put BACK to its state at the 
    'train_fork_rng_epoch': {'cells': {'evaluate': 'def evaluate(model, loader):\n    """Accuracy of `model` on `loader`, in eval mode without autograd; the model\'s mode is restored."""\n    was_training = model.training\n    model.eval()\n    device = next(model.parameters()).device\n    correct = total = 0\n    try:\n        with torch.no_grad():\n            for x, y in loader:\n                x, y = x.to(device), y.to(device)\n                correct += (model(x).argmax(1) == y).sum().item()\n                total += len(y)\n    finally:\n        model.train(was_training)\n    return correct / total\n', 'train_epoch': 'def train_epoch(model, loader, optimizer):\n    """One epoch in training mode; returns the mean batch loss."""\n    model.train()\n    device = next(model.parameters()).device\n    losses = []\n    # keep the caller\'s random stream untouched: Dropout draws from a forked copy\n    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):\n        for x, y in loader:\n            x, y = x.to(device), y.to(device)\n            optimizer.zero_grad()\n            loss = F.cross_entropy(model(x), y)\n            loss.backward()\n            optimizer.step()\n            losses.append(loss.item())\n    return sum(losses) / len(losses)\n'},
        'lost': {'check_train_epoch': 'the global random stream Dropout draws from, after train_epoch'}},
    # Correct with harmless extras: model.train() before every step, zero_grad after the forward (still before backw
    'ok_train_closure_free_defensive': {'cells': {'evaluate': 'def evaluate(model, loader):\n    """Accuracy of `model` on `loader`, in eval mode without autograd; the model\'s mode is restored."""\n    was_training = model.training\n    model.eval()\n    device = next(model.parameters()).device\n    correct = total = 0\n    try:\n        with torch.no_grad():\n            for x, y in loader:\n                x, y = x.to(device), y.to(device)\n                correct += (model(x).argmax(1) == y).sum().item()\n                total += len(y)\n    finally:\n        model.train(was_training)\n    return correct / total\n', 'train_epoch': 'def train_epoch(model, loader, optimizer):\n    """One epoch in training mode; returns the mean batch loss."""\n    device = next(model.parameters()).device\n    losses = []\n    with torch.enable_grad():                        # even if a caller left autograd off\n        for x, y in loader:\n            model.train()                            # every step, every layer\n            x = x.to(device)\n            y = y.to(device)\n            logits = model(x)\n            assert logits.requires_grad, "autograd is off"\n            loss = F.cross_entropy(logits, y)\n            optimizer.zero_grad()\n            loss.backward()\n            optimizer.step()\n            losses.append(float(loss.detach()))\n            print(f"batch {len(losses):3d}  loss {losses[-1]:.4f}", end="\\r")\n    print()\n    return sum(losses) / len(losses)\n'},
        'lost': {}},
}
for _name, _spec in BLIND19.items():
    VARIANTS[f"blind19_{_name}"] = _spec


BLIND20 = {  # blind round 20: cases that were misgraded, graded right since
    # AMBIGUOUS which check, judged wrong: a correct evaluate plus torch.manual_seed(0) at the top 'so validation is
    'eval_reseeds_global_rng': {'cells': {'evaluate': 'def evaluate(model, loader):\n    """Accuracy of `model` on `loader`, in eval mode without autograd; the model\'s mode is restored."""\n    torch.manual_seed(0)                               # reproducible validation\n    was_training = model.training\n    device = next(model.parameters()).device\n    model.eval()\n    correct = total = 0\n    with torch.no_grad():\n        for x, y in loader:\n            x, y = x.to(device), y.to(device)\n            correct += (model(x).argmax(1) == y).sum().item()\n            total += len(y)\n    model.train(was_training)\n    return correct / total\n', 'train_epoch': 'def train_epoch(model, loader, optimizer):\n    """One epoch in training mode; returns the mean batch loss."""\n    device = next(model.parameters()).device\n    model.train()\n    losses = []\n    for x, y in loader:\n        x, y = x.to(device), y.to(device)\n        optimizer.zero_grad()\n        loss = F.cross_entropy(model(x), y)\n        loss.backward()\n        optimizer.step()\n        losses.append(loss.item())\n    return sum(losses) / len(losses)\n'},
        'lost': {'check_evaluate_eval': 'evaluate reseeds the global random stream'}},
}
for _name, _spec in BLIND20.items():
    VARIANTS[f"blind20_{_name}"] = _spec
