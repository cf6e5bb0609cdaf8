"""The optimizer a run trains with (`--optimizer`), over its parameter groups: the network's at
the run's learning rate, the embedding layer's at `--embedding-lr` times it, and the loss's own
parameters (proxies, class weights, NNGK's centre weights) at the loss's declared
`lr_multiplier` times it, as their papers train them.

A multiple of 1 keeps its parameters in the network's group, so that the checkpoints of earlier
runs resume."""

from __future__ import annotations

import torch
from torch import nn
from torch.optim import SGD, Adam, AdamW, RMSprop

from bench.runs.config import RunConfig
from bench.train.choices import OPTIMIZER_NAMES, WITH_MOMENTUM

# torch's optimizer of each name; its class's name is its label in the report ('AdamW').
OPTIMIZERS = {"sgd": SGD, "adam": Adam, "adamw": AdamW, "rmsprop": RMSprop}
assert set(OPTIMIZERS) == set(OPTIMIZER_NAMES)


def optimizer_class(cfg: RunConfig) -> tuple[type[torch.optim.Optimizer], dict]:
    """torch's optimizer for `cfg.optimizer` and its arguments besides the parameters: momentum
    where the optimizer has one (SGD, RMSprop); AdamW's weight decay is decoupled (its own)."""
    if cfg.optimizer not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {cfg.optimizer!r}; expected one of: {OPTIMIZER_NAMES}")
    kwargs = {"lr": cfg.lr, "weight_decay": cfg.weight_decay}
    if cfg.optimizer in WITH_MOMENTUM:
        kwargs["momentum"] = cfg.momentum
    return OPTIMIZERS[cfg.optimizer], kwargs


def parameter_groups(cfg: RunConfig, model: nn.Module, loss: nn.Module) -> list[dict]:
    """The trainable parameters: the network's; its embedding layer's at `--embedding-lr`
    times the learning rate (in the network's group where that is 1); the loss's at its
    multiplier (in the network's group where that is 1)."""
    layer = getattr(model, "embed", None) if cfg.embedding_lr != 1 else None
    apart = [p for p in layer.parameters() if p.requires_grad] if layer is not None else []
    taken = {id(p) for p in apart}
    network = [p for p in model.parameters() if p.requires_grad and id(p) not in taken]
    own = [p for p in loss.parameters() if p.requires_grad]
    multiplier = getattr(loss, "lr_multiplier", 1.0)
    groups = [{"params": network}]
    if apart:
        groups.append({"params": apart, "lr": cfg.lr * cfg.embedding_lr})
    if multiplier == 1 or not own:
        groups[0]["params"] += own
    else:
        groups.append({"params": own, "lr": cfg.lr * multiplier})
    return groups


def make_optimizer(cfg: RunConfig, model: nn.Module, loss: nn.Module) -> torch.optim.Optimizer:
    """The run's optimizer; with nothing to learn (a frozen backbone as the embedding, fixed NNGK
    weights) one over a placeholder, so that training runs and evaluates."""
    cls, kwargs = optimizer_class(cfg)
    groups = [g for g in parameter_groups(cfg, model, loss) if g["params"]]
    return cls(groups or [torch.zeros(1, requires_grad=True)], **kwargs)


def optimizer_text(cfg: RunConfig, multiplier: float = 1.0) -> str:
    """The optimizer as the report's setup states it: 'SGD (momentum 0.9, weight decay 0.0005)',
    'AdamW (weight decay 0.0001; the loss's parameters at 100x the lr)'."""
    parts = [f"momentum {cfg.momentum:g}"] if cfg.optimizer in WITH_MOMENTUM else []
    parts.append(f"weight decay {cfg.weight_decay:g}")
    text = ", ".join(parts)
    if cfg.embedding_lr != 1:
        text += f"; the embedding layer at {cfg.embedding_lr:g}x the lr"
    if multiplier != 1:
        text += f"; the loss's parameters at {multiplier:g}x the lr"
    return f"{OPTIMIZERS[cfg.optimizer].__name__} ({text})"
