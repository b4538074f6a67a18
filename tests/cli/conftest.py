"""The tiny on-disk world of the CLI tests (tests/cli/_cli_world.py), one per module, and ``cli``: a command run
in this process, its exit code and its one stderr line."""
import pytest
from _cli_world import world  # noqa: F401

from tokenspace.cli import main


@pytest.fixture
def cli(capsys, restore_cli_logging, tmp_path, monkeypatch):
    """``cli(*args) -> (exit code, the one stderr line)``; fails on a traceback or several lines."""
    monkeypatch.setenv("TOKENSPACE_HOME", str(tmp_path / "home"))

    def run(*args):
        try:
            code = main([str(a) for a in args])
        except SystemExit as e:  # argparse's usage errors and UsageError (parser.exit)
            code = e.code
        err = capsys.readouterr().err
        assert "Traceback" not in err
        lines = [ln for ln in err.splitlines() if ln.startswith("tokenspace")]
        assert len(lines) <= 1, err
        return code, lines[0] if lines else ""

    return run
