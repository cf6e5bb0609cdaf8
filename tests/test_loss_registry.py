"""The losses' registry: every loss is registered and declares its batches, indices,
normalisation and refresh; an unknown loss, parameter or miner is a one-line error naming the
valid ones; a name registered twice is refused."""

from __future__ import annotations

import pytest

import losses
from bench.util.registry import Registry
from losses.base import FAMILIES
from losses.contrastive import ContrastiveLoss
from losses.registry import LOSSES, register_loss
from miners.registry import MINERS, register_miner
from miners.semihard import SemiHardNegativeMiner

# name: (class_balanced, needs_indices, normalize_embeddings, refresh_interval)
DECLARED = {
    "contrastive": (True, False, True, None),
    "lifted": (True, False, True, None),
    "nca": (True, False, True, None),
    "nngk": (False, True, False, 10),
    "npair": (True, False, False, None),
    "softmax": (False, False, False, None),
    "triplet": (True, False, True, None),
    # Liu et al. 2019 and the pair-verification report (tests/test_loss_papers.py checks their
    # values)
    "triplet-nca": (True, False, True, None),
    "bce-pair": (True, False, False, None),
    "contrastive-squared": (True, False, False, None),
    "contrastive-centroid": (True, False, False, 1),
    # proxy-based: random batches, like softmax; cosine similarity or unit-sphere distances
    "proxy-nca": (False, False, True, None),
    "proxy-anchor": (False, False, True, None),
    "soft-triple": (False, False, True, None),
    # pair weighting: positives in the batch
    "multi-similarity": (True, False, True, None),
    "multi-similarity-miner": (True, False, True, None),
    "margin": (True, False, True, None),
    "margin-class-beta": (True, False, True, None),
    "circle": (True, False, True, None),
    "tuplet-margin": (True, False, True, None),
    "generalized-lifted": (True, False, True, None),
    "intra-pair-variance": (True, False, True, None),
    "angular": (True, False, True, None),
    # classification / angular
    "normalized-softmax": (False, False, True, None),
    "cosface": (False, False, True, None),
    "arcface": (False, False, True, None),
    "subcenter-arcface": (False, False, True, None),
    "large-margin-softmax": (False, False, False, None),
    "sphereface": (False, False, True, None),
    "instance": (True, False, True, None),
    # ranking / contrastive
    "fastap": (True, False, True, None),
    "snr": (True, False, True, None),
    "ntxent": (True, False, True, None),
    "supcon": (True, False, True, None),
    "ranked-list": (True, False, True, None),
    "pnp": (True, False, True, None),
    "histogram": (True, False, True, None),
    "smooth-ap": (True, False, True, None),
}
# The report's family and the learning-rate multiple of their own parameters, of the losses
# that are not the source papers' (those are "paper" at 1x).
FAMILY_AND_LR = {
    "proxy-nca": ("proxy", 1.0),
    "proxy-anchor": ("proxy", 100.0),
    "soft-triple": ("proxy", 100.0),
    "multi-similarity": ("pair weighting", 1.0),
    "multi-similarity-miner": ("pair weighting", 1.0),
    "margin": ("pair weighting", 1.0),
    "margin-class-beta": ("pair weighting", 1.0),
    "circle": ("pair weighting", 1.0),
    "tuplet-margin": ("pair weighting", 1.0),
    "generalized-lifted": ("pair weighting", 1.0),
    "intra-pair-variance": ("pair weighting", 1.0),
    "normalized-softmax": ("classification", 1.0),
    "cosface": ("classification", 1.0),
    "arcface": ("classification", 1.0),
    "subcenter-arcface": ("classification", 1.0),
    "fastap": ("ranking", 1.0),
    "snr": ("ranking", 1.0),
    "ntxent": ("ranking", 1.0),
    "supcon": ("ranking", 1.0),
    "angular": ("ranking", 1.0),
    "ranked-list": ("ranking", 1.0),
    "pnp": ("ranking", 1.0),
    "histogram": ("ranking", 1.0),
    "smooth-ap": ("ranking", 1.0),
    "large-margin-softmax": ("classification", 1.0),
    "sphereface": ("classification", 1.0),
    "instance": ("classification", 1.0),
}


def test_registered_losses():
    assert losses.loss_names() == sorted(DECLARED)


@pytest.mark.parametrize("name", sorted(DECLARED))
def test_declarations(name):
    loss = losses.build_loss(name, {}, num_train=20, num_classes=4, dims=4)
    assert isinstance(loss, losses.BenchLoss)
    got = (
        loss.class_balanced,
        loss.needs_indices,
        loss.normalize_embeddings,
        loss.refresh_interval,
    )
    assert got == DECLARED[name]


@pytest.mark.parametrize("name", sorted(FAMILY_AND_LR))
def test_family_and_lr_multiplier(name):
    cls = losses.get_loss_class(name)
    assert (cls.family, cls.lr_multiplier) == FAMILY_AND_LR[name]
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
    for name in DECLARED:
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

    assert len(losses.loss_names()) == len(set(LOSSES.values())) == len(DECLARED)
    assert len(miners.miner_names()) == len(set(MINERS.values()))
