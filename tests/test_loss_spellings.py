"""A curated loss over a class of pytorch-metric-learning and its `pml:` spelling are one loss
(issue 67): with the same settings they declare the same needs to the trainer and train to the
same bits, a few steps of a small network and whole runs through the command line; where they
differ, the difference is declared on the curated class and tested here."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from pytorch_metric_learning.losses import ContrastiveLoss

from losses import build_loss, get_loss_class, loss_defaults, loss_names
from losses.pml_adapter import AdaptedLoss
from tests.conftest import cli

CLASSES, INSTANCES, BATCH, PER_CLASS, DIMS, STEPS = 8, 12, 32, 4, 6, 3
# What the trainer reads of a loss (losses/base.py).
NEEDS = ("class_balanced", "examples_per_class", "normalize_embeddings", "needs_indices",
         "refresh_interval", "lr_multiplier")  # fmt: skip
# A curated loss that no setting of its pml: spelling gives, with why (tested below).
NO_SPELLING = {"margin-class-beta": "a beta per class: pml:MarginLoss takes no num_classes"}


def over_pml() -> list[str]:
    return [n for n in loss_names() if get_loss_class(n).pml_class and n not in NO_SPELLING]


def spelling(name: str) -> tuple[str, dict]:
    """`pml:Class` and the settings that give it the curated loss's defaults (by PML's names;
    those its spelling does not take are PML's defaults on both sides)."""
    cls = get_loss_class(name)
    pml = f"pml:{cls.pml_class.__name__}"
    ours = {cls.pml_names.get(k, k): v for k, v in loss_defaults(name).items()}
    settings = {**getattr(cls, "fixed", {}), **ours}
    return pml, {k: v for k, v in settings.items() if k in loss_defaults(pml)}


def batches(cls: type) -> list[torch.Tensor]:
    """STEPS batches as the trainer draws them for the loss: N classes x its examples a class,
    or at random."""
    gen = torch.Generator().manual_seed(1)
    if not cls.class_balanced:
        return list(
            torch.randperm(CLASSES * INSTANCES, generator=gen)[: STEPS * BATCH].split(BATCH)
        )
    m = cls.examples_per_class or PER_CLASS
    rows = []
    for _ in range(STEPS):
        for c in torch.randperm(CLASSES, generator=gen)[: BATCH // m]:
            rows.append(c * INSTANCES + torch.randperm(INSTANCES, generator=gen)[:m])
    return list(torch.cat(rows).split(BATCH))


def trained(name: str, params: dict) -> list[torch.Tensor]:
    """The evaluated embedding of every example and the loss's weights after STEPS steps of
    SGD on a linear network, the loss's weights at its learning-rate multiple."""
    cls = get_loss_class(name)
    x = torch.randn(CLASSES * INSTANCES, 10, generator=torch.Generator().manual_seed(0))
    labels = torch.arange(CLASSES).repeat_interleave(INSTANCES)
    torch.manual_seed(0)
    net = torch.nn.Linear(10, DIMS)
    loss = build_loss(name, params, num_train=len(x), num_classes=CLASSES, dims=DIMS)
    groups = [{"params": list(net.parameters())}]
    if own := list(loss.parameters()):
        groups.append({"params": own, "lr": 0.05 * cls.lr_multiplier})
    optimizer = torch.optim.SGD(groups, lr=0.05)
    for rows in batches(cls):
        value = loss(net(x[rows]), labels[rows])
        optimizer.zero_grad()
        value.backward()
        optimizer.step()
    embedding = net(x).detach()
    if cls.normalize_embeddings:
        embedding = F.normalize(embedding, dim=1)
    return [embedding, *(p.detach() for p in loss.parameters())]


@pytest.mark.parametrize("name", over_pml())
def test_the_curated_loss_and_its_pml_spelling_train_to_the_same_bits(name):
    pml, settings = spelling(name)
    ours, theirs = get_loss_class(name), get_loss_class(pml)
    assert [getattr(ours, a) for a in NEEDS] == [getattr(theirs, a) for a in NEEDS]
    a, b = trained(name, {}), trained(pml, settings)
    assert len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def test_the_declared_differences():
    # triplet's miner selects with the loss's own margin; pml:'s keeps the miner's default.
    assert build_loss("triplet", {"margin": 0.1}).miner.margin == 0.1
    assert build_loss("pml:TripletMarginLoss", {"miner": "semihard"}).miner.margin == 0.2
    beta = {"learn_beta": True, "miner": "pml:DistanceWeightedMiner"}
    assert build_loss("pml:MarginLoss", beta).loss.beta.shape == (1,)
    per_class = build_loss("margin-class-beta", {}, num_classes=CLASSES)
    assert per_class.loss.beta.shape == (CLASSES,)
    assert set(over_pml()) | set(NO_SPELLING) == {
        n for n in loss_names() if get_loss_class(n).pml_class
    }


def test_a_curated_class_cannot_declare_what_is_read_from_pml():
    with pytest.raises(TypeError, match="sets normalize_embeddings; declare it of Contrastive"):

        class Mine(AdaptedLoss):
            pml_class = ContrastiveLoss
            normalize_embeddings = False


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return tmp_path_factory.mktemp("spellings")


# What names the loss in a run's metrics.json (its parameters under its own names).
NAMED = ("loss", "family", "loss_params")
# Whole runs, both at one learning rate (the preset chooses one by the curated name).
RUNS = [
    ("npair", ["regularizer=pml:LpRegularizer", "regularizer_weight=0.002"]),
    ("large-margin-softmax", []),
    ("contrastive", ["neg_margin=0.5"]),
]


@pytest.mark.parametrize(("name", "settings"), RUNS)
def test_the_two_spellings_run_alike_through_the_trainer(name, settings, results):
    pml = f"pml:{get_loss_class(name).pml_class.__name__}"
    data = ["--dataset", "glyphs:classes=24,instances=8,size=12", "--dims", "8", "--epochs", "1"]
    data += ["--batch-size", "16", "--lr", "0.01", "--results", results]
    found = []
    for loss, given in ((name, []), (pml, settings)):
        params = [arg for setting in given for arg in ("--loss-param", setting)]
        out = cli("run", "--loss", loss, *params, *data)
        assert out.exit_code == 0, out.output
        (folder,) = results.glob(f"*-{loss.replace(':', '-')}-d8-*")
        metrics = json.loads((folder / "metrics.json").read_text())
        found.append(
            {k: v for k, v in metrics.items() if k not in ("loss", "family", "loss_params")}
        )
    assert found[0] == found[1]


def test_npairs_weight_and_the_adapters_share_a_domain():
    for name, param in (("npair", "l2_reg"), ("pml:NPairsLoss", "regularizer_weight")):
        with pytest.raises(ValueError, match=f"^{param}=-1: {param} is a number >= 0$"):
            build_loss(name, {param: -1}, num_classes=CLASSES, dims=DIMS)
