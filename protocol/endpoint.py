"""Network addresses strangers write: a host's artifact location (stored on chain, read by every
peer and verifier) and the chain addresses clients are given. An address is ``host:port`` with
a DNS name, an IPv4 address or a bracketed IPv6 address, and a port in 1-65535. Nothing else
reaches a dialler: no scheme (``unix:`` would open a local socket), no path, no user.

A host's artifact location is either such an address (its gRPC blob service) or the
``http(s)://`` URL of a public-read object-store prefix, under which artifact ``h`` is
``URL/h`` (hex): a URL with a host, an optional port and a plain path, nothing more (no user,
query or fragment, no ``..``)."""

from __future__ import annotations

import ipaddress
import re
import urllib.parse

MAX_LENGTH = 261  # a 253-character name, a colon and a port
MAX_URL_LENGTH = 512
# Matched with fullmatch: ``$`` would also match before a final newline.
_LABEL = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)")
_NUMERIC = re.compile(r"[0-9]+|0[xX][0-9A-Fa-f]*")
_URL = re.compile(r"(https?)://([^/?#@]+)((?:/[A-Za-z0-9._~-]+)*)/?")


def endpoint_problem(text: str) -> str | None:
    """Why ``text`` is not a ``host:port`` address (None if it is)."""
    if not isinstance(text, str) or not text:
        return "an address is host:port"
    if len(text) > MAX_LENGTH:
        return f"an address is at most {MAX_LENGTH} characters"
    if "://" in text:
        return "an address is host:port, not a URL"
    host, colon, port = text.rpartition(":")
    if not colon or not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
        return "an address ends with :PORT, a port in 1-65535"
    return _host_problem(host)


def _host_problem(host: str) -> str | None:
    if host.startswith("[") and host.endswith("]"):
        try:
            if "%" in host:  # a zone id names one of the dialler's own interfaces
                raise ValueError(host)
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            return f"{host[:64]!r} is not an IPv6 address"
        return None
    labels = host.split(".")
    if not all(_LABEL.fullmatch(label) for label in labels):
        return f"{host[:64]!r} is not a host name or IP address"
    if _NUMERIC.fullmatch(labels[-1]):  # resolvers read 2130706433 or 0x7f.1 as addresses
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            return f"{host[:64]!r} is not a dotted-quad IPv4 address"
    return None


def url_problem(text: str) -> str | None:
    """Why ``text`` is not the ``http(s)://HOST[:PORT]/PATH`` URL of an object-store prefix
    (None if it is)."""
    if not isinstance(text, str) or len(text) > MAX_URL_LENGTH:
        return f"a URL is at most {MAX_URL_LENGTH} characters"
    match = _URL.fullmatch(text)
    if match is None:
        return ("a URL is http(s)://HOST[:PORT]/PATH, its path of letters, digits and "
                "'._~-' (no user, query or fragment)")  # fmt: skip
    authority, path = match.group(2), match.group(3)
    if any(segment in (".", "..") for segment in path.split("/")):
        return "a URL's path has no '.' or '..' segment"
    if ":" not in authority.rsplit("]", 1)[-1]:  # no port: 80 or 443
        return _host_problem(authority)
    host, _, port = authority.rpartition(":")
    if not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
        return "a URL's port is in 1-65535"
    return _host_problem(host)


def is_url(location: str) -> bool:
    """Whether an artifact location is an object-store URL (else a blob service address)."""
    return location.startswith(("http://", "https://"))


def location_problem(text: str, urls: bool = True) -> str | None:
    """Why ``text`` is not an artifact location: a blob service's ``host:port`` or (with
    ``urls``) an object-store prefix's URL (None if it is)."""
    problem = url_problem(text) if urls and isinstance(text, str) and is_url(text) else (
        endpoint_problem(text))  # fmt: skip
    if problem is None and never_a_peer(location_host(text).rpartition(":")[0].strip("[]")):
        return ("a link-local, multicast, unspecified or reserved address: no peer is reached "
                "there")  # fmt: skip
    return problem


def location_host(location: str) -> str:
    """The ``host:port`` a location is reached at (a URL's host, port 80/443 by default)."""
    if not is_url(location):
        return location
    scheme, _, rest = location.partition("://")
    authority = rest.split("/", 1)[0]
    if ":" not in authority.rsplit("]", 1)[-1]:
        authority += ":443" if scheme == "https" else ":80"
    return authority


def _localhost_name(host: str) -> bool:
    """Whether the lowercase name ``host`` is this machine's (``localhost``, ``*.localhost``)."""
    return host == "localhost" or host.endswith(".localhost")


def _loopback_or_unspecified(text: str) -> tuple[bool, bool]:
    host = location_host(text).rpartition(":")[0].strip("[]").lower()
    if _localhost_name(host):
        return True, False
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False, False
    return ip.is_loopback, ip.is_unspecified


