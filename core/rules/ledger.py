"""The ledger: which identities (JobID, G, N) `start` made a TrainJob for, kept past the TrainJob.

A TrainJob takes its counters with it when it is deleted, and the same request started again
would begin at A = 0: its executions would repeat the epochs of the first (the epoch is G, N
and R; the attempt is not in it). So `start` keeps two records per identity in the TrainJob's
namespace, immutable ConfigMaps owned by nothing, which only the namespace's deletion removes
(pipelines/policies/ledger.yaml):

- the claim, created before the TrainJob: this identity is taken, by this request (its digest);
- the record that the TrainJob was created, created after it, with the TrainJob's UID.

Once the TrainJob was created, the identity is spent: with the TrainJob gone, `start` refuses
it (a new submission N starts it again). A claim without that record means no start saw the
TrainJob it claimed for: the same request may go on and create it (a start that failed or was
cut off between its creates, or whose answer was lost, is simply run again). What remains
open: a TrainJob created and then deleted before any start saw it (the start that created it
died before its last create, and nobody ran it again before the deletion).

`decide_start` is the whole decision: from the claim, the record and the TrainJob as read, the
next create, or done, or a refusal. `start` reads in that order (claim, record, TrainJob) and
creates in the same order, so a second start that reads while the first one writes sees a
prefix of the first one's creates and goes on from there: it never sees the record without the
TrainJob the record was made after, unless that TrainJob was deleted.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from dispatch_k8s.core.rules import shapes, wire
from dispatch_k8s.core.rules.audit import Finding, FindingKind
from dispatch_k8s.core.rules.decisions import Refusal
from dispatch_k8s.core.rules.trainjob import recorded_identity

NAME_PREFIX: Final = "dispatch-ledger-"
CREATED_SUFFIX: Final = "-created"
DIGEST_CHARS: Final = 32  # 128 bits of SHA-256: a DNS-safe name of 48 (56) characters
# The ConfigMap data keys: what a start request's identity and TrainJob were.
REQUEST_KEYS: Final = {
    "job-id": wire.JOB_ID_ANNOTATION,
    "generation": wire.GENERATION_ANNOTATION,
    "submission": wire.SUBMISSION_ANNOTATION,
    "attempt": wire.ATTEMPT_ANNOTATION,
    "request-digest": wire.REQUEST_DIGEST_ANNOTATION,
}
TRAINJOB_KEY: Final = "trainjob"
TRAINJOB_UID_KEY: Final = "trainjob-uid"


@dataclass(frozen=True, slots=True)
class CreateRecord:
    """Create this record of the ledger next."""

    body: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class CreateTrainJob:
    """Create the TrainJob next: its identity is claimed by this request, and never was made."""


@dataclass(frozen=True, slots=True)
class Done:
    """Nothing left to create: the TrainJob is there, and on record as made by `start`."""

    trainjob: Mapping[str, Any]


def claim_name(wanted: Mapping[str, Any]) -> str:
    """The claim's name: a digest of JobID, G and N (the same for every attempt and name)."""
    identity = recorded_identity(wanted)
    key = "\n".join(
        str(identity[key])
        for key in (wire.JOB_ID_ANNOTATION, wire.GENERATION_ANNOTATION, wire.SUBMISSION_ANNOTATION)
    )
    return NAME_PREFIX + hashlib.sha256(key.encode()).hexdigest()[:DIGEST_CHARS]


def created_name(wanted: Mapping[str, Any]) -> str:
    """The name of the record that the TrainJob was created."""
    return claim_name(wanted) + CREATED_SUFFIX


def _request_data(wanted: Mapping[str, Any]) -> dict[str, str]:
    identity = recorded_identity(wanted)
    data = {key: str(identity[annotation]) for key, annotation in REQUEST_KEYS.items()}
    data[TRAINJOB_KEY] = str(wanted["metadata"]["name"])
    return data


def _record(
    wanted: Mapping[str, Any], name: str, kind: str, data: dict[str, str]
) -> dict[str, Any]:
    labels = {wire.MANAGED_BY_LABEL: wire.MANAGED_BY, wire.LEDGER_LABEL: kind}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": wanted["metadata"]["namespace"], "labels": labels},
        # The API server itself refuses any change of an immutable ConfigMap's data; the
        # ledger policy refuses every other change, and its deletion.
        "immutable": True,
        "data": data,
    }


def build_claim(wanted: Mapping[str, Any]) -> dict[str, Any]:
    """The claim `start` creates before the TrainJob `wanted`."""
    return _record(wanted, claim_name(wanted), wire.LEDGER_CLAIM, _request_data(wanted))


