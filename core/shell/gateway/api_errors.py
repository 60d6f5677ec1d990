"""What the API server answered when it did not do what was asked, and what a step makes of it.

`ApiError` is the one failure a request raises: the HTTP status, the Status object's reason
and its message. `error_for` is the one place it becomes a step's outcome (an exit code,
docs/design.md §3); `with_retries` is the one retry layer.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from typing import Final, TypeVar

from dispatch_k8s.core.rules import shapes
from dispatch_k8s.core.rules.errors import (
    DispatchError,
    Forbidden,
    NotFound,
    PreconditionFailed,
    Refused,
    Transient,
)

T = TypeVar("T")
ATTEMPTS: Final = 4
FIRST_BACKOFF: Final = 0.5  # seconds; doubled after each failed attempt


class ApiError(Exception):
    """A status outside 2xx: `status`, `reason` (the Status's, else the HTTP phrase), `message`.

    `phrase` is the HTTP reason phrase ("Not Found"), `reason` the machine word the API
    server puts in its Status object ("NotFound", "AlreadyExists").
    """

    def __init__(self, status: int, phrase: str, *, reason: str = "", message: str = "") -> None:
        super().__init__(f"{status} {phrase}: {message}")
        self.status = status
        self.phrase = phrase
        self.reason = reason or phrase
        self.message = (message or phrase or "no message").replace("\n", " ")

    @classmethod
    def from_body(cls, status: int, phrase: str, body: bytes) -> ApiError:
        """The error a response of `status` with the (Status object) `body` tells."""
        try:
            decoded = json.loads(body) if body else {}
        except ValueError:
            decoded = {}
        told = shapes.mapping(decoded)
        return cls(
            status,
            phrase,
            reason=str(told.get("reason") or ""),
            message=str(told.get("message") or ""),
        )


def unreadable(error: Exception) -> Exception:
    """An answer (2xx) whose body is not UTF-8 JSON of the shape asked for, as the error to raise.

    The API server's fault (or a proxy's, or a connection cut mid-body), never the step's
    input: not BadInput (2). It is mapped as a connection that failed is, which it may well
    be: as urllib3's DecodeError (an HTTPError) a read is sent again and a write, which may
    have been applied, is not (`retryable`); what is left is Transient (75), as a 5xx is, and
    the step is run again from its read.
    """
    import urllib3

    return urllib3.exceptions.DecodeError(
        f"the API server's answer is unreadable: {' '.join(str(error).split())}"
    )


def is_admission_denial(message: str) -> bool:
    """Whether the API server's message is an admission webhook's or policy's refusal."""
    return "admission webhook" in message or "ValidatingAdmissionPolicy" in message


def is_webhook_failure(message: str) -> bool:
    """Whether a webhook the API server could not call refused the request.

    Its failurePolicy is Fail: the API server answers 500, "failed calling webhook". Admission
    ran, and the webhook's absence refused the request.
    """
    return "failed calling webhook" in message


def error_for(error: ApiError, what: str) -> DispatchError:
    """Map an API error to the step's outcome (docs/design.md §3 exit codes)."""
    status, message = error.status, error.message
    text = f"{what}: {status} {error.phrase}: {message}"
    if is_admission_denial(message):
        return Refused(text)
    if status in (401, 403):
        return Forbidden(text)
    if status == 404:
        return NotFound(text)
    if status == 409:
        return PreconditionFailed(text)
    if status == 410:  # a list's continue token expired: listing again from the start helps
        return Transient(text)
    if status == 422 and "test operation" in message:
        return PreconditionFailed(text)
    if status == 429 or status >= 500:
        return Transient(text)
    return Refused(text)


def retryable(error: Exception, *, write: bool) -> bool:
    """Whether sending again can help, and cannot apply a write twice."""
    import urllib3

    if isinstance(error, ApiError):
        return error.status == 429 or (not write and error.status >= 500)
    if isinstance(error, urllib3.exceptions.MaxRetryError) and error.reason is not None:
        error = error.reason  # what urllib3's own retries ended on
    if isinstance(error, urllib3.exceptions.ConnectTimeoutError):
        return True  # no connection (refused, or it timed out): nothing was sent
    return not write and isinstance(error, urllib3.exceptions.HTTPError)


def why_unreachable(error: Exception) -> str:
    """Why a request got no answer, in words: the system's or TLS's reason, never a type name."""
    import urllib3.exceptions as failed

    if isinstance(error, failed.MaxRetryError) and error.reason is not None:
        error = error.reason  # what urllib3's own retries ended on
    reason = _reason(error)
    # Most specific first: a name that does not resolve is a connection not made, which is
    # a connect timeout in urllib3's hierarchy.
    if isinstance(error, failed.NameResolutionError):
        return f"its host name does not resolve ({reason})"
    if isinstance(error, failed.NewConnectionError):
        return f"no connection ({reason})"
    if isinstance(error, failed.ConnectTimeoutError):
        return "no connection within the request's timeout"
    if isinstance(error, failed.ReadTimeoutError):
        return "no answer within the request's timeout"
    if isinstance(error, failed.SSLError):
        return f"TLS failed ({reason})"
    if isinstance(error, failed.ProxyError):
        return f"the proxy failed ({reason})"
    if isinstance(error, failed.ProtocolError):
        return f"the connection broke ({reason})"
    return f"the connection failed ({reason})"


def _reason(error: BaseException) -> str:
    """The system's words for `error` (`Connection refused`), else its own message's."""
    for inner in (error.__cause__, error.__context__, *error.args):
        if isinstance(inner, OSError) and isinstance(inner.strerror, str) and inner.strerror:
            text = inner.strerror
            break
    else:
        text = str(error.args[0]) if error.args else str(error)
    # Without urllib3's connection repr and OpenSSL's source line: neither is for a person.
    text = re.sub(r"^\w+\(host=[^)]*\): |<[^>]*>: |\s*\(_ssl\.c:\d+\)", "", text)
    return " ".join(text.split()) or "no reason given"


def with_retries(
    request: Callable[[], T],
    *,
    what: str,
    server: str = "",
    write: bool = False,
    attempts: int = ATTEMPTS,
) -> T:
    """`request()`, sent again with backoff while `retryable`; a failure as its DispatchError.

    `server`, the API server's URL, is named when it cannot be reached.
    """
    import urllib3

    backoff = FIRST_BACKOFF
    for attempt in range(1, attempts + 1):
        try:
            return request()
        except (ApiError, urllib3.exceptions.HTTPError) as e:
            if attempt < attempts and retryable(e, write=write):
                time.sleep(backoff)
                backoff *= 2
                continue
            if isinstance(e, ApiError) and e.status:
                raise error_for(e, what) from e
            if isinstance(e, urllib3.exceptions.DecodeError):  # it answered: say what
                raise Transient(f"{what}: {e}") from e
            at = f" at {server}" if server else ""
            raise Transient(f"{what}: API server unreachable{at}: {why_unreachable(e)}") from e
    raise AssertionError("unreachable")  # the loop returns or raises
