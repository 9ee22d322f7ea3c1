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


def test_unsendable_global_is_named(nb, other):
    with pytest.raises(processes.ProcessError, match="uses the global `GEN`"):
        other.submit(nb["uses_generator"])


def test_other_hashseed_salts_differently():
    seed = processes.other_hashseed()
    env = dict(os.environ, PYTHONHASHSEED=str(seed))
    out = subprocess.run([sys.executable, "-S", "-c", "print(hash('trainclinic hash probe'))"], env=env,
                         capture_output=True, text=True).stdout.strip()
    assert out != str(hash("trainclinic hash probe"))
