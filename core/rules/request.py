"""The start request: what a dispatcher asks for, validated before anything is built."""

from __future__ import annotations

import hashlib
import re
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from dispatch_k8s.core.rules import names, wire
from dispatch_k8s.core.rules.identity import Identity, IdentityError

# Kubernetes accepts any printable env name without '='; a C identifier is what every shell
# can also read, and Start refuses names it could not hand through the prologue.
ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
DEFAULT_NAME_SLUG_MAX: Final = 20
RuntimeKind = Literal["ClusterTrainingRuntime", "TrainingRuntime"]
Quantity = str | int


class StartRequest(BaseModel):
    """Everything `start` needs; each field is checked with a reason when it is refused."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    job_id: str
    generation: Annotated[int, Field(ge=0)]
    submission: Annotated[int, Field(ge=0)]
    attempt: Annotated[int, Field(ge=0)]
    image: Annotated[str, Field(min_length=1, max_length=500)]
    command: Annotated[list[str], Field(min_length=1)]
    args: list[str] = []
    env: dict[str, str] = {}
    workdir: str | None = None
    runtime_kind: RuntimeKind = "ClusterTrainingRuntime"
    runtime_name: Annotated[str, Field(min_length=1, max_length=253)]
    num_nodes: Annotated[int, Field(ge=1)] | None = None
    resources_per_node: dict[Literal["limits", "requests"], dict[str, Quantity]] | None = None
    queue: Annotated[str, Field(min_length=1, max_length=63)] | None = None
    priority_class: Annotated[str, Field(min_length=1, max_length=253)] | None = None
    namespace: str = "default"
    name: str | None = None

    @field_validator("command")
    @classmethod
    def _command_runs_something(cls, command: list[str]) -> list[str]:
        # The prologue exec's "$@"; shells disagree on how `exec -x` is read.
        if command[0] == "" or command[0].startswith("-"):
            raise ValueError("the first word must name a program: not empty, no leading '-'")
        return command

    @field_validator("env")
    @classmethod
    def _env_is_the_jobs_own(cls, env: dict[str, str]) -> dict[str, str]:
        for key in env:
            if key.startswith(wire.RESERVED_ENV_PREFIX):
                raise ValueError(f"key {key!r} is refused: DISPATCH_* names are reserved")
            if not ENV_NAME.fullmatch(key):
                raise ValueError(f"key {key!r} is not a name of the form [A-Za-z_][A-Za-z0-9_]*")
        return env

    @field_validator("workdir")
    @classmethod
    def _workdir_is_absolute(cls, workdir: str | None) -> str | None:
        if workdir is not None and not workdir.startswith("/"):
            raise ValueError(f"{workdir!r} must be an absolute path")
        return workdir

    @field_validator("namespace")
    @classmethod
    def _is_a_namespace(cls, value: str) -> str:
        return _checked(value, names.namespace_problem(value))

    @field_validator("name")
    @classmethod
    def _is_a_trainjob_name(cls, value: str | None) -> str | None:
        return value if value is None else _checked(value, names.trainjob_name_problem(value))

    @field_validator("queue")
    @classmethod
    def _is_a_label(cls, value: str | None) -> str | None:
        # The LocalQueue's name is also the TrainJob's kueue.x-k8s.io/queue-name label.
        return value if value is None else _checked(value, names.label_name_problem(value))

    @model_validator(mode="after")
    def _priority_needs_a_queue(self) -> StartRequest:
        if self.priority_class is not None and self.queue is None:
            raise ValueError("priority_class is a Kueue WorkloadPriorityClass: it needs a queue")
        return self

    @model_validator(mode="after")
    def _identity_in_bounds(self) -> StartRequest:
        self.identity  # noqa: B018 - building it checks every epoch bound
        return self

    @property
    def identity(self) -> Identity:
        """JobID, G, N and attempt: checked against every epoch bound when built."""
        return Identity(
            job_id=self.job_id,
            generation=self.generation,
            submission=self.submission,
            attempt=self.attempt,
        )

    @property
    def trainjob_name(self) -> str:
        """The TrainJob's name: the one given, or one derived from the identity."""
        return self.name or default_name(self.identity)


def _checked(value: str, problem: str | None) -> str:
    if problem is not None:
        raise ValueError(problem)
    return value


def default_name(identity: Identity) -> str:
    """A DNS-1035 name that is the same for the same identity and differs between identities.

    The readable part is a slug of the JobID; the hash keeps identities apart that slug
    alike (`A_b` and `a-b`) and carries G, N and the attempt.
    """
    slug = re.sub(r"[^a-z0-9]+", "-", identity.job_id.lower()).strip("-")
    slug = slug[:DEFAULT_NAME_SLUG_MAX].rstrip("-")
    if not slug or not slug[0].isalpha():
        slug = f"job-{slug}".rstrip("-")
    key = f"{identity.job_id}\n{identity.generation}\n{identity.submission}\n{identity.attempt}"
    return f"{slug}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"


def parse_start_request(fields: dict[str, Any]) -> StartRequest:
    """Validate a request; every problem is told in one line naming the field."""
    try:
        return StartRequest.model_validate(fields)
    except ValidationError as e:
        raise RequestError(describe_validation_error(e)) from e
    except IdentityError as e:
        raise RequestError(str(e)) from e


class RequestError(ValueError):
    """The start request is refused; the message is one line."""


def describe_validation_error(error: ValidationError) -> str:
    """One line out of pydantic's many: `field: reason; field: reason`."""
    parts = []
    for item in error.errors():
        where = ".".join(str(p) for p in item["loc"]) or "request"
        message = item["msg"].removeprefix("Value error, ")
        parts.append(f"{where}: {message}")
    return "; ".join(parts).replace("\n", " ")
