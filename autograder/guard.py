"""Kernel-side integrity guard, executed in the grading kernel before any learner code.

It snapshots the check functions (every trainclinic module), `CheckFailed`, the builtins and torch's main
namespaces. Before every cell it puts back anything a cell changed (so a patch made in an answer cell is
undone before the tests run); after every cell it verifies nothing changed during the cell, and prints a
seal: an HMAC, keyed by a secret the sandbox hands over on a pipe, of the cell's execution
count. The grader keeps a test cell's points only when its seal is valid, so a test cell whose checks were
tampered with (or a kernel whose guard was switched off) scores 0.

What it cannot stop: code that digs the secret out of this module's closures (gc/frame introspection),
background threads or finalizers that patch and unpatch around the check, or patches of objects it does not
snapshot (deep inside torch or the standard library). Those remain a matter for review.
"""


def _install():
    import builtins
    import hashlib
    import hmac
    import importlib
    import os
    import pkgutil
    import sys
    import types

    fd = os.environ.pop("TRAINCLINIC_GUARD_FD", "")
    token = b""
    if fd:  # the sandbox hands the secret over a pipe: it never sits in the environment
        token = os.read(int(fd), 256)
        os.close(int(fd))
    import torch
    import torch.nn.functional
    import trainclinic


    names = ["trainclinic"] + [m.name for m in pkgutil.walk_packages(trainclinic.__path__, prefix="trainclinic.")]
    names = [n for n in names if not n.endswith("plots")] + [n for n in names if n.endswith("plots")]
    mods = {}
    for name in names:
        try:
            mods[name] = importlib.import_module(name)
        except Exception:  # a module that needs an optional dependency: nothing to protect
            pass
    volatile = {"_", "__", "___", "exit", "quit", "get_ipython", "display", "__IPYTHON__", "_ih", "_oh", "_dh", "In", "Out",
                "input", "raw_input", "getpass"}  # ipykernel rebinds input() for every execution

    spaces = []  # (label, object, snapshot dict)
    funcs = {}  # id -> (label, function, (code, defaults, kwdefaults))

    def remember_function(label, fn, depth=0):
        if id(fn) in funcs or depth > 3:
            return
        funcs[id(fn)] = (label, fn, (fn.__code__, fn.__defaults__, fn.__kwdefaults__))
        wrapped = getattr(fn, "__wrapped__", None)
        if isinstance(wrapped, types.FunctionType):
            remember_function(label + ".__wrapped__", wrapped, depth + 1)
        for cell in fn.__closure__ or ():
            try:
                value = cell.cell_contents
            except ValueError:
                continue
            if isinstance(value, types.FunctionType):
                remember_function(f"{label}.<closure {value.__name__}>", value, depth + 1)

    for name, mod in mods.items():
        snap = dict(vars(mod))
        spaces.append((name, mod, snap))
        for key, value in snap.items():
            if isinstance(value, types.FunctionType) and getattr(value, "__module__", "").startswith("trainclinic"):
                remember_function(f"{name}.{key}", value)
            elif isinstance(value, type) and value.__module__.startswith("trainclinic") and value.__module__ == name:
                spaces.append((f"{name}.{key}", value, {k: v for k, v in vars(value).items() if k not in ("__dict__", "__weakref__")}))
                for k, v in vars(value).items():
                    if isinstance(v, types.FunctionType):
                        remember_function(f"{name}.{key}.{k}", v)
    spaces.append(("builtins", builtins, {k: v for k, v in vars(builtins).items() if k not in volatile}))
    for label, obj in (("torch", torch), ("torch.nn.functional", torch.nn.functional), ("torch.Tensor", torch.Tensor),
                       ("torch.nn.Module", torch.nn.Module)):
        spaces.append((label, obj, dict(vars(obj))))
    module_ids = {name: mod for name, mod in mods.items()}

    def sweep():
        """Put everything back; return the labels of what had changed."""
        changed = []
        for name, mod in module_ids.items():
            if sys.modules.get(name) is not mod:
                changed.append(f"sys.modules[{name!r}]")
                sys.modules[name] = mod
        for label, obj, snap in spaces:
            now = vars(obj)
            for key, value in snap.items():
                if key not in now or now[key] is not value:
                    new = now.get(key)
                    code = getattr(new, "__code__", None)
                    if getattr(new, "__wrapped__", None) is value and code and "/torch/" in code.co_filename:
                        snap[key] = new  # torch wrapping its own function (torch._dynamo does on import)
                        continue
                    changed.append(f"{label}.{key}")
                    try:
                        setattr(obj, key, value)
                    except (AttributeError, TypeError):
                        pass
        for label, fn, (code, defaults, kwdefaults) in funcs.values():
            if fn.__code__ is not code or fn.__defaults__ is not defaults or fn.__kwdefaults__ is not kwdefaults:
                changed.append(label)
                fn.__code__, fn.__defaults__, fn.__kwdefaults__ = code, defaults, kwdefaults
        return changed

    out = sys.stdout
    write = type(out).write
    flush = type(out).flush
    ip = get_ipython()  # noqa: F821
    state = {"before": []}

    def pre(*args):
        state["before"] = sweep()

    def post(result=None):
        during = sweep()
        text = ""
        if state["before"]:
            text += "\n⚠ trainclinic grader: an earlier cell had changed " + ", ".join(sorted(set(state["before"]))[:8]) + " (put back before this cell ran)"
        if during:
            text += "\n⚠ trainclinic grader: this cell changed " + ", ".join(sorted(set(during))[:8]) + " (put back; no seal)"
        else:
            count = ip.execution_count - 1 if result is None else getattr(result, "execution_count", None)
            mac = hmac.new(token, str(count).encode(), hashlib.sha256).hexdigest()[:24]
            text += f"\n[trainclinic seal {count} {mac}]"
        write(out, text + "\n")
        flush(out)

    ip.events.register("pre_run_cell", pre)
    ip.events.register("post_run_cell", post)


_install()
del _install
