"""Losses by name, filled by the `register_loss` decorator."""

from __future__ import annotations

import inspect
from typing import Any

from bench.util.errors import check_known
from bench.util.registry import Registry
from losses.base import BenchLoss
from losses.domains import Domain, pml_domain, pml_orders
from losses.pml_adapter import is_pml_name, pml_loss_class, pml_loss_names

LOSSES = Registry("loss")
register_loss = LOSSES.register
loss_names = LOSSES.names


def get_loss_class(name: str) -> type[BenchLoss]:
    """A registered loss, or any loss class of the installed PML as `pml:ClassName`."""
    if is_pml_name(name):
        return pml_loss_class(name)
    return LOSSES.get_class(name)


def is_loss(name: str) -> bool:
    """Whether `name` is a registered loss or names a loss class of the installed PML."""
    return name in LOSSES or (is_pml_name(name) and name in pml_loss_names())


# Values the trainer passes to any loss whose constructor names them; not user parameters.
CONTEXT_ARGS = ("num_train", "num_classes", "dims")


def loss_defaults(name: str) -> dict[str, Any]:
    """The user-settable parameters of a loss with their defaults (from its constructor)."""
    params = inspect.signature(get_loss_class(name).__init__).parameters
    return {
        p.name: p.default
        for p in params.values()
        if p.name != "self" and p.name not in CONTEXT_ARGS and p.kind == p.POSITIONAL_OR_KEYWORD
    }


def loss_domains(name: str) -> dict[str, Domain]:
    """The declared domains of a loss's parameters (losses/domains.py): its own, or those of
    the PML class (or adapter) it hands them to, under their names."""
    cls = get_loss_class(name)
    found = {}
    for param in loss_defaults(name):
        theirs = cls.pml_names.get(param, param)
        domain = cls.domains.get(param) or cls.domains.get(theirs)
        if domain is None and cls.pml_class is not None:
            domain = pml_domain(cls.pml_class, theirs)
        if domain is not None:
            found[param] = domain
    return found


def check_domains(name: str, params: dict[str, Any]) -> None:
    """A ValueError naming the first parameter outside its declared domain, and the domain
    (None is a parameter left unset: PML's HistogramLoss takes n_bins or delta)."""
    for param, domain in loss_domains(name).items():
        value = params.get(param)
        if value is not None and not domain.holds(value):
            raise ValueError(f"{param}={value}: {param} is {domain}")
    cls = get_loss_class(name)
    if cls.pml_class is None:
        return
    ours = {cls.pml_names.get(k, k): k for k in loss_defaults(name)}
    values = {**loss_defaults(name), **params}
    for low, high, why in pml_orders(cls.pml_class):
        a, b = values.get(ours.get(low, "")), values.get(ours.get(high, ""))
        if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a >= b:
            raise ValueError(
                f"{ours[low]}={a:g} and {ours[high]}={b:g}: {name} needs {ours[low]} < "
                f"{ours[high]} ({why})"
            )


def loss_family(name: str) -> str:
    """The family of a loss ("" for a name no longer registered)."""
    return get_loss_class(name).family if is_loss(name) else ""


def memory_losses() -> list[str]:
    """The losses that take a cross-batch memory (`--memory`)."""
    return [name for name in LOSSES.names() if get_loss_class(name).memory_ok]


def check_memory_taken(name: str, memory: int) -> None:
    """A ValueError naming the losses that take a cross-batch memory where `name` does not."""
    if memory and not get_loss_class(name).memory_ok:
        raise ValueError(
            f"--memory {memory}: the loss {name!r} takes no cross-batch memory; drop --memory "
            f"or use one that does: {', '.join(memory_losses())}"
        )


def build_loss(name: str, params: dict[str, Any], memory: int = 0, **context: Any) -> BenchLoss:
    """Build a loss from its user parameters plus whatever context values it names; with a
    cross-batch memory of `memory` embeddings (of `dims`) where that is not 0."""
    cls = get_loss_class(name)
    check_known("loss", name, params, loss_defaults(name))
    check_domains(name, params)  # before the loss divides by one of them
    wanted = inspect.signature(cls.__init__).parameters
    ctx = {k: v for k, v in context.items() if k in wanted}
    loss = cls(**params, **ctx)
    if not memory:
        return loss
    check_memory_taken(name, memory)
    from losses.memory import with_memory

    return with_memory(loss, memory, context["dims"])
