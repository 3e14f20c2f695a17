"""The controllers that stand for real ones in the fake cluster (internal).

Each module plays one controller as the recorded transcripts in shared/k8s-reference show it:
the Job controller (`job`, with its pure policies in `job_policies`), the Flux Operator
(`flux_operator`) and the JobSet controller (`jobset`). They act only through the store, as
a real controller acts only through the API server. The public face is `k8sjobs.testing`.
"""
