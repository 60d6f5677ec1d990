"""The one hierarchy of expected failures; each carries the exit code it leaves with."""

from __future__ import annotations

from typing import ClassVar


class DispatchError(Exception):
    """An expected failure, told in one line. Raise a subclass."""

    exit_code: ClassVar[int] = 1


class BadInput(DispatchError):
    """The request, a flag or a file is malformed: fix the input."""

    exit_code = 2


class PreconditionFailed(DispatchError):
    """Changed since it was read: re-read and run the stage again."""

    exit_code = 3


class NotFound(DispatchError):
    """An object the step needs does not exist."""

    exit_code = 4


class Forbidden(DispatchError):
    """The API server refused the credentials (401/403)."""

    exit_code = 5


class Refused(DispatchError):
    """A rule refuses the request (not suspended, runtime invalid, bound reached, webhook)."""

    exit_code = 6


class Foreign(DispatchError):
    """The audit found a sign of a reset, or the job is flagged foreign: a person decides."""

    exit_code = 7


class NotOpened(DispatchError):
    """Opened, but Trainer could not open the JobSet (its reason told): a person decides.

    Nothing runs until what Trainer names is put right (docs/operations.md: A job not opened).
    """

    exit_code = 9


class NotHeld(DispatchError):
    """Held, but Trainer could not suspend the JobSet (its reason told): a person decides.

    What runs goes on until what Trainer names is put right (docs/operations.md: A job not
    held).
    """

    exit_code = 10


class Transient(DispatchError):
    """The API was unreachable or overloaded after bounded retries: run the step again."""

    exit_code = 75


class Expired(Transient):
    """A watch's resourceVersion is too old for the API server (410): list again."""


class Fenced(Transient):
    """A write refused before it was sent: this replica no longer leads.

    Its Lease was not renewed in time, so another may lead by now; the controller exits and
    its Deployment starts it again.
    """


class OutOfTime(Transient):
    """The step's overall deadline (--request-timeout) passed: no request is sent or awaited."""
