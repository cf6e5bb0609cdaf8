"""Faults of the data a run is given: malformed features files, unreadable --pretrained state
dicts, and data sets not under the data root. Each is one line, before any run folder exists."""

import io
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from bench.data.feature_files import read_features_file
from bench.models.backbones import build_backbone
from tests.conftest import cli

ROWS = 12


def good_arrays() -> dict:
    split = np.array(["train"] * 6 + ["val"] * 2 + ["test"] * 4)
    features = np.random.default_rng(0).random((ROWS, 5)).astype(np.float32)
    return dict(features=features, labels=np.arange(ROWS) % 3, split=split)


def npz_bytes(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def one_error_line(out) -> str:
    assert out.exit_code == 1, out.output
    assert "Traceback" not in out.output and "Aborted" not in out.output, out.output
    lines = out.output.strip().splitlines()
    assert lines[-1].startswith("Error: ") and sum(x.startswith("Error") for x in lines) == 1
    return lines[-1]


def test_a_features_file_with_no_columns_is_refused_before_any_run_folder(tmp_path):
    """It used to die of SIGFPE (exit 136) in the baseline, leaving a folder with config.json."""
    path = tmp_path / "zero.npz"
    path.write_bytes(npz_bytes(**{**good_arrays(), "features": np.zeros((ROWS, 0), np.float32)}))
    args = ["run", "--loss", "contrastive", "--dataset", f"features:{path}", "--dims", "8"]
    line = one_error_line(cli(*args, "--results", tmp_path / "r", catch_exceptions=True))
    assert str(path) in line and "features has shape (12, 0): no feature columns" in line
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())


def flip_a_byte(data: bytes) -> bytes:
    at = data.index(b"features.npy") + 200
    return data[:at] + bytes([data[at] ^ 0xFF]) + data[at + 1 :]


def saved_npy() -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.zeros((ROWS, 5)))
    return buf.getvalue()


def objects(key: str) -> bytes:
    """A features file whose array `key` holds Python objects (numpy pickles them)."""
    return npz_bytes(**{**good_arrays(), key: np.array([None] * ROWS, dtype=object)})


@pytest.mark.parametrize(
    "content, message",
    [
        (b"just some text\n", "not a readable .npz file (not a whole zip archive"),
        (pickle.dumps({"features": [1]}), "not a readable .npz file (not a whole zip archive"),
        (saved_npy(), "not a readable .npz file (not a whole zip archive"),  # an .npy, not .npz
        (b"", "not a readable .npz file (not a whole zip archive"),
        (npz_bytes(**good_arrays())[:300], "not a readable .npz file (not a whole zip archive"),
        (flip_a_byte(npz_bytes(**good_arrays())), "not a readable .npz (Bad CRC-32"),
        (objects("features"), "array features holds Python objects, not numbers or strings"),
        (objects("split"), "array split holds Python objects, not numbers or strings"),
    ],
    ids=["text", "pickle", "npy", "empty", "truncated", "a changed byte", "objects", "objects 2"],
)
def test_a_file_that_is_not_a_features_npz_says_so_in_one_line(tmp_path, content, message):
    path = tmp_path / "f.npz"
    path.write_bytes(content)
    with pytest.raises(ValueError) as err:
        read_features_file(path)
    text = str(err.value)
    assert text.startswith(f"{path}: ") and message in text and "\n" not in text
    assert "pickle" not in text
    assert "features (N x F floats" in text and "`nngk-bench features`" in text


BAD = {
    "3-D": ({"features": np.zeros((ROWS, 2, 2))}, "features has shape (12, 2, 2), not (N rows"),
    "no columns": ({"features": np.zeros((ROWS, 0))}, "no feature columns"),
    "complex": ({"features": np.ones((ROWS, 2), complex)}, "dtype complex128, not real numbers"),
    "text": ({"features": np.full((ROWS, 2), "a")}, "dtype <U1, not real numbers"),
    "NaN": ({"features": np.where(np.eye(ROWS, 3) > 0, np.nan, 1.0)}, "in 3 row(s), e.g. row 0"),
    "beyond float32": ({"features": np.full((ROWS, 2), 1e300)}, "beyond-float32 values"),
    "short labels": ({"labels": np.arange(5)}, "labels has shape (5,) and dtype int64, for 12"),
    "float labels": ({"labels": np.ones(ROWS)}, "labels has shape (12,) and dtype float64"),
    "long split": ({"split": np.array(["train"] * 13)}, "split has shape (13,)"),
    "no split": ({"split": None}, "missing array split"),
}


