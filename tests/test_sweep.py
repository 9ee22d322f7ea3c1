"""The reference solution passes every check on 50 seeds of the hidden sweep, with no flake, and each check
call stays fast.

A check's `seed` drives its sweep (sizes, widths, dtypes, short last batches, edge values), so this reruns every
check call of every graded cell of the solution notebook, as the hidden tests do, with seed = 0..49. It runs
the notebook through tools/run_cells.py's fork server (as the grader: NBGRADER_EXECUTION set) and prints the
slowest call per lesson; `make bench` reports the same figures.
"""
import ast
import json

import pytest

from conftest import LESSONS, grade_id, source_nb
from test_runtimes import server  # noqa: F401  (the fork server fixture)

SEEDS = 50


def check_calls(nb):
    """[(imports, call source with a `__seed` keyword)] for every `checks.check_*(...)` call in graded cells."""
    found = []
    for cell in nb["cells"]:
        if not cell.get("metadata", {}).get("nbgrader", {}).get("grade"):
            continue
        src = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        tree = ast.parse(src)
        imports = "\n".join(ast.unparse(n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)))
        for node in ast.walk(tree):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr.startswith("check_")):
                call = ast.Call(func=node.func, args=node.args,
                                keywords=[k for k in node.keywords if k.arg != "seed"]
                                + [ast.keyword(arg="seed", value=ast.Name(id="__seed"))])
                found.append({"cell": grade_id(cell), "imports": imports, "call": ast.unparse(call)})
    unique = {c["call"]: c for c in found}  # the hidden tests repeat the visible call with other seeds
    return list(unique.values())


SWEEP = r'''
import json as _json, time as _time
from trainclinic.checks import CheckFailed as _CheckFailed
_calls = _json.loads(%r)
_rows = []
for _c in _calls:
    exec(_c["imports"])
    _times, _failed = [], []
    for __seed in range(%d):
        _start = _time.perf_counter()
        try:
            eval(_c["call"])
        except Exception as _exc:
            _failed.append(f"seed {__seed}: {type(_exc).__name__}: {str(_exc)[:300]}")
        _times.append(_time.perf_counter() - _start)
    _rows.append({"call": _c["call"], "cell": _c["cell"], "failed": _failed, "max": max(_times),
                  "mean": sum(_times) / len(_times)})
print("SWEEP " + _json.dumps(_rows))
'''


@pytest.mark.parametrize("lesson", [pytest.param(l, marks=pytest.mark.xdist_group(f"sweep-{l}")) for l in LESSONS])
def test_reference_passes_every_seed(server, lesson, tmp_path):  # noqa: F811
    nb = json.loads(source_nb(lesson).read_text())
    calls = check_calls(nb)
    assert calls, f"{lesson}: no check calls found in graded cells"
    nb["cells"].append({"cell_type": "code", "outputs": [], "execution_count": None,
                        "source": SWEEP % (json.dumps(calls), SEEDS),
                        "metadata": {"nbgrader": {"grade": True, "grade_id": "sweep", "points": 0}}})
    path = tmp_path / f"{lesson}.ipynb"
    path.write_text(json.dumps(nb))
    res = server.run(path, timeout=1200, share_prefix=True)
    assert "timeout" not in res and "crash" not in res, res
    verdict = res["graded"]["sweep"]
    assert verdict["passed"], verdict
    rows = json.loads(next(l for l in verdict["stdout"].splitlines() if l.startswith("SWEEP ")).removeprefix("SWEEP "))
    for row in rows:
        print(f"{lesson} {row['call']}: mean {row['mean']:.2f} s, max {row['max']:.2f} s over {SEEDS} seeds")
    failed = [f"{row['call']}: {f}" for row in rows for f in row["failed"]]
    assert not failed, f"{lesson}: the reference fails its own checks:\n- " + "\n- ".join(failed[:20])
