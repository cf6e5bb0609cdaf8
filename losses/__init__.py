"""The harness's losses, one file each, registered by name: importing the package imports
each of its modules, whose `register_loss` fills the registry (a new loss's file needs no
entry here)."""

from importlib import import_module
from pkgutil import iter_modules

from losses.base import BenchLoss
from losses.registry import (
    LOSSES,
    build_loss,
    get_loss_class,
    is_loss,
    loss_defaults,
    loss_family,
    loss_names,
)

for _module in iter_modules(__path__):
    import_module(f"{__name__}.{_module.name}")

__all__ = [
    "LOSSES",
    "BenchLoss",
    "build_loss",
    "get_loss_class",
    "is_loss",
    "loss_defaults",
    "loss_family",
    "loss_names",
]
