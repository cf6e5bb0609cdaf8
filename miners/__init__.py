"""Triplet miners, one file each, registered by name."""

from miners import all_triplets, centroid_hard_negative, easy_positive, semihard  # noqa: F401
from miners.registry import MINERS, build_miner, get_miner_class, miner_names, pml_miner_names

__all__ = ["MINERS", "build_miner", "get_miner_class", "miner_names", "pml_miner_names"]
