import ipaddress

import pytest

from sessions.mcp.ssrf import AddressRefused, NetworkPolicy, check_url, refusal

STRICT, LOCAL = NetworkPolicy(allow_private=False), NetworkPolicy(allow_private=True)


@pytest.mark.parametrize(
    "address",
    [
        "169.254.169.254",
        "fd00:ec2::254",
        "169.254.10.1",
        "fe80::1",
        "0.0.0.0",
        "::",
        "224.0.0.1",
        "240.0.0.1",
        "::ffff:169.254.169.254",
        "100.100.100.200",
    ],
)
def test_metadata_link_local_and_special_ranges_are_always_refused(address):
    assert refusal(ipaddress.ip_address(address), LOCAL) is not None
    assert refusal(ipaddress.ip_address(address), STRICT) is not None


@pytest.mark.parametrize(
    "address",
    ["127.0.0.1", "::1", "10.1.2.3", "172.16.0.9", "192.168.1.1", "fc00::1", "100.64.0.1", "::ffff:127.0.0.1"],
)
def test_loopback_and_private_ranges_need_the_operator_setting(address):
    assert "loopback or private" in refusal(ipaddress.ip_address(address), STRICT)
    assert refusal(ipaddress.ip_address(address), LOCAL) is None


def test_public_addresses_are_allowed():
    assert refusal(ipaddress.ip_address("93.184.216.34"), STRICT) is None
    assert refusal(ipaddress.ip_address("2606:2800:220:1:248:1893:25c8:1946"), STRICT) is None


def test_a_url_is_checked_on_every_address_it_resolves_to():
    with pytest.raises(AddressRefused, match="loopback or private"):
        check_url("http://localhost:8000/mcp", STRICT)
    assert "127.0.0.1" in check_url("http://localhost:8000/mcp", LOCAL)
    with pytest.raises(AddressRefused, match="cloud metadata"):
        check_url("http://169.254.169.254/latest/meta-data/", LOCAL)


def test_a_dns_failure_refuses():
    with pytest.raises(AddressRefused, match="cannot be resolved"):
        check_url("https://no-such-host.invalid/mcp", LOCAL)
