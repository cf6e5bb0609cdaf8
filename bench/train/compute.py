"""Where a process's runs compute: `--device`, resolved once by the command that trains them
into a `Compute`, which travels down by name (to the trainer, the baselines, the evaluator) as a
run's `--precision` does. Nothing below the command defaults or derives the device again
(docs/development.md, "The walk of the device")."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bench.train.distributed import local_device
from bench.util import runtime, torch_knn


@dataclass(frozen=True)
class Compute:
    """`device`: where the network trains and embeds (under torchrun, this process's own GPU).
    `search`: where the kNN searches, k-means and the embedding's health run, as the evaluator
    takes it (`device=`): None for faiss on the CPU, the same results to the bit as ever; a
    torch device where it is a GPU and faiss has none (`torch_knn.search_device`)."""

    device: torch.device
    search: torch.device | None

    @classmethod
    def resolve(cls, device: str | torch.device | None = None) -> Compute:
        """The given device (checked by the command: `bench.cli.training.checked_device`), or
        CUDA where present when none is given; under torchrun, this process's GPU of it."""
        # Through the modules, not names bound at import: a test that replaces the default or
        # the search's choice there sees every use of it.
        chosen = runtime.default_device() if device is None else torch.device(device)
        chosen = local_device(chosen)
        return cls(chosen, torch_knn.search_device(chosen))
