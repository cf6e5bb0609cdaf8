"""One run on several processes (`torchrun --nproc_per_node N`, or `run --nproc N`).

Every process draws the same global batches (same seeds) and takes its slice of each; the
embeddings of the whole batch are gathered on every process, so a loss sees the batch that one
process would have seen (pairs, triplets and N-pairs across slices included) and every process
computes the same loss value. Each process backpropagates it through its own slice only, so
the one-process gradient is the sum of theirs: DistributedDataParallel sums the gradients
instead of averaging them. The loss's own parameters (NNGK's weights, a softmax layer) get the
whole batch's gradient on every process already. The NNGK bank is refreshed on the first
process and sent to the others, so that every process holds the same centres and lists.
Validation, testing and every file are the first process's; the others follow its decisions.

On CPUs (gloo) batch normalisation normalises each process's slice by itself, so a network
with BatchNorm trains slightly differently from one process (a GroupNorm network such as
`small_cnn_gn` gives the same metrics); on GPUs its layers become SyncBatchNorm.
"""

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import torch
import torch.distributed as dist
from torch.utils.data import BatchSampler, Sampler

T = TypeVar("T")


@dataclass(frozen=True)
class Ranks:
    rank: int = 0
    world: int = 1

    @property
    def main(self) -> bool:
        return self.rank == 0


ONE_PROCESS = Ranks()


def ranks_from_env(device: torch.device) -> Ranks:
    """This process's place under torchrun (WORLD_SIZE > 1), joining the group; else one."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return ONE_PROCESS
    if not dist.is_initialized():
        dist.init_process_group(backend_for(device))
    return Ranks(dist.get_rank(), dist.get_world_size())


def backend_for(device: torch.device) -> str:
    """NCCL when every process of this machine has a GPU of its own; gloo on CPUs and where
    processes share a GPU, since NCCL refuses two ranks on one device."""
    if device.type != "cuda":
        return "gloo"
    local = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
    return "nccl" if local <= torch.cuda.device_count() else "gloo"


def local_device(device: torch.device) -> torch.device:
    """A process's own GPU (LOCAL_RANK) when several share a machine; with more processes
    than GPUs they take the GPUs in turn."""
    if device.type == "cuda" and "LOCAL_RANK" in os.environ:
        return torch.device("cuda", int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count())
    return device


def check_divisible(batch_size: int, ranks: Ranks) -> None:
    """A one-line error for a global batch that the processes cannot share equally."""
    if batch_size % ranks.world:
        raise ValueError(
            f"a batch of {batch_size} cannot be split between {ranks.world} "
            "processes; give a --batch-size divisible by the number of processes"
        )


class RankSlices(Sampler[list[int]]):
    """This process's slice of every global batch: items [r b, (r + 1) b) of each, b =
    batch / world, so the slices of all processes make up the one-process batch in order."""

    def __init__(self, batches: BatchSampler, ranks: Ranks):
        check_divisible(batches.batch_size, ranks)
        self.batches, self.ranks = batches, ranks
        self.size = batches.batch_size // ranks.world

    def __iter__(self):
        start = self.ranks.rank * self.size
        for batch in self.batches:
            yield batch[start : start + self.size]

    def __len__(self) -> int:
        return len(self.batches)


def gather_batch(
    embeddings: torch.Tensor, labels: torch.Tensor, indices: torch.Tensor, ranks: Ranks
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The whole batch on every process, in the one-process order: the other slices'
    embeddings as constants, this process's with its gradient."""
    if ranks.world == 1:
        return embeddings, labels, indices

    def gathered(t: torch.Tensor) -> list[torch.Tensor]:
        parts = [torch.empty_like(t) for _ in range(ranks.world)]
        dist.all_gather(parts, t.detach().contiguous())
        return parts

    parts = gathered(embeddings)
    parts[ranks.rank] = embeddings
    return torch.cat(parts), torch.cat(gathered(labels)), torch.cat(gathered(indices))


def sum_gradients(_state, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: the processes' gradients summed (DDP's default averages)."""
    work = dist.all_reduce(bucket.buffer(), async_op=True)
    return work.get_future().then(lambda fut: fut.value()[0])


def wrap_model(model: torch.nn.Module, device: torch.device, ranks: Ranks) -> torch.nn.Module:
    """The model to train with: itself, or DDP over it summing the gradients."""
    if ranks.world == 1 or not any(p.requires_grad for p in model.parameters()):
        return model
    from torch.nn.parallel import DistributedDataParallel

    ids = None
    if device.type == "cuda":  # batch statistics over the whole batch (CUDA only in torch)
        torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)
        ids = [device.index]
    ddp = DistributedDataParallel(model, device_ids=ids)
    ddp.register_comm_hook(None, sum_gradients)
    return ddp


def share_from_main(value, ranks: Ranks):
    """The first process's `value` (any picklable object) on every process."""
    if ranks.world == 1:
        return value
    box = [value if ranks.main else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def decided_by_main(decide: Callable[[], T], ranks: Ranks, raises: type[Exception]) -> T:
    """`decide()` on the first process; on every process its result, or the `raises` error it
    raised (raised on each), so that all of them follow the first process's decision (the
    validation that selects the checkpoint, or its divergence)."""
    if ranks.world == 1:
        return decide()
    outcome = None
    if ranks.main:
        try:
            outcome = decide()
        except raises as err:
            outcome = err
    outcome = share_from_main(outcome, ranks)
    if isinstance(outcome, raises):
        raise outcome
    return outcome


def share_state(module: torch.nn.Module, ranks: Ranks) -> None:
    """The first process's state of `module` (a loss's refreshed bank) on every process."""
    if ranks.world > 1:
        state = {k: v.cpu() for k, v in module.state_dict().items()}
        module.load_state_dict(share_from_main(state, ranks))


def wait_for_main(ranks: Ranks) -> None:
    """Every process waits here for the others (the first, writing a run's files)."""
    if ranks.world > 1:
        dist.barrier()
