"""Lesson 06 (missing eval / no_grad): plausible wrong fixes and correct fixes written differently."""

EVAL_WITHOUT_NO_GRAD = '''def evaluate(model, loader):
    was_training = model.training
    device = next(model.parameters()).device
    model.eval()                               # eval mode... but autograd still records every batch
    correct = total = 0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        correct += (model(x).argmax(dim=1) == y).sum().item()
        total += y.numel()
    model.train(was_training)
    return correct / total'''

NO_GRAD_WITHOUT_EVAL = '''def evaluate(model, loader):
    device = next(model.parameters()).device
    correct = total = 0
    with torch.no_grad():                      # autograd off... but Dropout and BatchNorm still in training mode
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            correct += (model(x).argmax(dim=1) == y).sum().item()
            total += y.numel()
    return correct / total'''

NOT_RESTORED = '''def evaluate(model, loader):
    device = next(model.parameters()).device
    model.eval()                               # ...and never switched back
    correct = total = 0
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            correct += (model(x).argmax(dim=1) == y).sum().item()
            total += y.numel()
    return correct / total'''

ALWAYS_TRAIN = '''def evaluate(model, loader):
    device = next(model.parameters()).device
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            correct += (model(x).argmax(dim=1) == y).sum().item()
            total += y.numel()
    model.train()                              # even when the model was in eval mode before
    return correct / total'''

MEAN_OF_BATCH_ACCURACIES = '''def evaluate(model, loader):
    was_training = model.training
    device = next(model.parameters()).device
    model.eval()
    accs = []
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            accs.append((model(x).argmax(dim=1) == y).float().mean().item())
    model.train(was_training)
    return sum(accs) / len(accs)               # a short last batch weighs as much as a full one'''

TRAIN_EPOCH_NO_TRAIN = '''def train_epoch(model, loader, optimizer):
    device = next(model.parameters()).device    # no model.train(): stays in eval mode after evaluate()
    losses = []
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return sum(losses) / len(losses)'''

ALT_EVALUATE = '''@torch.inference_mode()
def evaluate(model, loader):
    mode = model.training
    model.eval()
    try:
        device = next(model.parameters()).device
        hits, seen = torch.zeros((), dtype=torch.long), 0
        for inputs, labels in loader:
            preds = model(inputs.to(device)).argmax(-1).cpu()
            hits += (preds == labels).sum()
            seen += len(labels)
        return hits.item() / seen
    finally:
        model.train(mode)'''

ALT_TRAIN_EPOCH = '''def train_epoch(model, loader, optimizer):
    model.train(True)
    device = next(model.parameters()).device
    total, batches = 0.0, 0
    loss_fn = nn.CrossEntropyLoss()
    for inputs, labels in loader:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(inputs.to(device)), labels.to(device))
        loss.backward()
        optimizer.step()
        total += float(loss.detach())
        batches += 1
    return total / batches'''

ALT_TRAIN_EPOCH_IMPORT = "from torch import nn\n" + ALT_TRAIN_EPOCH

EVAL_A_COPY = '''import copy

def evaluate(model, loader):
    frozen = copy.deepcopy(model).eval()   # the model itself is never switched: nothing to restore
    device = next(frozen.parameters()).device
    correct = total = 0
    with torch.no_grad():
        for x, y in loader:
            correct += (frozen(x.to(device)).argmax(dim=1).cpu() == y).sum().item()
            total += y.numel()
    return correct / total'''

VARIANTS = {
    "eval_without_no_grad": {"cells": {"evaluate": EVAL_WITHOUT_NO_GRAD},
                             "lost": {"check_evaluate_no_grad": "autograd recording a graph"}},
    "no_grad_without_eval": {"cells": {"evaluate": NO_GRAD_WITHOUT_EVAL},
                             "lost": {"check_evaluate_eval": "two evaluations of the same data"}},
    "mode_not_restored": {"cells": {"evaluate": NOT_RESTORED},
                          "lost": {"check_evaluate_restores": "on a model in train mode: expected train, observed eval"}},
    "always_train_after": {"cells": {"evaluate": ALWAYS_TRAIN},
                           "lost": {"check_evaluate_restores": "on a model in eval mode: expected eval, observed train"}},
    "mean_of_batch_accuracies": {"cells": {"evaluate": MEAN_OF_BATCH_ACCURACIES},
                                 "lost": {"check_evaluate_eval": "the accuracy returned"}},
    "train_epoch_never_trains": {"cells": {"train_epoch": TRAIN_EPOCH_NO_TRAIN},
                                 "lost": {"check_train_epoch": "call model.train() at the start of every epoch"}},
    "written_differently": {"cells": {"evaluate": ALT_EVALUATE, "train_epoch": ALT_TRAIN_EPOCH_IMPORT}, "lost": {}},
    "evaluates_a_copy": {"cells": {"evaluate": EVAL_A_COPY}, "lost": {}},
}
