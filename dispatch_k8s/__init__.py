"""dispatch-k8s: execution identity (DISPATCH_EPOCH, DISPATCH_ATTEMPT) for Kubeflow TrainJobs.

The distribution's one top-level package. `core`, `steps` and `controller` are its
subpackages; in the source tree they are the folders `core/`, `steps/` and `controller/`
beside this one, linked here.
"""
