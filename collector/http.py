"""The collectors' HTTP client: one ``requests`` session per source (issue 14: one HTTP
client library). Keep-alive connections pooled per host, no retries (a failed target
waits for the next cycle, and the source counts it), TLS verified against a CA bundle or
the system's; targets are reached directly, so proxy variables and ~/.netrc of the
environment are ignored, as they were by the urllib3 pools this replaces.
"""

from __future__ import annotations

import requests
from requests.adapters import HTTPAdapter


def session(*, hosts: int = 16, ca_file: str | None = None, verify_tls: bool = True,
            headers: dict[str, str] | None = None) -> requests.Session:
    """A session pooling connections for ``max(16, hosts)`` hosts, two each; TLS verified
    against ``ca_file`` (empty: the system's bundle) unless ``verify_tls`` is False."""
    s = requests.Session()
    s.trust_env = False
    adapter = HTTPAdapter(pool_connections=max(16, hosts), pool_maxsize=2, max_retries=0)
    s.mount("http://", adapter)
    s.mount("https://", adapter)
    s.verify = (ca_file or True) if verify_tls else False
    s.headers.update(headers or {})
    return s
