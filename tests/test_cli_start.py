"""Fast start: the command list needs no command's module, and no command's help needs a
heavy package (torch, scikit-learn, pandas, ...: their import takes seconds), so `--help` is
quick; and the list says what each command's own help says."""

import subprocess
import sys

import pytest
from click.testing import CliRunner

from bench.cli import COMMANDS, main, short_help

HEAVY = ("torch", "torchvision", "sklearn", "pandas", "faiss", "optuna", "scipy")


def test_help_imports_no_heavy_package():
    code = (
        "import sys\n"
        "from bench.cli import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "Commands:" in out.stdout and "tune " in out.stdout
    assert out.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_commands_help_imports_no_heavy_package(name):
    module = COMMANDS[name].split(":")[0]
    code = (
        "import importlib, sys\n"
        f"importlib.import_module({module!r})\n"
        "from bench.cli import main\n"
        "try:\n"
        f"    main([{name!r}, '--help'], prog_name='nngk-bench')\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert f"Usage: nngk-bench {name} [OPTIONS]" in out.stdout, out.stdout
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_the_list_shows_each_commands_own_short_help():
    listing = CliRunner().invoke(main, ["--help"]).output
    for name, target in COMMANDS.items():
        command = main.get_command(None, name)
        assert command.name == name
        assert short_help(target) == command.get_short_help_str()
        assert f"{name}  " in listing and short_help(target) in listing


def test_an_unknown_command_is_one_line():
    out = CliRunner().invoke(main, ["trian"])
    assert out.exit_code == 2 and "No such command 'trian'" in out.output
