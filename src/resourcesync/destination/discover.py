"""Finding a Source's capabilities from whatever the user gives: a site root, a Source
Description, a Capability List, a Resource List or Change List (URL or local file).

Discovery follows core §8 in order: `/.well-known/resourcesync` of the site, then the
`Sitemap:` lines of `robots.txt`, then the `Link: <…>; rel="resourcesync"` header and the
`<link rel="resourcesync">` of the page; from a list, its `up` link leads to its Capability
List. Every document is read with the one reader; every request goes through `http`.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

from ..errors import FetchError, ReadError
from ..http import Unreachable
from ..iri import url_problem
from ..model import Capability, Document
from ..sitemap import open_document
from ..sitemap.read import HTML_PAGE, is_url

__all__ = ["SetInfo", "SourceInfo", "discover", "site_root"]

_MAX_PAGE = 2 * 1024 * 1024
#: The `Sitemap:` lines of robots.txt read, at most (each is a request: a site's plain
#: Sitemaps may be many).
MAX_ROBOTS_SITEMAPS = 100


def site_root(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/", "", ""))


@dataclass
class SetInfo:
    """One resource set as its Capability List describes it."""

    name: str
    capabilitylist: str | None
    #: capability → URL of its document (resourcelist, changelist, dumps, archives, …)
    documents: dict[str, str] = field(default_factory=dict)
    #: `rel="hub"` of a change-notification channel, when offered: topic → hub
    channels: dict[str, str] = field(default_factory=dict)
    #: capability → the further documents the Capability List lists for it. It should list
    #: one (core §9.2); several are read as the parts of one index, `documents`' the first.
    also: dict[str, list[str]] = field(default_factory=dict)
    #: What discovery found wrong on the way to this set, said by every run (`warnings`).
    notes: list[str] = field(default_factory=list)

    def url(self, capability: str) -> str | None:
        return self.documents.get(capability)

    def more(self, capability: str) -> list[str]:
        """The documents listed for `capability` after `url(capability)` (see `also`)."""
        return self.also.get(capability, [])

    def warnings(self) -> list[str]:
        """What a run says of the Capability List every time: a capability listed more than
        once. Taking the first only would leave what the others list out of the copy while
        every run said ok; the validator calls the list wrong (core-9.2-capability-repeated).
        And what discovery noted (`notes`)."""
        return self.notes + [
            f"warning: the Capability List lists {len(more) + 1} documents with capability "
            f"{cap!r} (core §9.2: one, an index when the lists are many): all are read, as "
            "the parts of one index"
            for cap, more in self.also.items()
        ]


@dataclass
class SourceInfo:
    """What discovery found: the sets, and the base URL that local paths are relative to."""

    given: str
    base: str
    description: str | None
    sets: list[SetInfo]
    how: str


class _LinkFinder(HTMLParser):
    """`<link rel="resourcesync" href="…">` in a page (the stdlib parser: no network, no
    entities beyond HTML's own, nothing executed)."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag != "link":
            return
        a = dict(attrs)
        rels = (a.get("rel") or "").lower().split()
        if "resourcesync" in rels and a.get("href"):
            self.found.append(a["href"] or "")


def _read_doc(target: str, client: Any) -> tuple[Document, list[Any]]:
    with open_document(target, client=client) as reader:
        doc = reader.document
        entries = list(reader) if doc.capability in ("description", "capabilitylist") else []
    return doc, entries


def _set_name(capabilitylist: str) -> str:
    path = urlsplit(capabilitylist).path
    parent = posixpath.basename(posixpath.dirname(path))
    return parent or posixpath.basename(path) or capabilitylist


def _from_capabilitylist(url: str, entries: list[Any]) -> SetInfo:
    info = SetInfo(name=_set_name(url), capabilitylist=url)
    for e in entries:
        if e.capability == Capability.CHANGE_NOTIFICATION:
            hub = e.link("hub")
            if hub is not None:
                info.channels[e.loc] = hub.href
        elif e.capability:
            first = info.documents.setdefault(e.capability, e.loc)
            more = info.also.setdefault(e.capability, []) if first != e.loc else None
            if more is not None and e.loc not in more:
                more.append(e.loc)
    info.also = {cap: more for cap, more in info.also.items() if more}
    return info


def _fetch(client: Any, url: str) -> Any:
    from ..http import open_stream

    with open_stream(url, client=client) as response:
        body = b""
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) > _MAX_PAGE:
                break
        return response, body


