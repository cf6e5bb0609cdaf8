"""`nngk-bench pretrain`: a backbone trained with softmax on glyphs classes disjoint from the
benchmark's, written as a state dict for `run --pretrained PATH`, with its provenance."""

from __future__ import annotations

from pathlib import Path

import click

from bench.cli.options import DEVICE, POSITIVE, POSITIVE_FLOAT, check_out_writable, click_errors
from bench.data.names import PRETRAIN_SOURCE
from bench.models.choices import PRETRAIN_BACKBONES
from bench.util.errors import first_line


@click.command()
@click.option(
    "--dataset",
    default=PRETRAIN_SOURCE,
    show_default=True,
    help="The glyphs source: classes the benchmark (glyphs, classes 0-199 of seed 0) never "
    "sees, e.g. glyphs:first=1000,classes=1000 (classes 1000-1999).",
)
@click.option(
    "--backbone", type=click.Choice(PRETRAIN_BACKBONES), default="small_cnn", show_default=True
)
@click.option("--epochs", type=POSITIVE, default=10, show_default=True)
@click.option(
    "--lr", type=POSITIVE_FLOAT, default=0.05, show_default=True, help="SGD, cosine schedule."
)
@click.option("--batch-size", type=click.IntRange(min=2), default=128, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--out",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="The state dict (default: weights/BACKBONE-glyphs.pt); its provenance goes beside it, "
    "with the suffix .json.",
)
@click.option("--force", is_flag=True, help="Replace an existing --out and its .json.")
@DEVICE
def pretrain(dataset, backbone, epochs, lr, batch_size, seed, out, force, device):
    """Pretrain a backbone with softmax on glyphs classes disjoint from the benchmark's, for
    `run --pretrained PATH`: its state dict, and beside it its provenance (source and class
    range, settings, held-out accuracy per epoch, sha256)."""
    out = out or Path("weights") / f"{backbone}-glyphs.pt"
    if out.suffix == ".json":
        raise click.ClickException(f"--out {out}: the provenance takes the name .json; give .pt")
    existing = [p for p in (out, out.with_suffix(".json")) if p.exists()]
    if existing and not force:
        raise click.ClickException(
            f"{existing[0]} exists; give another --out, or --force to replace it "
            f"({' and '.join(map(str, existing))})"
        )
    from bench.cli.training import run_compute
    from bench.train.pretrain import PretrainConfig
    from bench.train.pretrain import pretrain as run_pretrain

    cfg = PretrainConfig(dataset, backbone, epochs, lr, batch_size, seed)
    with click_errors(ValueError, RuntimeError, line=first_line):
        check_out_writable(out)  # before training: the weights would be lost at the first write
        record = run_pretrain(cfg, out, run_compute(device).device)  # resolved once, here
    accuracy = record["val_accuracy"][-1]
    click.echo(
        f"{out}: {record['label']}, held-out accuracy {accuracy:.3f} (sha256 "
        f"{record['sha256'][:12]}; provenance {out.with_suffix('.json')})"
    )
