"""One sha256 of a file's bytes for the run store, the weights a run starts from and
`nngk-bench pretrain` (bench.util.hashing); a weights file's read once for each size and
modification time of it, which every run of a grid checks (bench.util.weights_files)."""

import hashlib
import os

from bench.runs import store
from bench.util import weights_files
from bench.util.hashing import file_sha256


def test_file_sha256_is_hashlibs_across_blocks(tmp_path):
    path = tmp_path / "big.bin"
    path.write_bytes(os.urandom((1 << 20) + 7))  # more than one block of a MiB
    assert file_sha256(path) == hashlib.sha256(path.read_bytes()).hexdigest()
    assert store.file_sha256 is file_sha256


def test_weights_sha256_reads_a_file_once_until_it_changes(tmp_path, monkeypatch):
    reads = []
    monkeypatch.setattr(weights_files, "file_sha256", lambda p: reads.append(p) or file_sha256(p))
    weights_files._sha256.cache_clear()
    path = tmp_path / "w.pt"
    path.write_bytes(b"first weights")
    first = weights_files.weights_sha256(path)
    assert weights_files.weights_sha256(str(path)) == first and len(reads) == 1
    path.write_bytes(b"other weights, longer")  # replaced at the same path (pretrain --force)
    assert weights_files.weights_sha256(path) == hashlib.sha256(path.read_bytes()).hexdigest()
    assert len(reads) == 2
