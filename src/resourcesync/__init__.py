"""resourcesync: ResourceSync (ANSI/NISO Z39.99) for Sources, Destinations, hubs and LIRS.

The library's doors, importable from here (each loaded on first use, so `import resourcesync`
costs nothing; issue 14.15):

- documents: `open_document`, `read_document`, `write_document`, `write_split`, `validate`,
  and the model: `Document`, `Resource`, `Link`, `Capability`, `Change`;
- a Source: `publish(PublishConfig(out, sets=[SetConfig(name, dir, base_url)]))`;
- a Destination: `sync(source, dest, SyncOptions(...))` → `SyncReport`, `audit(source, dest)`
  → `AuditReport`;
- errors: `ResourceSyncError` (every error of ours, with `.source` and `.line` when known).

Paths may be `str` or `pathlib.Path` everywhere.
"""

from __future__ import annotations

from .lazy import exports

# Not typing's: importing typing costs the program's first steps 15 ms (see `_program`).
TYPE_CHECKING = False

__version__ = "0.1.0"

if TYPE_CHECKING:
    from .destination.audit import audit
    from .destination.options import SyncOptions
    from .destination.report import AuditReport, SyncReport
    from .destination.sync import sync
    from .errors import ResourceSyncError
    from .model import Capability, Change, Document, Link, Resource
    from .sitemap.read import open_document, read_document
    from .sitemap.rules.validate import validate
    from .sitemap.write import write_document, write_split
    from .source.config import PublishConfig, SetConfig
    from .source.publish import publish

_WHERE = {
    "open_document": "sitemap",
    "read_document": "sitemap",
    "write_document": "sitemap",
    "write_split": "sitemap",
    "validate": "sitemap",
    "Document": "model",
    "Resource": "model",
    "Link": "model",
    "Capability": "model",
    "Change": "model",
    "publish": "source.publish",
    "PublishConfig": "source.config",
    "SetConfig": "source.config",
    "sync": "destination.sync",
    "audit": "destination.audit",
    "SyncOptions": "destination.options",
    "SyncReport": "destination.report",
    "AuditReport": "destination.report",
    "ResourceSyncError": "errors",
}

__all__ = [
    "AuditReport",
    "Capability",
    "Change",
    "Document",
    "Link",
    "PublishConfig",
    "Resource",
    "ResourceSyncError",
    "SetConfig",
    "SyncOptions",
    "SyncReport",
    "__version__",
    "audit",
    "open_document",
    "publish",
    "read_document",
    "sync",
    "validate",
    "write_document",
    "write_split",
]


__getattr__ = exports(__name__, _WHERE, globals())
