import functools
import urllib.error

import pytest
import torch
import torchvision
from torch import nn
from torchvision.models._api import WeightsEnum

from bench.models.backbones import build_backbone
from bench.models.choices import BACKBONES, SPECS
from bench.models.embedding import EmbeddingNet, build_model
from bench.models.small import SmallCNN, VGG16Tiny

DIMS = 8
TINY_RESNETS = ["resnet18_tiny", "resnet50_tiny"]


@functools.cache
def _model(name: str, embedding: str = "fc") -> EmbeddingNet:
    # Built once per name: building vgg16/resnet50 is the slow part of this file.
    torch.manual_seed(0)
    dims = SPECS[name].gap if embedding == "gap" else DIMS
    return build_model(name, dims, embedding=embedding)


def _three_channel_input(name: str) -> torch.Tensor:
    size = max(SPECS[name].min_size, 8)
    return torch.randn(2, 3, size, size)


def test_small_cnn_shapes() -> None:
    # The last maps are pooled to a 4x4 grid whatever the input size: 2 * width * 16 features.
    net = SmallCNN(in_channels=3, width=16)
    assert net.out_features == 512
    assert net(torch.randn(2, 3, 32, 32)).shape == (2, 512)
    assert SmallCNN()(torch.randn(2, 1, 8, 8)).shape == (2, 1024)


@pytest.mark.parametrize(
    "name",
    [
        *("small_cnn", "small_cnn_gn", "resnet18", "googlenet"),
        *("alexnet", "vgg16_tiny", "resnet18_tiny"),
    ],
)
@pytest.mark.parametrize("train", [True, False])
def test_forward_shapes(name: str, train: bool) -> None:
    model = _model(name).train(train)
    inputs = [torch.randn(2, 1, 8, 8)]
    if not name.startswith("small_cnn"):
        inputs.append(_three_channel_input(name))
    for x in inputs:
        out = model(x)
        assert isinstance(out, torch.Tensor)
        assert out.shape == (2, DIMS)
        assert model.features(x).shape == (2, SPECS[name].features)


@pytest.mark.parametrize("name", ["vgg16", "resnet50"])
def test_heavy_backbones_feat_dim(name: str) -> None:
    model = _model(name).eval()
    assert model.embed.in_features == SPECS[name].features
    with torch.no_grad():
        assert model.features(torch.randn(1, 1, 8, 8)).shape == (1, SPECS[name].features)


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

    x = torch.randn(2, 3, SPECS[name].min_size, SPECS[name].min_size)
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


# --- Tiny ImageNet backbones (64x64 inputs) ---


@pytest.mark.parametrize(
    "name, size, batch",
    [
        ("vgg16_tiny", 64, 2),
        ("vgg16_tiny", 32, 2),
        ("resnet18_tiny", 64, 2),
        ("resnet18_tiny", 32, 2),
        ("resnet50_tiny", 32, 1),
    ],
)
@pytest.mark.parametrize("train", [True, False])
def test_tiny_shapes(name: str, size: int, batch: int, train: bool) -> None:
    model = _model(name).train(train)
    x = torch.randn(batch, 3, size, size)
    with torch.no_grad():
        assert model(x).shape == (batch, DIMS)
        assert model.features(x).shape == (batch, SPECS[name].features)


def _last_map_size(model: EmbeddingNet, layer: nn.Module, x: torch.Tensor) -> tuple[int, ...]:
    seen = []
    handle = layer.register_forward_hook(lambda _m, _a, out: seen.append(out.shape[1:]))
    with torch.no_grad():
        model.eval()(x)
    handle.remove()
    return tuple(seen[0])


