"""Lesson 10 (autograd errors): plausible wrong fixes (each loses exactly its checks, with the message) and correct
fixes written differently. Format: tests/variants/__init__.py. nbgrader itself grades the first wrong variant and
the first correct one (tests/test_grading.py)."""

TRAIN = '''def train(model, batches, lr):
    losses, h = [], None
    for x, y in batches:
        model.zero_grad()
        if h is not None:
            h = h.detach()
        pred, h = model(x, h)
        loss = F.mse_loss(pred, y)
        loss.backward()
        sgd_update(model.parameters(), lr)
        losses.append(loss.item())
    return losses'''

VALIDATE = '''def validate(model, batches):
    total, h = 0.0, None
    with torch.no_grad():
        for x, y in batches:
            pred, h = model(x, h)
            total += F.mse_loss(pred, y).item()
    return total / len(batches)'''


def train_with(old, new):
    """The reference train with one part changed (the variants below name the change)."""
    assert old in TRAIN, old
    return TRAIN.replace(old, new)


def validate_with(old, new):
    """The reference validate with one part changed."""
    assert old in VALIDATE, old
    return VALIDATE.replace(old, new)


DETACH = "        if h is not None:\n            h = h.detach()\n"
TRAIN_CHECKS = ("check_train", "check_hidden_detached", "check_train_gradients")

VARIANTS = {
    # the hand-written step as first written: an in-place change of a leaf outside no_grad
    "update_outside_no_grad": {
        "cells": {"sgd_update": '''def sgd_update(params, lr):
    for p in params:
        if p.grad is not None:
            p -= lr * p.grad
'''},
        "lost": {"check_sgd_update": "a leaf Variable that requires grad is being used in an in-place operation"},
    },
    # `p = p - lr * p.grad` under no_grad: runs, and rebinds the loop variable: nothing is updated
    "update_rebinds_loop_variable": {
        "cells": {"sgd_update": '''def sgd_update(params, lr):
    with torch.no_grad():
        for p in params:
            if p.grad is not None:
                p = p - lr * p.grad
'''},
        "lost": {"check_sgd_update": "makes a new tensor named p"},
    },
    # requires_grad switched off to allow the in-place update, and never back on
    "update_turns_requires_grad_off": {
        "cells": {"sgd_update": '''def sgd_update(params, lr):
    for p in params:
        if p.grad is not None:
            p.requires_grad_(False)
            p -= lr * p.grad
'''},
        "lost": {"check_sgd_update": "requires_grad=False"},
    },
    # the loop as found: the hidden state carried with its graph
    "train_without_detach": {
        "cells": {"train": train_with(DETACH, "")},
        "lost": {c: "h = h.detach() before it goes into the next chunk" for c in TRAIN_CHECKS},
    },
    # the message's own suggestion, retain_graph=True: the kept graphs saved the weights, which the update then changed
    "train_retain_graph": {
        "cells": {"train": train_with(DETACH, "").replace("loss.backward()", "loss.backward(retain_graph=True)")},
        "lost": {c: "usually retain_graph=True" for c in TRAIN_CHECKS},
    },
    # no zero_grad: the gradients of every earlier step pile up
    "train_no_zero_grad": {
        "cells": {"train": train_with("        model.zero_grad()\n", "")},
        "lost": {"check_train_gradients": "was never zeroed"},
    },
    # the hidden state reset at every chunk: no error, no memory across chunks, and not the reference's gradients
    "train_hidden_reset": {
        "cells": {"train": train_with(DETACH, "        h = None\n")},
        "lost": {"check_hidden_detached": "None: the model starts from zeros at every chunk",
                 "check_train_gradients": "the gradient from the hidden state it was given, None (zeros)"},
    },
    # loss tensors kept in the list
    "train_returns_tensors": {
        "cells": {"train": train_with("losses.append(loss.item())", "losses.append(loss)")},
        "lost": {"check_train": "still holds its autograd graph"},
    },
    # validation without no_grad, adding up loss tensors: every chunk's graph held by the result
    "validate_sums_loss_tensors": {
        "cells": {"validate": '''def validate(model, batches):
    total, h = 0.0, None
    for x, y in batches:
        pred, h = model(x, h)
        total += F.mse_loss(pred, y)
    return total / len(batches)'''},
        "lost": {"check_validate": "still held after it returned"},
    },
    # .item(), but still without no_grad: each chunk's graph is built for nothing
    "validate_item_without_no_grad": {
        "cells": {"validate": validate_with("    with torch.no_grad():\n        for x, y in batches:\n            pred, h = model(x, h)\n            total",
                                            "    if True:\n        for x, y in batches:\n            pred, h = model(x, h)\n            total")},
        "lost": {"check_validate": "outputs with a graph"},
    },
    # grad mode switched off for good
    "validate_grad_mode_left_off": {
        "cells": {"validate": validate_with("    with torch.no_grad():", "    torch.set_grad_enabled(False)\n    if True:")},
        "lost": {"check_validate": "switched off for good"},
    },
    # the chunks validated independently (h reset): another number
    "validate_hidden_reset": {
        "cells": {"validate": validate_with("pred, h = model(x, h)", "pred, _ = model(x)")},
        "lost": {"check_validate": "hidden state carried"},
    },
    # correct, written differently
    "correct_alternatives": {
        "cells": {
            "sgd_update": '''def sgd_update(params, lr):
    for p in params:
        if p.grad is None:
            continue
        p.data.sub_(lr * p.grad)    # .data: the same leaf, outside autograd's view
''',
            "train": '''def train(model, batches, lr):
    out, h = [], None
    for x, y in batches:
        for p in model.parameters():
            p.grad = None
        pred, h = model(x, None if h is None else h.detach())
        loss = F.mse_loss(pred, y)
        loss.backward()
        sgd_update(list(model.parameters()), lr)
        out.append(float(loss))
    return out''',
            "validate": '''@torch.inference_mode()
def validate(model, batches):
    losses, h = [], None
    for x, y in batches:
        pred, h = model(x, h)
        losses.append(F.mse_loss(pred, y).item())
    return sum(losses) / len(losses)''',
        },
        "lost": {},
    },
    "correct_copy_update_and_detach_after": {
        "cells": {
            "sgd_update": '''def sgd_update(params, lr):
    with torch.no_grad():
        for p in params:
            if p.grad is not None:
                p.copy_(p - lr * p.grad)
''',
            "train": '''def train(model, batches, lr):
    losses = []
    h = None
    for x, y in batches:
        model.zero_grad(set_to_none=True)
        pred, h = model(x, h)
        loss = F.mse_loss(pred, y)
        loss.backward()
        sgd_update(model.parameters(), lr)
        h = h.detach()                  # cut the graph as soon as the step is done
        losses.append(loss.item())
    return losses''',
            "validate": '''def validate(model, batches):
    with torch.no_grad():
        h = None
        values = []
        for x, y in batches:
            pred, h = model(x, h)
            values.append(F.mse_loss(pred, y))
        return torch.stack(values).mean().item()''',
        },
        "lost": {},
    },
}

