"""The compatibility suite: the course on the runtimes learners have, not only on today's pins.

    python tools/compat.py build [ENV ...]     # build (or reuse) the cached venvs
    python tools/compat.py run [ENV ...]       # build, then run the suite in each; print a report per env
    python tools/compat.py list                # the environments and their pins

Environments (`ENVS`):
  colab  Python 3.12, torch 2.9.1 from PyPI (a CUDA build: on this GPU-less machine it is Colab's CPU
         runtime), ipywidgets 7.7.1, and Colab's matplotlib, numpy and ipykernel;
  floor  the oldest the project declares: Python 3.10, torch 2.4.1 (also a CUDA build), matplotlib 3.7,
         ipywidgets 7.7.1, numpy 1.26;
  pins   today's pins: the project's own .venv (torch 2.13.0 CPU, current everything).

Venvs live outside the clone, in $TRAINCLINIC_COMPAT_DIR (default ~/.cache/trainclinic/compat), one folder
per environment named by a digest of its pins: a rerun reuses them, a changed pin builds a new one. trainclinic
itself is never installed there: PYTHONPATH points at this checkout's src/, so the venv serves any clone.
The CUDA wheels are large (torch 2.9.1 with its nvidia packages is about 3.5 GB to download, 7 GB on disk).

In each environment the suite is pytest, run with that venv's python: the library's unit tests and
tests/test_runtimes.py (every solution notebook in a real kernel, every variant's visible and hidden checks, each
explore reaching its failure, quoted messages). On 'pins' the main suite has already run the unit tests, so
there it runs tests/test_runtimes.py alone (nbgrader itself grades only each lesson's core submissions there).
"""
import argparse
import fcntl
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

__all__ = ["ENVS", "UNIT_TESTS", "venv_dir", "build", "run", "main"]

# What the suite itself needs in each venv (pytest, a kernel and a notebook client), beside the runtime's pins.
# jsonschema < 4.25: later ones import rfc3987-syntax where installed, which builds a grammar on import (3-4 s for every
# notebook client the suite starts; pyproject.toml says the same)
TOOLING = ["ipykernel", "nbclient>=0.10", "nbformat>=5.9", "jsonschema<4.25", "pytest>=8,<9", "pytest-xdist>=3.5"]

ENVS = {
    "colab": {
        "python": "3.12",
        "about": "Colab-like: Python 3.12, torch 2.9.1 CUDA build without a GPU, ipywidgets 7.7.1",
        "packages": ["torch==2.9.1", "numpy==2.0.2", "matplotlib==3.10.0", "ipywidgets==7.7.1", "ipykernel==6.17.1"],
    },
    "floor": {
        "python": "3.10",
        "about": "the declared floor: Python 3.10, torch 2.4.1 CUDA build, matplotlib 3.7, ipywidgets 7.7.1",
        "packages": ["torch==2.4.1", "numpy==1.26.4", "matplotlib==3.7.0", "ipywidgets==7.7.1"],
    },
    "pins": {
        "python": None,  # the project's own .venv, built by `make venv`
        "about": "today's pins: the project's .venv",
        "packages": [],
    },
}

UNIT_TESTS = ["tests/test_library.py", "tests/test_shapes.py", "tests/test_memory.py", "tests/test_nonfinite.py",
              "tests/test_gradients.py", "tests/test_evaluation.py", "tests/test_precision.py", "tests/test_checkpoints.py",
              "tests/test_fingerprint.py", "tests/test_processes.py", "tests/test_graphs.py", "tests/test_run_cells.py",
              "tests/test_clinic.py", "tests/test_distributed.py"]


def cache_root():
    """Where the compatibility venvs live (outside the clone)."""
    return Path(os.environ.get("TRAINCLINIC_COMPAT_DIR", Path.home() / ".cache" / "trainclinic" / "compat"))


def _spec(name):
    env = ENVS[name]
    return {"python": env["python"], "packages": env["packages"], "tooling": TOOLING}


def venv_dir(name):
    """The venv folder of an environment: the project's .venv for 'pins', else a cached one keyed by its pins."""
    if ENVS[name]["python"] is None:
        return Path(os.environ.get("VENV", ROOT / ".venv"))
    digest = hashlib.sha256(json.dumps(_spec(name), sort_keys=True).encode()).hexdigest()[:10]
    return cache_root() / f"{name}-{digest}"


