"""Lesson 03 (CUDA out of memory): plausible wrong fixes of gradient accumulation, and correct ones written differently."""

NO_DIVIDE = '''def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):
    inputs, targets = batch
    optimizer.zero_grad()
    total = 0.0
    for xb, yb in zip(inputs.chunk(micro_batches), targets.chunk(micro_batches)):
        loss = loss_fn(model(xb), yb)          # not divided by micro_batches
        loss.backward()
        total += loss.item()
    optimizer.step()
    return total / micro_batches'''

ZERO_GRAD_INSIDE = '''def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):
    inputs, targets = batch
    total = 0.0
    for xb, yb in zip(inputs.chunk(micro_batches), targets.chunk(micro_batches)):
        optimizer.zero_grad()                  # wipes the earlier micro-batches
        loss = loss_fn(model(xb), yb) / micro_batches
        loss.backward()
        total += loss.item()
    optimizer.step()
    return total'''

STEP_INSIDE = '''def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):
    inputs, targets = batch
    optimizer.zero_grad()
    total = 0.0
    for xb, yb in zip(inputs.chunk(micro_batches), targets.chunk(micro_batches)):
        loss = loss_fn(model(xb), yb) / micro_batches
        loss.backward()
        optimizer.step()                       # one step per micro-batch
        total += loss.item()
    return total'''

SUM_THEN_BACKWARD = '''def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):
    inputs, targets = batch
    optimizer.zero_grad()
    total = 0
    for xb, yb in zip(inputs.chunk(micro_batches), targets.chunk(micro_batches)):
        total = total + loss_fn(model(xb), yb) / micro_batches   # every micro-batch graph kept alive
    total.backward()
    optimizer.step()
    return total.item()'''

FULL_BATCH = '''def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):
    inputs, targets = batch
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), targets)     # micro_batches ignored: the whole batch at once
    loss.backward()
    optimizer.step()
    return loss.item()'''

ALT_WEIGHTED = '''def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):
    x, y = batch
    model.zero_grad(set_to_none=False)
    n = len(x)
    losses = []
    for idx in torch.arange(n, device=x.device).tensor_split(micro_batches):
        out = model(x[idx])
        loss = loss_fn(out, y[idx]) * (len(idx) / n)   # weight by the micro-batch's share
        loss.backward()
        losses.append(loss.detach())
    optimizer.step()
    return float(torch.stack(losses).sum())'''

ALT_RANGE = '''def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):
    inputs, targets = batch
    size = len(inputs) // micro_batches
    optimizer.zero_grad(set_to_none=True)
    running = 0.0
    for start in range(0, len(inputs), size):
        scaled = loss_fn(model(inputs[start:start + size]), targets[start:start + size]) / micro_batches
        scaled.backward()
        running += scaled.item()
    optimizer.step()
    optimizer.zero_grad()      # tidy up afterwards: also fine
    return running'''

MICRO_BATCHES_ON_CPU = '''def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):
    inputs, targets = batch
    optimizer.zero_grad()
    total = 0.0
    for xb, yb in zip(inputs.chunk(micro_batches), targets.chunk(micro_batches)):
        xb, yb = xb.cpu(), yb.cpu()            # "to save GPU memory": the model stays on its device
        loss = loss_fn(model(xb), yb) / micro_batches
        loss.backward()
        total += loss.item()
    optimizer.step()
    return total'''

VARIANTS = {
    "no_divide": {"cells": {"accumulate_step": NO_DIVIDE}, "lost": {"check_accumulated_grads": "divide each micro-batch loss"}},
    "zero_grad_inside_loop": {"cells": {"accumulate_step": ZERO_GRAD_INSIDE},
                              "lost": {"check_accumulated_grads": "the last micro-batch only"}},
    "step_inside_loop": {"cells": {"accumulate_step": STEP_INSIDE},  # the first step saw one micro-batch's gradients
                         "lost": {"check_one_step": "optimizer.step() calls",
                                  "check_accumulated_grads": "the first micro-batch's gradients / 4 only"}},
    "sum_then_backward": {"cells": {"accumulate_step": SUM_THEN_BACKWARD},
                          "lost": {"check_peak_memory": "all 4 forwards ran before the first backward"}},
    "ignores_micro_batches": {"cells": {"accumulate_step": FULL_BATCH},
                              "lost": {"check_peak_memory": "1 forward pass(es) with autograd on, of [256] samples"}},
    "micro_batches_on_cpu": {"cells": {"accumulate_step": MICRO_BATCHES_ON_CPU},  # caught on a CPU by the simulated cuda:0
                             "lost": {"check_accumulated_grads": "device"}},
    "written_differently": {"cells": {"accumulate_step": ALT_WEIGHTED}, "lost": {}},
    "written_differently_2": {"cells": {"accumulate_step": ALT_RANGE}, "lost": {}},
}

# ---- blind round 1 (written from the release notebook alone, checks unseen): the cases it found, and a few
# of its correct fixes in other idioms

BLIND_STEP_EVERY_MICRO_BATCH = '''def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):
    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""
    x, y = batch
    optimizer.zero_grad()
    total = 0.0
    for xb, yb in zip(x.chunk(micro_batches), y.chunk(micro_batches)):
        loss = loss_fn(model(xb), yb) / micro_batches
        loss.backward()
        optimizer.step()
        total += loss.item()
    return total'''

VARIANTS["blind_step_every_micro_batch"] = {"cells": {'accumulate_step': BLIND_STEP_EVERY_MICRO_BATCH}, "lost": {'check_one_step': 'optimizer.step() calls', 'check_accumulated_grads': "not yet the whole batch's"}}

