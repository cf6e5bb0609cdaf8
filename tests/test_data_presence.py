"""The check that a run's data is there, made before torch is imported (bench/data/presence.py),
and the data sets' module reach each official data set's reader by its name: each passes on
the miniature of its own layout (tests/fixtures/NAME.py), which both read as the same table."""

import importlib

import pytest

from bench.data import datasets
from bench.data.names import READER_NAMES
from bench.data.presence import check_data_present
from bench.data.sources.base import COLUMNS


@pytest.mark.parametrize("name", READER_NAMES)
def test_each_official_data_set_is_found_and_read_by_its_name(tmp_path, name):
    make = getattr(importlib.import_module(f"tests.fixtures.{name}"), f"make_{name}")
    root = make(tmp_path)
    check_data_present(name, root)  # its layout is there: nothing to refuse
    table, read_from = datasets.read_table(name, root)
    assert read_from == root and len(table) and list(table.columns[: len(COLUMNS)]) == [*COLUMNS]
