"""tokenspace: learned sparse image-text representations, an inverted index, evaluation and explanations."""
from tokenspace.sparse import SparseBatch
from tokenspace.vocab import Vocabulary

__version__ = "0.1.0"
__all__ = ["SparseBatch", "Vocabulary", "load", "__version__"]


def load(path_or_name):
    """A trained model folder (or a model config name for a fresh model). Imported lazily: the
    package root must stay torch-free so the index side can import it."""
    from tokenspace.models.registry import load as _load

    return _load(path_or_name)
