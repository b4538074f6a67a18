"""The image preprocessing lives in the data layer (tokenspace.data.preprocess): the data loaders use
it and data never imports models. Re-exported here for the models and for older imports."""
from tokenspace.data.preprocess import pixels, to_square

__all__ = ["pixels", "to_square"]
