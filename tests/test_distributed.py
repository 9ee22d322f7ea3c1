"""trainclinic.distributed: a real 2-rank gloo job on 127.0.0.1, forked; errors, hangs and output come back bounded."""
import os
import subprocess
import sys
import time

import torch
import torch.distributed as dist

from trainclinic.distributed import launch, spawn_cell_function


def _all_reduce(rank, world):
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    return t.item(), torch.get_num_threads(), os.environ["MASTER_ADDR"]


def _raises(rank, world):
    if rank == 1:
        raise ValueError("rank one is broken")
    return "fine"


def _hangs(rank, world):
    if rank == 0:
        dist.barrier()  # rank 1 never joins it
    else:
        time.sleep(60)
    return "never"


def _writes_everywhere(rank, world):
    print("to stdout from", rank)
    print("to stderr from", rank, file=sys.stderr)
    os.write(2, b"to fd 2 from C-like code\n")
    return rank


def test_two_ranks_all_reduce():
    run = launch(_all_reduce, world=2, timeout=5)
    assert run.ok, run.report()
    assert run.values == [(3.0, 1, "127.0.0.1")] * 2
    assert run.seconds < 5


def test_a_rank_that_raises_comes_back_as_its_error():
    run = launch(_raises, world=2, timeout=5)
    assert not run.ok
    assert run.ranks[0].value == "fine"
    kind, text, where = run.ranks[1].error
    assert (kind, text) == ("ValueError", "rank one is broken") and "_raises" in where
    assert "rank 1 raised ValueError: rank one is broken" in run.failure()


def test_a_hang_is_bounded_and_killed():
    # rank 0's barrier gives up after 1 s; the deadline leaves it 5 s more to say so (forking, joining the group and
    # reporting take seconds on a busy machine: CI runs three test suites side by side on two cores)
    start = time.monotonic()
    run = launch(_hangs, world=2, timeout=1, deadline=6)
    assert time.monotonic() - start < 10
    assert run.ranks[0].error and "Timed out" in run.ranks[0].error[1], run.report()
    assert run.ranks[1].hung
    assert "rank 1 did not finish within 6 s" in run.failure() and "a hang" in run.failure()


def test_output_is_captured_not_leaked(capfd):
    run = launch(_writes_everywhere, world=2, timeout=5)
    assert run.ok, run.report()
    out, err = capfd.readouterr()
    assert out == "" and err == "", (out, err)
    assert "to stderr from 1" in run.ranks[1].output and "to fd 2 from C-like code" in run.ranks[0].output


def test_a_group_left_in_the_parent_does_not_matter():
    # in a subprocess: initialising a process group here would stay for the rest of the test session
    script = (
        "import os, sys, torch, torch.distributed as dist\n"
        "from trainclinic.distributed import launch, free_port\n"
        "os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT=str(free_port()))\n"
        "dist.init_process_group('gloo', rank=0, world_size=1)\n"
        "def work(rank, world):\n"
        "    t = torch.ones(1); dist.all_reduce(t); return t.item()\n"
        "run = launch(work, world=2, timeout=5)\n"
        "print(run.ok, run.values)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    # (torch 2.9 prints "[Gloo] Rank 0 is connected to 0 peer ranks..." when the parent's own group starts)
    assert out.stdout.strip().splitlines()[-1] == "True [2.0, 2.0]", out.stdout + out.stderr


def test_spawn_of_a_main_function_fails_fast():
    script = ("from trainclinic.distributed import spawn_cell_function\n"
              "def cell_worker(rank):\n    print('started')\n"
              "err, code = spawn_cell_function(cell_worker)\n"
              "print(code, err.strip().splitlines()[-1])\n")
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert "Can't get attribute 'cell_worker'" in out.stdout and out.stdout.startswith("1 "), out.stdout + out.stderr
    assert time.monotonic() - start < 60


def _reports(rank, world):
    from trainclinic.distributed import progress

    for step in range(10):
        progress(step=step, loss=float(rank * 100 + step))
        time.sleep(0.02)
    return "done"


def test_progress_reaches_watch_while_the_ranks_run():
    """Each rank's progress() lines reach watch(rank, values) in order, some before the ranks end; an error in watch
    is raised once they are done (the ranks still finish)."""
    seen, when = {0: [], 1: []}, []
    run = launch(_reports, world=2, watch=lambda rank, v: (seen[rank].append(v["loss"]), when.append(time.monotonic())))
    end = time.monotonic()
    assert run.ok, run.failure()
    assert seen == {0: [float(s) for s in range(10)], 1: [float(100 + s) for s in range(10)]}
    assert min(when) < end - 0.05, "every line came after the ranks had ended"

    def broken(rank, values):
        raise KeyError("watch is broken")

    try:
        launch(_reports, world=2, watch=broken)
    except KeyError as exc:
        assert "watch is broken" in str(exc)
    else:
        raise AssertionError("an error in watch was swallowed")
