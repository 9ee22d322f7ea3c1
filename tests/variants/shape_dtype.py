"""Lesson 02 (shape and dtype errors): plausible wrong fixes and correct fixes written differently."""

NO_CHANNEL_DIM = '''def prepare_batch(images, labels):
    return images.float(), labels.long()          # forgot the channel dimension'''

LABELS_INT32 = '''def prepare_batch(images, labels):
    return images.unsqueeze(1).float(), labels.int()   # int32: not what CrossEntropyLoss takes'''

LINEAR_BEFORE_POOL = '''def build_model(size=12, classes=3):
    return nn.Sequential(
        nn.Conv2d(1, 8, kernel_size=3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(8 * size * size, classes),       # sized as if there were no pooling
    )'''

HARDCODED_SIZE = '''def build_model(size=12, classes=3):
    return nn.Sequential(
        nn.Conv2d(1, 8, kernel_size=3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(288, classes),                  # right for 12x12 only
    )'''

MODEL_DOUBLE = '''def build_model(size=12, classes=3):
    return nn.Sequential(
        nn.Conv2d(1, 8, kernel_size=3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(8 * (size // 2) ** 2, classes),
    ).double()                                                  # "fixes" Double vs Float on the wrong side'''

MSE_BROADCAST = '''def regression_loss(pred, target):
    return F.mse_loss(pred, target.float())       # (N, 1) against (N,)'''

MSE_BY_HAND = '''def regression_loss(pred, target):
    return ((pred - target.float()) ** 2).mean()  # broadcasts silently, no warning'''

MSE_FLOAT64 = '''def regression_loss(pred, target):
    return F.mse_loss(pred.squeeze(1), target)    # shapes fixed, dtype not: a float64 loss'''

ALT_PREPARE = '''def prepare_batch(images, labels):
    inputs = images[:, None, :, :].to(torch.float32)
    targets = labels.to(torch.int64)
    return inputs, targets'''

ALT_MODEL = '''class Net(nn.Module):
    def __init__(self, size, classes):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        with torch.no_grad():                       # measure what reaches the head
            n = self.features(torch.zeros(1, 1, size, size)).numel()
        self.head = nn.Linear(n, classes)

    def forward(self, x):
        return self.head(self.features(x).flatten(start_dim=1))

def build_model(size=12, classes=3):
    return Net(size, classes)'''

ALT_LOSS = '''def regression_loss(pred, target):
    target = target.to(pred.dtype).reshape(pred.shape)   # (N,) -> (N, 1), float32
    return ((pred - target) ** 2).mean()'''


LABELS_SQUEEZE = '''def prepare_batch(images, labels):
    return images.unsqueeze(1).float(), labels.squeeze().long()   # a batch of one becomes a 0-d tensor'''

NO_POOL_RESIZED = '''def build_model(size=12, classes=3):
    return nn.Sequential(                                        # the pool dropped, the Linear resized to match
        nn.Conv2d(1, 8, kernel_size=3, padding=1), nn.ReLU(),
        nn.Flatten(), nn.Linear(8 * size * size, classes),
    )'''

LOSS_FLOAT64_INSIDE = '''def regression_loss(pred, target):
    return ((pred.squeeze(1) - target) ** 2).mean().float()      # right value, computed in float64, cast back'''

SHAPES = "cannot be multiplied"

VARIANTS = {
    "no_channel_dim": {"cells": {"prepare_batch": NO_CHANNEL_DIM}, "lost": {"check_prepare_batch": "channels instead"}},
    "labels_int32": {"cells": {"prepare_batch": LABELS_INT32},  # torch words the error by version: not asserted
                     "lost": {"check_prepare_batch": "labels dtype: expected torch.int64"}},
    "labels_squeeze": {"cells": {"prepare_batch": LABELS_SQUEEZE},
                       "lost": {"check_prepare_batch": "which is what .squeeze() does to a batch of one"}},
    "no_pool_resized": {"cells": {"build_model": NO_POOL_RESIZED},
                        "lost": {"check_build_model": "the feature maps reach it at full size"}},
    "loss_float64_inside": {"cells": {"regression_loss": LOSS_FLOAT64_INSIDE},
                            "lost": {"check_regression_loss": "float32 data computed in float64"}},
    "linear_before_pool": {"cells": {"build_model": LINEAR_BEFORE_POOL}, "lost": {"check_build_model": SHAPES}},
    "hardcoded_size": {"cells": {"build_model": HARDCODED_SIZE}, "lost": {"check_build_model": SHAPES}},
    "model_double": {"cells": {"build_model": MODEL_DOUBLE}, "lost": {"check_build_model": "bias type (double)"}},
    "mse_broadcast": {"cells": {"regression_loss": MSE_BROADCAST}, "lost": {"check_regression_loss": "broadcast"}},
    "mse_by_hand": {"cells": {"regression_loss": MSE_BY_HAND}, "lost": {"check_regression_loss": "broadcast to"}},
    "mse_float64": {"cells": {"regression_loss": MSE_FLOAT64}, "lost": {"check_regression_loss": "torch.float64"}},
    "written_differently": {
        "cells": {"prepare_batch": ALT_PREPARE, "build_model": ALT_MODEL, "regression_loss": ALT_LOSS}, "lost": {}},
}

