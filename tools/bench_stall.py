"""Live-plot stall check: execute a one-cell LivePlot + explore notebook N times under nbclient and count the runs that stall.

    python tools/bench_stall.py [--runs 200] [--timeout 120] [--jobs 2] [--busy 0]

The stall (issue 9): when a cell captures output into an ipywidgets Output (`with out: display(...)`), nbclient's
stand-in for the front end writes each captured output back to the kernel on the shell channel, with a raw
send (jupyter_client's Session.send on a shadow of the asyncio socket), while it awaits the cell's execute_reply
on that same socket. If the reply lands just before such a write, the write swallows the socket's edge-triggered
wake-up: the client sleeps until the cell timeout, then finds the reply and goes on, silently. LivePlot now sets
its Output's `outputs` from the kernel instead, and so does explore() for each redraw, so the client has nothing
to write back.

A run stalls when its cell times out or its reply reaches the client 10 s or more after the kernel sent it.
Also printed: the client's writes on the shell channel during the cell (the trigger). --busy S keeps the
client busy S seconds before each such write, which turns every race into a stall. Exit 1 on any stall.
"""
import argparse
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import datetime, timezone

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError

CELL = ("import trainclinic as tc\nwith tc.LivePlot('x', every=1) as p:\n    for i in range(30): p.update(i, 1/(i+1), 1.0)\n"
        "s = tc.explore(lambda lr: {'loss': [1.0, lr]}, lr=('float', 0.0, 1.0, 0.1))  # a slider moved 3 times\n"
        "for v in (0.2, 0.3, 0.4): s['lr'].value = v")
LATE = 10.0  # s between the kernel sending the reply and the client reading it: a healthy run takes well under 1 s

__all__ = ["run_once", "stall_hooks", "main"]


def stall_hooks(timeout):
    """NotebookClient hooks that raise, naming the cell, when its reply came only at the cell timeout."""
    started = {}

    def start(cell, cell_index):
        started[cell_index] = time.monotonic()

    def done(cell, cell_index, execute_reply):
        took = time.monotonic() - started.pop(cell_index)
        if took >= timeout:
            first = (cell.source.strip().splitlines() or [""])[0][:80]
            raise RuntimeError(f"cell {cell_index} ({first!r}) stalled: its reply reached the client only at the "
                               f"{timeout} s cell timeout ({took:.0f} s); see tools/bench_stall.py")

    return {"on_cell_execute": start, "on_cell_executed": done}


def run_once(timeout=120, busy=0.0):
    """One fresh kernel: (seconds, stalled, client writes on shell during the cell, reply lag in s or None)."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(CELL)])
    seen = {"writes": 0, "lag": None, "took": 0.0}

    def start(cell, cell_index):
        channel = client.kc.shell_channel
        send = channel.send

        def counted(msg):
            if msg["header"]["msg_type"] != "execute_request":
                seen["writes"] += 1
                time.sleep(busy)
            return send(msg)

        channel.send = counted
        seen["t0"] = time.monotonic()

    def done(cell, cell_index, execute_reply):
        seen["took"] = time.monotonic() - seen["t0"]
        sent = execute_reply.get("header", {}).get("date")
        seen["lag"] = (datetime.now(timezone.utc) - sent).total_seconds() if isinstance(sent, datetime) else 0.0

    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", on_cell_execute=start, on_cell_executed=done)
    t0 = time.perf_counter()
    try:
        client.execute()
        stalled = seen["took"] >= timeout or seen["lag"] >= LATE
    except CellTimeoutError:
        stalled = True
    return time.perf_counter() - t0, stalled, seen["writes"], seen["lag"]


def main(argv=None):
    """Run the check, printing progress, any stalled run and the summary line; 1 on any stall."""
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--runs", type=int, default=200)
    args.add_argument("--timeout", type=int, default=120, help="per-cell timeout, seconds")
    args.add_argument("--jobs", type=int, default=2, help="notebooks executed at once (each a kernel and a client)")
    args.add_argument("--busy", type=float, default=0.0, help="seconds the client sleeps before each shell write")
    opts = args.parse_args(argv)
    start = time.perf_counter()
    runs = []
    with ProcessPoolExecutor(opts.jobs) as pool:
        for seconds, stalled, writes, lag in pool.map(run_once, [opts.timeout] * opts.runs, [opts.busy] * opts.runs):
            runs.append((seconds, stalled, writes, lag))
            if stalled:
                why = "no reply (cell timeout)" if lag is None else f"its reply read {lag:.1f} s after the kernel sent it"
                print(f"  run {len(runs)} stalled: {seconds:.1f} s, {why}", flush=True)
            if len(runs) % 25 == 0 and len(runs) < opts.runs:
                print(f"  {len(runs)}/{opts.runs} runs, {sum(r[1] for r in runs)} stalls", flush=True)
    stalls = [r for r in runs if r[1]]
    print(f"live-plot stall check: {len(stalls)} stalls in {opts.runs} runs ({time.perf_counter() - start:.0f} s, "
          f"median {statistics.median(r[0] for r in runs):.2f} s per run)")
    slowest = max((r[3] for r in runs if r[3] is not None), default=0.0)
    print(f"  client writes on the shell channel during the cell: {sum(r[2] for r in runs)}; "
          f"slowest reply read {slowest:.2f} s after the kernel sent it")
    return 1 if stalls else 0


if __name__ == "__main__":
    sys.exit(main())