# Instance-metadata services outside the link-local ranges: AWS's IPv6 one, Alibaba Cloud's,
# Oracle Cloud's legacy one.
_METADATA = {ipaddress.ip_address(a) for a in ("fd00:ec2::254", "100.100.100.200", "192.0.0.192")}


def _address(ip: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address ``ip`` names (an IPv4-mapped IPv6 one as its IPv4), None if none."""
    try:
        address = ipaddress.ip_address(ip.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def never_a_peer(ip: str) -> bool:
    """Whether no artifact is ever fetched from address ``ip``: link-local (where clouds serve
    instance metadata and credentials) or another cloud's metadata address, multicast,
    unspecified or reserved. A location that
    leads there is a stranger steering verifiers at their own machine's surroundings."""
    address = _address(ip)
    if address is None or address.is_loopback:  # ::1 lies in IPv6's reserved ::/8
        return False
    return (address in _METADATA or address.is_link_local or address.is_multicast
            or address.is_unspecified or address.is_reserved)  # fmt: skip


_SHARED = ipaddress.ip_network("100.64.0.0/10")  # carrier-grade NAT, and overlays (Tailscale)
PRIVATE_SWITCH = "DILOCHAIN_PRIVATE_ARTIFACTS"  # allow | refuse | auto (the default)


class _PrivatePeers:
    """This process's rule for artifact peers on private networks and loopback: None until
    told or settled from the chain's address (:func:`settle_private_peers`)."""

    allowed: bool | None = None


def private_peer(ip: str) -> bool:
    """Whether address ``ip`` is on a private network (RFC 1918, IPv6 unique-local, shared
    100.64/10) or loopback: somewhere only this machine's own network reaches."""
    address = _address(ip)
    return address is not None and (address.is_loopback or address.is_private
                                    or address in _SHARED)  # fmt: skip


def allow_private_peers(allowed: bool | None) -> None:
    """Set whether artifacts are fetched from private and loopback addresses (None: settle it
    from the chain's address at the next connection)."""
    _PrivatePeers.allowed = allowed


def private_peers_allowed() -> bool | None:
    """Whether artifacts are fetched from private and loopback addresses (None: not settled)."""
    return _PrivatePeers.allowed


def private_switch_problem(value: str) -> str | None:
    """Why ``value`` is not a setting of :data:`PRIVATE_SWITCH` (None if it is)."""
    if value in ("", "auto", "allow", "refuse"):
        return None
    return f"{PRIVATE_SWITCH} is allow, refuse or auto, not {value[:32]!r}"


def settle_private_peers(chain: list[str], switch: str = "") -> None:
    """Unless already set, decide whether artifacts are fetched from private and loopback
    addresses: as ``switch`` says (the operator's ``allow`` or ``refuse``), else (``auto``)
    only when the chain itself is reached at such an address (a devnet, a LAN): on a chain
    reached over the internet, a location there is a stranger steering this machine at its
    own network."""
    if _PrivatePeers.allowed is not None:
        return
    if switch in ("allow", "refuse"):
        _PrivatePeers.allowed = switch == "allow"
        return
    _PrivatePeers.allowed = private_chain(chain)


def _host_of(address: str) -> str:
    """The host of a ``host:port``, an object-store URL or a ``tcp://`` RPC URL, lowercase."""
    plain = address.partition("://")[2] if "://" in address and not is_url(address) else address
    return location_host(plain).rpartition(":")[0].strip("[]").lower()


def private_chain(chain: list[str] | tuple[str, ...]) -> bool:
    """Whether every address of ``chain`` is this machine's or on a private network: a devnet,
    a LAN, an overlay network."""
    hosts = [_host_of(a) for a in chain]
    return bool(hosts) and all(_localhost_name(h) or private_peer(h) for h in hosts)


def private_location_problem(
    location: str, chain: list[str] | tuple[str, ...], switch: str = ""
) -> str | None:  # fmt: skip
    """Why verifiers of ``chain`` would not fetch from a host's artifact ``location`` on a
    private network (None if they would): they refuse private addresses when the chain is
    reached over the internet, unless told otherwise (``switch`` = ``allow``)."""
    if switch == "allow" or private_chain(chain) or not private_peer(_host_of(location)):
        return None
    return (f"{location} is on a private network, but the chain ({', '.join(chain)}) is reached "
            f"over the internet, whose verifiers refuse private addresses: give the address "
            f"others reach (--advertise-address, --object-store-public-url), or set "
            f"{PRIVATE_SWITCH}=allow on every machine of a private deployment")  # fmt: skip


def peer_refusal(ip: str) -> str | None:
    """Why no artifact is fetched from address ``ip`` (None: it may be)."""
    if never_a_peer(ip):
        return "a link-local, multicast or reserved address no artifact is fetched from"
    if _PrivatePeers.allowed is False and private_peer(ip):
        return (f"a private or loopback address, which this process refuses on a chain reached "
                f"over the internet ({PRIVATE_SWITCH}=allow fetches from it)")  # fmt: skip
    return None


def local_only(text: str) -> bool:
    """Whether ``host:port`` names this machine alone (loopback, ``localhost``) or no host at
    all (``0.0.0.0``, ``[::]``): an address no other machine can dial."""
    return any(_loopback_or_unspecified(text))


def loopback(text: str) -> bool:
    """Whether a server listening on ``host:port`` takes connections from this machine only."""
    return _loopback_or_unspecified(text)[0]


HOST_UNREACHABLE = ("its verifiers could not fetch this host's artifacts, and a host whose "
                    "artifacts cannot be fetched is slashed")  # fmt: skip


def listen_problem(text: str) -> str | None:
    """Why ``text`` is not a ``host:port`` to listen on, port 0 (any free one) allowed (a
    blob address of 127.0.0.1:99999 was listened on, and registered, at port 34463)."""
    host, sep, port = text.rpartition(":")
    return endpoint_problem(f"{host}:1" if sep and port == "0" else text)


def unreachable_endpoint(
    listen: str, advertised: str, chain: tuple[str, ...], cost: str = HOST_UNREACHABLE
) -> str | None:
    """Why peers could not reach a blob service listening on ``listen`` and registered as
    ``advertised`` (empty: ``listen``), on a chain reached at ``chain`` (None when they could,
    or when everything runs on this machine, as in a devnet); ``cost`` says what that costs."""
    if all(local_only(node) for node in chain):
        return None
    if advertised and loopback(listen):
        return (f"the blob service listens on {listen}, which only this machine can reach, "
                f"while it advertises {advertised}: listen on an address that advertised one "
                "leads to (--blob-address 0.0.0.0:7000)")  # fmt: skip
    if advertised and listen.endswith(":0"):
        return (f"the blob service listens on {listen}, a port picked at random, which the "
                f"advertised {advertised} cannot name: give its port (--blob-address "
                "0.0.0.0:7000)")  # fmt: skip
    endpoint = advertised or listen
    if not local_only(endpoint):
        return None
    return (f"the blob service's address {endpoint} is reachable from this machine only, but "
            f"the chain ({', '.join(chain)}) is elsewhere: {cost}. Listen "
            "on a reachable address (--blob-address 0.0.0.0:7000) and give the address others "
            "dial (--advertise-address HOST:7000, e.g. the port your router forwards)")  # fmt: skip


def blob_service_problem(
    listen: str, advertised: str, chain: tuple[str, ...], switch: str,
    cost: str = HOST_UNREACHABLE,
) -> str | None:  # fmt: skip
    """Why peers could not fetch from a blob service listening on ``listen`` and registered as
    ``advertised`` (empty: ``listen``) on a chain reached at ``chain``: unreachable
    (:func:`unreachable_endpoint`, ``cost`` saying what that costs), or at an address they
    refuse under the private-addresses ``switch`` (:func:`private_location_problem`)."""
    return unreachable_endpoint(listen, advertised, chain, cost) or (
        private_location_problem(advertised or listen, chain, switch))  # fmt: skip


def caller_address(peer: str) -> str:
    """Where a gRPC peer (``ipv4:1.2.3.4:5``, ``ipv6:%5B2001:db8::1%5D:5`` as gRPC writes it,
    ``unix:…``) calls from, as per-caller limits count it: :func:`caller_of` its address, ""
    for a unix socket, the string itself for anything else."""
    kind, _, rest = peer.partition(":")
    if kind in ("unix", "unix-abstract"):
        return ""
    if kind not in ("ipv4", "ipv6"):
        return peer
    return caller_of(urllib.parse.unquote(rest).rpartition(":")[0])  # gRPC: "%5B::1%5D:5"


def caller_of(host: str | None) -> str:
    """A caller's address as per-caller limits count it: an IPv4 address, an IPv6 /64 (one
    machine's addresses: a single host can take any of them; an IPv4-mapped one as its IPv4
    address), or "" for this machine's own processes (loopback, or no address: a unix
    socket); anything else as it is."""
    if not host:
        return ""
    try:
        address = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return host
    if address.version == 6 and address.ipv4_mapped:  # an IPv4 caller of a dual-stack listener
        address = address.ipv4_mapped
    if address.is_loopback:
        return ""
    if address.version == 4:
        return str(address)
    return str(ipaddress.ip_network(f"{address}/64", strict=False))
