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
    # the hidden state reset at every chunk: no error, and no memory across chunks either
    "train_hidden_reset": {
        "cells": {"train": train_with(DETACH, "        h = None\n")},
        "lost": {"check_hidden_detached": "None: the model starts from zeros at every chunk"},
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
        pred, h = model(x, h)
        loss = F.mse_loss(pred, y)
        loss.backward()
        sgd_update(model.parameters(), lr)
        model.zero_grad(set_to_none=True)
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