def _try_document(
    target: str, client: Any, why: list[ReadError] | None = None
) -> tuple[Document, list[Any]] | None:
    """The document at `target`, or None; why not is appended to `why`. A host that cannot
    be reached ends discovery at once (the next places to look are on the same host)."""
    try:
        return _read_doc(target, client)
    except Unreachable:
        raise
    except ReadError as exc:
        if why is not None:
            why.append(exc)
        return None


def _absent(exc: ReadError) -> bool:
    """Whether `exc` says there is no ResourceSync document at that address (nothing, or a
    page such as a site's "not found" page served with 200) rather than one that could not
    be used."""
    if isinstance(exc, FetchError):
        return exc.message.startswith(("HTTP 404", "HTTP 410"))
    return exc.message.startswith(("not a sitemap document", HTML_PAGE))


def discover(source: str, *, client: Any = None, choose: str | None = None) -> SourceInfo:
    """Find the sets of a Source from SOURCE (see the module docstring). `choose` picks one
    set by name (the folder of its Capability List) or by its Capability List URL. A host
    that cannot be reached is said plainly, at its first request (issue 14.6)."""
    try:
        return _discover(source, client, choose)
    except Unreachable as exc:
        parts = urlsplit(exc.source or source)
        given = urlsplit(source)
        led = ""
        if is_url(source) and (parts.scheme, parts.netloc) != (given.scheme, given.netloc):
            led = (
                f"; the Source at {given.scheme}://{given.netloc} leads there: was it published "
                "with another --base-url than where it is served?"
            )
        raise ReadError(
            f"cannot connect to {parts.netloc}: {_plain(exc.message)}{led}", source=source
        ) from None


def _plain(message: str) -> str:
    """A connection failure as a person would say it."""
    low = message.lower()
    if "refused" in low:
        return "connection refused (is the Source running, on that port?)"
    if "name or service not known" in low or "nodename nor servname" in low or "getaddrinfo" in low:
        return "no such host (a typo in the address?)"
    if "timed out" in low or "timeout" in low:
        return "the connection timed out"
    if "ssl" in low or "certificate" in low:
        return f"TLS failed: {message.removeprefix('request failed: ')}"
    return message.removeprefix("request failed: ")


def _discover(source: str, client: Any, choose: str | None) -> SourceInfo:
    local = not is_url(source)
    scheme = source.partition("://")[0] if local else ""
    if local and "://" in source and scheme:
        raise ReadError(
            f"unsupported URL scheme {scheme + ':'!r}: a Source is an http:// or https:// URL, "
            "or a document's file path",
            source=source,
        )
    if not local and (bad := url_problem(source, use="fetched")) is not None:
        # Said here, not by the first request (no host: httpx's "missing protocol").
        raise ReadError(f"not a valid URL: it {bad}", source=source)
    base = source if (not local and urlsplit(source).path in ("", "/")) else ""
    # A site root is a page, not a document: discovery starts at once (well-known first).
    given: list[ReadError] = []
    got = None if base else _try_document(source, client, given)
    more: list[tuple[str, Document, list[Any]]] = []
    unread: list[str] = []
    if got is not None:
        url, (doc, entries), how = source, got, "given document"
    elif local:
        raise ReadError("cannot read this as a ResourceSync document", source=source)
    else:
        # Not a document: a site (or a page of it). Core §8.2 discovery, in order.
        base = base or (source if source.endswith("/") else site_root(source))
        why: list[ReadError] = []
        found, how = _discover_site(source, client, why, unread)
        refused = [e for e in given if isinstance(e, FetchError)]
        if found is not None and refused and not source.endswith("/"):
            # A page is a way into its site; an address that answered an HTTP error is no page
            # (a mistyped list's URL): the site's documents are used, and that is said. (One
            # ending in "/" is the part of the site under it, whatever it answers.)
            unread.insert(
                0,
                f"{source} answered {refused[0].message}: the Source found from its site "
                f"({how}) is synced instead",
            )
        if found is None:
            unusable = [e for e in why if not _absent(e)]
            if unusable:
                # Something is there but could not be used: say what and why (issue 17.16).
                first = unusable[0]
                where = first.source if first.source != source else ""
                if first.line:
                    where = f"{where}:{first.line}" if where else f"line {first.line}"
                raise ReadError(
                    f"no usable ResourceSync document: {where}: {first.message}"
                    if where
                    else f"no usable ResourceSync document: {first.message}",
                    source=source,
                )
            raise ReadError(
                "no ResourceSync here: no /.well-known/resourcesync, no Sitemap line in "
                'robots.txt, no rel="resourcesync" link',
                source=source,
            )
        (url, doc, entries), *more = found
    if not base and is_url(url):
        base = site_root(url)
    if not base and local:
        # A document on disk (issue 14.10): its site is where its `up` link or, without
        # one, its first entry points, so that its resources land under DEST as they would
        # from the site's URL.
        base = _site_of(url, doc)
    sets, description = _sets_from(url, doc, entries, client)
    if sets:
        sets[0].notes.extend(f"warning: {note}" for note in unread)
    for other in more:
        # robots.txt names one list a set (core §6.3.4): every set it names is the Source's.
        known = {s.capabilitylist or s.name for s in sets}
        sets += [
            s for s in _sets_from(*other, client)[0] if (s.capabilitylist or s.name) not in known
        ]
    if choose is not None:
        chosen = [s for s in sets if choose in (s.name, s.capabilitylist)]
        if not chosen:
            names = ", ".join(s.name for s in sets)
            raise ReadError(f"no resource set {choose!r} (the Source has: {names})", source=url)
        sets = chosen
    return SourceInfo(given=source, base=base, description=description, sets=sets, how=how)


