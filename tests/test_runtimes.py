"""The lessons on whatever runtime runs this file: the compatibility suite's core (tools/compat.py).

`make test-compat` runs it with each environment's python (Colab-like, the declared floor, today's pins):
- every solution notebook in a real Jupyter kernel, live widgets, hidden tests included: every repro cell
  raises, every check prints its ✓, nothing else fails and nothing reaches stderr;
- every variant of tests/variants (wrong and alternative fixes), the reference and the blank release, with
  their visible and hidden checks, executed without Jupyter by tools/run_cells.py's fork server, under
  NBGRADER_EXECUTION as the grader runs them: each check cell keeps or loses its points as the variant says,
  with the message it names;
- every lesson's explore section reaches its failure (the `failure=` settings of its `tc.explore` call) and
  stays healthy at its defaults.
With TRAINCLINIC_RUNTIME_REPORT set (a folder), each test writes its figures there for compat.py's report.
"""
import ast
import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from browser_helpers import problems
from conftest import LESSONS, ROOT, grade_id, source_nb
from nbgrader_run import submission, variants

pytestmark = pytest.mark.runtime

RUNTIME = os.environ.get("TRAINCLINIC_RUNTIME", "here")
REPORT = os.environ.get("TRAINCLINIC_RUNTIME_REPORT")


def _report(kind, lesson, name, payload):
    if REPORT:
        folder = Path(REPORT)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{kind}--{lesson}--{name}.json").write_text(json.dumps(payload))


