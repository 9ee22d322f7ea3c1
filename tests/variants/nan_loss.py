"""Lesson 04 (NaN loss): plausible wrong fixes and correct fixes written differently.

`blind1_*` are blind round 1 (written from the release notebook alone, without the checks); every misgrade
they exposed was fixed in the checks, and they stay here as regression cases.
"""

SAFE_STEP = '''def safe_step(model, batch, loss_fn, optimizer):
    inputs, targets = batch
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), targets)
    if not torch.isfinite(loss):
        return None
    loss.backward()
    if not all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None):
        optimizer.zero_grad()
        return None
    optimizer.step()
    return loss.item()'''


def safe_step_with(old, new):
    """The reference safe_step with one line changed (the variants below name the change)."""
    assert old in SAFE_STEP, old
    return SAFE_STEP.replace(old, new)


TRAIN = '''def train(model, loader, lr, steps):
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loss_fn = nn.MSELoss()
    history = {"step": [], "loss": [], "grad_norm": []}
    step = 0
    while step < steps:
        for batch in loader:
            if step == steps:
                break
            loss = safe_step(model, batch, loss_fn, optimizer)
            if loss is None:
                raise FloatingPointError(f"non-finite loss or gradient at step {step}: step skipped, training stopped")
            history["step"].append(step)
            history["loss"].append(loss)
            history["grad_norm"].append(tc.grad_norm(model))
            step += 1
    return history'''


def train_with(old, new):
    """The reference train with one line changed."""
    assert old in TRAIN, old
    return TRAIN.replace(old, new)


RAISE = 'raise FloatingPointError(f"non-finite loss or gradient at step {step}: step skipped, training stopped")'

LOSS_EQUALS_NAN = safe_step_with("if not torch.isfinite(loss):", 'if loss == float("nan"):   # never True')
STEP_THEN_CHECK = '''def safe_step(model, batch, loss_fn, optimizer):
    inputs, targets = batch
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    optimizer.step()                  # the weights are already corrupted...
    if not torch.isfinite(loss):      # ...by the time this notices
        return None
    return loss.item()'''
LOSS_ONLY = safe_step_with("if not all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None):",
                           "if False:  # gradients never checked")
ISNAN_ONLY = '''def safe_step(model, batch, loss_fn, optimizer):
    inputs, targets = batch
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), targets)
    if math.isnan(loss.item()):       # inf slips through, and its gradients become NaN
        return None
    loss.backward()
    optimizer.step()
    return loss.item()'''
ISNAN_GRADS = safe_step_with("if not all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None):",
                             "if any(torch.isnan(p.grad).any() for p in model.parameters() if p.grad is not None):")
NO_ZERO_GRAD = safe_step_with("    optimizer.zero_grad()\n    loss = ", "    loss = ")
OWN_OPTIMIZER = safe_step_with("    optimizer.step()", "    torch.optim.SGD(model.parameters(), lr=0.01).step()")
STEPS_TWICE = safe_step_with("    optimizer.step()", "    optimizer.step()\n    optimizer.step()")
CLIP_VALUE = safe_step_with("    optimizer.step()",
                            "    torch.nn.utils.clip_grad_value_(model.parameters(), 0.5)\n    optimizer.step()")
TOTAL_NORM = '''def safe_step(model, batch, loss_fn, optimizer):
    x, y = batch
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    if not math.isfinite(loss.item()):
        return None
    loss.backward()
    total = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=float("inf"))   # the norm, not the gradients
    if not torch.isfinite(total):
        optimizer.zero_grad(set_to_none=True)
        return None
    optimizer.step()
    return float(loss.detach())'''

