"""Any loss class of the installed pytorch-metric-learning by name, `pml:ClassName` (issue 46):
what the trainer needs is read from the class, not written per loss.

- Its parameters are those its constructor names, with PML's defaults (a parameter PML gives
  no default must be set with --loss-param), plus `miner` (a registered miner or `pml:Name`)
  and `regularizer` (`pml:Name`, losses/pml_regularizers.py) with its `regularizer_weight`.
- What PML's spelling of the run's size names (`num_classes`, `embedding_size`, ...) is filled
  in where the constructor requires it; such a loss has weights of its own (class weights,
  proxies), optimised with the network, and its batches are drawn at random; every other loss
  compares the examples of a batch and gets class-balanced batches.
- A loss whose distance normalises the embeddings (most of PML's do) has the evaluated
  embedding normalised too.
A new PML release brings its loss classes in with no code here."""

from __future__ import annotations

import functools
import inspect
from typing import Any

import pytorch_metric_learning
import torch
from pytorch_metric_learning import losses as pml_losses
from torch import nn

from bench.util.registry import PML_PREFIX, exported_classes, prefixed_class
from losses.base import PMLLoss
from losses.pml_regularizers import regularizer_arguments
from miners import build_miner

# PML's names for the run's sizes -> the context the trainer passes (losses/registry.py).
CONTEXT = {
    "num_classes": "num_classes",
    "embedding_size": "dims",
    "descriptors_dim": "dims",  # P2SGradLoss
}
# Classes of PML's loss module that are no loss of a labelled batch, with the reason.
NOT_RUNNABLE = {
    "BaseMetricLossFunction": "the base class of PML's losses",
    "GenericPairLoss": "a base class of PML's pair losses",
    "BaseLossWrapper": "the base class of PML's loss wrappers",
    "CrossBatchMemory": "a wrapper of another loss; --memory gives a loss its memory",
    "SelfSupervisedLoss": "a wrapper comparing two views of each image, which a labelled batch "
    "does not give",
    "MultipleLosses": "a weighted sum of other losses",
    "ManifoldLoss": "it takes no labels (each batch gets random meta-classes), so it would "
    "train nothing of a labelled batch's classes",
    "InstanceLoss": "its target for each example is its label's rank among the batch's labels, "
    "read as a batch column: right only when the batch's first K examples carry the K labels "
    "in order; on class-balanced batches about 9 in 10 target another class (`--loss "
    "instance` is the loss on the harness's batches)",
    "SmoothAPLoss": "PML 2.9 takes consecutive blocks of the batch for its classes, right "
    "only when a batch has as many classes as examples of each (`--loss smooth-ap` lays the "
    "batch out for it)",
    "VICRegLoss": "self-supervised: it compares each embedding with one of another view of the "
    "same image (ref_emb), which a labelled batch does not give",
}
UNSET = None  # the default a parameter without one in PML is listed with
# The adapter's own parameters: a miner (registered, or pml:Name) and a regularizer of PML
# (pml:Name) with its weight in the loss (PML's default weight, 1).
EXTRA = {"miner": None, "regularizer": None, "regularizer_weight": 1.0}


def is_pml_name(name: str) -> bool:
    return name.startswith(PML_PREFIX)


def pml_loss_names() -> list[str]:
    """`pml:Name` of every loss class of the installed PML that a labelled batch can train."""
    return [PML_PREFIX + name for name in loss_classes() if name not in NOT_RUNNABLE]


def loss_classes() -> dict[str, type]:
    """The loss classes PML's loss module exports (the wrappers too), by name."""
    return {
        n: c
        for n, c in exported_classes(pml_losses, nn.Module).items()
        if issubclass(c, pml_losses.BaseMetricLossFunction) or n in NOT_RUNNABLE
    }


def pml_class(name: str) -> type:
    """PML's loss class of `pml:Name`; a ValueError naming the runnable ones otherwise."""
    version = pytorch_metric_learning.__version__
    choices = f"one of pytorch-metric-learning {version}'s: {', '.join(pml_loss_names())}"
    return prefixed_class("loss", name, loss_classes(), NOT_RUNNABLE, choices)


