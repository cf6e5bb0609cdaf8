"""`nngk-bench losses`: the losses and miners, what each needs, and where its defaults come from."""

from __future__ import annotations

import inspect
import textwrap

import click


def summary(cls) -> str:
    """A class's docstring's first paragraph, on one line."""
    return inspect.getdoc(cls).split("\n\n")[0].replace("\n", " ")


def batch_text(cls) -> str:
    if not cls.class_balanced:
        return "random batches"
    if cls.examples_per_class:
        return f"class-balanced batches: N classes x {cls.examples_per_class}"
    return "class-balanced batches: the preset's examples per class (--m-per-class)"


def needs_text(cls) -> str:
    needs = [batch_text(cls)]
    if cls.normalize_embeddings:
        needs.append("L2-normalised embeddings")
    if cls.needs_indices:
        needs.append("dataset indices")
    interval = inspect.signature(cls.__init__).parameters.get("update_interval")
    if interval is not None or cls.refresh_interval:
        needs.append("a refresh from the whole training set (update_interval)")
    return "; ".join(needs)


def takes_text(cls) -> list[str]:
    """What the loss takes beyond its parameters: a memory, its own learning rate."""
    lines = []
    if cls.memory_ok:
        lines.append("    takes: --memory N (a cross-batch memory)")
    if cls.lr_multiplier != 1:
        source = cls.sources.get("lr_multiplier", "no source recorded")
        lines.append(f"    its parameters' lr: {cls.lr_multiplier:g}x --lr: {source}")
    return lines


def describe(name: str) -> list[str]:
    """The lines of one loss: name, its docstring's first paragraph, needs, each default."""
    from losses import get_loss_class, loss_defaults

    cls = get_loss_class(name)
    lines = [name, f"    {summary(cls)}", f"    needs: {needs_text(cls)}", *takes_text(cls)]
    for param, value in loss_defaults(name).items():
        source = cls.sources.get(param, "no source recorded")
        lines.append(f"    {param}={value}: {source}")
    return lines


@click.command(name="losses")
def list_losses():
    """List the losses (what each needs, every default with its source) and the miners."""
    from losses import loss_names
    from miners import MINERS

    for name in loss_names():
        click.echo("\n".join(describe(name)))
    click.echo("\nminers (triplet --miner; their margin is the loss's):")
    for name, cls in sorted(MINERS.items()):
        own = " (contrastive-centroid's own, which refreshes it; --miner refuses it)"
        click.echo(f"{name}\n    {summary(cls)}{own if hasattr(cls, 'refresh') else ''}")
    click.echo("\n".join(set_lines()))
    click.echo("\n".join(pml_lines()))


def member_text(loss: str, params: dict) -> str:
    """'triplet (miner=semihard)' for a set's member with parameters; 'nngk' for one without."""
    given = ", ".join(f"{k}={v}" for k, v in params.items())
    return f"{loss} ({given})" if given else loss


def set_lines() -> list[str]:
    """The named sets --loss and suite --losses take, each with its members in plan order."""
    from bench.cli.loss_sets import LOSS_SETS, named_set

    lines = ["\nsets (--loss NAME, suite --losses NAME):"]
    for name in LOSS_SETS:
        members = named_set(name)
        lines.append(f"{name} ({len(members)} runs a seed)")
        text = ", ".join(member_text(loss, p) for loss, p in members)
        lines.append(textwrap.fill(text, 96, initial_indent="    ", subsequent_indent="    "))
    return lines


def regularizers() -> str:
    """PML's regularizers, those of a loss's class weights marked."""
    from losses.pml_regularizers import regularizer_class, regularizer_names, regularizes_weights

    weights = " (class weights)"
    return ", ".join(
        n + (weights if regularizes_weights(regularizer_class(n)) else "")
        for n in regularizer_names()
    )


def pml_lines() -> list[str]:
    """The loss and miner classes of the installed PML, each with what it needs and its
    parameters (PML's defaults; None: give it, where PML has no default); those that cannot
    run here, with the reason."""
    import pytorch_metric_learning

    from losses import get_loss_class, loss_defaults
    from losses.pml_adapter import NOT_RUNNABLE, pml_loss_names
    from miners.registry import NOT_MINERS, pml_miner_names

    version = pytorch_metric_learning.__version__
    lines = [f"\npytorch-metric-learning {version}'s losses (--loss pml:NAME, --loss-param):"]
    for name in pml_loss_names():
        params = ", ".join(f"{k}={v}" for k, v in loss_defaults(name).items())
        lines.append(f"{name}\n    needs: {needs_text(get_loss_class(name))}\n    {params}")
    lines.append(f"its miners (--miner pml:NAME): {', '.join(pml_miner_names())}")
    lines.append(f"its regularizers (--regularizer pml:NAME, with a pml: loss): {regularizers()}")
    lines.append("not run here:")
    lines += [f"    {name}: {why}" for name, why in {**NOT_RUNNABLE, **NOT_MINERS}.items()]
    return lines
