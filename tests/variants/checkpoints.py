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
    "copies_the_keys_that_fit": {"cells": {"load_weights": SKIPS_UNKNOWN_KEYS},  # str.replace: 2.module.weight is skipped
                                 "lost": {"check_prefixes": "every key of the file must load"}},
    "fit_overwrites_best": {"cells": {"fit": FIT_OVERWRITES_BEST}, "lost": {"check_fit": "the epoch whose weights best.pt holds"}},
    "fit_forgets_the_best_on_resume": {"cells": {"fit": FIT_FORGETS_BEST}, "lost": {"check_fit": "the best of the whole run"}},
    "fit_never_resumes": {"cells": {"fit": FIT_NEVER_RESUMES}, "lost": {"check_fit": "it started again from epoch 0"}},
    "fit_resumes_from_best": {"cells": {"fit": FIT_RESUMES_FROM_BEST}, "lost": {"check_fit": "the validations fit runs"}},
}

BLIND6 = {  # blind round 6: cases that were misgraded, graded right since
    # correct, written differently: NumPy's dict state (legacy=False), consume_prefix_in_state_dict_if_present for
    # module. then _orig_mod., and a fit that uses train_epoch's list of step losses (section 2 returns a list)
    'ckpt_numpy_dict_state_consume_prefix_os_while': {'cells': {'save_resume': 'def save_checkpoint(path, model, optimizer, scheduler, loader, epoch, best_loss):\n    """Write everything needed to continue after `epoch` to `path` (loadable with weights_only=True)."""\n    ns = np.random.get_state(legacy=False)     # a dict: {\'bit_generator\', \'state\': {\'key\', \'pos\'}, \'has_gauss\', \'gauss\'}\n    numpy_state = {"bit_generator": str(ns["bit_generator"]),\n                   "state": {"key": torch.from_numpy(ns["state"]["key"].astype(np.int64)), "pos": int(ns["state"]["pos"])},\n                   "has_gauss": int(ns["has_gauss"]), "gauss": float(ns["gauss"])}\n    torch.save(dict(model=model.state_dict(), optimizer=optimizer.state_dict(), scheduler=scheduler.state_dict(),\n                    epoch=epoch, best_loss=best_loss.item() if hasattr(best_loss, "item") else float(best_loss),\n                    torch_state=torch.random.get_rng_state(), numpy_state=numpy_state,\n                    data_order=loader.generator.get_state()), path)\n\n\ndef resume(path, model, optimizer, scheduler, loader):\n    """Load `path` into these fresh objects and the random generators; return (next_epoch, best_loss)."""\n    ckpt = torch.load(path, map_location=lambda storage, location: storage, weights_only=True)   # all on the CPU\n    with torch.no_grad():\n        model.load_state_dict(ckpt["model"])          # copies into the model\'s own (device) tensors\n    optimizer.load_state_dict(ckpt["optimizer"])      # casts its state to the parameters\' device\n    scheduler.load_state_dict(ckpt["scheduler"])\n    torch.random.set_rng_state(ckpt["torch_state"])\n    ns = ckpt["numpy_state"]\n    np.random.set_state({"bit_generator": ns["bit_generator"],\n                         "state": {"key": ns["state"]["key"].numpy().astype(np.uint32), "pos": ns["state"]["pos"]},\n                         "has_gauss": ns["has_gauss"], "gauss": ns["gauss"]})\n    loader.generator.set_state(ckpt["data_order"])\n    return int(ckpt["epoch"]) + 1, float(ckpt["best_loss"])\n', 'load_weights': 'from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present\n\n\ndef load_weights(model, path):\n    """Load a state dict saved anywhere (any device, DataParallel/DDP or torch.compile prefixes) into `model`, strictly."""\n    state = torch.load(path, map_location="cpu")          # torch >= 2.6: weights_only=True by default\n    for prefix in ("module.", "_orig_mod."):               # module._orig_mod.: module. first\n        consume_prefix_in_state_dict_if_present(state, prefix)\n    with torch.no_grad():\n        model.load_state_dict(state)                        # copies onto the model\'s own device\n', 'fit': 'import os\n\n\ndef fit(model, optimizer, scheduler, loader, evaluate, epochs, folder):\n    """Train until `epochs`, resuming from folder/last.pt; keep folder/best.pt; return the best validation loss."""\n    os.makedirs(folder, exist_ok=True)\n    last_path, best_path = os.path.join(folder, "last.pt"), os.path.join(folder, "best.pt")\n    epoch, best_loss = resume(last_path, model, optimizer, scheduler, loader) if os.path.isfile(last_path) else (0, float("inf"))\n    while epoch < epochs:\n        losses = train_epoch(model, optimizer, loader)\n        scheduler.step()\n        val = evaluate()\n        improved = val < best_loss\n        best_loss = min(best_loss, val)\n        if improved:\n            save_checkpoint(best_path, model, optimizer, scheduler, loader, epoch, best_loss)\n        save_checkpoint(last_path, model, optimizer, scheduler, loader, epoch, best_loss)\n        print(f"epoch {epoch}: train {sum(losses) / max(len(losses), 1):.4f}, val {val:.4f}{\' *\' if improved else \'\'}")\n        epoch += 1\n    return best_loss\n'},
        'lost': {}},
    # correct, written differently: save under fork_rng, keys by .removeprefix('module.').removeprefix('_orig_mod.')
    # (the prefixes the text names: module., _orig_mod., module._orig_mod.), fit through a path helper
    'ckpt_fork_rng_removeprefix_helper': {'cells': {'save_resume': 'def save_checkpoint(path, model, optimizer, scheduler, loader, epoch, best_loss):\n    """Write everything needed to continue after `epoch` to `path` (loadable with weights_only=True)."""\n    s = np.random.get_state()\n    out = {}\n    out["model"] = {k: v.detach().clone() for k, v in model.state_dict().items()}\n    out["optimizer"] = optimizer.state_dict()\n    out["scheduler"] = scheduler.state_dict()\n    out["epoch"] = epoch\n    out["best_loss"] = float(best_loss)\n    out["torch_rng"] = torch.random.get_rng_state().clone()\n    out["cuda_rng"] = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else []\n    out["np_name"], out["np_keys"], out["np_pos"], out["np_has_gauss"], out["np_gauss"] = (\n        s[0], [int(k) for k in s[1]], int(s[2]), int(s[3]), float(s[4]))\n    out["loader_rng"] = loader.generator.get_state().clone()\n    with torch.random.fork_rng(devices=[]):     # whatever torch.save might draw, the training RNG is left as it was\n        torch.save(out, path)\n\n\ndef resume(path, model, optimizer, scheduler, loader):\n    """Load `path` into these fresh objects and the random generators; return (next_epoch, best_loss)."""\n    device = next(iter(model.state_dict().values())).device\n    ck = torch.load(path, map_location=device, weights_only=True)\n    model.load_state_dict(ck["model"], strict=True)\n    optimizer.load_state_dict(ck["optimizer"])\n    scheduler.load_state_dict(ck["scheduler"])\n    np.random.set_state((ck["np_name"], np.asarray(ck["np_keys"], dtype=np.uint32), ck["np_pos"],\n                         ck["np_has_gauss"], ck["np_gauss"]))\n    torch.random.set_rng_state(ck["torch_rng"].cpu())\n    if torch.cuda.is_available() and ck["cuda_rng"]:\n        torch.cuda.set_rng_state_all([t.cpu() for t in ck["cuda_rng"]])\n    loader.generator.set_state(ck["loader_rng"].cpu())\n    next_epoch = ck["epoch"] + 1\n    return next_epoch, float(ck["best_loss"])\n', 'load_weights': 'def load_weights(model, path):\n    """Load a state dict saved anywhere (any device, DataParallel/DDP or torch.compile prefixes) into `model`, strictly."""\n    tensors = list(model.parameters()) + list(model.buffers())\n    target = tensors[0].device if tensors else torch.device("cpu")\n    raw = torch.load(path, map_location=torch.device(target), weights_only=True)\n    fixed = {k.removeprefix("module.").removeprefix("_orig_mod."): v for k, v in raw.items()}\n    model.load_state_dict(fixed)\n', 'fit': 'def _paths(folder):\n    folder = pathlib.Path(folder)\n    folder.mkdir(parents=True, exist_ok=True)\n    return folder / "last.pt", folder / "best.pt"\n\n\ndef fit(model, optimizer, scheduler, loader, evaluate, epochs, folder):\n    """Train until `epochs`, resuming from folder/last.pt; keep folder/best.pt; return the best validation loss."""\n    last, best_file = _paths(folder)\n    state = {"epoch": 0, "best": float("inf")}\n    if last.exists():\n        state["epoch"], state["best"] = resume(last, model, optimizer, scheduler, loader)\n    for epoch in range(state["epoch"], epochs):\n        train_epoch(model, optimizer, loader)\n        scheduler.step()\n        loss = float(evaluate())\n        if loss < state["best"]:\n            state["best"] = loss\n            save_checkpoint(best_file, model, optimizer, scheduler, loader, epoch, loss)\n        save_checkpoint(last, model, optimizer, scheduler, loader, epoch, state["best"])\n    return float(state["best"])\n'},
        'lost': {}},
    # wrong: saves NumPy's (name, key, pos) only: the cached Gaussian (has_gauss, cached) is lost at the resume
    'ckpt_numpy_state_without_gauss': {'cells': {'save_resume': 'def save_checkpoint(path, model, optimizer, scheduler, loader, epoch, best_loss):\n    """Write everything needed to continue after `epoch` to `path` (loadable with weights_only=True)."""\n    np_state = np.random.get_state()\n    state = {\n        "model": model.state_dict(),\n        "optimizer": optimizer.state_dict(),\n        "scheduler": scheduler.state_dict(),\n        "epoch": int(epoch),\n        "best_loss": float(best_loss),\n        "torch_rng": torch.get_rng_state(),\n        "numpy_rng": [str(np_state[0]), np_state[1].tolist(), int(np_state[2])],   # name, key, position\n        "loader_rng": loader.generator.get_state(),\n    }\n    torch.save(state, path)\n\n\ndef resume(path, model, optimizer, scheduler, loader):\n    """Load `path` into these fresh objects and the random generators; return (next_epoch, best_loss)."""\n    device = next(model.parameters()).device\n    state = torch.load(path, map_location=device, weights_only=True)\n    model.load_state_dict(state["model"])\n    optimizer.load_state_dict(state["optimizer"])\n    scheduler.load_state_dict(state["scheduler"])\n    torch.set_rng_state(state["torch_rng"].cpu())\n    name, keys, pos = state["numpy_rng"]\n    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos))\n    loader.generator.set_state(state["loader_rng"].cpu())\n    return state["epoch"] + 1, float(state["best_loss"])\n', 'load_weights': 'def load_weights(model, path):\n    """Load a state dict saved anywhere (any device, DataParallel/DDP or torch.compile prefixes) into `model`, strictly."""\n    device = next(model.parameters()).device\n    state = torch.load(path, map_location=device, weights_only=True)\n    clean = {}\n    for key, value in state.items():\n        while key.startswith(("module.", "_orig_mod.")):\n            key = key.split(".", 1)[1]\n        clean[key] = value\n    model.load_state_dict(clean, strict=True)\n', 'fit': 'def fit(model, optimizer, scheduler, loader, evaluate, epochs, folder):\n    """Train until `epochs`, resuming from folder/last.pt; keep folder/best.pt; return the best validation loss."""\n    folder = pathlib.Path(folder)\n    folder.mkdir(parents=True, exist_ok=True)\n    last = folder / "last.pt"\n    if last.exists():\n        start, best = resume(last, model, optimizer, scheduler, loader)\n    else:\n        start, best = 0, float("inf")\n    for epoch in range(start, epochs):\n        train_epoch(model, optimizer, loader)\n        scheduler.step()\n        loss = evaluate()\n        if loss < best:\n            best = loss\n            save_checkpoint(folder / "best.pt", model, optimizer, scheduler, loader, epoch, best)\n        save_checkpoint(last, model, optimizer, scheduler, loader, epoch, best)\n    return best\n'},
        'lost': {'check_resume': 'has_gauss is 0, it was 1'}},
    # wrong: str.replace strips 'module.' anywhere, also the model's own layer named module ('2.module.weight')
    'load_replace_prefix_anywhere': {'cells': {'save_resume': 'def save_checkpoint(path, model, optimizer, scheduler, loader, epoch, best_loss):\n    """Write everything needed to continue after `epoch` to `path` (loadable with weights_only=True)."""\n    np_state = np.random.get_state()\n    state = {\n        "model": model.state_dict(),\n        "optimizer": optimizer.state_dict(),\n        "scheduler": scheduler.state_dict(),\n        "epoch": int(epoch),\n        "best_loss": float(best_loss),\n        "torch_rng": torch.get_rng_state(),\n        "numpy_rng": [str(np_state[0]), np_state[1].tolist(), int(np_state[2]), int(np_state[3]), float(np_state[4])],\n        "loader_rng": loader.generator.get_state(),\n    }\n    torch.save(state, path)\n\n\ndef resume(path, model, optimizer, scheduler, loader):\n    """Load `path` into these fresh objects and the random generators; return (next_epoch, best_loss)."""\n    device = next(model.parameters()).device\n    state = torch.load(path, map_location=device, weights_only=True)\n    model.load_state_dict(state["model"])\n    optimizer.load_state_dict(state["optimizer"])\n    scheduler.load_state_dict(state["scheduler"])\n    torch.set_rng_state(state["torch_rng"].cpu())\n    name, keys, pos, has_gauss, gauss = state["numpy_rng"]\n    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, gauss))\n    loader.generator.set_state(state["loader_rng"].cpu())\n    return state["epoch"] + 1, float(state["best_loss"])\n', 'load_weights': 'def load_weights(model, path):\n    """Load a state dict saved anywhere (any device, DataParallel/DDP or torch.compile prefixes) into `model`, strictly."""\n    state = torch.load(path, map_location="cpu", weights_only=True)\n    state = {k.replace("module.", "").replace("_orig_mod.", ""): v for k, v in state.items()}\n    model.load_state_dict(state)\n', 'fit': 'def fit(model, optimizer, scheduler, loader, evaluate, epochs, folder):\n    """Train until `epochs`, resuming from folder/last.pt; keep folder/best.pt; return the best validation loss."""\n    folder = pathlib.Path(folder)\n    folder.mkdir(parents=True, exist_ok=True)\n    last = folder / "last.pt"\n    if last.exists():\n        start, best = resume(last, model, optimizer, scheduler, loader)\n    else:\n        start, best = 0, float("inf")\n    for epoch in range(start, epochs):\n        train_epoch(model, optimizer, loader)\n        scheduler.step()\n        loss = evaluate()\n        if loss < best:\n            best = loss\n            save_checkpoint(folder / "best.pt", model, optimizer, scheduler, loader, epoch, best)\n        save_checkpoint(last, model, optimizer, scheduler, loader, epoch, best)\n    return best\n'},
        'lost': {'check_prefixes': 'at the START of each key'}},
    # wrong: saves best.pt before updating the best: best.pt holds the right weights but the previous best_loss
    'fit_best_file_holds_previous_best': {'cells': {'save_resume': 'def save_checkpoint(path, model, optimizer, scheduler, loader, epoch, best_loss):\n    """Write everything needed to continue after `epoch` to `path` (loadable with weights_only=True)."""\n    np_state = np.random.get_state()\n    state = {\n        "model": model.state_dict(),\n        "optimizer": optimizer.state_dict(),\n        "scheduler": scheduler.state_dict(),\n        "epoch": int(epoch),\n        "best_loss": float(best_loss),\n        "torch_rng": torch.get_rng_state(),\n        "numpy_rng": [str(np_state[0]), np_state[1].tolist(), int(np_state[2]), int(np_state[3]), float(np_state[4])],\n        "loader_rng": loader.generator.get_state(),\n    }\n    torch.save(state, path)\n\n\ndef resume(path, model, optimizer, scheduler, loader):\n    """Load `path` into these fresh objects and the random generators; return (next_epoch, best_loss)."""\n    device = next(model.parameters()).device\n    state = torch.load(path, map_location=device, weights_only=True)\n    model.load_state_dict(state["model"])\n    optimizer.load_state_dict(state["optimizer"])\n    scheduler.load_state_dict(state["scheduler"])\n    torch.set_rng_state(state["torch_rng"].cpu())\n    name, keys, pos, has_gauss, gauss = state["numpy_rng"]\n    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, gauss))\n    loader.generator.set_state(state["loader_rng"].cpu())\n    return state["epoch"] + 1, float(state["best_loss"])\n', 'load_weights': 'def load_weights(model, path):\n    """Load a state dict saved anywhere (any device, DataParallel/DDP or torch.compile prefixes) into `model`, strictly."""\n    device = next(model.parameters()).device\n    state = torch.load(path, map_location=device, weights_only=True)\n    clean = {}\n    for key, value in state.items():\n        while key.startswith(("module.", "_orig_mod.")):\n            key = key.split(".", 1)[1]\n        clean[key] = value\n    model.load_state_dict(clean, strict=True)\n', 'fit': 'def fit(model, optimizer, scheduler, loader, evaluate, epochs, folder):\n    """Train until `epochs`, resuming from folder/last.pt; keep folder/best.pt; return the best validation loss."""\n    folder = pathlib.Path(folder)\n    folder.mkdir(parents=True, exist_ok=True)\n    last = folder / "last.pt"\n    if last.exists():\n        start, best = resume(last, model, optimizer, scheduler, loader)\n    else:\n        start, best = 0, float("inf")\n    for epoch in range(start, epochs):\n        train_epoch(model, optimizer, loader)\n        scheduler.step()\n        loss = evaluate()\n        if loss < best:\n            save_checkpoint(folder / "best.pt", model, optimizer, scheduler, loader, epoch, best)\n            best = loss\n        save_checkpoint(last, model, optimizer, scheduler, loader, epoch, best)\n    return best\n'},
        'lost': {'check_fit': 'the best_loss that best.pt records'}},
    # wrong: scheduler.step() before train_epoch: every epoch trains at the next epoch's rate
    'fit_scheduler_before_train': {'cells': {'save_resume': 'def save_checkpoint(path, model, optimizer, scheduler, loader, epoch, best_loss):\n    """Write everything needed to continue after `epoch` to `path` (loadable with weights_only=True)."""\n    np_state = np.random.get_state()\n    state = {\n        "model": model.state_dict(),\n        "optimizer": optimizer.state_dict(),\n        "scheduler": scheduler.state_dict(),\n        "epoch": int(epoch),\n        "best_loss": float(best_loss),\n        "torch_rng": torch.get_rng_state(),\n        "numpy_rng": [str(np_state[0]), np_state[1].tolist(), int(np_state[2]), int(np_state[3]), float(np_state[4])],\n        "loader_rng": loader.generator.get_state(),\n    }\n    torch.save(state, path)\n\n\ndef resume(path, model, optimizer, scheduler, loader):\n    """Load `path` into these fresh objects and the random generators; return (next_epoch, best_loss)."""\n    device = next(model.parameters()).device\n    state = torch.load(path, map_location=device, weights_only=True)\n    model.load_state_dict(state["model"])\n    optimizer.load_state_dict(state["optimizer"])\n    scheduler.load_state_dict(state["scheduler"])\n    torch.set_rng_state(state["torch_rng"].cpu())\n    name, keys, pos, has_gauss, gauss = state["numpy_rng"]\n    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, gauss))\n    loader.generator.set_state(state["loader_rng"].cpu())\n    return state["epoch"] + 1, float(state["best_loss"])\n', 'load_weights': 'def load_weights(model, path):\n    """Load a state dict saved anywhere (any device, DataParallel/DDP or torch.compile prefixes) into `model`, strictly."""\n    device = next(model.parameters()).device\n    state = torch.load(path, map_location=device, weights_only=True)\n    clean = {}\n    for key, value in state.items():\n        while key.startswith(("module.", "_orig_mod.")):\n            key = key.split(".", 1)[1]\n        clean[key] = value\n    model.load_state_dict(clean, strict=True)\n', 'fit': 'def fit(model, optimizer, scheduler, loader, evaluate, epochs, folder):\n    """Train until `epochs`, resuming from folder/last.pt; keep folder/best.pt; return the best validation loss."""\n    folder = pathlib.Path(folder)\n    folder.mkdir(parents=True, exist_ok=True)\n    last = folder / "last.pt"\n    if last.exists():\n        start, best = resume(last, model, optimizer, scheduler, loader)\n    else:\n        start, best = 0, float("inf")\n    for epoch in range(start, epochs):\n        scheduler.step()\n        train_epoch(model, optimizer, loader)\n        loss = evaluate()\n        if loss < best:\n            best = loss\n            save_checkpoint(folder / "best.pt", model, optimizer, scheduler, loader, epoch, best)\n        save_checkpoint(last, model, optimizer, scheduler, loader, epoch, best)\n    return best\n'},
        'lost': {'check_fit': 'stepping before training trains every epoch at the next'}},
}
for _name, _spec in BLIND6.items():
    VARIANTS[f"blind6_{_name}"] = _spec

