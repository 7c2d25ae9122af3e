"""Import structure (issue 15.5): a command loads what it uses, not what the others use."""

from __future__ import annotations

import subprocess
import sys


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", "import sys\n" + code + "\nprint('\\n'.join(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return set(out.stdout.split())


def test_the_command_group_imports_no_command() -> None:
    loaded = _modules_after("import resourcesync.cli")
    commands = {m for m in loaded if m.startswith("resourcesync.cli.")}
    assert commands == set(), commands
    assert not {"httpx", "lxml.etree", "resourcesync.sitemap.read"} & loaded


def test_the_sitemap_package_loads_its_modules_on_use() -> None:
    loaded = _modules_after("from resourcesync.sitemap import write_document")
    assert "resourcesync.sitemap.write" in loaded
    assert not {"resourcesync.sitemap.rules", "resourcesync.sitemap.read", "lxml.etree"} & loaded


def test_publishing_loads_no_http_client_nor_reader() -> None:
    loaded = _modules_after("import resourcesync.source.publish, resourcesync.cli.publish")
    assert not {"httpx", "lxml.etree", "resourcesync.sitemap.rules"} & loaded, loaded & {
        "httpx",
        "lxml.etree",
        "resourcesync.sitemap.rules",
    }


def test_every_command_is_listed_and_loads() -> None:
    from click.testing import CliRunner

    from resourcesync.cli import COMMANDS, main

    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    for name in COMMANDS:
        assert name in result.output
        assert CliRunner().invoke(main, [name, "--help"]).exit_code == 0, name


def test_the_help_lists_every_command_without_importing_one() -> None:
    """`resourcesync --help` imported every command to ask it for its line (half a second,
    the sync engine, aiohttp and httpx included): the lines are written in `COMMANDS`, each
    within a line of the help, and a command says the same once it is loaded."""
    import click
    from click.testing import CliRunner

    from resourcesync.cli import COMMANDS, main

    code = (
        "import sys\nfrom resourcesync.cli import main\n"
        "try:\n    main(['--help'], prog_name='resourcesync')\n"
        "except SystemExit as e:\n    assert e.code == 0, e.code\n"
        "print('--modules--', *sorted(sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    shown, _, loaded = out.partition("Commands:")[2].partition("--modules--")
    assert not {m for m in loaded.split() if m.startswith("resourcesync.cli.")}
    assert not {"httpx", "aiohttp", "lxml.etree"} & set(loaded.split())
    lines = [line.split(None, 1) for line in shown.splitlines() if line.startswith("  ")]
    assert [name for name, _ in lines] == list(COMMANDS)
    assert [text for _, text in lines] == [where[2] for where in COMMANDS.values()]
    for name, where in COMMANDS.items():
        command = main.get_command(click.Context(main), name)
        assert command is not None and command.get_short_help_str(100) == where[2], name
        assert len(where[2]) <= 70, name
        shown = CliRunner().invoke(main, [name, "--help"], terminal_width=80)
        assert shown.exit_code == 0, name
        # A group's commands, each on one line of an 80-column help, none cut short.
        listed = shown.output.partition("Commands:")[2].splitlines()
        assert not [line for line in listed if line.rstrip().endswith("...")], (name, listed)
        if isinstance(command, click.Group):
            assert len([ln for ln in listed if ln.strip()]) == len(command.commands), listed


def test_the_command_line_keeps_httpx_own_command_line_out() -> None:
    # httpx imports its command line (click, rich, pygments) when they are installed; our
    # command never runs it: a quarter of httpx's import time saved on every command that
    # reads a URL, and httpx itself works as before.
    loaded = _modules_after(
        "import resourcesync.cli, httpx\nassert httpx.Client and httpx.AsyncClient\n"
        "assert sys.modules['httpx._main'] is None"
    )
    assert "httpx" in loaded
    assert not {"rich", "pygments", "click_repl"} & loaded


def test_publish_in_a_pipe_loads_no_progress_display(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # A cron run (stderr not a terminal) shows no progress, so it does not import rich.
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "a.txt").write_text("a")
    code = (
        "from resourcesync.cli import main\n"
        f"main(['publish', {str(tmp_path / 'files')!r}, '--base-url', 'http://example.org/',"
        f" '--out', {str(tmp_path / 'out')!r}], standalone_mode=False)"
    )
    loaded = _modules_after(code)
    assert "resourcesync.source.publish" in loaded
    assert (tmp_path / "out" / ".well-known" / "resourcesync").exists()
    assert not {"rich", "rich.console"} & loaded


def test_validating_a_file_loads_no_digests_packages_nor_json(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # `validate` reads hash tokens but computes none, checks a dump's packages (ZIP, temporary
    # files) only with --packages, and writes JSON only with --json (issue 15.5).
    doc = tmp_path / "list.xml"
    doc.write_text(
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9" '
        'xmlns:rs="http://www.openarchives.org/rs/terms/">'
        '<rs:ln rel="up" href="http://example.org/capabilitylist.xml"/>'
        '<rs:md capability="resourcelist" at="2026-01-01T00:00:00Z"/>'
        "<url><loc>http://example.org/a</loc>"
        '<rs:md hash="md5:0cc175b9c0f1b6a831c399e269772661" length="1"/></url></urlset>'
    )
    quiet = (
        "from resourcesync.cli import main\n"
        f"try:\n    main(['validate', {str(doc)!r}], standalone_mode=False)\n"
        "except SystemExit as exc:\n    assert not exc.code, exc.code\n"
    )
    loaded = _modules_after(quiet)
    assert "resourcesync.sitemap.rules.validate" in loaded
    heavy = {
        "hashlib",
        "_hashlib",
        "zipfile",
        "tempfile",
        "json",
        "resourcesync.sitemap.rules.packages",
    }
    assert not heavy & loaded, heavy & loaded
    # …and what they are needed for still loads them.
    as_json = quiet.replace("'validate', ", "'validate', '--json', ")
    assert "json" in _modules_after(as_json)


def test_the_program_loads_no_tls_for_commands_without_http(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # The program's entry prepares aiohttp's import for `sync`; `publish` and `validate` of a
    # file make no request and must not pay for `ssl` (25 ms of start-up here) because of it.
    files = tmp_path / "files"
    files.mkdir()
    (files / "a.txt").write_text("a")
    out = tmp_path / "out"
    publish = ["publish", str(files), "--base-url", "http://example.org/", "--out", str(out)]
    rl = out / "resourcesync" / "resourcelist.xml"
    for argv in (publish, ["validate", str(rl)]):
        code = (
            "from resourcesync import _program\n"
            f"sys.argv = ['resourcesync', *{argv!r}]\n"
            "try:\n    _program.main()\n"
            "except SystemExit as exc:\n    assert not exc.code, exc.code\n"
        )
        loaded = _modules_after(code)
        assert "resourcesync._imports" in loaded
        assert not {"ssl", "_ssl"} & loaded, argv[0]
    assert rl.exists()
    # `sync` still imports aiohttp (and so ssl) through the same entry.
    code = (
        "from resourcesync import _imports\n_imports.enable()\n"
        "with _imports.importing_aiohttp():\n    import aiohttp\n"
        "assert aiohttp.ClientSession\n"
    )
    assert "ssl" in _modules_after(code)
