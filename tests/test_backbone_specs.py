"""The backbone registry (issue 67): every registered spec against the network it builds (its
feature and GAP sizes, least input side, batch norm, the "backbone" embedding's dropout), a
name registered twice refused, and what the command line and the checks derive from it."""

from __future__ import annotations

import functools

import pytest
import torch

from bench.models.backbones import build_backbone
from bench.models.choices import (
    BACKBONES,
    SPECS,
    BackboneSpec,
    backbone_spec,
    register_backbone,
)
from bench.models.embedding import build_model
from bench.train.recipes import batch_norms


@functools.cache
def built(name: str, embedding: str = "fc") -> torch.nn.Module:
    spec = SPECS[name]
    dims = {"fc": 8, "gap": spec.gap, "backbone": spec.features or 8}[embedding]
    return build_model(name, dims, "none", 8 if spec.vectors else 3, embedding).eval()


def one_input(spec: BackboneSpec) -> torch.Tensor:
    # At its least side, where it has one: the side it must take.
    side = spec.min_size or 8
    return torch.randn(2, 8) if spec.vectors else torch.randn(2, 3, side, side)


@pytest.mark.parametrize("name", BACKBONES)
def test_each_spec_is_what_its_network_is(name):
    spec = SPECS[name]
    model = built(name)
    x = one_input(spec)
    with torch.no_grad():
        features = model.features(x)
    assert features.shape == (2, spec.features or 8)
    assert model.min_size == spec.min_size
    assert bool(batch_norms(model.backbone)) == spec.batch_norm
    if spec.gap:
        with torch.no_grad():
            assert built(name, "gap")(x).shape == (2, spec.gap)
    if spec.head_dropout:  # after its own output as the embedding; the others add nothing
        assert built(name, "backbone").embed.p == spec.head_dropout


def test_a_timm_name_has_a_spec_and_an_unknown_name_is_refused():
    assert backbone_spec("timm:resnet18").family == "timm"
    with pytest.raises(
        ValueError, match="unknown backbone 'resnet1000'; expected one of: small_cnn"
    ):
        backbone_spec("resnet1000")


def test_a_name_is_registered_once(monkeypatch):
    monkeypatch.setattr("bench.models.choices.SPECS", dict(SPECS))
    with pytest.raises(ValueError, match="backbone 'resnet18' is already registered") as info:
        register_backbone(BackboneSpec("resnet18", "torchvision", 512, torchvision="resnet34"))
    assert "\n" not in str(info.value)
    spec = register_backbone(BackboneSpec("toy34", "torchvision", 512, torchvision="resnet34"))
    net, dims, channels = build_backbone("toy34")
    assert (dims, channels, spec.cut) == (512, 3, "fc")
    assert sum(p.numel() for p in net.parameters()) == 21284672  # torchvision's, less its fc