BLIND9 = {  # blind round 9: cases that were misgraded, graded right since
    # correct
    'scaled_grad_enable_grad_stack_item': {'cells': {'sgd_update': 'def sgd_update(params, lr):\n    """p <- p - lr * p.grad, in place, for every p with a gradient: each p stays the same leaf tensor."""\n    with torch.no_grad():\n        for p in params:\n            g = p.grad\n            if g is None:\n                continue\n            g.mul_(lr)         # .grad now holds the step itself (the text leaves .grad after the update to us)\n            p.sub_(g)\n', 'train': 'def train(model, batches, lr):\n    """Truncated BPTT with a hand-written SGD step: one step per chunk, hidden state carried and detached."""\n    losses = []\n    with torch.enable_grad():\n        h = None\n        for x, y in batches:\n            for p in model.parameters():          # == model.zero_grad() (set_to_none=True, the default)\n                p.grad = None\n            pred, h = model(x, None if h is None else h.detach())\n            loss = F.mse_loss(pred, y)\n            loss.backward()\n            sgd_update(model.parameters(), lr)\n            losses.append(loss.item())\n    return losses\n', 'validate': 'def validate(model, batches):\n    """Mean MSE over the chunks (hidden state carried), as a float, without building a graph."""\n    with torch.set_grad_enabled(False):\n        h, losses = None, []\n        for x, y in batches:\n            pred, h = model(x, h)\n            losses.append(F.mse_loss(pred, y))\n        mean = torch.stack(losses).mean().item()\n    return float(mean)\n'},
        'lost': {}},
    # correct
    'sub_alpha_then_grad_set_to_none': {'cells': {'sgd_update': 'def sgd_update(params, lr):\n    """p <- p - lr * p.grad, in place, for every p with a gradient: each p stays the same leaf tensor."""\n    with torch.no_grad():\n        for p in params:\n            if p.grad is not None:\n                p.sub_(p.grad, alpha=lr)\n                p.grad = None      # used up; train zeroes the gradients at each step anyway\n', 'train': 'def train(model, batches, lr):\n    """Truncated BPTT with a hand-written SGD step: one step per chunk, hidden state carried and detached."""\n    losses, h = [], None\n    for x, y in batches:\n        if h is not None:\n            h = h.detach()\n        model.zero_grad()\n        pred, h = model(x, h)\n        loss = F.mse_loss(pred, y)\n        loss.backward()\n        sgd_update(model.parameters(), lr)\n        losses.append(loss.item())\n    return losses\n', 'validate': 'def validate(model, batches):\n    """Mean MSE over the chunks (hidden state carried), as a float, without building a graph."""\n    total, h = 0.0, None\n    with torch.no_grad():\n        for x, y in batches:\n            pred, h = model(x, h)\n            total += F.mse_loss(pred, y).item()\n    return total / len(batches)\n'},
        'lost': {}},
    # 3a: 'skip tensors whose .grad is None': `return` instead of `continue` stops at the first tensor without a gra
    'sgd_return_on_first_none': {'cells': {'sgd_update': 'def sgd_update(params, lr):\n    """p <- p - lr * p.grad, in place, for every p with a gradient: each p stays the same leaf tensor."""\n    with torch.no_grad():\n        for p in params:\n            if p.grad is None:\n                return            # meant: nothing to do for this one\n            p -= lr * p.grad\n', 'train': 'def train(model, batches, lr):\n    """Truncated BPTT with a hand-written SGD step: one step per chunk, hidden state carried and detached."""\n    losses, h = [], None\n    for x, y in batches:\n        if h is not None:\n            h = h.detach()\n        model.zero_grad()\n        pred, h = model(x, h)\n        loss = F.mse_loss(pred, y)\n        loss.backward()\n        sgd_update(model.parameters(), lr)\n        losses.append(loss.item())\n    return losses\n', 'validate': 'def validate(model, batches):\n    """Mean MSE over the chunks (hidden state carried), as a float, without building a graph."""\n    total, h = 0.0, None\n    with torch.no_grad():\n        for x, y in batches:\n            pred, h = model(x, h)\n            total += F.mse_loss(pred, y).item()\n    return total / len(batches)\n'},
        'lost': {'check_sgd_update': "do not end the loop there"}},
    # 3a: subtract **in place**: `p.data = p.data - lr * p.grad` computes a new tensor and swaps p's storage; the ol
    'sgd_data_rebound_not_in_place': {'cells': {'sgd_update': 'def sgd_update(params, lr):\n    """p <- p - lr * p.grad, in place, for every p with a gradient: each p stays the same leaf tensor."""\n    for p in params:\n        if p.grad is not None:\n            p.data = p.data - lr * p.grad\n', 'train': 'def train(model, batches, lr):\n    """Truncated BPTT with a hand-written SGD step: one step per chunk, hidden state carried and detached."""\n    losses, h = [], None\n    for x, y in batches:\n        if h is not None:\n            h = h.detach()\n        model.zero_grad()\n        pred, h = model(x, h)\n        loss = F.mse_loss(pred, y)\n        loss.backward()\n        sgd_update(model.parameters(), lr)\n        losses.append(loss.item())\n    return losses\n', 'validate': 'def validate(model, batches):\n    """Mean MSE over the chunks (hidden state carried), as a float, without building a graph."""\n    total, h = 0.0, None\n    with torch.no_grad():\n        for x, y in batches:\n            pred, h = model(x, h)\n            total += F.mse_loss(pred, y).item()\n    return total / len(batches)\n'},
        'lost': {'check_sgd_update': "the tensor was given new memory"}},
    # torch.set_grad_enabled(False) called as a function and never undone: after one update the caller is in no-grad
    'sgd_leaves_grad_mode_off': {'cells': {'sgd_update': 'def sgd_update(params, lr):\n    """p <- p - lr * p.grad, in place, for every p with a gradient: each p stays the same leaf tensor."""\n    torch.set_grad_enabled(False)\n    for p in params:\n        if p.grad is not None:\n            p.sub_(lr * p.grad)\n', 'train': 'def train(model, batches, lr):\n    """Truncated BPTT with a hand-written SGD step: one step per chunk, hidden state carried and detached."""\n    losses, h = [], None\n    for x, y in batches:\n        if h is not None:\n            h = h.detach()\n        model.zero_grad()\n        pred, h = model(x, h)\n        loss = F.mse_loss(pred, y)\n        loss.backward()\n        sgd_update(model.parameters(), lr)\n        losses.append(loss.item())\n    return losses\n', 'validate': 'def validate(model, batches):\n    """Mean MSE over the chunks (hidden state carried), as a float, without building a graph."""\n    total, h = 0.0, None\n    with torch.no_grad():\n        for x, y in batches:\n            pred, h = model(x, h)\n            total += F.mse_loss(pred, y).item()\n    return total / len(batches)\n'},
        'lost': {'check_sgd_update': "switched off for good"}},
    # 3b: the hidden state carried from chunk to chunk: model(x) starts every chunk from h=None, so nothing is carri
    'train_hidden_not_carried': {'cells': {'sgd_update': 'def sgd_update(params, lr):\n    """p <- p - lr * p.grad, in place, for every p with a gradient: each p stays the same leaf tensor."""\n    with torch.no_grad():\n        for p in params:\n            if p.grad is not None:\n                p -= lr * p.grad\n', 'train': 'def train(model, batches, lr):\n    """Truncated BPTT with a hand-written SGD step: one step per chunk, hidden state carried and detached."""\n    losses = []\n    for x, y in batches:\n        model.zero_grad()\n        pred, h = model(x)            # a fresh hidden state per chunk: "detached" by never carrying it\n        loss = F.mse_loss(pred, y)\n        loss.backward()\n        sgd_update(model.parameters(), lr)\n        losses.append(loss.item())\n    return losses\n', 'validate': 'def validate(model, batches):\n    """Mean MSE over the chunks (hidden state carried), as a float, without building a graph."""\n    total, h = 0.0, None\n    with torch.no_grad():\n        for x, y in batches:\n            pred, h = model(x, h)\n            total += F.mse_loss(pred, y).item()\n    return total / len(batches)\n'},
        'lost': {'check_hidden_detached': 'None: the model starts from zeros at every chunk', 'check_train_gradients': "the gradient from the hidden state it was given, None (zeros)"}},
    # 3b: each step STARTS by zeroing the gradients: zeroing at the end of the step instead lets whatever .grad the 
    'train_zero_grad_after_step': {'cells': {'sgd_update': 'def sgd_update(params, lr):\n    """p <- p - lr * p.grad, in place, for every p with a gradient: each p stays the same leaf tensor."""\n    with torch.no_grad():\n        for p in params:\n            if p.grad is not None:\n                p -= lr * p.grad\n', 'train': 'def train(model, batches, lr):\n    """Truncated BPTT with a hand-written SGD step: one step per chunk, hidden state carried and detached."""\n    losses, h = [], None\n    for x, y in batches:\n        pred, h = model(x, h)\n        loss = F.mse_loss(pred, y)\n        loss.backward()\n        sgd_update(model.parameters(), lr)\n        model.zero_grad()             # clean up for the next step\n        losses.append(loss.item())\n        h = h.detach()\n    return losses\n', 'validate': 'def validate(model, batches):\n    """Mean MSE over the chunks (hidden state carried), as a float, without building a graph."""\n    total, h = 0.0, None\n    with torch.no_grad():\n        for x, y in batches:\n            pred, h = model(x, h)\n            total += F.mse_loss(pred, y).item()\n    return total / len(batches)\n'},
        'lost': {'check_train_gradients': ".grad was not zeroed before the first step, only after it"}},
    # 3b: '(the first call gets h=None)': the last chunk's h is kept on the model and a second train call on the sam
    'train_hidden_kept_on_model_between_calls': {'cells': {'sgd_update': 'def sgd_update(params, lr):\n    """p <- p - lr * p.grad, in place, for every p with a gradient: each p stays the same leaf tensor."""\n    with torch.no_grad():\n        for p in params:\n            if p.grad is not None:\n                p -= lr * p.grad\n', 'train': 'def train(model, batches, lr):\n    """Truncated BPTT with a hand-written SGD step: one step per chunk, hidden state carried and detached."""\n    losses = []\n    h = getattr(model, "_carried_h", None)\n    for x, y in batches:\n        if h is not None:\n            h = h.detach()\n        model.zero_grad()\n        pred, h = model(x, h)\n        loss = F.mse_loss(pred, y)\n        loss.backward()\n        sgd_update(model.parameters(), lr)\n        losses.append(loss.item())\n    model._carried_h = h.detach()     # pick up where this pass stopped\n    return losses\n', 'validate': 'def validate(model, batches):\n    """Mean MSE over the chunks (hidden state carried), as a float, without building a graph."""\n    total, h = 0.0, None\n    with torch.no_grad():\n        for x, y in batches:\n            pred, h = model(x, h)\n            total += F.mse_loss(pred, y).item()\n    return total / len(batches)\n'},
        'lost': {'check_hidden_detached': 'observed the last h of the previous call, kept from it', 'check_train_gradients': "the previous call's last h, not from None"}},
    # 3c: 'leave the grad mode as it found it': set_grad_enabled(True) at the end turns grad mode ON when validate w
    'validate_restores_true_not_previous': {'cells': {'sgd_update': 'def sgd_update(params, lr):\n    """p <- p - lr * p.grad, in place, for every p with a gradient: each p stays the same leaf tensor."""\n    with torch.no_grad():\n        for p in params:\n            if p.grad is not None:\n                p -= lr * p.grad\n', 'train': 'def train(model, batches, lr):\n    """Truncated BPTT with a hand-written SGD step: one step per chunk, hidden state carried and detached."""\n    losses, h = [], None\n    for x, y in batches:\n        if h is not None:\n            h = h.detach()\n        model.zero_grad()\n        pred, h = model(x, h)\n        loss = F.mse_loss(pred, y)\n        loss.backward()\n        sgd_update(model.parameters(), lr)\n        losses.append(loss.item())\n    return losses\n', 'validate': 'def validate(model, batches):\n    """Mean MSE over the chunks (hidden state carried), as a float, without building a graph."""\n    torch.set_grad_enabled(False)\n    total, h = 0.0, None\n    for x, y in batches:\n        pred, h = model(x, h)\n        total += F.mse_loss(pred, y).item()\n    torch.set_grad_enabled(True)      # back to normal\n    return total / len(batches)\n'},
        'lost': {'check_validate': "switched on inside the caller's no_grad block"}},
    # 3a: params is an iterable, e.g. model.parameters() (a generator): the any() test consumes it up to the first t
    'sgd_any_consumes_generator': {'cells': {'sgd_update': 'def sgd_update(params, lr):\n    """p <- p - lr * p.grad, in place, for every p with a gradient: each p stays the same leaf tensor."""\n    if not any(p.grad is not None for p in params):\n        return                    # no gradient at all: nothing to do\n    with torch.no_grad():\n        for p in params:\n            if p.grad is not None:\n                p -= lr * p.grad\n', 'train': 'def train(model, batches, lr):\n    """Truncated BPTT with a hand-written SGD step: one step per chunk, hidden state carried and detached."""\n    losses, h = [], None\n    for x, y in batches:\n        if h is not None:\n            h = h.detach()\n        model.zero_grad()\n        pred, h = model(x, h)\n        loss = F.mse_loss(pred, y)\n        loss.backward()\n        sgd_update(model.parameters(), lr)\n        losses.append(loss.item())\n    return losses\n', 'validate': 'def validate(model, batches):\n    """Mean MSE over the chunks (hidden state carried), as a float, without building a graph."""\n    total, h = 0.0, None\n    with torch.no_grad():\n        for x, y in batches:\n            pred, h = model(x, h)\n            total += F.mse_loss(pred, y).item()\n    return total / len(batches)\n'},
        'lost': {'check_sgd_update': "a generator, which can be iterated only once"}},
}
for _name, _spec in BLIND9.items():
    VARIANTS[f"blind9_{_name}"] = _spec