BLIND_HARDCODED_FOUR_PIECES = '''def accumulate_step(model, batch, loss_fn, optimizer, micro_batches=4):
    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""
    x, y = batch
    optimizer.zero_grad()
    total = 0.0
    for xb, yb in zip(x.chunk(4), y.chunk(4)):
        loss = loss_fn(model(xb), yb) / 4
        loss.backward()
        total += loss.item()
    optimizer.step()
    return total'''

VARIANTS["blind_hardcoded_four_pieces"] = {"cells": {'accumulate_step': BLIND_HARDCODED_FOUR_PIECES}, "lost": {'check_accumulated_grads': 'of [4, 4, 4, 3] samples', 'check_one_step': 'the returned loss', 'check_peak_memory': 'micro_batches=8'}}

BLIND_HARDCODED_CROSS_ENTROPY = '''import torch.nn.functional as F

def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):
    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""
    x, y = batch
    optimizer.zero_grad()
    total = 0.0
    for xb, yb in zip(x.chunk(micro_batches), y.chunk(micro_batches)):
        loss = F.cross_entropy(model(xb), yb) / micro_batches
        loss.backward()
        total += loss.item()
    optimizer.step()
    return total'''

VARIANTS["blind_hardcoded_cross_entropy"] = {"cells": {'accumulate_step': BLIND_HARDCODED_CROSS_ENTROPY}, "lost": {'check_accumulated_grads': 'not of the loss_fn passed in', 'check_one_step': 'the returned loss'}}

BLIND_RETAIN_GRAPH_TENSOR_TOTAL = '''def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):
    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""
    x, y = batch
    optimizer.zero_grad()
    total_loss = 0
    for xb, yb in zip(x.chunk(micro_batches), y.chunk(micro_batches)):
        loss = loss_fn(model(xb), yb) / micro_batches
        loss.backward(retain_graph=True)   # copied from a StackOverflow answer about "backward through the graph a second time"
        total_loss += loss
    optimizer.step()
    return total_loss.item()'''

VARIANTS["blind_retain_graph_tensor_total"] = {"cells": {'accumulate_step': BLIND_RETAIN_GRAPH_TENSOR_TOTAL}, "lost": {'check_peak_memory': 'kept growing'}}

BLIND_FULL_BATCH_LOSS_FOR_REPORT = '''def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):
    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""
    x, y = batch
    mean_loss = loss_fn(model(x), y).item()   # the full batch's mean loss, to return
    optimizer.zero_grad()
    for xb, yb in zip(x.chunk(micro_batches), y.chunk(micro_batches)):
        (loss_fn(model(xb), yb) / micro_batches).backward()
    optimizer.step()
    return mean_loss'''

VARIANTS["blind_full_batch_loss_for_report"] = {"cells": {'accumulate_step': BLIND_FULL_BATCH_LOSS_FOR_REPORT}, "lost": {'check_peak_memory': 'of [256, 64, 64, 64, 64] samples'}}

BLIND_NO_ZERO_GRAD = '''def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):
    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""
    x, y = batch
    total = 0.0
    for xb, yb in zip(x.chunk(micro_batches), y.chunk(micro_batches)):
        loss = loss_fn(model(xb), yb) / micro_batches
        loss.backward()
        total += loss.item()
    optimizer.step()
    return total'''

VARIANTS["blind_no_zero_grad"] = {"cells": {'accumulate_step': BLIND_NO_ZERO_GRAD}, "lost": {'check_accumulated_grads': 'plus the 0.5 that .grad held'}}

BLIND_RETURNS_UNSCALED_SUM = '''def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):
    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""
    x, y = batch
    optimizer.zero_grad()
    total = 0.0
    for xb, yb in zip(x.chunk(micro_batches), y.chunk(micro_batches)):
        loss = loss_fn(model(xb), yb)
        (loss / micro_batches).backward()
        total += loss.item()
    optimizer.step()
    return total'''

VARIANTS["blind_returns_unscaled_sum"] = {"cells": {'accumulate_step': BLIND_RETURNS_UNSCALED_SUM}, "lost": {'check_one_step': '4 times the mean'}}

BLIND_RETURNS_TENSOR = '''def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):
    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""
    x, y = batch
    optimizer.zero_grad()
    total = 0.0
    for xb, yb in zip(x.chunk(micro_batches), y.chunk(micro_batches)):
        loss = loss_fn(model(xb), yb) / micro_batches
        loss.backward()
        total = total + loss.detach()
    optimizer.step()
    return total'''

VARIANTS["blind_returns_tensor"] = {"cells": {'accumulate_step': BLIND_RETURNS_TENSOR}, "lost": {'check_one_step': 'observed a tensor'}}

BLIND_SPLIT_SIZE_CONFUSION = '''def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):
    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""
    x, y = batch
    optimizer.zero_grad()
    total = 0.0
    for xb, yb in zip(x.split(micro_batches), y.split(micro_batches)):   # split(n) gives pieces OF SIZE n
        loss = loss_fn(model(xb), yb) / micro_batches
        loss.backward()
        total += loss.item()
    optimizer.step()
    return total'''

VARIANTS["blind_split_size_confusion"] = {"cells": {'accumulate_step': BLIND_SPLIT_SIZE_CONFUSION}, "lost": {'check_accumulated_grads': '8 forward pass(es) with autograd on', 'check_one_step': 'the returned loss'}}

