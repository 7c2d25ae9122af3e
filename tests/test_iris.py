"""People read IRIs, programs URIs (issue 14.16): `cat` on a terminal, `audit`'s text and the
landing page show `新着`, not `%E6%96%B0%E7%9D%80`; a pipe, `--json` and the documents keep the
URIs as written. On a terminal `cat` and `lirs cat` print a header row (issue 14.18)."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx

from resourcesync.source.config import PublishConfig, SetConfig
from resourcesync.source.publish import publish
from resourcesync.source.server import create_app
from tests.destination.helpers import cli
from tests.servers import serve
from tests.test_progress import _in_a_terminal

ENCODED = "%E6%96%B0%E7%9D%80"  # 新着


def _published(tmp_path: Path) -> Path:
    data, out = tmp_path / "data", tmp_path / "out"
    (data / "新着").mkdir(parents=True)
    (data / "新着" / "お知らせ.txt").write_bytes("こんにちは".encode())
    publish(PublishConfig(out=out, sets=[SetConfig("rs", data, "http://127.0.0.1:9/files/")]))
    return out


def test_cat_shows_iris_on_a_terminal_and_uris_in_a_pipe(tmp_path: Path) -> None:
    rl = _published(tmp_path) / "rs" / "resourcelist.xml"
    argv = [sys.executable, "-m", "resourcesync", "cat", str(rl)]
    code, shown = _in_a_terminal(argv)
    assert code == 0, shown
    assert "http://127.0.0.1:9/files/新着/お知らせ.txt" in shown and ENCODED not in shown
    assert "TIME" in shown and "URI" in shown  # the header row
    piped = cli("cat", rl).stdout
    assert f"http://127.0.0.1:9/files/{ENCODED}/" in piped and "新着" not in piped
    assert not piped.startswith("TIME")
    assert ENCODED in cli("cat", rl, "--json").stdout


def test_the_landing_page_shows_iris_and_links_uris(tmp_path: Path) -> None:
    out = _published(tmp_path)
    # A change, so that the page lists it among the recent ones.
    (tmp_path / "data" / "新着" / "二.txt").write_bytes(b"2")
    publish(
        PublishConfig(
            out=out, sets=[SetConfig("rs", tmp_path / "data", "http://127.0.0.1:9/files/")]
        )
    )
    with serve(create_app(out)) as base:
        page = httpx.get(base + "/rs/", timeout=10).text
    assert f'href="http://127.0.0.1:9/files/{ENCODED}/%E4%BA%8C.txt"' in page
    assert ">http://127.0.0.1:9/files/新着/二.txt<" in page


def test_lirs_cat_prints_a_header_on_a_terminal_only(tmp_path: Path) -> None:
    lirs = tmp_path / "sites.lirs"
    lirs.write_text(
        "LIRS,1163300000,1163300000,32400,3205,http://example.org/%E6%96%B0/,新着,x,"
        "http://example.org/,,\n",
        encoding="utf-8",
    )
    code, shown = _in_a_terminal([sys.executable, "-m", "resourcesync", "lirs", "cat", str(lirs)])
    assert code == 0, shown
    assert "LAST-MODIFIED" in shown and "http://example.org/新/" in shown
    piped = cli("lirs", "cat", lirs).stdout
    assert "LAST-MODIFIED" not in piped and "http://example.org/%E6%96%B0/" in piped
