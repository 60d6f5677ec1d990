"""The admission-check controller: one long-running process that gates every Workload.

It gates the Workloads of this project's AdmissionChecks with the same core decisions as
the steps.
"""
