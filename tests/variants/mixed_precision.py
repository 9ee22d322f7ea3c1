"""Lesson 07 (mixed precision): plausible wrong fixes (each loses exactly its checks, with the message) and correct
fixes written differently. Format: tests/variants/__init__.py. nbgrader itself grades the first two wrong variants and
the first correct one (tests/test_grading.py)."""

AMP_STEP = '''def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.float16):
    inputs, targets = batch
    optimizer.zero_grad()
    with torch.autocast(inputs.device.type, dtype=dtype):
        loss = loss_fn(model(inputs), targets)
    scaler.scale(loss).backward()
    if max_norm is not None:
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.item()'''


def amp_step_with(old, new):
    """The reference amp_step with one part changed (the variants below name the change)."""
    assert old in AMP_STEP, old
    return AMP_STEP.replace(old, new)


UNSCALE_AND_CLIP = '''        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)'''

CLIP_BEFORE_UNSCALE = amp_step_with(UNSCALE_AND_CLIP, '''        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)   # the scaled gradients''')
CLIP_AFTER_STEP = amp_step_with(UNSCALE_AND_CLIP + "\n    scaler.step(optimizer)", '''        pass
    scaler.step(optimizer)
    if max_norm is not None:   # too late: the step has used the gradients
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)''')
NO_SCALER = '''def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.float16):
    inputs, targets = batch
    optimizer.zero_grad()
    with torch.autocast(inputs.device.type, dtype=dtype):
        loss = loss_fn(model(inputs), targets)
    loss.backward()                       # the scaler is never used
    if max_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return loss.item()'''
OPTIMIZER_STEP_DIRECTLY = amp_step_with("    scaler.step(optimizer)\n", '''    if max_norm is None:
        scaler.unscale_(optimizer)
    optimizer.step()                      # bypasses the scaler's inf check
''')
AUTOCAST_CUDA = amp_step_with("torch.autocast(inputs.device.type, dtype=dtype)", 'torch.autocast("cuda", dtype=dtype)')
NO_UPDATE = amp_step_with("    scaler.update()\n", "")
SCALED_LOSS = amp_step_with("    scaler.scale(loss).backward()", "    loss = scaler.scale(loss)\n    loss.backward()")
MODEL_HALF = amp_step_with("    inputs, targets = batch\n", "    inputs, targets = batch\n    model.half()\n")
FIXED_DTYPE = amp_step_with("torch.autocast(inputs.device.type, dtype=dtype)",
                            "torch.autocast(inputs.device.type, dtype=torch.float16)")
NO_ZERO_GRAD = amp_step_with("    optimizer.zero_grad()\n", "")

ALT_AMP_STEP = '''import math

def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.float16):
    x, y = batch
    model.zero_grad(set_to_none=True)
    with torch.amp.autocast(device_type=next(model.parameters()).device.type, dtype=dtype):
        out = model(x)
        loss = loss_fn(out, y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)            # always: harmless without clipping, step() does not unscale twice
    if max_norm is not None:
        params = [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        torch.nn.utils.clip_grad_norm_(params, max_norm=max_norm, error_if_nonfinite=False)
    scaler.step(optimizer)
    scaler.update()
    return float(loss.detach())'''

ALT_AMP_STEP_2 = '''def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.float16):
    inputs, targets = batch
    for group in optimizer.param_groups:
        for p in group["params"]:
            p.grad = None
    autocast = torch.autocast(device_type=str(inputs.device).split(":")[0], dtype=dtype, enabled=True)
    with autocast:
        loss = loss_fn(model(inputs), targets)
    scaled = scaler.scale(loss)
    scaled.backward()
    if max_norm is not None:
        scaler.unscale_(optimizer)
        total = torch.nn.utils.get_total_norm([p.grad for p in model.parameters()]) if hasattr(torch.nn.utils, "get_total_norm") else None
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return loss.item()'''

VARIANTS = {
    "default_scaler": {"cells": {"make_scaler": "def make_scaler(device):\n    return torch.amp.GradScaler()\n"},
                       "lost": {"check_make_scaler": "torch.amp.GradScaler() defaults to 'cuda'"}},
    "clip_before_unscale": {"cells": {"amp_step": CLIP_BEFORE_UNSCALE},
                            "lost": {"check_clip_unscaled": "Call scaler.unscale_(optimizer) before clip_grad_norm_"}},
    "written_differently": {"cells": {
        "make_scaler": "def make_scaler(device):\n    device = torch.device(device)\n"
                       "    return torch.amp.GradScaler(device=device.type, enabled=True)\n",
        "amp_step": ALT_AMP_STEP}, "lost": {}},
    "cuda_amp_scaler": {"cells": {"make_scaler": "def make_scaler(device):\n    return torch.cuda.amp.GradScaler()\n"},
                        "lost": {"check_make_scaler": "disabled itself"}},
    "scaler_for_cuda": {"cells": {"make_scaler": 'def make_scaler(device):\n    return torch.amp.GradScaler("cuda")\n'},
                        "lost": {"check_make_scaler": "torch.amp.GradScaler('cpu')"}},
    "scale_of_one": {"cells": {"make_scaler": "def make_scaler(device):\n"
                                              "    return torch.amp.GradScaler(torch.device(device).type, init_scale=1.0)\n"},
                     "lost": {"check_make_scaler": "keep GradScaler's default init_scale"}},
    "clip_after_step": {"cells": {"amp_step": CLIP_AFTER_STEP},
                        "lost": {"check_clip_unscaled": "reached optimizer.step() unclipped"}},
    "no_scaler": {"cells": {"amp_step": NO_SCALER},
                  "lost": {"check_overflow_skipped": "never optimizer.step() directly",
                           "check_grads_match_fp32": "they underflowed in float16"}},
    "optimizer_step_directly": {"cells": {"amp_step": OPTIMIZER_STEP_DIRECTLY},
                                "lost": {"check_overflow_skipped": "never optimizer.step() directly"}},
    "autocast_for_cuda": {"cells": {"amp_step": AUTOCAST_CUDA},
                          "lost": {"check_amp_trains": "autocast for another device type does nothing here",
                                   "check_overflow_skipped": "autocast for another device type does nothing here"}},
    "no_update": {"cells": {"amp_step": NO_UPDATE},
                  "lost": {"check_amp_trains": "call scaler.update() once after scaler.step(optimizer)",
                           "check_overflow_skipped": "call scaler.update() after scaler.step(optimizer)"}},
    "returns_scaled_loss": {"cells": {"amp_step": SCALED_LOSS},
                            "lost": {"check_amp_trains": "not the scaled loss"}},
    "model_half": {"cells": {"amp_step": MODEL_HALF},
                   "lost": {"check_amp_trains": "keep them float32", "check_overflow_skipped": "keep them float32",
                            "check_grads_match_fp32": "keep them float32", "check_clip_unscaled": "keep them float32"}},
    "no_zero_grad": {"cells": {"amp_step": NO_ZERO_GRAD},
                     "lost": {"check_grads_match_fp32": "call optimizer.zero_grad() first",
                              "check_overflow_skipped": "zero the gradients at the start of every step"}},
    "written_differently_2": {"cells": {
        "make_scaler": 'def make_scaler(device):\n    kind = device if isinstance(device, str) else device.type\n'
                       '    return torch.amp.GradScaler(kind.split(":")[0])\n',
        "amp_step": ALT_AMP_STEP_2}, "lost": {}},
}

