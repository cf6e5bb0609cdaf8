"""bench.util.environ: variables set for a while, then exactly as they were."""

import os

import pytest

from bench.util.environ import environment


def test_variables_are_set_inside_and_as_they_were_after(monkeypatch):
    monkeypatch.setenv("NNGK_TEST_SET", "before")
    monkeypatch.delenv("NNGK_TEST_UNSET", raising=False)
    values = {"NNGK_TEST_SET": "inside", "NNGK_TEST_UNSET": "inside"}
    with environment(values):
        assert os.environ["NNGK_TEST_SET"] == os.environ["NNGK_TEST_UNSET"] == "inside"
    assert os.environ["NNGK_TEST_SET"] == "before" and "NNGK_TEST_UNSET" not in os.environ
    with environment(values, replace=False):  # only where unset
        assert os.environ["NNGK_TEST_SET"] == "before"
        assert os.environ["NNGK_TEST_UNSET"] == "inside"
    assert os.environ["NNGK_TEST_SET"] == "before" and "NNGK_TEST_UNSET" not in os.environ


def test_the_cache_setting_is_a_folder_or_unset_and_a_file_is_refused(tmp_path, monkeypatch):
    from bench.util.environ import cache_setting

    monkeypatch.delenv("NNGK_CACHE", raising=False)
    assert cache_setting() is None
    monkeypatch.setenv("NNGK_CACHE", str(tmp_path / "new"))  # created when first written
    assert cache_setting() == tmp_path / "new"
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("NNGK_CACHE", str(tmp_path / "file"))
    with pytest.raises(ValueError, match="NNGK_CACHE=.*file is a file, not a folder"):
        cache_setting()
