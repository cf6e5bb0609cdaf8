"""Any timm model as the backbone (issue 45, item 1): `--backbone timm:NAME` trains on glyphs
through the command line (a ViT at 32 px, a ResNet), takes its input size and normalisation
from the model's pretrained configuration (the user's --resize and --crop win), loads a weights
file strictly (safetensors or a torch state dict, its classifier's keys dropped) and records its
sha256; an unknown model, a wrong key, timm's hub offline and timm missing are one-line errors;
and no module imports timm unless a timm backbone is asked for."""

from __future__ import annotations

import ast
import hashlib
import json
import re
import sys
from pathlib import Path

import pytest
import torch

from tests.conftest import cli

timm = pytest.importorskip("timm")  # a guard only: CI installs the dev extra, which has timm

from bench.cli.settings import backbone_input  # noqa: E402
from bench.data.crops import IMAGENET_MEAN, IMAGENET_STD, pad_batch  # noqa: E402
from bench.models.backbones import build_backbone  # noqa: E402
from bench.models.embedding import build_model  # noqa: E402
from bench.models.timm_backbones import timm_input  # noqa: E402
from bench.runs.weights import weights_record  # noqa: E402
from bench.train.loaders import load_data  # noqa: E402
from bench.train.presets import make_configs  # noqa: E402
from bench.train.recipes import Recipe  # noqa: E402
from bench.util.weights_files import SAFETENSORS, TORCH  # noqa: E402
from tests.fixtures.folder import make_folder  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
VIT = "vit_tiny_patch16_224"
DATASET = "glyphs:classes=8,instances=6"  # 4 training classes of 6 glyphs, 28 px
SMALL = ("--dims", "16", "--epochs", "1", "--batch-size", "8", "--m-per-class", "2")


def run(results: Path, backbone: str, *args: str):
    """`nngk-bench run` of one step's worth of proxy-anchor on the glyphs set at 32 px."""
    return cli(
        "run", "--loss", "proxy-anchor", "--dataset", DATASET, "--backbone", backbone,
        "--crop", "32", *SMALL, "--results", results, *args,
    )  # fmt: skip


def error_line(out) -> str:
    """The one line of a refused command's error (the log's lines before it aside)."""
    assert out.exit_code == 1, out.output
    last = out.output.splitlines()[-1]
    assert last.startswith("Error: ") and "Traceback" not in out.output, out.output
    return last


def trained(results: Path) -> tuple[dict, dict]:
    """The config and metrics of the one trained run in `results`."""
    (folder,) = results.glob("*-proxy-anchor-d16-*")
    return tuple(
        json.loads((folder / name).read_text()) for name in ("config.json", "metrics.json")
    )


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> dict:
    """A ViT at 32 px with its classifier (random weights of seed 0), written as a safetensors
    file and as a torch state dict."""
    from safetensors.torch import save_file

    folder = tmp_path_factory.mktemp("timm-weights")
    torch.manual_seed(0)
    model = timm.create_model(VIT, img_size=32).eval()
    state = model.state_dict()
    save_file(state, folder / "vit.safetensors")
    torch.save(state, folder / "vit.pth")
    return {"model": model, "state": state, "folder": folder}


@pytest.mark.parametrize("backbone", [f"timm:{VIT}", "timm:resnet18"])
def test_a_timm_model_trains_through_the_command_line(tmp_path, backbone):
    out = run(tmp_path, backbone, "--pretrained", "none")
    assert out.exit_code == 0, out.output
    config, metrics = trained(tmp_path)
    # glyphs are never resized: --resize is unused, at its default (not the model's 36)
    assert (config["backbone"], config["crop"], config["resize"]) == (backbone, 32, 256)
    assert metrics["weights"] == "random init" and "weights_sha256" not in metrics
    # what the network was given: 3 channels at the 32-px crop (before: the glyphs' 1x28x28)
    assert (metrics["best_epoch"], metrics["input_size"]) == (1, "3x32x32")
    assert 0 <= metrics["recall@1"] <= 1


def test_a_weights_file_gives_the_saved_models_features(saved):
    model, folder = saved["model"], saved["folder"]
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        expected = model.forward_head(model.forward_features(x), pre_logits=True)
        for name in ("vit.safetensors", "vit.pth"):
            net, dims, channels = build_backbone(f"timm:{VIT}", str(folder / name), image_size=32)
            assert (dims, channels) == (192, 3)
            torch.testing.assert_close(net.eval()(x), expected, rtol=1e-5, atol=1e-5)
    assert weights_record(str(folder / "vit.safetensors"))["weights_format"] == SAFETENSORS
    assert weights_record(str(folder / "vit.pth"))["weights_format"] == TORCH


