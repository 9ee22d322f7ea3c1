"""Lesson 08 (checkpoints across devices): plausible wrong fixes and correct fixes written differently.

Format: tests/variants/__init__.py. The first two wrong variants and the first correct one are the ones nbgrader
itself grades (tests/test_grading.py); the fork server grades them all.
"""

SAVE_RESUME = '''def save_checkpoint(path, model, optimizer, scheduler, loader, epoch, best_loss):
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    torch.save({
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "epoch": int(epoch),
        "best_loss": float(best_loss),
        "torch_rng": torch.get_rng_state(),
        "numpy_rng": {"kind": str(kind), "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                      "has_gauss": int(has_gauss), "cached": float(cached)},
        "data_order": loader.generator.get_state(),
    }, path)


def resume(path, model, optimizer, scheduler, loader):
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    scheduler.load_state_dict(ckpt["scheduler"])
    torch.set_rng_state(ckpt["torch_rng"])
    rng = ckpt["numpy_rng"]
    np.random.set_state((rng["kind"], rng["keys"].numpy().astype(np.uint32), rng["pos"], rng["has_gauss"], rng["cached"]))
    loader.generator.set_state(ckpt["data_order"])
    return ckpt["epoch"] + 1, ckpt["best_loss"]'''

LOAD_WEIGHTS = '''def load_weights(model, path):
    state = torch.load(path, map_location=next(model.parameters()).device, weights_only=True)
    stripped = True
    while stripped:
        stripped = False
        for prefix in ("module.", "_orig_mod."):
            if state and all(key.startswith(prefix) for key in state):
                state = {key[len(prefix):]: value for key, value in state.items()}
                stripped = True
    model.load_state_dict(state)
    return model'''

FIT = '''def fit(model, optimizer, scheduler, loader, evaluate, epochs, folder):
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    start, best = 0, float("inf")
    if (folder / "last.pt").exists():
        start, best = resume(folder / "last.pt", model, optimizer, scheduler, loader)
    for epoch in range(start, epochs):
        train_epoch(model, optimizer, loader)
        scheduler.step()
        loss = evaluate()
        if loss < best:
            best = loss
            save_checkpoint(folder / "best.pt", model, optimizer, scheduler, loader, epoch, best)
        save_checkpoint(folder / "last.pt", model, optimizer, scheduler, loader, epoch, best)
    return best'''


def edit(source, old, new):
    """The reference with one change (the variants name it)."""
    assert old in source, old
    return source.replace(old, new)


RAW_NUMPY = edit(edit(edit(SAVE_RESUME, '''    kind, keys, pos, has_gauss, cached = np.random.get_state()
''', ""), '''        "best_loss": float(best_loss),''', '''        "best_loss": best_loss,'''),
    '''        "numpy_rng": {"kind": str(kind), "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                      "has_gauss": int(has_gauss), "cached": float(cached)},''', '''        "numpy_rng": np.random.get_state(),   # a tuple holding an ndarray''')
RAW_NUMPY = edit(edit(RAW_NUMPY, 'weights_only=True)', 'weights_only=False)   # "it loads now"'),
                 '''    rng = ckpt["numpy_rng"]
    np.random.set_state((rng["kind"], rng["keys"].numpy().astype(np.uint32), rng["pos"], rng["has_gauss"], rng["cached"]))''',
                 '''    np.random.set_state(ckpt["numpy_rng"])''')

MODEL_AND_OPTIMIZER_ONLY = '''def save_checkpoint(path, model, optimizer, scheduler, loader, epoch, best_loss):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                "epoch": epoch, "best_loss": float(best_loss)}, path)


def resume(path, model, optimizer, scheduler, loader):
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    return ckpt["epoch"] + 1, ckpt["best_loss"]'''

NO_RNG = edit(edit(SAVE_RESUME, '''    torch.set_rng_state(ckpt["torch_rng"])
    rng = ckpt["numpy_rng"]
    np.random.set_state((rng["kind"], rng["keys"].numpy().astype(np.uint32), rng["pos"], rng["has_gauss"], rng["cached"]))
''', ""), '''        "torch_rng": torch.get_rng_state(),''', "")
NO_DATA_ORDER = edit(SAVE_RESUME, '''    loader.generator.set_state(ckpt["data_order"])
''', "")
TORCH_RNG_ONLY = edit(SAVE_RESUME, '''    rng = ckpt["numpy_rng"]
    np.random.set_state((rng["kind"], rng["keys"].numpy().astype(np.uint32), rng["pos"], rng["has_gauss"], rng["cached"]))
''', "")
SAVED_EPOCH = edit(SAVE_RESUME, 'return ckpt["epoch"] + 1, ckpt["best_loss"]', 'return ckpt["epoch"], ckpt["best_loss"]')
NEW_GENERATOR = edit(SAVE_RESUME, '''    loader.generator.set_state(ckpt["data_order"])''', '''    loader.generator = torch.Generator()       # a new generator object: the sampler keeps the old one
    loader.generator.set_state(ckpt["data_order"])''')