VARIANTS["ignores_dtype"] = {"cells": {"amp_step": FIXED_DTYPE}, "lost": {"check_amp_trains": "use the dtype amp_step is given"}}

BLIND6 = {  # blind round 6: cases that were misgraded, graded right since
    # 'Keep the default initial scale': init_scale=1024 instead of 65536
    'scaler_init_scale_1024': {'cells': {'make_scaler': 'def make_scaler(device):\n    """An enabled torch.amp.GradScaler for `device`."""\n    return torch.amp.GradScaler(torch.device(device).type, init_scale=1024.0)   # like section 2\'s clipping demo\n', 'amp_step': 'def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.float16):\n    """One autocast + GradScaler step (clipping the unscaled gradients to max_norm); returns the loss as a float."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    with torch.autocast(inputs.device.type, dtype=dtype):\n        output = model(inputs)\n        loss = loss_fn(output, targets)\n    scaler.scale(loss).backward()\n    if max_norm is not None:\n        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    scaler.step(optimizer)\n    scaler.update()\n    return loss.item()\n'},
        'lost': {'check_make_scaler': "expected 65536 (GradScaler's default init_scale), observed 1024"}},
    # a GradScaler 'for device': always built for 'cpu', whatever device is passed
    'scaler_hardcoded_cpu': {'cells': {'make_scaler': 'def make_scaler(device):\n    """An enabled torch.amp.GradScaler for `device`."""\n    return torch.amp.GradScaler("cpu")      # enabled here... but for "cpu" whatever device was asked\n', 'amp_step': 'def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.float16):\n    """One autocast + GradScaler step (clipping the unscaled gradients to max_norm); returns the loss as a float."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    with torch.autocast(inputs.device.type, dtype=dtype):\n        output = model(inputs)\n        loss = loss_fn(output, targets)\n    scaler.scale(loss).backward()\n    if max_norm is not None:\n        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    scaler.step(optimizer)\n    scaler.update()\n    return loss.item()\n'},
        'lost': {'check_make_scaler': "on this machine, without CUDA: expected 'cuda', the type of the device passed"}},
    # the loss outside autocast (a float16 loss): the first normal step overflows and is skipped, so the steps use
    # no float32 gradients (check_clip_unscaled clips at a scale of 2**8, where this loss does not overflow: the
    # clipping itself is right). check_amp_trains keeps its point: what it verifies holds (autocast forward, float32
    # weights, the loss returned, and it trains once the scale has halved)
    'amp_loss_outside_autocast': {'cells': {'make_scaler': 'def make_scaler(device):\n    """An enabled torch.amp.GradScaler for `device`."""\n    return torch.amp.GradScaler(torch.device(device).type)\n', 'amp_step': 'def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.float16):\n    """One autocast + GradScaler step (clipping the unscaled gradients to max_norm); returns the loss as a float."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    with torch.autocast(inputs.device.type, dtype=dtype):\n        output = model(inputs)\n    loss = loss_fn(output, targets)         # the loss outside the block, on the 16-bit output\n    scaler.scale(loss).backward()\n    if max_norm is not None:\n        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    scaler.step(optimizer)\n    scaler.update()\n    return loss.item()\n'},
        'lost': {'check_amp_trains': 'where amp_step called loss_fn (step 0): expected inside torch.autocast',
                 'check_grads_match_fp32': 'The loss was float16: loss_fn ran outside autocast'}},
    # autocast in dtype always: with a disabled scaler (e.g. bfloat16 without scaling) it computes in float32
    'amp_autocast_enabled_by_scaler': {'cells': {'make_scaler': 'def make_scaler(device):\n    """An enabled torch.amp.GradScaler for `device`."""\n    return torch.amp.GradScaler(torch.device(device).type)\n', 'amp_step': 'def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.float16):\n    """One autocast + GradScaler step (clipping the unscaled gradients to max_norm); returns the loss as a float."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    with torch.autocast(inputs.device.type, dtype=dtype, enabled=scaler.is_enabled()):\n        output = model(inputs)\n        loss = loss_fn(output, targets)\n    scaler.scale(loss).backward()\n    if max_norm is not None:\n        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    scaler.step(optimizer)\n    scaler.update()\n    return loss.item()\n'},
        'lost': {'check_amp_trains': "with an enabled scaler, but not with this disabled one"}},
}
for _name, _spec in BLIND6.items():
    VARIANTS[f"blind6_{_name}"] = _spec

