"""The specification's conformance rules, turned into findings with locations and rule ids.

`document` checks one document as it streams; `across` checks documents against the ones that
list them (with `follow`). `validate` runs both over targets.
"""

from __future__ import annotations

from .document import DocumentChecker, Series, problem_rule
from .findings import ERROR, RULES, WARNING, DocumentSummary, Finding, Report
from .validate import validate

__all__ = [
    "ERROR",
    "RULES",
    "WARNING",
    "DocumentChecker",
    "DocumentSummary",
    "Finding",
    "Report",
    "Series",
    "problem_rule",
    "validate",
]