def test_vgg16_tiny_layers() -> None:
    backbone = _model("vgg16_tiny").backbone
    layers = list(backbone.features)
    convs = [m for m in layers if isinstance(m, nn.Conv2d)]
    assert [c.out_channels for c in convs] == [32] * 2 + [79] * 2 + [173] * 3 + [422] * 3 + [
        449
    ] * 3
    assert all(c.kernel_size == (3, 3) and c.padding == (1, 1) for c in convs)
    assert not any(isinstance(m, nn.BatchNorm2d) for m in backbone.modules())
    # Max-pools after blocks 1-4 (after conv 2, 4, 7, 10), none after block 5.
    kinds = ["C" if isinstance(m, nn.Conv2d) else "P" for m in layers if not isinstance(m, nn.ReLU)]
    assert "".join(kinds) == "CCPCCPCCCPCCCPCCC"
    assert isinstance(layers[-1], nn.ReLU)

    linears = [m for m in backbone.classifier if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(4 * 4 * 449, 2048), (2048, 2048)]
    assert isinstance(backbone.classifier[-2], nn.ReLU)
    assert [m.p for m in backbone.classifier if isinstance(m, nn.Dropout)] == [0.5, 0.5]

    model = _model("vgg16_tiny")
    assert _last_map_size(model, backbone.features, torch.randn(1, 3, 64, 64)) == (449, 4, 4)
    assert _last_map_size(model, backbone.features, torch.randn(1, 3, 32, 32)) == (449, 2, 2)


def test_vgg16_tiny_weights(tmp_path) -> None:
    with pytest.raises(ValueError, match="no ImageNet weights for vgg16_tiny") as info:
        build_backbone("vgg16_tiny", pretrained="imagenet")
    assert "\n" not in str(info.value)

    state = VGG16Tiny().state_dict()
    path = tmp_path / "vgg16_tiny.pth"
    torch.save(state, path)
    backbone, _, _ = build_backbone("vgg16_tiny", pretrained=str(path))
    assert torch.equal(backbone.features[0].weight, state["features.0.weight"])
    gap, _, _ = build_backbone("vgg16_tiny", pretrained=str(path), embedding="gap")
    assert torch.equal(gap[0][-2].weight, state["features.28.weight"])

    torch.save({"features.0.weight": torch.zeros(1)}, path)
    with pytest.raises(ValueError, match="vgg16_tiny") as info:
        build_backbone("vgg16_tiny", pretrained=str(path))
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("name", TINY_RESNETS)
def test_tiny_resnet_keeps_resolution(name: str) -> None:
    backbone = _model(name).backbone
    assert backbone.conv1.stride == (1, 1)
    assert (backbone.conv1.kernel_size, backbone.conv1.padding) == ((7, 7), (3, 3))
    assert isinstance(backbone.maxpool, nn.Identity) and isinstance(backbone.fc, nn.Identity)
    # Only layers 2-4 halve the size: a 32x32 input ends at 4x4 (1x1 without the change).
    x = torch.randn(1, 3, 32, 32)
    assert _last_map_size(_model(name), backbone.layer4, x) == (SPECS[name].features, 4, 4)


@pytest.mark.parametrize("name", TINY_RESNETS)
def test_tiny_resnet_imagenet_weights_kept(monkeypatch, name: str) -> None:
    base = name.removesuffix("_tiny")
    state = torchvision.models.get_model(base, weights=None).state_dict()
    calls: list[str] = []
    _patch_weights(monkeypatch, state, calls)
    backbone, feat_dim, _ = build_backbone(name, pretrained="imagenet")
    assert calls == [str(torchvision.models.get_model_weights(base).DEFAULT)]
    assert feat_dim == SPECS[name].features
    assert backbone.conv1.stride == (1, 1) and isinstance(backbone.maxpool, nn.Identity)
    assert torch.equal(backbone.conv1.weight, state["conv1.weight"])
    assert torch.equal(backbone.layer1[0].conv1.weight, state["layer1.0.conv1.weight"])


# --- GAP embeddings ---

# The module whose output is the last conv feature map, in a model built with embedding="gap".
LAST_MAP = {
    "small_cnn": lambda b: b.body[-3],
    "small_cnn_gn": lambda b: b.body[-3],
    "googlenet": lambda b: b.inception5b,
    "bninception": lambda b: b[1],
    "resnet18": lambda b: b.layer4,
    "resnet50": lambda b: b.layer4,
    "resnet18_tiny": lambda b: b.layer4,
    "resnet50_tiny": lambda b: b.layer4,
    "vgg16_tiny": lambda b: b[0],
}


