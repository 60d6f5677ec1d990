"""Runtime requirements (docs/design.md §2): what a (Cluster)TrainingRuntime must state.

A runtime that does not state it is not dispatched.

allowRankRestart is the runtime annotation `dispatch.phpboyscout.uk/allow-rank-restart: "true"`
(every waivable mechanism), and `dispatch.phpboyscout.uk/allow-restarts: sidecars,torchrun`
allows mechanisms one by one (MECHANISMS). The platform engineer who owns the runtime knows
whether its ranks may be replaced without A or J moving; a start request cannot override that,
so there is no start setting for it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from dispatch_k8s.core.rules import shapes
from dispatch_k8s.core.rules.wire import (
    ALLOW_RANK_RESTART_ANNOTATION,
    ALLOW_RESTARTS_ANNOTATION,
    ANCESTOR_LABEL,
    ANCESTOR_TRAINER,
    MPI_WORKER_JOB,
    TRAINER_CONTAINER,
)

# A runtime's spec.template.spec is a full JobSetSpec (Trainer's source).
JOBSET_SPEC: Final = "spec.template.spec"
_ALLOW_PATH: Final = f"metadata.annotations['{ALLOW_RANK_RESTART_ANNOTATION}']"
_UNMOVED: Final = "moving neither A nor J"
_ALLOW_LIST_PATH: Final = f"metadata.annotations['{ALLOW_RESTARTS_ANNOTATION}']"
# The mechanisms a runtime's owner may allow one by one, each waiving exactly these settings:
SIDECARS: Final = "sidecars"  # initContainers[].restartPolicy: Always (and their rules)
CONTAINER_RESTART: Final = "container-restart"  # other containers' restartPolicy / rules
POD_FAILURE_IGNORE: Final = "pod-failure-ignore"  # podFailurePolicy rules with action Ignore
RESTART_JOB: Final = "restart-job"  # JobSet RestartJob / RestartJobAndIgnoreMaxRestarts rules
TORCHRUN: Final = "torchrun"  # PET_MAX_RESTARTS, --max-restarts, an envFrom that may set them
MECHANISMS: Final = (SIDECARS, CONTAINER_RESTART, POD_FAILURE_IGNORE, RESTART_JOB, TORCHRUN)

# Only the failed child Job is recreated: status.restarts (J) stays the same (jobset.md §1.5).
_JOB_RESTART_ACTIONS: Final = frozenset({"RestartJob", "RestartJobAndIgnoreMaxRestarts"})

# torchrun restarts every local worker in place up to --max-restarts times (PET_MAX_RESTARTS is
# its env form). Its parser takes any prefix of a long option that names one option, so
# `--max` to `--max-restarts` (or `_`) all count. A flag word at the end of a string takes its
# value from the next word.
_MAX_RESTARTS_FLAG: Final = r"--max(?:[-_](?:r(?:e(?:s(?:t(?:a(?:r(?:t(?:s)?)?)?)?)?)?)?)?)?"
_IN_PROCESS_RESTARTS: Final = re.compile(
    rf"((?<![\w-]){_MAX_RESTARTS_FLAG}(?:=|\s+|$)|\bPET_MAX_RESTARTS=)(\S*)"
)
PET_MAX_RESTARTS: Final = "PET_MAX_RESTARTS"
_TORCHRUN_PROGRAM: Final = re.compile(r"\btorchrun\b|torch\.distributed\.(?:run|launch)\b")


@dataclass(frozen=True, slots=True, kw_only=True)
class Violation:
    """One setting that keeps a runtime from being dispatched, and what is required instead."""

    path: str  # full field path from the root of what is checked (runtime, JobSet or Job)
    message: str  # what is required, and why

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def decide_violations(
    runtime: Mapping[str, Any], request: Mapping[str, Any] | None = None
) -> tuple[Violation, ...]:
    """Return every violation of the runtime requirements; empty means dispatch-ready.

    `request` is what the start request puts in spec.trainer (`command`, `args`, `env`): the
    words that run under the prologue, checked like a container's. The prologue's command
    always replaces the trainer container's, so that command never runs and is not checked;
    its args run unless the request gives its own.
    """
    check = _Check()
    check.allowed = _allowed_mechanisms(runtime, check)
    spec = check.mapping(runtime.get("spec"), "spec")
    template = check.mapping(spec.get("template"), "spec.template")
    jobset = check.mapping(template.get("spec"), JOBSET_SPEC)
    _check_ml_policy(spec, check)
    replaced = ("command", "args") if request and request.get("args") else ("command",)
    _check_jobset_spec(jobset, JOBSET_SPEC, check, runtime_spec=spec, replaced=replaced)
    if request is not None:
        env = request.get("env") or {}
        words = {
            "command": list(request.get("command") or []),
            "args": list(request.get("args") or []),
            "env": [{"name": key, "value": value} for key, value in sorted(env.items())],
        }
        _check_env_and_words("request", words, check)
    return tuple(check.violations)


def decide_violations_in_jobset(
    jobset_spec: Any, *, path: str, allowed: frozenset[str]
) -> tuple[Violation, ...]:
    """Return the violations in a live JobSet's spec (at `path`), the mechanisms `allowed` waived.

    `allowed` is what the job's runtime allowed when start checked it. The runtime may have
    been edited after start, or the JobSet by hand. The trainer label lives in the runtime, so
    a JobSet need not hold a labelled job: only the jobs it labels are checked.
    """
    check = _Check(allowed=allowed)
    jobset = check.mapping(jobset_spec, path)
    _check_jobset_spec(jobset, path, check, runtime_spec=None, replaced=("command",))
    return tuple(check.violations)


def decide_violations_in_trainer_job(
    job: Mapping[str, Any], *, allowed: frozenset[str]
) -> tuple[Violation, ...]:
    """Return the violations in a trainer child Job as it is now, against the mechanisms allowed.

    Paths are from the Job's root. Its trainer container's command is the prologue's, as in
    every trainer job the runtime rules check.
    """
    check = _Check(allowed=allowed)
    _check_job("spec", job.get("spec"), check, replaced=("command",))
    return tuple(check.violations)


def allowed_mechanisms(runtime: Mapping[str, Any]) -> frozenset[str]:
    """The mechanisms a runtime's owner allows; what it cannot read, decide_violations refuses."""
    return _allowed_mechanisms(runtime, _Check())


