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

SHAPES = "cannot be multiplied"

VARIANTS = {
    "no_channel_dim": {"cells": {"prepare_batch": NO_CHANNEL_DIM}, "lost": {"check_prepare_batch": "channels instead"}},
    "labels_int32": {"cells": {"prepare_batch": LABELS_INT32},
                     "lost": {"check_prepare_batch": "expected target dtype to be Long or Byte, but got Int"}},
    "linear_before_pool": {"cells": {"build_model": LINEAR_BEFORE_POOL}, "lost": {"check_build_model": SHAPES}},
    "hardcoded_size": {"cells": {"build_model": HARDCODED_SIZE}, "lost": {"check_build_model": SHAPES}},
    "model_double": {"cells": {"build_model": MODEL_DOUBLE}, "lost": {"check_build_model": "bias type (double)"}},
    "mse_broadcast": {"cells": {"regression_loss": MSE_BROADCAST}, "lost": {"check_regression_loss": "broadcast"}},
    "mse_by_hand": {"cells": {"regression_loss": MSE_BY_HAND}, "lost": {"check_regression_loss": "broadcast to"}},
    "mse_float64": {"cells": {"regression_loss": MSE_FLOAT64}, "lost": {"check_regression_loss": "torch.float64"}},
    "written_differently": {
        "cells": {"prepare_batch": ALT_PREPARE, "build_model": ALT_MODEL, "regression_loss": ALT_LOSS}, "lost": {}},
}