BLIND_SPLIT_FLOAT_SUM = '''import torch

def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):
    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""
    inputs, targets = batch
    piece = inputs.shape[0] // micro_batches            # the batch size is a multiple of micro_batches
    model.zero_grad()                                   # same parameters as the optimizer's
    mean_loss = 0.0
    for xb, yb in zip(torch.split(inputs, piece), torch.split(targets, piece)):
        scaled = loss_fn(model(xb), yb) / micro_batches
        scaled.backward()
        mean_loss += float(scaled)
    optimizer.step()
    return mean_loss'''

VARIANTS["blind_split_float_sum"] = {"cells": {'accumulate_step': BLIND_SPLIT_FLOAT_SUM}, "lost": {}}

BLIND_TUTORIAL_STEP_IN_LOOP_LAST = '''import torch

def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):
    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""
    torch.manual_seed(0)  # reproducibility
    accumulation_steps = micro_batches
    inputs, labels = batch
    running_loss = 0.0
    optimizer.zero_grad()
    for i, (mini_inputs, mini_labels) in enumerate(zip(inputs.chunk(accumulation_steps), labels.chunk(accumulation_steps))):
        outputs = model(mini_inputs)
        loss = loss_fn(outputs, mini_labels)
        loss = loss / accumulation_steps  # normalize our loss (if averaged)
        loss.backward()
        running_loss += loss.item()
        if (i + 1) % accumulation_steps == 0:
            optimizer.step()
    return running_loss'''

# (reseeding the global generator at every step repeats the dropout masks at every step: wrong since round 16)
VARIANTS["blind_tutorial_step_in_loop_last"] = {"cells": {'accumulate_step': BLIND_TUTORIAL_STEP_IN_LOOP_LAST},
                                                "lost": {"check_accumulated_grads": "the step reseeds the global generator"}}

BLIND_WEIGHTED_TENSOR_SPLIT_ENABLE_GRAD = '''import torch

def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):
    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""
    inputs, targets = batch
    optimizer.zero_grad(set_to_none=True)
    weighted = []
    with torch.enable_grad():
        for xb, yb in zip(torch.tensor_split(inputs, micro_batches), torch.tensor_split(targets, micro_batches)):
            weight = xb.shape[0] / inputs.shape[0]
            loss = loss_fn(model(xb), yb)
            (loss * weight).backward()
            weighted.append(loss.item() * weight)
    optimizer.step()
    return sum(weighted)'''

VARIANTS["blind_weighted_tensor_split_enable_grad"] = {"cells": {'accumulate_step': BLIND_WEIGHTED_TENSOR_SPLIT_ENABLE_GRAD}, "lost": {}}

BLIND_DETACHED_TENSOR_TOTAL_NO_GRAD = '''import torch

def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):
    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""
    pieces = zip(*(t.chunk(micro_batches) for t in batch))
    optimizer.zero_grad()
    total = None
    for xb, yb in pieces:
        loss = loss_fn(model(xb), yb).div(micro_batches)
        torch.autograd.backward(loss)
        with torch.no_grad():
            total = loss.detach() if total is None else total + loss.detach()
    optimizer.step()
    return total.item()'''

VARIANTS["blind_detached_tensor_total_no_grad"] = {"cells": {'accumulate_step': BLIND_DETACHED_TENSOR_TOTAL_NO_GRAD}, "lost": {}}

BLIND_SET_GRAD_ENABLED_LIST_LOSSES = '''import math
import torch

def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):
    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""
    for group in optimizer.param_groups:          # zero once: drop the old gradients
        for p in group["params"]:
            p.grad = None
    xs, ys = batch[0].chunk(micro_batches), batch[1].chunk(micro_batches)
    losses = []
    with torch.set_grad_enabled(True):
        for k in range(len(xs)):
            part = loss_fn(model(xs[k]), ys[k]) / micro_batches
            part.backward()
            losses.append(part.item())
    optimizer.step()
    return math.fsum(losses)'''

VARIANTS["blind_set_grad_enabled_list_losses"] = {"cells": {'accumulate_step': BLIND_SET_GRAD_ENABLED_LIST_LOSSES}, "lost": {}}

# Blind round 2: its writer expected check_accumulated_grads (the gradients and the step are right); the returned
# loss is checked by check_one_step, whose title now says so. The hint names the micro-batch it returned.
BLIND2_RETURNS_LAST_PIECE_LOSS = '''def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):
    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""
    x, y = batch
    optimizer.zero_grad()
    for xb, yb in zip(x.chunk(micro_batches), y.chunk(micro_batches)):
        loss = loss_fn(model(xb), yb) / micro_batches
        loss.backward()
    optimizer.step()
    return loss.item() * micro_batches'''

VARIANTS["blind2_returns_last_piece_loss"] = {"cells": {'accumulate_step': BLIND2_RETURNS_LAST_PIECE_LOSS},
                                              "lost": {'check_one_step': "it is the loss of micro-batch 4 of 4 alone"}}

# Blind round 3 (written from the release notebook alone): the cases it misgraded, and a message made exact
# (a shape error on a notebook global blamed the layer sizes; it now says the tensor is not the batch's).

BLIND3_STEP_WITH_CLOSURE = '''def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):
    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""
    inputs, targets = batch

    def closure():
        optimizer.zero_grad()
        total = 0.0
        for xb, yb in zip(inputs.chunk(micro_batches), targets.chunk(micro_batches)):
            loss = loss_fn(model(xb), yb) / micro_batches
            loss.backward()
            total += loss.item()
        return total

    return float(optimizer.step(closure))'''

VARIANTS["blind3_step_with_closure"] = {"cells": {"accumulate_step": BLIND3_STEP_WITH_CLOSURE}, "lost": {}}