@pytest.mark.parametrize("name", list(LAST_MAP))
def test_gap_embedding_is_mean_of_last_map(name: str) -> None:
    model = _model(name, "gap")
    assert isinstance(model.embed, nn.Identity)
    maps = []
    layer = LAST_MAP[name](model.backbone)
    handle = layer.register_forward_hook(lambda _m, _a, out: maps.append(out.clone()))
    size = max(SPECS[name].min_size, 8)
    x = torch.randn(2, 1, size, size)
    # Train mode too: GoogLeNet's dropout after its pool must not touch the GAP embedding.
    for train in (True, False):
        with torch.no_grad():
            out = model.train(train)(x)
        assert out.shape == (2, SPECS[name].gap)
        torch.testing.assert_close(out, maps.pop().mean(dim=(-2, -1)))
    handle.remove()


def test_small_cnn_gn_normalises_each_image_by_itself() -> None:
    # GroupNorm in place of every BatchNorm: no running statistics, so an image embeds the same
    # in train and eval mode, alone or in any batch, before and after training.
    model = build_model("small_cnn_gn", DIMS)
    norms = [m for m in model.modules() if isinstance(m, (nn.BatchNorm2d, nn.GroupNorm))]
    assert len(norms) == 3 and all(isinstance(m, nn.GroupNorm) for m in norms)
    assert [m.num_groups for m in norms] == [4, 8, 8]  # 32, 64, 64 channels, 8 a group
    x = torch.randn(5, 1, 8, 8)
    with torch.no_grad():
        batch = model.train()(x)
        alone = model.eval()(x[:1])
    torch.testing.assert_close(batch[:1], alone)
    # small_cnn's BatchNorm, by contrast, normalises by the batch in train mode.
    model = build_model("small_cnn", DIMS)
    with torch.no_grad():
        assert not torch.allclose(model.train()(x)[:1], model.eval()(x[:1]))


def test_small_cnn_global_pool() -> None:
    assert SmallCNN(width=16, grid=1).out_features == 32
    assert SmallCNN(grid=1)(torch.randn(2, 1, 8, 8)).shape == (2, SPECS["small_cnn"].gap)


@pytest.mark.parametrize("name, dims", [("resnet18", 64), ("vgg16_tiny", 96)])
def test_gap_dims_mismatch(name: str, dims: int) -> None:
    with pytest.raises(ValueError, match=f"{SPECS[name].gap} dims") as info:
        build_model(name, dims, embedding="gap")
    assert "\n" not in str(info.value) and name in str(info.value)


@pytest.mark.parametrize("name", ["vgg16", "alexnet"])
def test_no_gap_for_fc7_backbones(name: str) -> None:
    for build in (
        lambda: build_model(name, 4096, embedding="gap"),
        lambda: build_backbone(name, embedding="gap"),
    ):
        with pytest.raises(ValueError, match=f"{name} has no GAP embedding") as info:
            build()
        assert "\n" not in str(info.value)


def test_unknown_embedding() -> None:
    with pytest.raises(ValueError, match="expected one of: fc, gap"):
        build_model("small_cnn", DIMS, embedding="max")


def test_embedding_net_gap_dims() -> None:
    net = EmbeddingNet(nn.Flatten(), 12, 12, in_channels=3, embedding="gap")
    assert isinstance(net.embed, nn.Identity)
    with pytest.raises(ValueError, match="12 dims"):
        EmbeddingNet(nn.Flatten(), 12, DIMS, in_channels=3, embedding="gap")


def test_backbone_embedding_is_the_backbones_own_output() -> None:
    vgg = build_model("alexnet", 4096, "none", 3, embedding="backbone")
    assert isinstance(vgg.embed, torch.nn.Identity)
    vgg.eval()
    x = torch.randn(1, 3, 64, 64)
    assert torch.equal(vgg(x), vgg.features(x))  # FC7, no layer added
    res = build_model("resnet18", 512, "none", 3, embedding="backbone")
    assert isinstance(res.embed, torch.nn.Dropout)  # Meyer et al. 2018: dropout after pooling
    with pytest.raises(ValueError, match="the backbone embedding of alexnet has 4096 dims"):
        build_model("alexnet", 64, "none", 3, embedding="backbone")
    small = build_model("small_cnn", 1024, "none", 1, embedding="backbone")
    assert small(torch.randn(2, 1, 8, 8)).shape == (2, 1024)
