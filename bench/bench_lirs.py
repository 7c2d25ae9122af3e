"""LIRS throughput: write and parse a generated 1,000,000-record file, in records per second.

    .venv/bin/python bench/bench_lirs.py [--records N]

Prints the figures (plain UTF-8, gzip, EUC-JP) and the raw limit of the machine for the same
bytes (splitting the file into lines), so the codec's cost reads as a ratio. No timed asserts.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from resourcesync.lirs.codec import Record, read_records, write_records
from resourcesync.lirs.merge import merge_records


def generate(n: int) -> Iterator[Record]:
    titles = ["ただよう記憶", "山田の日記, 改", "C:\\tools", "An English blog", "技術メモ"]
    for i in range(n):
        yield Record(
            1_000_000_000 + i * 7,
            1_000_100_000 + i * 3,
            32400,
            i % 100_000,
            f"http://site{i % 50_000}.example.jp/~user{i}/diary/",
            titles[i % len(titles)],
            f"作者{i % 1000}",
            "http://antenna.example.jp/",
            ("http://antenna.example.jp/check",) if i % 10 == 0 else (),
        )


def timed(label: str, n: int, fn: object) -> float:
    started = time.perf_counter()
    result = fn()  # type: ignore[operator]
    elapsed = time.perf_counter() - started
    rate = n / elapsed
    print(f"{label:38} {elapsed:7.2f} s  {rate:12,.0f} records/s")
    assert result == n, (label, result)
    return rate


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000)
    n = parser.parse_args().records
    print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as tmp:
        plain = Path(tmp) / "feed.lirs"
        gz = Path(tmp) / "feed.lirs.gz"
        euc = Path(tmp) / "feed.euc.lirs"
        timed("write UTF-8", n, lambda: write_records(plain, generate(n)).records)
        timed("write UTF-8 gzip", n, lambda: write_records(gz, generate(n)).records)
        timed("write EUC-JP", n, lambda: write_records(euc, generate(n), encoding="euc-jp").records)
        size = plain.stat().st_size
        print(f"  ({size / 1e6:.0f} MB plain, {gz.stat().st_size / 1e6:.0f} MB gzip)")
        raw = timed("raw: split lines (the limit)", n, lambda: len(plain.read_bytes().splitlines()))
        rate = timed("parse UTF-8", n, lambda: sum(1 for _ in read_records(plain)))
        timed("parse UTF-8 gzip", n, lambda: sum(1 for _ in read_records(gz)))
        timed("parse EUC-JP (detected)", n, lambda: sum(1 for _ in read_records(euc)))

        def merge() -> int:
            table, stats = merge_records([read_records(plain), read_records(gz)])
            with table:
                return sum(1 for _ in table.records()) and stats.read // 2

        timed("merge two feeds (per record of one)", n, merge)
        print(f"parse/raw ratio: {rate / raw:.3f}")


if __name__ == "__main__":
    main()
