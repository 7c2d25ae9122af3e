import hashlib
import io

import pytest

from resourcesync.hashing import (
    MultiHasher,
    check_hash_value,
    format_hashes,
    hash_file,
    hash_stream,
    parse_hashes,
)


def test_streaming_digests_match_hashlib(tmp_path) -> None:
    data = b"resourcesync " * 200_000  # several chunks
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    # Every IANA Hash Function Textual Name hashlib always has.
    algorithms = ["md5", "sha-1", "sha-224", "sha-256", "sha-384", "sha-512"]
    length, digests = hash_file(path, algorithms)
    assert length == len(data)
    assert digests == {a: hashlib.new(a.replace("-", ""), data).hexdigest() for a in algorithms}
    assert hash_stream(io.BytesIO(data), ["md5"]) == (
        len(data),
        {"md5": hashlib.md5(data).hexdigest()},
    )


def test_unknown_algorithm_for_hashing_is_refused() -> None:
    with pytest.raises(ValueError, match="unsupported"):
        MultiHasher(["crc32"])


def test_tokens_round_trip_and_keep_unknown_algorithms() -> None:
    text = (
        "md5:1e0d5cb8ef6ba40c99b14c0237be735e "
        "sha-256:854f61290e2e197a11bc91063afce22e43f8ccc655237050ace766adc68dc784 x-crc:abc"
    )
    parsed = parse_hashes(text)
    assert parsed["x-crc"] == "abc"
    assert format_hashes(parsed) == text
    # Line breaks inside the attribute (as in the Change Notification example) are separators.
    assert parse_hashes("md5:aa\n     sha-1:bb") == {"md5": "aa", "sha-1": "bb"}


@pytest.mark.parametrize("text", ["", "md5", "md5:", ":abc", "md5:aa md5:bb", "m d5:aa"])
def test_malformed_tokens_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_hashes(text)


def test_known_algorithms_are_checked_for_hex_and_length() -> None:
    assert check_hash_value("md5", "1e0d5cb8ef6ba40c99b14c0237be735e") is None
    assert "hexadecimal" in (check_hash_value("md5", "zz0d5cb8ef6ba40c99b14c0237be735e") or "")
    assert "32" in (check_hash_value("md5", "abc") or "")
    assert check_hash_value("x-other", "anything") is None
    assert check_hash_value("sha-512", hashlib.sha512(b"").hexdigest()) is None
    assert "128" in (check_hash_value("sha-512", hashlib.sha256(b"").hexdigest()) or "")