# ---- blind round 1 (written from the release notebook alone, checks unseen): the cases it found, and a few
# of its correct fixes in other idioms

BLIND_PREPARE_ASSUMES_SQUARE = '''def prepare_batch(images, labels):
    """float64 (N, H, W) images and float64 (N,) labels -> float32 (N, 1, H, W) inputs and int64 (N,) targets."""
    size = images.shape[1]
    return images.reshape(-1, 1, size, size).float(), labels.long()'''

VARIANTS["blind_prepare_assumes_square"] = {"cells": {'prepare_batch': BLIND_PREPARE_ASSUMES_SQUARE}, "lost": {'check_prepare_batch': 'is invalid for input of size'}}

BLIND_PREPARE_BYTE_LABELS = '''def prepare_batch(images, labels):
    """float64 (N, H, W) images and float64 (N,) labels -> float32 (N, 1, H, W) inputs and int64 (N,) targets."""
    return images.unsqueeze(1).float(), labels.byte()'''

VARIANTS["blind_prepare_byte_labels"] = {"cells": {'prepare_batch': BLIND_PREPARE_BYTE_LABELS}, "lost": {'check_prepare_batch': 'observed torch.uint8'}}

BLIND_MODEL_SOFTMAX_HEAD = '''def build_model(size=12, classes=3):
    """A small CNN: (N, 1, size, size) float32 images -> (N, classes) logits."""
    return nn.Sequential(
        nn.Conv2d(1, 8, kernel_size=3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(8 * (size // 2) ** 2, classes),
        nn.Softmax(dim=1),
    )'''

VARIANTS["blind_model_softmax_head"] = {"cells": {'build_model': BLIND_MODEL_SOFTMAX_HEAD}, "lost": {'check_build_model': 'followed by a softmax'}}

BLIND_MODEL_MISSING_RELU = '''def build_model(size=12, classes=3):
    """A small CNN: (N, 1, size, size) float32 images -> (N, classes) logits."""
    return nn.Sequential(
        nn.Conv2d(1, 8, kernel_size=3, padding=1),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(8 * (size // 2) ** 2, classes),
    )'''

VARIANTS["blind_model_missing_relu"] = {"cells": {'build_model': BLIND_MODEL_MISSING_RELU}, "lost": {'check_build_model': 'without the ReLU'}}

BLIND_MODEL_NO_PADDING = '''def build_model(size=12, classes=3):
    """A small CNN: (N, 1, size, size) float32 images -> (N, classes) logits."""
    return nn.Sequential(
        nn.Conv2d(1, 8, kernel_size=3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(8 * ((size - 2) // 2) ** 2, classes),
    )'''

VARIANTS["blind_model_no_padding"] = {"cells": {'build_model': BLIND_MODEL_NO_PADDING}, "lost": {'check_build_model': 'observed parameter shapes'}}

BLIND_REG_COMPUTED_IN_DOUBLE = '''def regression_loss(pred, target):
    """MSE of pred (N, 1) float32 against target (N,) float64, as a float32 scalar."""
    return F.mse_loss(pred.squeeze(1).double(), target).float()'''

VARIANTS["blind_reg_computed_in_double"] = {"cells": {'regression_loss': BLIND_REG_COMPUTED_IN_DOUBLE}, "lost": {'check_regression_loss': 'computed in float64'}}

BLIND_REG_RMSE = '''def regression_loss(pred, target):
    """MSE of pred (N, 1) float32 against target (N,) float64, as a float32 scalar."""
    return torch.sqrt(F.mse_loss(pred.squeeze(1), target.float()))'''