BLIND7 = {  # blind round 7: cases that were misgraded, graded right since
    # built for the device's TYPE ('a CUDA device gets a scaler for "cuda"'): str(torch.device('cuda', 0)) is 'cuda:
    'scaler_str_device_keeps_index': {'cells': {'make_scaler': 'def make_scaler(device):\n    """An enabled torch.amp.GradScaler for `device`."""\n    return torch.amp.GradScaler(str(device))        # "cpu" -> "cpu", but torch.device("cuda", 0) -> "cuda:0"\n', 'amp_step': 'def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.float16):\n    """One autocast + GradScaler step (clipping the unscaled gradients to max_norm); returns the loss as a float."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    with torch.autocast(inputs.device.type, dtype=dtype):\n        loss = loss_fn(model(inputs), targets)\n    scaler.scale(loss).backward()\n    if max_norm is not None:\n        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    scaler.step(optimizer)\n    scaler.update()\n    return loss.item()\n'},
        'lost': {'check_make_scaler': "observed 'cuda:0'"}},
    # 'whichever device is passed': the argument is ignored, the type follows torch.cuda.is_available() (a cuda devi
    'scaler_type_from_cuda_availability': {'cells': {'make_scaler': 'def make_scaler(device):\n    """An enabled torch.amp.GradScaler for `device`."""\n    # enabled wherever we run: CUDA if the machine has it, the CPU otherwise\n    return torch.amp.GradScaler("cuda" if torch.cuda.is_available() else "cpu")\n', 'amp_step': 'def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.float16):\n    """One autocast + GradScaler step (clipping the unscaled gradients to max_norm); returns the loss as a float."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    with torch.autocast(inputs.device.type, dtype=dtype):\n        loss = loss_fn(model(inputs), targets)\n    scaler.scale(loss).backward()\n    if max_norm is not None:\n        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    scaler.step(optimizer)\n    scaler.update()\n    return loss.item()\n'},
        'lost': {'check_make_scaler': "on this machine, without CUDA: expected 'cuda', the type of the device passed"}},
    # 'if max_norm is not None': `if max_norm:` skips clipping for max_norm=0 (the gradients must be clipped to norm
    'amp_max_norm_truthy': {'cells': {'make_scaler': 'def make_scaler(device):\n    """An enabled torch.amp.GradScaler for `device`."""\n    return torch.amp.GradScaler(torch.device(device).type)\n', 'amp_step': 'def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.float16):\n    """One autocast + GradScaler step (clipping the unscaled gradients to max_norm); returns the loss as a float."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    with torch.autocast(inputs.device.type, dtype=dtype):\n        loss = loss_fn(model(inputs), targets)\n    scaler.scale(loss).backward()\n    if max_norm:\n        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    scaler.step(optimizer)\n    scaler.update()\n    return loss.item()\n'},
        'lost': {'check_clip_unscaled': 'every gradient clipped to zero'}},
    # return the loss unscaled: dividing the scaled loss by the scale AFTER update() returns twice the loss on a ste
    'amp_loss_divided_by_updated_scale': {'cells': {'make_scaler': 'def make_scaler(device):\n    """An enabled torch.amp.GradScaler for `device`."""\n    return torch.amp.GradScaler(torch.device(device).type)\n', 'amp_step': 'def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.float16):\n    """One autocast + GradScaler step (clipping the unscaled gradients to max_norm); returns the loss as a float."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    with torch.autocast(inputs.device.type, dtype=dtype):\n        loss = loss_fn(model(inputs), targets)\n    scaled = scaler.scale(loss)\n    scaled.backward()\n    if max_norm is not None:\n        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    scaler.step(optimizer)\n    scaler.update()\n    return scaled.item() / scaler.get_scale()     # unscale the loss too (after update: the scale may have changed)\n'},
        'lost': {'check_overflow_skipped': 'the loss amp_step returned on a normal batch with a loss scale of 2**40'}},
}
for _name, _spec in BLIND7.items():
    VARIANTS[f"blind7_{_name}"] = _spec

