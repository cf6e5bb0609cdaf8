"""bench.util.environ: variables set for a while, then exactly as they were."""

import os

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
