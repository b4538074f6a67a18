"""VisualSparta's training objective (eq. 13) with in-batch negatives.

    J = f(q, v+) - log sum_k exp f(q, k)

for each text query q, over the images of the batch: a cross entropy that picks the query's own
image. The paper's sum is written over the negatives V-; like its reference implementation (SPARTA,
Zhao et al. 2020: "we use cross entropy loss") we include the positive in the normaliser, which is
the standard softmax cross entropy and keeps J bounded above by 0. Only the text -> image direction
is trained: VisualSparta is a text-to-image retriever. No temperature multiplies f (the model's
``logit_scale`` is fixed at 1).

The function is defined with the model (models/visualsparta.py), which names it as its contrastive
objective: the models layer does not import train/. It is re-exported here beside the other losses.
"""
from tokenspace.models.visualsparta import text_to_image_loss

__all__ = ["text_to_image_loss"]
