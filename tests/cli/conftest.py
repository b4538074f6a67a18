"""The tiny on-disk world of the CLI tests (tests/cli/_cli_world.py), one per module."""
from _cli_world import world  # noqa: F401
