"""The NNGK training step against a per-example loop and against a softmax step.

The loop is how a loss layer written one example at a time computes Eq. 3 (the way issue 15
calls "the authors' loop"): for each example, gather its k centres, their squared distances
and the two log-sum-exps. It is the reference the step's speed-up is quoted against, and a test
checks that both give the same value and gradients.
"""

from __future__ import annotations

import torch

from bench.speed.benchmarks import seconds_per_call


def per_example_nngk_loss(
    x: torch.Tensor,
    labels: torch.Tensor,
    neighbours: torch.Tensor,
    centres: torch.Tensor,
    centre_labels: torch.Tensor,
    log_weights: torch.Tensor,
    sigma: float,
) -> torch.Tensor:
    """Eq. 3, one example at a time; rows without a same-label neighbour are left out."""
    total, count = x.new_zeros(()), 0
    for b in range(len(x)):
        nbr = neighbours[b]
        d2 = (x[b] - centres[nbr]).pow(2).sum(1)
        logits = log_weights[nbr] - d2 / (2.0 * sigma**2)
        same = centre_labels[nbr] == labels[b]
        if bool(same.any()):
            total = total + torch.logsumexp(logits, 0) - torch.logsumexp(logits[same], 0)
            count += 1
    return total / max(count, 1)


def nngk_case(batch: int, dims: int, bank: int, k: int, device: str, seed: int = 0):
    """A refreshed NNGK loss over a random bank, a batch of its items and their embeddings."""
    from losses import build_loss

    gen = torch.Generator().manual_seed(seed)
    centres = torch.randn(bank, dims, generator=gen)
    labels = torch.randint(0, max(bank // 50, 2), (bank,), generator=gen)
    context = {"num_train": bank, "num_classes": int(labels.max()) + 1, "dims": dims}
    loss = build_loss("nngk", {"sigma": 1.0, "k": k}, **context)
    loss.refresh(centres, labels)
    loss = loss.to(device)
    idx = torch.randperm(bank, generator=gen)[:batch]
    x = (centres[idx] + 0.1 * torch.randn(batch, dims, generator=gen)).to(device)
    return loss, x.requires_grad_(), labels[idx].to(device), idx.to(device)


def step_times(batch: int, dims: int, bank: int, k: int, device: str) -> dict[str, float]:
    """Seconds per forward+backward: ours, the per-example loop, a softmax step (a linear
    classifier over the bank's classes) on the same embeddings."""
    loss, x, labels, idx = nngk_case(batch, dims, bank, k, device)
    nbr = loss.neighbours[idx]
    classifier = torch.nn.Linear(dims, int(loss.centre_labels.max()) + 1).to(device)
    bank_args = (loss.centres, loss.centre_labels, loss.log_weights, loss.sigma)
    steps = {
        "nngk": lambda: loss(x, labels, idx),
        "loop": lambda: per_example_nngk_loss(x, labels, nbr, *bank_args),
        "softmax": lambda: torch.nn.functional.cross_entropy(classifier(x), labels),
    }

    def timed(value) -> float:
        def step() -> None:
            x.grad = None
            value().backward()
            if device.startswith("cuda"):
                torch.cuda.synchronize()

        return seconds_per_call(step)

    return {name: timed(value) for name, value in steps.items()}


def nngk_step_benchmark(
    batch: int = 128, dims=(64, 512, 1024), bank: int = 5000, k: int = 100, device: str = "cpu"
) -> list[dict]:
    """The step times and their ratios, per embedding size."""
    rows = []
    for d in dims:
        t = step_times(batch, d, bank, k, device)
        rows.append(
            {
                "dims": d,
                "batch": batch,
                "k": k,
                "bank": bank,
                "nngk_s": t["nngk"],
                "loop_s": t["loop"],
                "softmax_s": t["softmax"],
                "loop / nngk": t["loop"] / t["nngk"],
                "nngk / softmax": t["nngk"] / t["softmax"],
            }
        )
    return rows