GLOBAL_CACHE = '''_CACHE = {}

def save_checkpoint(path, model, optimizer, scheduler, loader, epoch, best_loss):
    _CACHE["rng"] = (torch.get_rng_state(), np.random.get_state(), loader.generator.get_state())   # in memory: fast
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                "epoch": epoch, "best_loss": float(best_loss)}, path)


def resume(path, model, optimizer, scheduler, loader):
    ckpt = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(ckpt["model"])
    optimizer.load_state_dict(ckpt["optimizer"])
    scheduler.load_state_dict(ckpt["scheduler"])
    if "rng" in _CACHE:
        torch.set_rng_state(_CACHE["rng"][0]); np.random.set_state(_CACHE["rng"][1]); loader.generator.set_state(_CACHE["rng"][2])
    return ckpt["epoch"] + 1, ckpt["best_loss"]'''

NO_MAP_LOCATION = edit(LOAD_WEIGHTS, "torch.load(path, map_location=next(model.parameters()).device, weights_only=True)",
                       "torch.load(path, weights_only=True)")
MAP_CUDA0_ONLY = edit(LOAD_WEIGHTS, "map_location=next(model.parameters()).device", 'map_location={"cuda:0": "cpu"}')
STRICT_FALSE = edit(LOAD_WEIGHTS, "model.load_state_dict(state)", "model.load_state_dict(state, strict=False)   # no more errors")
STRICT_FALSE_NO_STRIP = '''def load_weights(model, path):
    state = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(state, strict=False)'''
MODULE_ONLY = '''from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present

def load_weights(model, path):
    state = torch.load(path, map_location="cpu", weights_only=True)
    consume_prefix_in_state_dict_if_present(state, "module.")
    model.load_state_dict(state)'''
SKIPS_UNKNOWN_KEYS = '''def load_weights(model, path):
    state = torch.load(path, map_location="cpu", weights_only=True)
    own = model.state_dict()
    for key, value in state.items():
        key = key.replace("module.", "").replace("_orig_mod.", "")
        if key in own:                       # keep what fits
            own[key].copy_(value)'''

FIT_OVERWRITES_BEST = edit(FIT, '''        if loss < best:
            best = loss
            save_checkpoint(folder / "best.pt", model, optimizer, scheduler, loader, epoch, best)''', '''        best = min(best, loss)
        save_checkpoint(folder / "best.pt", model, optimizer, scheduler, loader, epoch, best)''')
FIT_FORGETS_BEST = edit(FIT, '''        start, best = resume(folder / "last.pt", model, optimizer, scheduler, loader)''',
                        '''        start, _ = resume(folder / "last.pt", model, optimizer, scheduler, loader)''')
FIT_NEVER_RESUMES = edit(FIT, '''    if (folder / "last.pt").exists():
        start, best = resume(folder / "last.pt", model, optimizer, scheduler, loader)
''', "")
FIT_RESUMES_FROM_BEST = edit(FIT, '''    if (folder / "last.pt").exists():
        start, best = resume(folder / "last.pt", model, optimizer, scheduler, loader)''', '''    if (folder / "best.pt").exists():
        start, best = resume(folder / "best.pt", model, optimizer, scheduler, loader)''')

ALT_SAVE_RESUME = '''import numpy as np
import torch

def save_checkpoint(path, model, optimizer, scheduler, loader, epoch, best_loss):
    name, keys, pos, has_gauss, cached = np.random.get_state()
    state = {
        "epoch": epoch, "best": best_loss.item() if hasattr(best_loss, "item") else best_loss,
        "model": model.state_dict(), "optim": optimizer.state_dict(), "sched": scheduler.state_dict(),
        "rng": {"torch": torch.random.get_rng_state(), "numpy": [name, keys.tolist(), pos, has_gauss, cached],
                "loader": loader.generator.get_state()},
    }
    torch.save(state, str(path))


def resume(path, model, optimizer, scheduler, loader):
    device = next(model.parameters()).device
    state = torch.load(str(path), map_location=device)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optim"])
    scheduler.load_state_dict(state["sched"])
    torch.random.set_rng_state(state["rng"]["torch"].cpu())
    name, keys, pos, has_gauss, cached = state["rng"]["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    loader.generator.set_state(state["rng"]["loader"].cpu())
    return state["epoch"] + 1, float(state["best"])'''