VARIANTS["blind_reg_rmse"] = {"cells": {'regression_loss': BLIND_REG_RMSE}, "lost": {'check_regression_loss': 'the square root of the MSE'}}

BLIND_REG_SUM_REDUCTION = '''def regression_loss(pred, target):
    """MSE of pred (N, 1) float32 against target (N,) float64, as a float32 scalar."""
    return F.mse_loss(pred.squeeze(1), target.float(), reduction="sum")'''

VARIANTS["blind_reg_sum_reduction"] = {"cells": {'regression_loss': BLIND_REG_SUM_REDUCTION}, "lost": {'check_regression_loss': 'the sum over the batch'}}

BLIND_PREPARE_VIEW_LAST_TWO_DIMS = '''def prepare_batch(images, labels):
    """float64 (N, H, W) images and float64 (N,) labels -> float32 (N, 1, H, W) inputs and int64 (N,) targets."""
    inputs = images.contiguous().view(-1, 1, *images.shape[-2:]).to(torch.float32)
    targets = labels.view(-1).to(torch.int64)
    return inputs, targets'''

VARIANTS["blind_prepare_view_last_two_dims"] = {"cells": {'prepare_batch': BLIND_PREPARE_VIEW_LAST_TWO_DIMS}, "lost": {}}

BLIND_MODEL_FUNCTIONAL_FORWARD = '''class SmallCNN(nn.Module):
    def __init__(self, size, classes):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, kernel_size=3, padding=1)
        self.fc = nn.Linear(8 * (size // 2) ** 2, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv(x)), 2)
        return self.fc(torch.flatten(x, 1))


def build_model(size=12, classes=3):
    """A small CNN: (N, 1, size, size) float32 images -> (N, classes) logits."""
    return SmallCNN(size, classes)'''

VARIANTS["blind_model_functional_forward"] = {"cells": {'build_model': BLIND_MODEL_FUNCTIONAL_FORWARD}, "lost": {}}

BLIND_MODEL_LAZY_LINEAR_MATERIALISED = '''def build_model(size=12, classes=3):
    """A small CNN: (N, 1, size, size) float32 images -> (N, classes) logits."""
    model = nn.Sequential(
        nn.Conv2d(1, 8, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.LazyLinear(classes),
    )
    model(torch.zeros(2, 1, size, size))
    return model'''

VARIANTS["blind_model_lazy_linear_materialised"] = {"cells": {'build_model': BLIND_MODEL_LAZY_LINEAR_MATERIALISED}, "lost": {}}

BLIND_MODEL_BLITZ_NUM_FLAT_FEATURES = '''class Net(nn.Module):
    def __init__(self, size, classes):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 8, kernel_size=3, padding=1)
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(2)
        self.fc1 = nn.Linear(8 * (size // 2) * (size // 2), classes)

    def forward(self, x):
        x = self.pool(self.relu(self.conv1(x)))
        x = x.view(-1, self.num_flat_features(x))
        x = self.fc1(x)
        return x

    def num_flat_features(self, x):
        size = x.size()[1:]  # all dimensions except the batch dimension
        num_features = 1
        for s in size:
            num_features *= s
        return num_features


def build_model(size=12, classes=3):
    """A small CNN: (N, 1, size, size) float32 images -> (N, classes) logits."""
    return Net(size, classes)'''

VARIANTS["blind_model_blitz_num_flat_features"] = {"cells": {'build_model': BLIND_MODEL_BLITZ_NUM_FLAT_FEATURES}, "lost": {}}

BLIND_REG_TYPE_AS_SQUARE = '''def regression_loss(pred, target):
    """MSE of pred (N, 1) float32 against target (N,) float64, as a float32 scalar."""
    return torch.mean(torch.square(pred[:, 0] - target.type_as(pred)))'''

VARIANTS["blind_reg_type_as_square"] = {"cells": {'regression_loss': BLIND_REG_TYPE_AS_SQUARE}, "lost": {}}

BLIND_REG_SUM_OVER_NUMEL = '''def regression_loss(pred, target):
    """MSE of pred (N, 1) float32 against target (N,) float64, as a float32 scalar."""
    diff = pred.reshape(-1) - target.to(torch.float32)
    return diff.pow(2).sum() / diff.numel()'''

