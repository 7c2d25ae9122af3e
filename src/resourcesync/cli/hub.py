"""`hub`: run the WebSub hub that relays Change Notifications from Sources to Destinations."""

from __future__ import annotations

import logging
import signal
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ._common import check_port, handle_errors

if TYPE_CHECKING:
    from ..hub.config import IPNetwork

_LEASE = click.IntRange(1, 10 * 365 * 86400)


def _split_allow(values: tuple[str, ...]) -> tuple[tuple[IPNetwork, ...], frozenset[str]]:
    from ..hub import parse_network

    networks: list[IPNetwork] = []
    hosts: set[str] = set()
    for value in values:
        for item in value.split(","):
            item = item.strip()
            if not item:
                continue
            net = parse_network(item)
            if net is not None:
                networks.append(net)
            else:
                hosts.add(item.lower())
    return tuple(networks), frozenset(hosts)


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=8080,
    show_default=True,
    help="Port to listen on (0: any free one).",
)
@click.option(
    "--db",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("hub.sqlite"),
    show_default=True,
    help="SQLite file for subscriptions and pending deliveries (created when missing).",
)
@click.option(
    "--public-url",
    metavar="URL",
    help='The hub URI for Link: <…>; rel="hub" in deliveries (default: what the Source sent).',
)
@click.option(
    "--path", "url_path", default="/", show_default=True, help="URL path the hub answers at."
)
@click.option(
    "--token",
    envvar="RESOURCESYNC_HUB_TOKEN",
    help="Publishers must send Authorization: Bearer TOKEN (env RESOURCESYNC_HUB_TOKEN).",
)
@click.option(
    "--topic",
    "topics",
    multiple=True,
    metavar="URI",
    help="Relay only this topic (repeatable; a trailing * makes a prefix). Default: any topic.",
)
@click.option(
    "--check-topic",
    is_flag=True,
    help='HEAD the topic URI before accepting a notification; it must name itself (rel="self") '
    'and a hub (rel="hub").',
)
@click.option(
    "--allow",
    multiple=True,
    metavar="NET|HOST",
    help="Only send requests to these networks (CIDR) or host names (repeatable, comma lists).",
)
@click.option(
    "--allow-loopback", is_flag=True, help="Allow callbacks on loopback addresses (127.0.0.1)."
)
@click.option(
    "--allow-private",
    is_flag=True,
    help="Allow callbacks on private, link-local and other non-public addresses.",
)
@click.option(
    "--lease-min",
    type=_LEASE,
    default=300,
    show_default=True,
    metavar="SECONDS",
    help="The shortest lease granted (a shorter one asked is raised to it).",
)
@click.option(
    "--lease-max",
    type=_LEASE,
    default=2_678_400,
    show_default=True,
    metavar="SECONDS",
    help="The longest lease granted (a longer one asked is cut to it).",
)
@click.option(
    "--lease-default",
    type=_LEASE,
    default=864_000,
    show_default=True,
    metavar="SECONDS",
    help="The lease granted when a subscriber asks for none.",
)
@click.option(
    "--max-notification-bytes",
    type=click.IntRange(1),
    default=1 << 20,
    show_default=True,
    help="The largest notification body a publisher may post.",
)
@click.option(
    "--max-form-bytes",
    type=click.IntRange(1),
    default=16 << 10,
    show_default=True,
    help="The largest subscription request (form) body.",
)
@click.option(
    "--timeout",
    type=click.FloatRange(0.1),
    default=10.0,
    show_default=True,
    help="Seconds a verification or delivery may take.",
)
@click.option(
    "--retry-backoff",
    type=click.FloatRange(0.01),
    default=1.0,
    show_default=True,
    help="Seconds before the first retry of a failed delivery (doubling each time).",
)
@click.option(
    "--retry-max",
    type=click.FloatRange(0.01),
    default=300.0,
    show_default=True,
    help="Longest wait between two delivery attempts.",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1),
    default=256,
    show_default=True,
    help="Deliveries in flight at once.",
)
@click.option(
    "--max-pending",
    type=click.IntRange(0),
    default=1000,
    show_default=True,
    help="Notifications kept for one subscriber that does not take them (the oldest are "
    "dropped past this and counted as a gap; 0: no cap).",
)
@click.option(
    "--max-topic-notifications",
    type=click.IntRange(0),
    default=1000,
    show_default=True,
    help="Notifications kept per topic (0: no cap).",
)
@click.option(
    "--max-topic-bytes",
    type=click.IntRange(0),
    default=64 << 20,
    show_default=True,
    help="Bytes of notifications kept per topic (0: no cap).",
)
@click.option(
    "--publish-rate",
    type=click.FloatRange(0),
    default=10.0,
    show_default=True,
    help="Notifications accepted per topic per second on average (0: no limit); more get 429.",
)
@click.option(
    "--publish-burst",
    type=click.IntRange(1),
    default=100,
    show_default=True,
    help="Notifications accepted per topic at once before --publish-rate applies.",
)
@click.option(
    "--log-level",
    type=click.Choice(["critical", "error", "warning", "info", "debug"]),
    default="info",
    show_default=True,
    help="What the hub logs (info: each subscription and delivery).",
)
@handle_errors
def hub(
    host: str,
    port: int,
    db: Path,
    public_url: str | None,
    url_path: str,
    token: str | None,
    topics: tuple[str, ...],
    check_topic: bool,
    allow: tuple[str, ...],
    allow_loopback: bool,
    allow_private: bool,
    lease_min: int,
    lease_max: int,
    lease_default: int,
    max_notification_bytes: int,
    max_form_bytes: int,
    timeout: float,
    retry_backoff: float,
    retry_max: float,
    concurrency: int,
    max_pending: int,
    max_topic_notifications: int,
    max_topic_bytes: int,
    publish_rate: float,
    publish_burst: int,
    log_level: str,
) -> None:
    """Run a WebSub hub for ResourceSync Change Notification.

    Destinations subscribe with a form POST (hub.mode, hub.topic, hub.callback,
    hub.lease_seconds, hub.secret); the hub verifies each with the callback. Sources POST
    notification payloads (application/xml, Link: <topic>; rel="self"). Every notification is
    stored, then delivered to each subscriber in order, signed with its secret (X-Hub-Signature:
    sha256=…), and retried with backoff until the lease ends. Restarting the hub loses nothing.

    Callbacks on loopback and private addresses are refused unless allowed.

    \b
    Example:
      resourcesync hub --port 8080 --db hub.sqlite --token SECRET
    """
    from ..http import RetryPolicy
    from ..hub import AddressPolicy, HubConfig, create_app

    if not lease_min <= lease_default <= lease_max:
        raise click.BadParameter("need --lease-min <= --lease-default <= --lease-max")
    networks, hosts = _split_allow(allow)
    config = HubConfig(
        public_url=public_url,
        token=token or None,
        topics=topics,
        check_topic=check_topic,
        policy=AddressPolicy(
            allow_loopback=allow_loopback,
            allow_private=allow_private,
            networks=networks,
            hosts=hosts,
        ),
        lease_min=lease_min,
        lease_max=lease_max,
        lease_default=lease_default,
        max_notification_bytes=max_notification_bytes,
        max_form_bytes=max_form_bytes,
        timeout=timeout,
        retry=RetryPolicy(retries=0, backoff=retry_backoff, max_backoff=retry_max),
        concurrency=concurrency,
        max_pending_per_subscription=max_pending,
        max_topic_notifications=max_topic_notifications,
        max_topic_bytes=max_topic_bytes,
        publish_rate=publish_rate,
        publish_burst=publish_burst,
    )
    check_port(host, port)
    app = create_app(config, db, path=url_path)
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(message)s")
    import asyncio

    import uvicorn

    uvicorn_config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        lifespan="on",
        server_header=False,
        # Bodies are capped by the hub; this bounds what uvicorn itself buffers per connection.
        limit_concurrency=4 * concurrency + 64,
        timeout_graceful_shutdown=10,
    )
    shown = f"[{host}]" if ":" in host else host
    click.echo(f"resourcesync: hub at http://{shown}:{port}{url_path} (state in {db})", err=True)

    def stopped(signum: int, frame: object) -> None:
        # uvicorn shuts down gracefully on SIGTERM, then raises the signal again: end here.
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, stopped)
    try:
        asyncio.run(uvicorn.Server(uvicorn_config).serve())
    except KeyboardInterrupt:
        pass
    finally:
        click.echo("resourcesync: hub stopped", err=True)
