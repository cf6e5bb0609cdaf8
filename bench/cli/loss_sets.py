"""The losses a command plans: a loss, a comma-separated list of losses, or a named set (paper,
realitycheck, all), each loss with the parameters the set gives it. The names are read from
the loss modules' `@register_loss("...")` lines, not by importing them (that imports torch), so
that a typo'd loss is refused in well under a second, with the nearest names."""

from __future__ import annotations

import ast
from functools import cache
from importlib.util import find_spec
from pathlib import Path

from bench.util.errors import did_you_mean
from bench.util.registry import PML_PREFIX

# The seven core losses, triplet with each miner: the suite that CI and reports/ run.
PAPER = (
    ("nngk", {}),
    ("softmax", {}),
    ("contrastive", {}),
    ("triplet", {"miner": "semihard"}),
    ("triplet", {"miner": "easy-positive"}),
    ("triplet", {"miner": "all"}),
    ("npair", {}),
    ("lifted", {}),
    ("nca", {}),
)
# The losses Musgrave et al. 2020 (A Metric Learning Reality Check) compared, as named here.
REALITY_CHECK = (
    ("contrastive", {}),
    ("triplet", {"miner": "semihard"}),
    ("ntxent", {}),
    ("proxy-nca", {}),
    ("margin", {}),
    ("margin-class-beta", {}),
    ("normalized-softmax", {}),
    ("cosface", {}),
    ("arcface", {}),
    ("fastap", {}),
    ("snr", {}),
    ("multi-similarity", {}),
    ("multi-similarity-miner", {}),
    ("soft-triple", {}),
)
LOSS_SETS = ("paper", "realitycheck", "all")
LOSS_HELP = (
    "A loss (`nngk-bench losses`), a comma-separated list of them (nngk,contrastive), or a "
    "set: paper (NNGK and the source papers' losses, triplet with each miner), realitycheck "
    "(the fourteen of Musgrave et al. 2020), all (every loss); or pml:ClassName, any loss "
    "class of the installed pytorch-metric-learning."
)


@cache
def registered_loss_names() -> tuple[str, ...]:
    """The names the loss modules register, read from their source (`losses/*.py`)."""
    spec = find_spec("losses")  # finds the package without importing it
    folders = spec.submodule_search_locations if spec else None
    if not folders:
        raise RuntimeError("the losses package is not installed; pip install -e . again")
    names = []
    for path in sorted(p for folder in folders for p in Path(folder).glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
                names += [registered_name(d) for d in node.decorator_list]
    return tuple(sorted(name for name in names if name))


def registered_name(decorator: ast.expr) -> str:
    """'nngk' for `@register_loss("nngk")`; '' for any other decorator."""
    if not isinstance(decorator, ast.Call) or not decorator.args:
        return ""
    func, arg = decorator.func, decorator.args[0]
    named = getattr(func, "id", getattr(func, "attr", "")) == "register_loss"
    return arg.value if named and isinstance(arg, ast.Constant) else ""


def planned_losses(text: str) -> list[tuple[str, dict]]:
    """The (loss, parameters) of a named set or of a comma-separated list of losses and sets,
    each once; a ValueError naming the sets and the nearest losses for a name that is
    neither."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise ValueError(f"--loss {text!r}: no loss; expected a loss or a set ({set_list()})")
    plan: list[tuple[str, dict]] = []
    for name in names:
        plan += [p for p in named_set(name) if p not in plan]
    return plan


def named_set(name: str) -> list[tuple[str, dict]]:
    """The (loss, parameters) a set or a loss name stands for."""
    known = registered_loss_names()
    if name == "paper":
        return list(PAPER)
    if name == "realitycheck":
        return list(REALITY_CHECK)
    if name == "all":
        planned = [*PAPER, *(p for p in REALITY_CHECK if p not in PAPER)]
        named = {loss for loss, _ in planned}
        return [*planned, *((loss, {}) for loss in known if loss not in named)]
    check_loss_name(name, sets=True)
    return [(name, {})]


def check_loss_name(name: str, sets: bool = False) -> None:
    """A ValueError naming the losses (and the sets, where they are taken), the nearest
    first, for a name that is no loss."""
    known = registered_loss_names()
    if name in known:
        return
    if name.startswith(PML_PREFIX):  # any loss class of the installed PML (imports it)
        from losses.pml_adapter import pml_class

        pml_class(name)
        return
    choices = [*known, *(LOSS_SETS if sets else ())]
    also = f" or a set ({set_list()})" if sets else ""
    raise ValueError(
        f"unknown loss {name!r}{did_you_mean(name, choices)}; expected a loss "
        f"({', '.join(known)}), pml:ClassName (pytorch-metric-learning's){also}"
    )


def set_list() -> str:
    return ", ".join(LOSS_SETS)
