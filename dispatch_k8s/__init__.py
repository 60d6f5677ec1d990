"""dispatch-k8s: execution identity (DISPATCH_EPOCH, DISPATCH_ATTEMPT) for Kubeflow TrainJobs.

The distribution's one top-level package. `core` and `steps` are its subpackages; in the source
tree they are the folders `core/` and `steps/` beside this one, linked here.
"""
