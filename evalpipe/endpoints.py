"""Where an endpoint is, for the rule that credentialed data stays local.

PhysioNet's data use agreement forbids sending credentialed data (MIMIC and friends) to
third-party online services. A run of a credentialed task is refused unless every endpoint is on
loopback or a private network, or the user passes ``--allow-external-endpoint`` (then the run's
``config.json`` records that they did).
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit, urlunsplit


def is_local_url(url: str) -> bool:
    """True when the URL's host is loopback or a private/link-local address.

    A host name is resolved; it counts as local only if every address it resolves to is.
    """
    host = urlsplit(url).hostname
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        addresses = [ipaddress.ip_address(host)]
    except ValueError:
        try:
            infos = socket.getaddrinfo(host, None)
        except OSError:
            return False
        addresses = [ipaddress.ip_address(info[4][0]) for info in infos]
    return bool(addresses) and all(a.is_loopback or a.is_private or a.is_link_local for a in addresses)


def redact_url(url: str) -> str:
    """The URL without user-info and query string — where keys sometimes hide — for files and logs."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    redacted = urlunsplit((parts.scheme, netloc, parts.path, "", ""))
    return redacted if (parts.username is None and parts.password is None and not parts.query) else redacted + " (credentials removed)"