@pytest.mark.parametrize("change, message", BAD.values(), ids=BAD.keys())
def test_a_malformed_features_file_is_one_line_naming_the_array(tmp_path, change, message):
    arrays = {k: v for k, v in {**good_arrays(), **change}.items() if v is not None}
    path = tmp_path / "f.npz"
    path.write_bytes(npz_bytes(**arrays))
    with pytest.raises(ValueError) as err:
        read_features_file(path)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_good_features_file_reads_as_float32(tmp_path):
    path = tmp_path / "f.npz"
    arrays = {**good_arrays(), "features": np.arange(ROWS * 2, dtype=np.int16).reshape(ROWS, 2)}
    path.write_bytes(npz_bytes(**arrays))
    features, labels, split = read_features_file(path)
    assert features.dtype == np.float32 and np.array_equal(features, arrays["features"])
    assert labels.dtype == np.int64 and split.tolist() == arrays["split"].tolist()


class NotWeights:
    """A pickled object torch.load(weights_only=True) refuses."""


def state_dict_bytes() -> bytes:
    buf = io.BytesIO()
    torch.save(torch.nn.Linear(2, 2).state_dict(), buf)
    return buf.getvalue()


def refused_pickle() -> bytes:
    buf = io.BytesIO()
    torch.save({"weight": torch.zeros(2), "extra": NotWeights()}, buf)
    return buf.getvalue()


@pytest.mark.parametrize(
    "content, why",
    [
        (lambda: state_dict_bytes()[:300], "damaged, or not written by torch.save"),
        (lambda: os.urandom(3000), "damaged, or not written by torch.save"),
        (lambda: b"", "damaged, or not written by torch.save"),
        (refused_pickle, f"it pickles {__name__}.NotWeights; a safe load reads tensors"),
    ],
    ids=["truncated", "random bytes", "empty", "refused pickle"],
)
def test_an_unreadable_pretrained_file_is_one_line_without_unsafe_advice(tmp_path, content, why):
    path = tmp_path / "weights.pth"
    path.write_bytes(content())
    with pytest.raises(ValueError) as err:
        build_backbone("resnet18", pretrained=str(path))
    text = str(err.value)
    assert f"pretrained={str(path)!r} is not a readable PyTorch state dict for resnet18" in text
    assert why in text and "torch.save(model.state_dict(), PATH)" in text
    assert "weights_only" not in text and "\n" not in text


def test_a_checkpoint_that_is_not_a_bare_state_dict_names_its_other_values(tmp_path):
    path = tmp_path / "checkpoint.pth"
    torch.save({"model": torch.nn.Linear(2, 2).state_dict(), "epoch": 3}, path)
    with pytest.raises(ValueError) as err:
        build_backbone("resnet18", pretrained=str(path))
    text = str(err.value)
    assert "a mapping with non-tensor values under 'model', 'epoch'" in text
    assert "torch.save(model.state_dict(), PATH)" in text and "\n" not in text


def test_an_unreadable_pretrained_file_stops_the_run_with_one_line(tmp_path):
    path = tmp_path / "weights.pth"
    path.write_bytes(state_dict_bytes()[:300])
    args = ["run", "--loss", "contrastive", "--dataset", "glyphs:classes=8,instances=10,size=12"]
    args += ["--backbone", "resnet18", "--pretrained", str(path), "--epochs", "1"]
    args += ["--batch-size", "8", "--dims", "8"]
    out = cli(*args, "--results", tmp_path / "r", catch_exceptions=True)
    line = one_error_line(out)
    assert "not a readable PyTorch state dict" in line and "weights_only" not in out.output


@pytest.mark.parametrize("how", ["--data-root", "$NNGK_DATA"])
def test_a_data_set_not_under_the_data_root_names_the_root_given(tmp_path, monkeypatch, how):
    root = tmp_path / "data"
    root.mkdir()
    args = ["run", "--loss", "contrastive", "--dataset", "cub", "--results", str(tmp_path / "r")]
    if how == "--data-root":
        monkeypatch.setenv("NNGK_DATA", str(tmp_path / "elsewhere"))
        args += ["--data-root", str(root)]
    else:
        monkeypatch.setenv("NNGK_DATA", str(root))
    line = one_error_line(cli(*args, catch_exceptions=True))
    assert f"{Path(root) / 'CUB_200_2011' / 'images.txt'} not found" in line
    assert f"looked in the data root {root}; to use another, pass --data-root ROOT" in line
