"""Release models by name: where their folders live and which are installed. Plain Python (no torch),
so a search, the ranking files and `serve` find a release without loading the model code
(models/registry.py loads one)."""
from __future__ import annotations

from pathlib import Path

from tokenspace import assets

# the model `tokenspace serve` and `make demo` search with when none is named (models/<name>,
# benchmarks/release_model.py writes it)
DEFAULT_RELEASE = "tokenspace-stair-drawings"


def release_dirs() -> list[Path]:
    """Where release models (trained folders loadable by name) live: ``models/`` of a source checkout,
    then ``$TOKENSPACE_HOME/models``."""
    repo = Path(__file__).resolve().parents[3] / "models"
    return [d for d in (repo, Path(assets.default_home()) / "models") if d.is_dir()]


def release_path(name: str) -> Path | None:
    for d in release_dirs():
        p = d / name
        if (p / "config.json").is_file():
            return p
    return None


def list_releases() -> list[str]:
    return sorted({p.parent.name for d in release_dirs() for p in d.glob("*/config.json")})