BLIND7 = {  # blind round 7: cases that were misgraded, graded right since
    # return (next_epoch, best_loss), a tuple: returns a list
    'ckpt_resume_returns_list': {'cells': {'save_resume': 'def save_checkpoint(path, model, optimizer, scheduler, loader, epoch, best_loss):\n    """Write everything needed to continue after `epoch` to `path` (loadable with weights_only=True)."""\n    name, keys, pos, has_gauss, cached = np.random.get_state()\n    torch.save({\n        "model": model.state_dict(),\n        "optimizer": optimizer.state_dict(),\n        "scheduler": scheduler.state_dict(),\n        "epoch": int(epoch),\n        "best_loss": float(best_loss),\n        "torch_rng": torch.get_rng_state(),\n        "np_rng": [str(name), keys.tolist(), int(pos), int(has_gauss), float(cached)],\n        "data_order": loader.generator.get_state(),\n    }, path)\n\n\ndef resume(path, model, optimizer, scheduler, loader):\n    """Load `path` into these fresh objects and the random generators; return (next_epoch, best_loss)."""\n    device = next(model.parameters()).device\n    ckpt = torch.load(path, map_location=device, weights_only=True)\n    model.load_state_dict(ckpt["model"])\n    optimizer.load_state_dict(ckpt["optimizer"])\n    scheduler.load_state_dict(ckpt["scheduler"])\n    torch.set_rng_state(ckpt["torch_rng"].cpu())\n    name, keys, pos, has_gauss, cached = ckpt["np_rng"]\n    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))\n    loader.generator.set_state(ckpt["data_order"].cpu())\n    return [ckpt["epoch"] + 1, float(ckpt["best_loss"])]\n', 'load_weights': 'def load_weights(model, path):\n    """Load a state dict saved anywhere (any device, DataParallel/DDP or torch.compile prefixes) into `model`, strictly."""\n    device = next(model.parameters()).device\n    state = torch.load(path, map_location=device, weights_only=True)\n    clean = {}\n    for key, value in state.items():\n        if key.startswith("module."):\n            key = key[len("module."):]\n        if key.startswith("_orig_mod."):\n            key = key[len("_orig_mod."):]\n        clean[key] = value\n    model.load_state_dict(clean)\n', 'fit': 'def fit(model, optimizer, scheduler, loader, evaluate, epochs, folder):\n    """Train until `epochs`, resuming from folder/last.pt; keep folder/best.pt; return the best validation loss."""\n    folder = pathlib.Path(folder)\n    folder.mkdir(parents=True, exist_ok=True)\n    last, best_path = folder / "last.pt", folder / "best.pt"\n    if last.exists():\n        start, best = resume(last, model, optimizer, scheduler, loader)\n    else:\n        start, best = 0, float("inf")\n    for epoch in range(start, epochs):\n        train_epoch(model, optimizer, loader)\n        scheduler.step()\n        loss = evaluate()\n        if loss < best:\n            best = loss\n            save_checkpoint(best_path, model, optimizer, scheduler, loader, epoch, best)\n        save_checkpoint(last, model, optimizer, scheduler, loader, epoch, best)\n    return best\n'},
        'lost': {'check_resume': "not a list"}},
    # the model's state (state_dict): named_parameters leaves out the buffers (BatchNorm's running statistics)
    'ckpt_model_parameters_without_buffers': {'cells': {'save_resume': 'def save_checkpoint(path, model, optimizer, scheduler, loader, epoch, best_loss):\n    """Write everything needed to continue after `epoch` to `path` (loadable with weights_only=True)."""\n    name, keys, pos, has_gauss, cached = np.random.get_state()\n    torch.save({\n        "model": {name: p.detach() for name, p in model.named_parameters()},   # the weights\n        "optimizer": optimizer.state_dict(),\n        "scheduler": scheduler.state_dict(),\n        "epoch": int(epoch),\n        "best_loss": float(best_loss),\n        "torch_rng": torch.get_rng_state(),\n        "np_rng": [str(name), keys.tolist(), int(pos), int(has_gauss), float(cached)],\n        "data_order": loader.generator.get_state(),\n    }, path)\n\n\ndef resume(path, model, optimizer, scheduler, loader):\n    """Load `path` into these fresh objects and the random generators; return (next_epoch, best_loss)."""\n    device = next(model.parameters()).device\n    ckpt = torch.load(path, map_location=device, weights_only=True)\n    model.load_state_dict(ckpt["model"])\n    optimizer.load_state_dict(ckpt["optimizer"])\n    scheduler.load_state_dict(ckpt["scheduler"])\n    torch.set_rng_state(ckpt["torch_rng"].cpu())\n    name, keys, pos, has_gauss, cached = ckpt["np_rng"]\n    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))\n    loader.generator.set_state(ckpt["data_order"].cpu())\n    return ckpt["epoch"] + 1, float(ckpt["best_loss"])\n', 'load_weights': 'def load_weights(model, path):\n    """Load a state dict saved anywhere (any device, DataParallel/DDP or torch.compile prefixes) into `model`, strictly."""\n    device = next(model.parameters()).device\n    state = torch.load(path, map_location=device, weights_only=True)\n    clean = {}\n    for key, value in state.items():\n        if key.startswith("module."):\n            key = key[len("module."):]\n        if key.startswith("_orig_mod."):\n            key = key[len("_orig_mod."):]\n        clean[key] = value\n    model.load_state_dict(clean)\n', 'fit': 'def fit(model, optimizer, scheduler, loader, evaluate, epochs, folder):\n    """Train until `epochs`, resuming from folder/last.pt; keep folder/best.pt; return the best validation loss."""\n    folder = pathlib.Path(folder)\n    folder.mkdir(parents=True, exist_ok=True)\n    last, best_path = folder / "last.pt", folder / "best.pt"\n    if last.exists():\n        start, best = resume(last, model, optimizer, scheduler, loader)\n    else:\n        start, best = 0, float("inf")\n    for epoch in range(start, epochs):\n        train_epoch(model, optimizer, loader)\n        scheduler.step()\n        loss = evaluate()\n        if loss < best:\n            best = loss\n            save_checkpoint(best_path, model, optimizer, scheduler, loader, epoch, best)\n        save_checkpoint(last, model, optimizer, scheduler, loader, epoch, best)\n    return best\n'},
        'lost': {'check_resume': "the file lacks the model's buffers"}},
    # a new best only when loss is LOWER: <= moves best.pt to a later epoch with the same loss
    'fit_best_on_equal_loss': {'cells': {'save_resume': 'def save_checkpoint(path, model, optimizer, scheduler, loader, epoch, best_loss):\n    """Write everything needed to continue after `epoch` to `path` (loadable with weights_only=True)."""\n    name, keys, pos, has_gauss, cached = np.random.get_state()\n    torch.save({\n        "model": model.state_dict(),\n        "optimizer": optimizer.state_dict(),\n        "scheduler": scheduler.state_dict(),\n        "epoch": int(epoch),\n        "best_loss": float(best_loss),\n        "torch_rng": torch.get_rng_state(),\n        "np_rng": [str(name), keys.tolist(), int(pos), int(has_gauss), float(cached)],\n        "data_order": loader.generator.get_state(),\n    }, path)\n\n\ndef resume(path, model, optimizer, scheduler, loader):\n    """Load `path` into these fresh objects and the random generators; return (next_epoch, best_loss)."""\n    device = next(model.parameters()).device\n    ckpt = torch.load(path, map_location=device, weights_only=True)\n    model.load_state_dict(ckpt["model"])\n    optimizer.load_state_dict(ckpt["optimizer"])\n    scheduler.load_state_dict(ckpt["scheduler"])\n    torch.set_rng_state(ckpt["torch_rng"].cpu())\n    name, keys, pos, has_gauss, cached = ckpt["np_rng"]\n    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))\n    loader.generator.set_state(ckpt["data_order"].cpu())\n    return ckpt["epoch"] + 1, float(ckpt["best_loss"])\n', 'load_weights': 'def load_weights(model, path):\n    """Load a state dict saved anywhere (any device, DataParallel/DDP or torch.compile prefixes) into `model`, strictly."""\n    device = next(model.parameters()).device\n    state = torch.load(path, map_location=device, weights_only=True)\n    clean = {}\n    for key, value in state.items():\n        if key.startswith("module."):\n            key = key[len("module."):]\n        if key.startswith("_orig_mod."):\n            key = key[len("_orig_mod."):]\n        clean[key] = value\n    model.load_state_dict(clean)\n', 'fit': 'def fit(model, optimizer, scheduler, loader, evaluate, epochs, folder):\n    """Train until `epochs`, resuming from folder/last.pt; keep folder/best.pt; return the best validation loss."""\n    folder = pathlib.Path(folder)\n    folder.mkdir(parents=True, exist_ok=True)\n    last, best_path = folder / "last.pt", folder / "best.pt"\n    if last.exists():\n        start, best = resume(last, model, optimizer, scheduler, loader)\n    else:\n        start, best = 0, float("inf")\n    for epoch in range(start, epochs):\n        train_epoch(model, optimizer, loader)\n        scheduler.step()\n        loss = evaluate()\n        if loss <= best:\n            best = loss\n            save_checkpoint(best_path, model, optimizer, scheduler, loader, epoch, best)\n        save_checkpoint(last, model, optimizer, scheduler, loader, epoch, best)\n    return best\n'},
        'lost': {'check_fit': 'compare with <, not <='}},
}
for _name, _spec in BLIND7.items():
    VARIANTS[f"blind7_{_name}"] = _spec

