"""Lesson 05 (exploding and vanishing gradients): plausible wrong fixes and correct fixes written differently."""

SUM_OF_NORMS = '''def grad_norms(model):
    layers = {}
    for name, module in model.named_modules():
        grads = [p.grad for p in module.parameters(recurse=False) if p.grad is not None]
        if grads:
            layers[name] = torch.cat([g.flatten() for g in grads]).norm().item()
    return sum(layers.values()), layers          # norms do not add up'''

PARAM_NORMS = '''def grad_norms(model):
    layers = {}
    for name, module in model.named_modules():
        params = [p for p in module.parameters(recurse=False) if p.grad is not None]
        if params:
            layers[name] = torch.cat([p.flatten() for p in params]).norm().item()   # the weights, not the gradients
    return sum(v ** 2 for v in layers.values()) ** 0.5, layers'''

PER_PARAMETER_KEYS = '''def grad_norms(model):
    layers = {name: p.grad.norm().item() for name, p in model.named_parameters() if p.grad is not None}
    return sum(v ** 2 for v in layers.values()) ** 0.5, layers'''

RECURSIVE = '''def grad_norms(model):
    layers = {}
    for name, module in model.named_modules():
        grads = [p.grad for p in module.parameters() if p.grad is not None]   # children's parameters too
        if grads:
            layers[name] = torch.cat([g.flatten() for g in grads]).norm().item()
    total = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]).norm().item()
    return total, layers'''

WEIGHTS_ONLY = '''def grad_norms(model):
    layers = {}
    for name, module in model.named_modules():
        own = [p for pname, p in module.named_parameters(recurse=False) if pname != "bias" and p.grad is not None]
        if own:
            layers[name] = torch.cat([p.grad.flatten() for p in own]).norm().item()   # biases forgotten
    return tc.grad_norm(model), layers'''

ALT_GRAD_NORMS = '''def grad_norms(model):
    by_layer = {}
    for full_name, p in model.named_parameters(remove_duplicate=False):    # a shared weight belongs to both layers
        if p.grad is not None:
            layer = full_name.rpartition(".")[0]
            by_layer[layer] = by_layer.get(layer, 0.0) + float(p.grad.double().pow(2).sum())
    total = torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.grad is not None], float("inf"))
    return float(total), {layer: s ** 0.5 for layer, s in by_layer.items()}'''

PER_PARAMETER_CLIP = '''def clipped_step(model, batch, loss_fn, optimizer, max_norm):
    inputs, targets = batch
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    norm = tc.grad_norm(model)
    for p in model.parameters():
        torch.nn.utils.clip_grad_norm_(p, max_norm)                  # each parameter on its own
    optimizer.step()
    return loss.item(), norm'''

CLIP_VALUE = '''def clipped_step(model, batch, loss_fn, optimizer, max_norm):
    inputs, targets = batch
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    norm = tc.grad_norm(model)
    torch.nn.utils.clip_grad_value_(model.parameters(), max_norm)    # clips values, bends the direction
    optimizer.step()
    return loss.item(), norm'''

POST_CLIP_NORM = '''def clipped_step(model, batch, loss_fn, optimizer, max_norm):
    inputs, targets = batch
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.item(), tc.grad_norm(model)                          # measured after clipping'''

CLIP_BEFORE_BACKWARD = '''def clipped_step(model, batch, loss_fn, optimizer, max_norm):
    inputs, targets = batch
    optimizer.zero_grad()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)   # no gradients yet
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    optimizer.step()
    return loss.item(), float(norm)'''

ALWAYS_RESCALE = '''def clipped_step(model, batch, loss_fn, optimizer, max_norm):
    inputs, targets = batch
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    norm = tc.grad_norm(model)
    for p in model.parameters():
        p.grad.mul_(max_norm / norm)                                     # also scales small gradients UP
    optimizer.step()
    return loss.item(), norm'''

ALT_CLIPPED_STEP = '''def clipped_step(model, batch, loss_fn, optimizer, max_norm):
    x, y = batch
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    scale = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    with torch.no_grad():
        for g in grads:
            g.mul_(scale)
    optimizer.step()
    return float(loss), float(total)'''

TANH = '''def build_deep_net(inputs, hidden, outputs, depth):
    return tc.mlp(inputs=inputs, hidden=hidden, outputs=outputs, depth=depth, activation=nn.Tanh)'''

RELU_DEFAULT_INIT = '''def build_deep_net(inputs, hidden, outputs, depth):
    return tc.mlp(inputs=inputs, hidden=hidden, outputs=outputs, depth=depth, activation=nn.ReLU)'''

SHALLOW = '''def build_deep_net(inputs, hidden, outputs, depth):
    return tc.mlp(inputs=inputs, hidden=hidden, outputs=outputs, depth=2, activation=nn.ReLU)'''

ALT_RESIDUAL = '''class Residual(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, x):
        return x + torch.relu(self.linear(x))


def build_deep_net(inputs, hidden, outputs, depth):
    return nn.Sequential(nn.Linear(inputs, hidden), *[Residual(hidden) for _ in range(depth - 1)],
                         nn.Linear(hidden, outputs))'''

