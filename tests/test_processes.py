"""trainclinic.processes: notebook functions sent by value (compiled code) to a fresh interpreter, bounded calls."""
import os
import subprocess
import sys
import time

import pytest

from trainclinic import processes

# A notebook's cells, as a kernel (or tools/run_cells.py) runs them: a namespace named __main__
NOTEBOOK = '''
import random
import numpy as np
import torch
from torch import nn

K = 3
WORDS = "the cat sat on the mat with a hat and a bat".split()

def helper(x):
    return x * K

class Box:
    def __init__(self, v):
        self.v = v
    def get(self):
        return helper(self.v)

def make_adder(n):
    def add(x):
        return x + n
    return add

def job(seed):
    if seed is not None:
        torch.manual_seed(seed)
    model = nn.Linear(3, 2)
    return {"weights": model.weight.sum().item(), "box": Box(2).get(), "closure": make_adder(5)(1),
            "lambda": (lambda: K + 1)(), "set": list(set(WORDS)), "numpy": int(np.arange(3).sum())}

def fails():
    return helper(None) + 1

def hangs():
    while True:
        pass

GEN = (i for i in range(3))

import functools

@functools.lru_cache(maxsize=None)
def words_of(text):
    return tuple(sorted(set(text.split())))

def vocab(text):
    return {w: i for i, w in enumerate(words_of(text))}, words_of.cache_info().hits

def uses_generator():
    return next(GEN)
'''


@pytest.fixture(scope="module")
def nb():
    space = {"__name__": "__main__"}
    exec(compile(NOTEBOOK, "<cell>", "exec"), space)
    return space


@pytest.fixture(scope="module")
def other():
    it = processes.Interpreter(hashseed=processes.other_hashseed())
    yield it
    it.close()


def test_functions_travel_by_value(nb, other):
    here, there = processes.here_and_in(other, nb["job"], 0, timeout=60)
    assert there["weights"] == here["weights"]  # the same seed: the same weights in another process
    assert there["box"] == 6 and there["closure"] == 6 and there["lambda"] == 4 and there["numpy"] == 3
    assert sorted(there["set"]) == sorted(here["set"]) and there["set"] != here["set"]  # another hash salt


def test_unseeded_runs_differ_between_processes(nb, other):
    here, there = processes.here_and_in(other, nb["job"], None, timeout=60)
    assert here["weights"] != there["weights"]


def test_errors_come_back_named(nb, other):
    with pytest.raises(processes.ProcessError) as info:
        processes.run_each([(other, nb["fails"], ())], timeout=60)
    assert info.value.kind == "TypeError" and "in helper" in info.value.where


def test_a_hang_is_killed_and_the_interpreter_still_works(nb, other):
    processes.run_each([(other, nb["job"], (0,))], timeout=60)  # the interpreter is up
    start = time.monotonic()
    with pytest.raises(processes.ProcessTimeout):
        processes.run_each([(other, nb["hangs"], ())], timeout=1)
    assert time.monotonic() - start < 8
    assert processes.run_each([(other, nb["job"], (1,))], timeout=60)[0]["box"] == 6


def test_a_cached_function_travels_with_a_fresh_cache(nb, other):
    nb["vocab"]("a b a")  # cached here: the other process starts empty, as a script would
    here, there = processes.here_and_in(other, nb["vocab"], "a b a", timeout=60)
    assert here == ({"a": 0, "b": 1}, 1) and there == ({"a": 0, "b": 1}, 0)
    assert processes.run_each([(other, nb["words_of"], ("c a",))], timeout=60)[0] == ("a", "c")


def test_unsendable_global_is_named(nb, other):
    with pytest.raises(processes.ProcessError, match="uses the global `GEN`"):
        other.submit(nb["uses_generator"])


def test_other_hashseed_salts_differently():
    seed = processes.other_hashseed()
    env = dict(os.environ, PYTHONHASHSEED=str(seed))
    out = subprocess.run([sys.executable, "-S", "-c", "print(hash('trainclinic hash probe'))"], env=env,
                         capture_output=True, text=True).stdout.strip()
    assert out != str(hash("trainclinic hash probe"))


def _in_fork(fn):
    """fn() in a forked child (as tools/run_cells.py's fork server runs a notebook); its return value, or its error."""
    import pickle

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            out = ("value", fn())
        except BaseException as exc:  # noqa: BLE001
            out = ("error", f"{type(exc).__name__}: {exc}")
        os.write(write, pickle.dumps(out))
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return pickle.loads(data)


def test_an_interpreter_handed_to_forks(nb):
    """A fork server starts an interpreter once and hands it to each notebook's fork: the forks see it alive and
    use it in turn; one left with a call running is not idle, and is replaced."""
    other = processes.Interpreter(hashseed=1)
    assert other.idle()
    first = _in_fork(lambda: (other.alive(), processes.run_each([(other, nb["job"], (0,))], timeout=60)[0]["box"]))
    assert first == ("value", (True, 6)) and other.idle()
    again = _in_fork(lambda: processes.run_each([(other, nb["job"], (1,))], timeout=60)[0]["box"])
    assert again == ("value", 6) and other.idle()
    left = _in_fork(lambda: other.submit(nb["hangs"]) and "sent")  # the fork ends without waiting for the call
    assert left == ("value", "sent")
    time.sleep(0.5)
    assert not other.idle()  # its call still runs: the next fork must not get it
    with open(f"/proc/{other.proc.pid}/task/{other.proc.pid}/children") as f:
        call = int(f.read().split()[0])
    other.close()
    assert not other.alive() and not other.idle()
    time.sleep(0.2)
    try:  # the running call went with it (it had a process group of its own): gone, or a zombie
        with open(f"/proc/{call}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        state = "gone"
    assert state in ("gone", "Z", "X"), f"the call {call} still runs (state {state})"
