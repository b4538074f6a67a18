"""Evaluation: retrieval, zero-shot, linear probe, interpretability and sparsity metrics, and reports.

Works on SparseBatch or dense numpy embeddings only (never imports torch). Every evaluator is a
callable returning ``dict[str, float]`` with a ``primary_metric`` attribute; the dataset (labels,
caption->image mapping, class names) is bound at construction, the model's outputs at call time.
"""
from tokenspace.eval.features import (
    active_feature_fraction,
    clarity,
    clarity_per_feature,
    l0,
    modality_scores,
    modality_summary,
)
from tokenspace.eval.interpret import (
    InterpretabilityEvaluator,
    decode_table,
    token_label_ranks,
    token_topk_accuracy,
)
from tokenspace.eval.localize import query_heatmap
from tokenspace.eval.probe import LinearProbeEvaluator, linear_probe
from tokenspace.eval.report import ResultsDoc, format_value, markdown_table
from tokenspace.eval.retrieval import (
    RetrievalEvaluator,
    fold_retrieval_metrics,
    image_to_text_ranks,
    recall_from_ranks,
    retrieval_metrics,
    text_to_image_ranks,
)
from tokenspace.eval.scoring import chunked_topk, l2_normalize, similarity
from tokenspace.eval.sparsity import SparsityEvaluator, flops, sparsity_stats
from tokenspace.eval.textfree import TokenMaskEncoder, token_mask_embeddings
from tokenspace.eval.zeroshot import ZeroShotEvaluator, build_classifier, classification_metrics

__all__ = [
    "InterpretabilityEvaluator", "LinearProbeEvaluator", "ResultsDoc", "RetrievalEvaluator",
    "SparsityEvaluator", "TokenMaskEncoder", "ZeroShotEvaluator",
    "active_feature_fraction", "build_classifier", "chunked_topk", "clarity", "clarity_per_feature",
    "classification_metrics", "decode_table", "flops", "fold_retrieval_metrics", "format_value", "image_to_text_ranks", "l0",
    "l2_normalize", "linear_probe", "markdown_table", "modality_scores", "modality_summary",
    "query_heatmap", "recall_from_ranks", "retrieval_metrics", "similarity", "sparsity_stats",
    "text_to_image_ranks", "token_label_ranks", "token_mask_embeddings", "token_topk_accuracy",
]