ALT_BATCHNORM = '''def build_deep_net(inputs, hidden, outputs, depth):
    layers, width = [], inputs
    for _ in range(depth):
        layers += [nn.Linear(width, hidden), nn.BatchNorm1d(hidden), nn.Sigmoid()]
        width = hidden
    return nn.Sequential(*layers, nn.Linear(width, outputs))'''

# ---- from the first blind round (written from the release notebook alone; see the lesson's report) ----------

TENSOR_NORMS = '''def grad_norms(model):
    layers = {}
    for name, module in model.named_modules():
        grads = [p.grad for p in module.parameters(recurse=False) if p.grad is not None]
        if grads:
            layers[name] = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])), layers   # tensors'''

TOTAL_FROM_LAYERS = '''import math


def grad_norms(model):
    layers = {}
    for name, module in model.named_modules():
        grads = [p.grad for p in module.parameters(recurse=False) if p.grad is not None]
        if grads:
            layers[name] = torch.cat([g.flatten() for g in grads]).norm().item()
    return math.sqrt(sum(v ** 2 for v in layers.values())), layers     # a shared weight counted twice'''

LIBRARY_HELPERS = '''def grad_norms(model):
    return tc.grad_norm(model), tc.layer_grad_norms(model)           # names the root by its class, not '''''

FLOAT64_NORMS = '''import math


def _sq(grads):
    return sum(float(g.detach().double().pow(2).sum()) for g in grads)


def grad_norms(model):
    layers = {}
    for name, module in model.named_modules():
        own = [p.grad for p in module.parameters(recurse=False) if p.grad is not None]
        if own:
            layers[name] = math.sqrt(_sq(own))
    return math.sqrt(_sq([p.grad for p in model.parameters() if p.grad is not None])), layers'''

TENSOR_RESULTS = '''def clipped_step(model, batch, loss_fn, optimizer, max_norm):
    inputs, targets = batch
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss, norm                                                  # tensors; the loss holds its graph'''

EXHAUSTED_GENERATOR = '''def clipped_step(model, batch, loss_fn, optimizer, max_norm):
    params = model.parameters()
    inputs, targets = batch
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    grad_norm = tc.grad_norm([p for p in params if p.grad is not None])
    torch.nn.utils.clip_grad_norm_(params, max_norm)                   # the generator is used up: clips nothing
    optimizer.step()
    return loss.item(), grad_norm'''

CLIP_AFTER_STEP = '''def clipped_step(model, batch, loss_fn, optimizer, max_norm):
    inputs, targets = batch
    optimizer.zero_grad()
    loss = loss_fn(model(inputs), targets)
    loss.backward()
    optimizer.step()
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)   # too late
    return loss.item(), norm.item()'''

ENABLE_GRAD_FOREACH = '''def clipped_step(model, batch, loss_fn, optimizer, max_norm):
    dev = next(model.parameters()).device
    inputs, targets = (t.to(dev, non_blocking=True) for t in batch)
    with torch.set_grad_enabled(True):
        model.zero_grad(set_to_none=True)
        loss = loss_fn(model(inputs), targets)
        loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=max_norm, norm_type=2.0,
                                               error_if_nonfinite=False, foreach=True)
    optimizer.step()
    return loss.detach().cpu().item(), grad_norm.detach().cpu().item()'''

HARDCODED_SIZES = '''def build_deep_net(inputs, hidden, outputs, depth):
    layers = [nn.Linear(8, 32), nn.BatchNorm1d(32), nn.ReLU()]          # the demo's sizes, whatever the arguments
    for _ in range(depth - 1):
        layers += [nn.Linear(32, 32), nn.BatchNorm1d(32), nn.ReLU()]
    layers.append(nn.Linear(32, outputs))
    return nn.Sequential(*layers)'''

HARDCODED_WIDTH = '''def build_deep_net(inputs, hidden, outputs, depth):
    model = tc.mlp(inputs=inputs, hidden=32, outputs=outputs, depth=depth, activation=nn.ReLU)   # width fixed
    for layer in model:
        if isinstance(layer, nn.Linear):
            nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
            nn.init.zeros_(layer.bias)
    return model'''

PRENORM_RESIDUAL = '''class ResBlock(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc = nn.Linear(width, width)

    def forward(self, x):
        return x + self.fc(torch.relu(self.norm(x)))


class ResMLP(nn.Module):
    def __init__(self, inputs, hidden, outputs, depth):
        super().__init__()
        self.stem = nn.Linear(inputs, hidden)
        self.blocks = nn.ModuleList([ResBlock(hidden) for _ in range(depth - 1)])
        self.head = nn.Linear(hidden, outputs)

    def forward(self, x):
        h = self.stem(x)
        for block in self.blocks:
            h = block(h)
        return self.head(torch.relu(h))


def build_deep_net(inputs, hidden, outputs, depth):
    return ResMLP(inputs, hidden, outputs, depth)'''

RATIO = "first-layer / last-layer gradient norm"
PROGRESS = "plain SGD steps"

