"""The server's base URL: what `--url` may be, and whether it is on this machine.

Secrets: a URL with credentials (http://user:pass@host) is refused (`check_url`): the API
key comes from VLLM_API_KEY or BENCH_API_KEY only. `is_loopback` decides that no proxy
from the environment carries a request to a server on this machine.
"""

from __future__ import annotations

import ipaddress
import re

import httpx

from bench.errors import UsageError


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 and localhost: the server is on this machine."""
    host = host.strip("[]").lower().rstrip(".")
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


_LABEL = re.compile(r"^(?!-)[A-Za-z0-9_-]{1,63}(?<!-)$")


def check_url(url: str) -> str:
    """The server's base URL, checked: http(s), a host that can be a name, no credentials.

    A password in the URL would be written to results.json, the report, the plan line and
    the signed bundle: it is refused, naming the environment variable to use instead.
    """
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, UnicodeError, ValueError):
        raise UsageError(
            "--url is not a valid URL", hint="write e.g. http://127.0.0.1:8000"
        ) from None
    if parsed.userinfo:
        shown = parsed.copy_with(username=None, password=None)
        raise UsageError(
            f"--url must not carry a user name or password (given for {shown})",
            hint="drop USER:PASSWORD@ from it and give the API key in VLLM_API_KEY "
            "(or BENCH_API_KEY) instead",
        )
    if parsed.scheme not in ("http", "https"):
        raise UsageError(
            f"--url must be http:// or https://, not {parsed.scheme or 'no scheme'}",
            hint="write e.g. http://127.0.0.1:8000",
        )
    host = parsed.host
    literal = host.startswith("[") or ":" in host
    try:
        ipaddress.ip_address(host.strip("[]"))
        literal = True
    except ValueError:
        pass
    labels = host.rstrip(".").split(".")
    if not host or (
        not literal and (len(host) > 253 or not all(_LABEL.match(label) for label in labels))
    ):
        raise UsageError(
            f"--url has no valid host name ({host[:80]!r})",
            hint="a host name is dot-separated labels of letters, digits and '-'",
        )
    return url.rstrip("/")