BLIND8 = {  # blind round 8: cases that were misgraded, graded right since
    # 'the model's weights are float32 and must stay float32', also with a disabled scaler: with scaler disabled it 
    'amp_pure_16bit_weights_when_scaler_disabled': {'cells': {'make_scaler': 'def make_scaler(device):\n    """An enabled torch.amp.GradScaler for `device`."""\n    return torch.amp.GradScaler(torch.device(device).type)\n', 'amp_step': 'def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.float16):\n    """One autocast + GradScaler step (clipping the unscaled gradients to max_norm); returns the loss as a float."""\n    inputs, targets = batch\n    if not scaler.is_enabled():\n        # no loss scaling (bfloat16): the whole model can live in 16 bits, half the memory\n        model.to(dtype)\n    optimizer.zero_grad()\n    with torch.autocast(inputs.device.type, dtype=dtype):\n        loss = loss_fn(model(inputs), targets)\n    scaler.scale(loss).backward()\n    if max_norm is not None:\n        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    scaler.step(optimizer)\n    scaler.update()\n    return loss.item()\n'},
        'lost': {'check_amp_trains': 'the dtype of the weights after amp_step with a disabled scaler, GradScaler(enabled=False),'}},
    # an overflowing step must be skipped by scaler.step: with max_norm, clip_grad_norm_(error_if_nonfinite=True) ra
    'amp_clip_error_if_nonfinite': {'cells': {'make_scaler': 'def make_scaler(device):\n    """An enabled torch.amp.GradScaler for `device`."""\n    return torch.amp.GradScaler(torch.device(device).type)\n', 'amp_step': 'def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.float16):\n    """One autocast + GradScaler step (clipping the unscaled gradients to max_norm); returns the loss as a float."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    with torch.autocast(inputs.device.type, dtype=dtype):\n        loss = loss_fn(model(inputs), targets)\n    scaler.scale(loss).backward()\n    if max_norm is not None:\n        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm, error_if_nonfinite=True)   # fail loudly on inf/NaN\n    scaler.step(optimizer)\n    scaler.update()\n    return loss.item()\n'},
        'lost': {'check_overflow_skipped': '`amp_step` on a batch whose float16 activations overflow (inputs x 1e5'}},
    # the loss after the block on output.float() (cast at the seam, as section 1 and the troubleshooting table say):
    # a float32 loss, correct since round 14 (it failed check_amp_trains before)
    'amp_loss_outside_autocast_float_seam': {'cells': {'make_scaler': 'def make_scaler(device):\n    """An enabled torch.amp.GradScaler for `device`."""\n    return torch.amp.GradScaler(torch.device(device).type)\n', 'amp_step': 'def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.float16):\n    """One autocast + GradScaler step (clipping the unscaled gradients to max_norm); returns the loss as a float."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    with torch.autocast(inputs.device.type, dtype=dtype):\n        output = model(inputs)\n    loss = loss_fn(output.float(), targets)    # cast at the seam with .float(), as section 1 says\n    scaler.scale(loss).backward()\n    if max_norm is not None:\n        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    scaler.step(optimizer)\n    scaler.update()\n    return loss.item()\n'},
        'lost': {}},
    # clip the TOTAL gradient norm of the model: only optimizer.param_groups[0] is clipped; with several parameter g
    'amp_clip_first_param_group_only': {'cells': {'make_scaler': 'def make_scaler(device):\n    """An enabled torch.amp.GradScaler for `device`."""\n    return torch.amp.GradScaler(torch.device(device).type)\n', 'amp_step': 'def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.float16):\n    """One autocast + GradScaler step (clipping the unscaled gradients to max_norm); returns the loss as a float."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    with torch.autocast(inputs.device.type, dtype=dtype):\n        loss = loss_fn(model(inputs), targets)\n    scaler.scale(loss).backward()\n    if max_norm is not None:\n        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_(optimizer.param_groups[0]["params"], max_norm)\n    scaler.step(optimizer)\n    scaler.update()\n    return loss.item()\n'},
        'lost': {'check_clip_unscaled': 'the gradients optimizer.step() used with max_norm='}},
    # return the loss as a Python float: round(loss, 4) is not the loss; a small loss (e.g. the lesson's loss x 1e-6
    'amp_returns_rounded_loss': {'cells': {'make_scaler': 'def make_scaler(device):\n    """An enabled torch.amp.GradScaler for `device`."""\n    return torch.amp.GradScaler(torch.device(device).type)\n', 'amp_step': 'def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.float16):\n    """One autocast + GradScaler step (clipping the unscaled gradients to max_norm); returns the loss as a float."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    with torch.autocast(inputs.device.type, dtype=dtype):\n        loss = loss_fn(model(inputs), targets)\n    scaler.scale(loss).backward()\n    if max_norm is not None:\n        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    scaler.step(optimizer)\n    scaler.update()\n    return round(loss.item(), 4)          # a readable number\n'},
        'lost': {'check_amp_trains': "return loss.item() as it is (not rounded, not scaled)"}},
}
for _name, _spec in BLIND8.items():
    VARIANTS[f"blind8_{_name}"] = _spec

BLIND9 = {  # blind round 9: cases that were misgraded, graded right since
    # 'amp_step still computes under autocast in dtype' with a disabled scaler: a float16 request with a disabled sc
    'amp_bfloat16_whenever_scaler_disabled': {'cells': {'make_scaler': 'def make_scaler(device):\n    """An enabled torch.amp.GradScaler for `device`."""\n    return torch.amp.GradScaler(torch.device(device).type)\n', 'amp_step': 'def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.float16):\n    """One autocast + GradScaler step (clipping the unscaled gradients to max_norm); returns the loss as a float."""\n    inputs, targets = batch\n    if not scaler.is_enabled():\n        dtype = torch.bfloat16          # "a disabled scaler means bfloat16": float16 without scaling is never run\n    optimizer.zero_grad()\n    with torch.autocast(inputs.device.type, dtype=dtype):\n        loss = loss_fn(model(inputs), targets)\n    scaler.scale(loss).backward()\n    if max_norm is not None:\n        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    scaler.step(optimizer)\n    scaler.update()\n    return loss.item()\n'},
        'lost': {'check_amp_trains': "the dtype of the model's first Linear output in amp_step (a disabled scaler, GradScaler(en"}},
    # 'if max_norm is not None: unscale_, then clip', whatever the scaler: with a disabled scaler (bfloat16) the gra
    'amp_no_clipping_when_scaler_disabled': {'cells': {'make_scaler': 'def make_scaler(device):\n    """An enabled torch.amp.GradScaler for `device`."""\n    return torch.amp.GradScaler(torch.device(device).type)\n', 'amp_step': 'def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.float16):\n    """One autocast + GradScaler step (clipping the unscaled gradients to max_norm); returns the loss as a float."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    with torch.autocast(inputs.device.type, dtype=dtype):\n        loss = loss_fn(model(inputs), targets)\n    scaler.scale(loss).backward()\n    if max_norm is not None and scaler.is_enabled():    # clipping tied to the scaler: skipped when it is disabled\n        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    scaler.step(optimizer)\n    scaler.update()\n    return loss.item()\n'},
        'lost': {'check_clip_unscaled': 'a disabled scaler (GradScaler(enabled=False)), bfloat16: expected norm'}},
    # 'if max_norm is not None': an int max_norm (1, 5) is skipped by isinstance(max_norm, float) and the gradients 
    'amp_max_norm_isinstance_float': {'cells': {'make_scaler': 'def make_scaler(device):\n    """An enabled torch.amp.GradScaler for `device`."""\n    return torch.amp.GradScaler(torch.device(device).type)\n', 'amp_step': 'def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.float16):\n    """One autocast + GradScaler step (clipping the unscaled gradients to max_norm); returns the loss as a float."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    with torch.autocast(inputs.device.type, dtype=dtype):\n        loss = loss_fn(model(inputs), targets)\n    scaler.scale(loss).backward()\n    if isinstance(max_norm, float):      # an int max_norm (e.g. 1 or 5) is never clipped\n        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    scaler.step(optimizer)\n    scaler.update()\n    return loss.item()\n'},
        'lost': {'check_clip_unscaled': 'the gradients optimizer.step() used with max_norm=1 (an int)'}},
    # 'the model's weights are float32 and must stay float32': model.to(dtype) then model.float() rounds the float32
    'amp_weights_round_trip_through_16bit': {'cells': {'make_scaler': 'def make_scaler(device):\n    """An enabled torch.amp.GradScaler for `device`."""\n    return torch.amp.GradScaler(torch.device(device).type)\n', 'amp_step': 'def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.float16):\n    """One autocast + GradScaler step (clipping the unscaled gradients to max_norm); returns the loss as a float."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    model.to(dtype)                      # forward with 16-bit weights ...\n    with torch.autocast(inputs.device.type, dtype=dtype):\n        loss = loss_fn(model(inputs), targets)\n    scaler.scale(loss).backward()\n    model.float()                        # ... and back to float32 (weights and gradients) before the update:\n    if max_norm is not None:             # the float32 master weights are rounded to 16 bits every step\n        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    scaler.step(optimizer)\n    scaler.update()\n    return loss.item()\n'},
        'lost': {'check_amp_trains': 'the weights after one plain SGD step (lr=0.001, float16, loss scale 1024)', 'check_overflow_skipped': 'the weights after amp_step on a batch whose float16 activations overflow (inputs x 1e5)'}},
}
for _name, _spec in BLIND9.items():
    VARIANTS[f"blind9_{_name}"] = _spec