ALT_SAFE_STEP = '''def safe_step(model, batch, loss_fn, optimizer):
    x, y = batch
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    if not math.isfinite(loss.item()):
        return None
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    if not torch.stack([torch.isfinite(g).all() for g in grads]).all():
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

TRAIN_SKIPS_SILENTLY = train_with(RAISE, "step += 1\n                continue   # skipped quietly: nobody hears about the NaN")
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
TRAIN_ADAM = train_with("torch.optim.SGD(model.parameters(), lr=lr)", "torch.optim.Adam(model.parameters(), lr=lr)")
TRAIN_FIXED_LR = train_with("torch.optim.SGD(model.parameters(), lr=lr)", "torch.optim.SGD(model.parameters(), lr=0.01)")
TRAIN_SUM = train_with("nn.MSELoss()", 'nn.MSELoss(reduction="sum")')
TRAIN_STEP_PER_PASS = '''def train(model, loader, lr, steps):
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    history = {"step": [], "loss": [], "grad_norm": []}
    while len(history["step"]) < steps:
        for i, batch in enumerate(loader):     # i starts again at 0 on every pass
            if len(history["step"]) == steps:
                break
            loss = safe_step(model, batch, nn.MSELoss(), optimizer)
            if loss is None:
                raise FloatingPointError(f"non-finite loss at step {i}")
            history["step"].append(len(history["step"]))
            history["loss"].append(loss)
            history["grad_norm"].append(tc.grad_norm(model))
    return history'''
TRAIN_NO_STEP_WORD = train_with(RAISE, 'raise FloatingPointError(f"non-finite loss or gradient at {step}")')
TRAIN_ITERATION = train_with(RAISE, 'raise FloatingPointError(f"iteration {step}: loss is not finite")')
TRAIN_STEP_HASH = train_with(RAISE, 'raise FloatingPointError(f"NaN at step #{step} of {steps}")')
TRAIN_OWN_CLIPPING = '''def train(model, loader, lr, steps):
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loss_fn = nn.MSELoss()
    history = {"step": [], "loss": [], "grad_norm": []}
    step = 0
    while step < steps:
        for x, y in loader:
            if step == steps:
                break
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            if not torch.isfinite(loss):
                raise FloatingPointError(f"step {step}: non-finite loss")
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)   # "just in case"
            optimizer.step()
            history["step"].append(step)
            history["loss"].append(loss.item())
            history["grad_norm"].append(tc.grad_norm(model))
            step += 1
    return history'''
TRAIN_GRAD_MODE = '''def train(model, loader, lr, steps):
    torch.set_grad_enabled(True)          # global state, left as it is
    torch.set_default_dtype(torch.float64)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    history = {"step": [], "loss": [], "grad_norm": []}
    it = iter(loader)
    for step in range(steps):
        try:
            batch = next(it)
        except StopIteration:
            it = iter(loader)
            batch = next(it)
        loss = safe_step(model, batch, nn.MSELoss(), optimizer)
        if loss is None:
            raise FloatingPointError(f"{step=}: NaN or inf")
        history["step"].append(step)
        history["loss"].append(loss)
        history["grad_norm"].append(tc.grad_norm(model))
    torch.set_grad_enabled(False)
    return history'''

SKIP_WORDS = "a batch with a NaN input"
VARIANTS = {
    "loss_equals_nan": {"cells": {"safe_step": LOSS_EQUALS_NAN}, "lost": {"check_safe_step": "is never True"}},
    "step_then_check": {"cells": {"safe_step": STEP_THEN_CHECK}, "lost": {"check_safe_step": "only after stepping"}},
    "loss_checked_not_gradients": {"cells": {"safe_step": LOSS_ONLY}, "lost": {"check_safe_step": "gradients are NaN"}},
    "isnan_misses_inf": {"cells": {"safe_step": ISNAN_ONLY}, "lost": {"check_safe_step": "isnan is False for inf"}},
    "isnan_gradients_miss_inf": {"cells": {"safe_step": ISNAN_GRADS},
                                 "lost": {"check_safe_step": "gradients are inf, not NaN"}},
    "no_zero_grad": {"cells": {"safe_step": NO_ZERO_GRAD}, "lost": {"check_safe_step": "left in p.grad"}},
    "own_optimizer": {"cells": {"safe_step": OWN_OPTIMIZER}, "lost": {"check_safe_step": "one of its own"}},
    "steps_twice": {"cells": {"safe_step": STEPS_TWICE}, "lost": {"check_safe_step": "expected exactly one, observed 2"}},
    "clips_gradient_values": {"cells": {"safe_step": CLIP_VALUE},
                              "lost": {"check_safe_step": "changed between backward() and optimizer.step()"}},
    "total_norm_refuses_finite_step": {"cells": {"safe_step": TOTAL_NORM}, "lost": {"check_safe_step": "not their total norm"}},
    "train_skips_silently": {"cells": {"train": TRAIN_SKIPS_SILENTLY}, "lost": {"check_train": "but train went on"}},
    "train_one_pass": {"cells": {"train": TRAIN_ONE_PASS}, "lost": {"check_train": "after one pass over the loader"}},
    "train_adam": {"cells": {"train": TRAIN_ADAM}, "lost": {"check_train": "observed torch.optim.Adam(lr=0.05"}},
    "train_ignores_lr": {"cells": {"train": TRAIN_FIXED_LR}, "lost": {"check_train": "observed torch.optim.SGD(lr=0.01)"}},
    "train_sum_of_squares": {"cells": {"train": TRAIN_SUM}, "lost": {"check_train": "a sum, not the mean"}},
    "train_step_restarts_each_pass": {"cells": {"train": TRAIN_STEP_PER_PASS}, "lost": {"check_train": "position in its pass"}},
    "train_message_without_step_word": {"cells": {"train": TRAIN_NO_STEP_WORD}, "lost": {"check_train": "not the word 'step'"}},
    "train_clips_its_own_steps": {"cells": {"train": TRAIN_OWN_CLIPPING},
                                  "lost": {"check_train": "that is what gradient clipping does"}},
    "rate_still_too_high": {"cells": {"stable_lr": "LR = 1.0"}, "lost": {"check_stable_lr": "this rate is too high"}},
    "rate_too_low": {"cells": {"stable_lr": "LR = 1e-4"}, "lost": {"check_stable_lr": "too low to get there"}},
    "rate_a_bit_low": {"cells": {"stable_lr": "LR = 0.007"}, "lost": {"check_stable_lr": "it fell 8"}},
    "rate_as_text": {"cells": {"stable_lr": 'LR = "0.05"'}, "lost": {"check_stable_lr": "a positive number"}},
    "written_differently": {"cells": {"safe_step": ALT_SAFE_STEP, "train": ALT_TRAIN, "stable_lr": "LR = 3e-2"}, "lost": {}},
    "iteration_word_and_global_state": {"cells": {"train": TRAIN_GRAD_MODE}, "lost": {}},
    "step_named_with_hash": {"cells": {"train": TRAIN_STEP_HASH, "stable_lr": "import numpy as np\nLR = np.float32(0.02)"},
                             "lost": {}},
    "step_named_as_iteration": {"cells": {"train": TRAIN_ITERATION}, "lost": {"check_train": "not the word 'step'"}},
    "blind1_math_isfinite_iter_next": {
        "cells": {
        'safe_step': 'import math\nimport torch\n\ndef safe_step(model, batch, loss_fn, optimizer):\n    """One training step; returns the loss as a float, or None (and no step) when the loss or a gradient is NaN/inf."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    loss = loss_fn(model(inputs), targets)\n    value = float(loss)\n    if not math.isfinite(value):\n        return None\n    loss.backward()\n    for p in model.parameters():\n        if p.grad is not None and not torch.isfinite(p.grad).all():\n            return None\n    optimizer.step()\n    return value\n',
        'train': 'import torch\nfrom torch import nn\n\ndef train(model, loader, lr, steps):\n    """SGD on MSE for `steps` steps; raises FloatingPointError naming the step at the first non-finite loss or gradient."""\n    optimizer = torch.optim.SGD(model.parameters(), lr=lr)\n    loss_fn = nn.MSELoss()\n    history = {"step": [], "loss": [], "grad_norm": []}\n    batches = iter(loader)\n    for step in range(steps):\n        try:\n            batch = next(batches)\n        except StopIteration:          # end of an epoch: go through the loader again\n            batches = iter(loader)\n            batch = next(batches)\n        loss = safe_step(model, batch, loss_fn, optimizer)\n        if loss is None:\n            raise FloatingPointError(f"non-finite loss or gradient at step {step}")\n        history["step"].append(step)\n        history["loss"].append(loss)\n        history["grad_norm"].append(tc.grad_norm(model))\n    return history\n',
        'stable_lr': 'LR = None  # your stable learning rate\n# YOUR CODE HERE\nLR = 0.05\n'},
        "lost": {}},
    "blind1_isnan_isinf_generator": {
        "cells": {
        'safe_step': 'import torch\n\ndef safe_step(model, batch, loss_fn, optimizer):\n    """One training step; returns the loss as a float, or None (and no step) when the loss or a gradient is NaN/inf."""\n    x, y = batch\n    optimizer.zero_grad(set_to_none=True)\n    output = model(x)\n    loss = loss_fn(output, y)\n    if torch.isnan(loss).any() or torch.isinf(loss).any():\n        return None\n    loss.backward()\n    grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]\n    if any(bool((torch.isnan(g) | torch.isinf(g)).any()) for g in grads):\n        return None\n    optimizer.step()\n    return loss.item()\n',
        'train': 'import torch\nfrom torch import nn\n\ndef train(model, loader, lr, steps):\n    """SGD on MSE for `steps` steps; raises FloatingPointError naming the step at the first non-finite loss or gradient."""\n    def forever():\n        while True:\n            yield from loader            # a new pass (and a new shuffle) each time round\n\n    opt = torch.optim.SGD(model.parameters(), lr=lr)\n    criterion = nn.MSELoss()\n    steps_done, losses, norms = [], [], []\n    for step, (xb, yb) in zip(range(steps), forever()):\n        loss = safe_step(model, (xb, yb), criterion, opt)\n        if loss is None:\n            raise FloatingPointError(f"Step {step}/{steps}: the loss or a gradient became NaN/inf, training stopped")\n        steps_done.append(step)\n        losses.append(loss)\n        norms.append(tc.grad_norm(model))\n    return {"step": steps_done, "loss": losses, "grad_norm": norms}\n',
        'stable_lr': 'LR = None  # your stable learning rate\n# YOUR CODE HERE\nLR = 3e-2\n'},
        "lost": {}},
    "blind1_autograd_grad_functional": {
        "cells": {
        'safe_step': 'import torch\n\ndef safe_step(model, batch, loss_fn, optimizer):\n    """One training step; returns the loss as a float, or None (and no step) when the loss or a gradient is NaN/inf."""\n    optimizer.zero_grad()\n    inputs, targets = batch\n    with torch.enable_grad():\n        loss = loss_fn(model(inputs), targets)\n    if not torch.isfinite(loss):\n        return None\n    params = [p for p in model.parameters() if p.requires_grad]\n    grads = torch.autograd.grad(loss, params, allow_unused=True)\n    if not all(g is None or torch.isfinite(g).all() for g in grads):\n        return None\n    for p, g in zip(params, grads):\n        if g is not None:\n            p.grad = g\n    optimizer.step()\n    return loss.detach().item()\n',
        'train': 'import torch\nimport torch.nn.functional as F\n\ndef train(model, loader, lr, steps):\n    """SGD on MSE for `steps` steps; raises FloatingPointError naming the step at the first non-finite loss or gradient."""\n    torch.manual_seed(0)           # reproducible runs\n    torch.set_num_threads(1)       # tiny model: one thread is fastest\n    model.train()\n    optimizer = torch.optim.SGD(model.parameters(), lr=lr)\n    history = {}\n    step = 0\n    while step < steps:\n        for inputs, targets in loader:\n            if step >= steps:\n                break\n            loss = safe_step(model, (inputs, targets), F.mse_loss, optimizer)\n            if loss == None:\n                raise FloatingPointError(f"NaN/inf loss or gradient (step={step})")\n            history.setdefault("step", []).append(step)\n            history.setdefault("loss", []).append(loss)\n            history.setdefault("grad_norm", []).append(tc.grad_norm(model))\n            step += 1\n    return history\n',
        'stable_lr': 'LR = None  # your stable learning rate\n# YOUR CODE HERE\nLR = 1 / 20\n'},
        "lost": {}},
    "blind1_library_finite_precheck_no_grad": {
        "cells": {
        'safe_step': 'import torch\nfrom trainclinic import nonfinite\n\ndef safe_step(model, batch, loss_fn, optimizer):\n    """One training step; returns the loss as a float, or None (and no step) when the loss or a gradient is NaN/inf."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    with torch.no_grad():                      # cheap look first: no graph\n        if not nonfinite.finite(loss_fn(model(inputs), targets)):\n            return None\n    loss = loss_fn(model(inputs), targets)\n    loss.backward()\n    if not nonfinite.finite([p.grad for p in model.parameters() if p.grad is not None]):\n        return None\n    optimizer.step()\n    return loss.item()\n',
        'train': 'import itertools\nimport math\nimport torch\nfrom torch import nn\n\ndef train(model, loader, lr, steps):\n    """SGD on MSE for `steps` steps; raises FloatingPointError naming the step at the first non-finite loss or gradient."""\n    dev = next(model.parameters()).device\n    optimizer = torch.optim.SGD(model.parameters(), lr=lr)\n    loss_fn = nn.MSELoss()\n    epochs = math.ceil(steps / len(loader))\n    stream = itertools.chain.from_iterable(iter(loader) for _ in range(epochs))\n    history = {"step": [], "loss": [], "grad_norm": []}\n    for step, (x, y) in enumerate(itertools.islice(stream, steps)):\n        loss = safe_step(model, (x.to(dev), y.to(dev)), loss_fn, optimizer)\n        if loss is None:\n            raise FloatingPointError(f"training diverged at step {step}: safe_step found a non-finite loss or gradient")\n        history["step"].append(step)\n        history["loss"].append(loss)\n        history["grad_norm"].append(tc.grad_norm(model))\n    return history\n'},
        "lost": {}},
    "blind1_stack_isfinite_set_grad_enabled": {
        "cells": {
        'safe_step': 'import torch\n\ndef safe_step(model, batch, loss_fn, optimizer):\n    """One training step; returns the loss as a float, or None (and no step) when the loss or a gradient is NaN/inf."""\n    optimizer.zero_grad(set_to_none=False)\n    with torch.set_grad_enabled(True):\n        loss = loss_fn(model(batch[0]), batch[1])\n        if not loss.isfinite().all().item():\n            return None\n        loss.backward()\n    flags = [p.grad.isfinite().all() for p in model.parameters() if p.grad is not None]\n    if flags and not torch.stack(flags).all():\n        return None\n    optimizer.step()\n    return loss.item()\n'},
        "lost": {}},
    "blind1_loss_only_check": {  # checks only the loss: a finite loss with NaN gradients (the root_error case) is stepped and writes NaN into the weights ('if any gradient is not finit
        "cells": {
        'safe_step': 'import torch\n\ndef safe_step(model, batch, loss_fn, optimizer):\n    """One training step; returns the loss as a float, or None (and no step) when the loss or a gradient is NaN/inf."""\n    x, y = batch\n    optimizer.zero_grad()\n    loss = loss_fn(model(x), y)\n    if not torch.isfinite(loss):\n        return None\n    loss.backward()\n    optimizer.step()\n    return loss.item()\n'},
        "lost": {'check_safe_step': 'gradients are NaN'}},
    "blind1_isnan_loss_backward_on_inf": {  # tests the loss with isnan only: an inf loss goes through backward() (forbidden: 'if the loss is not finite, return None WITHOUT calling backward()'); 
        "cells": {
        'safe_step': 'import torch\n\ndef safe_step(model, batch, loss_fn, optimizer):\n    """One training step; returns the loss as a float, or None (and no step) when the loss or a gradient is NaN/inf."""\n    x, y = batch\n    optimizer.zero_grad()\n    loss = loss_fn(model(x), y)\n    if torch.isnan(loss):\n        return None\n    loss.backward()\n    for p in model.parameters():\n        if p.grad is not None and not torch.isfinite(p.grad).all():\n            return None\n    optimizer.step()\n    return loss.item()\n'},
        "lost": {'check_safe_step': 'loss.backward() was called on the inf loss'}},
    "blind1_isnan_only": {  # treats only NaN as bad: an inf loss is backpropagated and gradients that are inf (not NaN) are stepped, writing inf into the weights (the text: 'NaN o
        "cells": {
        'safe_step': 'import math\n\ndef safe_step(model, batch, loss_fn, optimizer):\n    """One training step; returns the loss as a float, or None (and no step) when the loss or a gradient is NaN/inf."""\n    x, y = batch\n    optimizer.zero_grad()\n    loss = loss_fn(model(x), y)\n    if math.isnan(loss.item()):\n        return None\n    loss.backward()\n    if any(p.grad.isnan().any() for p in model.parameters() if p.grad is not None):\n        return None\n    optimizer.step()\n    return loss.item()\n'},
        "lost": {'check_safe_step': 'loss.backward() was called on the inf loss'}},
    "blind1_step_then_check": {  # backward and step before checking: a non-finite loss/gradient has already changed the weights when it returns None ('When it returns None, the weights
        "cells": {
        'safe_step': 'import torch\n\ndef safe_step(model, batch, loss_fn, optimizer):\n    """One training step; returns the loss as a float, or None (and no step) when the loss or a gradient is NaN/inf."""\n    x, y = batch\n    optimizer.zero_grad()\n    loss = loss_fn(model(x), y)\n    loss.backward()\n    optimizer.step()\n    if not torch.isfinite(loss):\n        return None\n    for p in model.parameters():\n        if not torch.isfinite(p.grad).all():\n            return None\n    return loss.item()\n'},
        "lost": {'check_safe_step': 'only after stepping'}},
    "blind1_nan_to_num_grads": {  # on non-finite gradients it patches them with nan_to_num_ (NaN -> 0, inf -> float32 max) and still steps, then returns None ('return None without stepp
        "cells": {
        'safe_step': 'import torch\n\ndef safe_step(model, batch, loss_fn, optimizer):\n    """One training step; returns the loss as a float, or None (and no step) when the loss or a gradient is NaN/inf."""\n    x, y = batch\n    optimizer.zero_grad()\n    loss = loss_fn(model(x), y)\n    if not torch.isfinite(loss):\n        return None\n    loss.backward()\n    bad = False\n    for p in model.parameters():\n        if p.grad is not None and not torch.isfinite(p.grad).all():\n            bad = True\n            torch.nan_to_num_(p.grad)          # "fix" the bad gradients (StackOverflow): NaN -> 0, inf -> float max\n    optimizer.step()\n    return None if bad else loss.item()\n'},
        "lost": {'check_safe_step': 'replaced in between'}},
    "blind1_grad_norm_overflow": {  # tests the total gradient NORM instead of the gradients: a sum of squares overflows to inf while every gradient is still finite (the lesson says so), s
        "cells": {
        'safe_step': 'import math\nimport torch\n\ndef safe_step(model, batch, loss_fn, optimizer):\n    """One training step; returns the loss as a float, or None (and no step) when the loss or a gradient is NaN/inf."""\n    x, y = batch\n    optimizer.zero_grad()\n    loss = loss_fn(model(x), y)\n    if not torch.isfinite(loss):\n        return None\n    loss.backward()\n    if not math.isfinite(tc.grad_norm(model)):       # one number for all the gradients\n        return None\n    optimizer.step()\n    return loss.item()\n'},
        "lost": {'check_safe_step': 'not their total norm'}},
    "blind1_clips_gradients": {  # clips the gradient norm to 1 before stepping: normal steps are no longer the plain optimizer step on the backpropagated gradients whenever the norm ex
        "cells": {
        'safe_step': 'import torch\n\ndef safe_step(model, batch, loss_fn, optimizer):\n    """One training step; returns the loss as a float, or None (and no step) when the loss or a gradient is NaN/inf."""\n    x, y = batch\n    optimizer.zero_grad()\n    loss = loss_fn(model(x), y)\n    if not torch.isfinite(loss):\n        return None\n    loss.backward()\n    for p in model.parameters():\n        if p.grad is not None and not torch.isfinite(p.grad).all():\n            return None\n    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)   # extra safety\n    optimizer.step()\n    return loss.item()\n'},
        "lost": {'check_safe_step': 'that is what gradient clipping does'}},
    "blind1_returns_loss_tensor": {  # returns the loss as a 0-d tensor, not a Python float ('return the loss as a Python float'); skipping and stepping are right
        "cells": {
        'safe_step': 'import torch\n\ndef safe_step(model, batch, loss_fn, optimizer):\n    """One training step; returns the loss as a float, or None (and no step) when the loss or a gradient is NaN/inf."""\n    x, y = batch\n    optimizer.zero_grad()\n    loss = loss_fn(model(x), y)\n    if not torch.isfinite(loss):\n        return None\n    loss.backward()\n    for p in model.parameters():\n        if p.grad is not None and not torch.isfinite(p.grad).all():\n            return None\n    optimizer.step()\n    return loss.detach()\n'},
        "lost": {'check_safe_step': 'a tensor, not a number'}},
    "blind1_skip_returns_nan": {  # skips the step correctly but returns the non-finite loss (nan/inf) instead of None ('return None'); the reference train then never raises, so check_tr
        "cells": {
        'safe_step': 'import math\nimport torch\n\ndef safe_step(model, batch, loss_fn, optimizer):\n    """One training step; returns the loss as a float, or None (and no step) when the loss or a gradient is NaN/inf."""\n    x, y = batch\n    optimizer.zero_grad()\n    loss = loss_fn(model(x), y)\n    value = loss.item()\n    if not math.isfinite(value):\n        return value                      # skip the step, but still report the loss\n    loss.backward()\n    if any(not torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None):\n        return float("nan")\n    optimizer.step()\n    return value\n'},
        "lost": {'check_safe_step': 'expected None (the step was skipped), observed float nan'}},
    "blind1_one_pass_over_loader": {  # one pass over the loader only: with fewer batches than steps it stops early (8 batches for 60 steps here) ('for exactly steps steps, going through the
        "cells": {
        'train': 'import torch\nfrom torch import nn\n\ndef train(model, loader, lr, steps):\n    """SGD on MSE for `steps` steps; raises FloatingPointError naming the step at the first non-finite loss or gradient."""\n    optimizer = torch.optim.SGD(model.parameters(), lr=lr)\n    loss_fn = nn.MSELoss()\n    history = {"step": [], "loss": [], "grad_norm": []}\n    for step, batch in enumerate(loader):\n        if step >= steps:\n            break\n        loss = safe_step(model, batch, loss_fn, optimizer)\n        if loss is None:\n            raise FloatingPointError(f"non-finite loss or gradient at step {step}")\n        history["step"].append(step)\n        history["loss"].append(loss)\n        history["grad_norm"].append(tc.grad_norm(model))\n    return history\n'},
        "lost": {'check_train': 'train stopped after one pass over the loader'}},
    "blind1_step_counted_from_1": {  # the error message names the step counting from 1 (one too many) although history['step'] counts from 0 ('names the step, counting from 0 as in history
        "cells": {
        'train': 'import torch\nfrom torch import nn\n\ndef train(model, loader, lr, steps):\n    """SGD on MSE for `steps` steps; raises FloatingPointError naming the step at the first non-finite loss or gradient."""\n    optimizer = torch.optim.SGD(model.parameters(), lr=lr)\n    loss_fn = nn.MSELoss()\n    history = {"step": [], "loss": [], "grad_norm": []}\n    step = 0\n    while step < steps:\n        for batch in loader:\n            if step == steps:\n                break\n            loss = safe_step(model, batch, loss_fn, optimizer)\n            step += 1\n            if loss is None:\n                raise FloatingPointError(f"non-finite loss or gradient at step {step}")\n            history["step"].append(step - 1)\n            history["loss"].append(loss)\n            history["grad_norm"].append(tc.grad_norm(model))\n    return history\n'},
        "lost": {'check_train': 'counted from 1'}},
    "blind1_message_names_last_good_step": {  # the message names the last GOOD step (one too few), and at step 0 it crashes with IndexError instead of FloatingPointError ('names the step' that fail
        "cells": {
        'train': 'import torch\nfrom torch import nn\n\ndef train(model, loader, lr, steps):\n    """SGD on MSE for `steps` steps; raises FloatingPointError naming the step at the first non-finite loss or gradient."""\n    optimizer = torch.optim.SGD(model.parameters(), lr=lr)\n    loss_fn = nn.MSELoss()\n    history = {"step": [], "loss": [], "grad_norm": []}\n    while len(history["step"]) < steps:\n        for batch in loader:\n            if len(history["step"]) == steps:\n                break\n            loss = safe_step(model, batch, loss_fn, optimizer)\n            if loss is None:\n                raise FloatingPointError(f"non-finite loss or gradient after step {history[\'step\'][-1]}")\n            history["step"].append(len(history["step"]))\n            history["loss"].append(loss)\n            history["grad_norm"].append(tc.grad_norm(model))\n    return history\n'},
        "lost": {'check_train': 'the last step that went well'}},
    "blind1_skips_bad_batches": {  # skips the bad batch and goes on instead of stopping with FloatingPointError ('when safe_step returns None, stop and raise FloatingPointError')
        "cells": {
        'train': 'import torch\nfrom torch import nn\n\ndef train(model, loader, lr, steps):\n    """SGD on MSE for `steps` steps; raises FloatingPointError naming the step at the first non-finite loss or gradient."""\n    optimizer = torch.optim.SGD(model.parameters(), lr=lr)\n    loss_fn = nn.MSELoss()\n    history = {"step": [], "loss": [], "grad_norm": []}\n    step = 0\n    while step < steps:\n        for batch in loader:\n            if step == steps:\n                break\n            loss = safe_step(model, batch, loss_fn, optimizer)\n            if loss is None:\n                print(f"skipping a non-finite loss or gradient at step {step}")\n            else:\n                history["step"].append(step)\n                history["loss"].append(loss)\n                history["grad_norm"].append(tc.grad_norm(model))\n            step += 1\n    return history\n'},
        "lost": {'check_train': 'but train went on'}},
    "blind1_raises_runtime_error": {  # raises RuntimeError, not FloatingPointError ('raise FloatingPointError'); the 3c cell's `except FloatingPointError` does not catch it either
        "cells": {
        'train': 'import torch\nfrom torch import nn\n\ndef train(model, loader, lr, steps):\n    """SGD on MSE for `steps` steps; raises FloatingPointError naming the step at the first non-finite loss or gradient."""\n    optimizer = torch.optim.SGD(model.parameters(), lr=lr)\n    loss_fn = nn.MSELoss()\n    history = {"step": [], "loss": [], "grad_norm": []}\n    step = 0\n    while step < steps:\n        for batch in loader:\n            if step == steps:\n                break\n            loss = safe_step(model, batch, loss_fn, optimizer)\n            if loss is None:\n                raise RuntimeError(f"non-finite loss or gradient at step {step}")\n            history["step"].append(step)\n            history["loss"].append(loss)\n            history["grad_norm"].append(tc.grad_norm(model))\n            step += 1\n    return history\n'},
        "lost": {'check_train': 'observed RuntimeError('}},
    "blind1_sgd_with_momentum": {  # adds momentum=0.9 (tutorial habit): a different optimizer and training run than the asked 'torch.optim.SGD(model.parameters(), lr=lr)'
        "cells": {
        'train': 'import torch\nfrom torch import nn\n\ndef train(model, loader, lr, steps):\n    """SGD on MSE for `steps` steps; raises FloatingPointError naming the step at the first non-finite loss or gradient."""\n    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)\n    loss_fn = nn.MSELoss()\n    history = {"step": [], "loss": [], "grad_norm": []}\n    step = 0\n    while step < steps:\n        for batch in loader:\n            if step == steps:\n                break\n            loss = safe_step(model, batch, loss_fn, optimizer)\n            if loss is None:\n                raise FloatingPointError(f"non-finite loss or gradient at step {step}")\n            history["step"].append(step)\n            history["loss"].append(loss)\n            history["grad_norm"].append(tc.grad_norm(model))\n            step += 1\n    return history\n'},
        "lost": {'check_train': 'momentum=0.9'}},
    "blind1_itertools_cycle": {  # itertools.cycle replays the first epoch's cached batches in the same order instead of going through the (reshuffling) loader again ('going through the
        "cells": {
        'train': 'import itertools\nimport torch\nfrom torch import nn\n\ndef train(model, loader, lr, steps):\n    """SGD on MSE for `steps` steps; raises FloatingPointError naming the step at the first non-finite loss or gradient."""\n    optimizer = torch.optim.SGD(model.parameters(), lr=lr)\n    loss_fn = nn.MSELoss()\n    history = {"step": [], "loss": [], "grad_norm": []}\n    for step, batch in zip(range(steps), itertools.cycle(loader)):\n        loss = safe_step(model, batch, loss_fn, optimizer)\n        if loss is None:\n            raise FloatingPointError(f"non-finite loss or gradient at step {step}")\n        history["step"].append(step)\n        history["loss"].append(loss)\n        history["grad_norm"].append(tc.grad_norm(model))\n    return history\n'},
        "lost": {'check_train': 'replays the first pass'}},
    "blind1_lr_on_the_edge": {  # 0.2 stays finite but the loss oscillates and does not fall below 10% of its start within 60 steps (mean of the last 5 about 30%; 0.3 already diverges)
        "cells": {
        'stable_lr': 'LR = None  # your stable learning rate\n# YOUR CODE HERE\nLR = 0.2\n'},
        "lost": {'check_stable_lr': 'this rate is too high (the loss bounces'}},
    "blind1_lr_too_small": {  # finite but far too slow: the loss is still near its start after 60 steps ('falls below 10% of where it started within 60 steps')
        "cells": {
        'stable_lr': 'LR = None  # your stable learning rate\n# YOUR CODE HERE\nLR = 0.001\n'},
        "lost": {'check_stable_lr': 'too low to get there'}},
    "blind1_lr_diverges": {  # 0.3 looks fine for ~25 steps, then blows up (non-finite around step 28-49 depending on the seed): not 'a rate at which the loss stays finite'
        "cells": {
        'stable_lr': 'LR = None  # your stable learning rate\n# YOUR CODE HERE\nLR = 0.3\n'},
        "lost": {'check_stable_lr': 'this rate is too high for the problem'}},
    "blind2_amax_stack_chain_repeat": {  # expectation corrected: .float() of a float64 gradient above 3.4e38 makes inf, so a finite gradient ('if any gradient holds NaN or inf') is refused
        "cells": {
        'safe_step': 'import torch\n\ndef safe_step(model, batch, loss_fn, optimizer):\n    """One training step; returns the loss as a float, or None (and no step) when the loss or a gradient is NaN/inf."""\n    inputs, targets = batch\n    model.zero_grad(set_to_none=True)\n    loss = loss_fn(model(inputs), targets)\n    if not bool(torch.isfinite(loss.detach())):\n        return None\n    loss.backward()\n    grads = [p.grad.detach() for p in model.parameters() if p.grad is not None]\n    if grads:\n        worst = torch.stack([g.abs().amax().float() for g in grads])\n        if not bool(torch.isfinite(worst).all()):\n            return None\n    optimizer.step()\n    return loss.item()\n',
        'train': 'import itertools\nimport torch\nfrom torch import nn\n\ndef train(model, loader, lr, steps):\n    """SGD on MSE for `steps` steps; raises FloatingPointError naming the step at the first non-finite loss or gradient."""\n    optimizer = torch.optim.SGD(model.parameters(), lr=lr)\n    criterion = nn.MSELoss()\n    history = {"step": [], "loss": [], "grad_norm": []}\n    passes = itertools.chain.from_iterable(itertools.repeat(loader))   # `for batch in loader` again at each pass\n    for step, batch in enumerate(itertools.islice(passes, steps)):\n        value = safe_step(model, batch, criterion, optimizer)\n        if value is None:\n            raise FloatingPointError(f"loss or gradient not finite at step {step}: stopped")\n        history["step"].append(step)\n        history["loss"].append(value)\n        history["grad_norm"].append(tc.grad_norm(model))\n    return history\n',
        'stable_lr': 'LR = None  # your stable learning rate\n# YOUR CODE HERE\nLR = 0.07\n',
        },
        "lost": {'check_safe_step': 'a cast to float32'}},
    "blind2_grad_isfinite_any": {  # isfinite(...).any(): a gradient with one non-finite entry is stepped
        "cells": {
        'safe_step': 'import torch\n\ndef safe_step(model, batch, loss_fn, optimizer):\n    """One training step; returns the loss as a float, or None (and no step) when the loss or a gradient is NaN/inf."""\n    x, y = batch\n    optimizer.zero_grad()\n    loss = loss_fn(model(x), y)\n    if not torch.isfinite(loss):\n        return None\n    loss.backward()\n    for p in model.parameters():\n        if p.grad is not None and not torch.isfinite(p.grad).any():   # .any() where .all() was meant\n            return None\n    optimizer.step()\n    return loss.item()\n',
        },
        "lost": {'check_safe_step': 'all finite except ONE entry'}},
    "blind2_checks_weight_grads_only": {  # tests '*weight' gradients only: a non-finite bias gradient is stepped
        "cells": {
        'safe_step': 'import torch\n\ndef safe_step(model, batch, loss_fn, optimizer):\n    """One training step; returns the loss as a float, or None (and no step) when the loss or a gradient is NaN/inf."""\n    x, y = batch\n    optimizer.zero_grad()\n    loss = loss_fn(model(x), y)\n    if not torch.isfinite(loss):\n        return None\n    loss.backward()\n    for name, p in model.named_parameters():\n        if name.endswith("weight") and not torch.isfinite(p.grad).all():   # the weight matrices\n            return None\n    optimizer.step()\n    return loss.item()\n',
        },
        "lost": {'check_safe_step': 'all finite except ONE entry'}},
    "blind2_message_says_iteration": {  # 'iteration #6': the text asks for the word step followed by its number
        "cells": {
        'train': 'import math\nimport torch\nfrom torch import nn\n\ndef train(model, loader, lr, steps):\n    """SGD on MSE for `steps` steps; raises FloatingPointError naming the step at the first non-finite loss or gradient."""\n    optimizer = torch.optim.SGD(model.parameters(), lr=lr)\n    loss_fn = nn.MSELoss()\n    history = {"step": [], "loss": [], "grad_norm": []}\n    step = 0\n    while step < steps:\n        for batch in loader:\n            if step == steps:\n                break\n            loss = safe_step(model, batch, loss_fn, optimizer)\n            if loss is None:\n                raise FloatingPointError(f"loss went NaN/inf at iteration #{step}")\n            history["step"].append(step)\n            history["loss"].append(loss)\n            history["grad_norm"].append(tc.grad_norm(model))\n            step += 1\n    return history\n',
        },
        "lost": {'check_train': "not the word 'step'"}},
    "blind2_lr_slow_edge": {  # 0.01 passes seeds 0-2 but not 3 ('do not sit on the edge')
        "cells": {
        'stable_lr': 'LR = None  # your stable learning rate\n# YOUR CODE HERE\nLR = 0.01   # the smallest rate of the sweep that gets below 10%: the safest\n',
        },
        "lost": {'check_stable_lr': 'sits on the edge'}},
    "blind2_step_then_restore": {  # misleading message fixed: it said the step was on all-zero gradients (NaN > 0 is False); it stepped on NaN gradients and put the weights back
        "cells": {
        'safe_step': 'import torch\n\ndef safe_step(model, batch, loss_fn, optimizer):\n    """One training step; returns the loss as a float, or None (and no step) when the loss or a gradient is NaN/inf."""\n    x, y = batch\n    optimizer.zero_grad()\n    loss = loss_fn(model(x), y)\n    if not torch.isfinite(loss):\n        return None\n    loss.backward()\n    saved = [p.detach().clone() for p in model.parameters()]\n    optimizer.step()\n    bad = any(p.grad is not None and not torch.isfinite(p.grad).all() for p in model.parameters())\n    if bad:                                     # undo the step: the weights are exactly as they were\n        with torch.no_grad():\n            for p, s in zip(model.parameters(), saved):\n                p.copy_(s)\n        return None\n    return loss.item()\n',
        },
        "lost": {'check_safe_step': 'only after optimizer.step() had run'}},
    "blind2_sanitises_batch_in_place": {  # misleading message fixed: the hint said the NaN loss got past the test; the batch was repaired in place, so the loss was finite
        "cells": {
        'safe_step': 'import torch\n\ndef safe_step(model, batch, loss_fn, optimizer):\n    """One training step; returns the loss as a float, or None (and no step) when the loss or a gradient is NaN/inf."""\n    x, y = batch\n    torch.nan_to_num_(x, nan=0.0, posinf=0.0, neginf=0.0)   # clean corrupted samples first\n    torch.nan_to_num_(y, nan=0.0, posinf=0.0, neginf=0.0)\n    optimizer.zero_grad()\n    loss = loss_fn(model(x), y)\n    if not torch.isfinite(loss):\n        return None\n    loss.backward()\n    for p in model.parameters():\n        if p.grad is not None and not torch.isfinite(p.grad).all():\n            return None\n    optimizer.step()\n    return loss.item()\n',
        },
        "lost": {'check_safe_step': 'changed in place'}},
}

# Blind round 3 (written from the release notebook alone): the case it misgraded. The text says NaN, inf or -inf; no
# case had a loss of -inf (an inf target makes the squared error +inf), so a test for NaN and +inf passed.
BLIND3_MISSES_NEGATIVE_INF_LOSS = '''import math
import torch

