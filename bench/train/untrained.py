"""The untrained network's test metrics, which every fresh run records (`untrained_network`),
shared between the runs of one process that start from the same network.

The runs of one seed start from the same weights whatever their loss (the network is seeded
and built before the loss), so the main job's 4 losses x 3 seeds embedded the test split 12
times for 3 different networks. Here a network's test embeddings are kept, by a digest of its
weights and the settings that shape its output, and reused: the same embeddings to the bit
(normalised after, as `embed` normalises them whole), so the same metrics. The metrics are kept
too, for runs that also normalise alike. Runs whose protocol adds its own evaluations (e.g. a
classifier's, which reads the loss) are evaluated as before, each on its own."""

from __future__ import annotations

import hashlib
from typing import Any

import torch
import torch.nn.functional as F

from bench.train.run_evaluation import scored_test, searched_test
from bench.util.progress import log

# Settings that change how a run trains, never what its untrained network embeds or how its
# test is scored; every other setting is part of the key (a new one is too, until named here).
TRAINING_ONLY = (
    "loss", "loss_params", "epochs", "warmup_epochs", "batch_size", "m_per_class", "memory",
    "optimizer", "lr", "embedding_lr", "schedule", "momentum", "weight_decay", "freeze_bn",
    "freeze_backbone", "log", "workers",
)  # fmt: skip
KEPT = 8  # networks kept (a job's seeds); the oldest dropped first


class UntrainedCache:
    """Test embeddings and metrics of untrained networks, by `network_key`."""

    def __init__(self, kept: int = KEPT):
        self.kept = kept
        self.embeddings: dict[str, tuple[torch.Tensor, Any]] = {}
        self.metrics: dict[tuple[str, bool], dict] = {}

    def clear(self) -> None:
        self.embeddings.clear()
        self.metrics.clear()

    def keep_embeddings(self, key: str, value: tuple[torch.Tensor, Any]) -> None:
        self.embeddings[key] = value
        while len(self.embeddings) > self.kept:
            oldest = next(iter(self.embeddings))
            del self.embeddings[oldest]
            for found in [k for k in self.metrics if k[0] == oldest]:
                del self.metrics[found]


CACHE = UntrainedCache()


def network_key(run: Any) -> str:
    """A digest of the run's network (every parameter and buffer, by name, dtype and shape) and
    of the settings that shape its test embeddings and their scores (all but `TRAINING_ONLY`)."""
    digest = hashlib.sha256()
    settings = {k: v for k, v in run.cfg.to_dict().items() if k not in TRAINING_ONLY}
    digest.update(repr(sorted(settings.items())).encode())
    digest.update(str(run.device).encode())
    for name, tensor in run.model.state_dict().items():
        value = tensor.detach().to("cpu").contiguous()
        digest.update(f"{name}:{value.dtype}:{tuple(value.shape)}".encode())
        digest.update(value.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def untrained_metrics(run: Any, cache: UntrainedCache = CACHE) -> dict:
    """The test metrics of `run`'s network as it is (before any training), as `searched_test`
    with clustering none computes them; shared through `cache` where that gives the same."""
    if run.evaluations:  # they may read the loss: not shared
        return searched_test(run, clustering="none")[0]
    key = network_key(run)
    # scored as the run scores: normalised or not, by its search (faiss, or torch on a device)
    scoring = (bool(run.loss.normalize_embeddings), str(run.compute.search), tuple(run.ks))
    normalize = scoring[0]
    if (key, scoring) in cache.metrics:
        log.info(f"{run.name}: the untrained network's test metrics as an earlier run's (same)")
        return dict(cache.metrics[(key, scoring)])
    if key not in cache.embeddings:
        cache.keep_embeddings(key, raw_test_embeddings(run))
    emb, labels = cache.embeddings[key]
    # as `embed` normalises: the whole split at once, after its batches; the kept one untouched
    emb = F.normalize(emb, dim=1) if normalize else emb.clone()
    metrics, _ = scored_test(run, emb.numpy(), labels, "none")
    cache.metrics[(key, scoring)] = dict(metrics)
    return metrics


def raw_test_embeddings(run: Any) -> tuple[torch.Tensor, Any]:
    """The test split through the run's network, not normalised, as `run.embed_split` embeds it."""
    from bench.models.embed import embed

    split = run.data.test
    with run.precision.autocast():
        return embed(run.model, split, run.device, False, loader=run.loader_of(split))
