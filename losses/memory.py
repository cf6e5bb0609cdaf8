"""Cross-batch memory (Wang et al. 2020; PML's CrossBatchMemory) around a pair or triplet loss
(`--memory N`): the embeddings of the last N training examples, kept from earlier batches,
are the other end of each batch's pairs and triplets, so that a small batch sees as many pairs
as a large one. The loss's miner, if any, mines between the batch and the memory."""

from __future__ import annotations

from typing import Any

from pytorch_metric_learning.losses import CrossBatchMemory

from losses.base import PMLLoss


class ResumableCrossBatchMemory(CrossBatchMemory):
    """PML's CrossBatchMemory whose queue position is in its state_dict too (its embeddings
    and labels already are), so that a resumed run's memory goes on where it stopped."""

    def get_extra_state(self) -> dict[str, Any]:
        return {"queue_idx": int(self.queue_idx), "has_been_filled": bool(self.has_been_filled)}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.queue_idx = state["queue_idx"]
        self.has_been_filled = state["has_been_filled"]


def with_memory(loss: PMLLoss, size: int, dims: int) -> PMLLoss:
    """`loss` (one that declares `memory_ok`) with a memory of `size` embeddings of `dims`."""
    loss.loss = ResumableCrossBatchMemory(loss.loss, dims, memory_size=size, miner=loss.miner)
    loss.miner = None
    return loss
