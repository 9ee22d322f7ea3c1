"""Helpers for the browser test: a JupyterLab server on a temporary course copy, and filled-in lessons.

The server runs in its own process group; `stop` ends the group and then every process it started
(kernels run in sessions of their own), so nothing outlives a test run.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

__all__ = ["ROOT", "lessons", "fill", "free_port", "JupyterLab", "failure_message", "execute", "problems"]

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from autograder.lessons import lessons  # noqa: E402  (the course's one lesson list)

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"

# Settings that keep JupyterLab quiet and deterministic: every cell in the DOM (no windowing), no news or
# update pop-ups over the notebook.
LAB_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {"fetchNews": "false", "checkForUpdates": False},
}


def _src(cell):
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _gid(cell):
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def _answer(source):
    """A reference solution as a learner would type it: the BEGIN/END SOLUTION markers removed."""
    return "\n".join(line for line in source.splitlines() if line.strip() not in (BEGIN, END))


def fill(lesson):
    """The release notebook (dict) with every answer cell filled from the solution notebook."""
    release = json.loads((ROOT / "notebooks" / lesson / f"{lesson}.ipynb").read_text())
    source = json.loads((ROOT / "solutions" / lesson / f"{lesson}.ipynb").read_text())
    answers = {_gid(c): _answer(_src(c)) for c in source["cells"] if c.get("metadata", {}).get("nbgrader", {}).get("solution")}
    filled = 0
    for cell in release["cells"]:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if meta.get("solution") and cell["cell_type"] == "code":
            cell["source"] = answers[_gid(cell)]
            filled += 1
    assert filled == len(answers) and filled > 0, f"{lesson}: filled {filled} of {len(answers)} answer cells"
    return release


def failure_message(nb):
    """The failure's message from the lesson's intro ("**The failure:** `RuntimeError: ...`"), or None."""
    for cell in nb["cells"]:
        m = re.search(r"\*\*The failure:\*\*\s*`([^`]+)`", _src(cell))
        if m:
            return m.group(1)
    return None


def free_port():
    """A TCP port on 127.0.0.1 that nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class JupyterLab:
    """JupyterLab serving `root` on a free port, token-less, as root if need be; a context manager."""

    def __init__(self, root, home):
        self.root, self.home = Path(root), Path(home)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = None
        self.log = self.home / "jupyterlab.log"

    def start(self, timeout=90):
        """Start the server and wait until it answers."""
        settings = self.home / "lab-settings"
        for rel, value in LAB_SETTINGS.items():
            path = settings / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(value))
        env = {k: v for k, v in os.environ.items() if k not in ("NBGRADER_EXECUTION", "TRAINCLINIC_STATIC", "JPY_PARENT_PID")}
        env.update(
            PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
            JUPYTER_CONFIG_DIR=str(self.home / "config"),
            JUPYTER_RUNTIME_DIR=str(self.home / "runtime"),
            JUPYTER_DATA_DIR=str(self.home / "data"),
            JUPYTERLAB_SETTINGS_DIR=str(settings),
            JUPYTERLAB_WORKSPACES_DIR=str(self.home / "workspaces"),
            IPYTHONDIR=str(self.home / "ipython"),
            MPLBACKEND="Agg",
        )
        cmd = [
            sys.executable, "-m", "jupyterlab", f"--ServerApp.root_dir={self.root}", "--ip=127.0.0.1",
            f"--port={self.port}", "--ServerApp.port_retries=0", "--no-browser", "--allow-root",
            "--IdentityProvider.token=", "--LabApp.expose_app_in_browser=True",
            "--ServerApp.shutdown_no_activity_timeout=900", "--MappingKernelManager.cull_idle_timeout=0",
        ]
        self._logfile = open(self.log, "wb")
        self.proc = subprocess.Popen(cmd, cwd=self.root, env=env, stdout=self._logfile, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{self.url}/api/status", timeout=2) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.3)
        self.stop()
        raise TimeoutError(f"JupyterLab did not answer within {timeout} s:\n{self.log.read_text()[-3000:]}")

    def descendants(self):
        """Every process the server started (kernels included), as psutil processes."""
        try:
            import psutil

            return psutil.Process(self.proc.pid).children(recursive=True)
        except Exception:
            return []

    def stop(self):
        """End the server's process group, then any process it started that is still alive."""
        if self.proc is None:
            return
        kids = self.descendants()
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)  # the server shuts its kernels down on SIGTERM
                self.proc.wait(timeout=15)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=10)
        for kid in kids:  # kernels live in sessions of their own: end each by pid (psutil checks it is still the same)
            try:
                if kid.is_running():
                    kid.kill()
            except Exception:
                pass
        self._logfile.close()
        self.proc = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()
        return False


