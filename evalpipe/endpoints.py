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
    """True when the URL's host is loopback or a private/link-local address (:data:`LOCAL_NETWORKS`).

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
    return bool(addresses) and all(_is_local_address(a) for a in addresses)


#: the networks that count as this machine's or its site's own: loopback, RFC 1918 and link-local (IPv4),
#: loopback, unique-local and link-local (IPv6), and 0.0.0.0 (which reaches this machine on Linux)
LOCAL_NETWORKS = tuple(ipaddress.ip_network(n) for n in (
    "127.0.0.0/8", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16", "0.0.0.0/32",
    "::1/128", "fc00::/7", "fe80::/10",
))


def _is_local_address(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether an address is in :data:`LOCAL_NETWORKS`.

    Why a list of our own and not ``ipaddress``' ``is_private``: that also counts the documentation
    and benchmarking ranges (192.0.2.0/24, 198.18.0.0/15 …) and others no site runs a server on; a
    rule about where patient data may go names the networks it allows. An IPv4-mapped IPv6 address is
    judged as its IPv4 address.
    """
    mapped = getattr(address, "ipv4_mapped", None)
    if mapped is not None:
        address = mapped
    return any(address in network for network in LOCAL_NETWORKS if network.version == address.version)


def redact_url(url: str) -> str:
    """The URL without user-info and query string — where keys sometimes hide — for files and logs."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    netloc = f"{host}:{parts.port}" if parts.port else host
    redacted = urlunsplit((parts.scheme, netloc, parts.path, "", ""))
    return redacted if (parts.username is None and parts.password is None and not parts.query) else redacted + " (credentials removed)"


# ---- where a request really goes: the endpoint, the proxy in front of it, no redirects ---------------

#: how every evalpipe HTTP client treats a 3xx reply (recorded in config.json): a redirect would re-send
#: the prompt — and the Authorization header — to whatever host the Location header names
REDIRECTS = "not followed"


def _without_userinfo(url: str) -> str:
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    netloc = f"{host}:{parts.port}" if parts.port else host
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def proxy_for(url: str) -> str | None:
    """The proxy evalpipe's HTTP client sends requests for ``url`` through, or None.

    Exactly the lookup the client makes (aiohttp's own: ``HTTP_PROXY``/``HTTPS_PROXY`` for the URL's
    scheme, ``NO_PROXY`` honoured, lower-case names too), so the locality rule judges the very proxy
    the data would travel through. ``ALL_PROXY`` is not used by this client (aiohttp ignores it), so no
    data goes there. The proxy URL may carry user-info: show it with :func:`redact_url`.
    """
    from aiohttp.helpers import get_env_proxy_for_url  # noqa: PLC0415 - aiohttp only when asked
    from yarl import URL  # noqa: PLC0415

    try:
        proxy, auth = get_env_proxy_for_url(URL(_without_userinfo(url)))
    except (LookupError, ValueError):
        return None
    if auth is not None and proxy.user is None:  # user-info from ~/.netrc: keep the proxy URL whole
        proxy = proxy.with_user(auth.login).with_password(auth.password or None)
    return str(proxy)


def route_problem(url: str) -> str | None:
    """Why sending patient data to ``url`` would let it leave the machine's network, or None.

    The one locality rule for every connection that may carry task text: the endpoint must be
    loopback or private (:func:`is_local_url`), and so must the proxy the environment selects for it
    (:func:`proxy_for`). Redirects need no check here: no evalpipe client follows one
    (:data:`REDIRECTS`). Nothing is sent to find out — a host name is only resolved.
    """
    if not is_local_url(url):
        return f"{redact_url(url)} is not a loopback or private address"
    proxy = proxy_for(url)
    if proxy is not None and not is_local_url(proxy):
        return (f"requests to {redact_url(url)} would go through the proxy {proxy_host(proxy)} (from HTTP_PROXY/"
                "HTTPS_PROXY), which is not a loopback or private address; unset it or name the endpoint's host "
                "in NO_PROXY")
    return None


def proxy_host(proxy: str | None) -> str | None:
    """A proxy as recorded and shown: ``host:port`` only (never its user-info), or None."""
    if proxy is None:
        return None
    parts = urlsplit(proxy)
    host = parts.hostname or ""
    host = f"[{host}]" if ":" in host else host
    return f"{host}:{parts.port}" if parts.port else host


def route_record(url: str) -> dict[str, str | None]:
    """What ``config.json`` records about how requests to ``url`` travel: the proxy host (or None)
    and the redirect policy."""
    return {"proxy": proxy_host(proxy_for(url)), "redirects": REDIRECTS}