def build_allowed(allowed: frozenset[str]) -> str:
    """The record of the mechanisms allowed: their names in MECHANISMS order, comma-separated."""
    return ",".join(name for name in MECHANISMS if name in allowed)


def parse_allowed(value: str) -> frozenset[str] | None:
    """The mechanisms a record names; None when it names one that is not a mechanism."""
    names = [name.strip() for name in value.split(",")] if value.strip() else []
    return frozenset(names) if all(name in MECHANISMS for name in names) else None


def build_refusal(runtime: Mapping[str, Any], violations: Sequence[Violation]) -> str:
    """Return the one-line refusal naming the runtime and each violation's field path."""
    metadata = runtime.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    kind, runtime_name = runtime.get("kind"), metadata.get("name")
    name = f"{shapes.printable_word(kind)}/{shapes.printable_word(runtime_name)}"
    if metadata.get("namespace"):
        name += f" in namespace {shapes.printable_word(metadata.get('namespace'))}"
    return f"{name} is not dispatch-ready: " + "; ".join(map(str, violations))


def trainer_job_name(runtime: Mapping[str, Any]) -> str | None:
    """Return the name of the trainer job (the first labelled ancestor step trainer), if any."""
    for job in _replicated_jobs(runtime):
        if shapes.at(job, "template", "metadata", "labels").get(ANCESTOR_LABEL) == ANCESTOR_TRAINER:
            return _name_of(job)
    return None