BLIND3_LOSS_IN_FLOAT32 = '''import torch

def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):
    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""
    inputs, targets = batch
    optimizer.zero_grad()
    total = 0.0
    for xb, yb in zip(inputs.chunk(micro_batches), targets.chunk(micro_batches)):
        logits = model(xb).float()                     # compute the loss in float32, as under autocast
        loss = loss_fn(logits, yb) / micro_batches
        loss.backward()
        total += loss.item()
    optimizer.step()
    return total'''

VARIANTS["blind3_loss_in_float32"] = {"cells": {"accumulate_step": BLIND3_LOSS_IN_FLOAT32}, "lost": {'check_accumulated_grads': 'float32-sized rounding'}}

BLIND3_PIECES_OF_SIZE_MICRO_BATCHES = '''import torch

def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):
    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""
    inputs, targets = batch
    pieces = list(zip(inputs.split(micro_batches), targets.split(micro_batches)))
    optimizer.zero_grad()
    total = 0.0
    for xb, yb in pieces:
        loss = loss_fn(model(xb), yb) / len(pieces)
        loss.backward()
        total += loss.item()
    optimizer.step()
    return total'''

VARIANTS["blind3_pieces_of_size_micro_batches"] = {"cells": {"accumulate_step": BLIND3_PIECES_OF_SIZE_MICRO_BATCHES}, "lost": {'check_accumulated_grads': 'micro_batches is the number of pieces, not their size'}}

BLIND3_TARGETS_CAST_LONG = '''import torch

def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):
    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""
    inputs, targets = batch
    optimizer.zero_grad()
    total = 0.0
    for xb, yb in zip(inputs.chunk(micro_batches), targets.chunk(micro_batches)):
        loss = loss_fn(model(xb), yb.long()) / micro_batches      # class indices must be int64
        loss.backward()
        total += loss.item()
    optimizer.step()
    return total'''

VARIANTS["blind3_targets_cast_long"] = {"cells": {"accumulate_step": BLIND3_TARGETS_CAST_LONG}, "lost": {'check_accumulated_grads': 'target with class probabilities', 'check_one_step': 'target with class probabilities'}}


BLIND3_USES_NOTEBOOK_GLOBALS = '''import torch

def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):
    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""
    optimizer.zero_grad()
    total = 0.0
    for xb, yb in zip(x.chunk(micro_batches), y.chunk(micro_batches)):
        loss = loss_fn(model(xb), yb) / micro_batches
        loss.backward()
        total += loss.item()
    optimizer.step()
    return total'''

VARIANTS["blind3_uses_notebook_globals"] = {"cells": {"accumulate_step": BLIND3_USES_NOTEBOOK_GLOBALS}, "lost": {"check_accumulated_grads": "not a piece of that batch", "check_one_step": "not a piece of that batch", "check_peak_memory": "not a piece of that batch"}}


# Blind round 4. check_one_step compared the returned loss with a 1e-4 tolerance (a loss rounded to 4 decimals passed):
# now float32 rounding (2e-6 relative), with the difference printed.
BLIND4_ROUNDS_RETURNED_LOSS = '''def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):
    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""
    inputs, targets = batch
    optimizer.zero_grad()
    total = 0.0
    for xb, yb in zip(inputs.chunk(micro_batches), targets.chunk(micro_batches)):
        loss = loss_fn(model(xb), yb) / micro_batches
        loss.backward()
        total += loss.item()
    optimizer.step()
    return round(total, 4)   # tidy for printing'''

VARIANTS["blind4_rounds_returned_loss"] = {"cells": {"accumulate_step": BLIND4_ROUNDS_RETURNED_LOSS}, "lost": {"check_one_step": "observed 1.1379, off by"}}

# zero_grad() after the loop: the step finds no gradient (check_accumulated_grads). check_peak_memory lost too, for
# "gradients missing", which is not a memory fault: it now asks only that the step did the work it measures (forwards
# with autograd on over the whole batch, backward through the model). check_one_step (step count, returned loss) is
# right to pass: the blind writer's expectation of it is mistaken.
BLIND4_ZERO_BETWEEN_LOOP_AND_STEP = '''def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):
    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""
    inputs, targets = batch
    total = 0.0
    for xb, yb in zip(inputs.chunk(micro_batches), targets.chunk(micro_batches)):
        loss = loss_fn(model(xb), yb) / micro_batches
        loss.backward()
        total += loss.item()
    optimizer.zero_grad()
    optimizer.step()
    return total'''

VARIANTS["blind4_zero_between_loop_and_step"] = {"cells": {"accumulate_step": BLIND4_ZERO_BETWEEN_LOOP_AND_STEP}, "lost": {"check_accumulated_grads": "observed none for"}}

# argmax of class-probability targets: check_one_step used class-index targets only, so the returned loss (on other
# targets than the ones given) passed; its odd seeds now use class-probability targets.
BLIND4_PROB_TARGETS_TO_INDICES = '''def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):
    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""
    inputs, targets = batch
    if targets.is_floating_point() and targets.dim() > 1:
        targets = targets.argmax(dim=1)          # cross-entropy wants class indices
    optimizer.zero_grad()
    total = 0.0
    for xb, yb in zip(inputs.chunk(micro_batches), targets.chunk(micro_batches)):
        loss = loss_fn(model(xb), yb) / micro_batches
        loss.backward()
        total += loss.item()
    optimizer.step()
    return total'''

VARIANTS["blind4_prob_targets_to_indices"] = {"cells": {"accumulate_step": BLIND4_PROB_TARGETS_TO_INDICES}, "lost": {"check_accumulated_grads": "on class-probability targets", "check_one_step": "on class-probability targets): expected the full batch's mean loss"}}