BLIND11 = {  # blind round 11: cases that were misgraded, graded right since
    # Wrong: maps every non-CUDA device (mps, xpu) to a 'cpu' scaler; text: built for THAT device's type. Correct fo
    'bad_scaler_mps_as_cpu': {'cells': {'make_scaler': 'def make_scaler(device):\n    """An enabled torch.amp.GradScaler for `device`."""\n    return torch.amp.GradScaler("cuda" if "cuda" in str(device) else "cpu")\n', 'amp_step': 'def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.float16):\n    """One autocast + GradScaler step (clipping the unscaled gradients to max_norm); returns the loss as a float."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    with torch.autocast(inputs.device.type, dtype=dtype):\n        loss = loss_fn(model(inputs), targets)\n    scaler.scale(loss).backward()\n    if max_norm is not None:\n        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    scaler.step(optimizer)\n    scaler.update()\n    return loss.item()\n'},
        'lost': {'check_make_scaler': "for an Apple GPU (simulated here: only the scaler is built"}},
    # Correct: clips the UNSCALED gradients with a hand-written total-norm clip identical to clip_grad_norm_ (only s
    'ok_manual_clip': {'cells': {'make_scaler': 'def make_scaler(device):\n    """An enabled torch.amp.GradScaler for `device`."""\n    return torch.amp.GradScaler(torch.device(device).type)\n', 'amp_step': 'def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.float16):\n    """One autocast + GradScaler step (clipping the unscaled gradients to max_norm); returns the loss as a float."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    with torch.autocast(inputs.device.type, dtype=dtype):\n        loss = loss_fn(model(inputs), targets)\n    scaler.scale(loss).backward()\n    if max_norm is not None:\n        scaler.unscale_(optimizer)\n        grads = [p.grad for p in model.parameters() if p.grad is not None]\n        total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))\n        coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)\n        for g in grads:\n            g.mul_(coef)\n    scaler.step(optimizer)\n    scaler.update()\n    return loss.item()\n'},
        'lost': {}},
}
for _name, _spec in BLIND11.items():
    VARIANTS[f"blind11_{_name}"] = _spec

BLIND12 = {  # blind round 12: cases that were misgraded, graded right since
    # Wrong: returns a 0-d tensor (float32, detached) instead of a Python float (text: 'return the loss (unscaled) a
    'bad_return_tensor': {'cells': {'make_scaler': 'def make_scaler(device):\n    """An enabled torch.amp.GradScaler for `device`."""\n    return torch.amp.GradScaler(torch.device(device).type)\n', 'amp_step': 'def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.float16):\n    """One autocast + GradScaler step (clipping the unscaled gradients to max_norm); returns the loss as a float."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    with torch.autocast(inputs.device.type, dtype=dtype):\n        loss = loss_fn(model(inputs), targets)\n    scaler.scale(loss).backward()\n    if max_norm is not None:\n        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    scaler.step(optimizer)\n    scaler.update()\n    return loss.detach()     # no sync: cheaper than .item()\n'},
        'lost': {'check_amp_trains': "amp_step's return value: expected a Python float, observed a"}},
}
for _name, _spec in BLIND12.items():
    VARIANTS[f"blind12_{_name}"] = _spec