# ---- running notebooks with nbclient in another environment (used by test_colab.py) ----

WIDGET_ERRORS = ("Error displaying widget", "Failed to display Jupyter Widget", "Widget Javascript not detected",
                 "could not be displayed because the widget state could not be found", "Loading widget...")


CELL_TIMEOUT = 120  # s: a lesson's cells take under 10 s; a stuck cell fails here, by name, not after 300 s


def execute(paths):
    """Execute each notebook in place with nbclient (the running Python's own kernel); seconds per notebook."""
    import nbformat
    from nbclient import NotebookClient

    sys.path.insert(0, str(ROOT / "tools"))
    from bench_stall import stall_hooks  # a reply that came only at the cell timeout is an error naming the cell

    times = {}
    for path in paths:
        path = Path(path)
        nb = nbformat.read(path, as_version=4)
        start = time.monotonic()
        try:
            NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}},
                           **stall_hooks(CELL_TIMEOUT)).execute()
        except Exception as e:  # recorded in the notebook; the test reports it
            nb.metadata["trainclinic_error"] = f"{type(e).__name__}: {e}"[:4000]
        times[str(path)] = round(time.monotonic() - start, 1)
        nbformat.write(nb, path)
    return times


def _texts(out):
    if out.get("output_type") == "stream":
        return ["".join(out.get("text", ""))]
    if out.get("output_type") == "error":
        return [f"{out.get('ename')}: {out.get('evalue')}"]
    return ["".join(v) if isinstance(v, list) else str(v) for k, v in out.get("data", {}).items() if k.startswith("text/")]


def problems(nb, live=True):
    """What is wrong with an executed lesson notebook (dict), as a list of sentences; [] when all is well."""
    found = []
    stopped = nb.get("metadata", {}).get("trainclinic_error")
    if stopped:
        found.append("execution stopped: " + stopped)
    widget_views = 0
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        outs = cell.get("outputs", [])
        repro = "raises-exception" in cell.get("metadata", {}).get("tags", [])
        errors = [o for o in outs if o.get("output_type") == "error"]
        stderr = ["".join(o.get("text", "")) for o in outs if o.get("output_type") == "stream" and o.get("name") == "stderr"]
        text = "\n".join(t for o in outs for t in _texts(o))
        widget_views += sum("application/vnd.jupyter.widget-view+json" in o.get("data", {}) for o in outs)
        if repro and not errors and not stopped:
            found.append(f"cell {i} (raises-exception) raised nothing")
        if errors and not repro:
            found.append(f"cell {i} raised {errors[0].get('ename')}: {errors[0].get('evalue', '')[:300]}")
        if errors and repro and errors[0].get("ename") in ("NameError", "SyntaxError", "ImportError", "AttributeError"):
            found.append(f"cell {i} (raises-exception) raised {errors[0].get('ename')}, not the failure: "
                         f"{errors[0].get('evalue', '')[:300]}")
        if stderr and not repro:
            found.append(f"cell {i} wrote to stderr: {stderr[0][:300]!r}")
        if cell.get("metadata", {}).get("nbgrader", {}).get("grade"):
            src = "".join(cell["source"]) if isinstance(cell["source"], list) else cell["source"]
            calls = max(src.count("checks.check_"), 1)
            if text.count("✓") < calls:
                found.append(f"check cell {i} printed {text.count('✓')} ✓ for {calls} check calls: {text[-600:]!r}")
        for bad in WIDGET_ERRORS:
            if bad in text:
                found.append(f"cell {i} shows {bad!r}")
    if live:
        state = nb.get("metadata", {}).get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
        captured = [m for m in state.values() if m.get("model_name") == "OutputModel"
                    and any("image/png" in o.get("data", {}) for o in m.get("state", {}).get("outputs", []))]
        if not widget_views:
            found.append("no widget was displayed (the live path did not run)")
        if not captured:
            found.append("no Output widget holds a plot (LivePlot/explore drew outside their widgets)")
    return found


if __name__ == "__main__":  # python tests/browser_helpers.py execute NB...  (prints {path: seconds} as JSON)
    if sys.argv[1:2] == ["execute"]:
        print(json.dumps(execute(sys.argv[2:])))