# steps a new SGD of its own: check_peak_memory lost it too ("0 step(s)"), not a memory fault (fixed with
# blind4_zero_between_loop_and_step), and the hint said to call optimizer.step(), which it did, on another optimizer:
# the checks now see which optimizer stepped and say so.
BLIND4_OWN_SGD_FROM_LR = '''import torch

def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):
    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""
    inputs, targets = batch
    opt = torch.optim.SGD(model.parameters(), lr=optimizer.param_groups[0]["lr"])
    opt.zero_grad()
    total = 0.0
    for xb, yb in zip(inputs.chunk(micro_batches), targets.chunk(micro_batches)):
        loss = loss_fn(model(xb), yb) / micro_batches
        loss.backward()
        total += loss.item()
    opt.step()
    return total'''

VARIANTS["blind4_own_sgd_from_lr"] = {"cells": {"accumulate_step": BLIND4_OWN_SGD_FROM_LR}, "lost": {"check_accumulated_grads": "the optimizer passed in never stepped, while another one", "check_one_step": "the optimizer passed in never stepped"}}

# Blind round 5: 'zero the gradients once' as p.grad.zero_() on every parameter: it crashes on a model that has not
# run backward() (.grad is None). check_one_step (a new model) lost it with the bare AttributeError; it now says why.
# (check_accumulated_grads and check_peak_memory preset .grad, as a previous step leaves it, and see correct gradients.)
BLIND5_ZERO_EXISTING_GRADS_IN_PLACE = '''def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):
    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""
    inputs, targets = batch
    for p in model.parameters():
        p.grad.zero_()
    total = 0.0
    for xb, yb in zip(inputs.chunk(micro_batches), targets.chunk(micro_batches)):
        loss = loss_fn(model(xb), yb) / micro_batches
        loss.backward()
        total += loss.item()
    optimizer.step()
    return total'''

VARIANTS["blind5_zero_existing_grads_in_place"] = {"cells": {"accumulate_step": BLIND5_ZERO_EXISTING_GRADS_IN_PLACE}, "lost": {"check_one_step": "a parameter's .grad is None until a backward() writes it"}}

BLIND6 = {  # blind round 6: cases that were misgraded, graded right since
    # the text's mechanism is 'backward() frees a piece's activations before the next forward': with retain_graph=Tr
    'retain_graph_every_piece': {'cells': {'accumulate_step': 'def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):\n    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    total = 0.0\n    for xb, yb in zip(inputs.chunk(micro_batches), targets.chunk(micro_batches)):\n        loss = loss_fn(model(xb), yb) / micro_batches\n        loss.backward(retain_graph=True)\n        total += loss.item()\n    optimizer.step()\n    return total\n'},
        'lost': {'check_peak_memory': 'the peak memory of one step with 4 micro-batches (batch 256)'}},
}
for _name, _spec in BLIND6.items():
    VARIANTS[f"blind6_{_name}"] = _spec

BLIND7 = {  # blind round 7: cases that were misgraded, graded right since
    # copies each piece's logits and targets to the CPU for the loss: breaks 'batch is already on the model's device
    'loss_computed_on_cpu': {'cells': {'accumulate_step': 'def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):\n    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    total = 0.0\n    for xb, yb in zip(inputs.chunk(micro_batches), targets.chunk(micro_batches)):\n        logits = model(xb)\n        loss = loss_fn(logits.cpu(), yb.cpu()) / micro_batches    # the loss on the CPU frees GPU memory\n        loss.backward()\n        total += loss.item()\n    optimizer.step()\n    return total\n'},
        'lost': {'check_accumulated_grads': 'the tensors loss_fn received'}},
    # clearing optimizer.state throws away momentum / Adam moments every step: with a stateful optimizer the step is
    'clears_optimizer_state': {'cells': {'accumulate_step': 'def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):\n    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    optimizer.state.clear()                       # free the optimizer\'s buffers before the big step: more room\n    total = 0.0\n    for xb, yb in zip(inputs.chunk(micro_batches), targets.chunk(micro_batches)):\n        loss = loss_fn(model(xb), yb) / micro_batches\n        loss.backward()\n        total += loss.item()\n    optimizer.step()\n    return total\n'},
        'lost': {'check_one_step': "the optimizer's state (SGD's momentum buffers) at the second effective batch's step"}},
}
for _name, _spec in BLIND7.items():
    VARIANTS[f"blind7_{_name}"] = _spec

BLIND8 = {  # blind round 8: cases that were misgraded, graded right since
    # switches autograd off for the whole process with torch.set_grad_enabled(False) and never switches it back: the
    'grad_mode_left_off': {'cells': {'accumulate_step': 'def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):\n    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    total = 0.0\n    for xb, yb in zip(inputs.chunk(micro_batches), targets.chunk(micro_batches)):\n        loss = loss_fn(model(xb), yb) / micro_batches\n        loss.backward()\n        total += loss.item()\n    torch.set_grad_enabled(False)                 # the update itself needs no graph\n    optimizer.step()\n    return total\n'},
        'lost': {'check_one_step': 'autograd when accumulate_step returns (torch.is_grad_enabled())'}},
    # keeps every micro-batch's output tensor (with its autograd graph) in a module-level list after the call: the m
    'global_outputs_log': {'cells': {'accumulate_step': 'OUTPUTS = []   # every micro-batch\'s output, to compute the accuracy at the end of the epoch\n\n\ndef accumulate_step(model, batch, loss_fn, optimizer, micro_batches):\n    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    total = 0.0\n    for xb, yb in zip(inputs.chunk(micro_batches), targets.chunk(micro_batches)):\n        out = model(xb)\n        loss = loss_fn(out, yb) / micro_batches\n        loss.backward()\n        total += loss.item()\n        OUTPUTS.append((out, yb))\n    optimizer.step()\n    return total\n'},
        'lost': {'check_peak_memory': 'the memory held after each of 3 consecutive calls of accumulate_step (one optimizer, batch'}},
}
for _name, _spec in BLIND8.items():
    VARIANTS[f"blind8_{_name}"] = _spec

