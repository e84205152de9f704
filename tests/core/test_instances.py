"""One identity per engine instance (DESIGN 10): host:port, split for the span attributes."""

import pytest

from infersight import attributes as attr
from infersight.instances import instance_attributes, instance_name, split_instance


@pytest.mark.parametrize("host, port, name", [("10.0.0.5", 8000, "10.0.0.5:8000"), ("::1", 80, "[::1]:80"),
                                              ("[::1]", 80, "[::1]:80"), ("gpu-7.local", 30000, "gpu-7.local:30000")])
def test_instance_name_is_host_port(host, port, name):
    assert instance_name(host, port) == name
    assert split_instance(name) == (host.strip("[]"), port)


@pytest.mark.parametrize("name", ["engine-0", "", ":8000", "h:", "h:0", "h:70000", "h:80/metrics/x", "::1:80",
                                  "h:8o"])
def test_names_that_are_not_endpoints_do_not_split(name):
    assert split_instance(name) is None


def test_span_attributes_carry_the_instance_and_its_endpoint():
    assert instance_attributes("10.0.0.5:8000") == {attr.INSTANCE: "10.0.0.5:8000", attr.SERVER_ADDRESS: "10.0.0.5",
                                                    attr.SERVER_PORT: 8000}
    assert instance_attributes("engine-0") == {attr.INSTANCE: "engine-0"}  # a plain name: no server.*
    assert instance_attributes("") == {}  # not routed yet
