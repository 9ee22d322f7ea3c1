"""What a learner in Colab (or any plain Jupyter) meets, short of Colab itself.

(a) The setup cell, in a fresh Python where trainclinic is not importable and subprocess.run is mocked:
    it asks pip for trainclinic only, with --no-deps, from [tool.trainclinic] in pyproject.toml (never torch);
    where trainclinic is importable it installs nothing.
(b) Every release notebook carries the badge and setup cell stamped with the configured repository, and
    tools/release.py stamps a different REPO/BRANCH into every place consistently (on a temporary copy).
(c) Colab's own stack (Python 3.12, its CUDA-build torch on a CPU runtime, ipywidgets 7.7.1): the compatibility
    suite's colab environment runs every lesson there (tools/compat.py, tests/test_runtimes.py).
(d) Learners check their own work without nbgrader: the colab and floor runtimes have none, and every solution
    runs there with its checks (tests/test_runtimes.py).
"""
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from browser_helpers import ROOT, lessons

LESSONS = lessons()
CONF = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["trainclinic"]
REPO, BRANCH = CONF["repository"], CONF["branch"]
BADGE_IMG = "https://colab.research.google.com/assets/colab-badge.svg"


def _src(cell):
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _cells(path):
    return json.loads(Path(path).read_text())["cells"]


def _setup(path):
    found = [c for c in _cells(path) if c.get("metadata", {}).get("nbgrader", {}).get("grade_id") == "setup"]
    assert len(found) == 1, f"{path}: {len(found)} setup cells"
    return _src(found[0])


def _clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("NBGRADER_EXECUTION", "TRAINCLINIC_STATIC", "PYTHONPATH", "JPY_PARENT_PID", "MPLBACKEND")
           and not k.startswith("JUPYTER")}
    env.update(extra)
    return env


# ---- (a) the setup cell ---------------------------------------------------------------------------------

# Runs a setup cell with subprocess.run recorded instead of run. With hide=True, trainclinic is first made
# unimportable (its sys.path entry and any editable-install finder removed), and the recorded "pip install"
# puts it back, as a real install would. Prints the recorded calls as JSON on the last line.
SETUP_DRIVER = r'''
import importlib.util, json, subprocess, sys
from pathlib import Path
hide, src_dir, code = json.loads(sys.argv[1])
calls = []
if hide:
    sys.path[:] = [p for p in sys.path if not (Path(p or ".") / "trainclinic" / "__init__.py").exists()]
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in type(f).__name__.lower()
                        and "editable" not in getattr(f, "__name__", "").lower()]
    sys.path_importer_cache.clear()
    assert importlib.util.find_spec("trainclinic") is None, "trainclinic is still importable"
def fake_run(args, *a, **kw):
    calls.append({"args": list(args), "kw": {k: repr(v) for k, v in kw.items()}})
    sys.path.insert(0, src_dir)
    importlib.invalidate_caches()
    return subprocess.CompletedProcess(args, 0)
subprocess.run = fake_run
code = "\n".join(line for line in code.splitlines() if not line.lstrip().startswith(("%", "!")))
exec(compile(code, "<setup cell>", "exec"), {"__name__": "__main__"})
import trainclinic
print(json.dumps({"calls": calls, "trainclinic": trainclinic.__file__}))
'''


def _run_setup(code, hide):
    proc = subprocess.run([sys.executable, "-c", SETUP_DRIVER, json.dumps([hide, str(ROOT / "src"), code])],
                          capture_output=True, text=True, timeout=120, cwd=ROOT / "tests", env=_clean_env())
    assert proc.returncode == 0, f"the setup cell failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stdout


@pytest.mark.parametrize("lesson", LESSONS)
def test_setup_installs_only_trainclinic_without_deps(lesson):
    code = _setup(ROOT / "notebooks" / lesson / f"{lesson}.ipynb")
    result, out = _run_setup(code, hide=True)
    calls = result["calls"]
    assert len(calls) == 1, f"expected one pip call, got {calls}"
    args = calls[0]["args"]
    assert args[:4] == [sys.executable, "-m", "pip", "install"], args
    assert "--no-deps" in args, f"pip must not touch Colab's torch: {args}"
    assert args[-1] == f"git+{REPO}@{BRANCH}", f"installs {args[-1]}, pyproject says git+{REPO}@{BRANCH}"
    assert not any("torch" in a.replace("trainclinic", "") for a in args), f"the install names torch: {args}"
    assert not any(a in ("-U", "--upgrade", "--force-reinstall") for a in args), args
    assert calls[0]["kw"].get("check") == "True", "a failed install must stop the setup cell"
    assert "trainclinic:" in out, "the banner did not print after the install"


@pytest.mark.parametrize("lesson", LESSONS)
def test_setup_installs_nothing_when_trainclinic_is_there(lesson):
    code = _setup(ROOT / "notebooks" / lesson / f"{lesson}.ipynb")
    result, out = _run_setup(code, hide=False)
    assert result["calls"] == [], f"trainclinic is importable, yet the setup cell ran {result['calls']}"
    assert "trainclinic:" in out


# ---- (b) badge and stamping ----------------------------------------------------------------------------

def _badge_url(lesson, repo, branch):
    path = repo.removeprefix("https://github.com/")
    return f"https://colab.research.google.com/github/{path}/blob/{branch}/notebooks/{lesson}/{lesson}.ipynb"


