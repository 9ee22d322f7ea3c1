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

VARIANTS = {
    "no_divide": {"cells": {"accumulate_step": NO_DIVIDE}, "lost": {"check_accumulated_grads": "divide each micro-batch loss"}},
    "zero_grad_inside_loop": {"cells": {"accumulate_step": ZERO_GRAD_INSIDE},
                              "lost": {"check_accumulated_grads": "the last micro-batch only"}},
    "step_inside_loop": {"cells": {"accumulate_step": STEP_INSIDE}, "lost": {"check_one_step": "optimizer.step() calls"}},
    "sum_then_backward": {"cells": {"accumulate_step": SUM_THEN_BACKWARD}, "lost": {"check_peak_memory": "peak memory"}},
    "ignores_micro_batches": {"cells": {"accumulate_step": FULL_BATCH}, "lost": {"check_peak_memory": "peak memory"}},
    "written_differently": {"cells": {"accumulate_step": ALT_WEIGHTED}, "lost": {}},
    "written_differently_2": {"cells": {"accumulate_step": ALT_RANGE}, "lost": {}},
}