VARIANTS = {
    "sum_of_norms": {"cells": {"grad_norms": SUM_OF_NORMS}, "lost": {"check_grad_norms": "sqrt(sum of squared"}},
    "norms_of_weights": {"cells": {"grad_norms": PARAM_NORMS}, "lost": {"check_grad_norms": "GRADIENTS (p.grad, not p)"}},
    "per_parameter_keys": {"cells": {"grad_norms": PER_PARAMETER_KEYS}, "lost": {"check_grad_norms": "the layer names"}},
    "children_counted_twice": {"cells": {"grad_norms": RECURSIVE}, "lost": {"check_grad_norms": "parameters(recurse=False)"}},
    "biases_forgotten": {"cells": {"grad_norms": WEIGHTS_ONLY}, "lost": {"check_grad_norms": "weight and bias together"}},
    "clip_each_parameter": {"cells": {"clipped_step": PER_PARAMETER_CLIP}, "lost": {"check_clipped_step": "direction"}},
    "clip_values": {"cells": {"clipped_step": CLIP_VALUE}, "lost": {"check_clipped_step": "direction"}},
    "post_clip_norm": {"cells": {"clipped_step": POST_CLIP_NORM}, "lost": {"check_clipped_step": "BEFORE clipping"}},
    "clip_before_backward": {"cells": {"clipped_step": CLIP_BEFORE_BACKWARD}, "lost": {"check_clipped_step": "above the ceiling"}},
    "always_rescale": {"cells": {"clipped_step": ALWAYS_RESCALE}, "lost": {"check_clipped_step": "only ever scales DOWN"}},
    "tanh_instead_of_sigmoid": {"cells": {"build_deep_net": TANH}, "lost": {"check_build_deep_net": PROGRESS}},
    "relu_default_init": {"cells": {"build_deep_net": RELU_DEFAULT_INIT}, "lost": {"check_build_deep_net": RATIO}},
    "made_shallow": {"cells": {"build_deep_net": SHALLOW}, "lost": {"check_build_deep_net": "keep the depth"}},
    # named_parameters(remove_duplicate=False) also lists a layer OBJECT used twice under its second name, where the
    # text's model.named_modules() names it once (blind round 2 found the case; the check's models now hold one)
    "written_differently": {"cells": {"grad_norms": ALT_GRAD_NORMS, "clipped_step": ALT_CLIPPED_STEP,
                                      "build_deep_net": ALT_RESIDUAL},
                            "lost": {"check_grad_norms": "used twice in the model"}},
    "batchnorm_fix": {"cells": {"build_deep_net": ALT_BATCHNORM}, "lost": {}},
    # first blind round
    "norms_as_tensors": {"cells": {"grad_norms": TENSOR_NORMS},
                         "lost": {"check_grad_norms": "expected a Python float, observed a 0-d tensor"}},
    "total_from_layer_norms": {"cells": {"grad_norms": TOTAL_FROM_LAYERS},
                               "lost": {"check_grad_norms": "a weight shared by two layers (tied weights)"}},
    "library_helpers": {"cells": {"grad_norms": LIBRARY_HELPERS},
                        "lost": {"check_grad_norms": "named_modules() names the root module '' (the empty string)"}},
    "step_returns_tensors": {"cells": {"clipped_step": TENSOR_RESULTS},
                             "lost": {"check_clipped_step": "that still holds its autograd graph"}},
    "exhausted_generator": {"cells": {"clipped_step": EXHAUSTED_GENERATOR},
                            "lost": {"check_clipped_step": "above the ceiling (and"}},
    "clip_after_step": {"cells": {"clipped_step": CLIP_AFTER_STEP},
                        "lost": {"check_clipped_step": "optimizer.step() had already used them unclipped"}},
    "hardcoded_sizes": {"cells": {"build_deep_net": HARDCODED_SIZES}, "lost": {"check_build_deep_net": "hidden=14"}},
    "hardcoded_width": {"cells": {"build_deep_net": HARDCODED_WIDTH},
                        "lost": {"check_build_deep_net": "the hidden width is 32 whatever `hidden` says"}},
    "blind_correct_idioms": {"cells": {"grad_norms": FLOAT64_NORMS, "clipped_step": ENABLE_GRAD_FOREACH,
                                       "build_deep_net": PRENORM_RESIDUAL}, "lost": {}},
    "blind2_gn_returns_list_not_tuple": {  # a list where the text asks for the pair (total, layers)
        "cells": {
        'grad_norms': 'import torch\n\ndef grad_norms(model):\n    """(total gradient norm, {layer name: gradient norm of that layer\'s own parameters})."""\n    layers = {}\n    for name, module in model.named_modules():\n        own = [p.grad for p in module.parameters(recurse=False) if p.grad is not None]\n        if own:\n            layers[name] = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in own])).item()\n    grads = [p.grad for p in model.parameters() if p.grad is not None]\n    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])).item() if grads else 0.0\n    return [total, layers]\n',
        },
        "lost": {'check_grad_norms': 'observed a list of 2'}},
    "blind2_gn_named_modules_keep_duplicates": {  # named_modules(remove_duplicate=False): a layer used twice is listed under both names
        "cells": {
        'grad_norms': 'import torch\n\ndef grad_norms(model):\n    """(total gradient norm, {layer name: gradient norm of that layer\'s own parameters})."""\n    layers = {}\n    # remove_duplicate=False: a layer used twice in the model gets an entry under each of its names\n    for name, module in model.named_modules(remove_duplicate=False):\n        own = [p.grad for p in module.parameters(recurse=False) if p.grad is not None]\n        if own:\n            layers[name] = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in own])).item()\n    grads = [p.grad for p in model.parameters() if p.grad is not None]\n    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])).item() if grads else 0.0\n    return total, layers\n',
        },
        "lost": {'check_grad_norms': 'used twice in the model'}},
    "blind2_cs_divides_by_zero_norm": {  # max_norm / norm: ZeroDivisionError when every gradient is zero
        "cells": {
        'clipped_step': 'import torch\n\ndef clipped_step(model, batch, loss_fn, optimizer, max_norm):\n    """One training step with the total gradient norm clipped to max_norm; returns (loss, norm before clipping)."""\n    x, y = batch\n    optimizer.zero_grad()\n    loss = loss_fn(model(x), y)\n    loss.backward()\n    grads = [p.grad for p in model.parameters() if p.grad is not None]\n    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])).item()\n    scale = min(1.0, max_norm / norm)               # 1 below the ceiling\n    for g in grads:\n        g.mul_(scale)\n    optimizer.step()\n    return loss.item(), norm\n',
        },
        "lost": {'check_clipped_step': 'raised ZeroDivisionError'}},
    "blind2_cs_first_param_group_only": {  # clips optimizer.param_groups[0] only: the other group is not clipped
        "cells": {
        'clipped_step': 'import torch\n\ndef clipped_step(model, batch, loss_fn, optimizer, max_norm):\n    """One training step with the total gradient norm clipped to max_norm; returns (loss, norm before clipping)."""\n    x, y = batch\n    optimizer.zero_grad()\n    loss = loss_fn(model(x), y)\n    loss.backward()\n    params = optimizer.param_groups[0]["params"]         # the parameters the optimizer updates\n    norm = torch.nn.utils.clip_grad_norm_(params, max_norm)\n    optimizer.step()\n    return loss.item(), norm.item()\n',
        },
        "lost": {'check_clipped_step': 'left as they were'}},
    "blind2_bd_zero_init_output_layer": {  # misleading message fixed: the hint blamed sigmoid/tanh squashing in a ReLU net whose output layer is zero
        "cells": {
        'build_deep_net': 'from torch import nn\n\ndef build_deep_net(inputs, hidden, outputs, depth):\n    """A `depth`-layer MLP whose gradients reach its first layer."""\n    model = tc.mlp(inputs, hidden, outputs, depth=depth, activation=nn.ReLU)\n    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]\n    for layer in linears[:-1]:\n        nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")\n        nn.init.zeros_(layer.bias)\n    nn.init.zeros_(linears[-1].weight)      # zero-init the head: start from a neutral prediction\n    nn.init.zeros_(linears[-1].bias)\n    return model\n',
        },
        "lost": {'check_build_deep_net': 'the weight of the output layer is all zeros'}},
    "blind2_cs_ignores_loss_fn": {  # misleading message fixed: the hint said 'scale all gradients by one factor'; the loss_fn passed in is never called
        "cells": {
        'clipped_step': 'import torch\nfrom torch import nn\n\ndef clipped_step(model, batch, loss_fn, optimizer, max_norm):\n    """One training step with the total gradient norm clipped to max_norm; returns (loss, norm before clipping)."""\n    x, y = batch\n    optimizer.zero_grad()\n    loss = nn.CrossEntropyLoss()(model(x), y)           # a classification step\n    loss.backward()\n    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    optimizer.step()\n    return loss.item(), norm.item()\n',
        },
        "lost": {'check_clipped_step': 'loss_fn never called'}},
    "blind3_cs_optimizer_closure": {  # correct: clips inside a closure passed to optimizer.step(closure) (a step pre-hook fires before the closure runs)
        "cells": {
        'clipped_step': 'def clipped_step(model, batch, loss_fn, optimizer, max_norm):\n    """One training step with the total gradient norm clipped to max_norm; returns (loss, norm before clipping)."""\n    inputs, targets = batch\n    measured = {}\n\n    def closure():\n        optimizer.zero_grad()\n        loss = loss_fn(model(inputs), targets)\n        loss.backward()\n        # inside the closure: after backward, before the optimizer applies the update\n        measured["norm"] = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n        return loss\n\n    loss = optimizer.step(closure)\n    return loss.item(), measured["norm"].item()\n',
        },
        "lost": {}},
    "blind3_gn_clip_inf_to_measure": {  # measures with clip_grad_norm_(max_norm=inf): an inf gradient turns every gradient into nan
        "cells": {
        'grad_norms': 'def grad_norms(model):\n    """(total gradient norm, {layer name: gradient norm of that layer\'s own parameters})."""\n    # as section 1 does: with an infinite ceiling clip_grad_norm_ clips nothing and only returns the norm\n    measure = lambda params: torch.nn.utils.clip_grad_norm_(params, max_norm=float("inf")).item()\n    layers = {}\n    for name, module in model.named_modules():\n        params = [p for p in module.parameters(recurse=False) if p.grad is not None]\n        if params:\n            layers[name] = measure(params)\n    return measure([p for p in model.parameters() if p.grad is not None]), layers\n',
        },
        "lost": {'check_grad_norms': 'every gradient became nan'}},
    "blind3_gn_skips_requires_grad_false_with_grad": {  # skips parameters frozen after a backward pass that still hold a .grad (get_total_norm -> vector_norm: torch 2.4 lacks it)
        "cells": {
        'grad_norms': 'def grad_norms(model):\n    """(total gradient norm, {layer name: gradient norm of that layer\'s own parameters})."""\n    def trainable_grads(params):\n        # frozen parameters are skipped\n        return [p.grad for p in params if p.requires_grad and p.grad is not None]\n\n    layers = {}\n    for name, module in model.named_modules():\n        grads = trainable_grads(module.parameters(recurse=False))\n        if grads:\n            layers[name] = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])).item()\n    grads = trainable_grads(model.parameters())\n    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])).item() if grads else 0.0\n    return total, layers\n',
        },
        "lost": {'check_grad_norms': 'requires_grad=False that still have a .grad'}},
    "blind3_cs_set_grad_enabled_false_statement": {  # torch.set_grad_enabled(False) as a statement: autograd left off for the next step
        "cells": {
        'clipped_step': 'def clipped_step(model, batch, loss_fn, optimizer, max_norm):\n    """One training step with the total gradient norm clipped to max_norm; returns (loss, norm before clipping)."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    loss = loss_fn(model(inputs), targets)\n    loss.backward()\n    torch.set_grad_enabled(False)       # the clipping and the update must not be recorded by autograd\n    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    optimizer.step()\n    return loss.item(), norm.item()\n',
        },
        "lost": {'check_clipped_step': 'autograd when clipped_step returns'}},
}

