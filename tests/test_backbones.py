import functools
import urllib.error

import pytest
import torch
import torchvision
from torch import nn
from torchvision.models._api import WeightsEnum

from bench.backbones import (
    BACKBONES,
    MIN_SIZES,
    EmbeddingNet,
    SmallCNN,
    build_backbone,
    build_model,
)

DIMS = 8
FEAT_DIMS = {
    "small_cnn": 1024,
    "googlenet": 1024,
    "resnet18": 512,
    "resnet50": 2048,
    "vgg16": 4096,
    "alexnet": 4096,
}


@functools.cache
def _model(name: str) -> EmbeddingNet:
    # Built once per name: building vgg16/resnet50 is the slow part of this file.
    torch.manual_seed(0)
    return build_model(name, DIMS)


def _three_channel_input(name: str) -> torch.Tensor:
    size = max(MIN_SIZES[name], 8)
    return torch.randn(2, 3, size, size)


def test_small_cnn_shapes() -> None:
    # The last maps are pooled to a 4x4 grid whatever the input size: 2 * width * 16 features.
    net = SmallCNN(in_channels=3, width=16)
    assert net.out_features == 512
    assert net(torch.randn(2, 3, 32, 32)).shape == (2, 512)
    assert SmallCNN()(torch.randn(2, 1, 8, 8)).shape == (2, 1024)


@pytest.mark.parametrize("name", ["small_cnn", "resnet18", "googlenet", "alexnet"])
@pytest.mark.parametrize("train", [True, False])
def test_forward_shapes(name: str, train: bool) -> None:
    model = _model(name).train(train)
    inputs = [torch.randn(2, 1, 8, 8)]
    if name != "small_cnn":
        inputs.append(_three_channel_input(name))
    for x in inputs:
        out = model(x)
        assert isinstance(out, torch.Tensor)
        assert out.shape == (2, DIMS)
        assert model.features(x).shape == (2, FEAT_DIMS[name])


@pytest.mark.parametrize("name", ["vgg16", "resnet50"])
def test_heavy_backbones_feat_dim(name: str) -> None:
    model = _model(name).eval()
    assert model.embed.in_features == FEAT_DIMS[name]
    with torch.no_grad():
        assert model.features(torch.randn(1, 1, 8, 8)).shape == (1, FEAT_DIMS[name])


def test_build_backbone_returns_dims_and_channels() -> None:
    _, feat_dim, channels = build_backbone("small_cnn", in_channels=1)
    assert (feat_dim, channels) == (1024, 1)
    _, feat_dim, channels = build_backbone("resnet18", in_channels=1)
    assert (feat_dim, channels) == (512, 3)


def test_embedding_net_resizes_to_min_size() -> None:
    seen = []
    net = EmbeddingNet(nn.Flatten(), 3 * 16 * 20, DIMS, in_channels=3, min_size=16)
    net.backbone.register_forward_hook(lambda _m, args, _o: seen.append(args[0].shape))
    assert net(torch.randn(2, 1, 8, 10)).shape == (2, DIMS)
    assert seen == [(2, 3, 16, 20)]


@pytest.mark.parametrize("name", ["vgg16", "alexnet"])
def test_fc7_truncation(name: str) -> None:
    backbone = _model(name).backbone
    modules = list(backbone.children())
    last = modules[-1]
    assert isinstance(last, nn.Linear)
    assert (last.in_features, last.out_features) == (4096, 4096)
    assert sum(isinstance(m, nn.Linear) for m in modules) == 2
    assert any(isinstance(m, nn.Dropout) for m in modules)
    assert not isinstance(modules[-2], nn.ReLU)

    x = torch.randn(2, 3, MIN_SIZES[name], MIN_SIZES[name])
    with torch.no_grad():
        backbone.train()
        assert not torch.equal(backbone(x), backbone(x))
        backbone.eval()
        assert torch.equal(backbone(x), backbone(x))


def test_local_state_dict_round_trip(tmp_path) -> None:
    state = torchvision.models.resnet18(weights=None).state_dict()
    path = tmp_path / "resnet18.pth"
    torch.save(state, path)
    backbone, feat_dim, _ = build_backbone("resnet18", pretrained=str(path))
    assert feat_dim == 512
    assert torch.equal(backbone.conv1.weight, state["conv1.weight"])
    model = build_model("resnet18", DIMS, pretrained=str(path))
    assert torch.equal(model.backbone.layer4[1].conv2.weight, state["layer4.1.conv2.weight"])


