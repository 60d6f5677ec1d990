"""The admission controller: one long-running process, one leader among its replicas.

It gates the Workloads of this project's AdmissionChecks (a raise, then the approval) and
audits every managed TrainJob as it changes, with the same core rules as the steps.
"""