# Blind round 4: the case it misgraded (now fixed in the check: odd seeds sweep narrow widths, 12 and 14).
BLIND4 = {
    # He's std for the lesson's width 32 hard-coded: right at 32, too small for narrower layers
    "bd_he_std_hardcoded_for_width_32": ('build_deep_net', '''def build_deep_net(inputs, hidden, outputs, depth):
    """A `depth`-layer MLP whose gradients reach its first layer."""
    std = (2 / 32) ** 0.5                     # He initialisation: sqrt(2 / fan_in)
    layers = []
    for i in range(depth):
        linear = nn.Linear(inputs if i == 0 else hidden, hidden)
        nn.init.normal_(linear.weight, 0.0, std)
        nn.init.zeros_(linear.bias)
        layers += [linear, nn.ReLU()]
    layers.append(nn.Linear(hidden, outputs))
    return nn.Sequential(*layers)''', {"check_build_deep_net": "below He initialisation's sqrt(2 / fan_in) = sqrt(2 / 14)"}),
}
for _name, (_cell, _source, _lost) in BLIND4.items():
    VARIANTS[f"blind4_{_name}"] = {"cells": {_cell: _source}, "lost": _lost}

BLIND8 = {  # blind round 8: cases that were misgraded, graded right since
    # crashes (torch.stack of an empty list) on a model none of whose parameters has a .grad: parameters with .grad 
    'gn_stack_of_no_norms_crashes': {'cells': {'grad_norms': 'import torch\n\n\ndef grad_norms(model):\n    """(total gradient norm, {layer name: gradient norm of that layer\'s own parameters})."""\n    layers = {}\n    for name, module in model.named_modules():\n        grads = [p.grad for p in module.parameters(recurse=False) if p.grad is not None]\n        if grads:\n            layers[name] = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])).item()\n    grads = [p.grad for p in model.parameters() if p.grad is not None]\n    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])).item()\n    return total, layers\n'},
        'lost': {'check_grad_norms': 'no gradients at all (every .grad None'}},
    # (get_total_norm -> vector_norm: torch 2.4 lacks it) model.float() on a bfloat16 model converts its parameters and their gradients to float32: 'leave the gradients
    'gn_upcasts_low_precision_model_to_float32': {'cells': {'grad_norms': 'import torch\n\n\ndef grad_norms(model):\n    """(total gradient norm, {layer name: gradient norm of that layer\'s own parameters})."""\n    if any(p.dtype in (torch.float16, torch.bfloat16) for p in model.parameters()):\n        model.float()                       # measure low-precision gradients in float32\n    layers = {}\n    for name, module in model.named_modules():\n        grads = [p.grad for p in module.parameters(recurse=False) if p.grad is not None]\n        if grads:\n            layers[name] = torch.linalg.vector_norm(torch.cat([g.reshape(-1) for g in grads])).item()\n    grads = [p.grad for p in model.parameters() if p.grad is not None]\n    total = torch.linalg.vector_norm(torch.cat([g.reshape(-1) for g in grads])).item() if grads else 0.0\n    return total, layers\n'},
        'lost': {'check_grad_norms': "the dtypes of the model's parameters and gradients after grad_norms"}},
    # returned in eval mode, its BatchNorm layers use their untouched running statistics (an identity) and never lea
    'bd_batchnorm_relu_returned_in_eval_mode': {'cells': {'build_deep_net': 'from torch import nn\n\n\ndef build_deep_net(inputs, hidden, outputs, depth):\n    """A `depth`-layer MLP whose gradients reach its first layer."""\n    layers, width = [], inputs\n    for _ in range(depth):\n        layers += [nn.Linear(width, hidden), nn.BatchNorm1d(hidden), nn.ReLU()]\n        width = hidden\n    layers.append(nn.Linear(width, outputs))\n    return nn.Sequential(*layers).eval()           # ready to use\n'},
        'lost': {'check_build_deep_net': 'the net came back in eval mode (BatchNorm1d'}},
}
for _name, _spec in BLIND8.items():
    VARIANTS[f"blind8_{_name}"] = _spec