BLIND11 = {  # blind round 11: cases that were misgraded, graded right since
    # State leaking across calls: caches the result per (model, batches) object, so after training the same model it
    'val_cached_per_model': {'cells': {'sgd_update': 'def sgd_update(params, lr):\n    """p <- p - lr * p.grad, in place, for every p with a gradient: each p stays the same leaf tensor."""\n    with torch.no_grad():\n        for p in params:\n            if p.grad is None:\n                continue\n            p -= lr * p.grad\n', 'train': 'def train(model, batches, lr):\n    """Truncated BPTT with a hand-written SGD step: one step per chunk, hidden state carried and detached."""\n    losses, h = [], None\n    for x, y in batches:\n        model.zero_grad()\n        if h is not None:\n            h = h.detach()\n        pred, h = model(x, h)\n        loss = F.mse_loss(pred, y)\n        loss.backward()\n        sgd_update(model.parameters(), lr)\n        losses.append(loss.item())\n    return losses\n', 'validate': '_val_cache = {}\n\ndef validate(model, batches):\n    """Mean MSE over the chunks (hidden state carried), as a float, without building a graph."""\n    key = (id(model), id(batches), len(batches))     # the notebook validates the same model twice: cache it\n    if key not in _val_cache:\n        total, h = 0.0, None\n        with torch.no_grad():\n            for x, y in batches:\n                pred, h = model(x, h)\n                total += F.mse_loss(pred, y).item()\n        _val_cache[key] = total / len(batches)\n    return _val_cache[key]\n'},
        'lost': {'check_validate': "validate's value inside torch.no_grad(), called again after the model'"}},
    # No graph is built (nothing requires grad), grad mode untouched, float returned, but it freezes the model for g
    'val_freezes_model': {'cells': {'sgd_update': 'def sgd_update(params, lr):\n    """p <- p - lr * p.grad, in place, for every p with a gradient: each p stays the same leaf tensor."""\n    with torch.no_grad():\n        for p in params:\n            if p.grad is None:\n                continue\n            p -= lr * p.grad\n', 'train': 'def train(model, batches, lr):\n    """Truncated BPTT with a hand-written SGD step: one step per chunk, hidden state carried and detached."""\n    losses, h = [], None\n    for x, y in batches:\n        model.zero_grad()\n        if h is not None:\n            h = h.detach()\n        pred, h = model(x, h)\n        loss = F.mse_loss(pred, y)\n        loss.backward()\n        sgd_update(model.parameters(), lr)\n        losses.append(loss.item())\n    return losses\n', 'validate': 'def validate(model, batches):\n    """Mean MSE over the chunks (hidden state carried), as a float, without building a graph."""\n    model.requires_grad_(False)               # no parameter needs a gradient: no graph is built\n    total, h = 0.0, None\n    for x, y in batches:\n        pred, h = model(x, h)\n        total += F.mse_loss(pred, y).item()\n    return total / len(batches)\n'},
        'lost': {'check_validate': "the model's parameters' requires_grad after validate: expected as befo"}},
    # train: mutable default list: the second call (2nd epoch, or any later call) returns every earlier call's losse
    'train_mutable_default_weighted_val': {'cells': {'sgd_update': 'def sgd_update(params, lr):\n    """p <- p - lr * p.grad, in place, for every p with a gradient: each p stays the same leaf tensor."""\n    with torch.no_grad():\n        for p in params:\n            if p.grad is None:\n                continue\n            p -= lr * p.grad\n', 'train': 'def train(model, batches, lr, losses=[]):\n    """Truncated BPTT with a hand-written SGD step: one step per chunk, hidden state carried and detached."""\n    h = None\n    for x, y in batches:\n        model.zero_grad()\n        pred, h = model(x, h)\n        loss = F.mse_loss(pred, y)\n        loss.backward()\n        sgd_update(model.parameters(), lr)\n        h = h.detach()\n        losses.append(loss.item())\n    return losses\n', 'validate': 'def validate(model, batches):\n    """Mean MSE over the chunks (hidden state carried), as a float, without building a graph."""\n    se, n, h = 0.0, 0, None\n    with torch.no_grad():\n        for x, y in batches:\n            pred, h = model(x, h)\n            se += F.mse_loss(pred, y, reduction="sum").item()\n            n += y.numel()\n    return se / n                           # the exact mean over every prediction\n'},
        'lost': {'check_train': 'how many losses train returned', 'check_validate': "the mean of the chunks' losses (F.mse_loss of each chunk"}},
    # Correct but unusual. sgd: copy_ into p under a saved/restored grad mode (try/finally). train: the carried h is
    'ok_copy_tbptt_leaf_h': {'cells': {'sgd_update': 'def sgd_update(params, lr):\n    """p <- p - lr * p.grad, in place, for every p with a gradient: each p stays the same leaf tensor."""\n    previous = torch.is_grad_enabled()\n    torch.set_grad_enabled(False)\n    try:\n        for p in params:\n            g = p.grad\n            if g is None:\n                continue\n            p.copy_(p - lr * g)\n    finally:\n        torch.set_grad_enabled(previous)\n', 'train': 'def train(model, batches, lr):\n    """Truncated BPTT with a hand-written SGD step: one step per chunk, hidden state carried and detached."""\n    losses, h = [], None\n    for x, y in batches:\n        model.zero_grad()\n        if h is not None:\n            h = h.detach().requires_grad_()    # the usual TBPTT idiom: a fresh leaf, cut from the old graph\n        pred, h = model(x, h)\n        loss = F.mse_loss(pred, y)\n        loss.backward()\n        sgd_update(model.parameters(), lr)\n        losses.append(loss.item())\n    return losses\n', 'validate': 'def validate(model, batches):\n    """Mean MSE over the chunks (hidden state carried), as a float, without building a graph."""\n    total, h = 0.0, None\n    with torch.no_grad():\n        for x, y in batches:\n            pred, h = model(x, h)\n            total += F.mse_loss(pred, y).item()\n    return total / len(batches)\n'},
        'lost': {}},
    # AMBIGUOUS: skips tensors with requires_grad=False even when their .grad is set (e.g. a layer frozen after a ba
    'sgd_skips_frozen_with_grad': {'cells': {'sgd_update': 'def sgd_update(params, lr):\n    """p <- p - lr * p.grad, in place, for every p with a gradient: each p stays the same leaf tensor."""\n    with torch.no_grad():\n        for p in params:\n            if not p.requires_grad or p.grad is None:   # frozen tensors are never trained\n                continue\n            p.sub_(lr * p.grad)\n', 'train': 'def train(model, batches, lr):\n    """Truncated BPTT with a hand-written SGD step: one step per chunk, hidden state carried and detached."""\n    losses, h = [], None\n    for x, y in batches:\n        model.zero_grad()\n        if h is not None:\n            h = h.detach()\n        pred, h = model(x, h)\n        loss = F.mse_loss(pred, y)\n        loss.backward()\n        sgd_update(model.parameters(), lr)\n        losses.append(loss.item())\n    return losses\n', 'validate': 'def validate(model, batches):\n    """Mean MSE over the chunks (hidden state carried), as a float, without building a graph."""\n    total, h = 0.0, None\n    with torch.no_grad():\n        for x, y in batches:\n            pred, h = model(x, h)\n            total += F.mse_loss(pred, y).item()\n    return total / len(batches)\n'},
        'lost': {'check_sgd_update': 'has requires_grad=False (frozen after a backward) and a .grad'}},
}
for _name, _spec in BLIND11.items():
    VARIANTS[f"blind11_{_name}"] = _spec

