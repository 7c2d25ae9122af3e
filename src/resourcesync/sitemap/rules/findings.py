"""What the validator says: findings (level, stable rule id, message, where) and the report."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["ERROR", "WARNING", "DocumentSummary", "Finding", "Report"]

ERROR = "error"
WARNING = "warning"


@dataclass(frozen=True, slots=True)
class Finding:
    """One thing the validator has to say, with where it was found.

    `rule` is a stable identifier (e.g. `core-12.2-index-order`) for scripts and CI to filter
    on; the message may be reworded, the rule id is not.
    """

    level: str
    message: str
    source: str
    line: int | None = None
    entry: str | None = None
    rule: str = ""

    def __str__(self) -> str:
        where = f"{self.source}:{self.line}" if self.line else self.source
        text = f"{where}: {self.level}: {self.message}"
        return f"{text} (entry {self.entry})" if self.entry else text

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None and v != ""}


@dataclass
class DocumentSummary:
    """What was read of one document."""

    source: str
    capability: str | None
    index: bool
    entries: int
    errors: int = 0
    warnings: int = 0


@dataclass
class Report:
    findings: list[Finding] = field(default_factory=list)
    documents: list[DocumentSummary] = field(default_factory=list)
    unreadable: list[Finding] = field(default_factory=list)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.level == ERROR]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.level == WARNING]

    @property
    def ok(self) -> bool:
        return not self.errors and not self.unreadable

    def to_json(self) -> str:
        return json.dumps(
            {
                "ok": self.ok,
                "documents": [asdict(d) for d in self.documents],
                "findings": [f.to_json() for f in self.findings],
                "unreadable": [f.to_json() for f in self.unreadable],
            }
        )