def build_created(wanted: Mapping[str, Any], uid: str) -> dict[str, Any]:
    """The record that the TrainJob `wanted` was created, as the TrainJob of UID `uid`."""
    data = {**_request_data(wanted), TRAINJOB_UID_KEY: uid}
    return _record(wanted, created_name(wanted), wire.LEDGER_CREATED, data)


def recorded_name(trainjob: Mapping[str, Any]) -> str | None:
    """The name of the "created" record for a TrainJob's identity; None if it records none."""
    identity = recorded_identity(trainjob)
    keys = (wire.JOB_ID_ANNOTATION, wire.GENERATION_ANNOTATION, wire.SUBMISSION_ANNOTATION)
    if any(not identity[key] for key in keys):
        return None
    return created_name(trainjob)


def decide_remade(trainjob: Mapping[str, Any], created: Mapping[str, Any] | None) -> Finding | None:
    """The audit's finding for a TrainJob that is not the one `start` recorded for its identity.

    `created` is the record `recorded_name` names, as read (None: not found). Without it no
    start saw the identity made (or the TrainJob is being made now): nothing to compare. With
    it, another UID is a TrainJob of a spent identity made again outside start (deleted and
    created from start's dry-run output, or copied under another name): its A began again at
    0, so its executions repeat the epochs of the first one's.
    """
    if created is None:
        return None
    recorded_uid = shapes.mapping(created.get("data")).get(TRAINJOB_UID_KEY)
    meta = shapes.at(trainjob, "metadata")
    uid = meta.get("uid")
    if uid == recorded_uid:
        return None
    return Finding(
        kind=FindingKind.REMADE,
        reason=(
            f"TrainJob {meta.get('name')} is uid {uid}, but {_where(created)} says start "
            f"created identity {_identity_text(trainjob)} as uid {recorded_uid}: it was made "
            "again outside start, with A begun again at 0, so its executions repeat the epochs "
            f"of the first: {NEW_N}"
        ),
    )


def _identity_text(wanted: Mapping[str, Any]) -> str:
    identity = recorded_identity(wanted)
    return (
        f"(job {identity[wire.JOB_ID_ANNOTATION]}, G {identity[wire.GENERATION_ANNOTATION]}, "
        f"N {identity[wire.SUBMISSION_ANNOTATION]})"
    )


def _where(record: Mapping[str, Any]) -> str:
    meta = shapes.at(record, "metadata")
    return f"ledger record {meta.get('namespace')}/{meta.get('name')}"


NEW_N: Final = "start it with a new submission number N"


def decide_start(
    wanted: Mapping[str, Any],
    *,
    claim: Mapping[str, Any] | None,
    created: Mapping[str, Any] | None,
    trainjob: Mapping[str, Any] | None,
) -> CreateRecord | CreateTrainJob | Done | Refusal:
    """What `start` does next for the TrainJob `wanted`, from what it read (None: not found)."""
    meta = wanted["metadata"]
    where = f"{meta['namespace']}/{meta['name']}"
    if trainjob is not None and recorded_identity(trainjob) != recorded_identity(wanted):
        return Refusal(
            f"TrainJob {where} exists with another identity or request: "
            f"recorded {recorded_identity(trainjob)}"
        )
    asked = _request_data(wanted)
    for record in (claim, created):
        if record is None:
            continue
        data = shapes.mapping(record.get("data"))
        if {key: data.get(key) for key in asked} != asked:
            return Refusal(
                f"{_where(record)} holds identity {_identity_text(wanted)} for another request "
                f"(TrainJob {data.get(TRAINJOB_KEY)}, attempt {data.get('attempt')}, request "
                f"digest {data.get('request-digest')}): its epochs are that request's; {NEW_N}"
            )
    if created is not None:
        recorded_uid = shapes.mapping(created.get("data")).get(TRAINJOB_UID_KEY)
        if trainjob is None:
            return Refusal(
                f"identity {_identity_text(wanted)} was started before: TrainJob {where} (uid "
                f"{recorded_uid}) was created for it and is gone ({_where(created)}); made "
                f"again it would begin at A = 0 and repeat its epochs: {NEW_N}"
            )
        uid = shapes.at(trainjob, "metadata").get("uid")
        if uid != recorded_uid:
            return Refusal(
                f"TrainJob {where} is uid {uid}, but {_where(created)} says start created uid "
                f"{recorded_uid}: it was made again outside start, with its A begun again; "
                f"delete it and {NEW_N}"
            )
        return Done(trainjob)
    if trainjob is not None:  # created by a start that ended before its record (or before it)
        return CreateRecord(build_created(wanted, str(shapes.at(trainjob, "metadata").get("uid"))))
    if claim is None:
        return CreateRecord(build_claim(wanted))
    return CreateTrainJob()
