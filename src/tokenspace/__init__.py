"""tokenspace: learned sparse image-text representations, an inverted index, evaluation and explanations."""
from tokenspace.sparse import SparseBatch
from tokenspace.vocab import Vocabulary

__version__ = "0.1.0"
__all__ = ["SparseBatch", "Vocabulary", "__version__"]
