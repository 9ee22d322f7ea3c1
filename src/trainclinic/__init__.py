"""trainclinic: the small helper library behind the lessons (the story lives in the notebooks).

Importing it only imports torch: matplotlib and ipywidgets load when a plot is drawn.
"""
from . import (checkpoints, checks, clinic, data, device, distributed, evaluation, fingerprint, gradients, graphs, memory, models,
               monitor, nonfinite, plots, precision, processes, shapes)
from .checks import CheckFailed
from .data import blobs, loader, regression, seed_everything
from .device import SimulatedCuda, accelerator, banner, pick_device, strays
from .models import mlp
from .monitor import grad_norm, layer_grad_norms
from .plots import LivePlot, explore

__version__ = "0.1.0"

__all__ = [
    "CheckFailed", "LivePlot", "SimulatedCuda", "accelerator", "banner", "blobs", "checkpoints", "checks", "clinic", "data",
    "device", "distributed", "evaluation", "explore", "fingerprint", "grad_norm", "gradients", "graphs", "layer_grad_norms", "loader",
    "memory", "mlp", "models", "monitor", "nonfinite", "pick_device", "plots", "precision", "processes",
    "regression", "seed_everything", "shapes", "strays",
]