def safe_step(model, batch, loss_fn, optimizer):
    """One training step; returns the loss as a float, or None (and no step) when the loss or a gradient is NaN/inf."""
    x, y = batch
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    value = loss.item()
    if math.isnan(value) or value == math.inf:
        return None
    loss.backward()
    for p in model.parameters():
        if p.grad is not None and not torch.isfinite(p.grad).all():
            return None
    optimizer.step()
    return value'''

VARIANTS["blind3_misses_negative_inf_loss"] = {"cells": {"safe_step": BLIND3_MISSES_NEGATIVE_INF_LOSS},
                                               "lost": {"check_safe_step": "-inf is not finite either"}}

# The same class of defect as lesson 03's blind3_step_with_closure: an optimizer step pre-hook fires before the
# closure of optimizer.step(closure) runs, so the check read the gradients before the update's own (None, here).
STEP_WITH_CLOSURE = '''import torch

def safe_step(model, batch, loss_fn, optimizer):
    """One training step; returns the loss as a float, or None (and no step) when the loss or a gradient is NaN/inf."""
    x, y = batch
    optimizer.zero_grad()
    loss = loss_fn(model(x), y)
    if not torch.isfinite(loss):
        return None
    params = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, params, retain_graph=True)   # look first, without touching p.grad
    if not all(torch.isfinite(g).all() for g in grads):
        return None

    def closure():                   # the optimizer's own protocol: it calls this, then updates
        optimizer.zero_grad()
        loss.backward()
        return loss

    optimizer.step(closure)
    return loss.item()'''

VARIANTS["step_with_closure"] = {"cells": {"safe_step": STEP_WITH_CLOSURE}, "lost": {}}

# Blind round 4: a correct stable_lr that searches with the notebook's own SEEDS (and cpu_model, train). The grading
# fast path of the sweep cell once rebound SEEDS to one seed under the grader, so this search picked 0.1 there.
BLIND4_LR_CHOSEN_OVER_ALL_SEEDS = '''LR = None  # your stable learning rate
def _worst_end(lr):
    worst = 0.0
    for seed in SEEDS:
        data = tc.regression(n=256, features=8, noise=0.1, seed=seed)
        try:
            losses = train(cpu_model(seed), tc.loader(data, batch_size=32, seed=seed), lr, 60)["loss"]
        except FloatingPointError:
            return math.inf
        worst = max(worst, sum(losses[-5:]) / 5 / losses[0])
    return worst

