"""A WebSub hub for ResourceSync Change Notification: subscriptions verified with the
subscriber, notifications from Sources stored in SQLite, and delivered to every subscriber in
order, signed, retried until the lease ends. Stands on `model`, `sitemap` and `http` only."""

from .app import Hub, create_app, format_links, parse_links
from .config import AddressPolicy, HubConfig, parse_network
from .deliver import Deliverer, sign
from .store import Store

__all__ = [
    "AddressPolicy",
    "Deliverer",
    "Hub",
    "HubConfig",
    "Store",
    "create_app",
    "format_links",
    "parse_links",
    "parse_network",
    "sign",
]
