"""BN-Inception (issue 45, item 2): the layout of the field's published weights (Cadene's
pretrainedmodels, bn_inception-52deb4733.pth), its pooling per block, its input made from the
harness's, a state dict of that layout loaded with --pretrained PATH (its sha256 recorded), a
step of training through the command line, and --pretrained imagenet fetched once into torch's
cache (offline: a one-line error)."""

from __future__ import annotations

import hashlib
import json
import shutil
import urllib.error
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from bench.data import crops
from bench.models import bninception as bni
from bench.models.backbones import build_backbone
from bench.models.embedding import build_model
from tests.conftest import cli

# Every convolution of the published layout, as pretrainedmodels/models/bninception.py (Cadene's
# pretrained-models.pytorch, its last commit) declares it: name (less "inception_"), input and
# output channels, kernel side, "s2" for stride 2. Each has a bias and a batch norm `<name>_bn`.
PUBLISHED = """
conv1_7x7_s2 3 64 7 s2, conv2_3x3_reduce 64 64 1, conv2_3x3 64 192 3
3a_1x1 192 64 1, 3a_3x3_reduce 192 64 1, 3a_3x3 64 64 3, 3a_double_3x3_reduce 192 64 1,
3a_double_3x3_1 64 96 3, 3a_double_3x3_2 96 96 3, 3a_pool_proj 192 32 1
3b_1x1 256 64 1, 3b_3x3_reduce 256 64 1, 3b_3x3 64 96 3, 3b_double_3x3_reduce 256 64 1,
3b_double_3x3_1 64 96 3, 3b_double_3x3_2 96 96 3, 3b_pool_proj 256 64 1
3c_3x3_reduce 320 128 1, 3c_3x3 128 160 3 s2, 3c_double_3x3_reduce 320 64 1,
3c_double_3x3_1 64 96 3, 3c_double_3x3_2 96 96 3 s2
4a_1x1 576 224 1, 4a_3x3_reduce 576 64 1, 4a_3x3 64 96 3, 4a_double_3x3_reduce 576 96 1,
4a_double_3x3_1 96 128 3, 4a_double_3x3_2 128 128 3, 4a_pool_proj 576 128 1
4b_1x1 576 192 1, 4b_3x3_reduce 576 96 1, 4b_3x3 96 128 3, 4b_double_3x3_reduce 576 96 1,
4b_double_3x3_1 96 128 3, 4b_double_3x3_2 128 128 3, 4b_pool_proj 576 128 1
4c_1x1 576 160 1, 4c_3x3_reduce 576 128 1, 4c_3x3 128 160 3, 4c_double_3x3_reduce 576 128 1,
4c_double_3x3_1 128 160 3, 4c_double_3x3_2 160 160 3, 4c_pool_proj 576 128 1
4d_1x1 608 96 1, 4d_3x3_reduce 608 128 1, 4d_3x3 128 192 3, 4d_double_3x3_reduce 608 160 1,
4d_double_3x3_1 160 192 3, 4d_double_3x3_2 192 192 3, 4d_pool_proj 608 128 1
4e_3x3_reduce 608 128 1, 4e_3x3 128 192 3 s2, 4e_double_3x3_reduce 608 192 1,
4e_double_3x3_1 192 256 3, 4e_double_3x3_2 256 256 3 s2
5a_1x1 1056 352 1, 5a_3x3_reduce 1056 192 1, 5a_3x3 192 320 3, 5a_double_3x3_reduce 1056 160 1,
5a_double_3x3_1 160 224 3, 5a_double_3x3_2 224 224 3, 5a_pool_proj 1056 128 1
5b_1x1 1024 352 1, 5b_3x3_reduce 1024 192 1, 5b_3x3 192 320 3, 5b_double_3x3_reduce 1024 192 1,
5b_double_3x3_1 192 224 3, 5b_double_3x3_2 224 224 3, 5b_pool_proj 1024 128 1
"""
# The same file's pooling in each block: 3x3 windows, stride 1 and padding 1, in ceil mode, the
# average counting the padding; the stride-2 blocks' max pool (stride 2, no padding) passes its
# map on unprojected, as the last channels of the block's output.
POOLS = {"3a": "avg", "3b": "avg", "3c": "s2", "4a": "avg", "4b": "avg", "4c": "avg"}
POOLS |= {"4d": "avg", "4e": "s2", "5a": "avg", "5b": "max"}
# Parameters of the published model, counted from the layout above with its classifier
# (`last_linear`, 1024 -> 1000): 69 convolutions with biases, 69 batch norms' weights and biases.
PUBLISHED_PARAMETERS = 11_295_240
DATASET = "glyphs:classes=8,instances=6"  # 4 training classes of 6 glyphs, 28 px


