"""Miners by name, filled by the `register_miner` decorator."""

from __future__ import annotations

from torch import nn

MINERS: dict[str, type[nn.Module]] = {}


def register_miner(name: str):
    def add(cls: type[nn.Module]) -> type[nn.Module]:
        MINERS[name] = cls
        cls.registry_name = name
        return cls

    return add


def miner_names() -> list[str]:
    return sorted(MINERS)


def build_miner(name: str, margin: float) -> nn.Module:
    """A triplet miner whose margin is the loss's own (PML's miner default differs from it)."""
    if name not in MINERS:
        raise ValueError(f"unknown miner {name!r}; expected one of: {', '.join(miner_names())}")
    return MINERS[name](margin=margin)
