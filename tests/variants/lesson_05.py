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
        weight = getattr(module, "weight", None)
        if isinstance(weight, torch.nn.Parameter) and weight.grad is not None:
            layers[name] = weight.grad.norm().item()                 # biases forgotten
    total = torch.nn.utils.get_total_norm([p.grad for p in model.parameters() if p.grad is not None]).item()
    return total, layers'''

ALT_GRAD_NORMS = '''def grad_norms(model):
    by_layer = {}
    for full_name, p in model.named_parameters():
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
    "written_differently": {"cells": {"grad_norms": ALT_GRAD_NORMS, "clipped_step": ALT_CLIPPED_STEP,
                                      "build_deep_net": ALT_RESIDUAL}, "lost": {}},
    "batchnorm_fix": {"cells": {"build_deep_net": ALT_BATCHNORM}, "lost": {}},
}