BLIND8 = {  # blind round 8: cases that were misgraded (the last one: a hint that blamed resume), graded right since
    # 'for each epoch from there up to epochs': early stopping after 2 epochs without improvement ends training befo
    'fit_early_stopping_patience': {'cells': {'save_resume': 'def save_checkpoint(path, model, optimizer, scheduler, loader, epoch, best_loss):\n    """Write everything needed to continue after `epoch` to `path` (loadable with weights_only=True)."""\n    name, keys, pos, has_gauss, cached = np.random.get_state()\n    torch.save({\n        "model": model.state_dict(),\n        "optimizer": optimizer.state_dict(),\n        "scheduler": scheduler.state_dict(),\n        "epoch": int(epoch),\n        "best_loss": float(best_loss),\n        "torch_rng": torch.get_rng_state(),\n        "np_rng": [str(name), keys.tolist(), int(pos), int(has_gauss), float(cached)],\n        "data_order": loader.generator.get_state(),\n    }, path)\n\n\ndef resume(path, model, optimizer, scheduler, loader):\n    """Load `path` into these fresh objects and the random generators; return (next_epoch, best_loss)."""\n    device = next(model.parameters()).device\n    ckpt = torch.load(path, map_location=device, weights_only=True)\n    model.load_state_dict(ckpt["model"])\n    optimizer.load_state_dict(ckpt["optimizer"])\n    scheduler.load_state_dict(ckpt["scheduler"])\n    torch.set_rng_state(ckpt["torch_rng"].cpu())\n    name, keys, pos, has_gauss, cached = ckpt["np_rng"]\n    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))\n    loader.generator.set_state(ckpt["data_order"].cpu())\n    return ckpt["epoch"] + 1, float(ckpt["best_loss"])\n', 'load_weights': 'def load_weights(model, path):\n    """Load a state dict saved anywhere (any device, DataParallel/DDP or torch.compile prefixes) into `model`, strictly."""\n    device = next(model.parameters()).device\n    state = torch.load(path, map_location=device, weights_only=True)\n    clean = {}\n    for key, value in state.items():\n        if key.startswith("module."):\n            key = key[len("module."):]\n        if key.startswith("_orig_mod."):\n            key = key[len("_orig_mod."):]\n        clean[key] = value\n    model.load_state_dict(clean)\n', 'fit': 'def fit(model, optimizer, scheduler, loader, evaluate, epochs, folder):\n    """Train until `epochs`, resuming from folder/last.pt; keep folder/best.pt; return the best validation loss."""\n    folder = pathlib.Path(folder)\n    folder.mkdir(parents=True, exist_ok=True)\n    last = folder / "last.pt"\n    start, best = resume(last, model, optimizer, scheduler, loader) if last.exists() else (0, float("inf"))\n    patience, bad_epochs = 2, 0\n    for epoch in range(start, epochs):\n        train_epoch(model, optimizer, loader)\n        scheduler.step()\n        loss = evaluate()\n        if loss < best:\n            best, bad_epochs = loss, 0\n            save_checkpoint(folder / "best.pt", model, optimizer, scheduler, loader, epoch, best)\n        else:\n            bad_epochs += 1\n        save_checkpoint(last, model, optimizer, scheduler, loader, epoch, best)\n        if bad_epochs >= patience:\n            print(f"early stop after epoch {epoch}: no improvement for {patience} epochs")\n            break\n    return best\n'},
        'lost': {'check_fit': '(no early stopping)'}},
    # 'in this order: train_epoch, then scheduler.step(), then loss = evaluate()': evaluate runs before the schedule
    'fit_evaluate_before_scheduler_step': {'cells': {'save_resume': 'def save_checkpoint(path, model, optimizer, scheduler, loader, epoch, best_loss):\n    """Write everything needed to continue after `epoch` to `path` (loadable with weights_only=True)."""\n    name, keys, pos, has_gauss, cached = np.random.get_state()\n    torch.save({\n        "model": model.state_dict(),\n        "optimizer": optimizer.state_dict(),\n        "scheduler": scheduler.state_dict(),\n        "epoch": int(epoch),\n        "best_loss": float(best_loss),\n        "torch_rng": torch.get_rng_state(),\n        "np_rng": [str(name), keys.tolist(), int(pos), int(has_gauss), float(cached)],\n        "data_order": loader.generator.get_state(),\n    }, path)\n\n\ndef resume(path, model, optimizer, scheduler, loader):\n    """Load `path` into these fresh objects and the random generators; return (next_epoch, best_loss)."""\n    device = next(model.parameters()).device\n    ckpt = torch.load(path, map_location=device, weights_only=True)\n    model.load_state_dict(ckpt["model"])\n    optimizer.load_state_dict(ckpt["optimizer"])\n    scheduler.load_state_dict(ckpt["scheduler"])\n    torch.set_rng_state(ckpt["torch_rng"].cpu())\n    name, keys, pos, has_gauss, cached = ckpt["np_rng"]\n    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))\n    loader.generator.set_state(ckpt["data_order"].cpu())\n    return ckpt["epoch"] + 1, float(ckpt["best_loss"])\n', 'load_weights': 'def load_weights(model, path):\n    """Load a state dict saved anywhere (any device, DataParallel/DDP or torch.compile prefixes) into `model`, strictly."""\n    device = next(model.parameters()).device\n    state = torch.load(path, map_location=device, weights_only=True)\n    clean = {}\n    for key, value in state.items():\n        if key.startswith("module."):\n            key = key[len("module."):]\n        if key.startswith("_orig_mod."):\n            key = key[len("_orig_mod."):]\n        clean[key] = value\n    model.load_state_dict(clean)\n', 'fit': 'def fit(model, optimizer, scheduler, loader, evaluate, epochs, folder):\n    """Train until `epochs`, resuming from folder/last.pt; keep folder/best.pt; return the best validation loss."""\n    folder = pathlib.Path(folder)\n    folder.mkdir(parents=True, exist_ok=True)\n    last, best_path = folder / "last.pt", folder / "best.pt"\n    if last.exists():\n        start, best = resume(last, model, optimizer, scheduler, loader)\n    else:\n        start, best = 0, float("inf")\n    for epoch in range(start, epochs):\n        train_epoch(model, optimizer, loader)\n        loss = evaluate()\n        scheduler.step()\n        if loss < best:\n            best = loss\n            save_checkpoint(best_path, model, optimizer, scheduler, loader, epoch, best)\n        save_checkpoint(last, model, optimizer, scheduler, loader, epoch, best)\n    return best\n'},
        'lost': {'check_fit': "the scheduler's last_epoch when evaluate() runs for epoch 0"}},
    # last.pt at the END of every epoch, after the evaluation: saved before it, it holds the previous best_loss, so 
    'fit_last_saved_before_evaluate': {'cells': {'save_resume': 'def save_checkpoint(path, model, optimizer, scheduler, loader, epoch, best_loss):\n    """Write everything needed to continue after `epoch` to `path` (loadable with weights_only=True)."""\n    name, keys, pos, has_gauss, cached = np.random.get_state()\n    torch.save({\n        "model": model.state_dict(),\n        "optimizer": optimizer.state_dict(),\n        "scheduler": scheduler.state_dict(),\n        "epoch": int(epoch),\n        "best_loss": float(best_loss),\n        "torch_rng": torch.get_rng_state(),\n        "np_rng": [str(name), keys.tolist(), int(pos), int(has_gauss), float(cached)],\n        "data_order": loader.generator.get_state(),\n    }, path)\n\n\ndef resume(path, model, optimizer, scheduler, loader):\n    """Load `path` into these fresh objects and the random generators; return (next_epoch, best_loss)."""\n    device = next(model.parameters()).device\n    ckpt = torch.load(path, map_location=device, weights_only=True)\n    model.load_state_dict(ckpt["model"])\n    optimizer.load_state_dict(ckpt["optimizer"])\n    scheduler.load_state_dict(ckpt["scheduler"])\n    torch.set_rng_state(ckpt["torch_rng"].cpu())\n    name, keys, pos, has_gauss, cached = ckpt["np_rng"]\n    np.random.set_state((name, np.array(keys, dtype=np.uint32), pos, has_gauss, cached))\n    loader.generator.set_state(ckpt["data_order"].cpu())\n    return ckpt["epoch"] + 1, float(ckpt["best_loss"])\n', 'load_weights': 'def load_weights(model, path):\n    """Load a state dict saved anywhere (any device, DataParallel/DDP or torch.compile prefixes) into `model`, strictly."""\n    device = next(model.parameters()).device\n    state = torch.load(path, map_location=device, weights_only=True)\n    clean = {}\n    for key, value in state.items():\n        if key.startswith("module."):\n            key = key[len("module."):]\n        if key.startswith("_orig_mod."):\n            key = key[len("_orig_mod."):]\n        clean[key] = value\n    model.load_state_dict(clean)\n', 'fit': 'def fit(model, optimizer, scheduler, loader, evaluate, epochs, folder):\n    """Train until `epochs`, resuming from folder/last.pt; keep folder/best.pt; return the best validation loss."""\n    folder = pathlib.Path(folder)\n    folder.mkdir(parents=True, exist_ok=True)\n    last = folder / "last.pt"\n    start, best = resume(last, model, optimizer, scheduler, loader) if last.exists() else (0, float("inf"))\n    for epoch in range(start, epochs):\n        train_epoch(model, optimizer, loader)\n        scheduler.step()\n        save_checkpoint(last, model, optimizer, scheduler, loader, epoch, best)   # the epoch is done: save it\n        loss = evaluate()\n        if loss < best:\n            best = loss\n            save_checkpoint(folder / "best.pt", model, optimizer, scheduler, loader, epoch, best)\n    return best\n'},
        'lost': {'check_fit': 'it records the previous best, and a resume forgets'}},
}
for _name, _spec in BLIND8.items():
    VARIANTS[f"blind8_{_name}"] = _spec