def test_a_run_records_the_weights_files_sha256(tmp_path, saved):
    path = saved["folder"] / "vit.safetensors"
    out = run(tmp_path, f"timm:{VIT}", "--pretrained", str(path))
    assert out.exit_code == 0, out.output
    config, metrics = trained(tmp_path)
    assert config["pretrained"] == str(path) and metrics["weights"] == "vit.safetensors"
    assert metrics["weights_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert metrics["weights_format"] == SAFETENSORS


@pytest.mark.parametrize(
    "change, message",
    [
        ("extra", "1 unexpected keys (e.g. blocks.0.extra)"),
        ("missing", "1 missing keys (e.g. norm.weight)"),
    ],
)
def test_a_state_dict_that_does_not_fit_is_a_one_line_error(tmp_path, saved, change, message):
    state = dict(saved["state"])
    if change == "extra":
        state["blocks.0.extra"] = torch.zeros(2)
    else:
        del state["norm.weight"]
    torch.save(state, tmp_path / "bad.pth")
    line = error_line(run(tmp_path, f"timm:{VIT}", "--pretrained", str(tmp_path / "bad.pth")))
    assert f"does not match timm's {VIT}: {message}" in line


def test_an_unknown_model_is_a_one_line_error_with_close_names(tmp_path):
    line = error_line(run(tmp_path, "timm:vit_tiny_patch16_22", "--pretrained", "none"))
    assert f"timm has no model 'vit_tiny_patch16_22' (did you mean {VIT}" in line
    line = error_line(run(tmp_path, f"timm:{VIT}.nodino", "--pretrained", "none"))
    assert f"timm has no weights '{VIT}.nodino'" in line and "augreg_in21k_ft_in1k" in line


def test_the_hub_offline_is_a_one_line_error_naming_the_download(tmp_path, monkeypatch):
    import huggingface_hub.constants as hub

    monkeypatch.setattr(hub, "HF_HUB_OFFLINE", True)  # every request refused: no network
    monkeypatch.setattr(hub, "HF_HUB_CACHE", str(tmp_path / "hf-cache"))  # nothing cached
    line = error_line(run(tmp_path / "results", f"timm:{VIT}", "--pretrained", "hub"))
    repo = f"timm/{VIT}.augreg_in21k_ft_in1k"
    assert f"`hf download {repo} model.safetensors --local-dir weights/{VIT}`" in line
    assert "could not be downloaded" in line and "--pretrained weights/" in line
    assert not list((tmp_path / "results").glob("*"))  # refused before any baseline


def test_without_timm_a_timm_backbone_names_the_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "timm", None)  # `import timm` fails: not installed
    line = error_line(run(tmp_path, f"timm:{VIT}", "--pretrained", "none"))
    assert 'timm, which is not installed: pip install -e ".[timm]"' in line


def test_the_input_comes_from_the_pretrained_configuration(tmp_path):
    for name in ("vit_small_patch16_224.dino", "test_resnet"):
        model = timm.create_model(name, num_classes=0)
        config = timm.data.resolve_model_data_config(model)
        spec = timm_input(f"timm:{name}")
        assert (spec.size, spec.crop_pct) == (config["input_size"][1], config["crop_pct"])
        assert (spec.mean, spec.std) == (tuple(config["mean"]), tuple(config["std"]))

    def given(resize, crop):
        settings = {"backbone": "timm:vit_small_patch16_224.dino", "resize": resize, "crop": crop}
        return backbone_input(settings)["resize"], backbone_input(settings)["crop"]

    # timm's evaluation: the crop of crop_pct 0.9 of the image resized to 224 / 0.9, rounded down
    assert given(None, None) == (248, 224)
    assert given(None, 32) == (35, 32) and given(40, 32) == (40, 32)  # the user's win
    assert backbone_input({"backbone": "resnet18", "resize": None, "crop": None})["crop"] is None