for candidate in [0.3, 0.2, 0.1, 0.07, 0.05, 0.03]:
    if _worst_end(candidate) < 0.05:
        LR = candidate
        break
print("LR =", LR)'''

VARIANTS["blind4_lr_chosen_over_all_seeds"] = {"cells": {"stable_lr": BLIND4_LR_CHOSEN_OVER_ALL_SEEDS}, "lost": {}}


# Blind round 4: tests the SUM of the gradients. check_safe_step's huge gradients overflowed only their norm (a sum of
# entries of both signs stayed finite); a new case has every entry finite, of one sign, 0.6 of the dtype's largest, so
# any sum over two of them or more overflows, and a normal step is expected.
BLIND4_SUM_OF_GRADIENTS_OVERFLOWS = '''import torch

def safe_step(model, batch, loss_fn, optimizer):
    """One training step; returns the loss as a float, or None (and no step) when the loss or a gradient is NaN/inf."""
    optimizer.zero_grad()
    loss = loss_fn(model(batch[0]), batch[1])
    if not torch.isfinite(loss):
        return None
    loss.backward()
    total = sum(p.grad.sum() for p in model.parameters() if p.grad is not None)
    if not torch.isfinite(total):
        return None
    optimizer.step()
    return loss.item()'''

VARIANTS["blind4_sum_of_gradients_overflows"] = {"cells": {"safe_step": BLIND4_SUM_OF_GRADIENTS_OVERFLOWS}, "lost": {"check_safe_step": "so that their sum overflows"}}

# history["grad_norm"] read before the step: check_train never compared the norms with the steps' gradients. It now
# expects tc.grad_norm(model) after step t (the norm of the gradients that step used), and names the shift.
BLIND4_GRAD_NORM_RECORDED_BEFORE_STEP = '''import torch
from torch import nn

