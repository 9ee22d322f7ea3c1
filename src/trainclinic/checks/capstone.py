"""Checks for lesson 12, the capstone: one check per bug of the script, each calling only the piece it grades.

Where a piece is a lesson's own exercise, its check is that lesson's, called as it is (its hidden seeds sweep other
sizes, dtypes and devices): `to_device` (01), `prepare_batch` (02), `worker_init_fn` (09).
`accumulate_step` (03) runs lesson 03's three checks as one (the gradients at the step, one step, the full batch's
mean loss returned as a float, each forward given one micro-batch under a peak-memory budget). `evaluate` (06) runs lesson 06's three checks as one (eval mode, no
autograd, the mode restored). The learning rate is lesson 04's verdict on the capstone's own script (`script_losses`:
every other piece the reference's), on other seeds and spectrogram sizes in the hidden tests.
"""
import math
import random

import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader

from .. import data, models
from . import check, missing_eval, nan_loss
from .device_mismatch import check_to_device
from . import out_of_memory
from .out_of_memory import reference_accumulate_step
from .reproducibility import check_worker_init_fn
from .shape_dtype import check_prepare_batch

__all__ = ["check_to_device", "check_prepare_batch", "check_accumulated_grads", "check_stable_lr", "check_evaluate",
           "check_worker_init_fn", "script_case", "script_losses"]


def script_case(seed):
    """(samples, spectrogram size, classes, micro_batches) of the script for a seed: seed 0 is the notebook's."""
    if seed == 0:
        return 256, 8, 3, 4
    rng = random.Random(seed)
    return rng.choice([192, 256, 320]), rng.choice([6, 8, 10]), rng.choice([2, 3, 4]), rng.choice([2, 4])


def script_losses(lr, seed=0, steps=60, batch_size=32):
    """The capstone's script with every piece the reference's, SGD at `lr`: the losses until the first non-finite
    one (no DataLoader workers: the learning rate does not depend on them)."""
    n, size, classes, m = script_case(seed)
    dataset = data.Spectrograms(n=n, size=size, classes=classes, seed=seed)
    model = models.sensor_net(size=size, classes=classes, seed=seed)
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, generator=torch.Generator().manual_seed(seed))
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    while True:
        for images, labels in loader:
            batch = images.unsqueeze(1).float(), labels.long()
            losses.append(reference_accumulate_step(model, batch, F.cross_entropy, optimizer, m))
            if len(losses) == steps or not math.isfinite(losses[-1]):
                return losses


@check("stable_lr")
def check_stable_lr(lr, seed=0, steps=60, seeds=3):
    """LR trains the script (every other piece the reference's) on `seeds` seeds and sizes from `seed`: finite, the
    loss below 10% of its start."""
    return nan_loss.stable_lr_verdict(lr, seed, steps, seeds, train=script_losses, example=0.1)


@check("evaluate")
def check_evaluate(evaluate, seed=0):
    """Lesson 06's three checks of evaluate, as one: eval mode (Dropout off, BatchNorm statistics untouched), no
    autograd (the grad mode restored), and the model's mode restored."""
    return "; ".join(part.__wrapped__(evaluate, seed=seed) for part in (
        missing_eval.check_evaluate_eval, missing_eval.check_evaluate_no_grad, missing_eval.check_evaluate_restores))


@check("accumulated_grads")
def check_accumulated_grads(accumulate_step, seed=0):
    """Lesson 03's three checks, as one: the gradients at optimizer.step() equal the full batch's, one step per
    batch, the full batch's mean loss returned as a Python float, and each forward given one micro-batch (the peak
    memory of a step under a budget that the full batch breaks)."""
    return "; ".join(part.__wrapped__(accumulate_step, seed=seed) for part in (
        out_of_memory.check_accumulated_grads, out_of_memory.check_one_step, out_of_memory.check_peak_memory))