BLIND14 = {  # blind round 14: cases that were misgraded, graded right since
    # Works on the visible example only: autocast is disabled when the inputs are integers (token ids into an nn.Emb
    'bad_autocast_only_float_inputs': {'cells': {'make_scaler': 'def make_scaler(device):\n    """An enabled torch.amp.GradScaler for `device`."""\n    return torch.amp.GradScaler(torch.device(device).type)\n', 'amp_step': 'def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.float16):\n    """One autocast + GradScaler step (clipping the unscaled gradients to max_norm); returns the loss as a float."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    # autocast is about floating-point math: only worth it when the inputs are floats\n    with torch.autocast(inputs.device.type, dtype=dtype, enabled=inputs.is_floating_point()):\n        loss = loss_fn(model(inputs), targets)\n    scaler.scale(loss).backward()\n    if max_norm is not None:\n        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    scaler.step(optimizer)\n    scaler.update()\n    return loss.item()\n'},
        'lost': {'check_amp_trains': 'output in amp_step (token ids (int'}},
    # Casts the loss to the 16-bit dtype: in float16 the SCALED loss (loss x 65536) overflows for any loss above ~1.
    'bad_loss_cast_to_dtype': {'cells': {'make_scaler': 'def make_scaler(device):\n    """An enabled torch.amp.GradScaler for `device`."""\n    return torch.amp.GradScaler(torch.device(device).type)\n', 'amp_step': 'def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.float16):\n    """One autocast + GradScaler step (clipping the unscaled gradients to max_norm); returns the loss as a float."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    with torch.autocast(inputs.device.type, dtype=dtype):\n        loss = loss_fn(model(inputs), targets).to(dtype)     # the loss in the autocast dtype too\n    scaler.scale(loss).backward()\n    if max_norm is not None:\n        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    scaler.step(optimizer)\n    scaler.update()\n    return loss.item()\n'},
        'lost': {'check_amp_trains': 'that is the loss rounded to float16',
                 'check_grads_match_fp32': 'optimizer steps in amp_step on a normal batch: expected exactly one, o'}},
    # Correct (AMBIGUOUS wording): output under autocast, the loss computed inside the same autocast block but with 
    'ok_loss_in_nested_fp32_block': {'cells': {'make_scaler': 'def make_scaler(device):\n    """An enabled torch.amp.GradScaler for `device`."""\n    return torch.amp.GradScaler(torch.device(device).type)\n', 'amp_step': 'def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.float16):\n    """One autocast + GradScaler step (clipping the unscaled gradients to max_norm); returns the loss as a float."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    with torch.autocast(inputs.device.type, dtype=dtype):\n        out = model(inputs)\n        with torch.autocast(inputs.device.type, enabled=False):   # the loss in float32, as the lesson\'s table suggests\n            loss = loss_fn(out.float(), targets)\n    scaler.scale(loss).backward()\n    if max_norm is not None:\n        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    scaler.step(optimizer)\n    scaler.update()\n    return loss.item()\n'},
        'lost': {}},
}
for _name, _spec in BLIND14.items():
    VARIANTS[f"blind14_{_name}"] = _spec
BLIND15 = {  # blind round 15: cases that were misgraded, graded right since
    # Returns the loss rounded to the 16-bit dtype: bf16 1.3844 -> 1.3828, float16 of a loss x1e-6 is a subnormal of
    'bad_return_in_dtype': {'cells': {'make_scaler': 'def make_scaler(device):\n    """An enabled torch.amp.GradScaler for `device`."""\n    return torch.amp.GradScaler(torch.device(device).type)\n', 'amp_step': 'def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.float16):\n    """One autocast + GradScaler step (clipping the unscaled gradients to max_norm); returns the loss as a float."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    with torch.autocast(inputs.device.type, dtype=dtype):\n        output = model(inputs)\n        loss = loss_fn(output, targets)\n    scaler.scale(loss).backward()\n    if max_norm is not None:\n        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    scaler.step(optimizer)\n    scaler.update()\n    return loss.detach().to(dtype).item()   # the loss \'in dtype\', as computed\n'},
        'lost': {'check_amp_trains': 'that is the loss rounded to'}},
    # Calls optimizer.step() after scaler.step(): every update applied twice (grads already unscaled in place; teste
    'bad_double_step': {'cells': {'make_scaler': 'def make_scaler(device):\n    """An enabled torch.amp.GradScaler for `device`."""\n    return torch.amp.GradScaler(torch.device(device).type)\n', 'amp_step': 'def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.float16):\n    """One autocast + GradScaler step (clipping the unscaled gradients to max_norm); returns the loss as a float."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    with torch.autocast(inputs.device.type, dtype=dtype):\n        output = model(inputs)\n        loss = loss_fn(output, targets)\n    scaler.scale(loss).backward()\n    if max_norm is not None:\n        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    scaler.step(optimizer)\n    optimizer.step()   # make sure the optimizer really stepped\n    scaler.update()\n    return loss.item()\n'},
        'lost': {'check_overflow_skipped': 'the weights after amp_step on a batch whose float', 'check_grads_match_fp32': 'optimizer steps in amp_step on a normal batch: expected exactly one, o'}},
}
for _name, _spec in BLIND15.items():
    VARIANTS[f"blind15_{_name}"] = _spec
BLIND16 = {  # blind round 16: cases that were misgraded, graded right since
    # In bfloat16 it bypasses the scaler it was given (even an ENABLED one, as section 5's bfloat16 switch passes): 
    'bad_bf16_bypasses_scaler': {'cells': {'make_scaler': 'def make_scaler(device):\n    """An enabled torch.amp.GradScaler for `device`."""\n    return torch.amp.GradScaler(torch.device(device).type)\n', 'amp_step': 'def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.float16):\n    """One autocast + GradScaler step (clipping the unscaled gradients to max_norm); returns the loss as a float."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    with torch.autocast(inputs.device.type, dtype=dtype):\n        loss = loss_fn(model(inputs), targets)\n    if dtype == torch.bfloat16:          # bfloat16 needs no loss scaling: plain step\n        loss.backward()\n        if max_norm is not None:\n            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n        optimizer.step()\n        return loss.item()\n    scaler.scale(loss).backward()\n    if max_norm is not None:\n        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    scaler.step(optimizer)\n    scaler.update()\n    return loss.item()\n'},
        'lost': {'check_overflow_skipped': 'a batch with a NaN in it (bfloat16, an enabled scaler)'}},
    # Computes scaler.scale(loss) but backpropagates the UNSCALED loss: small float16 gradients underflow as without
    'bad_backward_unscaled_variable': {'cells': {'make_scaler': 'def make_scaler(device):\n    """An enabled torch.amp.GradScaler for `device`."""\n    return torch.amp.GradScaler(torch.device(device).type)\n', 'amp_step': 'def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.float16):\n    """One autocast + GradScaler step (clipping the unscaled gradients to max_norm); returns the loss as a float."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    with torch.autocast(inputs.device.type, dtype=dtype):\n        loss = loss_fn(model(inputs), targets)\n    scaled = scaler.scale(loss)\n    loss.backward()                      # meant scaled.backward()\n    if max_norm is not None:\n        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    scaler.step(optimizer)\n    scaler.update()\n    return loss.item()\n'},
        'lost': {'check_amp_trains': 'the loss over 20 amp_steps (sgd, float', 'check_grads_match_fp32': 'the gradients optimizer.step() used on a normal batch (float', 'check_clip_unscaled': 'the gradients optimizer.step() used with max_norm='}},
}
for _name, _spec in BLIND16.items():
    VARIANTS[f"blind16_{_name}"] = _spec