VARIANTS["blind_reg_sum_over_numel"] = {"cells": {'regression_loss': BLIND_REG_SUM_OVER_NUMEL}, "lost": {}}

# Blind round 2: the cases it misgraded (now fixed in the checks), and a case whose hint misled.
BLIND2 = {
    "prepare_returns_list": ('prepare_batch', '''def prepare_batch(images, labels):
    """float64 (N, H, W) images and float64 (N,) labels -> float32 (N, 1, H, W) inputs and int64 (N,) targets."""
    return [images.unsqueeze(1).float(), labels.long()]''', {"check_prepare_batch": "expected the tuple (inputs, targets)"}),
    "prepare_inplace_unsqueeze": ('prepare_batch', '''def prepare_batch(images, labels):
    """float64 (N, H, W) images and float64 (N,) labels -> float32 (N, 1, H, W) inputs and int64 (N,) targets."""
    images.unsqueeze_(1)
    return images.float(), labels.long()''', {"check_prepare_batch": "the images tensor passed to prepare_batch, after the call"}),
    "model_dropout_before_head": ('build_model', '''def build_model(size=12, classes=3):
    """A small CNN: (N, 1, size, size) float32 images -> (N, classes) logits."""
    return nn.Sequential(
        nn.Conv2d(1, 8, kernel_size=3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Dropout(0.25), nn.Linear(8 * (size // 2) ** 2, classes),
    )''', {"check_build_model": "the model holds Dropout"}),
    "reg_unsqueeze_inplace_target": ('regression_loss', '''def regression_loss(pred, target):
    """MSE of pred (N, 1) float32 against target (N,) float64, as a float32 scalar."""
    target.unsqueeze_(1)                      # (N,) -> (N, 1), like pred
    return F.mse_loss(pred, target.float())''', {"check_regression_loss": "the target tensor passed to regression_loss, after the call"}),
    # the hint said "average over the batch", which it did: the mean kept a dimension of size 1
    "reg_mean_dim0_shape1": ('regression_loss', '''def regression_loss(pred, target):
    """MSE of pred (N, 1) float32 against target (N,) float64, as a float32 scalar."""
    return ((pred - target.float().unsqueeze(1)) ** 2).mean(dim=0)''', {"check_regression_loss": "reduce over every dimension"}),
}
for _name, (_cell, _source, _lost) in BLIND2.items():
    VARIANTS[f"blind2_{_name}"] = {"cells": {_cell: _source}, "lost": _lost}

# Blind round 3: the case it misgraded (now fixed in the check), and a case whose message misled.
BLIND3 = {
    # the check's images were all in [0, 1), so a clamp to [0, 1] changed nothing; the lesson's own reach 1.5
    "prepare_clamps_pixels": ('prepare_batch', '''def prepare_batch(images, labels):
    """float64 (N, H, W) images and float64 (N,) labels -> float32 (N, 1, H, W) inputs and int64 (N,) targets."""
    inputs = images.clamp(0.0, 1.0).float().unsqueeze(1)
    return inputs, labels.long()''', {"check_prepare_batch": "images values: expected unchanged (only dtype and shape change), observed values that differ by up to"}),
    # the message said "a different gradient": no gradient reached pred at all (a view made under no_grad)
    "reg_shape_fix_under_no_grad": ('regression_loss', '''def regression_loss(pred, target):
    """MSE of pred (N, 1) float32 against target (N,) float64, as a float32 scalar."""
    with torch.no_grad():                  # only reshaping and casting here, no need for gradients
        p = pred.squeeze(1)
        t = target.float()
    return F.mse_loss(p, t)''', {"check_regression_loss": "observed none: loss.backward() ran but no gradient reached pred"}),
}
for _name, (_cell, _source, _lost) in BLIND3.items():
    VARIANTS[f"blind3_{_name}"] = {"cells": {_cell: _source}, "lost": _lost}

# Blind round 4: the case it misgraded (now fixed in the check).
BLIND4 = {
    # ReLU6 equals ReLU on the small activations of images in [0, 1]: the check now also feeds a wide range
    "model_relu6": ('build_model', '''def build_model(size=12, classes=3):
    """A small CNN: (N, 1, size, size) float32 images -> (N, classes) logits."""
    return nn.Sequential(
        nn.Conv2d(1, 8, kernel_size=3, padding=1),
        nn.ReLU6(),                          # a bounded ReLU, as in MobileNet
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(8 * (size // 2) ** 2, classes),
    )''', {"check_build_model": "with ReLU6 (activations clipped at 6) instead of ReLU"}),
}
for _name, (_cell, _source, _lost) in BLIND4.items():
    VARIANTS[f"blind4_{_name}"] = {"cells": {_cell: _source}, "lost": _lost}

