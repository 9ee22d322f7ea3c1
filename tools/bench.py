"""`make bench`: execute every lesson headless and compare with the floor (kernel start + import torch).

Prints a table of seconds and ratios (target: each lesson within 5x the floor) for each solution notebook run as a
learner who solved it runs it (its check cells as released: without their hidden tests), and beside it as the grader
runs it (hidden tests included), each explore section's latency in
JupyterLab (tests/test_browser.py in headless Chromium: seconds from moving a slider, and from the "show the
failure" button, to the redrawn plot; target under 1 s), then the live-plot stall check (tools/bench_stall.py)
and the grading benchmark (tools/bench_grading.py). Exit 1 if the stall check or the grading fails.
"""
import copy
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbgrader.preprocessors import ClearHiddenTests

from bench_stall import stall_hooks

ROOT = Path(__file__).resolve().parent.parent
TARGET = 5.0
LATENCY_TARGET = 1.0  # s from a slider move to the redrawn explore plot
CELL_TIMEOUT = 120  # s: a lesson's cells take under 10 s; a stuck cell fails here, by name

__all__ = ["execute", "as_released", "main"]


def execute(nb, cwd):
    """Seconds to start a kernel and execute `nb` headless."""
    start = time.perf_counter()
    NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3", resources={"metadata": {"path": str(cwd)}},
                   **stall_hooks(CELL_TIMEOUT)).execute()
    return time.perf_counter() - start


def as_released(nb):
    """The notebook as a learner who solved it runs it: the check cells without their hidden tests."""
    nb = copy.deepcopy(nb)
    ClearHiddenTests().preprocess(nb, {})
    return nb


def main(argv=None):
    """Print the lesson table, the stall check and the grading benchmark (0 runs or students: skip that part)."""
    import argparse

    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--students", type=int, default=40, help="class size for the grading benchmark (0: skip it)")
    args.add_argument("--latency", type=int, default=1, help="measure explore latency in the browser (0: skip it)")
    args.add_argument("--stall-runs", type=int, default=200, help="runs of the live-plot stall check (0: skip it)")
    args.add_argument("--lessons", nargs="*", default=None,
                      help="time only these lessons (numbers or folder names, e.g. 07 08); default: all")
    opts = args.parse_args(argv)
    wanted = lambda name: not opts.lessons or any(name.startswith(k) for k in opts.lessons)  # noqa: E731
    os.environ.pop("NBGRADER_EXECUTION", None)
    floor_nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import torch")])
    floor = statistics.median(execute(floor_nb, ROOT) for _ in range(3))
    cpu = platform.processor() or platform.machine()
    print(f"machine: {os.cpu_count()} cores, {cpu}, python {platform.python_version()}")
    print(f"floor (kernel start + import torch): {floor:.2f} s\n")
    print(f"{'lesson':<28}{'learner s':>10}{'x floor':>9}  target <= {TARGET:g}x   {'graded s':>9}{'x floor':>9}")
    worst = 0.0
    for path in sorted(p for p in (ROOT / "solutions").glob("*/*.ipynb") if wanted(p.stem)):
        nb = nbformat.read(path, as_version=4)
        seconds = execute(as_released(nb), path.parent)
        graded = execute(nb, path.parent)  # the hidden tests' extra seeds and sizes too, as nbgrader runs them
        ratio = seconds / floor
        worst = max(worst, ratio)
        print(f"{path.stem:<28}{seconds:>10.2f}{ratio:>9.2f}  {'ok' if ratio <= TARGET else 'OVER TARGET':<14}"
              f"{graded:>9.2f}{graded / floor:>9.2f}")
    print(f"\nworst ratio {worst:.2f}x (target {TARGET:g}x)")
    failed = 0
    if opts.latency:
        latency(opts.lessons)
    if opts.stall_runs > 0:
        print(flush=True)
        stall = [sys.executable, str(ROOT / "tools" / "bench_stall.py"), "--runs", str(opts.stall_runs)]
        failed |= subprocess.run(stall, cwd=ROOT).returncode
    if opts.students > 0:
        print(flush=True)
        grading = [sys.executable, str(ROOT / "tools" / "bench_grading.py"), "--students", str(opts.students)]
        failed |= subprocess.run(grading, cwd=ROOT).returncode
    return 1 if failed else 0


def latency(lessons=None):
    """Run the browser test (one lesson at a time, nothing else running) and print each explore's latency."""
    folder = ROOT / "artifacts" / "browser"
    for old in folder.glob("explore-latency-*.json"):
        old.unlink()
    print("\nexplore latency in JupyterLab (headless Chromium, tests/test_browser.py):", flush=True)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests/test_browser.py", "-k", "test_lesson_in_jupyterlab" + (
                               " and (" + " or ".join(lessons) + ")" if lessons else "")], cwd=ROOT,
                          capture_output=True, text=True)
    if proc.returncode:
        print(proc.stdout[-3000:])
    print(f"{'lesson':<28}{'slider s':>10}{'failure s':>11}  target < {LATENCY_TARGET:g} s")
    for path in sorted(folder.glob("explore-latency-*.json")):
        got = json.loads(path.read_text())
        worst = max(got["slider_s"], got["failure_s"])
        print(f"{path.stem.removeprefix('explore-latency-'):<28}{got['slider_s']:>10.2f}{got['failure_s']:>11.2f}  "
              f"{'ok' if worst < LATENCY_TARGET else 'OVER TARGET'}")


if __name__ == "__main__":
    sys.exit(main())