def _kernel_env(tmp):
    env = {k: v for k, v in os.environ.items()
           if k not in ("NBGRADER_EXECUTION", "TRAINCLINIC_STATIC", "JPY_PARENT_PID", "MPLBACKEND")
           and not k.startswith("JUPYTER")}
    env.update(JUPYTER_DATA_DIR=str(tmp / "jupyter-data"), IPYTHONDIR=str(tmp / "ipython"),
               PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1")
    return env


# ---- solutions in a real kernel ---------------------------------------------------------------------------

EXECUTE = r'''
import json, sys, time, nbformat
from nbclient import NotebookClient
sys.path.insert(0, sys.argv[3])
from bench_stall import stall_hooks  # a reply that came only at the cell timeout fails the run, naming the cell
path = sys.argv[1]
nb = nbformat.read(path, as_version=4)
start = time.perf_counter()
try:
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": sys.argv[2]}},
                   **stall_hooks(120)).execute()
    failed = None
except Exception as exc:
    failed = f"{type(exc).__name__}: {str(exc)[-1500:]}"
nbformat.write(nb, path)
print(json.dumps({"seconds": round(time.perf_counter() - start, 2), "failed": failed}))
'''


@pytest.fixture(scope="session")
def executed(tmp_path_factory):
    """Execute a lesson's solution in a real kernel once per test run: (notebook dict, run info)."""
    folder = tmp_path_factory.mktemp("executed")
    cache = {}

    def get(lesson):
        if lesson not in cache:
            path = folder / f"{lesson}.ipynb"
            path.write_text(source_nb(lesson).read_text())
            proc = subprocess.run([sys.executable, "-c", EXECUTE, str(path), str(source_nb(lesson).parent),
                                   str(ROOT / "tools")],
                                  capture_output=True, text=True, timeout=600, env=_kernel_env(folder))
            assert proc.returncode == 0, proc.stderr[-3000:]
            cache[lesson] = (json.loads(path.read_text()), json.loads(proc.stdout.strip().splitlines()[-1]))
        return cache[lesson]

    return get


@pytest.mark.parametrize("lesson", [pytest.param(l, marks=pytest.mark.xdist_group(f"rt-{l}")) for l in LESSONS])
def test_solution_runs_in_a_kernel(lesson, executed):
    nb, run = executed(lesson)
    found = problems(nb, live=True) + ([f"execution stopped: {run['failed']}"] if run["failed"] else [])
    _report("solution", lesson, "reference", {"passed": not found, "seconds": run["seconds"], "problems": found})
    assert not found, f"{lesson} on {RUNTIME}:\n- " + "\n- ".join(found)


def test_learner_runtimes_have_no_nbgrader():
    """colab and floor are a learner's machine: no nbgrader, so the solution runs above prove the visible and hidden
    checks pass without it (a learner in Colab never installs it)."""
    import importlib.util

    if RUNTIME not in ("colab", "floor"):
        pytest.skip(f"{RUNTIME} is an instructor's runtime (nbgrader installed on purpose)")
    assert importlib.util.find_spec("nbgrader") is None, f"nbgrader is installed on {RUNTIME}"


# ---- variants, through the fork server ------------------------------------------------------------------

class Server:
    """tools/run_cells.py --serve, one per pytest process: torch imported once, each notebook in a fork."""

    def __init__(self):
        env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER")}
        env.update(NBGRADER_EXECUTION="autograde", MPLBACKEND="Agg", OMP_NUM_THREADS="1",
                   PYTHONPATH=str(ROOT / "src"))
        self.proc = subprocess.Popen([sys.executable, str(ROOT / "tools" / "run_cells.py"), "--serve"], text=True,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        self.lock = threading.Lock()

    def run(self, path, timeout=120, graded_only=False, share_prefix=False):
        job = {"path": str(path), "timeout": timeout, "graded_only": graded_only, "share_prefix": share_prefix}
        with self.lock:
            self.proc.stdin.write(json.dumps(job) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"the fork server died (exit {self.proc.poll()})")
        return json.loads(line)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="session")
def server():
    srv = Server()
    yield srv
    srv.close()


# No xdist group: each worker has its own fork server, so a lesson's variants spread over both workers (grouped,
# one lesson's 26-80 variants ran on one worker while the other idled).
VARIANT_CASES = [pytest.param(lesson, name, id=f"{lesson}-{name}")
                 for lesson in LESSONS for name in variants(lesson)]


def _message(verdict):
    err = verdict.get("error") or {}
    return f"{err.get('type', '')}: {err.get('message', '')}\n{verdict.get('stdout', '')}\n{verdict.get('stderr', '')}"


@pytest.mark.parametrize("lesson,name", VARIANT_CASES)
def test_variant_checks(server, lesson, name, tmp_path):
    spec = variants(lesson)[name]
    folder = tmp_path / lesson
    folder.mkdir()
    path = folder / f"{lesson}.ipynb"
    nb = submission(lesson, spec)
    if spec["cells"] is None:  # the blank release: add the hidden tests back, as nbgrader's autograde does
        hidden = {grade_id(c): c["source"] for c in json.loads(source_nb(lesson).read_text())["cells"]
                  if c.get("metadata", {}).get("nbgrader", {}).get("grade")}
        for cell in nb["cells"]:
            if grade_id(cell) in hidden:
                cell["source"] = hidden[grade_id(cell)]
    path.write_text(json.dumps(nb))
    # the cells after the last check cannot change a verdict; the cells before the first answer are the lesson's own
    res = server.run(path, graded_only=True, share_prefix=True)
    assert "timeout" not in res and "crash" not in res, f"{lesson}/{name} on {RUNTIME}: {res}"
    graded = res["graded"]
    lost = {gid: "" for gid in graded} if spec["lost"] == "all" else spec["lost"]
    wrong = []
    for gid, verdict in graded.items():
        if gid in lost:
            if verdict["passed"]:
                wrong.append(f"{gid} should lose its points, but passed: {verdict['stdout'][-300:]}")
            elif lost[gid] not in _message(verdict):
                wrong.append(f"{gid} should say {lost[gid]!r}; it said: {_message(verdict)[-600:]}")
        elif not verdict["passed"]:
            wrong.append(f"{gid} should keep its points: {_message(verdict)[-800:]}")
    missing = set(lost) - set(graded)
    if missing:
        wrong.append(f"the variant names check cells the notebook lacks: {sorted(missing)}")
    _report("variant", lesson, name, {"ok": not wrong, "seconds": res["wall"], "wrong": wrong})
    assert not wrong, f"{lesson}/{name} on {RUNTIME}:\n- " + "\n- ".join(wrong)


# ---- explore reaches the failure --------------------------------------------------------------------------

EXPLORE_PROBE = r'''
import trainclinic as _tc
_explored = []
_real_explore = _tc.explore
def _probe_explore(run, title="", failure=None, **controls):
    _explored.append((run, title, failure, controls))
    return _real_explore(run, title, failure=failure, **controls)
_tc.explore = _probe_explore
'''

EXPLORE_REPORT = r'''
import json as _json, time as _time
from trainclinic import plots as _plots
def _outcome(run, values):
    start = _time.perf_counter()
    try:
        history = run(**values)
        shown = history.get("failure") if isinstance(history, dict) else None
        _plots.draw(history, "probe")
    except Exception as exc:
        shown = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
    return {"failure": shown or None, "seconds": round(_time.perf_counter() - start, 3)}
_rows = []
for _run, _title, _failure, _controls in _explored:
    _defaults = {k: spec[-1] for k, spec in _controls.items()}
    _rows.append({"title": _title, "failure_settings": _failure, "defaults": _outcome(_run, _defaults),
                  "failing": _outcome(_run, {**_defaults, **(_failure or {})}) if _failure else None})
print("EXPLORE " + _json.dumps(_rows, default=str))
'''


@pytest.mark.parametrize("lesson", [pytest.param(l, marks=pytest.mark.xdist_group(f"rt-{l}")) for l in LESSONS])
def test_explore_reaches_its_failure(server, lesson, tmp_path):
    """Each lesson's explore names the settings that show its failure; there the failure shows (raised, or
    reported in history["failure"]), and at the defaults it does not."""
    nb = json.loads(source_nb(lesson).read_text())
    setup = next(i for i, c in enumerate(nb["cells"]) if grade_id(c) == "setup")
    probe = {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": EXPLORE_PROBE}
    report = {"cell_type": "code", "outputs": [], "execution_count": None, "source": EXPLORE_REPORT,
              "metadata": {"nbgrader": {"grade": True, "grade_id": "explore_probe", "points": 0}}}
    nb["cells"] = nb["cells"][:setup + 1] + [probe] + nb["cells"][setup + 1:] + [report]
    path = tmp_path / f"{lesson}.ipynb"
    path.write_text(json.dumps(nb))
    res = server.run(path, timeout=300)
    assert "timeout" not in res and "crash" not in res, res
    verdict = res["graded"].get("explore_probe")
    assert verdict and verdict["passed"], f"the explore probe failed: {verdict}"
    line = next(l for l in verdict["stdout"].splitlines() if l.startswith("EXPLORE "))
    rows = json.loads(line.removeprefix("EXPLORE "))
    _report("explore", lesson, "explore", {"rows": rows})
    assert rows, f"{lesson} has no tc.explore call"
    for row in rows:
        assert row["failure_settings"], f"{lesson}: tc.explore({row['title']!r}) names no failure= settings"
        assert row["defaults"]["failure"] is None, f"{lesson}: at its defaults explore already fails: {row['defaults']}"
        assert row["failing"]["failure"], (f"{lesson}: explore at {row['failure_settings']} does not show the failure "
                                           f"(no exception, no history['failure'])")


# ---- what the lesson quotes is what torch prints ------------------------------------------------------------

QUOTE = re.compile(r"`([^`\n]+)`")
VERSION_MARK = re.compile(r"torch\s*(>=|<=|≥|≤|<|>)\s*(\d+)\.(\d+)")
PLACEHOLDER = re.compile(r"<[^<>]*>|\.\.\.|…")
torch_version = __import__("torch").__version__
TORCH_VERSION = tuple(int(x) for x in re.findall(r"\d+", torch_version)[:2])


def _is_code(text):
    for candidate in (text, text + "\n    pass", text.rstrip(":") + ":\n    pass"):
        try:
            ast.parse(candidate)
            return True
        except SyntaxError:
            pass
    return False


def quoted_messages(markdown):
    """(quote, text before it on its line) for every backticked span that reads as a message, not code."""
    for line in markdown.splitlines():
        for m in QUOTE.finditer(line):
            quote = m.group(1).strip()
            if len(re.findall(r"[A-Za-z]{2,}", quote)) >= 4 and not _is_code(quote):
                yield quote, line[:m.start()]


def _applies(before):
    ops = {">=": tuple.__ge__, "≥": tuple.__ge__, "<=": tuple.__le__, "≤": tuple.__le__, "<": tuple.__lt__,
           ">": tuple.__gt__}
    return all(ops[op](TORCH_VERSION, (int(a), int(b))) for op, a, b in VERSION_MARK.findall(before))


def _norm(text):
    return re.sub(r"\s+", " ", re.sub(r"\x1b\[[0-9;]*m", "", text))


def _fragments(quote, split_values=False):
    parts = PLACEHOLDER.split(quote)
    if split_values:  # a real GPU's message: keep the constant text, drop the values torch interpolates
        parts = [p for part in parts for p in re.split(r"\S*[\d_:]\S*|\b(?:cpu|cuda|mps)\b", part)]
    return [p.strip(" ,.!") for p in parts if len(re.findall(r"[A-Za-z]+", p)) >= (2 if split_values else 3)]


def _printed(nb):
    """Everything the executed notebook showed: streams, errors, text outputs, and output widgets' contents."""
    outs = [o for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])]
    state = nb.get("metadata", {}).get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    outs += [o for model in state.values() for o in model.get("state", {}).get("outputs", [])]
    parts = []
    for o in outs:
        parts += ["".join(o.get("text", "")), f"{o.get('ename', '')}: {o.get('evalue', '')}", "\n".join(o.get("traceback", [])),
                  "".join(o.get("data", {}).get("text/plain", ""))]
    return _norm("\n".join(parts))


