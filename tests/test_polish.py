"""The small things a user meets every day (issue 14.18): an example in every command's help,
commands in the order of the work, NO_COLOR honoured, one clear line for a URL scheme we do
not read and for a port already in use, follower events as readable lines."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import click
import pytest

from resourcesync.cli import COMMANDS, main
from resourcesync.cli.sync import _event_line
from tests.destination.helpers import cli, published_source
from tests.test_progress import _in_a_terminal


def _commands() -> list[tuple[str, click.Command]]:
    ctx = click.Context(main)
    out: list[tuple[str, click.Command]] = []
    for name in COMMANDS:
        command = main.get_command(ctx, name)
        assert command is not None
        out.append((name, command))
        if isinstance(command, click.Group):
            out += [(f"{name} {n}", c) for n, c in command.commands.items()]
    return out


@pytest.mark.parametrize(("name", "command"), _commands(), ids=lambda x: str(x))
def test_every_command_shows_an_example_and_describes_every_option(
    name: str, command: click.Command
) -> None:
    result = cli(*name.split(), "--help")
    assert result.exit_code == 0
    assert "Example:\n    resourcesync " in result.stdout, name
    for param in command.params:
        if isinstance(param, click.Option) and not param.hidden:
            assert param.help, f"{name} {param.opts[0]} has no help"


def test_commands_are_listed_in_the_order_of_the_work() -> None:
    listed = [
        line.split()[0]
        for line in cli("--help").stdout.split("Commands:")[1].splitlines()
        if line.strip()
    ]
    assert listed[:3] == ["publish", "serve", "source"]
    assert listed.index("sync") < listed.index("audit") < listed.index("ls") < listed.index("fleet")


def test_no_color_is_honoured_on_a_terminal(tmp_path: Path) -> None:
    with published_source(tmp_path, {f"f{i}.txt": b"x" for i in range(20)}, delay=0.02) as src:
        argv = [sys.executable, "-m", "resourcesync", "sync", src.root, str(tmp_path / "d")]
        code, shown = _in_a_terminal(argv, NO_COLOR="1")
    assert code == 0, shown
    # Cursor movement is fine; no colours (SGR 30–37, 38;…, 90–97).
    for sgr in ("\x1b[3", "\x1b[9", "\x1b[1;3", "\x1b[2;3"):
        assert sgr not in shown, repr(shown[:400])


@pytest.mark.parametrize(
    "command",
    [
        ["sync", "htp://example.org/", "dest"],
        ["cat", "htp://example.org/x.xml"],
        ["validate", "ftp://example.org/x.xml"],
    ],
)
def test_a_url_scheme_we_do_not_read_is_one_clear_line(command: list[str], tmp_path: Path) -> None:
    result = cli(*[str(tmp_path / c) if c == "dest" else c for c in command])
    assert result.exit_code == 2
    assert "unsupported URL scheme" in result.stderr and "no such file" not in result.stderr
    assert result.stderr.strip().count("\n") <= 1  # validate adds its one-line count


def test_a_port_in_use_is_one_clear_line(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        for argv in (["serve", str(tmp_path / "out")], ["hub", "--db", str(tmp_path / "h.db")]):
            result = subprocess.run(
                [sys.executable, "-m", "resourcesync", *argv, "--port", port],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            assert result.returncode == 2, result.stderr
            last = result.stderr.strip().splitlines()[-1]
            want = f"cannot listen on 127.0.0.1:{port}: the port is in use (choose another --port)"
            assert last == f"resourcesync: {want}"
            assert "Traceback" not in result.stderr and "Errno" not in result.stderr


def test_follower_events_read_as_sentences() -> None:
    line = _event_line(
        "source-unavailable",
        {
            "source": "http://example.org/%E6%96%B0/",
            "reason": "connection refused",
            "retry_in": 4.0,
        },
    )
    date, rest = line.split(" ", 1)
    assert date.endswith("Z") and "T" in date
    assert rest == (
        "resourcesync: source unavailable: source http://example.org/新/, reason connection "
        "refused, retry in 4.0 s"
    )
