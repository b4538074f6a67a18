"""tokenspace: learned sparse image-text representations, an inverted index, evaluation and explanations."""
from tokenspace.sparse import SparseBatch
from tokenspace.vocab import Vocabulary

__version__ = "0.2.0"
__all__ = ["SparseBatch", "Searcher", "Vocabulary", "load", "__version__"]


def load(path_or_name, pretrained: bool | None = None):
    """A trained model: a saved folder or a release model name. A config name (an architecture with
    untrained heads, e.g. ``"stair-emoji"``) needs ``pretrained=False`` said explicitly. Imported lazily:
    the package root must stay torch-free so the index side can import it."""
    from tokenspace.models.registry import load as _load  # lazy: the package root stays torch-free

    return _load(path_or_name, pretrained=pretrained)


def __getattr__(name: str):
    """``tokenspace.Searcher`` (searcher.py: one search session over an index folder), imported on first
    use: the package root stays light for the index side and the CLI's start-up."""
    if name == "Searcher":
        from tokenspace.searcher import Searcher  # lazy: explain/ and the index load with it

        return Searcher
    raise AttributeError(f"module 'tokenspace' has no attribute {name!r}")