BLIND9 = {  # blind round 9: cases that were misgraded, graded right since
    # a model with no gradients must give (0.0, {}) with a Python float; this returns the int 0
    'gn_no_gradients_returns_int_zero': {'cells': {'grad_norms': 'def grad_norms(model):\n    """(total gradient norm, {layer name: gradient norm of that layer\'s own parameters})."""\n    grads = [p.grad for p in model.parameters() if p.grad is not None]\n    if not grads:\n        return 0, {}                                  # nothing measured yet\n    total = torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])).item()\n    layers = {}\n    for name, module in model.named_modules():\n        own = [p.grad for p in module.parameters(recurse=False) if p.grad is not None]\n        if own:\n            layers[name] = torch.linalg.vector_norm(torch.stack([g.norm() for g in own])).item()\n    return total, layers\n', 'clipped_step': 'def clipped_step(model, batch, loss_fn, optimizer, max_norm):\n    """One training step with the total gradient norm clipped to max_norm; returns (loss, norm before clipping)."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    loss = loss_fn(model(inputs), targets)\n    loss.backward()\n    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    optimizer.step()\n    return loss.item(), norm.item()\n', 'build_deep_net': 'def build_deep_net(inputs, hidden, outputs, depth):\n    """A `depth`-layer MLP whose gradients reach its first layer."""\n    layers, width = [], inputs\n    for _ in range(depth):\n        layers += [nn.Linear(width, hidden), nn.ReLU()]\n        width = hidden\n    layers.append(nn.Linear(width, outputs))\n    model = nn.Sequential(*layers)\n    for m in model.modules():\n        if isinstance(m, nn.Linear):\n            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")\n            nn.init.zeros_(m.bias)\n    return model\n'},
        'lost': {'check_grad_norms': 'observed the int 0'}},
    # leave the model untouched: a frozen layer (requires_grad=False, from the start or after a backward pass) comes
    'gn_requires_grad_off_then_all_on': {'cells': {'grad_norms': 'def grad_norms(model):\n    """(total gradient norm, {layer name: gradient norm of that layer\'s own parameters})."""\n    params = list(model.parameters())\n    for p in params:\n        p.requires_grad_(False)                       # measuring must not be recorded by autograd\n    grads = [p.grad for p in params if p.grad is not None]\n    total = torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])).item() if grads else 0.0\n    layers = {}\n    for name, module in model.named_modules():\n        own = [p.grad for p in module.parameters(recurse=False) if p.grad is not None]\n        if own:\n            layers[name] = torch.linalg.vector_norm(torch.stack([g.norm() for g in own])).item()\n    for p in params:\n        p.requires_grad_(True)                        # back to trainable\n    return total, layers\n', 'clipped_step': 'def clipped_step(model, batch, loss_fn, optimizer, max_norm):\n    """One training step with the total gradient norm clipped to max_norm; returns (loss, norm before clipping)."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    loss = loss_fn(model(inputs), targets)\n    loss.backward()\n    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    optimizer.step()\n    return loss.item(), norm.item()\n', 'build_deep_net': 'def build_deep_net(inputs, hidden, outputs, depth):\n    """A `depth`-layer MLP whose gradients reach its first layer."""\n    layers, width = [], inputs\n    for _ in range(depth):\n        layers += [nn.Linear(width, hidden), nn.ReLU()]\n        width = hidden\n    layers.append(nn.Linear(width, outputs))\n    model = nn.Sequential(*layers)\n    for m in model.modules():\n        if isinstance(m, nn.Linear):\n            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")\n            nn.init.zeros_(m.bias)\n    return model\n'},
        'lost': {'check_grad_norms': '(requires_grad=False) made trainable'}},
    # leave the model untouched: it is left in eval mode (the dashboard calls grad_norms inside a training loop, who
    'gn_switches_model_to_eval': {'cells': {'grad_norms': 'def grad_norms(model):\n    """(total gradient norm, {layer name: gradient norm of that layer\'s own parameters})."""\n    model.eval()                                      # we only measure, we do not train\n    grads = [p.grad for p in model.parameters() if p.grad is not None]\n    if not grads:\n        return 0.0, {}\n    total = torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])).item()\n    layers = {}\n    for name, module in model.named_modules():\n        own = [p.grad for p in module.parameters(recurse=False) if p.grad is not None]\n        if own:\n            layers[name] = torch.linalg.vector_norm(torch.stack([g.norm() for g in own])).item()\n    return total, layers\n', 'clipped_step': 'def clipped_step(model, batch, loss_fn, optimizer, max_norm):\n    """One training step with the total gradient norm clipped to max_norm; returns (loss, norm before clipping)."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    loss = loss_fn(model(inputs), targets)\n    loss.backward()\n    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    optimizer.step()\n    return loss.item(), norm.item()\n', 'build_deep_net': 'def build_deep_net(inputs, hidden, outputs, depth):\n    """A `depth`-layer MLP whose gradients reach its first layer."""\n    layers, width = [], inputs\n    for _ in range(depth):\n        layers += [nn.Linear(width, hidden), nn.ReLU()]\n        width = hidden\n    layers.append(nn.Linear(width, outputs))\n    model = nn.Sequential(*layers)\n    for m in model.modules():\n        if isinstance(m, nn.Linear):\n            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")\n            nn.init.zeros_(m.bias)\n    return model\n'},
        'lost': {'check_grad_norms': "the model's mode after grad_norms"}},
    # grad_norm must be the total norm before clipping (what the dashboard shows); on a step whose gradients are not
    'cs_nonfinite_step_skipped_reports_zero_norm': {'cells': {'grad_norms': 'def grad_norms(model):\n    """(total gradient norm, {layer name: gradient norm of that layer\'s own parameters})."""\n    grads = [p.grad for p in model.parameters() if p.grad is not None]\n    if not grads:\n        return 0.0, {}\n    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])).item()\n    layers = {}\n    for name, module in model.named_modules():\n        own = [p.grad for p in module.parameters(recurse=False) if p.grad is not None]\n        if own:\n            layers[name] = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in own])).item()\n    return total, layers\n', 'clipped_step': 'import math\n\n\ndef clipped_step(model, batch, loss_fn, optimizer, max_norm):\n    """One training step with the total gradient norm clipped to max_norm; returns (loss, norm before clipping)."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    loss = loss_fn(model(inputs), targets)\n    loss.backward()\n    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm).item()\n    if not math.isfinite(norm):                       # skip the bad step (troubleshooting table)\n        optimizer.zero_grad()\n        return loss.item(), 0.0\n    optimizer.step()\n    return loss.item(), norm\n', 'build_deep_net': 'def build_deep_net(inputs, hidden, outputs, depth):\n    """A `depth`-layer MLP whose gradients reach its first layer."""\n    layers, width = [], inputs\n    for _ in range(depth):\n        layers += [nn.Linear(width, hidden), nn.ReLU()]\n        width = hidden\n    layers.append(nn.Linear(width, outputs))\n    model = nn.Sequential(*layers)\n    for m in model.modules():\n        if isinstance(m, nn.Linear):\n            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")\n            nn.init.zeros_(m.bias)\n    return model\n'},
        'lost': {'check_clipped_step': 'the returned grad_norm with a loss_fn whose gradients are not finite'}},
}
for _name, _spec in BLIND9.items():
    VARIANTS[f"blind9_{_name}"] = _spec
