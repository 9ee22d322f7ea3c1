"""trainclinic.checkpoints: a checkpoint as a GPU machine writes it, and what a file holds, read without running it."""
import io
import pickle

import numpy as np
import pytest
import torch

import trainclinic as tc
from trainclinic import checkpoints


def test_save_tagged_writes_what_a_gpu_machine_writes():
    state = tc.mlp(inputs=4, hidden=8, outputs=3).state_dict()
    blob = checkpoints.save_tagged(state, location="cuda:1")
    assert checkpoints.describe(io.BytesIO(blob))["locations"] == {"cuda:1": len(state)}
    loaded = torch.load(io.BytesIO(blob), weights_only=True, map_location="cpu")
    assert all(torch.equal(loaded[k], v) for k, v in state.items())
    assert torch.serialization.location_tag(torch.zeros(1).untyped_storage()) == "cpu"  # restored
    if not torch.cuda.is_available():
        with pytest.raises(Exception, match="Attempting to deserialize object on a CUDA device"):
            torch.load(io.BytesIO(blob), weights_only=True)


def test_save_tagged_to_a_path_restores_the_tag_after_an_error(tmp_path):
    path = tmp_path / "x.pt"
    assert checkpoints.save_tagged({"w": torch.ones(2)}, path) == path
    assert checkpoints.describe(path)["locations"] == {"cuda:0": 1}
    with pytest.raises(Exception):
        checkpoints.save_tagged({"f": lambda: 0}, io.BytesIO())  # a lambda does not pickle
    assert torch.serialization.location_tag(torch.zeros(1).untyped_storage()) == "cpu"


def test_describe_names_globals_without_importing_or_calling_them(tmp_path):
    class Boom:
        def __reduce__(self):
            return (print, ("describe must never call this",))

    path = tmp_path / "c.pt"
    torch.save({"model": tc.mlp(inputs=2, hidden=4, outputs=2).state_dict(), "best": np.float64(0.5),
                "rng": np.random.get_state(), "boom": Boom()}, path)
    info = checkpoints.describe(path)
    assert info["keys"] == ["model", "best", "rng", "boom"]
    assert "builtins.print" in info["globals"] and "numpy.ndarray" in info["globals"]
    assert any(g.endswith("multiarray.scalar") for g in info["globals"])
    assert info["locations"] == {"cpu": 6}
    with pytest.raises(pickle.UnpicklingError, match="Weights only load failed"):
        torch.load(path, weights_only=True)


def test_describe_reads_a_state_dict_and_bytes():
    state = tc.mlp(inputs=2, hidden=4, outputs=2).state_dict()
    info = checkpoints.describe(checkpoints.save_tagged(state, location="cpu"))
    assert info["keys"] == list(state) and info["locations"] == {"cpu": len(state)}
    assert info["globals"] == ["collections.OrderedDict", "torch.FloatStorage", "torch._utils._rebuild_tensor_v2"]


def test_weights_only_default_follows_the_version_and_the_environment(monkeypatch):
    monkeypatch.delenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", raising=False)
    monkeypatch.delenv("TORCH_FORCE_WEIGHTS_ONLY_LOAD", raising=False)
    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    assert checkpoints.weights_only_default() == ((major, minor) >= (2, 6))
    monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
    assert checkpoints.weights_only_default() is False


def test_without_cuda_makes_torch_load_refuse_cuda_and_restores():
    real = torch.cuda.is_available
    blob = checkpoints.save_tagged({"w": torch.ones(2)})
    with checkpoints.without_cuda():
        assert torch.cuda.is_available() is False
        with pytest.raises(Exception, match="Attempting to deserialize object on a CUDA device"):
            torch.load(io.BytesIO(blob), weights_only=True)
    assert torch.cuda.is_available is real


def test_save_check_sees_a_model_moved_off_its_device(monkeypatch):
    """check_resume's GPU probe, exercised here with the meta device standing in for a GPU: the lesson's
    save_checkpoint leaves the model where it is; one that moves it (to the CPU) fails with the device it left."""
    from trainclinic.checks import CheckFailed
    from trainclinic.checks import checkpoints as ck

    def moves(path, model, *rest):
        model.to_empty(device="cpu")  # meta -> CPU (a model.cpu() on a GPU; meta tensors have no data to copy)
        ck.reference_save_checkpoint(path, model, *rest)

    monkeypatch.setattr(ck, "devices", lambda: [torch.device("cpu"), torch.device("meta")])
    case = ck._case(0)
    ck._save_keeps_device(ck.reference_save_checkpoint, case, 0)
    with pytest.raises(CheckFailed, match=r"the model's device after save_checkpoint \(the model on meta\): "
                                          r"expected meta, where it was, observed cpu"):
        ck._save_keeps_device(moves, case, 0)
