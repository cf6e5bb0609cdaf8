"""What a run records of the weights it starts from: their label ('random init', 'ImageNet',
'small_cnn pretrained on glyphs 1000-1999'), a weights file's provenance (`nngk-bench pretrain`
writes it beside the file), sha256 and format, and whether the file changed since."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.util.weights_files import weights_format, weights_sha256

# --pretrained values that name no file (random init, torchvision's ImageNet weights, timm's
# hub), with how a run's label names them.
NAMED_WEIGHTS = {"none": "random init", "imagenet": "ImageNet", "hub": "hub weights"}


def provenance_path(weights: str | Path) -> Path:
    """Where `nngk-bench pretrain` writes what a weights file holds: beside it, NAME.json."""
    return Path(weights).with_suffix(".json")


def read_provenance(weights: str) -> dict[str, Any]:
    """The provenance beside a weights file; {} where there is none, it does not read, or it
    is of other weights (its sha256 is not the file's)."""
    try:
        record = json.loads(provenance_path(weights).read_text())
        digest = weights_sha256(weights)
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) and record.get("sha256") == digest else {}


def provenance_label(record: dict[str, Any]) -> str:
    """'small_cnn pretrained on glyphs 1000-1999' (and the glyphs seed where it is not 0); for
    a record of other weights (written by hand beside, say, a timm model's file) its "label";
    '' for a record that does not say."""
    try:
        first, last = (int(i) for i in record["classes"])
        seed, backbone = int(record.get("glyphs_seed", 0)), str(record["backbone"])
    except (KeyError, TypeError, ValueError):
        return str(record.get("label") or "") if isinstance(record, dict) else ""
    of_seed = f" of seed {seed}" if seed else ""
    return f"{backbone} pretrained on glyphs {first}-{last}{of_seed}"


def weights_label(pretrained: str, provenance: dict[str, Any] | None = None) -> str:
    """How a run's weights read: 'random init', 'ImageNet', 'hub weights' (a timm model's), or
    for a local weights file what its `provenance` says it is ('small_cnn pretrained on glyphs
    1000-1999'), else its name."""
    named = NAMED_WEIGHTS.get(pretrained)
    return named or provenance_label(provenance or {}) or Path(pretrained).name


def current_weights_label(pretrained: str) -> str:
    """`weights_label` with the provenance beside the weights file as it is now: what a run
    records (`weights` in its metrics.json), so that its report need not find the file."""
    given = pretrained not in NAMED_WEIGHTS
    return weights_label(pretrained, read_provenance(pretrained) if given else None)


def weights_record(pretrained: str) -> dict[str, str]:
    """What a run records of the weights file it starts from, beside its label: its sha256
    and format ({} for named weights, or a file no longer there)."""
    if pretrained in NAMED_WEIGHTS or not Path(pretrained).is_file():
        return {}
    return {
        "weights_sha256": weights_sha256(pretrained),
        "weights_format": weights_format(pretrained),
    }


def changed_weights(metrics: dict, pretrained: str) -> str:
    """Where a finished run recorded the sha256 of a weights file that now holds other weights
    (replaced at the same path, e.g. `pretrain --force`): a line saying so; else ''. Its run
    id names the path alone, so the run would be taken as done from weights it never saw."""
    old = metrics.get("weights_sha256")
    new = weights_record(pretrained).get("weights_sha256") if old else None
    if not new or new == old:
        return ""
    return (
        f"its weights file {pretrained} changed since it was trained (sha256 {old[:12]}, now "
        f"{new[:12]}); --force retrains from the new weights, or give them another path"
    )


def untrained_label(backbone: str, pretrained: str, weights: str = "") -> str:
    """The untrained-network baseline's row name, e.g. 'untrained small_cnn (random init)';
    `weights`: the weights' label, where it is known (else `weights_label(pretrained)`)."""
    return f"untrained {backbone} ({weights or weights_label(pretrained)})"
