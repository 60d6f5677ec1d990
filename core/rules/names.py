"""Names as the API server validates them, checked before any request is sent.

The rules of k8s.io/apimachinery's validation: a namespace is an RFC 1123 label (it may start
with a digit: `1team`); most objects' names (a Workload, an AdmissionCheck, a ServiceAccount)
are RFC 1123 subdomains; a TrainJob's name is an RFC 1035 label, as Trainer's CRD requires
(`metadata.name must match RFC 1035 DNS label format`), since its JobSet, Jobs and Services
take it. Each check returns why a value is refused, in words, or None.
"""

from __future__ import annotations

import re
from typing import Final

LABEL_MAX: Final = 63
SUBDOMAIN_MAX: Final = 253
_RFC1123_LABEL: Final = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
RFC1123_LABEL: Final = re.compile(_RFC1123_LABEL)
RFC1035_LABEL: Final = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
RFC1123_SUBDOMAIN: Final = re.compile(rf"{_RFC1123_LABEL}(\.{_RFC1123_LABEL})*")

_RFC1123_LABEL_WORDS: Final = (
    "an RFC 1123 label: 1 to 63 lower-case letters, digits and '-', starting and ending with "
    "a letter or digit"
)
_RFC1035_LABEL_WORDS: Final = (
    "an RFC 1035 label: 1 to 63 lower-case letters, digits and '-', starting with a letter "
    "and ending with a letter or digit"
)
_RFC1123_SUBDOMAIN_WORDS: Final = (
    "an RFC 1123 subdomain: 1 to 253 lower-case letters, digits, '-' and '.', starting and "
    "ending with a letter or digit"
)


def namespace_problem(value: str) -> str | None:
    """Why `value` is no namespace (an RFC 1123 label), or None."""
    if len(value) <= LABEL_MAX and RFC1123_LABEL.fullmatch(value):
        return None
    return f"{value!r} is not a namespace, which is {_RFC1123_LABEL_WORDS}"


def trainjob_name_problem(value: str) -> str | None:
    """Why `value` is no TrainJob name (an RFC 1035 label), or None."""
    if len(value) <= LABEL_MAX and RFC1035_LABEL.fullmatch(value):
        return None
    return f"{value!r} is not a TrainJob name, which is {_RFC1035_LABEL_WORDS}"


def label_name_problem(value: str) -> str | None:
    """Why `value` is no RFC 1035 label (a name that is also a label's value), or None."""
    if len(value) <= LABEL_MAX and RFC1035_LABEL.fullmatch(value):
        return None
    return f"{value!r} is not {_RFC1035_LABEL_WORDS}"


def object_name_problem(value: str) -> str | None:
    """Why `value` is no object name (an RFC 1123 subdomain), or None."""
    if len(value) <= SUBDOMAIN_MAX and RFC1123_SUBDOMAIN.fullmatch(value):
        return None
    return f"{value!r} is not an object name, which is {_RFC1123_SUBDOMAIN_WORDS}"