BLIND9 = {  # blind round 9: cases that were misgraded, graded right since
    # the gradient hooks are never removed: the first call on a model is right, but the function 'is called several 
    'scaling_hooks_never_removed': {'cells': {'accumulate_step': 'def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):\n    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""\n    inputs, targets = batch\n    for p in model.parameters():\n        p.register_hook(lambda g: g / micro_batches)     # scale each piece\'s gradient on its way into .grad\n    optimizer.zero_grad()\n    mean_loss = 0.0\n    for xb, yb in zip(inputs.chunk(micro_batches), targets.chunk(micro_batches)):\n        loss = loss_fn(model(xb), yb)\n        loss.backward()\n        mean_loss += loss.item() / micro_batches\n    optimizer.step()\n    return mean_loss\n'},
        'lost': {'check_accumulated_grads': 'hook(s) registered on the model'}},
    # 'compute each micro-batch's loss with the loss_fn you are given': it assumes an nn loss module whose reduction
    'sum_reduction_switch_assumes_nn_loss': {'cells': {'accumulate_step': 'def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):\n    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""\n    inputs, targets = batch\n    n = len(inputs)\n    saved = getattr(loss_fn, "reduction", "mean")\n    loss_fn.reduction = "sum"                     # sum over each piece, then one division by the batch size\n    try:\n        optimizer.zero_grad()\n        total = 0.0\n        for xb, yb in zip(inputs.chunk(micro_batches), targets.chunk(micro_batches)):\n            loss = loss_fn(model(xb), yb) / n\n            loss.backward()\n            total += loss.item()\n    finally:\n        loss_fn.reduction = saved\n    optimizer.step()\n    return total\n'},
        'lost': {'check_accumulated_grads': 'gradients times micro_batches / batch size', 'check_one_step': 'it is the mean times micro_batches / batch size'}},
    # 'zero the gradients once, before the loop' means once per call: it zeroes only on the first call with a given 
    'zero_grad_on_first_call_only': {'cells': {'accumulate_step': 'def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):\n    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""\n    inputs, targets = batch\n    if not getattr(optimizer, "_accumulation_zeroed", False):   # zero the gradients once\n        optimizer.zero_grad()\n        optimizer._accumulation_zeroed = True\n    total = 0.0\n    for xb, yb in zip(inputs.chunk(micro_batches), targets.chunk(micro_batches)):\n        loss = loss_fn(model(xb), yb) / micro_batches\n        loss.backward()\n        total += loss.item()\n    optimizer.step()\n    return total\n'},
        'lost': {'check_accumulated_grads': "plus the previous call's gradients"}},
}
for _name, _spec in BLIND9.items():
    VARIANTS[f"blind9_{_name}"] = _spec

BLIND13 = {  # blind round 13 (lesson 12's accumulate_step): correct, failed the peak budget before it allowed a spare
    # copy of the gradients (torch.autograd.grad returns each piece's gradients; they are alive while the next forward runs)
    'autograd_grad_into_dot_grad': {'cells': {'accumulate_step': 'def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):\n    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""\n    inputs, targets = batch\n    params = [p for p in model.parameters() if p.requires_grad]\n    optimizer.zero_grad()\n    total = 0.0\n    for xb, yb in zip(torch.chunk(inputs, micro_batches), torch.chunk(targets, micro_batches)):\n        loss = loss_fn(model(xb), yb) / micro_batches\n        grads = torch.autograd.grad(loss, params, allow_unused=True)\n        for p, g in zip(params, grads):\n            if g is None:\n                continue\n            if p.grad is None:\n                p.grad = g.detach().clone()\n            else:\n                p.grad.add_(g)\n        total += loss.item()\n    optimizer.step()\n    return total\n'},
        'lost': {}},
    # the functional idiom: a running list of gradient sums, written into .grad once before the step
    'autograd_grad_running_sum': {'cells': {'accumulate_step': 'def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):\n    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""\n    inputs, targets = batch\n    params = list(model.parameters())\n    summed, total = None, 0.0\n    for xb, yb in zip(inputs.chunk(micro_batches), targets.chunk(micro_batches)):\n        loss = loss_fn(model(xb), yb) / micro_batches\n        piece = torch.autograd.grad(loss, params)\n        summed = list(piece) if summed is None else [s + g for s, g in zip(summed, piece)]\n        total += loss.item()\n    optimizer.zero_grad()\n    for p, g in zip(params, summed):\n        p.grad = g\n    optimizer.step()\n    return total\n'},
        'lost': {}},
}
for _name, _spec in BLIND13.items():
    VARIANTS[f"blind13_{_name}"] = _spec

BLIND14 = {  # blind round 14: cases that were misgraded, graded right since
    # Defensive torch.set_grad_enabled(True) at the top, never restored: called under torch.no_grad() it leaves grad
    'grad_mode_forced_on': {'cells': {'accumulate_step': 'def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):\n    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""\n    torch.set_grad_enabled(True)                     # in case it is called from an evaluation loop\n    inputs, targets = batch\n    optimizer.zero_grad()\n    total = 0.0\n    for xb, yb in zip(inputs.chunk(micro_batches), targets.chunk(micro_batches)):\n        loss = loss_fn(model(xb), yb) / micro_batches\n        loss.backward()\n        total += loss.item()\n    optimizer.step()\n    return total\n'},
        'lost': {'check_one_step': 'tep returns, called inside torch.no_grad() (a caller with autograd off'}},
}
for _name, _spec in BLIND14.items():
    VARIANTS[f"blind14_{_name}"] = _spec
