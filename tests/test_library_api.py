"""The library's doors (issue 14.15): everything public is importable from `resourcesync`
(on first use, so importing it costs nothing), and paths may be `str` or `Path` everywhere."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import resourcesync as rs

ROOT = Path(__file__).resolve().parent.parent
CHANGELIST = "examples/site/dataset1/changelist.xml"


def test_every_public_name_resolves() -> None:
    for name in rs.__all__:
        assert getattr(rs, name) is not None, name
    assert rs.sync.__module__ == "resourcesync.destination.sync"


def test_importing_the_package_loads_nothing_else() -> None:
    code = (
        "import sys, resourcesync; "
        "print(sorted(m for m in sys.modules if m.startswith('resourcesync')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['resourcesync', 'resourcesync.lazy']"


def test_validate_takes_one_document_by_name() -> None:
    one = rs.validate(str(ROOT / CHANGELIST))
    assert len(one.documents) == 1 and not one.unreadable  # not one per character
    assert len(rs.validate(ROOT / CHANGELIST).documents) == 1
    both = rs.validate([ROOT / CHANGELIST, str(ROOT / CHANGELIST)])
    assert len(both.documents) == 2


def test_configs_take_str_paths_and_lists(tmp_path: Path) -> None:
    s = rs.SetConfig("set1", str(tmp_path), "http://127.0.0.1:9/", capabilities=["resourcelist"])
    assert isinstance(s.dir, Path) and s.capabilities == ("resourcelist",)
    config = rs.PublishConfig(out=str(tmp_path / "out"), sets=[s], state_dir=str(tmp_path / "st"))
    assert isinstance(config.out, Path) and isinstance(config.state_dir, Path)
    options = rs.SyncOptions(mappings=[("http://a.org/", "dir")], exclude=["*.log"])
    assert options.mappings == [("http://a.org/", Path("dir"))] and options.exclude == ("*.log",)
    (tmp_path / "f.txt").write_bytes(b"x")
    result = rs.publish(config)
    assert result.sets[0].scan.created == 1
