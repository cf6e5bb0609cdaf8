"""Miners (of triplets, or of pairs as `hdc`), one file each, registered by name: importing
the package imports each of its modules, whose `register_miner` fills the registry."""

from importlib import import_module
from pkgutil import iter_modules

from miners.registry import MINERS, build_miner, get_miner_class, miner_names, pml_miner_names

for _module in iter_modules(__path__):
    import_module(f"{__name__}.{_module.name}")

__all__ = ["MINERS", "build_miner", "get_miner_class", "miner_names", "pml_miner_names"]
