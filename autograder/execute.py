"""nbgrader preprocessors for bulk grading: a hardened Execute and a feedback filter.

SafeExecute is nbgrader's Execute with what a class's submissions need:
- a per-notebook time budget: each cell gets min(per-cell limit, time left), and once the budget is spent
  the remaining cells are not run (they get an error output saying so, so they score 0);
- a cell that times out, or that kills the kernel (os._exit, a segfault, an abort), gets an error output
  naming what happened; the kernel is then restarted, the cells that ran before are replayed silently
  (their outputs are kept), and grading goes on with the next cell. Nothing else in the notebook loses
  points for it.
- the guard's seals (see guard.py) are verified here, before nbgrader's LimitOutput could cut one off: a
  test cell without a valid seal gets an IntegrityError output, so nbgrader itself scores it 0.
StripHidden removes the hidden tests from the feedback: their code (between the HIDDEN TESTS markers) and
the tracebacks of test cells (which quote that code); pass/fail and messages stay.
"""
import copy
import hashlib
import hmac
import math
import os
import re
import time

from nbclient.exceptions import DeadKernelError
from nbconvert.preprocessors import Preprocessor
from nbformat.notebooknode import NotebookNode, from_dict
from traitlets import Bool, Integer

from nbgrader.preprocessors import Execute

__all__ = ["SafeExecute", "StripHidden", "SEAL"]

SEAL = re.compile(r"\n?\[trainclinic seal (\S+) ([0-9a-f]+)\]\n?")


class _Restart(Exception):
    """The kernel must be replaced before the next cell."""


def _error(ename, evalue):
    return from_dict({"output_type": "error", "ename": ename, "evalue": evalue, "traceback": [f"{ename}: {evalue}"]})


class SafeExecute(Execute):
    """Execute with a notebook budget and recovery from hung or dead kernels."""

    notebook_timeout = Integer(300, help="Seconds for the whole notebook, restarts included.").tag(config=True)

    def preprocess(self, nb, resources=None, km=None):
        from nbclient import NotebookClient

        NotebookClient.__init__(self, nb, km)
        self.reset_execution_trackers()
        self._check_assign_resources(resources)
        cell_limit = self.timeout or 60
        start = time.monotonic()
        done = []  # indexes of code cells that ran without killing or hanging the kernel
        index = 0
        cells = self.nb.cells
        events = resources.setdefault("trainclinic", []) if isinstance(resources, dict) else []
        while index < len(cells):
            try:
                with self.setup_kernel():
                    info = self.wait_for_reply(self.kc.kernel_info())
                    self.nb.metadata["language_info"] = info["content"]["language_info"]
                    for i in done:  # replay after a restart: same state, outputs discarded
                        self.timeout = max(1, int(self.notebook_timeout - (time.monotonic() - start)))
                        self.execute_cell(copy.deepcopy(cells[i]), i, store_history=False)
                    while index < len(cells):
                        cell = cells[index]
                        left = self.notebook_timeout - (time.monotonic() - start)
                        if cell.cell_type == "code" and left <= 0:
                            self._skip_rest(index, events)
                            index = len(cells)
                            break
                        self.timeout = max(1, math.ceil(min(cell_limit, left)))
                        try:
                            self.preprocess_cell(cell, resources, index)
                        except DeadKernelError:
                            cell.outputs.append(_error("KernelDied", "the kernel died while running this cell "
                                                       "(os._exit, a crash, or memory exhausted); it was restarted"))
                            events.append(f"cell {index}: the kernel died; restarted")
                            index += 1
                            raise _Restart() from None
                        timed_out = any(o.get("ename") == "CellTimeoutError" for o in cell.get("outputs", []))
                        index += 1
                        if timed_out:
                            limit = self.timeout
                            cell.outputs = [o for o in cell.outputs if o.get("ename") not in ("CellTimeoutError", "KeyboardInterrupt")]
                            cell.outputs.append(_error("CellTimeoutError", f"this cell ran past its {limit} s limit and was stopped"))
                            events.append(f"cell {index - 1}: ran past its {limit} s limit")
                            if not self._responsive():
                                raise _Restart()
                        if cell.cell_type == "code":
                            done.append(index - 1)
            except _Restart:
                self.km = None
                self.kc = None
                continue
        self.timeout = cell_limit
        self._verify_seals()
        self.set_widgets_metadata()
        return self.nb, self.resources

    def _verify_seals(self):
        """Keep a test cell's verdict only with a valid guard seal; strip the seals from every output.

        Done here, before nbgrader's LimitOutput could cut a seal off a long output. A test cell without
        a valid seal gets an IntegrityError output, so nbgrader itself scores it 0."""
        token = os.environ.get("TRAINCLINIC_GUARD_TOKEN", "")
        for cell in self.nb.cells:
            if cell.cell_type != "code":
                continue
            text = "".join(o.get("text", "") for o in cell.get("outputs", []) if o.get("output_type") == "stream")
            if token and _is_test(cell) and not any(o.get("output_type") == "error" for o in cell.outputs):
                want = hmac.new(token.encode(), str(cell.get("execution_count")).encode(), hashlib.sha256).hexdigest()[:24]
                if not any(n == str(cell.get("execution_count")) and hmac.compare_digest(m, want) for n, m in SEAL.findall(text)):
                    cell.outputs.append(_error("IntegrityError", "points withheld: the grader's integrity seal is missing "
                                               "(the checks or the kernel were tampered with during or before this cell)"))
            for out in cell.outputs:
                if out.get("output_type") == "stream":
                    out["text"] = SEAL.sub("\n", out["text"])
            cell.outputs = [o for o in cell.outputs if not (o.get("output_type") == "stream" and not o["text"].strip())]

    def _responsive(self):
        """After an interrupt: does the kernel answer a trivial cell? (A loop in C ignores SIGINT.)"""
        probe = from_dict({"cell_type": "code", "source": "pass", "metadata": {}, "outputs": [], "execution_count": None})
        self.timeout = 10
        try:
            self.execute_cell(probe, 0, store_history=False)
        except DeadKernelError:
            return False
        return not any(o.get("ename") == "CellTimeoutError" for o in probe.get("outputs", []))

    def _skip_rest(self, index, events):
        skipped = 0
        for cell in self.nb.cells[index:]:
            if cell.cell_type == "code":
                cell.outputs = [_error("NotebookTimeout", f"not run: the notebook used up its {self.notebook_timeout} s limit")]
                skipped += 1
        events.append(f"notebook limit of {self.notebook_timeout} s reached: {skipped} cells not run")


def _is_test(cell):
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return cell.cell_type == "code" and meta.get("grade") and not meta.get("solution")


HIDDEN = re.compile(r"^[ \t]*### BEGIN HIDDEN TESTS.*?### END HIDDEN TESTS[ \t]*\n?", re.S | re.M)


class StripHidden(Preprocessor):
    """Feedback filter: hidden tests' code and test tracebacks removed, seals removed everywhere."""

    enabled = Bool(True)

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return cell, resources
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                out["text"] = SEAL.sub("\n", out["text"]).rstrip("\n") + ("\n" if out["text"].strip() else "")
        cell.outputs = [o for o in cell.get("outputs", []) if not (o.get("output_type") == "stream" and not o["text"].strip())]
        if _is_test(cell):
            cell.source = HIDDEN.sub("# (hidden tests: their results are shown below)\n", cell.source)
            for out in cell.outputs:
                if out.get("output_type") == "error":
                    out["traceback"] = [f"{out['ename']}: {out['evalue']}"]
        return cell, resources
