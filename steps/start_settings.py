"""`dispatch-start`'s settings: the request from a file, env and flags; the runtime file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import ValidationError

from dispatch_k8s.core.rules.errors import BadInput
from dispatch_k8s.core.rules.request import (
    RequestError,
    RuntimeKind,
    StartRequest,
    parse_start_request,
)
from dispatch_k8s.core.shell.settings import (
    NAMESPACE_DEFAULT,
    DryRunFlag,
    WritingSettings,
    describe_settings_error,
    doc,
    read_document,
    snake_case,
)


class StartSettings(WritingSettings):
    """`dispatch-start`: the request from a file, env or flags (in rising precedence)."""

    verbatim_lists: ClassVar[tuple[str, ...]] = ("command", "args")

    request_file: Annotated[
        Path | None,
        doc(
            "A JSON or YAML file holding the start request (keys snake_case, camelCase or "
            "kebab-case); env and flags override its fields.",
            metavar="FILE",
            default="none",
        ),
    ] = None
    runtime_file: Annotated[
        Path | None,
        doc(
            "With --dry-run=client: the (Cluster)TrainingRuntime as a JSON or YAML file, read "
            "instead of the cluster's; it names the runtime unless the request does.",
            metavar="FILE",
            default="none",
        ),
    ] = None
    dry_run: Annotated[
        DryRunFlag,
        doc(
            "client prints the TrainJob that would be created and contacts no cluster (needs "
            "--runtime-file); server reads as a real start does and sends each create (the "
            "ledger's records, the TrainJob) with dryRun=All, so admission policies and "
            "webhooks answer (a refusal is exit 6) and nothing is persisted; none creates. "
            "--dry-run alone is client, --no-dry-run none.",
            metavar="none|client|server",
            default="none",
        ),
    ] = "none"
    kueue_mode: Annotated[
        Literal["check", "policy"],
        doc(
            "How the cluster's Kueue admissions raise A, with --queue (docs/install.md: Kueue: "
            "policy mode or check mode). check: the dispatch AdmissionCheck gates each "
            "admission, so a job whose pods request nothing is refused (Kueue would admit it "
            "without the check). policy: the MutatingAdmissionPolicy raise-on-open raises A in "
            "Kueue's opening whatever Kueue assigns, so such a job is started too.",
            metavar="check|policy",
        ),
    ] = "check"

    job_id: Annotated[
        str | None,
        doc(
            "The job's ID: 1-128 of [A-Za-z0-9._-], starting with a letter or digit.",
            metavar="ID",
            default="required: here, in its env variable or in --request-file",
        ),
    ] = None
    generation: Annotated[
        int | None,
        doc(
            "The job generation G, >= 0: the epoch's leading digits, G x 10^12.",
            metavar="G",
            default="required: here, in its env variable or in --request-file",
        ),
    ] = None
    submission: Annotated[
        int | None,
        doc(
            "The submission number N, 0 <= N < 1000000: the epoch's middle digits; "
            "G x 10^6 + N must be at least 1.",
            metavar="N",
            default="required: here, in its env variable or in --request-file",
        ),
    ] = None
    attempt: Annotated[
        int | None,
        doc(
            "The attempt number, >= 0: the job sees DISPATCH_ATTEMPT <ID>.<N>.<attempt>.<A>.<J>.",
            metavar="ATTEMPT",
            default="required: here, in its env variable or in --request-file",
        ),
    ] = None
    image: Annotated[
        str | None,
        doc(
            "The training image.",
            metavar="IMAGE",
            default="required: here, in its env variable or in --request-file",
        ),
    ] = None
    command: Annotated[
        list[str] | None,
        doc(
            "One word of the training command; repeat the flag once per word (--command python "
            "--command train.py). Each word is kept exactly as given; an image ENTRYPOINT "
            "cannot be wrapped, so a command is needed.",
            metavar="WORD",
            default="required: here, in its env variable or in --request-file",
        ),
    ] = None
    args: Annotated[
        list[str] | None,
        doc(
            "One argument after the command; repeat once per word (--args=--lr --args=0.1). "
            "Passed untouched in spec.trainer.args.",
            metavar="WORD",
            default="none",
        ),
    ] = None
    env: Annotated[
        dict[str, str] | None,
        doc(
            "One environment variable of the job; repeat once per variable. Names are "
            "[A-Za-z_][A-Za-z0-9_]*; DISPATCH_* names are refused.",
            metavar="KEY=VALUE",
            default="none",
        ),
    ] = None
    workdir: Annotated[
        str | None,
        doc(
            "The absolute directory the prologue enters before the command runs.",
            metavar="DIR",
            default="the image's",
        ),
    ] = None
    runtime_kind: Annotated[
        RuntimeKind | None,
        doc(
            "The kind of the runtime: ClusterTrainingRuntime or TrainingRuntime.",
            metavar="KIND",
            default="ClusterTrainingRuntime",
        ),
    ] = None
    runtime_name: Annotated[
        str | None,
        doc(
            "The dispatch-ready runtime the job runs on (start refuses one that is not).",
            metavar="NAME",
            default="required, unless --runtime-file names it",
        ),
    ] = None
    num_nodes: Annotated[
        int | None,
        doc("The number of nodes, >= 1.", metavar="N", default="the runtime's"),
    ] = None
    resources_per_node: Annotated[
        dict[str, dict[str, str | int]] | None,
        doc(
            'Resources of each node\'s trainer container, as JSON: \'{"requests":{"cpu":"1"}}\' '
            "(limits and requests). In Kueue mode the pods must request something.",
            metavar="JSON",
            default="the runtime's",
        ),
    ] = None
    queue: Annotated[
        str | None,
        doc(
            "A Kueue LocalQueue: Kueue mode, where dispatch-admit and dispatch-approve gate "
            "every admission.",
            metavar="NAME",
            default="none: plain mode (dispatch-unsuspend opens the job)",
        ),
    ] = None
    priority_class: Annotated[
        str | None,
        doc("A Kueue WorkloadPriorityClass (needs --queue).", metavar="NAME", default="none"),
    ] = None
    namespace: Annotated[
        str | None,
        doc(
            "The namespace the TrainJob is made in.", metavar="NAMESPACE", default=NAMESPACE_DEFAULT
        ),
    ] = None
    name: Annotated[
        str | None,
        doc(
            "The TrainJob's name, a DNS-1035 label.",
            metavar="NAME",
            default="<slug of the job ID>-<hash of job ID, G, N and attempt>",
        ),
    ] = None

    def start_request(self, *, runtime_defaults: dict[str, str] | None = None) -> StartRequest:
        """Merge the request file, env and flags, and validate the result."""
        fields: dict[str, Any] = dict(runtime_defaults or {})
        if self.request_file is not None:
            document = read_document(self.request_file, what="request file")
            keys = [key for key in document if not isinstance(key, str)]
            if keys:  # YAML allows any key: 1, null, true
                raise BadInput(f"request file {self.request_file}: key {keys[0]!r} is not a name")
            fields.update({snake_case(key): value for key, value in document.items()})
        given = self.model_fields_set & set(StartRequest.model_fields)
        fields.update({key: getattr(self, key) for key in given})
        if "namespace" not in fields:  # neither the file, the env nor a flag names one
            fields["namespace"] = self.default_namespace()
        try:
            return parse_start_request(fields)
        except RequestError as e:
            cause = e.__cause__  # each field of the request is a flag of start's
            told = (
                describe_settings_error(cause, request_file=True)
                if isinstance(cause, ValidationError)
                else str(e)
            )
            raise BadInput(f"start request refused: {told}") from e
