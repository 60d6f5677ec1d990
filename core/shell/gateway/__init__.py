"""The one package that talks to Kubernetes (and the only one that imports `kubernetes`).

`kinds` declares every kind once; `client.Gateway` builds every request from it with a few
generic verbs; `transport` sends each one (the rate limit, the fence, the dry run, the
deadline, the timing); `recorder` posts Events, best effort; `api_errors` turns what the
server answered into a step's outcome in one place; `kubeconfig` finds the cluster and
credentials; `bodies` reads lists and watches as they arrive; `watching` is the one
list-then-watch, and the poll of a state no watch tells.
"""

from dispatch_k8s.core.shell.gateway.api_errors import ApiError
from dispatch_k8s.core.shell.gateway.client import Gateway

__all__ = ["ApiError", "Gateway"]
