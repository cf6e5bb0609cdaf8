"""Miners by name, filled by the `register_miner` decorator."""

from __future__ import annotations

from torch import nn

from bench.util.registry import Registry

MINERS = Registry("miner")
register_miner = MINERS.register
miner_names = MINERS.names


def build_miner(name: str, margin: float) -> nn.Module:
    """A triplet miner whose margin is the loss's own (PML's miner default differs from it)."""
    return MINERS.get_class(name)(margin=margin)