@pytest.mark.parametrize(
    "backbone, crop, expected",
    [
        (f"timm:{VIT}", None, "3x224x224"),  # its own side (backbone_input's crop), resized to
        (f"timm:{VIT}", 32, "3x32x32"),  # built for the crop
        ("timm:resnet18", 32, "3x32x32"),  # any side: 28 px scaled up to its least, 32
        ("resnet18", None, "3x32x32"),
        ("small_cnn", None, "1x28x28"),  # as the glyphs are
    ],
)
def test_the_recorded_input_size_is_what_the_backbone_is_given(backbone, crop, expected):
    # Before: "1x28x28" (the first glyph) for a ViT that was given 224-px crops of 3 channels.
    from bench.train.loaders import input_size

    crop = crop or backbone_input({"backbone": backbone, "resize": None, "crop": None})["crop"]
    (cfg,) = make_configs(DATASET, "contrastive", (8,), {}, backbone=backbone, crop=crop)
    data = load_data(cfg)
    model = build_model(cfg.backbone, 8, "none", data.in_channels, image_size=cfg.crop).eval()
    layers = getattr(model.backbone, "model", model.backbone)  # a timm model inside its resize
    given = []
    layers.register_forward_pre_hook(lambda _, args: given.append(tuple(args[0].shape[1:])))
    with torch.no_grad():
        model(data.test[0][0][None])
    assert "x".join(map(str, given[0])) == input_size(data) == expected


def test_a_timm_models_normalisation_reaches_the_crops(tmp_path):
    folder = make_folder(tmp_path, classes=4, per_class=4)
    sizes = backbone_input({"backbone": "timm:test_vit", "resize": None, "crop": None})
    assert (sizes["resize"], sizes["crop"]) == (168, 160)  # 160 px at crop_pct 0.95
    inputs = {}
    for backbone, mean in (("resnet18", IMAGENET_MEAN), ("timm:test_vit", (0.5, 0.5, 0.5))):
        (cfg,) = make_configs(
            f"folder:{folder}", "contrastive", (8,), {}, backbone=backbone, resize=40, crop=32
        )
        data = load_data(cfg)
        assert data.train.crops.mean == mean and data.test.crops.mean == mean
        inputs[backbone] = data.test.prepare(pad_batch([data.test[0][0]]))
    # the same pixels in [0, 1]: test_vit's mean and std 0.5, ImageNet's for resnet18
    pixels = inputs["timm:test_vit"] * 0.5 + 0.5
    imagenet = torch.tensor(IMAGENET_STD)[:, None, None], torch.tensor(IMAGENET_MEAN)[:, None, None]
    torch.testing.assert_close(pixels, inputs["resnet18"] * imagenet[0] + imagenet[1])


def test_what_a_timm_backbone_cannot_do_is_a_one_line_error():
    cases = [
        (dict(pooling="max"), "pools as timm builds it"),
        (dict(embedding="gap"), "use embedding='backbone'"),
        (dict(image_size=8), "cannot take 8-px input (--crop 8)"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=re.escape(message)) as caught:
            build_backbone(f"timm:{VIT}", **kwargs)
        assert "\n" not in str(caught.value)
    (cfg,) = make_configs(DATASET, "contrastive", (8,), {}, backbone=f"timm:{VIT}", freeze_bn=True)
    with pytest.raises(ValueError, match=f"--freeze-bn: timm:{VIT} has no batch-norm layers"):
        Recipe(cfg, build_model(cfg.backbone, 8, "none", 1, image_size=32))


def test_no_module_imports_timm_unless_a_timm_backbone_is_asked_for():
    """Only bench.models.timm_backbones imports timm, and only inside its functions; the
    command line imports that module only inside the function that fills a timm backbone's
    input settings."""
    found = {}
    for path in [*(ROOT / "bench").rglob("*.py"), *(ROOT / "losses").rglob("*.py")]:
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else []
            )
            for name in names:
                if name.split(".")[0] == "timm" or name == "bench.models.timm_backbones":
                    top = node in tree.body
                    found.setdefault(str(path.relative_to(ROOT)), []).append((name, top))
    assert found["bench/models/timm_backbones.py"] == [("timm", False)]
    assert found["bench/cli/settings.py"] == [("bench.models.timm_backbones", False)]
    # bench.models.backbones and .embedding import the module (cheap: torch only), never timm
    assert set(found) == {
        "bench/models/timm_backbones.py",
        "bench/cli/settings.py",
        "bench/models/backbones.py",
        "bench/models/embedding.py",
    }
    assert found["bench/models/embedding.py"] == [("bench.models.timm_backbones", True)]
