"""Run a notebook without Jupyter: its code cells in order, in one namespace.

For machines with no Jupyter packages (a GPU box for `make gpu-check`). Honours the `raises-exception`
tag (the error is recorded and the run goes on), skips IPython magics (% and ! lines), and stops at the
first unexpected error.
"""
import contextlib
import io
import json
import os
import sys
import time
import traceback
from pathlib import Path

__all__ = ["run_notebook"]


def _source(cell):
    src = cell.get("source", "")
    src = "".join(src) if isinstance(src, list) else src
    return "\n".join(line for line in src.splitlines() if not line.lstrip().startswith(("%", "!")))


def run_notebook(path, echo=False):
    """Execute the code cells of `path`; return {passed, seconds, cells, checks, repro_errors, error}."""
    nb = json.loads(Path(path).read_text())
    namespace = {"__name__": "__main__"}
    result = {"notebook": str(path), "passed": True, "cells": 0, "checks": 0, "repro_errors": [], "error": None}
    start = time.perf_counter()
    cwd = os.getcwd()
    os.chdir(Path(path).parent)
    try:
        for index, cell in enumerate(nb["cells"]):
            if cell.get("cell_type") != "code":
                continue
            result["cells"] += 1
            out = io.StringIO()
            tags = cell.get("metadata", {}).get("tags", [])
            try:
                with contextlib.redirect_stdout(out):
                    exec(compile(_source(cell), f"<cell {index}>", "exec"), namespace)
            except BaseException as exc:  # noqa: BLE001 - a notebook may raise anything; SystemExit included
                record = {"cell": index, "type": f"{type(exc).__module__}.{type(exc).__name__}", "message": str(exc)[:500]}
                if "raises-exception" in tags and isinstance(exc, Exception):
                    result["repro_errors"].append(record)
                else:
                    record["traceback"] = traceback.format_exc()[-2000:]
                    result["passed"], result["error"] = False, record
                    break
            finally:
                result["checks"] += out.getvalue().count("✓ ")
                if echo:
                    sys.stdout.write(out.getvalue())
    finally:
        os.chdir(cwd)
    result["seconds"] = round(time.perf_counter() - start, 2)
    return result


if __name__ == "__main__":
    print(json.dumps(run_notebook(sys.argv[1], echo=True), indent=1))
