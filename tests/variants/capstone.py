"""Lesson 12 (the capstone): each wrong piece loses exactly its own check, with the message (the pieces are graded
independently); a correct script written differently gets full marks; half the bugs fixed loses exactly the other
half. Format: tests/variants/__init__.py.

The pieces are the fixes of lessons 01, 02, 03, 04, 06 and 09, and so are most wrong fixes here: they are borrowed
from those lessons' variants (`borrowed`), with what they lose there, renamed to the capstone's check where lesson 06's
three checks of `evaluate` are one here. The rest are the script's pieces as found (the notebook's `*_as_found`)."""
import importlib.util
import pathlib


def _sibling(name):
    """A lesson's variants module, by its file (the grader loads this file by its path, outside the package)."""
    spec = importlib.util.spec_from_file_location(f"_capstone_{name}", pathlib.Path(__file__).with_name(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


device_mismatch, missing_eval, nan_loss, out_of_memory, reproducibility, shape_dtype = map(_sibling, (
    "device_mismatch", "missing_eval", "nan_loss", "out_of_memory", "reproducibility", "shape_dtype"))

CHECKS = {"check_to_device", "check_prepare_batch", "check_accumulated_grads", "check_stable_lr", "check_evaluate",
          "check_worker_init_fn"}


def borrowed(module, variant, cells=None):
    """A lesson's variant as a capstone variant: its capstone cells, and what it loses among the capstone's checks
    (lesson 06's check_evaluate_* are the capstone's check_evaluate)."""
    source = module.VARIANTS[variant]
    cells = {c: source["cells"][c] for c in (cells or source["cells"])}
    lost = {}
    for name, message in source["lost"].items():
        name = "check_evaluate" if name.startswith("check_evaluate_") else name
        if name in CHECKS:
            lost[name] = message
    return {"cells": cells, "lost": lost}


PREPARE_AS_FOUND = '''def prepare_batch(images, labels):
    return images.unsqueeze(1).float(), labels  # (N, 1, 8, 8) float32 images; the labels as they came
'''
TO_DEVICE_AS_FOUND = '''def to_device(batch, device):
    inputs, labels = batch
    return inputs.to(device), labels            # the labels stay where they are
'''
LR_AS_FOUND = "LR = 8.0\n"

VARIANTS = {
    # 3a, lesson 01: the script's as found (two items only, the labels left behind); a device argument ignored
    "to_device_as_found": {"cells": {"to_device": TO_DEVICE_AS_FOUND},
                           "lost": {"check_to_device": "raised ValueError: too many values to unpack"}},
    "to_device_ignores_its_device": borrowed(device_mismatch, "to_device_ignores_its_device"),
    # 3b, lesson 02: the labels as they came (float64, the script as found); no channel dimension
    "prepare_batch_as_found": {"cells": {"prepare_batch": PREPARE_AS_FOUND},
                               "lost": {"check_prepare_batch": "labels dtype: expected torch.int64"}},
    "prepare_batch_no_channel_dim": borrowed(shape_dtype, "no_channel_dim"),
    # 3c, lesson 03: each piece's loss not divided (the script as found); zero_grad inside the loop
    "accumulate_without_dividing": borrowed(out_of_memory, "no_divide"),
    "accumulate_zero_grad_inside_loop": borrowed(out_of_memory, "zero_grad_inside_loop"),
    # 3d, lesson 04: the rate as found; a rate too low to train in 60 steps
    "lr_as_found": {"cells": {"stable_lr": LR_AS_FOUND}, "lost": {"check_stable_lr": "this rate is too high"}},
    "lr_too_low": {"cells": {"stable_lr": "LR = 0.001\n"}, "lost": {"check_stable_lr": "too low to get there"}},
    # 3e, lesson 06: no_grad without eval; eval without no_grad
    "evaluate_no_grad_without_eval": borrowed(missing_eval, "no_grad_without_eval"),
    "evaluate_eval_without_no_grad": borrowed(missing_eval, "eval_without_no_grad"),
    # 3f, lesson 09: the global NumPy generator reseeded instead of the dataset's; a Generator seeded by worker id
    "workers_seed_global_numpy": borrowed(reproducibility, "worker_seeds_global_numpy"),
    "workers_seeded_by_worker_id": borrowed(reproducibility, "worker_rng_from_worker_id"),
    # every piece right, written differently (the lessons' own alternative fixes): full marks
    "written_differently": {"cells": {
        **borrowed(device_mismatch, "written_differently", ["to_device"])["cells"],
        **borrowed(shape_dtype, "written_differently", ["prepare_batch"])["cells"],
        **borrowed(out_of_memory, "written_differently", ["accumulate_step"])["cells"],
        **borrowed(nan_loss, "written_differently", ["stable_lr"])["cells"],
        **borrowed(missing_eval, "written_differently", ["evaluate"])["cells"],
        **borrowed(reproducibility, "written_differently", ["worker_init_fn"])["cells"]}, "lost": {}},
    # three bugs of six fixed (accumulation, validation, workers): exactly the other three checks lost
    "half_fixed": {"cells": {"to_device": TO_DEVICE_AS_FOUND, "prepare_batch": PREPARE_AS_FOUND,
                             "stable_lr": LR_AS_FOUND},
                   "lost": {"check_to_device": "too many values to unpack", "check_prepare_batch": "labels dtype: expected torch.int64",
                            "check_stable_lr": "this rate is too high"}},
}
