"""Context influence (Flemings et al., "Estimating Privacy Leakage of Augmented Contextual
Knowledge in Language Models", ACL 2025): the per-n-gram privacy loss of a private context
(``scorer``) and of its passages, sentences, fields or spans (``units``), Context Influence
Decoding (``cid``), regurgitation metrics (``regurgitation``) and the paper's analyses
(``analysis``)."""

from ctxlite.influence.scorer import Example, ExampleResult, InfluenceScorer, InfluenceSettings

__all__ = ["Example", "ExampleResult", "InfluenceScorer", "InfluenceSettings"]
