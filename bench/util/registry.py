"""A name -> class registry filled by a decorator (as timm registers its models)."""

from __future__ import annotations

from inspect import isclass

from bench.util.errors import did_you_mean

# How a name says it is pytorch-metric-learning's class (`pml:TupletMarginLoss`), for its
# losses, miners and regularizers alike; here, below them all and without torch.
PML_PREFIX = "pml:"


def qualified_name(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


class Registry(dict):
    """Classes by name; `kind` names them in the error for an unknown name.

    The decorator refuses a name already taken, as timm refuses a model name registered twice:
    a second class would otherwise replace the first without a word. (Setting an item directly,
    as a test's monkeypatch does, still replaces it.)"""

    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind

    def register(self, name: str):
        def add(cls: type) -> type:
            if name in self and self[name] is not cls:
                raise ValueError(
                    f"{self.kind} {name!r} is already registered to {qualified_name(self[name])}; "
                    f"cannot register {qualified_name(cls)} under the same name"
                )
            self[name] = cls
            cls.registry_name = name
            return cls

        return add

    def names(self) -> list[str]:
        return sorted(self)

    def get_class(self, name: str) -> type:
        if name not in self:
            raise ValueError(
                f"unknown {self.kind} {name!r}{did_you_mean(name, self.names())}; expected "
                f"one of: {', '.join(self.names())}"
            )
        return self[name]


def exported_classes(module: object, base: type) -> dict[str, type]:
    """The classes `module` exports (names without a leading underscore) that subclass
    `base`, by name, sorted: a library's losses, miners or regularizers."""
    found = {n: getattr(module, n) for n in dir(module) if not n.startswith("_")}
    return {n: c for n, c in sorted(found.items()) if isclass(c) and issubclass(c, base)}


def prefixed_class(
    kind: str, name: str, classes: dict[str, type], refused: dict[str, str], choices: str
) -> type:
    """The class of `classes` that `name` ('pml:Name') names; a one-line ValueError for one in
    `refused` (with the reason) or for none, naming the `choices`."""
    short = name.partition(":")[2]
    if short in refused:
        raise ValueError(f"{kind} {name}: {refused[short]}; it cannot be run here")
    if short not in classes:
        raise ValueError(f"unknown {kind} {name!r}: no such {kind} class; expected {choices}")
    return classes[short]
