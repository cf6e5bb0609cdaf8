"""`nngk-bench pretrain` (issue 25): weights trained on glyphs classes the benchmark never sees,
which `run --pretrained PATH` fine-tunes, and which the run's records and report name."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch

from bench.models.embedding import build_model
from bench.report.write import write_report
from bench.runs.weights import provenance_label, read_provenance, weights_label
from bench.train.presets import sigma_for_dims
from bench.util.names import safe_name
from tests.conftest import cli

SOURCE = "glyphs:first=1000,classes=8,instances=6,size=12"  # classes 1000-1007
LABEL = "small_cnn pretrained on glyphs 1000-1007"
DATA = "glyphs:classes=16,instances=6,size=12"  # the benchmark's classes 0-15
FINE_TUNE = ["run", "--loss", "nngk", "--epochs", "2", "--seed", "0"]


@pytest.fixture(autouse=True)
def cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("NNGK_CACHE", str(tmp_path_factory.getbasetemp() / "glyphs-cache"))


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> Path:
    """small_cnn pretrained for 2 epochs on classes 1000-1007."""
    out = tmp_path_factory.mktemp("weights") / "small_cnn.pt"
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("NNGK_CACHE", str(tmp_path_factory.getbasetemp() / "glyphs-cache"))
        result = cli("pretrain", "--dataset", SOURCE, "--epochs", 2, "--out", out)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"{out}: {LABEL}, held-out accuracy ")
    return out


def test_pretrain_writes_the_weights_and_their_provenance(weights):
    state = torch.load(weights, weights_only=True)
    assert set(state) == set(build_model("small_cnn", 8).backbone.state_dict())
    record = json.loads(weights.with_suffix(".json").read_text())
    assert record["sha256"] == hashlib.sha256(weights.read_bytes()).hexdigest()
    assert record["classes"] == [1000, 1007] and record["glyphs_seed"] == 0
    assert record["source"] == "glyphs:classes=8,instances=6,size=12,first=1000"
    settings = {k: record[k] for k in ("backbone", "epochs", "lr", "batch_size", "seed")}
    assert settings == {
        "backbone": "small_cnn",
        "epochs": 2,
        "lr": 0.05,
        "batch_size": 128,
        "seed": 0,
    }
    assert len(record["val_accuracy"]) == len(record["train_loss"]) == 2
    assert all(0 <= a <= 1 for a in record["val_accuracy"])
    assert record["images"] == {"train": 40, "held_out": 8}  # one of each class's 6 held out
    assert record["torch"] == torch.__version__ and record["label"] == LABEL


@pytest.mark.parametrize(
    "source, shared",
    [
        ("glyphs:classes=300", "0-299, which share 0-199"),
        ("glyphs:first=150", "150-349, which share 0-199"),
    ],
)
def test_a_source_that_shares_the_benchmarks_classes_is_refused(tmp_path, source, shared):
    out = cli("pretrain", "--dataset", source, "--out", tmp_path / "w.pt")
    assert out.exit_code == 1 and len(out.stderr.strip().splitlines()) == 1
    assert shared in out.stderr and "with the benchmark (glyphs)" in out.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("existing", ["w.pt", "w.json"])
def test_existing_weights_or_notes_are_kept_without_force(tmp_path, existing):
    # Issue 43: a model.json of the user's notes was replaced without a word.
    (tmp_path / existing).write_text("the user's own\n")
    args = ["pretrain", "--dataset", SOURCE, "--epochs", 1, "--out", tmp_path / "w.pt"]
    out = cli(*args)
    (line,) = out.output.strip().splitlines()
    assert out.exit_code == 1 and f"{tmp_path / existing} exists" in line and "--force" in line
    assert (tmp_path / existing).read_text() == "the user's own\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == [existing]
    assert cli(*args, "--force").exit_code == 0
    assert (tmp_path / "w.json").read_text() != "the user's own\n"


def test_an_out_folder_that_cannot_be_written_is_refused_before_training(tmp_path, monkeypatch):
    # Was "Error: /proc/.x.pt.rq_bddc7.tmp: No such file or directory", once trained.
    import bench.train.pretrain

    monkeypatch.setattr(bench.train.pretrain, "pretrain", pytest.fail)  # nothing trains
    (tmp_path / "a-file").write_text("")
    target = tmp_path / "a-file" / "w.pt"
    out = cli("pretrain", "--dataset", SOURCE, "--out", target)
    (line,) = out.output.strip().splitlines()
    assert out.exit_code == 1 and line.startswith(f"Error: --out {target}: its folder cannot")


def test_a_source_of_another_seed_is_other_glyphs():
    from bench.train.pretrain import PretrainConfig, source_spec

    spec, note = source_spec(PretrainConfig(dataset="glyphs:classes=300,seed=2"))
    assert spec.seed == 2 and "of glyphs seed 2, the benchmark's is 0" in note
    assert source_spec(PretrainConfig())[1] == ""


def test_the_backbone_starts_from_the_files_weights_and_a_new_embedding(weights):
    state = torch.load(weights, weights_only=True)
    model = build_model("small_cnn", 16, str(weights), in_channels=1)
    loaded = model.backbone.state_dict()
    assert all(torch.equal(loaded[k], v) for k, v in state.items())
    torch.manual_seed(1)
    other = build_model("small_cnn", 16, str(weights), in_channels=1)
    assert not torch.equal(model.embed.weight, other.embed.weight)  # freshly initialised
    # On colour images (an image folder) the grey network sees their mean.
    colour = build_model("small_cnn", 16, str(weights), in_channels=3)
    grey = torch.rand(2, 1, 12, 12)
    colour.eval()
    model.eval()
    assert torch.allclose(colour.features(grey.repeat(1, 3, 1, 1)), model.features(grey))


def test_a_state_dict_of_another_backbone_is_a_one_line_error(tmp_path, weights):
    with pytest.raises(ValueError, match=r"does not match bench's small_cnn_gn: 9 unexpected keys"):
        build_model("small_cnn_gn", 16, str(weights))
    other = tmp_path / "gn.pt"
    torch.save(build_model("small_cnn_gn", 8).backbone.state_dict(), other)
    out = cli(*FINE_TUNE, "--dataset", DATA, "--pretrained", other, "--results", tmp_path / "r")
    assert out.exit_code == 1
    assert out.stderr.strip().splitlines()[-1] == (
        f"Error: state dict '{other}' does not match bench's small_cnn: 9 missing keys "
        "(e.g. body.0.1.num_batches_tracked)"
    )
    assert not (tmp_path / "r").exists()  # refused before anything is written


def test_nan_weights_are_refused_naming_the_file(tmp_path, weights):
    # Issue 43: `run --pretrained` on them failed in faiss, naming neither the file nor NaN.
    state = torch.load(weights, weights_only=True)
    broken = tmp_path / "nan.pt"
    torch.save({k: v.float().fill_(float("nan")) if v.is_floating_point() else v
                for k, v in state.items()}, broken)  # fmt: skip
    out = cli(*FINE_TUNE, "--dataset", DATA, "--pretrained", broken, "--results", tmp_path / "r")
    line = out.stderr.strip().splitlines()[-1]
    assert out.exit_code == 1 and f"pretrained='{broken}' holds NaN or infinite weights" in line
    assert "pretrain again at a lower --lr" in line and not (tmp_path / "r").exists()


def test_pretraining_that_diverged_or_trained_nothing_writes_nothing(tmp_path):
    from bench.train.pretrain import PretrainConfig, check_trained

    cfg = PretrainConfig(SOURCE, "small_cnn", 1, 1e30, 128, 0)
    finite = build_model("small_cnn", 8).backbone.state_dict()
    nan = {k: torch.full_like(v, float("nan")) if v.is_floating_point() else v
           for k, v in finite.items()}  # fmt: skip
    with pytest.raises(ValueError, match="pretraining diverged .* at --lr 1e"):
        check_trained(nan, [2.0], cfg)
    with pytest.raises(ValueError, match="pretraining diverged"):
        check_trained(finite, [float("nan")], cfg)
    with pytest.raises(ValueError, match="trained nothing .* --batch-size 128"):
        check_trained(finite, [0.0, 0.0], cfg)
    check_trained(finite, [2.3, 1.9], cfg)
    # --batch-size 1 trains no batch at all (BatchNorm needs two): refused by the command line.
    out = cli("pretrain", "--batch-size", 1, "--out", tmp_path / "w.pt")
    assert out.exit_code == 2 and "'--batch-size': 1 is not in the range x>=2" in out.output
    assert not list(tmp_path.iterdir())


def test_a_glyphs_run_fine_tunes_it_and_its_report_names_it(tmp_path, weights):
    # The glyphs preset is made for a network trained from scratch: it keeps its own NNGK
    # settings and learning rate for pretrained weights too (presets.GLYPHS, not paper_nngk).
    results = tmp_path / "r"
    args = ["--dataset", DATA, "--dims", "16", "--batch-size", "16", "--results", results]
    out = cli(*FINE_TUNE, *args, "--pretrained", weights)
    assert out.exit_code == 0, out.output
    (run,) = results.glob("*-nngk-*")
    config = json.loads((run / "config.json").read_text())
    metrics = json.loads((run / "metrics.json").read_text())
    assert config["weights"] == metrics["weights"] == LABEL
    assert config["loss_params"]["sigma"] == 1.0 and config["loss_params"]["update_interval"] == 1
    (untrained,) = results.glob("*-untrained-d1024-*")
    baseline = json.loads((untrained / "metrics.json").read_text())
    assert baseline["features"] == f"untrained small_cnn ({LABEL})"
    # The report reads the run folders only: the weights may be gone.
    weights.with_suffix(".json").rename(tmp_path / "moved.json")
    try:
        write_report(results, tmp_path / "report")
    finally:
        (tmp_path / "moved.json").rename(weights.with_suffix(".json"))
    text = (tmp_path / "report" / f"{safe_name(DATA)}.md").read_text()
    assert f"Setup: backbone small_cnn; weights {LABEL}; " in text
    assert f"| untrained small_cnn ({LABEL}) |" in text


def test_tune_holds_the_weights_for_every_trial_and_names_them_in_the_study(tmp_path, weights):
    data = "glyphs:classes=24,instances=10,size=12"  # a batch of 64 among its training items
    args = ["tune", "--loss", "contrastive", "--dataset", data, "--dims", "8", "--trials", "1"]
    args += ["--epochs", "1", "--no-retrain", "--pretrained", weights, "--results", tmp_path]
    out = cli(*args)
    assert out.exit_code == 0, out.output
    (study,) = [p.name for p in (tmp_path / "tune").iterdir() if (p / "best.json").is_file()]
    assert study.endswith(safe_name(f"-pretrained-{weights}"))
    (trial,) = (tmp_path / "tune" / "trials").iterdir()
    assert json.loads((trial / "config.json").read_text())["weights"] == LABEL
    from bench.report.tuning import tuning_files  # its row in the report's tuning.md, too

    lines = tuning_files(tmp_path)["tuning.md"].decode().splitlines()
    (row,) = [r for r in lines if r.startswith("| contrastive")]
    assert f"| pretrained={LABEL} |" in row


def test_the_paper_presets_nngk_settings_train_on_it(tmp_path, weights):
    # The paper presets apply to image data sets (here a folder of 28-px grey glyphs, as RGB
    # files): with pretrained weights, the metric preset's sigma, 100 neighbours, a refresh every
    # 10 epochs and lr 1e-5 (Meyer et al. 2018), at the preset's batch of 20.
    from tests.fixtures.folder import glyph_folder

    root = glyph_folder(tmp_path, classes=16, instances=6)
    args = ["--dataset", f"folder:{root}", "--backbone", "small_cnn", "--pretrained", weights]
    size = ["--resize", "12", "--crop", "12", "--results", tmp_path / "r"]
    out = cli(*FINE_TUNE, *args, *size)
    assert out.exit_code == 0, out.output
    (run,) = (tmp_path / "r").glob("*-nngk-*")
    config = json.loads((run / "config.json").read_text())
    assert config["loss_params"] == {"sigma": sigma_for_dims(64), "k": 100, "update_interval": 10}
    assert (config["lr"], config["batch_size"], config["dims"]) == (1e-5, 20, 64)
    assert "using k=37" in out.stderr  # k=100 capped at the other training items
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["weights"] == LABEL and metrics["epochs"] == 2


def test_resnet18_is_written_as_torchvisions_whole_model(tmp_path):
    out = tmp_path / "resnet18.pt"
    result = cli(
        "pretrain", "--backbone", "resnet18", "--dataset", SOURCE, "--epochs", 1, "--out", out
    )
    assert result.exit_code == 0, result.output
    state = torch.load(out, weights_only=True)
    assert state["fc.weight"].shape == (1000, 512)  # torchvision's classifier, 8 classes used
    model = build_model("resnet18", 16, str(out))  # the torchvision --pretrained PATH
    loaded = model.backbone.state_dict()
    assert all(torch.equal(loaded[k], v) for k, v in state.items() if not k.startswith("fc."))
    assert read_provenance(str(out))["label"] == "resnet18 pretrained on glyphs 1000-1007"


def test_the_weights_label_comes_from_a_provenance_of_those_weights(tmp_path, weights):
    record = {"backbone": "small_cnn", "classes": [1000, 1999], "glyphs_seed": 0}
    assert provenance_label(record) == "small_cnn pretrained on glyphs 1000-1999"
    assert provenance_label({**record, "glyphs_seed": 3}).endswith("1000-1999 of seed 3")
    assert weights_label(str(weights), read_provenance(str(weights))) == LABEL
    assert (weights_label("none"), weights_label("imagenet")) == ("random init", "ImageNet")
    # Without a provenance, or beside other weights than it describes: the file's name.
    alone = tmp_path / "alone.pt"
    alone.write_bytes(weights.read_bytes())
    assert weights_label(str(alone), read_provenance(str(alone))) == "alone.pt"
    alone.with_suffix(".json").write_text(weights.with_suffix(".json").read_text())
    alone.write_bytes(weights.read_bytes() + b"\0")
    assert read_provenance(str(alone)) == {}


def test_runs_from_other_weights_are_labelled_by_what_the_weights_are():
    import pandas as pd

    from bench.report.runs import variant_labels

    runs = pd.DataFrame(
        {
            "loss": "nngk",
            "method": "nngk",
            "dims": 64,
            "pretrained": ["none", "imagenet", "w/a.pt", "w/b.pt", "w/c.pt"],
            "weights": ["random init", "ImageNet", LABEL, LABEL, "c.pt"],
        }
    )
    assert variant_labels(runs).tolist() == [
        "nngk, random init",
        "nngk, ImageNet weights",
        f"nngk, {LABEL} (a.pt)",  # two files that read alike: by their names too
        f"nngk, {LABEL} (b.pt)",
        "nngk, c.pt weights",  # a file without provenance
    ]


def test_a_suite_fine_tunes_it_as_run_does(tmp_path, weights):
    args = ["--dataset", DATA, "--dims", "8", "--seed", "0", "--epochs", "1", "--batch-size", "16"]
    args += ["--pretrained", weights, "--results", tmp_path]
    out = cli("suite", "--losses", "contrastive", *args)
    assert out.exit_code == 0, out.output
    (run,) = tmp_path.glob("*-contrastive-*")
    assert json.loads((run / "metrics.json").read_text())["weights"] == LABEL
    again = cli("run", "--loss", "contrastive", *args)  # the same run: found, not trained again
    assert again.exit_code == 0 and "finished, skipped" in again.output


def test_weights_replaced_at_the_same_path_are_never_taken_as_trained(tmp_path, weights):
    # Before: the run was "finished, skipped" though it never saw the new weights, and the
    # untrained baseline kept the old weights' numbers.
    copy = tmp_path / "w.pt"
    shutil.copy(weights, copy)
    args = ["run", "--loss", "contrastive", "--dataset", DATA, "--dims", "8", "--epochs", "1",
            "--batch-size", "16", "--pretrained", copy, "--results", tmp_path / "r"]  # fmt: skip
    assert cli(*args).exit_code == 0
    state = torch.load(copy, weights_only=True)
    first = next(k for k, v in state.items() if v.is_floating_point())
    state[first] = state[first] + 0.5  # other weights, the same file name
    torch.save(state, copy)
    again = cli(*args, catch_exceptions=True)
    assert again.exit_code == 1, again.output
    (line,) = [x for x in again.output.splitlines() if x.startswith("Error")]
    assert "finished, but its weights file" in line and "changed since it was trained" in line
    assert "--force retrains from the new weights" in line
    assert "changed since it was trained (sha256" in again.output.split("Error")[0]
    assert ": evaluated again" in again.output  # the untrained baseline, from the new weights
    forced = cli(*args, "--force")
    assert forced.exit_code == 0, forced.output
    new = hashlib.sha256(copy.read_bytes()).hexdigest()
    records = [json.loads(p.read_text()) for p in (tmp_path / "r").glob("*/metrics.json")]
    recorded = [m["weights_sha256"] for m in records if "weights_sha256" in m]
    assert len(recorded) >= 2 and set(recorded) == {new}  # the run and its baseline


@pytest.mark.parametrize(
    "dataset, shared",
    [
        ("glyphs:first=1004,classes=8,instances=6,size=12", "glyphs 1000-1007, which share"),
        ("glyphs:classes=1001,instances=2,size=12", "glyphs 1000-1007, which share"),
        ("glyphs:first=1008,classes=8,instances=6,size=12", None),  # disjoint: trains
        ("glyphs:first=1000,classes=8,instances=6,size=12,seed=1", None),  # other glyphs
    ],
)
def test_a_run_on_the_glyphs_its_weights_were_pretrained_on_is_refused(
    tmp_path, weights, monkeypatch, dataset, shared
):
    # Before: the run trained and its test classes were ones the weights had learned.
    import bench.train.preflight as preflight

    def reached(cfg):
        raise ValueError("past the weights' check")

    monkeypatch.setattr(preflight, "load_data", reached)
    args = [*FINE_TUNE, "--dataset", dataset, "--pretrained", weights, "--results", tmp_path]
    out = cli(*args)
    if shared is None:  # past the check: on to the data, stopped there
        assert "past the weights' check" in out.stderr, out.output
        return
    assert out.exit_code == 1 and shared in out.stderr.strip().splitlines()[-1], out.output
    assert "nngk-bench pretrain --dataset glyphs:first=" in out.stderr
    assert not list(tmp_path.iterdir())
