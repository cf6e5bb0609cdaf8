"""A name -> class registry filled by a decorator (as timm registers its models)."""

from __future__ import annotations


class Registry(dict):
    """Classes by name; `kind` names them in the error for an unknown name."""

    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind

    def register(self, name: str):
        def add(cls: type) -> type:
            self[name] = cls
            cls.registry_name = name
            return cls

        return add

    def names(self) -> list[str]:
        return sorted(self)

    def get_class(self, name: str) -> type:
        if name not in self:
            raise ValueError(
                f"unknown {self.kind} {name!r}; expected one of: {', '.join(self.names())}"
            )
        return self[name]
