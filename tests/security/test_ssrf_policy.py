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


@pytest.mark.parametrize(
    "address, who",
    [
        ("169.254.169.254", "AWS, Google Cloud, Azure"),
        ("fd00:ec2::254", "AWS"),
        ("fd20:ce::254", "Google Cloud"),
        ("169.254.170.2", "ECS"),
        ("100.100.100.200", "Alibaba"),
        ("168.63.129.16", "Azure WireServer"),  # public address space: no other rule refuses it
        ("192.0.0.192", "Oracle"),
    ],
)
def test_every_cloud_metadata_address_is_refused_and_named(address, who):
    for policy in (STRICT, LOCAL):
        reason = refusal(ipaddress.ip_address(address), policy)
        assert reason.startswith("a cloud metadata address") and who in reason


# Each IPv6 form that embeds an IPv4 address, written around addresses that must not be reached:
# the metadata address (refused always) and loopback (refused unless private addresses are allowed).
EMBEDDINGS = {
    "6to4": ("2002:a9fe:a9fe::1", "2002:7f00:1::1"),
    "Teredo client (inverted)": ("2001:0:5db8:d822:0:0:5601:5601", "2001:0:5db8:d822:0:0:80ff:fffe"),
    "Teredo server": ("2001:0:a9fe:a9fe::1", "2001:0:7f00:1::1"),
    "NAT64": ("64:ff9b::a9fe:a9fe", "64:ff9b::7f00:1"),
    "IPv4-compatible": ("::169.254.169.254", "::127.0.0.1"),
    "IPv4-mapped": ("::ffff:169.254.169.254", "::ffff:127.0.0.1"),
    "IPv4-translated": ("::ffff:0:169.254.169.254", "::ffff:0:127.0.0.1"),
}


@pytest.mark.parametrize("form", EMBEDDINGS)
def test_an_ipv6_form_embedding_the_metadata_address_is_refused_always(form):
    metadata, _ = EMBEDDINGS[form]
    for policy in (STRICT, LOCAL):
        reason = refusal(ipaddress.ip_address(metadata), policy)
        assert reason.startswith("an IPv6 address embedding 169.254.169.254, a cloud metadata address"), reason


@pytest.mark.parametrize("form", EMBEDDINGS)
def test_an_ipv6_form_embedding_loopback_is_refused_like_loopback(form):
    _, loopback = EMBEDDINGS[form]
    reason = refusal(ipaddress.ip_address(loopback), STRICT)
    assert reason.startswith("an IPv6 address embedding 127.0.0.1, a loopback or private address"), reason


@pytest.mark.parametrize("address", ["2002:a00:1::", "64:ff9b::c0a8:101", "2001:0:5db8:d822::f5ff:fffe"])
def test_an_ipv6_form_embedding_a_private_address_is_refused_like_it(address):
    assert "loopback or private" in refusal(ipaddress.ip_address(address), STRICT)


def test_6to4_and_nat64_of_a_public_address_are_judged_as_that_address():
    # 93.184.216.34 is public: its 6to4 and well-known NAT64 forms are reachable like it.
    assert refusal(ipaddress.ip_address("2002:5db8:d822::1"), STRICT) is None
    assert refusal(ipaddress.ip_address("64:ff9b::5db8:d822"), STRICT) is None
    # IPv4-compatible addresses are deprecated and route nowhere: refused whatever they embed.
    assert refusal(ipaddress.ip_address("::93.184.216.34"), LOCAL) == "a reserved address"


def test_local_use_nat64_is_refused_since_its_translator_decides_where_it_leads():
    # 64:ff9b:1::/48 may embed the IPv4 address at /48, /56, /64 or /96: here 169.254.169.254 at /48.
    for address in ("64:ff9b:1:a9fe:a9:fe00::", "64:ff9b:1::5db8:d822"):
        for policy in (STRICT, LOCAL):
            assert "local-use NAT64" in refusal(ipaddress.ip_address(address), policy)