def train(model, loader, lr, steps):
    """SGD on MSE for `steps` steps; raises FloatingPointError naming the step at the first non-finite loss or gradient."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loss_fn = nn.MSELoss()
    history = {"step": [], "loss": [], "grad_norm": []}
    step = 0
    while step < steps:
        for batch in loader:
            if step == steps:
                break
            gn = tc.grad_norm(model)
            loss = safe_step(model, batch, loss_fn, optimizer)
            if loss is None:
                raise FloatingPointError(f"non-finite loss or gradient at step {step}")
            history["step"].append(step)
            history["loss"].append(loss)
            history["grad_norm"].append(gn)
            step += 1
    return history'''

VARIANTS["blind4_grad_norm_recorded_before_step"] = {"cells": {"train": BLIND4_GRAD_NORM_RECORDED_BEFORE_STEP}, "lost": {"check_train": "read tc.grad_norm(model) after safe_step"}}

# history values as tuples (zip(*records)): check_train took tuples where the text asks for lists.
BLIND4_HISTORY_TUPLES_FROM_ZIP = '''import torch
from torch import nn

def train(model, loader, lr, steps):
    """SGD on MSE for `steps` steps; raises FloatingPointError naming the step at the first non-finite loss or gradient."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loss_fn = nn.MSELoss()
    history = {"step": [], "loss": [], "grad_norm": []}
    records = []
    step = 0
    while step < steps:
        for batch in loader:
            if step == steps:
                break
            loss = safe_step(model, batch, loss_fn, optimizer)
            if loss is None:
                raise FloatingPointError(f"non-finite loss or gradient at step {step}")
            records.append((step, loss, tc.grad_norm(model)))
            step += 1
    if records:
        history["step"], history["loss"], history["grad_norm"] = zip(*records)
    return history'''

VARIANTS["blind4_history_tuples_from_zip"] = {"cells": {"train": BLIND4_HISTORY_TUPLES_FROM_ZIP}, "lost": {"check_train": "'step': tuple, 'loss': tuple, 'grad_norm': tuple"}}

# Blind round 5: a test on each gradient's max() (it sees inf and NaN, not -inf beside finite entries): check_safe_step's
# one-bad-entry case now also plants a -inf entry (in a bias of two entries or more), and names -inf when +inf is caught.
BLIND5_GRAD_MAX_MISSES_NEGATIVE_INF = '''import torch

