"""Lesson 04 (NaN loss): plausible wrong fixes and correct fixes written differently."""

LOSS_EQUALS_NAN = '''def safe_step(model, batch, loss_fn, optimizer):
    inputs, targets = batch
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), targets)
    if loss == float("nan"):          # never True: NaN is not equal to anything, itself included
        return None
    loss.backward()
    optimizer.step()
    return loss.item()'''

STEP_THEN_CHECK = '''def safe_step(model, batch, loss_fn, optimizer):
    inputs, targets = batch
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    optimizer.step()                  # the weights are already corrupted...
    if not torch.isfinite(loss):      # ...by the time this notices
        return None
    return loss.item()'''

LOSS_ONLY = '''def safe_step(model, batch, loss_fn, optimizer):
    inputs, targets = batch
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), targets)
    if not torch.isfinite(loss):
        return None
    loss.backward()                   # gradients never checked
    optimizer.step()
    return loss.item()'''

ISNAN_ONLY = '''def safe_step(model, batch, loss_fn, optimizer):
    inputs, targets = batch
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), targets)
    if math.isnan(loss.item()):       # inf slips through, and its gradients become NaN
        return None
    loss.backward()
    optimizer.step()
    return loss.item()'''

TRAIN_SKIPS_SILENTLY = '''def train(model, loader, lr, steps):
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loss_fn = nn.MSELoss()
    history = {"step": [], "loss": [], "grad_norm": []}
    step = 0
    while step < steps:
        for batch in loader:
            if step == steps:
                break
            loss = safe_step(model, batch, loss_fn, optimizer)
            if loss is not None:           # skipped quietly: nobody hears about the NaN
                history["step"].append(step)
                history["loss"].append(loss)
                history["grad_norm"].append(tc.grad_norm(model))
            step += 1
    return history'''

TRAIN_ONE_PASS = '''def train(model, loader, lr, steps):
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    history = {"step": [], "loss": [], "grad_norm": []}
    for step, batch in enumerate(loader):  # one pass only: stops early when steps > len(loader)
        if step == steps:
            break
        loss = safe_step(model, batch, nn.MSELoss(), optimizer)
        if loss is None:
            raise FloatingPointError(f"non-finite loss at step {step}")
        history["step"].append(step)
        history["loss"].append(loss)
        history["grad_norm"].append(tc.grad_norm(model))
    return history'''

ALT_SAFE_STEP = '''def safe_step(model, batch, loss_fn, optimizer):
    x, y = batch
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    if not math.isfinite(loss.item()):
        return None
    loss.backward()
    total = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=float("inf"))
    if not torch.isfinite(total):
        optimizer.zero_grad(set_to_none=True)
        return None
    optimizer.step()
    return float(loss.detach())'''

ALT_TRAIN = '''import itertools, math

def train(model, loader, lr, steps):
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    history = {"step": [], "loss": [], "grad_norm": []}
    batches = (batch for _ in itertools.count() for batch in loader)
    for step, batch in zip(range(steps), batches):
        loss = safe_step(model, batch, nn.functional.mse_loss, opt)
        if loss is None:
            raise FloatingPointError(f"step {step}: the loss or a gradient is NaN/inf; stopped before stepping")
        history["step"].append(step)
        history["loss"].append(loss)
        history["grad_norm"].append(tc.grad_norm(model))
    return history'''

SKIP_WORDS = "a batch with a NaN input"
VARIANTS = {
    "loss_equals_nan": {
        "cells": {"safe_step": LOSS_EQUALS_NAN},
        "lost": {"check_safe_step": SKIP_WORDS, "check_train": "still finite (never trained on it)"},
    },
    "step_then_check": {
        "cells": {"safe_step": STEP_THEN_CHECK},
        "lost": {"check_safe_step": SKIP_WORDS, "check_train": "still finite (never trained on it)"},
    },
    "loss_checked_not_gradients": {
        "cells": {"safe_step": LOSS_ONLY},
        "lost": {"check_safe_step": "a loss whose value is finite but whose gradient is NaN"},
    },
    "isnan_misses_inf": {
        "cells": {"safe_step": ISNAN_ONLY},
        "lost": {"check_safe_step": "a batch with an inf target", "check_train": "the weights after train at lr=100"},
    },
    "train_skips_silently": {"cells": {"train": TRAIN_SKIPS_SILENTLY}, "lost": {"check_train": "FloatingPointError naming step 2"}},
    "train_one_pass": {"cells": {"train": TRAIN_ONE_PASS}, "lost": {"check_train": "going through the loader again"}},
    "rate_still_too_high": {"cells": {"stable_lr": "LR = 1.0"}, "lost": {"check_stable_lr": "went non-finite"}},
    "rate_too_low": {"cells": {"stable_lr": "LR = 1e-4"}, "lost": {"check_stable_lr": "too low"}},
    "written_differently": {"cells": {"safe_step": ALT_SAFE_STEP, "train": ALT_TRAIN, "stable_lr": "LR = 3e-2"}, "lost": {}},
}
