"""A run's checkpoint: the model, the loss and the optimiser with the progress so far, serialized
at the end of every epoch and written atomically in the background (the trainer's
`bench.util.atomic.BackgroundWrites`: an interrupted write leaves the previous one whole)."""

from __future__ import annotations

from pathlib import Path

import torch

from bench.util.atomic import torch_bytes
from bench.util.errors import first_line


def fresh_progress(untrained_network: dict) -> dict:
    """A run's progress before its first epoch (`untrained_network`: its metrics at init)."""
    best = {"score": float("-inf"), "epoch": 0, "model": None}
    return {"epoch": 0, "history": [], "untrained_network": untrained_network, "best": best}


def checkpoint_bytes(
    model: torch.nn.Module,
    loss: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    progress: dict,
    scaler: torch.amp.GradScaler | None = None,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
) -> bytes:
    """The run's state serialized: a copy that training may go on changing while it is written
    (in the background: `bench.util.atomic.BackgroundWrites`)."""
    state = {
        "model": model.state_dict(),
        "loss": loss.state_dict(),
        "optimizer": optimizer.state_dict(),
        "progress": progress,
    }
    if scaler is not None and scaler.is_enabled():  # fp16: a resumed run keeps its scale
        state["scaler"] = scaler.state_dict()
    if scheduler is not None:  # --schedule: a resumed run goes on where it was
        state["scheduler"] = scheduler.state_dict()
    return torch_bytes(state)


def load_checkpoint(
    path: Path,
    device: torch.device,
    model: torch.nn.Module,
    loss: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler | None = None,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
) -> dict:
    """The checkpoint's state, loaded into the model, loss, optimizer (and fp16's gradient
    scaler, the learning-rate schedule); a one-line error when it is truncated or not this
    run's."""
    try:
        state = torch.load(path, map_location=device, weights_only=True)
        model.load_state_dict(state["model"])
        loss.load_state_dict(state["loss"])
        optimizer.load_state_dict(state["optimizer"])
        if scaler is not None and "scaler" in state:
            scaler.load_state_dict(state["scaler"])
        if scheduler is not None:
            scheduler.load_state_dict(state["scheduler"])
        state["progress"]["epoch"]
    except (RuntimeError, EOFError, KeyError, TypeError, ValueError, OSError) as err:
        raise ValueError(
            f"{path}: unreadable checkpoint ({first_line(err)}); run the same command with --force "
            "to start this run afresh"
        ) from None
    return state
