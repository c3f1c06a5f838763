"""The server's base URL and the endpoint, checked before anything is sent.

A base URL is `http://` or `https://`, a host, an optional port in 1..65535 and an optional
path (a server behind a proxy), with no query or fragment (the endpoint is appended to it). An
endpoint is a path starting with '/'. Neither may hold spaces or control characters.
"""

from __future__ import annotations

from urllib.parse import urlsplit

URL_FORM = "http(s)://HOST[:PORT][/PATH] with a port in 1-65535, e.g. http://127.0.0.1:8000"
ENDPOINT_FORM = "a path starting with '/', e.g. /v1/completions or /v1/chat/completions"


def check_base_url(url: str) -> None:
    """ValueError saying what is wrong with `url` and what is allowed, unless it is a base
    URL."""
    problem = url_problem(url)
    if problem is not None:
        raise ValueError(f"{url!r}: {problem}; expected {URL_FORM}")


def check_endpoint(endpoint: str) -> None:
    """ValueError saying what is wrong with `endpoint` and what is allowed, unless it is a
    path."""
    if not endpoint.startswith("/") or not _printable(endpoint):
        raise ValueError(f"{endpoint!r}: expected {ENDPOINT_FORM}, without spaces")


def is_chat(endpoint: str) -> bool:
    """Whether an endpoint takes chat messages (`.../chat/completions`) rather than a
    prompt."""
    return endpoint.rstrip("/").endswith("/chat/completions")


def shown_url(url: str) -> str:
    """`url` as a report shows it: a password it carries (`http://user:password@host`) as
    `***`."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    userinfo, _, host = parts.netloc.rpartition("@")
    return parts._replace(netloc=f"{userinfo.split(':', 1)[0]}:***@{host}").geturl()


def url_problem(url: str) -> str | None:
    if not _printable(url):
        return "it holds spaces or control characters"
    try:
        parts = urlsplit(url)
    except ValueError as exc:  # e.g. an unclosed [IPv6 address
        return str(exc)
    if not url.lower().startswith(("http://", "https://")):
        return "no http:// or https:// at its start"
    if not parts.hostname:
        return "there is no host"
    try:
        port = parts.port
    except ValueError:  # not a number, or over 65535
        port = 0
    if port == 0:
        return f"the port {parts.netloc.rsplit(':', 1)[-1]!r} is not a number in 1-65535"
    if parts.query or parts.fragment:
        return "a base URL has no ?query or #fragment (the endpoint is appended to it)"
    return None


def _printable(text: str) -> bool:
    return all(c.isprintable() and not c.isspace() for c in text)