BLIND12 = {  # blind round 12: cases that were misgraded, graded right since
    # Epoch-shuffle habit (and in place: it also reorders the caller's list). Text: 'one training step per chunk of 
    'train_shuffles_chunks': {'cells': {'sgd_update': 'def sgd_update(params, lr):\n    """p <- p - lr * p.grad, in place, for every p with a gradient: each p stays the same leaf tensor."""\n    with torch.no_grad():\n        for p in params:\n            if p.grad is not None:\n                p -= lr * p.grad\n', 'train': 'import random\n\ndef train(model, batches, lr):\n    """Truncated BPTT with a hand-written SGD step: one step per chunk, hidden state carried and detached."""\n    random.shuffle(batches)                 # shuffle the training data each epoch\n    losses, h = [], None\n    for x, y in batches:\n        model.zero_grad()\n        if h is not None:\n            h = h.detach()\n        pred, h = model(x, h)\n        loss = F.mse_loss(pred, y)\n        loss.backward()\n        sgd_update(model.parameters(), lr)\n        losses.append(loss.item())\n    return losses\n', 'validate': 'def validate(model, batches):\n    """Mean MSE over the chunks (hidden state carried), as a float, without building a graph."""\n    total, h = 0.0, None\n    with torch.no_grad():\n        for x, y in batches:\n            pred, h = model(x, h)\n            total += F.mse_loss(pred, y).item()\n    return total / len(batches)\n'},
        'lost': {'check_train': 'the chunk train gives the model at step', 'check_hidden_detached': 'the chunk train gives the model at step', 'check_train_gradients': 'the chunk train gives the model at step'}},
    # Steps and carried state are exactly right, but the returned 'loss' is re-evaluated after the update (an extra 
    'train_logs_post_step_loss': {'cells': {'sgd_update': 'def sgd_update(params, lr):\n    """p <- p - lr * p.grad, in place, for every p with a gradient: each p stays the same leaf tensor."""\n    with torch.no_grad():\n        for p in params:\n            if p.grad is not None:\n                p -= lr * p.grad\n', 'train': 'def train(model, batches, lr):\n    """Truncated BPTT with a hand-written SGD step: one step per chunk, hidden state carried and detached."""\n    losses, h = [], None\n    for x, y in batches:\n        model.zero_grad()\n        h_in = None if h is None else h.detach()\n        pred, h = model(x, h_in)\n        loss = F.mse_loss(pred, y)\n        loss.backward()\n        sgd_update(model.parameters(), lr)\n        with torch.no_grad():               # log the loss of the UPDATED model on this chunk\n            losses.append(F.mse_loss(model(x, h_in)[0], y).item())\n    return losses\n', 'validate': 'def validate(model, batches):\n    """Mean MSE over the chunks (hidden state carried), as a float, without building a graph."""\n    total, h = 0.0, None\n    with torch.no_grad():\n        for x, y in batches:\n            pred, h = model(x, h)\n            total += F.mse_loss(pred, y).item()\n    return total / len(batches)\n'},
        'lost': {'check_train': "train's loss 0: expected"}},
}
for _name, _spec in BLIND12.items():
    VARIANTS[f"blind12_{_name}"] = _spec