def safe_step(model, batch, loss_fn, optimizer):
    """One training step; returns the loss as a float, or None (and no step) when the loss or a gradient is NaN/inf."""
    inputs, targets = batch
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), targets)
    if not torch.isfinite(loss):
        return None
    loss.backward()
    for p in model.parameters():
        if p.grad is not None and not torch.isfinite(p.grad.max()):
            return None
    optimizer.step()
    return loss.item()'''

VARIANTS["blind5_grad_max_misses_negative_inf"] = {"cells": {"safe_step": BLIND5_GRAD_MAX_MISSES_NEGATIVE_INF}, "lost": {"check_safe_step": "so its test misses -inf only"}}

# Blind round 5: train re-implements the guard instead of calling safe_step ('Use safe_step for every step'):
# check_train now counts the calls of the reference safe_step it puts in the learner's place (globals, defaults, closure).
BLIND5_INLINES_GUARD_INSTEAD_OF_SAFE_STEP = '''import torch
from torch import nn

def train(model, loader, lr, steps):
    """SGD on MSE for `steps` steps; raises FloatingPointError naming the step at the first non-finite loss or gradient."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loss_fn = nn.MSELoss()
    history = {"step": [], "loss": [], "grad_norm": []}
    step = 0
    while step < steps:
        for x, y in loader:
            if step == steps:
                break
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            if not torch.isfinite(loss):
                raise FloatingPointError(f"non-finite loss at step {step}")
            loss.backward()
            if not all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None):
                raise FloatingPointError(f"non-finite gradient at step {step}")
            optimizer.step()
            history["step"].append(step)
            history["loss"].append(loss.item())
            history["grad_norm"].append(tc.grad_norm(model))
            step += 1
    return history'''

VARIANTS["blind5_inlines_guard_instead_of_safe_step"] = {"cells": {"train": BLIND5_INLINES_GUARD_INSTEAD_OF_SAFE_STEP}, "lost": {"check_train": "train never called safe_step"}}

# Blind round 5, misleading message fixed: a loss tested with torch.isinf only; the hint blamed `loss == float('nan')`.
BLIND5_INF_ONLY_LOSS_TEST = '''import torch

def safe_step(model, batch, loss_fn, optimizer):
    """One training step; returns the loss as a float, or None (and no step) when the loss or a gradient is NaN/inf."""
    inputs, targets = batch
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), targets)
    if torch.isinf(loss):
        return None
    loss.backward()
    if any(not torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None):
        return None
    optimizer.step()
    return loss.item()'''

VARIANTS["blind5_inf_only_loss_test"] = {"cells": {"safe_step": BLIND5_INF_ONLY_LOSS_TEST}, "lost": {"check_safe_step": "NaN gets past torch.isinf(loss)"}}

# Blind round 5, misleading message fixed: optimizer.step() inside the loop over the parameters' tests (isfinite); the hint
# said isnan misses inf. It now says the step ran before the test that returned None.
BLIND5_STEP_INSIDE_GRAD_LOOP = '''import torch

def safe_step(model, batch, loss_fn, optimizer):
    """One training step; returns the loss as a float, or None (and no step) when the loss or a gradient is NaN/inf."""
    inputs, targets = batch
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), targets)
    if not torch.isfinite(loss):
        return None
    loss.backward()
    for p in model.parameters():
        if p.grad is not None and not torch.isfinite(p.grad).all():
            return None
        optimizer.step()
    return loss.item()'''

VARIANTS["blind5_step_inside_grad_loop"] = {"cells": {"safe_step": BLIND5_STEP_INSIDE_GRAD_LOOP}, "lost": {"check_safe_step": "Test every parameter's gradient first, then call optimizer.step() once"}}

BLIND6 = {  # blind round 6: cases that were misgraded, graded right since
    # 'going through the loader again as often as needed: each pass a new for batch in loader': it iterates its own 
    'rebuilds_unseeded_dataloader': {'cells': {'train': 'import torch\nfrom torch import nn\nfrom torch.utils.data import DataLoader\n\ndef train(model, loader, lr, steps):\n    """SGD on MSE for `steps` steps; raises FloatingPointError naming the step at the first non-finite loss or gradient."""\n    optimizer = torch.optim.SGD(model.parameters(), lr=lr)\n    loss_fn = nn.MSELoss()\n    history = {"step": [], "loss": [], "grad_norm": []}\n    step = 0\n    while step < steps:\n        for batch in DataLoader(loader.dataset, batch_size=loader.batch_size, shuffle=True):   # reshuffle each pass\n            if step == steps:\n                break\n            loss = safe_step(model, batch, loss_fn, optimizer)\n            if loss is None:\n                raise FloatingPointError(f"non-finite loss or gradient at step {step}")\n            history["step"].append(step)\n            history["loss"].append(loss)\n            history["grad_norm"].append(tc.grad_norm(model))\n            step += 1\n    return history\n'},
        'lost': {'check_train': 'the loader given to train at lr=0.05 (20 steps over a loader of 4 batches of 16, float32)'}},
}
for _name, _spec in BLIND6.items():
    VARIANTS[f"blind6_{_name}"] = _spec

BLIND7 = {  # blind round 7: cases that were misgraded, graded right since
    # tests only the gradients of the optimizer's first parameter group: with an optimizer built with several groups
    'grads_of_first_param_group_only': {'cells': {'safe_step': 'import torch\n\n\ndef safe_step(model, batch, loss_fn, optimizer):\n    """One training step; returns the loss as a float, or None (and no step) when the loss or a gradient is NaN/inf."""\n    x, y = batch\n    optimizer.zero_grad()\n    loss = loss_fn(model(x), y)\n    if not torch.isfinite(loss):\n        return None\n    loss.backward()\n    params = optimizer.param_groups[0]["params"]     # "the parameters being trained"\n    if any(p.grad is not None and not torch.isfinite(p.grad).all() for p in params):\n        return None\n    optimizer.step()\n    return loss.item()\n'},
        'lost': {'check_safe_step': 'safe_step on a finite loss whose gradients are all finite except ONE entry'}},
    # also raises when a FINITE loss exceeds 10^4 times the first one: at a rate far too high it stops steps before 
    'divergence_guard_raises_early': {'cells': {'train': 'import torch\nfrom torch import nn\nimport trainclinic as tc\n\n\ndef train(model, loader, lr, steps):\n    """SGD on MSE for `steps` steps; raises FloatingPointError naming the step at the first non-finite loss or gradient."""\n    optimizer = torch.optim.SGD(model.parameters(), lr=lr)\n    loss_fn = nn.MSELoss()\n    history = {"step": [], "loss": [], "grad_norm": []}\n    step = 0\n    while step < steps:\n        for batch in loader:\n            if step == steps:\n                break\n            loss = safe_step(model, batch, loss_fn, optimizer)\n            # stop as soon as it diverges, not only when it is already nan\n            if loss is None or (history["loss"] and loss > 1e4 * history["loss"][0]):\n                raise FloatingPointError(f"non-finite loss or gradient at step {step}")\n            history["step"].append(step)\n            history["loss"].append(loss)\n            history["grad_norm"].append(tc.grad_norm(model))\n            step += 1\n    return history\n'},
        'lost': {'check_train': 'the step named by the FloatingPointError of train at lr=100'}},
}
for _name, _spec in BLIND7.items():
    VARIANTS[f"blind7_{_name}"] = _spec

BLIND8 = {  # blind round 8: cases that were misgraded, graded right since
    # the and/or idiom returns None whenever the loss is exactly 0.0 (a falsy float) although the step WAS taken: 'o
    'and_or_idiom_zero_loss': {'cells': {'safe_step': 'import torch\n\n\ndef safe_step(model, batch, loss_fn, optimizer):\n    """One training step; returns the loss as a float, or None (and no step) when the loss or a gradient is NaN/inf."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    loss = loss_fn(model(inputs), targets)\n    if not torch.isfinite(loss):\n        return None\n    loss.backward()\n    ok = all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)\n    if ok:\n        optimizer.step()\n    return ok and loss.item() or None\n'},
        'lost': {'check_safe_step': "safe_step's result on a batch the model already fits: a loss of exactly 0.0 (every sample "}},
}
for _name, _spec in BLIND8.items():
    VARIANTS[f"blind8_{_name}"] = _spec

