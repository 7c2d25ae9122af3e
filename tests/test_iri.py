import pytest

from resourcesync.iri import display_iri, normal_uri, same_uri


def test_non_ascii_decoded_the_rest_kept() -> None:
    assert display_iri("http://h/%E6%96%B0%E3%81%97%E3%81%84.txt") == "http://h/新しい.txt"
    assert display_iri("http://h/a%20b%2Fc%25d") == "http://h/a%20b%2Fc%25d"
    assert display_iri("http://h/%FF%FE") == "http://h/%FF%FE"  # not UTF-8
    assert display_iri("http://h/%E2%80%AEevil") == "http://h/%E2%80%AEevil"  # bidi override
    assert display_iri("http://h/%C3%A9t%C3%A9?q=%C3%A9") == "http://h/été?q=é"


@pytest.mark.parametrize(
    ("a", "b"),
    [
        # RFC 3986 §6.2.2's own example.
        ("example://a/b/c/%7Bfoo%7D", "eXAMPLE://a/./b/../b/%63/%7bfoo%7d"),
        ("HTTP://www.Example.com/", "http://www.example.com/"),  # §6.2.2.1
        ("http://example.com/~smith/", "http://example.com/%7Esmith/"),  # §6.2.2.2
        ("http://example.com", "http://example.com:/"),  # §6.2.3
        ("http://example.com:80/a", "http://example.com/a"),
        ("https://example.com:443/a?q=%7e", "https://example.com/a?q=~"),
        ("http://[::1]:8080/a/../b", "http://[::1]:8080/b"),
        ("http://h/a#section-2", "http://h/a"),  # a fragment is not sent
        ("http://h/a?", "http://h/a"),
    ],
)
def test_spellings_of_one_uri(a: str, b: str) -> None:
    assert same_uri(a, b) and normal_uri(a) == normal_uri(b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("http://example.com/q%3Fx", "http://example.com/q?x"),  # a reserved character
        ("http://example.com/a%2Fb", "http://example.com/a/b"),
        ("http://example.com/A", "http://example.com/a"),  # the path's case matters
        ("http://example.com:8080/", "http://example.com/"),
        ("https://example.com/", "http://example.com/"),  # another scheme: a move
        ("http://User@example.com/", "http://user@example.com/"),  # userinfo's case
    ],
)
def test_different_uris(a: str, b: str) -> None:
    assert not same_uri(a, b)


def test_a_normal_uri_is_given_back_as_it_is() -> None:
    for uri in ("http://example.org/data/a.txt", "https://h:8443/x?y=1", "urn:isbn:0451450523"):
        assert normal_uri(uri) == uri
    assert normal_uri("http://h:99999999/") == "http://h:99999999/"  # not a URI it can read


def test_an_iri_and_its_uri_are_one() -> None:
    """RFC 3987 §3.1: an IRI's characters outside ASCII are its URI's percent-encoded UTF-8;
    an international host name is its ASCII form. A space or `"` (no URI holds them) as a
    browser sends them."""
    assert same_uri("http://h/新.txt", "http://h/%e6%96%b0.txt")
    assert same_uri("http://例え.jp/x", "http://XN--R8JZ45G.jp/x")
    assert same_uri("http://h/a b", "http://h/a%20b")
    assert same_uri('http://h/a"b', "http://h/a%22b")
    assert not same_uri("http://h/新.txt", "http://h/%E6%96%B0%2Etxt%2F")
