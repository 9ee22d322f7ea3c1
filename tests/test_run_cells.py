"""tools/run_cells.py's fork server: a lesson's shared prefix (the cells before the first answer cell) runs once, in a
zygote, and each submission runs in a fork of it with what a run from the top would have: files, temporary files,
random streams; a hang, a crash or a failed prefix cost only that submission."""
import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT

PREFIX = '''
import os, random, tempfile
random.seed(0)
with open({log!r}, "a") as f:
    f.write("prefix ran\\n")
with open("prefix.txt", "w") as f:
    f.write("as the prefix wrote it")
scratch = tempfile.mkdtemp()
with open(os.path.join(scratch, "t.txt"), "w") as f:
    f.write("a temporary file")
'''

CHECK = '''
assert sorted(os.listdir(".")) == ["lesson.ipynb", "prefix.txt"], os.listdir(".")
assert open("prefix.txt").read() == "as the prefix wrote it"
assert open(os.path.join(scratch, "t.txt")).read() == "a temporary file"
print("draw", random.random(), "answer", answer())
'''

ANSWERS = {
    "right": "def answer():\n    return 42",
    "vandal": ("def answer():\n    with open('prefix.txt', 'w') as f:\n        f.write('changed')\n"
               "    open('extra.txt', 'w').close()\n    os.remove(os.path.join(scratch, 't.txt'))\n    return random.random()"),
    "hangs": "while True:\n    pass",
    "exits": "os._exit(3)",
}


def _cell(source, **nbgrader):
    meta = {"nbgrader": nbgrader} if nbgrader else {}
    return {"cell_type": "code", "source": source, "metadata": meta, "outputs": [], "execution_count": None}


def _notebook(folder, answer, log, prefix=PREFIX):
    nb = {"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [
        _cell(prefix.format(log=str(log))),
        _cell(ANSWERS[answer], solution=True, grade_id="answer"),
        _cell(CHECK, grade=True, grade_id="check", points=1),
        _cell("print('after the last check')"),
    ]}
    folder.mkdir(parents=True)
    path = folder / "lesson.ipynb"
    path.write_text(json.dumps(nb))
    return path


@pytest.fixture
def server():
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.Popen([sys.executable, str(ROOT / "tools" / "run_cells.py"), "--serve"], text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)

    def run(path, share=True, timeout=60):
        proc.stdin.write(json.dumps({"path": str(path), "timeout": timeout, "graded_only": True,
                                     "share_prefix": share}) + "\n")
        proc.stdin.flush()
        return json.loads(proc.stdout.readline())

    yield run
    proc.stdin.close()
    proc.wait(timeout=30)
    assert proc.returncode == 0


def _verdict(res):
    return {g: (v["passed"], v["stdout"], (v["error"] or {}).get("type")) for g, v in res["graded"].items()}


def test_prefix_runs_once_and_every_submission_sees_it_as_written(server, tmp_path):
    log = tmp_path / "prefix.log"
    plain = {a: server(_notebook(tmp_path / f"plain-{a}", a, log), share=False) for a in ("right", "vandal")}
    log.unlink()
    order = ["right", "vandal", "right", "vandal", "right"]
    shared = [server(_notebook(tmp_path / f"shared-{i}", a, log)) for i, a in enumerate(order)]
    assert log.read_text() == "prefix ran\n"  # one zygote for the five
    for answer, res in zip(order, shared):
        assert _verdict(res) == _verdict(plain[answer]), answer  # files put back, the same random draw
        assert res["cells"] == plain[answer]["cells"] == 3
        assert _verdict(res)["check"][0]


def test_a_hang_or_a_crash_costs_only_its_own_submission(server, tmp_path):
    log = tmp_path / "prefix.log"
    assert server(_notebook(tmp_path / "a", "right", log))["graded"]["check"]["passed"]
    assert server(_notebook(tmp_path / "b", "hangs", log), timeout=3) == {"timeout": 3, "wall": pytest.approx(3, abs=2)}
    assert server(_notebook(tmp_path / "c", "right", log))["graded"]["check"]["passed"]
    crashed = server(_notebook(tmp_path / "d", "exits", log))
    assert "crash" in crashed and "died" in crashed["crash"]
    assert server(_notebook(tmp_path / "e", "right", log))["graded"]["check"]["passed"]


def test_a_failing_prefix_or_files_beside_the_notebook_run_from_the_top(server, tmp_path):
    log = tmp_path / "prefix.log"
    broken = PREFIX + "raise ValueError('the prefix fails')\n"
    for i in range(2):
        res = server(_notebook(tmp_path / f"broken-{i}", "right", log, prefix=broken))
        assert res["error"]["type"] == "builtins.ValueError"  # recorded, as a run from the top records it
        assert res["graded"]["check"]["passed"]
    assert log.read_text().count("prefix ran") == 3  # the zygote's one try, then from the top each time
    log.unlink()
    threaded = PREFIX + "import threading, time\nthreading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
    for i in range(2):  # a fork would have no such thread: run from the top, where it has
        assert server(_notebook(tmp_path / f"threaded-{i}", "right", log, prefix=threaded))["graded"]["check"]["passed"]
    assert log.read_text().count("prefix ran") == 3
    beside = _notebook(tmp_path / "beside", "right", log)
    (beside.parent / "data.txt").write_text("the notebook may read this")
    res = server(beside)
    assert not res["graded"]["check"]["passed"]  # listdir sees data.txt: run where it is, from the top
    assert "data.txt" in res["graded"]["check"]["error"]["message"]