def init_parameters(cls: type) -> dict[str, inspect.Parameter]:
    """The named parameters of the constructors along `cls`'s bases, the class's own first."""
    found: dict[str, inspect.Parameter] = {}
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        for p in inspect.signature(klass.__init__).parameters.values():
            if p.name != "self" and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY):
                found.setdefault(p.name, p)
    return found


def required_context(cls: type) -> dict[str, str]:
    """PML's size names the class requires (no default) -> the trainer's context name."""
    params = init_parameters(cls)
    return {
        name: CONTEXT[name]
        for name, p in params.items()
        if name in CONTEXT and p.default is p.empty
    }


def own_parameters(cls: type) -> tuple[dict[str, Any], list[str]]:
    """The user's parameters: those the class's own constructor names, with PML's defaults
    (UNSET where PML has none), the run's sizes left out; and the names of those without one."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    params = [
        p
        for p in inspect.signature(cls.__init__).parameters.values()
        if p.name != "self" and p.name not in CONTEXT and p.kind in kinds
    ]
    defaults = {p.name: UNSET if p.default is p.empty else p.default for p in params}
    return defaults, [p.name for p in params if p.default is p.empty]


def detach_running_state(loss: nn.Module) -> None:
    """Running statistics a PML loss keeps as plain tensors (DynamicSoftMarginLoss's histogram
    in PML 2.9) detached from the step's graph: kept attached, the next step's backward runs
    into the freed graph of this one."""
    for module in loss.modules():
        for key, value in list(vars(module).items()):
            if isinstance(value, torch.Tensor) and value.requires_grad:
                setattr(module, key, value.detach())


def normalises(cls: type) -> bool:
    """Whether the class's default distance normalises the embeddings (read without building
    the loss, which may require parameters)."""
    try:
        return bool(cls.get_default_distance(None).normalize_embeddings)
    except (AttributeError, TypeError):  # a distance that reads the loss's own state
        return False


@functools.cache
def pml_loss_class(name: str) -> type[PMLLoss]:
    """The harness's loss class for `pml:Name`, made once, declaring what PML's class needs."""
    pml = pml_class(name)
    defaults, required = own_parameters(pml)
    context = required_context(pml)
    takes_classes = "num_classes" in context

    def __init__(self, **kwargs: Any) -> None:
        given = {k: kwargs.pop(k) for k in list(kwargs) if k in defaults}
        miner, regularizer, weight = (kwargs.pop(k, v) for k, v in EXTRA.items())
        sizes = {pml_name: kwargs.pop(ours) for pml_name, ours in context.items()}
        missing = [k for k in required if given.get(k) is None]
        if missing:
            needed = ", ".join(f"--loss-param {k}=..." for k in missing)
            raise ValueError(f"{name} has no default for {', '.join(missing)}; give {needed}")
        known = {**defaults, **given, **sizes}
        extra = regularizer_arguments(regularizer, weight, pml, known)
        PMLLoss.__init__(
            self, pml(**given, **sizes, **extra), build_miner(miner) if miner else None
        )

    def forward(self, embeddings, labels, indices=None):
        value = PMLLoss.forward(self, embeddings, labels, indices)
        detach_running_state(self.loss)
        return value

    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    params += [
        inspect.Parameter(k, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=v)
        for k, v in {**defaults, **EXTRA}.items()
    ]
    params += [inspect.Parameter(c, inspect.Parameter.KEYWORD_ONLY) for c in set(context.values())]
    __init__.__signature__ = inspect.Signature(params)
    attrs = {
        "__init__": __init__,
        "forward": forward,
        "__doc__": f"pytorch-metric-learning's {pml.__name__}, with PML's defaults.",
        "registry_name": name,
        "sources": {k: f"PML {pytorch_metric_learning.__version__}'s default" for k in defaults},
        "class_balanced": not takes_classes,
        "normalize_embeddings": normalises(pml),
        "family": "pml (generic)",
        "pml_class": pml,
    }
    return type(f"PML{pml.__name__}", (PMLLoss,), attrs)