BLIND13 = {  # blind round 13: cases that were misgraded, graded right since
    # sgd: p[:] = ... is in place and right for every model parameter (all >= 1-dim), but raises IndexError 'slice()
    'sgd_colon_slice_0dim': {'cells': {'sgd_update': 'def sgd_update(params, lr):\n    """p <- p - lr * p.grad, in place, for every p with a gradient: each p stays the same leaf tensor."""\n    with torch.no_grad():\n        for p in params:\n            if p.grad is None:\n                continue\n            p[:] = p - lr * p.grad          # write into p\'s own memory\n', 'train': 'def train(model, batches, lr):\n    """Truncated BPTT with a hand-written SGD step: one step per chunk, hidden state carried and detached."""\n    losses, h = [], None\n    for x, y in batches:\n        if h is not None:\n            h = h.detach()\n        model.zero_grad()\n        pred, h = model(x, h)\n        loss = F.mse_loss(pred, y)\n        loss.backward()\n        sgd_update(model.parameters(), lr)\n        losses.append(loss.item())\n    return losses\n', 'validate': 'def validate(model, batches):\n    """Mean MSE over the chunks (hidden state carried), as a float, without building a graph."""\n    total, h = 0.0, None\n    with torch.no_grad():\n        for x, y in batches:\n            pred, h = model(x, h)\n            total += F.mse_loss(pred, y).item()\n    return total / len(batches)\n'},
        'lost': {'check_sgd_update': '`sgd_update` on a list of leaf tensors (float'}},
    # train consumes the caller's list with pop(0): one call is exactly right, but the list is empty afterwards, so 
    'train_pops_callers_batches': {'cells': {'sgd_update': 'def sgd_update(params, lr):\n    """p <- p - lr * p.grad, in place, for every p with a gradient: each p stays the same leaf tensor."""\n    with torch.no_grad():\n        for p in params:\n            if p.grad is None:\n                continue\n            p -= lr * p.grad\n', 'train': 'def train(model, batches, lr):\n    """Truncated BPTT with a hand-written SGD step: one step per chunk, hidden state carried and detached."""\n    losses, h = [], None\n    while batches:\n        x, y = batches.pop(0)               # take the chunks in order\n        if h is not None:\n            h = h.detach()\n        model.zero_grad()\n        pred, h = model(x, h)\n        loss = F.mse_loss(pred, y)\n        loss.backward()\n        sgd_update(model.parameters(), lr)\n        losses.append(loss.item())\n    return losses\n', 'validate': 'def validate(model, batches):\n    """Mean MSE over the chunks (hidden state carried), as a float, without building a graph."""\n    total, h = 0.0, None\n    with torch.no_grad():\n        for x, y in batches:\n            pred, h = model(x, h)\n            total += F.mse_loss(pred, y).item()\n    return total / len(batches)\n'},
        'lost': {'check_train': 'the list of chunks train was given, after the call: expected as it was'}},
}
for _name, _spec in BLIND13.items():
    VARIANTS[f"blind13_{_name}"] = _spec

