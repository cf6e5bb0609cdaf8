"""Every loss and miner class of the installed pytorch-metric-learning through the generic
adapter (`pml:ClassName`, issue 46): each trains a small network on glyphs for a few steps with
a finite loss that moves the embedding; each regularizer adds its term to a loss; what the
adapter derives from each class; the run's record; the commands of the issue end to end."""

import json

import pytest
import torch
from pytorch_metric_learning.samplers import MPerClassSampler

from bench.data.glyphs import GlyphSpec, generate
from losses import build_loss, get_loss_class, is_loss, loss_defaults
from losses.pml_adapter import NOT_RUNNABLE, loss_classes, pml_loss_names
from losses.pml_regularizers import regularizer_class, regularizer_names, regularizes_weights
from miners.registry import NOT_MINERS, get_miner_class, pml_miner_classes, pml_miner_names
from tests.conftest import cli

# Values for the parameters PML gives no default (a test's, not a recommendation).
REQUIRED = {"pml:RankedListLoss": {"margin": 0.4, "Tn": 1.0}}
CLASSES, PER_CLASS, DIMS, STEPS = 8, 4, 8, 3
GEN = torch.Generator().manual_seed(0)


@pytest.fixture(scope="module")
def glyphs():
    images, labels = generate(GlyphSpec(classes=CLASSES, instances=12, size=12))
    return torch.from_numpy(images).float().flatten(1) / 255, torch.from_numpy(labels)


def batches(labels: torch.Tensor, balanced: bool) -> list[torch.Tensor]:
    size = CLASSES * PER_CLASS
    if balanced:
        sampler = MPerClassSampler(labels, PER_CLASS, size, length_before_new_iter=len(labels))
        order = torch.tensor(list(iter(sampler)))
    else:
        order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(0))
    return [order[i * size : (i + 1) * size] for i in range(STEPS)]


def trained(name: str, params: dict, glyphs) -> tuple[list[float], float]:
    """(the losses of STEPS steps, how far the embedding of the first batch moved)."""
    x, labels = glyphs
    torch.manual_seed(0)
    net = torch.nn.Linear(x.shape[1], DIMS)
    loss = build_loss(name, params, num_train=len(x), num_classes=CLASSES, dims=DIMS)
    optimizer = torch.optim.SGD([*net.parameters(), *loss.parameters()], lr=0.01)
    steps = batches(labels, get_loss_class(name).class_balanced)
    before = net(x[steps[0]]).detach()
    values = []
    for rows in steps:
        value = loss(net(x[rows]), labels[rows])
        optimizer.zero_grad()
        value.backward()
        optimizer.step()
        values.append(float(value.detach()))
    return values, float((net(x[steps[0]]).detach() - before).abs().max())


def test_every_loss_class_is_runnable_or_skipped_with_its_reason(capsys):
    runnable = set(pml_loss_names())
    assert runnable and runnable | {f"pml:{n}" for n in NOT_RUNNABLE} == {
        f"pml:{n}" for n in loss_classes()
    }
    with capsys.disabled():  # the skipped classes, printed with the reasons
        print("\nPML classes not run here:")
        for name, why in {**NOT_RUNNABLE, **NOT_MINERS}.items():
            print(f"  {name}: {why}")


@pytest.mark.parametrize("name", pml_loss_names())
def test_each_pml_loss_trains_with_a_finite_loss_that_moves_the_embedding(name, glyphs):
    values, moved = trained(name, REQUIRED.get(name, {}), glyphs)
    assert all(torch.isfinite(torch.tensor(values))), values
    assert moved > 0


@pytest.mark.parametrize("miner", pml_miner_names())
def test_each_pml_miner_trains_triplet_with_a_finite_loss(miner, glyphs):
    values, _ = trained("triplet", {"miner": miner}, glyphs)
    assert all(torch.isfinite(torch.tensor(values))), values
    assert set(pml_miner_names()) | {f"pml:{n}" for n in NOT_MINERS} == {
        f"pml:{n}" for n in pml_miner_classes()
    }