def test_local_googlenet_state_dict_with_aux_heads(tmp_path) -> None:
    state = torchvision.models.googlenet(weights=None, aux_logits=True, init_weights=False)
    path = tmp_path / "googlenet.pth"
    torch.save(state.state_dict(), path)
    backbone, _, _ = build_backbone("googlenet", pretrained=str(path))
    assert torch.equal(backbone.conv1.conv.weight, state.conv1.conv.weight)


@pytest.mark.parametrize(
    "saved, name",
    [
        ("resnet18", "googlenet"),  # wrong architecture
        ("resnet18_10_classes", "resnet18"),  # right keys, wrong shapes
        ("list", "resnet18"),  # not a state dict at all
    ],
)
def test_mismatching_state_dict(tmp_path, saved: str, name: str) -> None:
    if saved == "list":
        obj = [torch.zeros(1)]
    else:
        classes = 10 if saved.endswith("10_classes") else 1000
        obj = torchvision.models.resnet18(weights=None, num_classes=classes).state_dict()
    path = tmp_path / "state.pth"
    torch.save(obj, path)
    with pytest.raises(ValueError, match=name) as info:
        build_backbone(name, pretrained=str(path))
    assert "\n" not in str(info.value)


def test_missing_path(tmp_path) -> None:
    path = str(tmp_path / "nope.pth")
    with pytest.raises((FileNotFoundError, ValueError)) as info:
        build_backbone("resnet18", pretrained=path)
    message = str(info.value)
    assert path in message and "'imagenet'" in message and "'none'" in message
    assert "\n" not in message


def test_unknown_name() -> None:
    with pytest.raises(ValueError) as info:
        build_model("resnet1000", DIMS)
    assert all(name in str(info.value) for name in BACKBONES)


def test_small_cnn_rejects_pretrained() -> None:
    with pytest.raises(ValueError, match="small_cnn"):
        build_backbone("small_cnn", pretrained="imagenet")


def _patch_weights(monkeypatch, state: dict[str, torch.Tensor], calls: list[str]) -> None:
    def fake_get_state_dict(self, *args, **kwargs):
        calls.append(str(self))
        return state

    monkeypatch.setattr(WeightsEnum, "get_state_dict", fake_get_state_dict)


def test_imagenet_weights_are_loaded(monkeypatch) -> None:
    state = torchvision.models.resnet18(weights=None).state_dict()
    calls: list[str] = []
    _patch_weights(monkeypatch, state, calls)
    backbone, feat_dim, _ = build_backbone("resnet18", pretrained="imagenet")
    assert calls == ["ResNet18_Weights.IMAGENET1K_V1"]
    assert feat_dim == 512
    assert isinstance(backbone.fc, nn.Identity)
    assert torch.equal(backbone.layer1[0].conv1.weight, state["layer1.0.conv1.weight"])


def test_imagenet_googlenet_uses_transform_input(monkeypatch) -> None:
    # torchvision builds the pretrained GoogLeNet with aux heads, loads, then drops them.
    state = torchvision.models.googlenet(weights=None, aux_logits=True, init_weights=False)
    calls: list[str] = []
    _patch_weights(monkeypatch, state.state_dict(), calls)
    model = build_model("googlenet", DIMS, pretrained="imagenet")
    assert calls == ["GoogLeNet_Weights.IMAGENET1K_V1"]
    assert model.backbone.transform_input and model.backbone.aux1 is None
    assert torch.equal(model.backbone.conv1.conv.weight, state.conv1.conv.weight)
    assert model.train()(torch.randn(2, 1, 8, 8)).shape == (2, DIMS)


def test_imagenet_download_failure(monkeypatch) -> None:
    def offline(self, *args, **kwargs):
        raise urllib.error.URLError("[Errno -3] Temporary failure\nin name resolution")

    monkeypatch.setattr(WeightsEnum, "get_state_dict", offline)
    with pytest.raises(RuntimeError) as info:
        build_backbone("resnet18", pretrained="imagenet")
    message = str(info.value)
    assert "\n" not in message
    assert "--pretrained PATH" in message and torch.hub.get_dir() in message