# blind round 5
BLIND5 = {
    # misgraded: the Linear is created in the first forward, so the returned model's parameters() lack it
    'model_linear_created_in_forward': ('build_model', '''class Net(nn.Module):
    def __init__(self, classes):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, kernel_size=3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.classes = classes
        self.fc = None                          # sized on the first batch: whatever really reaches it

    def forward(self, x):
        x = self.pool(torch.relu(self.conv(x))).flatten(1)
        if self.fc is None:
            self.fc = nn.Linear(x.shape[1], self.classes)
        return self.fc(x)


def build_model(size=12, classes=3):
    """A small CNN: (N, 1, size, size) float32 images -> (N, classes) logits."""
    return Net(classes)''', {'check_build_model': 'appeared only during the first forward: fc.weight (3, 288)'}),
    # graded right but its hint blamed a reshape: it standardises with the batch's mean and std
    'model_standardises_batch_in_forward': ('build_model', '''class Net(nn.Module):
    def __init__(self, size, classes):
        super().__init__()
        self.conv = nn.Conv2d(1, 8, kernel_size=3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(8 * (size // 2) * (size // 2), classes)

    def forward(self, x):
        x = (x - x.mean()) / (x.std() + 1e-6)   # normalise the inputs, whatever their scale
        x = self.pool(torch.relu(self.conv(x)))
        return self.fc(x.flatten(1))


def build_model(size=12, classes=3):
    """A small CNN: (N, 1, size, size) float32 images -> (N, classes) logits."""
    return Net(size, classes)''', {'check_build_model': 'a statistic of the whole batch'}),
}
for _name, (_cell, _source, _lost) in BLIND5.items():
    VARIANTS[f"blind5_{_name}"] = {"cells": {_cell: _source}, "lost": _lost}

BLIND6 = {  # blind round 6: cases that were misgraded, graded right since
    # the inputs get torch's global default dtype, float32 only while nobody changed it: after torch.set_default_dty
    'prepare_default_dtype': {'cells': {'prepare_batch': 'def prepare_batch(images, labels):\n    """float64 (N, H, W) images and float64 (N,) labels -> float32 (N, 1, H, W) inputs and int64 (N,) targets."""\n    inputs = images.to(torch.get_default_dtype()).unsqueeze(1)      # the dtype new model weights get\n    targets = labels.to(torch.int64)\n    return inputs, targets\n'},
        'lost': {'check_prepare_batch': "images dtype (the caller's default dtype set to float64)"}},
    # every returned inputs tensor is a view of one shared buffer: the next call overwrites the values of batches al
    'prepare_reused_module_buffer': {'cells': {'prepare_batch': '_buffer = torch.empty(0)\n\n\ndef prepare_batch(images, labels):\n    """float64 (N, H, W) images and float64 (N,) labels -> float32 (N, 1, H, W) inputs and int64 (N,) targets."""\n    global _buffer\n    n, h, w = images.shape\n    if _buffer.numel() < n * h * w:\n        _buffer = torch.empty(n * h * w, dtype=torch.float32)      # grown once, then reused: no allocation per batch\n    inputs = _buffer[: n * h * w].view(n, 1, h, w)\n    inputs.copy_(images.unsqueeze(1))\n    return inputs, labels.long()\n'},
        'lost': {'check_prepare_batch': "the first call's (inputs, targets) after a second call of prepare_batch"}},
    # the conv is created once, when the cell runs, and shared by every model build_model returns: two models share 
    'model_module_level_conv': {'cells': {'build_model': '_conv = nn.Conv2d(1, 8, kernel_size=3, padding=1)     # the feature extractor: the same for every size\n\n\ndef build_model(size=12, classes=3):\n    """A small CNN: (N, 1, size, size) float32 images -> (N, classes) logits."""\n    return nn.Sequential(_conv, nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * (size // 2) ** 2, classes))\n'},
        'lost': {'check_build_model': 'two models from two calls of build_model'}},
}
for _name, _spec in BLIND6.items():
    VARIANTS[f"blind6_{_name}"] = _spec