BLIND17 = {  # blind round 17: cases that were misgraded, graded right since
    # Changes the signature's default dtype to bfloat16 (text: dtype=torch.float16). A caller that omits dtype gets 
    'bad_default_dtype_bfloat16': {'cells': {'make_scaler': 'def make_scaler(device):\n    """An enabled torch.amp.GradScaler for `device`."""\n    return torch.amp.GradScaler(torch.device(device).type)\n', 'amp_step': 'def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.bfloat16):  # bfloat16: \'safer\' default, no underflow\n    """One autocast + GradScaler step (clipping the unscaled gradients to max_norm); returns the loss as a float."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    with torch.autocast(inputs.device.type, dtype=dtype):\n        loss = loss_fn(model(inputs), targets)\n    scaler.scale(loss).backward()\n    if max_norm is not None:\n        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    scaler.step(optimizer)\n    scaler.update()\n    return loss.item()\n'},
        'lost': {'check_amp_trains': "the dtype of the model's first Linear output in amp_step called withou"}},
    # Global state leak: turns autograd off after the step and never back on. The first call is right; the second ca
    'bad_grad_mode_leak': {'cells': {'make_scaler': 'def make_scaler(device):\n    """An enabled torch.amp.GradScaler for `device`."""\n    return torch.amp.GradScaler(torch.device(device).type)\n', 'amp_step': 'def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.float16):\n    """One autocast + GradScaler step (clipping the unscaled gradients to max_norm); returns the loss as a float."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    with torch.autocast(inputs.device.type, dtype=dtype):\n        loss = loss_fn(model(inputs), targets)\n    scaler.scale(loss).backward()\n    if max_norm is not None:\n        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    scaler.step(optimizer)\n    scaler.update()\n    torch.set_grad_enabled(False)   # \'done with autograd for this step\'\n    return loss.item()\n'},
        'lost': {'check_amp_trains': 'amp_step switched autograd off for the whole process'}},
    # Guards step AND update with scaler.is_enabled(): with a disabled scaler (the text's bfloat16 recipe) the optim
    'bad_no_step_when_disabled': {'cells': {'make_scaler': 'def make_scaler(device):\n    """An enabled torch.amp.GradScaler for `device`."""\n    return torch.amp.GradScaler(torch.device(device).type)\n', 'amp_step': 'def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.float16):\n    """One autocast + GradScaler step (clipping the unscaled gradients to max_norm); returns the loss as a float."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    with torch.autocast(inputs.device.type, dtype=dtype):\n        loss = loss_fn(model(inputs), targets)\n    scaler.scale(loss).backward()\n    if max_norm is not None:\n        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    if scaler.is_enabled():          # a disabled scaler does nothing\n        scaler.step(optimizer)\n        scaler.update()\n    return loss.item()\n'},
        'lost': {'check_amp_trains': 'optimizer steps in amp_step with a disabled scaler, GradScaler(enabled'}},
}
for _name, _spec in BLIND17.items():
    VARIANTS[f"blind17_{_name}"] = _spec


BLIND18 = {  # blind round 18: cases that were misgraded, graded right since
    # Runs an unscaled backward first (to log a gradient norm) and then the scaled one WITHOUT zeroing: the gradient
    'bad_backward_twice_for_logging': {'cells': {'make_scaler': 'def make_scaler(device):\n    """An enabled torch.amp.GradScaler for `device`."""\n    return torch.amp.GradScaler(torch.device(device).type)\n', 'amp_step': 'def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.float16):\n    """One autocast + GradScaler step (clipping the unscaled gradients to max_norm); returns the loss as a float."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    with torch.autocast(inputs.device.type, dtype=dtype):\n        loss = loss_fn(model(inputs), targets)\n    # first the plain backward, to log the true gradient norm (keep the graph for the scaled one)\n    loss.backward(retain_graph=True)\n    true_norm = sum(p.grad.float().norm() ** 2 for p in model.parameters() if p.grad is not None) ** 0.5\n    scaler.scale(loss).backward()\n    if max_norm is not None:\n        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    scaler.step(optimizer)\n    scaler.update()\n    return loss.item()\n'},
        'lost': {'check_grads_match_fp32': 'the gradients optimizer.step() used on a disabled scaler, GradScaler(enabled=False) (bfloat16'}},
    # Computes right, but sets the device's GLOBAL default autocast dtype (torch.set_autocast_dtype) and never resto
    'bad_set_autocast_dtype_leak': {'cells': {'make_scaler': 'def make_scaler(device):\n    """An enabled torch.amp.GradScaler for `device`."""\n    return torch.amp.GradScaler(torch.device(device).type)\n', 'amp_step': 'def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.float16):\n    """One autocast + GradScaler step (clipping the unscaled gradients to max_norm); returns the loss as a float."""\n    inputs, targets = batch\n    kind = inputs.device.type\n    torch.set_autocast_dtype(kind, dtype)      # make `dtype` this device\'s autocast dtype\n    optimizer.zero_grad()\n    with torch.autocast(kind):\n        loss = loss_fn(model(inputs), targets)\n    scaler.scale(loss).backward()\n    if max_norm is not None:\n        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    scaler.step(optimizer)\n    scaler.update()\n    return loss.item()\n'},
        'lost': {'check_amp_trains': 'the default dtype of torch.autocast(device_type) when amp_step returns'}},
}
for _name, _spec in BLIND18.items():
    VARIANTS[f"blind18_{_name}"] = _spec


