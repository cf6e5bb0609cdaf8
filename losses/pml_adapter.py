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
- What its signature does not say of a class is said once, in losses/pml_fixes.py.
A new PML release brings its loss classes in with no code here. The curated names over a PML
class are declared on the same adapter (`AdaptedLoss`), so `pml:X` and its curated name run
alike with the same parameters (issue 67); where they differ, the curated class says how."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, ClassVar

import pytorch_metric_learning
import torch
from pytorch_metric_learning import losses as pml_losses
from torch import nn

from bench.util.registry import PML_PREFIX, exported_classes, prefixed_class
from losses.base import PMLLoss
from losses.domains import NON_NEGATIVE, Domain, pml_domain
from losses.pml_fixes import fix_of, quiet
from losses.pml_regularizers import regularizer_arguments
from miners import build_miner, get_miner_class

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


def named_parameters(init: Callable) -> list[inspect.Parameter]:
    """The parameters a constructor takes by name (not *args, **kwargs), `self` left out."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    params = inspect.signature(init).parameters.values()
    return [p for p in params if p.name != "self" and p.kind in kinds]


def init_parameters(cls: type) -> dict[str, inspect.Parameter]:
    """The named parameters of the constructors along `cls`'s bases, the class's own first."""
    found: dict[str, inspect.Parameter] = {}
    for klass in cls.__mro__:
        if "__init__" in vars(klass):
            for p in named_parameters(klass.__init__):
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
    params = [p for p in named_parameters(cls.__init__) if p.name not in CONTEXT]
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


def as_declared(value: Any, domain: Domain | None) -> Any:
    """A whole number PML writes for a real parameter (scale=64) as the float a curated loss
    records (64.0): its run id and the reading of its --loss-param go by the type."""
    whole = isinstance(value, int) and not isinstance(value, bool)
    return float(value) if whole and (domain is None or domain.kind is not int) else value


# What the trainer reads of a loss, which an adapted loss takes from PML's class and its fix.
READ = ("class_balanced", "examples_per_class", "normalize_embeddings", "lr_multiplier")


class AdaptedLoss(PMLLoss):
    """A loss class of PML behind the harness's interface, made by declaring it: `pml:Name`
    (`pml_loss_class`) or a curated name (losses/<name>.py). What the trainer reads of it
    (`READ`) comes from PML's class and losses/pml_fixes.py for both alike; a curated class
    declares only its own choices:
    - `params`: the parameters it takes, in order (unset: those of PML's class's constructor),
      by PML's names except where `pml_names` renames one; one that neither PML's class nor
      the adapter (`EXTRA`) takes is its miner's (multi-similarity-miner's epsilon);
    - `defaults`: where its default is not PML's (each sourced in `sources`); a parameter at
      PML's default without a source of its own is sourced "PML's default (value)", the value
      read from PML's class;
    - `fixed`: PML's (or the adapter's) arguments it sets and does not take;
    - `sizes`: the run's sizes it gives where PML's class does not require them;
    - `margin_to_miner`: its miner gets its margin (the miners' own default is another)."""

    params: ClassVar[tuple[str, ...] | None] = None
    defaults: ClassVar[dict[str, Any]] = {}
    fixed: ClassVar[dict[str, Any]] = {}
    sizes: ClassVar[tuple[str, ...]] = ()
    margin_to_miner: ClassVar[bool] = False
    generic: ClassVar[bool] = False  # pml:Name: PML's constructor's parameters and `EXTRA`
    domains = {"regularizer_weight": NON_NEGATIVE}
    # Made from the declarations: the parameters with their defaults; PML's size names ->
    # the trainer's; PML's parameters without a default.
    own: ClassVar[dict[str, Any]] = {}
    context: ClassVar[dict[str, str]] = {}
    needed: ClassVar[list[str]] = []

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        pml, fix = cls.pml_class, fix_of(cls.pml_class)
        if read := [a for a in READ if a in vars(cls)]:
            raise TypeError(f"{cls.__name__} sets {', '.join(read)}; declare it of "
                            f"{pml.__name__} in losses/pml_fixes.py, for pml: too")  # fmt: skip
        required = required_context(pml)
        cls.context = {**required, **{size: CONTEXT[size] for size in cls.sizes}}
        cls.class_balanced = "num_classes" not in required
        cls.examples_per_class = fix.examples_per_class
        cls.normalize_embeddings = fix.normalize_embeddings
        if fix.normalize_embeddings is None:
            cls.normalize_embeddings = normalises(pml)
        cls.lr_multiplier = fix.lr_multiplier
        defaults, cls.needed = own_parameters(pml)
        cls.own = {**defaults, **EXTRA} if cls.generic else declared_parameters(cls)
        if not cls.generic:
            cls.sources = {**pml_default_sources(cls), **cls.sources}

        def __init__(self, **kwargs: Any) -> None:
            AdaptedLoss.__init__(self, **kwargs)

        P = inspect.Parameter
        params = [P("self", P.POSITIONAL_OR_KEYWORD)]
        params += [P(k, P.POSITIONAL_OR_KEYWORD, default=v) for k, v in cls.own.items()]
        params += [P(size, P.KEYWORD_ONLY) for size in sorted(set(cls.context.values()))]
        __init__.__signature__ = inspect.Signature(params)
        cls.__init__ = __init__

    def __init__(self, **kwargs: Any) -> None:
        cls, fix = type(self), fix_of(self.pml_class)
        given = {**cls.own, **{k: v for k, v in kwargs.items() if k in cls.own}}
        values = {**cls.fixed, **{cls.pml_names.get(k, k): v for k, v in given.items()}}
        sizes = {theirs: kwargs[ours] for theirs, ours in cls.context.items()}
        miner, regularizer, weight = (values.pop(k, v) for k, v in EXTRA.items())
        takes = init_parameters(self.pml_class)
        minings = {k: values.pop(k) for k in list(values) if k not in takes}
        if missing := [k for k in cls.needed if values.get(k) is None]:
            needs = ", ".join(f"--loss-param {k}=..." for k in missing)
            raise ValueError(f"{cls.registry_name} has no default for {', '.join(missing)}; "
                             f"give {needs}")  # fmt: skip
        extra = regularizer_arguments(
            regularizer, weight, self.pml_class, {**values, **sizes}, fix.regularizer_args
        )
        made = fix.arguments(values) if fix.arguments else {}
        with quiet(fix.quiet):
            loss = self.pml_class(**values, **sizes, **extra, **made)
        margin = values.get("margin") if cls.margin_to_miner else None
        PMLLoss.__init__(self, loss, build_miner(miner, margin, **minings) if miner else None)

    def forward(self, embeddings, labels, indices=None):
        fix = fix_of(self.pml_class)
        if fix.prepare is not None:
            embeddings, labels = fix.prepare(embeddings, labels)
        with quiet(fix.quiet):
            value = PMLLoss.forward(self, embeddings, labels, indices)
        detach_running_state(self.loss)
        return value


def declared_parameters(cls: type[AdaptedLoss]) -> dict[str, Any]:
    """A curated loss's parameters with their defaults: its own, else PML's class's (along
    its bases: ProxyNCA's softmax_scale is NCA's), else its miner's."""
    takes = init_parameters(cls.pml_class)
    found = {}
    for ours in cls.params or own_parameters(cls.pml_class)[0]:
        theirs = cls.pml_names.get(ours, ours)
        if ours in cls.defaults:
            found[ours] = cls.defaults[ours]
        elif theirs in takes:
            found[ours] = as_declared(takes[theirs].default, pml_domain(cls.pml_class, theirs))
        else:
            miner = inspect.signature(get_miner_class(cls.fixed["miner"]).__init__)
            found[ours] = miner.parameters[theirs].default
    return found


def pml_default_sources(cls: type[AdaptedLoss]) -> dict[str, str]:
    """The source of each parameter a curated loss leaves at its PML class's default, e.g.
    "PML's default (0.1)", the value read from the class: no loss file restates it."""
    takes = init_parameters(cls.pml_class)
    found = {}
    for ours, value in cls.own.items():
        if ours not in cls.defaults and cls.pml_names.get(ours, ours) in takes:
            shown = f"{value:g}" if isinstance(value, float) else value  # 0.0 as "0"
            found[ours] = f"PML's default ({shown})"
    return found


@functools.cache
def pml_loss_class(name: str) -> type[PMLLoss]:
    """The harness's loss class for `pml:Name`, made once: every parameter of PML's class."""
    pml = pml_class(name)
    version = pytorch_metric_learning.__version__
    attrs = {
        "__doc__": f"pytorch-metric-learning's {pml.__name__}, with PML's defaults.",
        "registry_name": name,
        "sources": {k: f"PML {version}'s default" for k in own_parameters(pml)[0]},
        "family": "pml (generic)",
        "pml_class": pml,
        "generic": True,
    }
    return type(f"PML{pml.__name__}", (AdaptedLoss,), attrs)