def published_convs() -> dict[str, tuple[int, int, int, int]]:
    """{layer name: (input channels, output channels, kernel side, stride)}."""
    convs = {}
    for item in filter(str.strip, PUBLISHED.replace("\n", ",").split(",")):
        name, cin, cout, kernel, *stride = item.split()
        name = name if name.startswith("conv") else f"inception_{name}"
        convs[name] = (int(cin), int(cout), int(kernel), 2 if stride else 1)
    return convs


def published_shapes() -> dict[str, tuple[int, ...]]:
    """The state dict's keys and shapes in the published layout, its classifier aside."""
    shapes = {}
    for name, (cin, cout, kernel, _) in published_convs().items():
        shapes |= {f"{name}.weight": (cout, cin, kernel, kernel), f"{name}.bias": (cout,)}
        shapes |= {f"{name}_bn.{k}": (cout,) for k in ("weight", "bias", "running_mean")}
        shapes |= {f"{name}_bn.running_var": (cout,), f"{name}_bn.num_batches_tracked": ()}
    return shapes


def random_network(seed: int = 0) -> bni.BNInception:
    """A randomly initialised network with batch-norm statistics of its own, in eval mode."""
    torch.manual_seed(seed)
    net = bni.BNInception()
    for layer in net.modules():
        if isinstance(layer, torch.nn.BatchNorm2d):
            layer.running_mean.normal_(0, 0.1)
            layer.running_var.uniform_(0.5, 2.0)
            layer.weight.data.uniform_(0.5, 1.5)
    return net.eval()


def published_file(path: Path, net: bni.BNInception, old_port: bool = False) -> Path:
    """`net`'s weights as the published file holds them: no batch counts (saved before PyTorch
    0.4.1), a 1000-class `last_linear`; `old_port`: batch-norm vectors as (1, C)."""
    state = {k: v for k, v in net.state_dict().items() if not k.endswith("num_batches_tracked")}
    if old_port:
        state = {k: v[None] if "_bn." in k else v for k, v in state.items()}
    state |= {"last_linear.weight": torch.randn(1000, 1024), "last_linear.bias": torch.zeros(1000)}
    torch.save(state, path)
    return path


