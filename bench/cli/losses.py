"""`nngk-bench losses`: the losses and miners with their default parameters."""

from __future__ import annotations

import click


@click.command(name="losses")
def list_losses():
    """List the losses and miners with their default parameters."""
    from losses import get_loss_class, loss_defaults, loss_names
    from miners import MINERS

    for name in loss_names():
        params = ", ".join(f"{k}={v}" for k, v in loss_defaults(name).items()) or "-"
        doc = (get_loss_class(name).__doc__ or "").strip().splitlines()[0]
        click.echo(f"{name:12s} {params}\n{'':12s} {doc}")
    click.echo("\nminers (triplet --miner):")
    for name, cls in sorted(MINERS.items()):
        doc = (cls.__doc__ or "").strip().splitlines()[0]
        click.echo(f"{name:14s} {doc}")
