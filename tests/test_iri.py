from resourcesync.iri import display_iri


def test_non_ascii_decoded_the_rest_kept() -> None:
    assert display_iri("http://h/%E6%96%B0%E3%81%97%E3%81%84.txt") == "http://h/新しい.txt"
    assert display_iri("http://h/a%20b%2Fc%25d") == "http://h/a%20b%2Fc%25d"
    assert display_iri("http://h/%FF%FE") == "http://h/%FF%FE"  # not UTF-8
    assert display_iri("http://h/%E2%80%AEevil") == "http://h/%E2%80%AEevil"  # bidi override
    assert display_iri("http://h/%C3%A9t%C3%A9?q=%C3%A9") == "http://h/été?q=é"
