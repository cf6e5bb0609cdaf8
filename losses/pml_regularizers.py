"""The regularizers of the installed pytorch-metric-learning by name, for the `pml:` losses:
`--regularizer pml:ClassName` (issue 46). Whether one regularizes a loss's class weights or the
embeddings is read from the class: PML's weight regularizers compute their loss from `weights`
(CenterInvariant, RegularFace, SparseCenters), the others from `embeddings` (Lp, ZeroMean).
A regularizer's parameter without a default takes the loss's value of the same name, or the
run's number of classes (SparseCenters: SoftTriple's `centers_per_class`)."""

from __future__ import annotations

import inspect
from typing import Any

from pytorch_metric_learning import regularizers
from pytorch_metric_learning.losses.mixins import WeightRegularizerMixin

from bench.util.registry import PML_PREFIX, exported_classes, prefixed_class


def regularizer_classes() -> dict[str, type]:
    """PML's regularizer classes by name, its base class left out."""
    found = exported_classes(regularizers, regularizers.BaseRegularizer)
    return {n: c for n, c in found.items() if c is not regularizers.BaseRegularizer}


def regularizer_names() -> list[str]:
    return [PML_PREFIX + n for n in regularizer_classes()]


def regularizes_weights(cls: type) -> bool:
    """Whether PML's regularizer works on a loss's class weights (else on the embeddings)."""
    return "weights" in inspect.signature(cls.compute_loss).parameters


def regularizer_class(name: str) -> type:
    choices = f"one of pytorch-metric-learning's: {', '.join(regularizer_names())}"
    return prefixed_class("regularizer", name, regularizer_classes(), {}, choices)


def regularizer_arguments(
    name: str | None, weight: float, loss: type, known: dict[str, Any], args: dict[str, Any]
) -> dict[str, Any]:
    """The keyword arguments that give PML's `loss` class the regularizer `name` at `weight`
    (none without one); `known`: the loss's parameters and the run's sizes, by PML's names,
    for a regularizer's parameters without a default; `args`: those of the loss's fix
    (losses/pml_fixes.py) that the regularizer names. A one-line ValueError for a weight
    regularizer of a loss without class weights, or a parameter nothing gives."""
    if name is None:
        return {}
    cls = regularizer_class(name)
    on_weights = regularizes_weights(cls)
    if on_weights and not issubclass(loss, WeightRegularizerMixin):
        embedding_ones = [PML_PREFIX + n for n, c in regularizer_classes().items()
                          if not regularizes_weights(c)]  # fmt: skip
        raise ValueError(
            f"--regularizer {name} regularizes a loss's class weights, and {loss.__name__} has "
            f"none; use it with a loss that has (pml:ArcFaceLoss, ...), or one of the "
            f"embeddings: {', '.join(embedding_ones)}"
        )
    params = inspect.signature(cls.__init__).parameters.values()
    needed = [p.name for p in params if p.default is p.empty and p.kind == p.POSITIONAL_OR_KEYWORD]
    needed = [n for n in needed if n != "self"]
    lacking = [n for n in needed if n not in known]
    if lacking:
        raise ValueError(f"--regularizer {name} needs {', '.join(lacking)}, which {loss.__name__} "
                         "does not give")  # fmt: skip
    fixed = {k: v for k, v in args.items() if k in inspect.signature(cls.__init__).parameters}
    built = cls(**{n: known[n] for n in needed}, **fixed)
    kind = "weight" if on_weights else "embedding"
    return {f"{kind}_regularizer": built, f"{kind}_reg_weight": weight}
