"""make gpu-check: refuses clearly without CUDA; its Jupyter-free runner executes the lessons."""
import subprocess
import sys

import pytest
import torch

from conftest import LESSONS, ROOT, source_nb
from run_cells import run_notebook


@pytest.mark.skipif(torch.cuda.is_available(), reason="asserts the refusal on a machine without CUDA")
def test_gpu_check_refuses_without_cuda():
    proc = subprocess.run([sys.executable, "tools/gpu_check.py"], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2
    assert "needs a CUDA GPU: torch.cuda.is_available() is False" in proc.stderr


def test_runner_executes_lesson_01_without_jupyter(monkeypatch):
    monkeypatch.setenv("TRAINCLINIC_STATIC", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    result = run_notebook(source_nb(LESSONS[0]))
    assert result["passed"], result["error"]
    assert result["checks"] >= 3 and len(result["repro_errors"]) >= 1
    assert all("Expected all tensors to be on the same device" in e["message"] for e in result["repro_errors"])
    assert torch.Tensor.backward.__module__ == "torch._tensor"  # the simulation restored autograd


def test_runner_stops_at_an_unexpected_error(tmp_path):
    import json

    nb = {"cells": [{"cell_type": "code", "metadata": {}, "source": "%matplotlib inline\nx = 1"},
                    {"cell_type": "code", "metadata": {"tags": ["raises-exception"]}, "source": "1 / 0"},
                    {"cell_type": "code", "metadata": {}, "source": "raise KeyError('boom')"},
                    {"cell_type": "code", "metadata": {}, "source": "print('never')"}]}
    path = tmp_path / "n.ipynb"
    path.write_text(json.dumps(nb))
    result = run_notebook(path)
    assert not result["passed"] and result["cells"] == 3
    assert result["repro_errors"][0]["type"] == "builtins.ZeroDivisionError"
    assert result["error"]["type"] == "builtins.KeyError"


def test_mixed_precision_figures_on_any_device():
    """The GPU report's mixed-precision ratios, computed here on the CPU (bf16) with a small model."""
    sys.path.insert(0, str(ROOT / "tools"))
    from gpu_check import mixed_precision

    result = mixed_precision(torch.device("cpu"), width=64, batch=256, steps=2)
    assert result["dtype"] == "torch.bfloat16"
    assert result["float32"]["peak_bytes"] > 0 and result["mixed"]["peak_bytes"] > 0
    assert 0 < result["memory_ratio"] < 1.5 and result["speedup"] > 0


def test_checkpoint_round_trip_on_any_device():
    """The GPU report's checkpoint round trip, run here on the CPU: the same code path, with cpu tags."""
    sys.path.insert(0, str(ROOT / "tools"))
    from gpu_check import checkpoint_round_trip

    result = checkpoint_round_trip(torch.device("cpu"))
    assert result["passed"], result
    assert result["locations"] == {"cpu": 4} and result["save_tagged_matches"]
    assert result["as_saved_onto"] == ["cpu"] and result["load_with_cuda_hidden"] is None
