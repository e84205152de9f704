"""The one HOST:PORT parser (infersight/listen.py) that every listener and address flag uses."""

import pytest

from infersight.listen import Listen, parse_listen


@pytest.mark.parametrize("value, host, port", [("127.0.0.1:9835", "127.0.0.1", 9835), ("0.0.0.0:0", "0.0.0.0", 0),
                                               ("[::1]:4318", "::1", 4318), ("[::]:65535", "::", 65535),
                                               ("gpu-node-1:9400", "gpu-node-1", 9400)])
def test_parses_host_and_port(value, host, port):
    address = parse_listen(value)
    assert (address.host, address.port) == (host, port)
    assert str(address) == value  # written back as it was given: IPv6 in brackets


@pytest.mark.parametrize("value, says", [("localhost", "expected HOST:PORT"), (":9835", "expected HOST:PORT"),
                                         ("h:", "expected HOST:PORT"), ("h:x1", "expected HOST:PORT"),
                                         ("h:70000", "between 0 and 65535")])
def test_bad_address_names_the_flag_and_shows_an_example(value, says):
    with pytest.raises(ValueError) as caught:
        parse_listen(value, what="--alertmanager", example="127.0.0.1:9093")
    message = str(caught.value)
    assert message.startswith(f"--alertmanager {value!r}: ") and says in message and "e.g. 127.0.0.1:9093" in message


def test_a_wildcard_bind_is_dialed_on_loopback():
    assert str(parse_listen("0.0.0.0:4317").dialable()) == "127.0.0.1:4317"
    assert str(parse_listen("[::]:4318").dialable()) == "[::1]:4318"
    assert parse_listen("10.0.0.9:5317").dialable() == Listen("10.0.0.9", 5317)
    assert parse_listen("[::]:0").is_wildcard and not parse_listen("[::1]:0").is_wildcard
    assert str(parse_listen("[::]:0").with_port(8081)) == "[::]:8081"