BLIND14 = {  # blind round 14: cases that were misgraded, graded right since
    # sgd_update 'improved' with momentum 0.9, velocity kept in a module-level dict keyed by id(p): the FIRST call o
    'sgd_momentum_state': {'cells': {'sgd_update': '_velocity = {}\n\ndef sgd_update(params, lr, momentum=0.9):\n    """p <- p - lr * p.grad, in place, for every p with a gradient: each p stays the same leaf tensor."""\n    with torch.no_grad():\n        for p in params:\n            if p.grad is None:\n                continue\n            v = _velocity.get(id(p))\n            v = p.grad.clone() if v is None or v.shape != p.shape else v.mul_(momentum).add_(p.grad)\n            _velocity[id(p)] = v\n            p -= lr * v\n', 'train': 'def train(model, batches, lr):\n    """Truncated BPTT with a hand-written SGD step: one step per chunk, hidden state carried and detached."""\n    losses, h = [], None\n    for x, y in batches:\n        model.zero_grad()\n        if h is not None:\n            h = h.detach()\n        pred, h = model(x, h)\n        loss = F.mse_loss(pred, y)\n        loss.backward()\n        sgd_update(model.parameters(), lr)\n        losses.append(loss.item())\n    return losses\n', 'validate': 'def validate(model, batches):\n    """Mean MSE over the chunks (hidden state carried), as a float, without building a graph."""\n    total, h = 0.0, None\n    with torch.no_grad():\n        for x, y in batches:\n            pred, h = model(x, h)\n            total += F.mse_loss(pred, y).item()\n    return total / len(batches)\n'},
        'lost': {'check_sgd_update': "the model's parameters at a second call: tensor"}},
    # Defensive sgd_update: skips any tensor whose gradient has inf/nan ('do not poison the weights'). Identical on 
    'sgd_skips_nonfinite_grads': {'cells': {'sgd_update': 'def sgd_update(params, lr):\n    """p <- p - lr * p.grad, in place, for every p with a gradient: each p stays the same leaf tensor."""\n    with torch.no_grad():\n        for p in params:\n            if p.grad is None or not torch.isfinite(p.grad).all():\n                continue\n            p.add_(p.grad, alpha=-lr)\n', 'train': 'def train(model, batches, lr):\n    """Truncated BPTT with a hand-written SGD step: one step per chunk, hidden state carried and detached."""\n    losses, h = [], None\n    for x, y in batches:\n        model.zero_grad()\n        if h is not None:\n            h = h.detach()\n        pred, h = model(x, h)\n        loss = F.mse_loss(pred, y)\n        loss.backward()\n        sgd_update(model.parameters(), lr)\n        losses.append(loss.item())\n    return losses\n', 'validate': 'def validate(model, batches):\n    """Mean MSE over the chunks (hidden state carried), as a float, without building a graph."""\n    total, h = 0.0, None\n    with torch.no_grad():\n        for x, y in batches:\n            pred, h = model(x, h)\n            total += F.mse_loss(pred, y).item()\n    return total / len(batches)\n'},
        'lost': {'check_sgd_update': 'a tensor whose .grad holds inf and NaN, after sgd_update: expected p -'}},
    # TBPTT 'burn-in' habit: the first chunk only warms up the hidden state (forward under no_grad, no step, no loss
    'train_burn_in_first_chunk': {'cells': {'sgd_update': 'def sgd_update(params, lr):\n    """p <- p - lr * p.grad, in place, for every p with a gradient: each p stays the same leaf tensor."""\n    with torch.no_grad():\n        for p in params:\n            if p.grad is not None:\n                p -= lr * p.grad\n', 'train': 'def train(model, batches, lr):\n    """Truncated BPTT with a hand-written SGD step: one step per chunk, hidden state carried and detached."""\n    losses, h = [], None\n    for i, (x, y) in enumerate(batches):\n        if i == 0:                           # burn-in: the state is meaningless before one chunk\n            with torch.no_grad():\n                _, h = model(x, h)\n            continue\n        model.zero_grad()\n        pred, h = model(x, h.detach())\n        loss = F.mse_loss(pred, y)\n        loss.backward()\n        sgd_update(model.parameters(), lr)\n        losses.append(loss.item())\n    return losses\n', 'validate': 'def validate(model, batches):\n    """Mean MSE over the chunks (hidden state carried), as a float, without building a graph."""\n    total, h = 0.0, None\n    with torch.no_grad():\n        for x, y in batches:\n            pred, h = model(x, h)\n            total += F.mse_loss(pred, y).item()\n    return total / len(batches)\n'},
        'lost': {'check_train': 'how many losses train returned', 'check_train_gradients': 'forward passes of the model in a first call of train on'}},
    # validate divides by 12, the lesson's number of validation chunks (N_CHUNKS constant): exact on the notebook's 
    'val_hardcoded_chunk_count': {'cells': {'sgd_update': 'def sgd_update(params, lr):\n    """p <- p - lr * p.grad, in place, for every p with a gradient: each p stays the same leaf tensor."""\n    with torch.no_grad():\n        for p in params:\n            if p.grad is not None:\n                p -= lr * p.grad\n', 'train': 'def train(model, batches, lr):\n    """Truncated BPTT with a hand-written SGD step: one step per chunk, hidden state carried and detached."""\n    losses, h = [], None\n    for x, y in batches:\n        model.zero_grad()\n        if h is not None:\n            h = h.detach()\n        pred, h = model(x, h)\n        loss = F.mse_loss(pred, y)\n        loss.backward()\n        sgd_update(model.parameters(), lr)\n        losses.append(loss.item())\n    return losses\n', 'validate': 'N_CHUNKS = 12   # graphs.sine_batches(n_batches=12, ...)\n\ndef validate(model, batches):\n    """Mean MSE over the chunks (hidden state carried), as a float, without building a graph."""\n    total, h = 0.0, None\n    with torch.no_grad():\n        for x, y in batches:\n            pred, h = model(x, h)\n            total += F.mse_loss(pred, y).item()\n    return total / N_CHUNKS\n'},
        'lost': {'check_validate': "validate's value on the last"}},
}
for _name, _spec in BLIND14.items():
    VARIANTS[f"blind14_{_name}"] = _spec
