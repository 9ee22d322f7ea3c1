"""Lesson 01 (device mismatch): plausible wrong fixes and a correct fix written differently."""

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
    counts = logits.new_tensor(class_counts)
    criterion = nn.CrossEntropyLoss(weight=counts.sum() / (counts.numel() * counts))
    return criterion(logits, targets)'''

ALT_STEP = '''def train_step(model, batch, loss_fn, optimizer, device):
    x, y = (t.to(device) for t in batch)
    optimizer.zero_grad(set_to_none=True)
    out = model(x)
    loss = loss_fn(out, y)
    loss.backward()
    optimizer.step()
    return float(loss.detach().cpu())'''

DEVICE = "Expected all tensors to be on the same device"

VARIANTS = {
    "batch_left_on_cpu": {"cells": {"train_step": TRAIN_STEP_MODEL_ONLY}, "lost": {"check_train_step": DEVICE}},
    "class_weights_on_cpu": {"cells": {"class_weighted_loss": WEIGHTS_ON_CPU}, "lost": {"check_class_weighted_loss": DEVICE}},
    "labels_not_moved": {
        "cells": {"to_device": ONLY_INPUTS_MOVED},
        "lost": {"check_to_device": "after to_device: expected on", "check_train_step": DEVICE},
    },
    "no_zero_grad": {"cells": {"train_step": NO_ZERO_GRAD}, "lost": {"check_train_step": "optimizer.zero_grad()"}},
    "returns_tensor": {"cells": {"train_step": RETURNS_TENSOR}, "lost": {"check_train_step": "Python float"}},
    "written_differently": {"cells": {"to_device": ALT_TO_DEVICE, "class_weighted_loss": ALT_LOSS, "train_step": ALT_STEP}, "lost": {}},
}
