"""GPU acceptance run: every solution notebook on cuda, one JSON report (artifacts/gpu-report.json).

    make gpu-check      # on a machine with CUDA; refuses anywhere else

Needs only a python with a CUDA torch (and matplotlib): no Jupyter, no network. Notebooks run through
tools/run_cells.py with TRAINCLINIC_DEVICE=cuda and static plots.
"""
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tools")]  # the setup cells then find trainclinic: nothing is installed

__all__ = ["main"]


def refuse(reason):
    """Explain why this machine cannot run the check; exit 2."""
    print(f"make gpu-check needs a CUDA GPU: {reason}.\n"
          "Run it on a machine with an NVIDIA GPU and a CUDA build of torch (see README, 'GPU').", file=sys.stderr)
    sys.exit(2)


def real_cuda_error(errors):
    """True when a repro cell raised a real (not simulated) error that names CUDA."""
    return any("FakeTensor" not in e["type"] and ("cuda" in e["message"].lower() or "OutOfMemory" in e["type"]) for e in errors)


def mixed_precision(device, width=4096, batch=8192, steps=10):
    """Lesson 07's measurement (and 03's other lever): speed and peak-memory ratios of an MLP training step under
    autocast (fp16 on cuda, bf16 elsewhere) against float32, from trainclinic.precision.compare."""
    from trainclinic import precision

    result = precision.compare(device, width=width, batch=batch, steps=steps)
    result["lesson"] = "07_mixed_precision"
    return result


def checkpoint_round_trip(device):
    """A real checkpoint round trip: saved on `device`, loaded with map_location='cpu' and with no map_location, and
    saved on the CPU, loaded with map_location=device; the file's location tags against `checkpoints.save_tagged`'s,
    and what torch.load says about the device's file when CUDA is hidden (lesson 08's machine without a GPU)."""
    import io

    import torch
    from torch import nn

    from trainclinic import checkpoints

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3)).to(device)
    state = model.state_dict()
    cpu_state = {k: v.detach().cpu() for k, v in state.items()}
    saved = io.BytesIO()
    torch.save(state, saved)
    blob = saved.getvalue()

    def same(loaded, where):
        return all(torch.equal(loaded[k].cpu(), v) and loaded[k].device.type == where for k, v in cpu_state.items())

    on_cpu = torch.load(io.BytesIO(blob), map_location="cpu", weights_only=True)
    as_saved = torch.load(io.BytesIO(blob), weights_only=True)
    cpu_saved = io.BytesIO()
    torch.save(cpu_state, cpu_saved)
    onto_device = torch.load(io.BytesIO(cpu_saved.getvalue()), map_location=device, weights_only=True)
    tag = f"{device.type}:{device.index or 0}" if device.type != "cpu" else "cpu"
    fixture = checkpoints.describe(checkpoints.save_tagged(cpu_state, location=tag))["locations"]
    real = checkpoints.describe(io.BytesIO(blob))["locations"]
    with checkpoints.without_cuda():
        try:
            torch.load(io.BytesIO(blob), weights_only=True)
            hidden = None
        except Exception as exc:
            hidden = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    result = {
        "device": str(device), "bytes": len(blob), "locations": real, "save_tagged_locations": fixture,
        "save_tagged_matches": fixture == real,
        "device_to_cpu": same(on_cpu, "cpu"), "as_saved_onto": sorted({str(v.device) for v in as_saved.values()}),
        "as_saved_equal": same(as_saved, device.type), "cpu_to_device": same(onto_device, device.type),
        "load_with_cuda_hidden": hidden,
    }
    result["passed"] = bool(result["save_tagged_matches"] and result["device_to_cpu"] and result["as_saved_equal"]
                            and result["cpu_to_device"] and (device.type != "cuda" or (hidden and "Attempting to "
                            "deserialize object on a CUDA device" in hidden)))
    return result


def main():
    """Run every solution notebook on cuda and write the report."""
    try:
        import torch
    except ImportError:
        refuse(f"this python ({sys.executable}) has no torch")
    if not torch.cuda.is_available():
        refuse(f"torch.cuda.is_available() is False here (torch {torch.__version__})")
    from run_cells import run_notebook

    os.environ.update(TRAINCLINIC_DEVICE="cuda", TRAINCLINIC_STATIC="1", MPLBACKEND="Agg")
    props = torch.cuda.get_device_properties(0)
    report = {
        "device": props.name, "memory_gib": round(props.total_memory / 2**30, 1), "torch": torch.__version__,
        "cuda": torch.version.cuda, "python": platform.python_version(), "when": time.strftime("%Y-%m-%d %H:%M:%S"),
        "notebooks": {},
    }
    for path in sorted((ROOT / "solutions").glob("*/*.ipynb")):
        before = torch.cuda.memory_allocated()
        result = run_notebook(path)
        torch.cuda.empty_cache()
        result["real_cuda_error"] = real_cuda_error(result["repro_errors"])
        result["memory_left_bytes"] = torch.cuda.memory_allocated() - before
        report["notebooks"][path.stem] = result
        print(f"{path.stem:<28} {'passed' if result['passed'] else 'FAILED'} in {result['seconds']:6.1f} s, "
              f"{result['checks']} checks, real CUDA error: {result['real_cuda_error']}", flush=True)
        if result["error"]:
            print(result["error"]["traceback"])
    try:
        from trainclinic import memory

        if hasattr(memory, "gpu_report"):
            report["out_of_memory"] = memory.gpu_report(torch.device("cuda", 0))
    except ImportError:
        pass
    report["checkpoint_round_trip"] = trip = checkpoint_round_trip(torch.device("cuda", 0))
    print(f"checkpoint round trip (08): cuda -> cpu {trip['device_to_cpu']}, cpu -> cuda {trip['cpu_to_device']}, "
          f"save_tagged writes the same tags {trip['save_tagged_matches']}, CUDA hidden: {trip['load_with_cuda_hidden']}")
    report["mixed_precision"] = mixed_precision(torch.device("cuda", 0))
    print(f"mixed precision (lesson 07; 03's other lever): {report['mixed_precision']['speedup']}x faster, peak memory x "
          f"{report['mixed_precision']['memory_ratio']}")
    out = ROOT / "artifacts" / "gpu-report.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(report, indent=1, default=str))
    print(f"report: {out}")
    return 0 if all(r["passed"] for r in report["notebooks"].values()) and trip["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