def find_python(version):
    """An interpreter of `version` ('3.12'): pyenv's newest X.Y.*, else a working pythonX.Y on PATH; None if absent."""
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    for cand in sorted(pyenv.glob(f"{version}.*"), key=lambda p: [int(x) for x in p.name.split(".") if x.isdigit()],
                       reverse=True):
        if (cand / "bin" / "python").exists():
            return str(cand / "bin" / "python")
    found = shutil.which(f"python{version}")  # may be a pyenv shim that refuses: try it
    if found and subprocess.run([found, "-c", "pass"], capture_output=True).returncode == 0:
        return found
    return None


def _clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "NBGRADER_EXECUTION", "TRAINCLINIC_STATIC",
                        "JPY_PARENT_PID", "MPLBACKEND")
           and not k.startswith("JUPYTER")}
    env.update(extra)
    return env


def build(name, log=print):
    """Build the environment's venv unless a finished one with the same pins exists; return (python, seconds)."""
    target = venv_dir(name)
    python = target / "bin" / "python"
    if ENVS[name]["python"] is None:
        if not python.exists():
            raise SystemExit(f"{name}: {target} does not exist; run `make venv` first")
        return python, 0.0
    ready = target / ".ready"
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{target}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one builder at a time; the others wait and reuse
        if ready.exists() and python.exists():
            return python, 0.0
        base = find_python(ENVS[name]["python"])
        if base is None:
            raise SystemExit(f"{name}: no Python {ENVS[name]['python']} found (on PATH as python{ENVS[name]['python']}, "
                             f"or under pyenv); install it to build this environment")
        start = time.monotonic()
        partial = target.with_name(target.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        shutil.rmtree(target, ignore_errors=True)
        pip = [str(partial / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        torch = [p for p in ENVS[name]["packages"] if p.startswith("torch")]
        rest = [p for p in ENVS[name]["packages"] if not p.startswith("torch")]
        # torch first, pinned (its CUDA build and nvidia packages come from PyPI), then everything else beside it
        steps = [[base, "-m", "venv", str(partial)], pip + ["--upgrade", "pip"], pip + torch, pip + torch + rest + TOOLING]
        for cmd in steps:
            log(f"{name}: {' '.join(cmd[-4:])}")
            proc = subprocess.run(cmd, capture_output=True, text=True, env=_clean_env())
            if proc.returncode:
                raise SystemExit(f"{name}: building the venv failed at {' '.join(cmd)}:\n{proc.stderr[-3000:]}")
        # a venv's scripts name their own path: rewrite them for the final folder, then move it into place
        for script in (partial / "bin").iterdir():
            if script.is_file() and not script.is_symlink():
                try:
                    text = script.read_text()
                except UnicodeDecodeError:
                    continue
                if str(partial) in text:
                    script.write_text(text.replace(str(partial), str(target)))
        cfg = partial / "pyvenv.cfg"
        cfg.write_text(cfg.read_text().replace(str(partial), str(target)))
        partial.rename(target)
        seconds = time.monotonic() - start
        size = subprocess.run(["du", "-sh", str(target)], capture_output=True, text=True).stdout.split()[0]
        (target / ".ready").write_text(json.dumps({**_spec(name), "seconds": round(seconds), "size": size}))
        log(f"{name}: built {target} in {seconds:.0f} s ({size})")
        return python, seconds


def versions(python):
    """{package: version} of what matters in a venv."""
    code = ("import json, platform, importlib.metadata as m\n"
            "out = {'python': platform.python_version()}\n"
            "for p in ('torch', 'numpy', 'matplotlib', 'ipywidgets', 'ipykernel', 'nbclient'):\n"
            "    try: out[p] = m.version(p)\n"
            "    except m.PackageNotFoundError: out[p] = None\n"
            "import torch; out['cuda build'] = torch.version.cuda; out['cuda available'] = torch.cuda.is_available()\n"
            "print(json.dumps(out))")
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=_clean_env())
    if proc.returncode:
        return {"error": proc.stderr[-500:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run(name, pytest_args=(), log=print):
    """Run the suite in one environment; return (returncode, report dict)."""
    python, built = build(name, log=log)
    report_file = ROOT / "artifacts" / f"compat-{name}.json"
    parts = ROOT / "artifacts" / f"compat-{name}"
    shutil.rmtree(parts, ignore_errors=True)
    parts.mkdir(parents=True)
    temproot = Path(tempfile.gettempdir()) / f"trainclinic-compat-{name}"  # its own: `make test` runs the main suite beside it
    temproot.mkdir(exist_ok=True)
    env = _clean_env(PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1", TRAINCLINIC_RUNTIME=name,
                     TRAINCLINIC_RUNTIME_REPORT=str(parts), PYTEST_DEBUG_TEMPROOT=str(temproot),
                     PATH=f"{python.parent}{os.pathsep}{os.environ.get('PATH', '')}")
    pins = ENVS[name]["python"] is None
    unit = [] if pins else UNIT_TESTS  # on today's pins the main suite has run the unit tests
    cmd = [str(python), "-m", "pytest", "-p", "no:cacheprovider", "-n", os.environ.get("COMPAT_WORKERS", "2"),
           "--dist", "loadgroup", *unit, "tests/test_runtimes.py", *pytest_args]
    log(f"\n== {name}: {ENVS[name]['about']}\n   {python}\n   {json.dumps(versions(python))}", flush=True)
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=env)
    seconds = time.monotonic() - start
    report = {"lessons": {}, "versions": versions(python)}
    for part in sorted(parts.glob("*.json")):
        kind, lesson, variant = part.stem.split("--")
        row = report["lessons"].setdefault(lesson, {"solution": None, "variants": {}, "explore": None, "quotes": None})
        data = json.loads(part.read_text())
        if kind == "solution":
            row["solution"] = data
        elif kind == "variant":
            row["variants"][variant] = data
        else:
            row[kind] = data
    report.update(env=name, returncode=proc.returncode, seconds=round(seconds, 1), built_seconds=round(built))
    report_file.write_text(json.dumps(report, indent=1))
    return proc.returncode, report


def _table(reports):
    lines = ["", "compatibility suite, per environment:"]
    for rep in reports:
        verdict = "PASSED" if rep["returncode"] == 0 else f"FAILED (exit {rep['returncode']})"
        v = rep.get("versions", {})
        lines.append(f"  {rep['env']:<6} {verdict:<18} {rep['seconds']:>7.1f} s   (venv built in {rep['built_seconds']} s, 0 = cached)"
                     f"   python {v.get('python')}, torch {v.get('torch')}, ipywidgets {v.get('ipywidgets')}, "
                     f"matplotlib {v.get('matplotlib')}")
        for lesson, row in sorted(rep.get("lessons", {}).items()):
            sol = row.get("solution")
            sol_text = "-" if sol is None else ("pass" if sol["passed"] else "FAIL") + f" {sol['seconds']:.1f} s"
            var = row.get("variants", {})
            ok = sum(1 for v in var.values() if v["ok"])
            exp = row.get("explore") or {}
            exp_text = ", ".join(f"{(r.get('failing') or {}).get('seconds', '-')} s" for r in exp.get("rows", [])) or "-"
            lines.append(f"      {lesson:<26} solution {sol_text:<12} variants {ok}/{len(var):<4} explore failure run {exp_text}")
    return "\n".join(lines)


def main(argv=None):
    """CLI: build | run | list."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["build", "run", "list"])
    parser.add_argument("envs", nargs="*", help=f"environments (default: all of {', '.join(ENVS)})")
    parser.add_argument("--pytest", default="", help="extra pytest arguments, e.g. \"-k 01_device\"")
    opts = parser.parse_args(argv)
    names = opts.envs or list(ENVS)
    unknown = [n for n in names if n not in ENVS]
    if unknown:
        parser.error(f"unknown environment(s): {', '.join(unknown)}")
    if opts.action == "list":
        for n in names:
            print(f"{n:<6} {venv_dir(n)}\n       {ENVS[n]['about']}: {' '.join(ENVS[n]['packages']) or '(the project .venv)'}")
        return 0
    if opts.action == "build":
        for n in names:
            build(n)
        return 0
    reports, failed = [], 0
    for n in names:
        code, rep = run(n, shlex.split(opts.pytest))
        reports.append(rep)
        failed += code != 0
    print(_table(reports))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
