"""Hiding credentials that a spec value carries in a URL, wherever gpuforge shows text.

A webhook URL is how Alertmanager reaches a receiver, and most receivers put the credential in it:
a password in the user info (``https://user:secret@host/``), a token in the query (``?token=``) or
the path itself (Slack, Teams, Discord). Problems, plans (text and JSON), apply output and
``render -o`` pass what they show through these functions; nothing else prints file contents.
"""

from __future__ import annotations

import re

REDACTED = "<redacted>"
#: ``scheme://`` then the authority up to the last '@' before the path: the user info.
_USER_INFO = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://)[^\s/?#]*@")
#: A URL's query: after ``://`` and the first '?', up to whitespace, a quote or a fragment.
_QUERY = re.compile(r"(://[^\s?#'\"]*\?)([^\s#'\"]*)")
_QUERY_VALUE = re.compile(r"=[^&]*")
#: An http(s) URL as rendered files hold it: no whitespace or quote inside.
_HTTP_URL = re.compile(r"(?P<scheme>https?)://(?P<authority>[^\s/?#'\"]*)(?P<rest>[^\s'\"]*)", re.IGNORECASE)


def redact_url_credentials(text: str) -> str:
    """``text`` with the user info and every query value of each URL in it replaced by ``<redacted>``.

    ``https://user:secret@host/x?token=t&v=1`` -> ``https://<redacted>@host/x?token=<redacted>&v=<redacted>``.
    """
    text = _USER_INFO.sub(rf"\1{REDACTED}@", text)
    return _QUERY.sub(lambda m: m[1] + _QUERY_VALUE.sub(f"={REDACTED}", m[2]), text)


def redact_webhook_urls(text: str) -> str:
    """``text`` with every http(s) URL cut to its scheme and host: a webhook URL is a credential
    as a whole (``https://hooks.slack.com/services/T/B/X`` -> ``https://hooks.slack.com/<redacted>``).
    A URL that is only a host stays as it is."""

    def hide(m: re.Match[str]) -> str:
        _, at, host = m["authority"].rpartition("@")
        if not at and m["rest"] in ("", "/"):
            return m[0]
        return f"{m['scheme']}://{host}/{REDACTED}"

    return _HTTP_URL.sub(hide, text)
