"""Network addresses strangers write: a host's blob endpoint (stored on chain, dialled by every
peer and verifier) and the chain addresses clients are given. One rule for both: ``host:port``
with a DNS name, an IPv4 address or a bracketed IPv6 address, and a port in 1-65535. Nothing
else reaches a dialler: no scheme (``unix:`` would open a local socket), no path, no user."""

from __future__ import annotations

import ipaddress
import re

MAX_LENGTH = 261  # a 253-character name, a colon and a port
_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")


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
    if host.startswith("[") and host.endswith("]"):
        try:
            ipaddress.IPv6Address(host[1:-1])
        except ValueError:
            return f"{host[:64]!r} is not an IPv6 address"
        return None
    if not all(_LABEL.match(label) for label in host.split(".")):
        return f"{host[:64]!r} is not a host name or IP address"
    return None


def _loopback_or_unspecified(text: str) -> tuple[bool, bool]:
    host = text.rpartition(":")[0].strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True, False
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False, False
    return ip.is_loopback, ip.is_unspecified


def local_only(text: str) -> bool:
    """Whether ``host:port`` names this machine alone (loopback, ``localhost``) or no host at
    all (``0.0.0.0``, ``[::]``): an address no other machine can dial."""
    return any(_loopback_or_unspecified(text))


def loopback(text: str) -> bool:
    """Whether a server listening on ``host:port`` takes connections from this machine only."""
    return _loopback_or_unspecified(text)[0]


def unreachable_endpoint(listen: str, advertised: str, chain: tuple[str, ...]) -> str | None:
    """Why peers could not reach a blob service listening on ``listen`` and registered as
    ``advertised`` (empty: ``listen``), on a chain reached at ``chain`` (None when they could,
    or when everything runs on this machine, as in a devnet)."""
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
            f"the chain ({', '.join(chain)}) is elsewhere: its verifiers could not fetch this "
            "host's artifacts, and a host whose artifacts cannot be fetched is slashed. Listen "
            "on a reachable address (--blob-address 0.0.0.0:7000) and give the address others "
            "dial (--advertise-address HOST:7000, e.g. the port your router forwards)")  # fmt: skip