BLIND15 = {  # blind round 15: cases that were misgraded, graded right since
    # Updates a flattened p.reshape(-1): a view (so in place, correct) for contiguous tensors, but reshape COPIES a 
    'sgd_reshape_flat_copy': {'cells': {'sgd_update': 'def sgd_update(params, lr):\n    """p <- p - lr * p.grad, in place, for every p with a gradient: each p stays the same leaf tensor."""\n    with torch.no_grad():\n        for p in params:\n            if p.grad is None:\n                continue\n            flat = p.reshape(-1)                  # work on a flat view of p\n            flat.sub_(lr * p.grad.reshape(-1))\n', 'train': 'def train(model, batches, lr):\n    """Truncated BPTT with a hand-written SGD step: one step per chunk, hidden state carried and detached."""\n    losses, h = [], None\n    for x, y in batches:\n        model.zero_grad()\n        if h is not None:\n            h = h.detach()\n        pred, h = model(x, h)\n        loss = F.mse_loss(pred, y)\n        loss.backward()\n        sgd_update(model.parameters(), lr)\n        losses.append(loss.item())\n    return losses\n', 'validate': 'def validate(model, batches):\n    """Mean MSE over the chunks (hidden state carried), as a float, without building a graph."""\n    total, h = 0.0, None\n    with torch.no_grad():\n        for x, y in batches:\n            pred, h = model(x, h)\n            total += F.mse_loss(pred, y).item()\n    return total / len(batches)\n'},
        'lost': {'check_sgd_update': 'is not contiguous (a transposed tensor'}},
    # Does the arithmetic in NumPy and copy_()s back (torch.as_tensor: 0-dim ok) under no_grad: exact, in place, sam
    'sgd_numpy_roundtrip': {'cells': {'sgd_update': 'def sgd_update(params, lr):\n    """p <- p - lr * p.grad, in place, for every p with a gradient: each p stays the same leaf tensor."""\n    with torch.no_grad():\n        for p in params:\n            if p.grad is not None:\n                new = p.detach().numpy() - lr * p.grad.numpy()   # plain arithmetic, no autograd involved\n                p.copy_(torch.as_tensor(new))\n', 'train': 'def train(model, batches, lr):\n    """Truncated BPTT with a hand-written SGD step: one step per chunk, hidden state carried and detached."""\n    losses, h = [], None\n    for x, y in batches:\n        model.zero_grad()\n        if h is not None:\n            h = h.detach()\n        pred, h = model(x, h)\n        loss = F.mse_loss(pred, y)\n        loss.backward()\n        sgd_update(model.parameters(), lr)\n        losses.append(loss.item())\n    return losses\n', 'validate': 'def validate(model, batches):\n    """Mean MSE over the chunks (hidden state carried), as a float, without building a graph."""\n    total, h = 0.0, None\n    with torch.no_grad():\n        for x, y in batches:\n            pred, h = model(x, h)\n            total += F.mse_loss(pred, y).item()\n    return total / len(batches)\n'},
        'lost': {'check_sgd_update': "can't convert cuda:0 device type tensor to numpy"}},
    # Correct, unusual: the chunks concatenated along time and run through the RNN once from h=None: the same as car
    'ok_val_one_pass_concatenated': {'cells': {'sgd_update': 'def sgd_update(params, lr):\n    """p <- p - lr * p.grad, in place, for every p with a gradient: each p stays the same leaf tensor."""\n    with torch.no_grad():\n        for p in params:\n            if p.grad is not None:\n                p -= lr * p.grad\n', 'train': 'def train(model, batches, lr):\n    """Truncated BPTT with a hand-written SGD step: one step per chunk, hidden state carried and detached."""\n    losses, h = [], None\n    for x, y in batches:\n        model.zero_grad()\n        if h is not None:\n            h = h.detach()\n        pred, h = model(x, h)\n        loss = F.mse_loss(pred, y)\n        loss.backward()\n        sgd_update(model.parameters(), lr)\n        losses.append(loss.item())\n    return losses\n', 'validate': 'def validate(model, batches):\n    """Mean MSE over the chunks (hidden state carried), as a float, without building a graph."""\n    if not batches:\n        raise ValueError("no chunks")\n    xs = torch.cat([x for x, _ in batches], dim=1)     # consecutive chunks = one long sequence\n    with torch.no_grad():\n        pred, _ = model(xs)                             # one pass from h=None: the state flows chunk to chunk\n        losses, start = [], 0\n        for x, y in batches:\n            stop = start + x.shape[1]\n            losses.append(F.mse_loss(pred[:, start:stop], y).item())\n            start = stop\n    return sum(losses) / len(losses)\n'},
        'lost': {}},
    # Casts the gradient to float32 before the step: exact for float32, but for a float64 tensor the step is rounded
    'sgd_step_cast_float32': {'cells': {'sgd_update': 'def sgd_update(params, lr):\n    """p <- p - lr * p.grad, in place, for every p with a gradient: each p stays the same leaf tensor."""\n    with torch.no_grad():\n        for p in params:\n            if p.grad is not None:\n                p.sub_(lr * p.grad.float())   # .float(): "safe if the gradient came back in half precision"\n', 'train': 'def train(model, batches, lr):\n    """Truncated BPTT with a hand-written SGD step: one step per chunk, hidden state carried and detached."""\n    losses, h = [], None\n    for x, y in batches:\n        model.zero_grad()\n        if h is not None:\n            h = h.detach()\n        pred, h = model(x, h)\n        loss = F.mse_loss(pred, y)\n        loss.backward()\n        sgd_update(model.parameters(), lr)\n        losses.append(loss.item())\n    return losses\n', 'validate': 'def validate(model, batches):\n    """Mean MSE over the chunks (hidden state carried), as a float, without building a graph."""\n    total, h = 0.0, None\n    with torch.no_grad():\n        for x, y in batches:\n            pred, h = model(x, h)\n            total += F.mse_loss(pred, y).item()\n    return total / len(batches)\n'},
        'lost': {'check_sgd_update': 'the step was rounded to float32 or coarser'}},
}
for _name, _spec in BLIND15.items():
    VARIANTS[f"blind15_{_name}"] = _spec
BLIND16 = {  # blind round 16: cases that were misgraded, graded right since
    # Trains a deep copy: the returned losses of one call are exactly the reference's, h starts at None and is carri
    'train_deepcopies_model': {'cells': {'sgd_update': 'def sgd_update(params, lr):\n    """p <- p - lr * p.grad, in place, for every p with a gradient: each p stays the same leaf tensor."""\n    with torch.no_grad():\n        for p in params:\n            if p.grad is not None:\n                p -= lr * p.grad\n', 'train': 'import copy\n\ndef train(model, batches, lr):\n    """Truncated BPTT with a hand-written SGD step: one step per chunk, hidden state carried and detached."""\n    model = copy.deepcopy(model)            # \'pure function\': do not mutate the caller\'s model\n    losses, h = [], None\n    for x, y in batches:\n        model.zero_grad()\n        if h is not None:\n            h = h.detach()\n        pred, h = model(x, h)\n        loss = F.mse_loss(pred, y)\n        loss.backward()\n        sgd_update(model.parameters(), lr)\n        losses.append(loss.item())\n    return losses\n', 'validate': 'def validate(model, batches):\n    """Mean MSE over the chunks (hidden state carried), as a float, without building a graph."""\n    total, h = 0.0, None\n    with torch.no_grad():\n        for x, y in batches:\n            pred, h = model(x, h)\n            total += F.mse_loss(pred, y).item()\n    return total / len(batches)\n'},
        'lost': {'check_train': 'train never ran the model it was given', 'check_hidden_detached': 'forward passes of the model in a first call of train on', 'check_train_gradients': 'forward passes of the model in a first call of train on'}},
}
for _name, _spec in BLIND16.items():
    VARIANTS[f"blind16_{_name}"] = _spec
BLIND17 = {  # blind round 17: cases that were misgraded, graded right since
    # DEVICE-DEPENDENT: detaches h and parks it on the CPU between chunks. On a CPU it is exactly right; on CUDA/MPS
    'train_h_parked_on_cpu': {'cells': {'sgd_update': 'def sgd_update(params, lr):\n    """p <- p - lr * p.grad, in place, for every p with a gradient: each p stays the same leaf tensor."""\n    with torch.no_grad():\n        for p in params:\n            if p.grad is not None:\n                p -= lr * p.grad\n', 'train': 'def train(model, batches, lr):\n    """Truncated BPTT with a hand-written SGD step: one step per chunk, hidden state carried and detached."""\n    losses, h = [], None\n    for x, y in batches:\n        model.zero_grad()\n        pred, h = model(x, h)\n        loss = F.mse_loss(pred, y)\n        loss.backward()\n        sgd_update(model.parameters(), lr)\n        losses.append(loss.item())\n        h = h.detach().cpu()             # carried without its graph, and off the accelerator between chunks\n    return losses\n', 'validate': 'def validate(model, batches):\n    """Mean MSE over the chunks (hidden state carried), as a float, without building a graph."""\n    total, h = 0.0, None\n    with torch.no_grad():\n        for x, y in batches:\n            pred, h = model(x, h)\n            total += F.mse_loss(pred, y).item()\n    return total / len(batches)\n'},
        'lost': {'check_hidden_detached': '`train` on 3 chunks on a simulated cuda'}},
    # Accumulates in torch.zeros(()) = float32 (the default dtype): for a float64 model each float64 loss is rounded
    'val_float32_tensor_accumulator': {'cells': {'sgd_update': 'def sgd_update(params, lr):\n    """p <- p - lr * p.grad, in place, for every p with a gradient: each p stays the same leaf tensor."""\n    with torch.no_grad():\n        for p in params:\n            if p.grad is not None:\n                p -= lr * p.grad\n', 'train': 'def train(model, batches, lr):\n    """Truncated BPTT with a hand-written SGD step: one step per chunk, hidden state carried and detached."""\n    losses, h = [], None\n    for x, y in batches:\n        model.zero_grad()\n        if h is not None:\n            h = h.detach()\n        pred, h = model(x, h)\n        loss = F.mse_loss(pred, y)\n        loss.backward()\n        sgd_update(model.parameters(), lr)\n        losses.append(loss.item())\n    return losses\n', 'validate': 'def validate(model, batches):\n    """Mean MSE over the chunks (hidden state carried), as a float, without building a graph."""\n    total = torch.zeros(())               # a tensor accumulator: no graph, no .item() sync per chunk\n    h = None\n    with torch.no_grad():\n        for x, y in batches:\n            pred, h = model(x, h)\n            total += F.mse_loss(pred, y).cpu()\n    return (total / len(batches)).item()\n'},
        'lost': {'check_validate': "that is the value to float32's precision only"}},
}
# A CUDA build without a driver (Colab's CPU runtime) takes a device guard in the RNN before PyTorch's own device
# check: the simulated cuda:0 cannot follow that call there, and the probe is skipped (its success line says so)
import torch as _torch  # noqa: E402
if _torch.backends.cuda.is_built() and not _torch.cuda.is_available():
    BLIND17.pop('train_h_parked_on_cpu')