BLIND16 = {  # blind round 16: cases that were misgraded, graded right since
    # grad_norms memoised with lru_cache keyed on the model object ('the model does not change'): the first call is 
    'gn_cached_per_model': {'cells': {'grad_norms': 'import functools\n\n@functools.lru_cache(maxsize=None)\ndef _measure(model):\n    layers = {}\n    for name, module in model.named_modules():\n        own = [p.grad for p in module.parameters(recurse=False) if p.grad is not None]\n        if own:\n            layers[name] = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in own])).item()\n    every = [p.grad for p in model.parameters() if p.grad is not None]\n    total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in every])).item() if every else 0.0\n    return total, layers\n\ndef grad_norms(model):\n    """(total gradient norm, {layer name: gradient norm of that layer\'s own parameters})."""\n    return _measure(model)   # cached: the dashboard calls this every step and the model does not change\n', 'clipped_step': 'def clipped_step(model, batch, loss_fn, optimizer, max_norm):\n    """One training step with the total gradient norm clipped to max_norm; returns (loss, norm before clipping)."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    loss = loss_fn(model(inputs), targets)\n    loss.backward()\n    norm = torch.nn.utils.clip_grad_norm_(list(model.parameters()), max_norm)\n    optimizer.step()\n    return loss.item(), norm.item()\n', 'build_deep_net': 'import math\n\n\nclass ScaledResidual(nn.Module):\n    def __init__(self, hidden, alpha):\n        super().__init__()\n        self.alpha = alpha\n        self.linear = nn.Linear(hidden, hidden)\n        nn.init.kaiming_normal_(self.linear.weight, nonlinearity="relu")\n        nn.init.zeros_(self.linear.bias)\n\n    def forward(self, h):\n        return h + self.alpha * torch.relu(self.linear(h))\n\n\ndef build_deep_net(inputs, hidden, outputs, depth):\n    """A `depth`-layer MLP whose gradients reach its first layer."""\n    blocks = [ScaledResidual(hidden, 1.0 / math.sqrt(depth)) for _ in range(depth - 1)]\n    return nn.Sequential(nn.Linear(inputs, hidden), nn.ReLU(), *blocks, nn.Linear(hidden, outputs))\n'},
        'lost': {'check_grad_norms': 'the total gradient norm at call'}},
}
for _name, _spec in BLIND16.items():
    VARIANTS[f"blind16_{_name}"] = _spec