BLIND9 = {  # blind round 9: cases that were misgraded, graded right since
    # resume must load the file INTO the objects so that training continues (fit then rewrites last.pt): torch.load(
    'ckpt_resume_mmap_then_overwrite': {'cells': {'save_resume': 'def save_checkpoint(path, model, optimizer, scheduler, loader, epoch, best_loss):\n    """Write everything needed to continue after `epoch` to `path` (loadable with weights_only=True)."""\n    np_state = np.random.get_state()\n    payload = dict(\n        model=model.state_dict(),\n        optimizer=optimizer.state_dict(),\n        scheduler=scheduler.state_dict(),\n        epoch=epoch,\n        best_loss=float(np.asarray(best_loss)),           # np.float32 / np.float64 / float -> float\n        rng=dict(torch=torch.random.get_rng_state(),\n                 numpy=dict(name=np_state[0], key=torch.from_numpy(np_state[1].astype(np.int64)),\n                            pos=int(np_state[2]), has_gauss=int(np_state[3]), cached=float(np_state[4]))),\n        data_order=loader.sampler.generator.get_state(),  # the sampler holds the loader\'s generator\n    )\n    torch.save(payload, str(path))\n\n\ndef resume(path, model, optimizer, scheduler, loader):\n    """Load `path` into these fresh objects and the random generators; return (next_epoch, best_loss)."""\n    ckpt = torch.load(str(path), map_location=lambda storage, location: storage, weights_only=True, mmap=True)\n    model.load_state_dict(ckpt["model"])\n    optimizer.load_state_dict(ckpt["optimizer"])\n    scheduler.load_state_dict(ckpt["scheduler"])\n    torch.random.set_rng_state(ckpt["rng"]["torch"].clone())\n    n = ckpt["rng"]["numpy"]\n    np.random.set_state((n["name"], n["key"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached"]))\n    loader.sampler.generator.set_state(ckpt["data_order"].clone())\n    return int(ckpt["epoch"]) + 1, float(ckpt["best_loss"])\n', 'load_weights': 'def load_weights(model, path):\n    """Load a state dict saved anywhere (any device, DataParallel/DDP or torch.compile prefixes) into `model`, strictly."""\n    target = next(model.parameters()).device\n    state = torch.load(path, map_location=target, weights_only=True)\n    clean = {}\n    for key, value in state.items():\n        while key.startswith(("module.", "_orig_mod.")):\n            key = key.removeprefix("module.").removeprefix("_orig_mod.")\n        clean[key] = value\n    model.load_state_dict(clean)\n', 'fit': 'def fit(model, optimizer, scheduler, loader, evaluate, epochs, folder):\n    """Train until `epochs`, resuming from folder/last.pt; keep folder/best.pt; return the best validation loss."""\n    folder = pathlib.Path(folder)\n    folder.mkdir(parents=True, exist_ok=True)\n    if (folder / "last.pt").exists():\n        start, best_loss = resume(folder / "last.pt", model, optimizer, scheduler, loader)\n    else:\n        start, best_loss = 0, float("inf")\n    for epoch in range(start, epochs):\n        train_epoch(model, optimizer, loader)\n        scheduler.step()\n        loss = evaluate()\n        if loss < best_loss:\n            best_loss = loss\n            save_checkpoint(folder / "best.pt", model, optimizer, scheduler, loader, epoch, best_loss)\n        save_checkpoint(folder / "last.pt", model, optimizer, scheduler, loader, epoch, best_loss)\n    return best_loss\n'},
        'lost': {'check_resume': 'observed the process killed by SIGBUS'}},
}
for _name, _spec in BLIND9.items():
    VARIANTS[f"blind9_{_name}"] = _spec