def test_the_layers_are_those_of_the_published_weights():
    net = bni.BNInception()
    assert {k: tuple(v.shape) for k, v in net.state_dict().items()} == published_shapes()
    for name, (_, _, kernel, stride) in published_convs().items():
        conv = getattr(net, name)
        assert (conv.stride, conv.padding) == ((stride, stride), (kernel // 2, kernel // 2)), name
    counted = sum(cin * cout * k * k + 3 * cout for cin, cout, k, _ in published_convs().values())
    assert counted + 1024 * 1000 + 1000 == PUBLISHED_PARAMETERS
    own = sum(p.numel() for p in net.parameters())
    assert own + 1024 * 1000 + 1000 == PUBLISHED_PARAMETERS


def test_each_block_pools_as_published():
    net, inputs, pooled = random_network(), {}, {}

    def keep(found: dict, block: str, layer: str) -> None:
        hook = lambda _m, args: found.update({block: args[0]})  # noqa: E731
        getattr(net, f"inception_{block}_{layer}").register_forward_pre_hook(hook)

    for block in POOLS:
        keep(inputs, block, "3x3_reduce")  # takes the block's input
        if POOLS[block] != "s2":
            keep(pooled, block, "pool_proj")
    with torch.no_grad():
        last = net(torch.randn(2, 3, 64, 64))
    order = [*POOLS, None]
    for block, kind in POOLS.items():
        x = inputs[block]
        if kind == "s2":  # the pooled map, unprojected, ends the next block's input
            after = inputs[order[order.index(block) + 1]]
            expected = F.max_pool2d(x, 3, 2, ceil_mode=True)
            torch.testing.assert_close(after[:, -x.shape[1] :], expected)
        elif kind == "max":
            torch.testing.assert_close(pooled[block], F.max_pool2d(x, 3, 1, 1, ceil_mode=True))
        else:
            expected = F.avg_pool2d(x, 3, 1, 1, ceil_mode=True, count_include_pad=True)
            torch.testing.assert_close(pooled[block], expected)
    assert last.shape == (2, 1024, 2, 2) and (last >= 0).all()  # each branch ends in a ReLU


def test_the_harness_input_becomes_the_published_input():
    # The crops' normalisation, which bench.models cannot import, is the one it undoes.
    assert (bni.IMAGENET_MEAN, bni.IMAGENET_STD) == (crops.IMAGENET_MEAN, crops.IMAGENET_STD)
    pixels = torch.randint(0, 256, (2, 3, 5, 5)).float()  # RGB, 0-255
    mean, std = crops.pixel_statistics(torch.device("cpu"))
    given = (pixels - mean) / std  # what bench.data.crops gives a backbone
    published = pixels.flip(1) - torch.tensor([104.0, 117.0, 128.0])[:, None, None]
    torch.testing.assert_close(bni.CaffeInput()(given), published, rtol=0, atol=1e-4)


def test_the_sizes_it_takes_are_those_the_network_runs_on():
    net = bni.BNInception().eval()
    with torch.no_grad():
        for size in (30, 31, 38, 39, 62, 63, 70, 71):
            try:
                net(torch.zeros(1, 3, size, size))
                ran = True
            except RuntimeError:  # a stride-2 block's branches of different sides
                ran = False
            assert ran == bni.takes_size(size), size
    assert bni.takes_size(224) and bni.takes_size(227) and bni.takes_size(256)
    with pytest.raises(ValueError, match="cannot take 112-px crops") as caught:
        build_model("bninception", 16, image_size=112)
    assert "e.g. 102 or 127 (224 as published)" in str(caught.value)


@pytest.mark.parametrize("old_port", [False, True])
def test_a_published_state_dict_loads_and_gives_the_same_features(tmp_path, old_port):
    net = random_network()
    path = published_file(tmp_path / "bn_inception.pth", net, old_port)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        last = net(bni.CaffeInput()(x))
        poolings = {"avg": last.mean((2, 3)), "avg+max": last.mean((2, 3)) + last.amax((2, 3))}
        for pooling, expected in poolings.items():
            loaded, dims, channels = build_backbone("bninception", str(path), pooling=pooling)
            assert (dims, channels) == (1024, 3)
            torch.testing.assert_close(loaded.eval()(x), expected)


def test_a_state_dict_of_another_layout_is_a_one_line_error(tmp_path):
    state = torch.load(published_file(tmp_path / "w.pth", random_network()))
    state["inception_3a_extra.weight"] = state.pop("inception_3a_1x1.weight")
    torch.save(state, tmp_path / "w.pth")
    with pytest.raises(ValueError) as caught:
        build_backbone("bninception", str(tmp_path / "w.pth"))
    message = str(caught.value)
    assert "does not match the published layout of bninception" in message
    assert "missing keys (e.g. inception_3a_1x1.weight)" in message and "\n" not in message


def test_it_trains_through_the_command_line_and_records_its_weights(tmp_path):
    path = published_file(tmp_path / "bn_inception-52deb4733.pth", random_network())
    out = cli(
        "run", "--loss", "proxy-anchor", "--dataset", DATASET, "--backbone", "bninception",
        "--pretrained", path, "--freeze-bn", "--pooling", "avg+max", "--dims", "16",
        "--epochs", "1", "--batch-size", "8", "--m-per-class", "2",
        "--crop", "64", "--results", tmp_path / "results",
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    (folder,) = (tmp_path / "results").glob("*-proxy-anchor-d16-*")
    metrics = json.loads((folder / "metrics.json").read_text())
    assert metrics["weights_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert (metrics["best_epoch"], metrics["backbone"]) == (1, "bninception")
    assert 0 <= metrics["recall@1"] <= 1


def test_imagenet_weights_offline_are_a_one_line_error_naming_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))

    def offline(url, dst, *args, **kwargs):
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(torch.hub, "download_url_to_file", offline)
    out = cli(
        "run", "--loss", "proxy-anchor", "--dataset", DATASET, "--backbone", "bninception",
        "--pretrained", "imagenet", "--results", tmp_path / "results",
    )  # fmt: skip
    assert out.exit_code == 1 and "Traceback" not in out.output, out.output
    line = out.output.splitlines()[-1]
    assert line.startswith("Error: ") and bni.WEIGHTS_URL in line and "no network" in line
    assert bni.imagenet_file() in line and "--pretrained PATH" in line
    assert not (tmp_path / "results").exists() and not Path(bni.imagenet_file()).exists()


def test_imagenet_weights_are_fetched_once_into_torchs_cache(tmp_path, monkeypatch):
    """Where there is a network (here a stand-in that serves a file of the published layout):
    downloaded once into torch's cache, as torchvision's weights are, then read from there."""
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    source, fetched = random_network(), []
    served = published_file(tmp_path / "served.pth", source)

    def download(url, dst, *args, **kwargs):
        fetched.append(url)
        shutil.copyfile(served, dst)

    monkeypatch.setattr(torch.hub, "download_url_to_file", download)
    for _ in range(2):
        net, dims = bni.build_bninception("imagenet")
        assert dims == 1024
    assert fetched == [bni.WEIGHTS_URL]
    assert bni.imagenet_file() == str(
        tmp_path / "torch" / "hub" / "checkpoints" / "bn_inception-52deb4733.pth"
    )
    got = net[1].state_dict()  # (CaffeInput, BNInception, pooling, flatten)
    weights = {k: v for k, v in source.state_dict().items() if "num_batches" not in k}
    assert all(torch.equal(got[k], v) for k, v in weights.items())
