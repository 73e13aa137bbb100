"""How a score result is named wherever a person reads it: its λ, context size and ε.

One example's results are told apart by their λ, the context size k they were scored on
(``--context-sizes``) and, for ε-bounded CID, the ε the response was generated under. Every
consumer (the terminal table, the summary lines, gate messages, the HTML report) names a
result through these functions, so two results at the same λ are never shown alike. They read
an ``ExampleResult.to_dict()`` result or a ``summarize`` entry (both carry ``lam``,
``context_size`` and ``epsilon``).
"""

from __future__ import annotations


def result_epsilon(result: dict) -> float | None:
    """The ε of ε-bounded CID a result's response was generated under; None for unbounded CID or
    a given response. Logs written before results carried ``epsilon`` have it in ``generation``."""
    if "epsilon" in result:
        return result["epsilon"]
    return (result.get("generation") or {}).get("epsilon")


def lambda_label(result: dict) -> str:
    """``1.5``, or ``1.5@32`` for a result scored on the first 32 context tokens."""
    size = result.get("context_size")
    return f"{result['lam']:g}" + ("" if size is None else f"@{size}")


def epsilon_label(result: dict) -> str:
    """``2`` for a result generated under ε = 2; ``""`` without an ε."""
    eps = result_epsilon(result)
    return "" if eps is None else f"{eps:g}"


def result_label(result: dict) -> str:
    """``λ=1.5``, ``λ=1.5@32``, ``λ=1.5 ε=2``: the result's name in one line of text."""
    eps = epsilon_label(result)
    return f"λ={lambda_label(result)}" + (f" ε={eps}" if eps else "")


__all__ = ["result_epsilon", "lambda_label", "epsilon_label", "result_label"]