BLIND9 = {  # blind round 9: cases that were misgraded, graded right since
    # refuses every step of a model with a parameter that gets no gradient (frozen with requires_grad=False, or unus
    'missing_grad_counts_as_bad': {'cells': {'safe_step': 'def safe_step(model, batch, loss_fn, optimizer):\n    """One training step; returns the loss as a float, or None (and no step) when the loss or a gradient is NaN/inf."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    loss = loss_fn(model(inputs), targets)\n    if not torch.isfinite(loss):\n        return None\n    loss.backward()\n    if any(p.grad is None or not torch.isfinite(p.grad).all() for p in model.parameters()):\n        return None                                  # no gradient or a bad one: nothing safe to step on\n    optimizer.step()\n    return loss.item()\n'},
        'lost': {'check_safe_step': 'a missing one holds nothing'}},
    # after refusing non-finite gradients it returns with autograd switched off for the whole process: every later s
    'grad_mode_off_after_refusal': {'cells': {'safe_step': 'def safe_step(model, batch, loss_fn, optimizer):\n    """One training step; returns the loss as a float, or None (and no step) when the loss or a gradient is NaN/inf."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    loss = loss_fn(model(inputs), targets)\n    if not torch.isfinite(loss):\n        return None\n    loss.backward()\n    torch.set_grad_enabled(False)                  # the scan needs no graph\n    for p in model.parameters():\n        if p.grad is not None and not torch.isfinite(p.grad).all():\n            return None\n    torch.set_grad_enabled(True)\n    optimizer.step()\n    return loss.item()\n'},
        'lost': {'check_safe_step': 'safe_step switched autograd off for the whole process'}},
    # also stops when the recorded gradient NORM is inf: the norm (a sum of squares) overflows while every gradient 
    'stops_on_overflowed_grad_norm': {'cells': {'train': 'import math\n\n\ndef train(model, loader, lr, steps):\n    """SGD on MSE for `steps` steps; raises FloatingPointError naming the step at the first non-finite loss or gradient."""\n    optimizer = torch.optim.SGD(model.parameters(), lr=lr)\n    loss_fn = nn.MSELoss()\n    history = {"step": [], "loss": [], "grad_norm": []}\n    step = 0\n    while step < steps:\n        for batch in loader:\n            if step == steps:\n                break\n            loss = safe_step(model, batch, loss_fn, optimizer)\n            norm = tc.grad_norm(model) if loss is not None else math.nan\n            if loss is None or not math.isfinite(norm):\n                raise FloatingPointError(f"non-finite loss or gradient at step {step}")\n            history["step"].append(step)\n            history["loss"].append(loss)\n            history["grad_norm"].append(norm)\n            step += 1\n    return history\n'},
        'lost': {'check_train': 'stop only when safe_step returns None'}},
}
for _name, _spec in BLIND9.items():
    VARIANTS[f"blind9_{_name}"] = _spec


BLIND18 = {  # blind round 18: cases that were misgraded, graded right since
    # On a refusal it 'rolls back' to a snapshot taken after the model's last good step, keyed by id(model) in a glo
    'ss_rollback_to_last_good': {'cells': {'safe_step': 'import copy\n\n_LAST_GOOD = {}   # id(model) -> weights after its last good step\n\ndef safe_step(model, batch, loss_fn, optimizer):\n    """One training step; returns the loss as a float, or None (and no step) when the loss or a gradient is NaN/inf."""\n    x, y = batch\n    optimizer.zero_grad()\n    loss = loss_fn(model(x), y)\n    bad = not torch.isfinite(loss)\n    if not bad:\n        loss.backward()\n        bad = any(p.grad is not None and not torch.isfinite(p.grad).all() for p in model.parameters())\n    if bad:\n        if id(model) in _LAST_GOOD:          # roll back to the last good weights, to be safe\n            model.load_state_dict(_LAST_GOOD[id(model)])\n        return None\n    optimizer.step()\n    _LAST_GOOD[id(model)] = copy.deepcopy(model.state_dict())\n    return loss.item()\n', 'train': 'def train(model, loader, lr, steps):\n    """SGD on MSE for `steps` steps; raises FloatingPointError naming the step at the first non-finite loss or gradient."""\n    optimizer = torch.optim.SGD(model.parameters(), lr=lr)\n    mse = nn.MSELoss()\n    history = {"step": [], "loss": [], "grad_norm": []}\n    step = 0\n    while step < steps:\n        for batch in loader:\n            if step == steps:\n                break\n            loss = safe_step(model, batch, mse, optimizer)\n            if loss is None:\n                raise FloatingPointError(f"non-finite loss or gradient at step {step}")\n            history["step"].append(step)\n            history["loss"].append(loss)\n            history["grad_norm"].append(tc.grad_norm(model))\n            step += 1\n    return history\n', 'stable_lr': 'LR = 0.05  # your stable learning rate\n'},
        'lost': {'check_safe_step': 'after the caller changed the weights since the previous step (halved them): expected as the caller left them'}},
    # torch.autograd.grad with materialize_grads=True: a parameter unused by the forward gets a ZERO gradient instea
    'ss_materialized_zero_grads': {'cells': {'safe_step': 'def safe_step(model, batch, loss_fn, optimizer):\n    """One training step; returns the loss as a float, or None (and no step) when the loss or a gradient is NaN/inf."""\n    x, y = batch\n    optimizer.zero_grad()\n    loss = loss_fn(model(x), y)\n    if not torch.isfinite(loss):\n        return None\n    params = [p for p in model.parameters() if p.requires_grad]\n    # zeros instead of None for unused parameters: no None handling needed\n    grads = torch.autograd.grad(loss, params, allow_unused=True, materialize_grads=True)\n    if not all(torch.isfinite(g).all() for g in grads):\n        return None\n    for p, g in zip(params, grads):\n        p.grad = g\n    optimizer.step()\n    return loss.item()\n', 'train': 'def train(model, loader, lr, steps):\n    """SGD on MSE for `steps` steps; raises FloatingPointError naming the step at the first non-finite loss or gradient."""\n    optimizer = torch.optim.SGD(model.parameters(), lr=lr)\n    mse = nn.MSELoss()\n    history = {"step": [], "loss": [], "grad_norm": []}\n    step = 0\n    while step < steps:\n        for batch in loader:\n            if step == steps:\n                break\n            loss = safe_step(model, batch, mse, optimizer)\n            if loss is None:\n                raise FloatingPointError(f"non-finite loss or gradient at step {step}")\n            history["step"].append(step)\n            history["loss"].append(loss)\n            history["grad_norm"].append(tc.grad_norm(model))\n            step += 1\n    return history\n', 'stable_lr': 'LR = 0.05  # your stable learning rate\n'},
        'lost': {'check_safe_step': 'the unused parameter after safe_step on a model with a parameter its forward never uses'}},
    # Tests the result with `if not loss` instead of `is None`: a loss of exactly 0.0 (a perfect fit, zero targets w
    'tr_falsy_loss_test': {'cells': {'safe_step': 'def safe_step(model, batch, loss_fn, optimizer):\n    """One training step; returns the loss as a float, or None (and no step) when the loss or a gradient is NaN/inf."""\n    x, y = batch\n    optimizer.zero_grad()\n    loss = loss_fn(model(x), y)\n    if not torch.isfinite(loss):\n        return None\n    loss.backward()\n    for p in model.parameters():\n        if p.grad is not None and not torch.isfinite(p.grad).all():\n            return None\n    optimizer.step()\n    return loss.item()\n', 'train': 'def train(model, loader, lr, steps):\n    """SGD on MSE for `steps` steps; raises FloatingPointError naming the step at the first non-finite loss or gradient."""\n    optimizer = torch.optim.SGD(model.parameters(), lr=lr)\n    mse = nn.MSELoss()\n    history = {"step": [], "loss": [], "grad_norm": []}\n    step = 0\n    while step < steps:\n        for batch in loader:\n            if step == steps:\n                break\n            if not (loss := safe_step(model, batch, mse, optimizer)):\n                raise FloatingPointError(f"non-finite loss or gradient at step {step}")\n            history["step"].append(step)\n            history["loss"].append(loss)\n            history["grad_norm"].append(tc.grad_norm(model))\n            step += 1\n    return history\n', 'stable_lr': 'LR = 0.05  # your stable learning rate\n'},
        'lost': {'check_train': 'every loss exactly 0.0): expected the history of its 3 steps'}},
    # A do-while loop: it trains first and tests `step >= steps` after, so train(..., steps=0) still takes one step 
    'tr_do_while_steps': {'cells': {'safe_step': 'def safe_step(model, batch, loss_fn, optimizer):\n    """One training step; returns the loss as a float, or None (and no step) when the loss or a gradient is NaN/inf."""\n    x, y = batch\n    optimizer.zero_grad()\n    loss = loss_fn(model(x), y)\n    if not torch.isfinite(loss):\n        return None\n    loss.backward()\n    for p in model.parameters():\n        if p.grad is not None and not torch.isfinite(p.grad).all():\n            return None\n    optimizer.step()\n    return loss.item()\n', 'train': 'def train(model, loader, lr, steps):\n    """SGD on MSE for `steps` steps; raises FloatingPointError naming the step at the first non-finite loss or gradient."""\n    optimizer = torch.optim.SGD(model.parameters(), lr=lr)\n    mse = nn.MSELoss()\n    history = {"step": [], "loss": [], "grad_norm": []}\n    step, batches = 0, iter(loader)\n    while True:\n        try:\n            batch = next(batches)\n        except StopIteration:          # a new pass: reshuffles\n            batches = iter(loader)\n            continue\n        loss = safe_step(model, batch, mse, optimizer)\n        if loss is None:\n            raise FloatingPointError(f"non-finite loss or gradient at step {step}")\n        history["step"].append(step)\n        history["loss"].append(loss)\n        history["grad_norm"].append(tc.grad_norm(model))\n        step += 1\n        if step >= steps:\n            return history\n', 'stable_lr': 'LR = 0.05  # your stable learning rate\n'},
        'lost': {'check_train': 'train with steps=0: expected no step, and the (empty) history returned'}},
}
for _name, _spec in BLIND18.items():
    VARIANTS[f"blind18_{_name}"] = _spec