for _name, _spec in BLIND17.items():
    VARIANTS[f"blind17_{_name}"] = _spec


BLIND19 = {  # blind round 19: cases that were misgraded, graded right since
    # Correct with harmless extras: asserts the detach and the graph, keeps a copy of each call's float losses in a 
    'ok_train_extra_asserts_and_history': {'cells': {'sgd_update': 'def sgd_update(params, lr):\n    """p <- p - lr * p.grad, in place, for every p with a gradient: each p stays the same leaf tensor."""\n    with torch.no_grad():\n        for p in params:\n            if p.grad is not None:\n                p.sub_(lr * p.grad)\n', 'validate': 'def validate(model, batches):\n    """Mean MSE over the chunks (hidden state carried), as a float, without building a graph."""\n    total, h = 0.0, None\n    with torch.no_grad():\n        for x, y in batches:\n            pred, h = model(x, h)\n            total += F.mse_loss(pred, y).item()\n    return total / len(batches)\n', 'train': 'HISTORY = []   # every call\'s losses, for plotting later\n\ndef train(model, batches, lr):\n    """Truncated BPTT with a hand-written SGD step: one step per chunk, hidden state carried and detached."""\n    losses = []\n    h = None\n    for i, (x, y) in enumerate(batches):\n        model.zero_grad()\n        h_in = None if h is None else h.detach()\n        assert h_in is None or h_in.grad_fn is None\n        pred, h = model(x, h_in)\n        loss = F.mse_loss(pred, y)\n        assert loss.grad_fn is not None, f"chunk {i}: no graph"\n        loss.backward()\n        sgd_update(model.parameters(), lr)\n        losses.append(loss.item())\n    HISTORY.append(list(losses))\n    return losses\n'},
        'lost': {}},
}
for _name, _spec in BLIND19.items():
    VARIANTS[f"blind19_{_name}"] = _spec


BLIND20 = {  # blind round 20: cases that were misgraded, graded right since
    # AMBIGUOUS, graded True: tensors without .grad get a zero gradient and a zero step, so their VALUES are unchang
    'sgd_none_grads_filled_with_zeros_ok': {'cells': {'sgd_update': 'def sgd_update(params, lr):\n    """p <- p - lr * p.grad, in place, for every p with a gradient: each p stays the same leaf tensor."""\n    with torch.no_grad():\n        for p in params:\n            if p.grad is None:                   # no gradient: a zero step, so every tensor takes the same path\n                p.grad = torch.zeros_like(p)\n            p.sub_(lr * p.grad)\n', 'train': 'def train(model, batches, lr):\n    """Truncated BPTT with a hand-written SGD step: one step per chunk, hidden state carried and detached."""\n    losses, h = [], None\n    for x, y in batches:\n        model.zero_grad()\n        if h is not None:\n            h = h.detach()\n        pred, h = model(x, h)\n        loss = F.mse_loss(pred, y)\n        loss.backward()\n        sgd_update(model.parameters(), lr)\n        losses.append(loss.item())\n    return losses\n', 'validate': 'def validate(model, batches):\n    """Mean MSE over the chunks (hidden state carried), as a float, without building a graph."""\n    total, h = 0.0, None\n    with torch.no_grad():\n        for x, y in batches:\n            pred, h = model(x, h)\n            total += F.mse_loss(pred, y).item()\n    return total / len(batches)\n'},
        'lost': {}},
    # Avoids no_grad by freezing the whole model and 'restoring' it with requires_grad_(True): no graph, grad mode u
    'val_requires_grad_toggle_unfreezes': {'cells': {'sgd_update': 'def sgd_update(params, lr):\n    """p <- p - lr * p.grad, in place, for every p with a gradient: each p stays the same leaf tensor."""\n    with torch.no_grad():\n        for p in params:\n            if p.grad is None:\n                continue\n            p.sub_(lr * p.grad)\n', 'train': 'def train(model, batches, lr):\n    """Truncated BPTT with a hand-written SGD step: one step per chunk, hidden state carried and detached."""\n    losses, h = [], None\n    for x, y in batches:\n        model.zero_grad()\n        if h is not None:\n            h = h.detach()\n        pred, h = model(x, h)\n        loss = F.mse_loss(pred, y)\n        loss.backward()\n        sgd_update(model.parameters(), lr)\n        losses.append(loss.item())\n    return losses\n', 'validate': 'def validate(model, batches):\n    """Mean MSE over the chunks (hidden state carried), as a float, without building a graph."""\n    model.requires_grad_(False)                  # nothing requires grad: no graph, grad mode never touched\n    try:\n        total, h = 0.0, None\n        for x, y in batches:\n            pred, h = model(x, h)\n            total += F.mse_loss(pred, y).item()\n        return total / len(batches)\n    finally:\n        model.requires_grad_(True)               # back to trainable\n'},
        'lost': {'check_validate': "the caller's frozen parameter is trainable again"}},
    # DEVICE-DEPENDENT: Module.cpu() moves the CALLER's model in place. On a CPU-only grader it is exactly right; on
    'val_moves_model_to_cpu': {'cells': {'sgd_update': 'def sgd_update(params, lr):\n    """p <- p - lr * p.grad, in place, for every p with a gradient: each p stays the same leaf tensor."""\n    with torch.no_grad():\n        for p in params:\n            if p.grad is None:\n                continue\n            p.sub_(lr * p.grad)\n', 'train': 'def train(model, batches, lr):\n    """Truncated BPTT with a hand-written SGD step: one step per chunk, hidden state carried and detached."""\n    losses, h = [], None\n    for x, y in batches:\n        model.zero_grad()\n        if h is not None:\n            h = h.detach()\n        pred, h = model(x, h)\n        loss = F.mse_loss(pred, y)\n        loss.backward()\n        sgd_update(model.parameters(), lr)\n        losses.append(loss.item())\n    return losses\n', 'validate': 'def validate(model, batches):\n    """Mean MSE over the chunks (hidden state carried), as a float, without building a graph."""\n    model = model.cpu()                          # validation on the CPU: keep the GPU memory for training\n    total, h = 0.0, None\n    with torch.no_grad():\n        for x, y in batches:\n            pred, h = model(x.cpu(), h)\n            total += F.mse_loss(pred, y.cpu()).item()\n    return total / len(batches)\n'},
        'lost': {'check_validate': "the model's device after validate, on a simulated cuda:0"}},
}
for _name, _spec in BLIND20.items():
    VARIANTS[f"blind20_{_name}"] = _spec