def test_what_the_adapter_reads_from_each_class():
    arcface = get_loss_class("pml:ArcFaceLoss")  # class weights: random batches, its sizes
    assert not arcface.class_balanced and arcface.normalize_embeddings
    adapter = {"miner": None, "regularizer": None, "regularizer_weight": 1.0}
    assert loss_defaults("pml:ArcFaceLoss") == {"margin": 28.6, "scale": 64, **adapter}
    built = build_loss("pml:ArcFaceLoss", {}, num_train=50, num_classes=5, dims=7)
    assert built.loss.W.shape == (7, 5) and built.loss.W in set(built.parameters())
    tuplet = get_loss_class("pml:TupletMarginLoss")
    assert tuplet.class_balanced and loss_defaults("pml:TupletMarginLoss")["margin"] == 5.73
    cosface = build_loss("pml:CosFaceLoss", {"margin": 0.2}, num_classes=5, dims=7)
    assert cosface.loss.margin == 0.2  # a keyword-only parameter of PML's class
    assert is_loss("pml:TupletMarginLoss") and not is_loss("pml:NoSuchLoss")


def test_a_parameter_pml_gives_no_default_must_be_given():
    with pytest.raises(ValueError, match="no default for margin, Tn; give --loss-param margin"):
        build_loss("pml:RankedListLoss", {}, num_classes=5, dims=7)


def test_unknown_and_unrunnable_classes_are_one_line_errors():
    with pytest.raises(ValueError, match="no such loss class; expected one of pytorch-metric"):
        get_loss_class("pml:NoSuchLoss")
    with pytest.raises(ValueError, match="self-supervised"):
        get_loss_class("pml:VICRegLoss")
    with pytest.raises(ValueError, match="unknown miner 'pml:Nope'"):
        get_miner_class("pml:Nope")


def test_the_issues_commands_run_and_record_what_ran(tmp_path):
    data = ["--dataset", "glyphs:classes=12,instances=12", "--dims", "8", "--epochs", "1"]
    data += ["--batch-size", "16"]
    out = cli("run", "--loss", "pml:TupletMarginLoss", "--loss-param", "margin=5.73", *data,
              "--results", tmp_path)  # fmt: skip
    assert out.exit_code == 0, out.output
    (run,) = tmp_path.glob("*-pml-TupletMarginLoss-d8-*")  # a file name without the colon
    config = json.loads((run / "config.json").read_text())
    assert config["loss"] == "pml:TupletMarginLoss"
    assert config["resolved_loss_params"] == {
        "margin": 5.73, "scale": 64, "miner": None, "regularizer": None, "regularizer_weight": 1.0
    }  # fmt: skip
    assert "pytorch-metric-learning" in json.dumps(config["versions"])
    out = cli("run", "--loss", "triplet", "--miner", "pml:BatchHardMiner", *data,
              "--results", tmp_path)  # fmt: skip
    assert out.exit_code == 0, out.output
    assert list(tmp_path.glob("*-triplet-pml-BatchHardMiner-d8-*/metrics.json"))
    bad = cli("run", "--loss", "pml:TupletMarginLos", *data, "--results", tmp_path)
    assert bad.exit_code != 0 and "no such loss class" in bad.output


@pytest.mark.parametrize("regularizer", regularizer_names())
def test_each_pml_regularizer_adds_its_term_to_a_loss(regularizer, glyphs):
    on_weights = regularizes_weights(regularizer_class(regularizer))
    loss = "pml:SoftTripleLoss" if on_weights else "pml:ContrastiveLoss"
    x, labels = glyphs
    emb = torch.nn.functional.normalize(torch.randn(len(x), DIMS, generator=GEN), dim=1)
    values = []
    for params in ({}, {"regularizer": regularizer, "regularizer_weight": 0.5}):
        torch.manual_seed(0)  # the same class weights
        built = build_loss(loss, params, num_classes=CLASSES, dims=DIMS)
        values.append(float(built(emb * 3, labels)))
    kind = "weight" if on_weights else "embedding"
    assert getattr(built.loss, f"{kind}_reg_weight") == 0.5
    assert type(getattr(built.loss, f"{kind}_regularizer")) is regularizer_class(regularizer)
    assert values[1] >= values[0] and all(torch.isfinite(torch.tensor(values)))
    assert trained(loss, {"regularizer": regularizer}, glyphs)[1] > 0


def test_a_weight_regularizer_of_a_loss_without_weights_is_refused():
    with pytest.raises(ValueError, match="regularizes a loss's class weights, and ContrastiveLoss"):
        build_loss("pml:ContrastiveLoss", {"regularizer": "pml:RegularFaceRegularizer"})
    with pytest.raises(ValueError, match="unknown regularizer 'pml:Nope'"):
        build_loss("pml:ContrastiveLoss", {"regularizer": "pml:Nope"})
