"""trainclinic.precision: the half dtype per device, zero_fraction, the CPU's bfloat16 flag, and compare's figures."""
import torch

from trainclinic import precision


def test_half_dtype_per_device():
    assert precision.half_dtype("cpu") == torch.bfloat16
    assert precision.half_dtype(torch.device("cuda")) == torch.float16


def test_zero_fraction():
    assert precision.zero_fraction([torch.zeros(3), torch.ones(1), None]) == 0.75
    assert precision.zero_fraction([]) == 0.0
    g = torch.full((8,), 1e-8, dtype=torch.float32)
    assert precision.zero_fraction([g]) == 0.0 and precision.zero_fraction([g.half()]) == 1.0  # float16 underflow


def test_cpu_bf16_hardware_is_a_flag_or_unknown():
    assert precision.cpu_bf16_hardware() in (True, False, None)


def test_compare_on_the_cpu():
    r = precision.compare("cpu", width=32, batch=512, steps=1)
    assert r["dtype"] == "torch.bfloat16" and r["device"] == "cpu" and (r["width"], r["batch"], r["steps"]) == (32, 512, 1)
    for mode in ("float32", "mixed"):
        assert r[mode]["seconds_per_step"] > 0 and r[mode]["peak_bytes"] > 0
    assert r["speedup"] > 0
    assert r["memory_ratio"] < 0.9  # the activations saved for backward are 16-bit: they dominate this step


def test_compare_float16_on_the_cpu_leaves_the_rng_alone():
    state = torch.get_rng_state()
    r = precision.compare("cpu", dtype=torch.float16, width=16, batch=64, steps=1)
    assert r["dtype"] == "torch.float16"
    assert torch.equal(torch.get_rng_state(), state)  # seeded on a forked RNG: the caller's stream untouched
