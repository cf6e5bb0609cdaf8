"""Fast start: the command list needs no command's module, so none of torch, torchvision or
scikit-learn is imported to show it; and the list says what each command's own help says."""

import subprocess
import sys

from click.testing import CliRunner

from bench.cli import COMMANDS, main, short_help

HEAVY = ("torch", "torchvision", "sklearn", "pandas", "faiss", "optuna")


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
