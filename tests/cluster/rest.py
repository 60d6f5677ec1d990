"""A minimal JSON client for the harness's own API calls (readiness, CRDs, webhook configurations).

The harness talks raw JSON so upstream manifests reach the apiserver exactly as read, never
round-tripped through the generated Python models (which drop fields they do not know).
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

TIMEOUT_SECONDS: Final = 30.0


class ApiError(Exception):
    """The apiserver answered with an error status."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:2000]}")
        self.status = status
        self.body = body


@dataclass(frozen=True, slots=True, kw_only=True)
class RestClient:
    """Authenticated JSON requests to one apiserver over TLS."""

    server: str  # https://127.0.0.1:<port>
    ca_file: Path
    cert_file: Path
    key_file: Path

    def _context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        context.load_cert_chain(str(self.cert_file), str(self.key_file))
        return context

    def request(self, method: str, path: str, body: Any = None) -> Any:
        """Send one request; return the decoded JSON (or text) body, raise ApiError on >= 400."""
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.server + path, data=data, method=method)
        if data is not None:
            request.add_header("Content-Type", "application/json")
        request.add_header("Accept", "application/json")
        try:
            with urllib.request.urlopen(
                request, context=self._context(), timeout=TIMEOUT_SECONDS
            ) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as e:
            raise ApiError(e.code, e.read().decode(errors="replace")) from e
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            return text

    def get(self, path: str) -> Any:
        """GET `path`."""
        return self.request("GET", path)

    def post(self, path: str, body: Any) -> Any:
        """POST `body` to `path`."""
        return self.request("POST", path, body)