_TORCH_STRINGS = []


def torch_strings():
    """The text of the installed torch: its shared libraries and Python sources, as bytes (read once)."""
    if not _TORCH_STRINGS:
        import torch

        base = Path(torch.__file__).parent
        blobs = [p.read_bytes() for p in base.glob("lib/*.so*")]
        blobs += [p.read_bytes() for p in base.rglob("*.py")]
        _TORCH_STRINGS.append(b"\n".join(blobs))
    return _TORCH_STRINGS[0]


@pytest.mark.parametrize("lesson", [pytest.param(l, marks=pytest.mark.xdist_group(f"rt-{l}")) for l in LESSONS])
def test_quoted_messages_are_what_torch_prints(lesson, executed):
    """Every message a lesson quotes appears in its own executed output on this torch, or, marked "real GPU",
    among the installed torch's own strings; "torch >= X.Y"-style marks limit a quote to those versions."""
    nb, _ = executed(lesson)
    printed = _printed(nb)
    wrong, checked = [], 0
    for cell in nb["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        for quote, before in quoted_messages(cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])):
            if not _applies(before):
                continue
            checked += 1
            if "real gpu" in before.lower():
                missing = [f for f in _fragments(quote, split_values=True) if _norm(f).encode() not in torch_strings()]
                where = f"torch {torch_version}'s own strings"
            else:
                missing = [f for f in _fragments(quote) if _norm(f) not in printed]
                where = "the notebook's output"
            if missing:
                wrong.append(f"`{quote}`: {missing} not found in {where}")
    _report("quotes", lesson, "quotes", {"checked": checked, "wrong": wrong})
    assert not wrong, f"{lesson} on torch {torch_version}:\n- " + "\n- ".join(wrong)
