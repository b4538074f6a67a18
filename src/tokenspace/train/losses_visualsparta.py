"""VisualSparta's training objective (eq. 13), re-exported here beside the other losses.

It is defined with the model (``tokenspace.models.visualsparta.text_to_image_loss``, whose docstring
gives the formula and the choices), which names it as its contrastive objective: the models layer
does not import train/.
"""
from tokenspace.models.visualsparta import text_to_image_loss

__all__ = ["text_to_image_loss"]