BLIND8 = {  # blind round 8: cases that were misgraded, graded right since
    # an image with an odd height or width gets an extra row/column of zeros: the inputs are (N, 1, H+1, W) or (N, 1
    'prepare_pads_odd_sides': {'cells': {'prepare_batch': 'def prepare_batch(images, labels):\n    """float64 (N, H, W) images and float64 (N,) labels -> float32 (N, 1, H, W) inputs and int64 (N,) targets."""\n    inputs = images.float().unsqueeze(1)\n    h, w = inputs.shape[-2:]\n    # the CNN wants an even size (MaxPool2d(2)): pad one row / column of zeros when a side is odd\n    inputs = F.pad(inputs, (0, w % 2, 0, h % 2))\n    return inputs, labels.long()\n'},
        'lost': {'check_prepare_batch': 'images shape for a batch of 5 images 15x10'}},
    # the value is the real MSE, but it is computed by broadcasting (N, 1) against (N,) into an (N, N) table (N^2 me
    'reg_diagonal_of_broadcast_table': {'cells': {'regression_loss': 'def regression_loss(pred, target):\n    """MSE of pred (N, 1) float32 against target (N,) float64, as a float32 scalar."""\n    table = (pred - target.float()) ** 2       # (N, N): every prediction against every target\n    return table.diagonal().mean()             # keep prediction i against target i only\n'},
        'lost': {'check_regression_loss': 'the operations inside regression_loss (batch of 6)'}},
}
for _name, _spec in BLIND8.items():
    VARIANTS[f"blind8_{_name}"] = _spec

BLIND9 = {  # blind round 9: cases that were misgraded, graded right since
    # for a batch of one pred.squeeze() is 0-d and mse_loss broadcasts () against (1,) (with PyTorch's 'different to
    'reg_squeeze_all_dims': {'cells': {'regression_loss': 'def regression_loss(pred, target):\n    """MSE of pred (N, 1) float32 against target (N,) float64, as a float32 scalar."""\n    return F.mse_loss(pred.squeeze(), target.float())\n'},
        'lost': {'check_regression_loss': 'observed squeeze((1, 1)) -> (), a 0-d tensor without the batch dimension'}},
    # written by hand, the same class without PyTorch's warning: pred.squeeze() is 0-d on a batch of one and the
    # subtraction broadcasts it against the (1,) target (value right only because the batch holds one sample)
    'reg_squeeze_all_dims_by_hand': {'cells': {'regression_loss': 'def regression_loss(pred, target):\n    """MSE of pred (N, 1) float32 against target (N,) float64, as a float32 scalar."""\n    return (pred.squeeze() - target.float()).pow(2).mean()\n'},
        'lost': {'check_regression_loss': 'then sub((), (1,)) -> (1,), broadcast back'}},
}
for _name, _spec in BLIND9.items():
    VARIANTS[f"blind9_{_name}"] = _spec

BLIND14 = {  # blind round 14: cases that were misgraded, graded right since
    # Dodges 'the check watches every operation' by casting in NumPy. Right on the CPU, but section 5 trains this lo
    'loss_target_via_numpy': {'cells': {'prepare_batch': 'def prepare_batch(images, labels):\n    """float64 (N, H, W) images and float64 (N,) labels -> float32 (N, 1, H, W) inputs and int64 (N,) targets."""\n    return images.unsqueeze(1).float(), labels.long()\n', 'build_model': 'def build_model(size=12, classes=3):\n    """A small CNN: (N, 1, size, size) float32 images -> (N, classes) logits."""\n    return nn.Sequential(nn.Conv2d(1, 8, kernel_size=3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),\n                         nn.Linear(8 * (size // 2) ** 2, classes))\n', 'regression_loss': 'import numpy as np\n\n\ndef regression_loss(pred, target):\n    """MSE of pred (N, 1) float32 against target (N,) float64, as a float32 scalar."""\n    t = torch.from_numpy(target.numpy().astype(np.float32))    # cast in NumPy: torch never sees a float64 op\n    return F.mse_loss(pred[:, 0], t)\n'},
        'lost': {'check_regression_loss': 'd TypeError: (simulated cuda'}},
}
for _name, _spec in BLIND14.items():
    VARIANTS[f"blind14_{_name}"] = _spec
