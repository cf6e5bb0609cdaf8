"""The losses' registry: every loss is registered, and one declared on the unit sphere ignores
the embeddings' scale; an unknown loss, parameter or miner is a one-line error naming the
valid ones; a name registered twice is refused."""

from __future__ import annotations

import pytest
import torch

import losses
from bench.cli.loss_sets import registered_loss_names
from bench.util.registry import Registry
from losses.base import FAMILIES
from losses.contrastive import ContrastiveLoss
from losses.registry import LOSSES, register_loss
from miners.registry import MINERS, register_miner
from miners.semihard import SemiHardNegativeMiner

# Where a loss's value and its declared normalisation part ways, and why: bce-pair's batch
# normalisation cancels a scale of its raw distances, which are evaluated as they are;
# SphereFace's logits carry |x|, its decision (on angles) does not.
SCALE_FREE = {"bce-pair": True, "sphereface": False}


def test_registered_losses():
    # The names the command line reads from the modules' source without importing them.
    assert losses.loss_names() == sorted(registered_loss_names())


@pytest.mark.parametrize("name", losses.loss_names())
def test_a_loss_declared_on_the_sphere_ignores_the_embeddings_scale(name):
    """`normalize_embeddings` (the evaluated embedding normalised) where the loss's value is the
    same for the embeddings scaled by 3 (the same weights, miners' draws and refresh)."""
    embeddings = torch.randn(16, 4, generator=torch.Generator().manual_seed(0))
    labels = torch.arange(4).repeat_interleave(4)
    values = []
    for scale in (1.0, 3.0):
        torch.manual_seed(0)
        loss = losses.build_loss(name, {}, num_train=16, num_classes=4, dims=4)
        if loss.refresh_interval:
            loss.refresh(embeddings * scale, labels)
        torch.manual_seed(1)
        indices = torch.arange(16) if loss.needs_indices else None
        values.append(float(loss(embeddings * scale, labels, indices).detach()))
    scale_free = values[1] == pytest.approx(values[0], rel=1e-5)
    assert scale_free == SCALE_FREE.get(name, loss.normalize_embeddings), values


@pytest.mark.parametrize("name", losses.loss_names())
def test_family_lr_multiplier_and_search_space(name):
    cls = losses.get_loss_class(name)
    assert cls.family in FAMILIES  # the report's families, which a table's column names
    if cls.lr_multiplier != 1:
        assert cls.sources.get("lr_multiplier")
    space = cls.search_space
    assert set(space) <= set(losses.loss_defaults(name))
    for param, (kind, low, high) in space.items():
        assert kind in ("float", "log", "int") and low < high
        assert low <= losses.loss_defaults(name)[param] <= high, param


def test_unknown_loss_name_lists_every_name():
    with pytest.raises(ValueError) as err:
        losses.build_loss("tripletz", {}, num_train=10, num_classes=2, dims=2)
    message = str(err.value)
    assert "tripletz" in message
    for name in losses.loss_names():
        assert name in message


def test_unknown_parameter_names_what_the_loss_takes():
    with pytest.raises(ValueError) as err:
        losses.build_loss("nngk", {"sigmaa": 1.0}, num_train=10, num_classes=2, dims=2)
    message = str(err.value)
    assert "sigmaa" in message
    for param in ("sigma", "k", "update_interval", "learn_weights"):
        assert param in message.split("takes:")[1]
    assert "num_train" not in message

    with pytest.raises(ValueError, match="no parameters"):
        losses.build_loss("softmax", {"dims": 3}, num_train=10, num_classes=2, dims=2)


def test_unknown_miner_through_triplet_params():
    with pytest.raises(ValueError, match="semihard"):
        losses.build_loss("triplet", {"miner": "hardest"}, num_train=10, num_classes=2, dims=2)


def test_a_name_registered_twice_is_refused_naming_both_classes():
    class Other(ContrastiveLoss):
        pass

    with pytest.raises(ValueError) as err:
        register_loss("contrastive")(Other)
    message = str(err.value)
    assert message == (
        "loss 'contrastive' is already registered to losses.contrastive.ContrastiveLoss; "
        f"cannot register {Other.__module__}.{Other.__qualname__} under the same name"
    )
    assert LOSSES["contrastive"] is ContrastiveLoss  # the first stays
    with pytest.raises(ValueError, match="^miner 'semihard' is already registered to miners"):
        register_miner("semihard")(Other)
    assert MINERS["semihard"] is SemiHardNegativeMiner


def test_a_new_name_registers_and_a_set_item_still_replaces():
    registry = Registry("thing")

    @registry.register("a")
    class A:
        pass

    assert registry.register("a")(A) is A  # the same class again: nothing to refuse
    assert registry.get_class("a") is A and A.registry_name == "a"
    registry["a"] = int  # as a test's monkeypatch.setitem does
    assert registry.get_class("a") is int


def test_no_name_is_registered_twice_in_the_project():
    # Importing every loss and miner module registers each name once (a second would raise).
    import miners

    assert len(losses.loss_names()) == len(set(LOSSES.values())) == len(registered_loss_names())
    assert len(miners.miner_names()) == len(set(MINERS.values()))