BLIND19 = {  # blind round 19: cases that were misgraded, graded right since
    # `break` instead of `continue` on a parameter whose .grad is None: with a frozen/unused parameter BEFORE a laye
    'ss_break_on_frozen_param': {'cells': {'safe_step': 'def safe_step(model, batch, loss_fn, optimizer):\n    """One training step."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    loss = loss_fn(model(inputs), targets)\n    if not torch.isfinite(loss):\n        return None\n    loss.backward()\n    for p in model.parameters():\n        if p.grad is None:\n            break                    # meant `continue`: no gradient, nothing to test\n        if not torch.isfinite(p.grad).all():\n            return None\n    optimizer.step()\n    return loss.item()\n', 'train': 'def train(model, loader, lr, steps):\n    """SGD on MSE for `steps` steps; raises FloatingPointError naming the step at the first non-finite loss or gradient."""\n    optimizer = torch.optim.SGD(model.parameters(), lr=lr)\n    mse = nn.MSELoss()\n    history = {"step": [], "loss": [], "grad_norm": []}\n    step = 0\n    while step < steps:\n        for batch in loader:\n            if step >= steps:\n                break\n            loss = safe_step(model, batch, mse, optimizer)\n            if loss is None:\n                raise FloatingPointError(f"non-finite loss or gradient at step {step}")\n            history["step"].append(step)\n            history["loss"].append(loss)\n            history["grad_norm"].append(tc.grad_norm(model))\n            step += 1\n    return history\n', 'stable_lr': 'LR = None  # your stable learning rate\n# YOUR CODE HERE\nLR = 0.05\n'},
        'lost': {'check_safe_step': 'a parameter without a gradient is skipped (continue)'}},
    # Two forwards: a no_grad probe tested, then a second forward that is backpropagated, returning the PROBE's loss
    'ss_second_forward_for_backward': {'cells': {'safe_step': 'def safe_step(model, batch, loss_fn, optimizer):\n    """One training step."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    with torch.no_grad():            # cheap probe: no graph for a loss we may throw away\n        probe = loss_fn(model(inputs), targets)\n    if not torch.isfinite(probe):\n        return None\n    loss = loss_fn(model(inputs), targets)\n    loss.backward()\n    if not all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None):\n        return None\n    optimizer.step()\n    return probe.item()\n', 'train': 'def train(model, loader, lr, steps):\n    """SGD on MSE for `steps` steps; raises FloatingPointError naming the step at the first non-finite loss or gradient."""\n    optimizer = torch.optim.SGD(model.parameters(), lr=lr)\n    mse = nn.MSELoss()\n    history = {"step": [], "loss": [], "grad_norm": []}\n    step = 0\n    while step < steps:\n        for batch in loader:\n            if step >= steps:\n                break\n            loss = safe_step(model, batch, mse, optimizer)\n            if loss is None:\n                raise FloatingPointError(f"non-finite loss or gradient at step {step}")\n            history["step"].append(step)\n            history["loss"].append(loss)\n            history["grad_norm"].append(tc.grad_norm(model))\n            step += 1\n    return history\n', 'stable_lr': 'LR = None  # your stable learning rate\n# YOUR CODE HERE\nLR = 0.05\n'},
        'lost': {'check_safe_step': 'the gradients of another forward pass (other Dropout masks)'}},
    # Raises FloatingPointError naming the right (first) step, but only after finishing the pass: safe_step keeps be
    'tr_raise_at_end_of_pass': {'cells': {'safe_step': 'def safe_step(model, batch, loss_fn, optimizer):\n    """One training step; returns the loss as a float, or None (and no step) when the loss or a gradient is NaN/inf."""\n    inputs, targets = batch\n    with torch.enable_grad():\n        optimizer.zero_grad()\n        loss = loss_fn(model(inputs), targets)\n        if not torch.isfinite(loss).all():\n            return None\n        loss.backward()\n        for group in optimizer.param_groups:\n            for p in group["params"]:\n                if p.grad is not None and not torch.isfinite(p.grad).all():\n                    return None\n        optimizer.step()\n        return loss.item()\n', 'train': 'def train(model, loader, lr, steps):\n    """SGD on MSE; a failure is reported once the current pass is over."""\n    optimizer = torch.optim.SGD(model.parameters(), lr=lr)\n    mse = nn.MSELoss()\n    history = {"step": [], "loss": [], "grad_norm": []}\n    step, failed = 0, None\n    while step < steps and failed is None:\n        for batch in loader:\n            if step >= steps:\n                break\n            loss = safe_step(model, batch, mse, optimizer)\n            if loss is None:\n                if failed is None:\n                    failed = step        # remember the first failure, finish the pass\n                step += 1\n                continue\n            history["step"].append(step); history["loss"].append(loss); history["grad_norm"].append(tc.grad_norm(model))\n            step += 1\n    if failed is not None:\n        raise FloatingPointError(f"non-finite loss or gradient at step {failed}")\n    return history\n', 'stable_lr': 'LR = None  # your stable learning rate\n# YOUR CODE HERE\nLR = 0.05\n'},
        'lost': {'check_train': 'train went on calling safe_step after it returned None'}},
}
for _name, _spec in BLIND19.items():
    VARIANTS[f"blind19_{_name}"] = _spec


BLIND20 = {  # blind round 20: cases that were misgraded, graded right since
    # Runs the whole training under detect_anomaly 'to learn which op made the NaN': a non-finite LOSS still reaches
    'tr_anomaly_mode_around_loop': {'cells': {'safe_step': 'def safe_step(model, batch, loss_fn, optimizer):\n    """One training step; returns the loss as a float, or None (and no step) when the loss or a gradient is NaN/inf."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    loss = loss_fn(model(inputs), targets)\n    if not torch.isfinite(loss):\n        return None\n    loss.backward()\n    for p in model.parameters():\n        if p.grad is not None and not torch.isfinite(p.grad).all():\n            return None\n    optimizer.step()\n    return loss.item()\n', 'train': 'def train(model, loader, lr, steps):\n    """SGD on MSE for `steps` steps; raises FloatingPointError naming the step at the first non-finite loss or gradient."""\n    import warnings\n    optimizer = torch.optim.SGD(model.parameters(), lr=lr)\n    mse = nn.MSELoss()\n    history = {"step": [], "loss": [], "grad_norm": []}\n    step = 0\n    with warnings.catch_warnings(), torch.autograd.detect_anomaly(check_nan=True):   # lesson 04: name the op if a NaN shows\n        warnings.simplefilter("ignore")\n        while step < steps:\n            for batch in loader:\n                if step == steps:\n                    break\n                loss = safe_step(model, batch, mse, optimizer)\n                if loss is None:\n                    raise FloatingPointError(f"non-finite loss or gradient at step {step}")\n                history["step"].append(step)\n                history["loss"].append(loss)\n                history["grad_norm"].append(tc.grad_norm(model))\n                step += 1\n    return history\n', 'stable_lr': 'LR = 0.05  # your stable learning rate\n'},
        'lost': {'check_train': 'FloatingPointError naming step'}},
}
for _name, _spec in BLIND20.items():
    VARIANTS[f"blind20_{_name}"] = _spec