def _discover_site(
    source: str, client: Any, why: list[ReadError], unread: list[str]
) -> tuple[list[tuple[str, Document, list[Any]]] | None, str]:
    """The ResourceSync documents a site offers, by the first way of core §6.3 that finds
    any: the well-known URI, robots.txt (every ResourceSync document its `Sitemap:` lines
    name: a Source with several sets names one Resource List for each, §6.3.4), a `Link`
    header, a `<link>` of the page. `why` hears why each place tried was not used; `unread`,
    what could not be read beside the documents found (the Source Description, robots.txt's
    lines), said by the runs that sync what was found."""
    root = site_root(source)
    well_known = root + ".well-known/resourcesync"
    got = _try_document(well_known, client, why)
    if got is not None:
        return [(well_known, *got)], "well-known URI"
    if why and not _absent(why[-1]):
        # There, but not readable now (a 503): the sets found another way may be fewer than
        # its Source Description names (core §6.3.2), and a run that syncs them says so.
        unread.append(
            f"the Source Description at {well_known} could not be read ({why[-1].message}): "
            "a set only it names is not synced"
        )
    try:
        _, robots = _fetch(client, root + "robots.txt")
        listed: list[tuple[str, Document, list[Any]]] = []
        tried: list[ReadError] = []
        targets: list[str] = []
        for line in robots.decode("utf-8-sig", "replace").splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip().lower() == "sitemap":
                target = urljoin(root, value.strip())
                if target not in targets:
                    targets.append(target)
        for target in targets[:MAX_ROBOTS_SITEMAPS]:
            got = _try_document(target, client, tried)
            # robots.txt lists plain Sitemaps too (spec Example 11 puts the Resource List
            # among them): only ResourceSync documents are taken (issue 10.9).
            if got is not None and got[0].capability is not None:
                listed.append((target, *got))
        why.extend(tried)
        if listed:
            unread.extend(
                f"robots.txt names {exc.source}, which could not be read ({exc.message}): a set "
                "of resources it may list is not synced"
                for exc in tried
                if not _absent(exc)
            )
            if len(targets) > MAX_ROBOTS_SITEMAPS:
                unread.append(
                    f"robots.txt names {len(targets):,} Sitemaps, of which the first "
                    f"{MAX_ROBOTS_SITEMAPS} were read: a set of resources the others may list "
                    "is not synced"
                )
            return listed, "robots.txt"
    except ReadError:
        pass
    try:
        response, page = _fetch(client, source)
    except ReadError:
        return None, ""
    for link in response.headers.get_list("link"):
        for target in _link_header(link):
            got = _try_document(urljoin(source, target), client, why)
            if got is not None:
                return [(urljoin(source, target), *got)], "Link header"
    finder = _LinkFinder()
    finder.feed(page.decode("utf-8", "replace"))
    for href in finder.found:
        target = urljoin(source, href)
        got = _try_document(target, client, why)
        if got is not None:
            return [(target, *got)], "HTML link"
    return None, ""