BLIND19 = {  # blind round 19: cases that were misgraded, graded right since
    # Steps the optimizer directly whenever the LOSS is finite. But gradients can overflow in the backward with a fi
    'bad_bypass_scaler_when_loss_finite': {'cells': {'make_scaler': 'def make_scaler(device):\n    """An enabled torch.amp.GradScaler for `device`."""\n    return torch.amp.GradScaler(torch.device(device).type)\n', 'amp_step': 'def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.float16):\n    """One autocast step; the scaler only steps in when the loss itself overflowed."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    with torch.autocast(inputs.device.type, dtype=dtype):\n        loss = loss_fn(model(inputs), targets)\n    scaler.scale(loss).backward()\n    scaler.unscale_(optimizer)\n    if max_norm is not None:\n        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    if torch.isfinite(loss):\n        optimizer.step()            # finite loss: nothing overflowed, step directly\n    else:\n        scaler.step(optimizer)      # skipped: the scaler saw the inf\n    scaler.update()\n    return loss.item()\n'},
        'lost': {'check_overflow_skipped': 'a finite loss does not mean finite gradients'}},
    # Adds its own rule: when the unscaled norm is above 100x max_norm it zeroes the gradients (skips the update) in
    'bad_zero_grads_when_exploding': {'cells': {'make_scaler': 'def make_scaler(device):\n    """An enabled torch.amp.GradScaler for `device`."""\n    return torch.amp.GradScaler(torch.device(device).type)\n', 'amp_step': 'def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.float16):\n    """One autocast + GradScaler step; returns the loss as a float."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    with torch.autocast(inputs.device.type, dtype=dtype):\n        loss = loss_fn(model(inputs), targets)\n    scaler.scale(loss).backward()\n    if max_norm is not None:\n        scaler.unscale_(optimizer)\n        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n        if norm > 100 * max_norm:               # \'exploding\': better skip this one\n            optimizer.zero_grad()\n    scaler.step(optimizer)\n    scaler.update()\n    return loss.item()\n'},
        'lost': {'check_clip_unscaled': 'the gradients at the step are all zero'}},
    # make_scaler maps a CUDA device to a 'cpu' scaler whenever CUDA is missing (and creates a tensor on the device 
    'bad_make_scaler_from_tensor_device_of_default': {'cells': {'make_scaler': 'def make_scaler(device):\n    """An enabled torch.amp.GradScaler for `device`."""\n    # where tensors are created by default is where training happens\n    kind = torch.empty(0, device=device).device.type if torch.device(device).type != "cuda" or torch.cuda.is_available() else "cpu"\n    return torch.amp.GradScaler(kind)\n', 'amp_step': 'def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.float16):\n    """One autocast + GradScaler step (clipping the unscaled gradients to max_norm); returns the loss as a float."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    with torch.autocast(inputs.device.type, dtype=dtype):\n        loss = loss_fn(model(inputs), targets)\n    scaler.scale(loss).backward()\n    if max_norm is not None:\n        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    scaler.step(optimizer)\n    scaler.update()\n    return loss.item()\n'},
        'lost': {'check_make_scaler': 'on this machine, without CUDA'}},
}
for _name, _spec in BLIND19.items():
    VARIANTS[f"blind19_{_name}"] = _spec


BLIND20 = {  # blind round 20: cases that were misgraded, graded right since
    # AMBIGUOUS: enabled, right device type, default initial scale (all 3a lists), but backoff_factor=0.25: an overf
    'bad_scaler_backoff_quarter': {'cells': {'make_scaler': 'def make_scaler(device):\n    """An enabled GradScaler for `device`; backs off 4x on overflow to get out of a bad scale quickly."""\n    kind = device.type if isinstance(device, torch.device) else torch.device(device).type\n    return torch.amp.GradScaler(kind, init_scale=65536.0, backoff_factor=0.25)\n', 'amp_step': 'def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.float16):\n    """One autocast + GradScaler step (clipping the unscaled gradients to max_norm); returns the loss as a float."""\n    inputs, targets = batch\n    optimizer.zero_grad()\n    with torch.autocast(inputs.device.type, dtype=dtype):\n        output = model(inputs)\n        loss = loss_fn(output, targets)\n    scaler.scale(loss).backward()\n    if max_norm is not None:\n        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    scaler.step(optimizer)\n    scaler.update()\n    return loss.item()\n'},
        'lost': {'check_make_scaler': 'GradScaler settings: expected'}},
    # Reseeds torch's global generator at every step 'for reproducibility': every Dropout mask is the same at every 
    'bad_reseeds_every_step': {'cells': {'make_scaler': 'def make_scaler(device):\n    """An enabled torch.amp.GradScaler for `device`."""\n    return torch.amp.GradScaler(torch.device(device).type)\n', 'amp_step': 'def amp_step(model, batch, loss_fn, optimizer, scaler, max_norm=None, dtype=torch.float16):\n    """One autocast + GradScaler step, reproducible: the same seed for every step."""\n    torch.manual_seed(0)\n    inputs, targets = batch\n    optimizer.zero_grad()\n    with torch.autocast(inputs.device.type, dtype=dtype):\n        loss = loss_fn(model(inputs), targets)\n    scaler.scale(loss).backward()\n    if max_norm is not None:\n        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)\n    scaler.step(optimizer)\n    scaler.update()\n    return loss.item()\n'},
        'lost': {'check_amp_trains': 'amp_step reseeds the global random stream'}},
}
for _name, _spec in BLIND20.items():
    VARIANTS[f"blind20_{_name}"] = _spec
