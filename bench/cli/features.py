"""`nngk-bench features`: a frozen backbone's features of every image, into an .npz."""

from __future__ import annotations

import json
from pathlib import Path

import click

from bench.cli.options import DEVICE, EMOJI_HELP, POSITIVE, check_out_writable, click_errors
from bench.cli.settings import setting_option
from bench.data.names import FEATURES_PREFIX
from bench.models.choices import BACKBONES, check_backbone
from bench.protocols import DEFAULT_PROTOCOL, Linear
from bench.util.errors import first_line


@click.command()
@click.option(
    "--backbone", default="vgg16", show_default=True, help=f"One of {', '.join(BACKBONES)}."
)
@click.option(
    "--dataset",
    default="digits",
    show_default=True,
    help="digits, cars196, cub, sop, inaturalist, tinyimagenet, flowers102, leafsnap, "
    f"{EMOJI_HELP.format(held='', note='docs/protocols.md')} or folder:PATH.",
)
@click.option(
    "--protocol",
    type=click.Choice(Linear.data_protocols),  # the protocols whose split `linear` fits on
    default=DEFAULT_PROTOCOL,
    show_default=True,
)
@setting_option("data_root")
@click.option(
    "--pretrained",
    default="imagenet",
    show_default=True,
    help="imagenet, none, or a state-dict PATH.",
)
@click.option("--resize", type=POSITIVE, default=None, help="Default: the protocol's preset.")
@click.option(
    "--crop", type=POSITIVE, default=None, help="Centre crop; default: the protocol's preset."
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seeds pretrained=none.")
@click.option(
    "--out",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Default: results/features/<dataset>-<protocol>-<backbone>-<weights>.npz, with "
    "--resize, --crop, --seed and --data-root where given (e.g. ...-resize-64.npz).",
)
@click.option("--force", is_flag=True, help="Extract again even if the file exists.")
@DEVICE
def features(
    backbone, dataset, protocol, data_root, pretrained, resize, crop, seed, out, force, device
):
    """Extract features of every image of DATASET once with a frozen BACKBONE (VGG16: FC7
    after ReLU, Sharma et al. 2015) into an .npz (features, labels, split) for `linear --dataset
    features:PATH`."""
    from bench.data.datasets import check_dataset
    from bench.data.feature_files import write_features
    from bench.data.sources.folder import check_outside_data
    from bench.train.extract import default_features_path, extract_features

    given = dict(resize=resize, crop=crop, seed=seed, data_root=data_root)
    out = out or default_features_path(dataset, protocol, backbone, pretrained, **given)
    source = dict(dataset=dataset, protocol=protocol, backbone=backbone, pretrained=pretrained)
    source.update(given)
    with click_errors(ValueError, FileNotFoundError, RuntimeError, line=first_line):
        if out.exists() and not force:
            click.echo(skip_line(out, source))
            return
        check_dataset(dataset)
        check_backbone(backbone)
        if dataset.startswith(FEATURES_PREFIX):
            raise ValueError(f"{dataset} holds features already; give a data set of images")
        if dataset == "inshop":  # its errors would say --protocol query-gallery, not ours
            raise ValueError(
                "inshop's test searches query images in a gallery, which a features file "
                "(train, val, test) does not keep; run it with `run --protocol query-gallery`"
            )
        check_outside_data(out, [dataset], "--out")
        check_out_writable(out)  # before the extraction, which the first write would lose
        from bench.cli.training import run_compute

        arrays = extract_features(
            dataset,
            backbone,
            pretrained,
            protocol,
            data_root,
            run_compute(device).device,  # resolved here, once: CUDA where present by default
            seed,
            resize=resize,
            crop=crop,
        )
    write_features(out, *arrays, source=source)
    split = arrays[2]
    counts = ", ".join(f"{s} {int((split == s).sum())}" for s in ("train", "val", "test"))
    click.echo(f"{out}: {arrays[0].shape[1]}-d features of {len(split)} images ({counts})")


def shown_source(source: dict) -> str:
    """'digits (metric, small_cnn, none, seed 0)': a data set and the settings given."""
    fixed = [source.get(k) for k in ("protocol", "backbone", "pretrained")]
    rest = [f"{k.replace('_', '-')} {v}" for k, v in source.items() if k in ("resize", "crop",
            "seed", "data_root") and v not in (None, "")]  # fmt: skip
    return f"{source.get('dataset')} ({', '.join(str(v) for v in [*fixed, *rest])})"


def skip_line(out: Path, source: dict) -> str:
    """The line of an --out that exists: skipped where it holds these features (or says
    nothing of what it holds: a file of an older version); a ValueError naming whose
    features it holds where they are another extraction's, which a skip would leave in place
    of the ones asked for."""
    from bench.data.feature_files import features_source

    theirs = features_source(out)
    source = json.loads(json.dumps(source, default=str))  # as the file holds it
    if theirs is None:
        return (
            f"{out}: exists, skipped; it records no data set or settings (--force extracts again)"
        )
    if theirs == source:
        return f"{out}: exists, skipped (--force extracts again)"
    raise ValueError(
        f"--out {out} holds the features of {shown_source(theirs)}, not of "
        f"{shown_source(source)}; give another --out (or leave it out: the default path "
        "names the data set and settings), or --force to replace them"
    )
