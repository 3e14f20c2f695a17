"""Allocations: pods held for a study, into which many steps are streamed (issue 40).

- ``protocol``: the line protocol between the driver and an agent (message shapes, codec);
- ``agent``: the agent each pod of an allocation runs (one stdlib-only file, shipped in a
  ConfigMap), ``serve`` and ``attach``; it defines the protocol ``protocol`` re-exports;
- ``pool`` and ``channel`` (the driver side): dispatching steps to the pods over one
  pods/exec stream each, retries and re-attach.
"""