class _Check:
    """Collects violations while walking one runtime; a malformed shape is one, never a crash."""

    def __init__(self, *, allowed: frozenset[str] = frozenset()) -> None:
        self.violations: list[Violation] = []
        self.allowed = allowed  # the mechanisms the runtime's owner allows

    def refuse(self, path: str, message: str) -> None:
        self.violations.append(Violation(path=path, message=message))

    def refuse_unless(self, mechanism: str, path: str, message: str) -> None:
        """Refuse a setting the runtime's owner may allow, saying how, unless allowed."""
        if mechanism not in self.allowed:
            self.refuse(path, f"{message} (allowed by {ALLOW_RESTARTS_ANNOTATION}: {mechanism})")

    def mapping(self, value: Any, path: str) -> Mapping[str, Any]:
        """Return `value` as a mapping; unset is empty, any other shape is refused."""
        if value is None:
            return {}
        if isinstance(value, Mapping):
            return value
        self.refuse(path, f"must be a mapping, not {_shape(value)}")
        return {}

    def items(self, value: Any, path: str) -> Sequence[Any]:
        """Return `value` as a list; unset is empty, any other shape is refused."""
        if value is None:
            return ()
        if isinstance(value, list):
            return value
        self.refuse(path, f"must be a list, not {_shape(value)}")
        return ()

    def mappings(self, value: Any, path: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
        """Yield each entry of a list of mappings with its path, refusing any other entry."""
        for index, item in enumerate(self.items(value, path)):
            item_path = f"{path}[{index}]"
            if isinstance(item, Mapping):
                yield item_path, item
            else:
                self.refuse(item_path, f"must be a mapping, not {_shape(item)}")


# A quantity of nothing: "0", "0.0", "0m", "0Gi"... (Kubernetes resource.Quantity forms).
_ZERO_QUANTITY: Final = re.compile(r"[+]?0*(\.0*)?([a-zA-Z]{1,2})?")


def requested_resources(
    runtime: Mapping[str, Any], resources_per_node: Mapping[Any, Mapping[str, Any]] | None
) -> set[str]:
    """The resources the TrainJob's pods would request: Kueue assigns flavors for these.

    Requests and limits both count (a limit alone is the request); so do init containers and
    every replicated job, since Kueue admits the pod sets of all of them together.
    """
    specs: list[Mapping[str, Any] | None] = [resources_per_node]
    for job in _replicated_jobs(runtime):
        pod = shapes.at(job, "template", "spec", "template", "spec")
        for field in ("containers", "initContainers"):
            specs += [shapes.at(c, "resources") for c in shapes.mappings(pod.get(field))]
    return {
        name
        for spec in specs
        for kind in ("requests", "limits")
        for name, quantity in shapes.at(spec, kind).items()
        if not _ZERO_QUANTITY.fullmatch(str(quantity))
    }


def _allowed_mechanisms(runtime: Mapping[str, Any], check: _Check) -> frozenset[str]:
    metadata = check.mapping(runtime.get("metadata"), "metadata")
    annotations = check.mapping(metadata.get("annotations"), "metadata.annotations")
    allowed: set[str] = set()
    value = annotations.get(ALLOW_RANK_RESTART_ANNOTATION)
    if value == "true":
        allowed |= set(MECHANISMS)
    elif value is not None and value != "":
        # Refused, not read as false: the owner of a typo ("yes", "True") learns it did nothing.
        check.refuse(_ALLOW_PATH, f'must be "true" or absent, not {shapes.shown(value)}')
    listed = annotations.get(ALLOW_RESTARTS_ANNOTATION)
    if listed is None or listed == "":
        return frozenset(allowed)
    names = [name.strip() for name in listed.split(",")] if isinstance(listed, str) else None
    unknown = [name for name in names or [] if name not in MECHANISMS]
    if names is None or unknown:
        check.refuse(
            _ALLOW_LIST_PATH,
            f"must list mechanisms from {', '.join(MECHANISMS)} (comma-separated), not "
            f"{shapes.shown(listed)}",
        )
        return frozenset(allowed)
    return frozenset(allowed | set(names))


def _check_ml_policy(spec: Mapping[str, Any], check: _Check) -> None:
    ml_policy = check.mapping(spec.get("mlPolicy"), "spec.mlPolicy")
    if ml_policy.get("flux") is not None:
        check.refuse(
            "spec.mlPolicy.flux",
            "must be unset: Flux joins the trainer command into one string, which breaks the "
            "prologue, and its launcher runs `flux start` again in place",
        )


def _check_jobset_spec(
    jobset: Mapping[str, Any],
    path: str,
    check: _Check,
    *,
    runtime_spec: Mapping[str, Any] | None,
    replaced: tuple[str, ...],
) -> None:
    """Check a JobSet spec at `path`: a runtime's template (`runtime_spec`) or a live JobSet's.

    `replaced` names what the start request replaces in the trainer container, so is not checked.
    """
    _check_jobset(jobset, path, check)
    _check_failure_policy(jobset, path, check)
    for template_path, job_template, is_trainer in _checked_jobs(runtime_spec, jobset, path, check):
        _check_job(
            f"{template_path}.spec",
            job_template.get("spec"),
            check,
            replaced=replaced if is_trainer else (),
        )


def _check_jobset(jobset: Mapping[str, Any], path: str, check: _Check) -> None:
    ttl = jobset.get("ttlSecondsAfterFinished")
    if ttl is not None:
        check.refuse(
            f"{path}.ttlSecondsAfterFinished",
            "must be unset: once the finished JobSet is deleted, Trainer v2.2.1 builds a new one "
            f"whose J starts at 0 again (kubeflow/trainer#3779), {_UNMOVED} upwards",
        )
    if jobset.get("managedBy") is not None:
        check.refuse(
            f"{path}.managedBy",
            "must be unset: the JobSet controller skips a JobSet another controller manages, "
            "and whether that one raises J on a restart is unknown",
        )


def _checked_jobs(
    runtime_spec: Mapping[str, Any] | None,
    jobset: Mapping[str, Any],
    jobset_path: str,
    check: _Check,
) -> list[tuple[str, Mapping[str, Any], bool]]:
    """Return path, Job template and trainer-ness of the trainer job and MPI's `node` workers.

    Without `runtime_spec` (a live JobSet's spec) there is no mlPolicy to read, and neither a
    labelled job nor a list of jobs is required: the trainer label lives in the runtime.
    """
    jobs = jobset.get("replicatedJobs")
    is_mpi = False
    if runtime_spec is not None:
        ml_policy = check.mapping(runtime_spec.get("mlPolicy"), "spec.mlPolicy")
        is_mpi = ml_policy.get("mpi") is not None
    elif not isinstance(jobs, list):
        return []
    jobs_path = f"{jobset_path}.replicatedJobs"
    checked: list[tuple[str, Mapping[str, Any], bool]] = []
    trainer_found = False
    for path, job in check.mappings(jobs, jobs_path):
        template = check.mapping(job.get("template"), f"{path}.template")
        metadata = check.mapping(template.get("metadata"), f"{path}.template.metadata")
        labels = check.mapping(metadata.get("labels"), f"{path}.template.metadata.labels")
        is_trainer = labels.get(ANCESTOR_LABEL) == ANCESTOR_TRAINER
        if is_trainer and not _name_of(job):
            check.refuse(f"{path}.name", "must be stated: the runtime patch names the trainer job")
        if is_trainer and trainer_found:
            check.refuse(
                f"{path}.template.metadata.labels['{ANCESTOR_LABEL}']",
                "must label one replicated job only: Trainer gives every labelled job the "
                "trainer's command, but A is patched onto the first, so this one would run "
                "without it",
            )
            continue
        trainer_found = trainer_found or is_trainer
        # MPI ranks run in the sshd workers too, so they fail and restart like the launcher.
        if is_trainer or (is_mpi and job.get("name") == MPI_WORKER_JOB):
            checked.append((f"{path}.template", template, is_trainer))
    if runtime_spec is not None and not trainer_found:
        check.refuse(jobs_path, f"must hold the trainer job, labelled {ANCESTOR_LABEL}: trainer")
    return checked


def _check_job(
    job_path: str,
    job_spec: Any,
    check: _Check,
    *,
    replaced: tuple[str, ...],
) -> None:
    job = check.mapping(job_spec, job_path)
    pod_template = check.mapping(job.get("template"), f"{job_path}.template")
    pod_path = f"{job_path}.template.spec"
    pod = check.mapping(pod_template.get("spec"), pod_path)
    # Required even with allowRankRestart (docs/design.md §2): these are the defaults every upstream
    # runtime inherits unstated, so no runtime passes by accident; the annotation opts in only to
    # the explicit mechanisms checked below.
    _require_restart_policy_never(pod.get("restartPolicy"), f"{pod_path}.restartPolicy", check)
    _require_backoff_limit_zero(job.get("backoffLimit"), f"{job_path}.backoffLimit", check)
    # Never waivable: with backoffLimit 0 a per-index limit does not work, and a deleted or
    # foreign-managed Job is recreated or retried under the same A and J.
    for field in ("backoffLimitPerIndex", "maxFailedIndexes"):
        if job.get(field) is not None:
            check.refuse(
                f"{job_path}.{field}",
                f"must be unset: it retries a failed index, {_UNMOVED}, and cannot work with "
                "backoffLimit: 0",
            )
    if job.get("ttlSecondsAfterFinished") is not None:
        check.refuse(
            f"{job_path}.ttlSecondsAfterFinished",
            "must be unset: JobSet recreates a deleted child Job under the same restart attempt, "
            f"so it could run again, {_UNMOVED}",
        )
    if job.get("managedBy") is not None:
        check.refuse(
            f"{job_path}.managedBy",
            "must be unset: the Job controller skips a Job another controller manages, and "
            "whether that one replaces a failed pod is unknown",
        )
    policy = check.mapping(job.get("podFailurePolicy"), f"{job_path}.podFailurePolicy")
    for rule_path, rule in check.mappings(
        policy.get("rules"), f"{job_path}.podFailurePolicy.rules"
    ):
        if rule.get("action") == "Ignore":
            check.refuse_unless(
                POD_FAILURE_IGNORE,
                f"{rule_path}.action",
                f"must not be Ignore: the failure is not counted and the pod is replaced, "
                f"{_UNMOVED}",
            )
    for field in ("initContainers", "containers"):
        for container_path, container in check.mappings(pod.get(field), f"{pod_path}.{field}"):
            is_trainer_container = (
                field == "containers" and container.get("name") == TRAINER_CONTAINER
            )
            skipped = replaced if is_trainer_container else ()
            restarts = SIDECARS if field == "initContainers" else CONTAINER_RESTART
            _check_container(container_path, container, check, replaced=skipped, restarts=restarts)


def _require_restart_policy_never(value: Any, path: str, check: _Check) -> None:
    if value is None:
        check.refuse(
            path,
            "must be stated as Never: unset, JobSet defaults it to OnFailure and the kubelet "
            f"restarts a failed container in place, {_UNMOVED}",
        )
    elif value != "Never":
        check.refuse(
            path,
            f"must be Never, not {shapes.shown(value)}: the kubelet would restart a failed "
            f"container in place, {_UNMOVED}",
        )


def _require_backoff_limit_zero(value: Any, path: str, check: _Check) -> None:
    if value is None:
        check.refuse(
            path,
            "must be stated as 0: unset, Kubernetes defaults it to 6 and the Job controller "
            f"replaces a failed pod, {_UNMOVED}",
        )
    elif not (type(value) is int and value == 0):  # `type`: YAML false is not 0
        check.refuse(
            path,
            f"must be 0, not {shapes.shown(value)}: the Job controller would replace a failed pod, "
            f"{_UNMOVED}",
        )


def _check_container(
    path: str,
    container: Mapping[str, Any],
    check: _Check,
    *,
    replaced: tuple[str, ...],
    restarts: str,
) -> None:
    # An explicit Never restarts nothing; any other container-level policy (KEP-5307 rules, or
    # Always on an init container) makes the kubelet restart it in place even when the pod says
    # Never. Sidecars (init containers with Always) count as a rank restart: the sidecar is part
    # of the rank's pod, runs without the prologue, and nothing in the spec tells a stateless
    # proxy from one that does the rank's work (loading data, uploading its checkpoints), so the
    # runtime's owner must vouch for it (`sidecars`: a log shipper may restart, the trainer
    # container, never a sidecar, still may not).
    policy = container.get("restartPolicy")
    if policy is not None and policy != "Never":
        check.refuse_unless(
            restarts,
            f"{path}.restartPolicy",
            f"must be unset or Never, not {shapes.shown(policy)}: the kubelet restarts the "
            f"container in place, {_UNMOVED}",
        )
    if container.get("restartPolicyRules"):
        check.refuse_unless(
            restarts,
            f"{path}.restartPolicyRules",
            f"must be unset: a Restart rule restarts the container in place, {_UNMOVED}",
        )
    for source_path, source in check.mappings(container.get("envFrom"), f"{path}.envFrom"):
        prefix = source.get("prefix") or ""
        if isinstance(prefix, str) and PET_MAX_RESTARTS.startswith(prefix):
            check.refuse_unless(
                TORCHRUN,
                source_path,
                f"may set {PET_MAX_RESTARTS}, which cannot be checked from the runtime: give it "
                f"a prefix that does not begin {PET_MAX_RESTARTS}, or list the variables in env",
            )
    kept = {key: value for key, value in container.items() if key not in replaced}
    # An init container runs before the ranks: its --max-restarts is torchrun's only if it
    # runs torchrun at all (a tool of its own may have a flag of that name).
    listed = [kept.get(f) for f in ("command", "args")]
    words = [w for words in listed if isinstance(words, list) for w in words if isinstance(w, str)]
    runs_torchrun = any(_TORCHRUN_PROGRAM.search(word) for word in words)
    _check_env_and_words(path, kept, check, flags=restarts != SIDECARS or runs_torchrun)


def _check_env_and_words(
    path: str, container: Mapping[str, Any], check: _Check, *, flags: bool = True
) -> None:
    for env_path, var in check.mappings(container.get("env"), f"{path}.env"):
        if var.get("name") == PET_MAX_RESTARTS and not _is_zero(var.get("value")):
            value_path = f"{env_path}.value" if "value" in var else env_path
            check.refuse_unless(
                TORCHRUN,
                value_path,
                f'{PET_MAX_RESTARTS} must be the literal "0": torchrun restarts the ranks in '
                f"place, {_UNMOVED}",
            )
    if flags:
        _check_command(path, container, check)


def _check_command(path: str, container: Mapping[str, Any], check: _Check) -> None:
    """Refuse a non-zero torchrun restart count in command or args, also inside a shell script."""
    words: list[tuple[str, str]] = []
    for field in ("command", "args"):
        for index, word in enumerate(check.items(container.get(field), f"{path}.{field}")):
            word_path = f"{path}.{field}[{index}]"
            if isinstance(word, str):
                words.append((word_path, word))
            else:
                check.refuse(word_path, f"must be a string, not {shapes.shown(word)}")
    for index, (word_path, word) in enumerate(words):
        for match in _IN_PROCESS_RESTARTS.finditer(word):
            value = match.group(2)
            if not value and match.end() == len(word) and index + 1 < len(words):
                value = words[index + 1][1]  # the flag's value is the next word
            if not _is_zero(value.strip("'\"")):
                flag = match.group(1).rstrip().rstrip("=")
                check.refuse_unless(
                    TORCHRUN,
                    word_path,
                    f"{flag} must be 0, not {shapes.shown(value)}: torchrun restarts the ranks in "
                    f"place, {_UNMOVED}",
                )
                break


def _check_failure_policy(jobset: Mapping[str, Any], jobset_path: str, check: _Check) -> None:
    path = f"{jobset_path}.failurePolicy"
    policy = check.mapping(jobset.get("failurePolicy"), path)
    if policy.get("restartStrategy") == "InPlaceRestart":
        # Never waivable: the JobSet webhook requires backoffLimit at its maximum for it.
        check.refuse(
            f"{path}.restartStrategy",
            f"must not be InPlaceRestart: pods restart in place, {_UNMOVED}, and it cannot work "
            "with backoffLimit: 0; use Recreate or BlockingRecreate",
        )
    for rule_path, rule in check.mappings(policy.get("rules"), f"{path}.rules"):
        action = rule.get("action")
        if isinstance(action, str) and action in _JOB_RESTART_ACTIONS:
            check.refuse_unless(
                RESTART_JOB,
                f"{rule_path}.action",
                f"must not be {action}: only the failed Job is recreated, {_UNMOVED}; "
                "use RestartJobSet or FailJobSet",
            )


def _replicated_jobs(runtime: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return shapes.mappings(shapes.at(runtime, "spec", "template", "spec").get("replicatedJobs"))


def _name_of(job: Mapping[str, Any]) -> str | None:
    name = job.get("name")
    return name if isinstance(name, str) and name else None


def _is_zero(value: Any) -> bool:
    return isinstance(value, str) and re.fullmatch(r"0+", value) is not None


def _shape(value: Any) -> str:
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    return shapes.shown(value)