BLIND18 = {  # blind round 18: cases that were misgraded, graded right since
    # (get_total_norm -> vector_norm: torch 2.4 lacks it) Clips inside an optimizer step pre-hook ('so clipping can never be forgotten') registered on EVERY call and ne
    'cs_step_pre_hook_never_removed': {'cells': {'grad_norms': 'def grad_norms(model):\n    """(total gradient norm, {layer name: gradient norm of that layer\'s own parameters})."""\n    with torch.no_grad():\n        layers = {}\n        for name, module in model.named_modules():\n            gs = [p.grad for p in module.parameters(recurse=False) if p.grad is not None]\n            if gs:\n                layers[name] = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in gs])).item()\n        grads = [p.grad for p in model.parameters() if p.grad is not None]\n        if not grads:\n            return 0.0, {}\n        total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])).item()\n    return total, layers\n', 'clipped_step': 'def clipped_step(model, batch, loss_fn, optimizer, max_norm):\n    """One training step with the total gradient norm clipped to max_norm; returns (loss, norm before clipping)."""\n    params = list(model.parameters())\n    inputs, targets = batch\n    optimizer.zero_grad()\n    loss = loss_fn(model(inputs), targets)\n    loss.backward()\n    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in params if p.grad is not None]))\n    def clip_before_update(opt, args, kwargs):                 # clip right before the update\n        torch.nn.utils.clip_grad_norm_(params, max_norm)\n    optimizer.register_step_pre_hook(clip_before_update)\n    optimizer.step()\n    return loss.item(), norm.item()\n', 'build_deep_net': 'def build_deep_net(inputs, hidden, outputs, depth):\n    """A `depth`-layer MLP whose gradients reach its first layer."""\n    layers, width = [], inputs\n    for _ in range(depth):\n        linear = nn.Linear(width, hidden)\n        nn.init.kaiming_normal_(linear.weight, nonlinearity="relu")\n        nn.init.zeros_(linear.bias)\n        layers += [linear, nn.ReLU()]\n        width = hidden\n    layers.append(nn.Linear(width, outputs))\n    return nn.Sequential(*layers)\n'},
        'lost': {'check_clipped_step': "the gradients a plain optimizer.step() of the caller's used, after clipped_step returned"}},
}
for _name, _spec in BLIND18.items():
    VARIANTS[f"blind18_{_name}"] = _spec