ALT_LOAD_WEIGHTS = '''import re
from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present

def load_weights(model, path):
    state = torch.load(path, map_location="cpu", weights_only=True)
    state = {re.sub(r"^(?:module\\.|_orig_mod\\.)+", "", k): v for k, v in state.items()}
    missing, unexpected = model.load_state_dict(state, strict=True)'''

ALT_FIT = '''import os

def fit(model, optimizer, scheduler, loader, evaluate, epochs, folder):
    os.makedirs(folder, exist_ok=True)
    last, best_file = os.path.join(folder, "last.pt"), os.path.join(folder, "best.pt")
    epoch, best = (resume(last, model, optimizer, scheduler, loader) if os.path.exists(last) else (0, math.inf))
    while epoch < epochs:
        train_epoch(model, optimizer, loader)
        scheduler.step()
        val = evaluate()
        improved = val < best
        best = min(best, val)
        save_checkpoint(last, model, optimizer, scheduler, loader, epoch, best)
        if improved:
            shutil.copyfile(last, best_file)
        epoch += 1
    return best'''
ALT_FIT = "import math, shutil\n" + ALT_FIT

VARIANTS = {
    "numpy_rng_state_in_the_file": {"cells": {"save_resume": RAW_NUMPY},
                                    "lost": {"check_weights_only": "Unsupported global"}},
    "no_map_location": {"cells": {"load_weights": NO_MAP_LOCATION},
                        "lost": {"check_gpu_checkpoint": "Attempting to deserialize object on a CUDA device"}},
    "written_differently": {"cells": {"save_resume": ALT_SAVE_RESUME, "load_weights": ALT_LOAD_WEIGHTS, "fit": ALT_FIT},
                            "lost": {}},
    "model_and_optimizer_only": {"cells": {"save_resume": MODEL_AND_OPTIMIZER_ONLY},
                                 "lost": {"check_resume": "the scheduler's state (last_epoch"}},
    "no_random_states": {"cells": {"save_resume": NO_RNG}, "lost": {"check_resume": "torch's global random state"}},
    "torch_rng_only": {"cells": {"save_resume": TORCH_RNG_ONLY}, "lost": {"check_resume": "NumPy's global random state"}},
    "no_data_order": {"cells": {"save_resume": NO_DATA_ORDER}, "lost": {"check_resume": "the loader's generator state"}},
    "new_generator_object": {"cells": {"save_resume": NEW_GENERATOR}, "lost": {"check_resume": "the loader's generator state"}},
    "returns_the_saved_epoch": {"cells": {"save_resume": SAVED_EPOCH}, "lost": {"check_resume": "return the saved epoch + 1"}},
    "random_state_kept_in_memory": {"cells": {"save_resume": GLOBAL_CACHE},
                                    "lost": {"check_resume": "torch's global random state"}},
    "maps_cuda0_only": {"cells": {"load_weights": MAP_CUDA0_ONLY},
                        "lost": {"check_gpu_checkpoint": "Attempting to deserialize object on a CUDA device"}},
    "strict_false": {"cells": {"load_weights": STRICT_FALSE}, "lost": {"check_prefixes": "expected an error"}},
    "strict_false_without_stripping": {"cells": {"load_weights": STRICT_FALSE_NO_STRIP},
                                       "lost": {"check_prefixes": "the model's own (nothing was loaded)"}},
    "strips_module_only": {"cells": {"load_weights": MODULE_ONLY}, "lost": {"check_prefixes": "Missing key(s) in state_dict"}},
    "copies_the_keys_that_fit": {"cells": {"load_weights": SKIPS_UNKNOWN_KEYS}, "lost": {"check_prefixes": "expected an error"}},
    "fit_overwrites_best": {"cells": {"fit": FIT_OVERWRITES_BEST}, "lost": {"check_fit": "the epoch whose weights best.pt holds"}},
    "fit_forgets_the_best_on_resume": {"cells": {"fit": FIT_FORGETS_BEST}, "lost": {"check_fit": "the best of the whole run"}},
    "fit_never_resumes": {"cells": {"fit": FIT_NEVER_RESUMES}, "lost": {"check_fit": "it started again from epoch 0"}},
    "fit_resumes_from_best": {"cells": {"fit": FIT_RESUMES_FROM_BEST}, "lost": {"check_fit": "the validations fit runs"}},
}