def _site_of(path: str, doc: Document) -> str:
    up = doc.link("up")
    if up is not None and is_url(up.href):
        return site_root(up.href)
    try:
        with open_document(path) as reader:
            for entry in reader:
                return site_root(entry.loc) if is_url(entry.loc) else ""
    except ReadError:
        return ""
    return ""


def _elsewhere(here: str, there: str) -> str:
    """When a document leads to another host than its own, said plainly: the usual cause is a
    Source published with another --base-url than where it is served (issue 14.2)."""
    a, b = urlsplit(here), urlsplit(there)
    if not (is_url(here) and is_url(there)) or (a.scheme, a.netloc) == (b.scheme, b.netloc):
        return ""
    return (
        f" (on {b.scheme}://{b.netloc}, not on {a.scheme}://{a.netloc} where it is listed: "
        "was the Source published with another --base-url than where it is served?)"
    )


def _link_header(value: str) -> list[str]:
    """The targets of `rel="resourcesync"` links in one Link header value."""
    out = []
    for part in value.split(","):
        target, _, params = part.partition(";")
        target = target.strip()
        if not (target.startswith("<") and target.endswith(">")):
            continue
        for param in params.split(";"):
            k, _, v = param.partition("=")
            if k.strip().lower() == "rel" and "resourcesync" in v.strip().strip('"').split():
                out.append(target[1:-1])
    return out


def _sets_from(
    url: str, doc: Document, entries: list[Any], client: Any
) -> tuple[list[SetInfo], str | None]:
    cap = doc.capability
    if cap == Capability.DESCRIPTION and doc.index:
        # A Source Description Index (core §8): its parts are Source Descriptions, whose
        # entries are the Capability Lists (issue 10.9).
        parts, entries = entries, []
        for part in parts:
            failed: list[ReadError] = []
            got = _try_document(urljoin(url, part.loc) if is_url(url) else part.loc, client, failed)
            if got is None or got[0].capability != Capability.DESCRIPTION or got[0].index:
                reason = failed[0].message if failed else "not a Source Description"
                raise ReadError(
                    f"the Source Description {part.loc} cannot be used: {reason}", source=url
                )
            entries.extend(got[1])
    if cap == Capability.DESCRIPTION:
        sets = []
        listed: set[str] = set()
        for e in entries:
            if e.loc in listed:
                continue  # listed twice (or by two parts of an index): one set
            listed.add(e.loc)
            why: list[ReadError] = []
            got = _try_document(e.loc, client, why)
            if got is None:
                reason = f"{why[0].message}" if why else "unreadable"
                if why and why[0].line:
                    reason = f"line {why[0].line}: {reason}"
                raise ReadError(
                    f"the Capability List {e.loc}{_elsewhere(url, e.loc)} cannot be read: {reason}",
                    source=url,
                )
            if got[0].capability != Capability.CAPABILITYLIST:
                raise ReadError(
                    f"{e.loc} is listed as a Capability List but is a "
                    f"{got[0].capability or 'document without capability'}",
                    source=url,
                )
            sets.append(_from_capabilitylist(e.loc, got[1]))
        return sets, url
    if cap == Capability.CAPABILITYLIST:
        up = doc.link("up")
        return [_from_capabilitylist(url, entries)], up.href if up else None
    # A list given directly: its Capability List when reachable, else the list alone.
    up = doc.link("up")
    if up is not None:
        cl_url = urljoin(url, up.href) if is_url(url) else up.href
        got = _try_document(cl_url, client)
        if got is not None and got[0].capability == Capability.CAPABILITYLIST:
            info = _from_capabilitylist(cl_url, got[1])
            if cap is not None:
                info.documents[cap] = url  # the document the user named wins (alone)
                info.also.pop(cap, None)
            return [info], None
    info = SetInfo(name=_set_name(url), capabilitylist=None)
    if cap is not None:
        info.documents[cap] = url
    return [info], None
