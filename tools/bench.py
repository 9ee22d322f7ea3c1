"""`make bench`: execute every lesson headless and compare with the floor (kernel start + import torch).

Prints a table of seconds and ratios (target: each lesson within 5x the floor), then runs the grading
benchmark (tools/bench_grading.py) when it exists.
"""
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
TARGET = 5.0

__all__ = ["execute", "main"]


def execute(nb, cwd):
    """Seconds to start a kernel and execute `nb` headless."""
    start = time.perf_counter()
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}).execute()
    return time.perf_counter() - start


def main(argv=None):
    """Print the lesson table and the grading benchmark (--students N for its class size, 0 to skip it)."""
    import argparse

    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--students", type=int, default=40, help="class size for the grading benchmark (0: skip it)")
    opts = args.parse_args(argv)
    os.environ.pop("NBGRADER_EXECUTION", None)
    floor_nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import torch")])
    floor = statistics.median(execute(floor_nb, ROOT) for _ in range(3))
    cpu = platform.processor() or platform.machine()
    print(f"machine: {os.cpu_count()} cores, {cpu}, python {platform.python_version()}")
    print(f"floor (kernel start + import torch): {floor:.2f} s\n")
    print(f"{'lesson':<28}{'seconds':>9}{'x floor':>9}  target <= {TARGET:g}x")
    worst = 0.0
    for path in sorted((ROOT / "solutions").glob("*/*.ipynb")):
        seconds = execute(nbformat.read(path, as_version=4), path.parent)
        ratio = seconds / floor
        worst = max(worst, ratio)
        print(f"{path.stem:<28}{seconds:>9.2f}{ratio:>9.2f}  {'ok' if ratio <= TARGET else 'OVER TARGET'}")
    print(f"\nworst ratio {worst:.2f}x (target {TARGET:g}x)")
    grading = ROOT / "tools" / "bench_grading.py"
    if grading.exists() and opts.students > 0:
        print()
        return subprocess.run([sys.executable, str(grading), "--students", str(opts.students)], cwd=ROOT).returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