BLIND16 = {  # blind round 16: cases that were misgraded, graded right since
    # Memoises by id(): Python reuses the id of a freed tensor for the next one, so a new batch often gets an OLD ba
    'id_keyed_cache': {'cells': {'prepare_batch': '_converted = {}\n\ndef prepare_batch(images, labels):\n    """float64 (N, H, W) images and float64 (N,) labels -> float32 (N, 1, H, W) inputs and int64 (N,) targets."""\n    # each epoch revisits the same batches: convert each batch only once\n    key = (id(images), id(labels))\n    if key not in _converted:\n        _converted[key] = (images.unsqueeze(1).float(), labels.long())\n    return _converted[key]\n', 'build_model': 'def build_model(size=12, classes=3):\n    """A small CNN: (N, 1, size, size) float32 images -> (N, classes) logits."""\n    from torch import nn\n    return nn.Sequential(\n        nn.Conv2d(1, 8, kernel_size=3, padding=1),\n        nn.ReLU(),\n        nn.MaxPool2d(2),\n        nn.Flatten(),\n        nn.Linear(8 * (size // 2) * (size // 2), classes),\n    )\n', 'regression_loss': 'def regression_loss(pred, target):\n    """MSE of pred (N, 1) float32 against target (N,) float64, as a float32 scalar."""\n    from torch.nn import functional as F\n    return F.mse_loss(pred.squeeze(1), target.to(pred.dtype))\n'},
        'lost': {'check_prepare_batch': "an earlier call's batch"}},
}
for _name, _spec in BLIND16.items():
    VARIANTS[f"blind16_{_name}"] = _spec


BLIND18 = {  # blind round 18: cases that were misgraded, graded right since
    # SLIGHTLY AMBIGUOUS, verdict False: casts the targets to torch's DEFAULT dtype instead of pred's. Right when th
    'rl_default_dtype_target': {'cells': {'prepare_batch': 'def prepare_batch(images, labels):\n    """float64 (N, H, W) images and float64 (N,) labels -> float32 (N, 1, H, W) inputs and int64 (N,) targets."""\n    return images.unsqueeze(1).float(), labels.long()\n', 'build_model': 'def build_model(size=12, classes=3):\n    """A small CNN: (N, 1, size, size) float32 images -> (N, classes) logits."""\n    return nn.Sequential(\n        nn.Conv2d(1, 8, kernel_size=3, padding=1), nn.ReLU(), nn.MaxPool2d(2),\n        nn.Flatten(), nn.Linear(8 * (size // 2) ** 2, classes))\n', 'regression_loss': 'def regression_loss(pred, target):\n    """MSE of pred (N, 1) float32 against target (N,) float64, as a float32 scalar."""\n    target = target.to(torch.get_default_dtype())      # \'the float dtype\' (float32)\n    return F.mse_loss(pred.squeeze(1), target)\n'},
        'lost': {'check_regression_loss': 'the loss dtype for a caller that had set torch.set_default_dtype(torch.float64) (pred float32)'}},
}
for _name, _spec in BLIND18.items():
    VARIANTS[f"blind18_{_name}"] = _spec


BLIND20 = {  # blind round 20: cases that were misgraded, graded right since
    # nanmean 'to skip missing targets': exactly the MSE (float32, no broadcast, N=1 fine) while no value is NaN, bu
    'rl_nanmean_skips_missing': {'cells': {'prepare_batch': 'def prepare_batch(images, labels):\n    """float64 (N, H, W) images and float64 (N,) labels -> float32 (N, 1, H, W) inputs and int64 (N,) targets."""\n    return images.unsqueeze(1).float(), labels.long()\n', 'build_model': 'from torch import nn\ndef build_model(size=12, classes=3):\n    """A small CNN: (N, 1, size, size) float32 images -> (N, classes) logits."""\n    return nn.Sequential(\n        nn.Conv2d(1, 8, kernel_size=3, padding=1), nn.ReLU(), nn.MaxPool2d(2),\n        nn.Flatten(), nn.Linear(8 * (size // 2) ** 2, classes))\n', 'regression_loss': 'def regression_loss(pred, target):\n    """MSE of pred (N, 1) float32 against target (N,) float64, as a float32 scalar."""\n    err = (pred.squeeze(1) - target.to(pred.dtype)) ** 2\n    return torch.nanmean(err)          # a missing target (NaN) must not poison the batch\n'},
        'lost': {'check_regression_loss': 'the loss on a batch of'}},
}
for _name, _spec in BLIND20.items():
    VARIANTS[f"blind20_{_name}"] = _spec