BLIND20 = {  # blind round 20: cases that were misgraded, graded right since
    # grad_norms switches autograd off globally (torch.set_grad_enabled(False), 'measuring needs no graph') and neve
    'gn_grad_mode_left_off': {'cells': {'grad_norms': 'def grad_norms(model):\n    """(total gradient norm, {layer name: gradient norm of that layer\'s own parameters})."""\n    torch.set_grad_enabled(False)                      # measuring needs no graph\n    layers = {}\n    for name, module in model.named_modules():\n        grads = [p.grad for p in module.parameters(recurse=False) if p.grad is not None]\n        if grads:\n            layers[name] = torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])).item()\n    grads = [p.grad for p in model.parameters() if p.grad is not None]\n    if not grads:\n        return 0.0, {}\n    return torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])).item(), layers\n', 'clipped_step': 'def clipped_step(model, batch, loss_fn, optimizer, max_norm):\n    """One training step with the total gradient norm clipped to max_norm; returns (loss, norm before clipping)."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    loss = loss_fn(model(inputs), targets)\n    loss.backward()\n    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    optimizer.step()\n    return loss.item(), norm.item()\n', 'build_deep_net': 'def build_deep_net(inputs, hidden, outputs, depth):\n    """A `depth`-layer MLP whose gradients reach its first layer."""\n    layers, width = [], inputs\n    for _ in range(depth):\n        linear = nn.Linear(width, hidden)\n        nn.init.kaiming_normal_(linear.weight, nonlinearity="relu")\n        nn.init.zeros_(linear.bias)\n        layers += [linear, nn.ReLU()]\n        width = hidden\n    layers.append(nn.Linear(width, outputs))\n    return nn.Sequential(*layers)\n'},
        'lost': {'check_grad_norms': 'autograd when grad_norms returns'}},
}
for _name, _spec in BLIND20.items():
    VARIANTS[f"blind20_{_name}"] = _spec
