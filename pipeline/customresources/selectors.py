"""Kubernetes label selector objects (`matchLabels`, `matchExpressions`) as selector text.

GitTargets' rule items (`objectSelector`) and the namespace policies of ClusterProviders and
GitTargets (`selector`) spell selectors as objects; the label-selector grammar and its matching
live in `pipeline.kube.selector`, which reads the text form.
"""

from __future__ import annotations

from typing import Any

from pipeline.kube.selector import SelectorError, parse_selector

__all__ = ["selector_text"]


def selector_text(selector: Any) -> str:
    """An objectSelector (matchLabels, matchExpressions) as label selector text; raises ValueError."""
    if not selector:
        return ""
    if not isinstance(selector, dict):
        raise ValueError("must be a mapping with matchLabels and/or matchExpressions")
    labels = selector.get("matchLabels") or {}
    expressions = selector.get("matchExpressions") or []
    if not isinstance(labels, dict):
        raise ValueError("matchLabels must be a mapping")
    if not isinstance(expressions, list) or not all(isinstance(e, dict) for e in expressions):
        raise ValueError("matchExpressions must be a list of mappings")
    parts = [f"{key}={value}" for key, value in sorted(labels.items(), key=lambda pair: str(pair[0]))]
    for expression in expressions:
        key, operator = expression.get("key", ""), expression.get("operator", "")
        listed = expression.get("values") or []
        if not isinstance(listed, list):
            raise ValueError("matchExpressions[].values must be a list")
        values = ",".join(sorted(str(v) for v in listed))
        spelled = {
            "In": f"{key} in ({values})",
            "NotIn": f"{key} notin ({values})",
            "Exists": key,
            "DoesNotExist": f"!{key}",
        }.get(str(operator))
        if spelled is None:
            raise ValueError(f"operator {operator!r} is not In, NotIn, Exists or DoesNotExist")
        parts.append(str(spelled))
    text = ",".join(parts)
    try:
        parse_selector(text)
    except SelectorError as exc:
        raise ValueError(str(exc)) from None
    return text