BLIND16 = {  # blind round 16: cases that were misgraded, graded right since
    # Casts the batch to float32 ('data float32', lesson 02): a no-op on float32, but on the grader's float64 model 
    'cast_inputs_float32': {'cells': {'accumulate_step': 'def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):\n    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""\n    inputs, targets = batch\n    inputs = inputs.float()                   # data float32, as lesson 02 taught\n    optimizer.zero_grad()\n    total = 0.0\n    for xb, yb in zip(inputs.chunk(micro_batches), targets.chunk(micro_batches)):\n        loss = loss_fn(model(xb), yb) / micro_batches\n        loss.backward()\n        total += loss.item()\n    optimizer.step()\n    return total\n'},
        'lost': {'check_accumulated_grads': '`accumulate_step` on cpu, batch'}},
    # Off-by-one in the slicing loop: range(0, N - size, size) skips the last micro-batch, so the gradient and the r
    'off_by_one_last_piece': {'cells': {'accumulate_step': 'def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):\n    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""\n    inputs, targets = batch\n    size = len(inputs) // micro_batches\n    optimizer.zero_grad()\n    total = 0.0\n    for start in range(0, len(inputs) - size, size):\n        loss = loss_fn(model(inputs[start:start + size]), targets[start:start + size]) / micro_batches\n        loss.backward()\n        total += loss.item()\n    optimizer.step()\n    return total\n'},
        'lost': {'check_accumulated_grads': "tches=4, loss_fn nn.CrossEntropyLoss()): expected the full batch's gra", 'check_one_step': 'the returned loss (batch'}},
    # Turns grad mode OFF on the way out 'to save memory between steps': its own steps are exact (it turns it on aga
    'grad_off_after_step': {'cells': {'accumulate_step': 'def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):\n    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""\n    torch.set_grad_enabled(True)\n    inputs, targets = batch\n    optimizer.zero_grad()\n    total = 0.0\n    for xb, yb in zip(inputs.chunk(micro_batches), targets.chunk(micro_batches)):\n        loss = loss_fn(model(xb), yb) / micro_batches\n        loss.backward()\n        total += loss.item()\n    optimizer.step()\n    torch.set_grad_enabled(False)        # no graphs between steps: saves memory until the next call\n    return total\n'},
        'lost': {'check_one_step': 'the step switched autograd off for the whole process'}},
}
for _name, _spec in BLIND16.items():
    VARIANTS[f"blind16_{_name}"] = _spec
BLIND17 = {  # blind round 17: cases that were misgraded, graded right since
    # Caches the pieces with functools.lru_cache(maxsize=None) keyed by the batch tensors: every batch ever passed s
    'lru_cache_pieces': {'cells': {'accumulate_step': 'import functools\n\n@functools.lru_cache(maxsize=None)\ndef _pieces(inputs, targets, micro_batches):\n    """Split once per batch (cached: a training loop that re-calls with the same batch skips the work)."""\n    return list(zip(inputs.chunk(micro_batches), targets.chunk(micro_batches)))\n\ndef accumulate_step(model, batch, loss_fn, optimizer, micro_batches):\n    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    total = 0.0\n    for xb, yb in _pieces(inputs, targets, micro_batches):\n        loss = loss_fn(model(xb), yb) / micro_batches\n        loss.backward()\n        total += loss.item()\n    optimizer.step()\n    return total\n'},
        'lost': {'check_peak_memory': 'so tensors created in each call stay alive after it returns'}},
}
for _name, _spec in BLIND17.items():
    VARIANTS[f"blind17_{_name}"] = _spec


BLIND18 = {  # blind round 18: cases that were misgraded, graded right since
    # Reads 'keep every tensor there' as torch.set_default_device(inputs.device) and never restores it: the step is 
    'set_default_device_leak': {'cells': {'accumulate_step': 'def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):\n    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""\n    inputs, targets = batch\n    torch.set_default_device(inputs.device)      # keep every tensor on the batch\'s device\n    optimizer.zero_grad()\n    total = 0.0\n    for xb, yb in zip(inputs.chunk(micro_batches), targets.chunk(micro_batches)):\n        loss = loss_fn(model(xb), yb) / micro_batches\n        loss.backward()\n        total += loss.item()\n    optimizer.step()\n    return total\n'},
        'lost': {'check_accumulated_grads': "with the model and the batch on a simulated cuda:0: expected cpu, as it was, observed cuda:0"}},
    # Fixes the float32-factor problem by switching torch's DEFAULT dtype to the batch's, never restored: gradients 
    'default_dtype_from_batch': {'cells': {'accumulate_step': 'def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):\n    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""\n    inputs, targets = batch\n    torch.set_default_dtype(inputs.dtype)        # float64 batches: keep the factor in float64 too\n    scale = torch.tensor(1.0 / micro_batches, device=inputs.device)\n    optimizer.zero_grad()\n    total = 0.0\n    for xb, yb in zip(inputs.chunk(micro_batches), targets.chunk(micro_batches)):\n        loss = loss_fn(model(xb), yb) * scale\n        loss.backward()\n        total += loss.item()\n    optimizer.step()\n    return total\n'},
        'lost': {'check_accumulated_grads': "torch's default dtype when `accumulate_step` on cpu"}},
    # Caches contiguous copies of the pieces keyed by id(batch): a training loop builds a new (x, y) tuple per call 
    'cache_pieces_by_batch_id': {'cells': {'accumulate_step': 'def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):\n    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""\n    inputs, targets = batch\n    key = (id(batch), micro_batches)          # same batch object: same pieces\n    cache = accumulate_step.__dict__.setdefault("cache", {})\n    if key not in cache:                          # split (and copy contiguous) once per batch\n        cache.clear()\n        cache[key] = [(xb.clone(), yb.clone())\n                      for xb, yb in zip(inputs.chunk(micro_batches), targets.chunk(micro_batches))]\n    optimizer.zero_grad()\n    total = 0.0\n    for xb, yb in cache[key]:\n        loss = loss_fn(model(xb), yb) / micro_batches\n        loss.backward()\n        total += loss.item()\n    optimizer.step()\n    return total\n'},
        'lost': {'check_one_step': 'the returned loss (batch', 'check_peak_memory': 'the peak memory of one step with'}},
}
for _name, _spec in BLIND18.items():
    VARIANTS[f"blind18_{_name}"] = _spec