@pytest.mark.parametrize("lesson", LESSONS)
def test_release_has_badge_and_setup_stamped(lesson):
    cells = _cells(ROOT / "notebooks" / lesson / f"{lesson}.ipynb")
    intro = _src(cells[0])
    assert f"[![Open In Colab]({BADGE_IMG})]({_badge_url(lesson, REPO, BRANCH)})" in intro, \
        f"{lesson}: the first cell lacks the Colab badge for {REPO}@{BRANCH}"
    assert f'"git+{REPO}@{BRANCH}"' in _setup(ROOT / "notebooks" / lesson / f"{lesson}.ipynb")
    text = "".join(_src(c) for c in cells)
    assert text.count("colab.research.google.com/github/") == 1, f"{lesson}: more than one badge link"


def _digest(paths):
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(str(p).encode() + Path(p).read_bytes())
    return h.hexdigest()


def test_release_stamps_repo_everywhere(tmp_path):
    """REPO/BRANCH in the environment reach the badge and the setup cell of every lesson: text source, notebooks."""
    tracked = [p for d in ("solutions", "notebooks") for p in (ROOT / d).rglob("*.ipynb")] + list((ROOT / "solutions").rglob("*.py"))
    before = _digest(tracked)
    copy = tmp_path / "course"
    for d in ("tools", "solutions", "autograder", "src"):
        shutil.copytree(ROOT / d, copy / d, ignore=shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints"))
    shutil.copy(ROOT / "pyproject.toml", copy)
    repo, branch = "https://github.com/example-school/ml-clinic", "spring-2027"
    lesson = LESSONS[0]
    driver = ("import sys; sys.path.insert(0, 'tools'); import release\n"
              "repo, branch = release.settings()\n"
              "for lesson in release.lessons(): release.stamp(lesson, repo, branch); release.build(lesson)\n"
              f"release.generate({lesson!r})\n")
    env = _clean_env(REPO=repo, BRANCH=branch, TRAINCLINIC_GRADEBOOK=str(tmp_path / "gradebook.db"),
                     PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    proc = subprocess.run([sys.executable, "-c", driver], cwd=copy, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    old = REPO.removeprefix("https://github.com/")
    stamped = [copy / "solutions" / name / f"{name}.ipynb" for name in sorted(p.name for p in (copy / "solutions").iterdir())
               if (copy / "solutions" / name / f"{name}.ipynb").exists()]
    stamped.append(copy / "notebooks" / lesson / f"{lesson}.ipynb")  # generated by nbgrader from the stamped source
    for path in stamped:
        name = path.parent.name
        text = "".join(_src(c) for c in _cells(path))
        assert old not in text, f"{path.relative_to(copy)} still names {old}"
        assert f"[![Open In Colab]({BADGE_IMG})]({_badge_url(name, repo, branch)})" in text, f"{path}: badge not stamped"
        assert f'"git+{repo}@{branch}"' in _setup(path), f"{path}: setup cell not stamped"
    for name in LESSONS:  # the text source a person edits carries the same stamps
        text = (copy / "solutions" / name / f"{name}.py").read_text()
        assert old not in text and _badge_url(name, repo, branch) in text and f'"git+{repo}@{branch}"' in text, name
    assert _digest(tracked) == before, "stamping a copy changed the repository's notebooks"


def _execute(python, path, env):
    """Execute one notebook in place with `python`'s own kernel; the executed notebook (dict) and seconds."""
    proc = subprocess.run([str(python), str(ROOT / "tests" / "browser_helpers.py"), "execute", str(path)],
                          capture_output=True, text=True, timeout=600, cwd=path.parent, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    seconds = json.loads(proc.stdout.strip().splitlines()[-1])[str(path)]
    return json.loads(path.read_text()), seconds


def _kernel_env(work, **extra):
    return _clean_env(JUPYTER_DATA_DIR=str(work / "jupyter-data"), IPYTHONDIR=str(work / "ipython"), **extra)


# ---- (d) checks without nbgrader: tests/test_runtimes.py runs every solution, hidden tests included, on the colab
# and floor runtimes, which have no nbgrader (test_learner_runtimes_have_no_nbgrader proves it).


# ---- explore shows what the learner's run() prints and raises --------------------------------------------

EXPLORE_ERROR = """import trainclinic as tc
def run(lr):
    print("training at lr", lr)
    if lr > 0.2:
        raise ValueError("boom: train_step failed")
    return {"step": [0, 1], "loss": [1.0, 0.5], "grad_norm": [1.0, 1.0]}
sliders = tc.explore(run, title="t", lr=("float", 0.0, 1.0, 0.1))"""


def _displayed_outputs(nb):
    """Outputs of every Output widget reachable from a displayed widget view."""
    state = nb["metadata"]["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    todo = [o["data"]["application/vnd.jupyter.widget-view+json"]["model_id"] for c in nb["cells"]
            for o in c.get("outputs", []) if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    seen, outs = set(), []
    while todo:
        mid = todo.pop()
        if mid in seen or mid not in state:
            continue
        seen.add(mid)
        todo += [c.removeprefix("IPY_MODEL_") for c in state[mid]["state"].get("children", [])]
        if state[mid]["model_name"] == "OutputModel":
            outs += state[mid]["state"].get("outputs", [])
    return outs


def test_explore_shows_what_run_prints_and_raises(tmp_path):
    nb = {"cells": [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": src}
                    for src in (EXPLORE_ERROR, "sliders['lr'].value = 0.5  # what moving the slider does")],
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
          "nbformat": 4, "nbformat_minor": 4}
    path = tmp_path / "explore.ipynb"
    path.write_text(json.dumps(nb))
    nb, _ = _execute(sys.executable, path, _kernel_env(tmp_path))
    shown = _displayed_outputs(nb)
    assert any(o.get("output_type") == "error" and "boom" in o.get("evalue", "") for o in shown), \
        f"the error raised by run() is not under the sliders: {[o.get('output_type') for o in shown]}"
    assert any("training at lr 0.5" in "".join(o.get("text", "")) for o in shown), "run()'s print is not shown"
