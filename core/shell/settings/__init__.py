"""Settings from `DISPATCH_*` env and CLI flags (flags win), and the documents a command reads.

`flags` names each setting's flag and env variable and declares its --help entry; `base` holds
the models the commands share; `parsing` turns argv and env into one (`load_settings`), every
error in one line; `help` writes --help and --version; `documents` reads a request or runtime
file. A model that one step alone takes lives beside that step, the controller's in
`controller/`.
"""

from dispatch_k8s.core.shell.settings.base import (
    CHECK_DOC,
    NAMESPACE_DEFAULT,
    NAMESPACE_DOC,
    ClusterSettings,
    DeadlineSettings,
    DryRunFlag,
    Namespace,
    NamespacedSettings,
    ObjectName,
    ResultSettings,
    StepSettings,
    TargetSettings,
    TrainJobName,
    TrainJobSettings,
    WritingSettings,
    parse_duration,
)
from dispatch_k8s.core.shell.settings.documents import read_document, snake_case
from dispatch_k8s.core.shell.settings.flags import doc, env_name, flag_name
from dispatch_k8s.core.shell.settings.help import render_help, version_text
from dispatch_k8s.core.shell.settings.parsing import (
    describe_settings_error,
    load_settings,
    take_verbatim,
)

__all__ = [
    "CHECK_DOC",
    "NAMESPACE_DEFAULT",
    "NAMESPACE_DOC",
    "ClusterSettings",
    "DeadlineSettings",
    "DryRunFlag",
    "Namespace",
    "NamespacedSettings",
    "ObjectName",
    "ResultSettings",
    "StepSettings",
    "TargetSettings",
    "TrainJobName",
    "TrainJobSettings",
    "WritingSettings",
    "describe_settings_error",
    "doc",
    "env_name",
    "flag_name",
    "load_settings",
    "parse_duration",
    "read_document",
    "render_help",
    "snake_case",
    "take_verbatim",
    "version_text",
]