BLIND19 = {  # blind round 19: cases that were misgraded, graded right since
    # 'Defensive' model.requires_grad_(True): identical on the notebook's MLP, but it UNFREEZES a frozen layer (fine
    'unfreezes_model': {'cells': {'accumulate_step': 'def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):\n    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""\n    inputs, targets = batch\n    model.requires_grad_(True)       # make sure every weight gets its gradient\n    total = 0.0\n    with torch.enable_grad():\n        optimizer.zero_grad()\n        for xb, yb in zip(inputs.chunk(micro_batches), targets.chunk(micro_batches)):\n            loss = loss_fn(model(xb), yb) / micro_batches\n            loss.backward()\n            total += loss.item()\n        optimizer.step()\n    return total\n'},
        'lost': {'check_accumulated_grads': 'the frozen first layer after accumulate_step'}},
    # A logging forward hook registered on the model every call and never removed: gradients are exact, but after k 
    'forward_hook_counter_left': {'cells': {'accumulate_step': 'def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):\n    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""\n    inputs, targets = batch\n    seen = []\n    model.register_forward_hook(lambda mod, inp, out: seen.append(out.shape[0]))   # log piece sizes\n    total = 0.0\n    with torch.enable_grad():\n        optimizer.zero_grad()\n        for xb, yb in zip(inputs.chunk(micro_batches), targets.chunk(micro_batches)):\n            loss = loss_fn(model(xb), yb) / micro_batches\n            loss.backward()\n            total += loss.item()\n        optimizer.step()\n    print("piece sizes:", seen[-micro_batches:])\n    return total\n'},
        'lost': {'check_accumulated_grads': 'hooks on the model after accumulate_step returns'}},
    # AMBIGUOUS: the step is exact, but it switches on anomaly detection process-wide and never restores it (every l
    'anomaly_mode_left_on': {'cells': {'accumulate_step': 'def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):\n    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""\n    inputs, targets = batch\n    torch.autograd.set_detect_anomaly(True)     # debugging the NaN from last week\n    total = 0.0\n    with torch.enable_grad():\n        optimizer.zero_grad()\n        for xb, yb in zip(inputs.chunk(micro_batches), targets.chunk(micro_batches)):\n            loss = loss_fn(model(xb), yb) / micro_batches\n            loss.backward()\n            total += loss.item()\n        optimizer.step()\n    return total\n'},
        'lost': {'check_one_step': 'anomaly detection when accumulate_step returns'}},
}
for _name, _spec in BLIND19.items():
    VARIANTS[f"blind19_{_name}"] = _spec


BLIND20 = {  # blind round 20: cases that were misgraded, graded right since
    # Reseeds with torch.manual_seed(torch.initial_seed()) at the start of every call 'for replayable steps' (not fo
    'reseed_from_initial_seed': {'cells': {'accumulate_step': 'def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):\n    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""\n    # same seed as the run was started with: a step gives the same result whenever it is replayed\n    torch.manual_seed(torch.initial_seed())\n    inputs, targets = batch\n    optimizer.zero_grad()\n    total = 0.0\n    for xb, yb in zip(inputs.chunk(micro_batches), targets.chunk(micro_batches)):\n        loss = loss_fn(model(xb), yb) / micro_batches\n        loss.backward()\n        total += loss.item()\n    optimizer.step()\n    return total\n'},
        'lost': {'check_accumulated_grads': 'then from the same seed 5 numbers on'}},
    # Divides the summed gradients after the loop (a correct idiom) but only over optimizer.param_groups[0]: an opti
    'divides_first_param_group_only': {'cells': {'accumulate_step': 'def accumulate_step(model, batch, loss_fn, optimizer, micro_batches):\n    """One optimizer step on the whole batch, computed in `micro_batches` pieces; returns the mean loss."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    total = 0.0\n    for xb, yb in zip(inputs.chunk(micro_batches), targets.chunk(micro_batches)):\n        loss = loss_fn(model(xb), yb)\n        loss.backward()                  # sum the micro-batch gradients, divide once below\n        total += loss.item()\n    with torch.no_grad():\n        for p in optimizer.param_groups[0]["params"]:\n            if p.grad is not None:\n                p.grad /= micro_batches\n    optimizer.step()\n    return total / micro_batches\n'},
        'lost': {'check_accumulated_grads': '(the biases\' group off)'}},
}
for _name, _spec in BLIND20.items():
    VARIANTS[f"blind20_{_name}"] = _spec
