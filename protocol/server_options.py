"""Options every gRPC server of dilochain (a chain node's, a host's or verifier's blob service)
is started with. A caller that vanishes without closing its connection (its machine lost power,
its NAT forgot the mapping, its process was stopped) leaves TCP nothing to time out: a call
whose request never ends waits for it, and an answer held by flow control waits for a window,
so the calls, answer bytes and connection it held were never given back. The server pings
every connection quiet for :data:`KEEPALIVE_SECONDS` and closes one that does not answer within
:data:`KEEPALIVE_TIMEOUT_SECONDS`, which ends its calls and gives their budgets back."""

from __future__ import annotations

KEEPALIVE_SECONDS = 60.0
KEEPALIVE_TIMEOUT_SECONDS = 20.0


def server_options(
    keepalive: float = KEEPALIVE_SECONDS, timeout: float = KEEPALIVE_TIMEOUT_SECONDS
) -> list[tuple[str, int]]:
    """A gRPC server's channel arguments: one server to a port, and vanished callers closed
    (pinged after ``keepalive`` seconds, closed after ``timeout`` more without an answer)."""
    return [
        ("grpc.so_reuseport", 0),
        ("grpc.keepalive_time_ms", int(keepalive * 1000)),
        ("grpc.keepalive_timeout_ms", int(timeout * 1000)),
        ("grpc.keepalive_permit_without_calls", 1),  # a connection with no call is pinged too
        ("grpc.http2.max_pings_without_data", 0),  # however long its answers wait for a window
        # what grpcio (1.85) closes an unanswered ping's connection by: with keepalive_timeout
        # alone a vanished caller's calls were still held 40 s after a 1 s timeout (measured)
        ("grpc.http2.ping_timeout_ms", int(timeout * 1000)),
    ]
