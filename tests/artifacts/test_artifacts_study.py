"""Two steps on the fake cluster hand a file over through a real registry, byte for byte."""

from __future__ import annotations

import re

from k8sjobs import Session, Step, StepState
from k8sjobs.testing import FakeCluster
from k8sjobs.testing.registry import RegistryServer

WRITE = """
import hashlib, os
data = os.urandom(3 * 1024 * 1024 + 17)  # not a round size: a short read would show
with open(os.path.join(os.environ["K8SJOBS_WORKDIR"], "blob.bin"), "wb") as out:
    out.write(data)
print("wrote", hashlib.sha256(data).hexdigest())
"""
READ = """
import hashlib, os
path = os.path.join(os.environ["K8SJOBS_INPUTS"], "blob", "blob.bin")
print("read", hashlib.sha256(open(path, "rb").read()).hexdigest())
"""


async def test_step_b_reads_exactly_the_bytes_step_a_wrote(
    handoff_path: str, fake_cluster_execute: FakeCluster, plain_registry: RegistryServer
) -> None:
    async with Session(
        study="handoff",
        kubeconfig=fake_cluster_execute.kubeconfig_path,
        store=plain_registry.location,
        plain_http=True,
        cache=False,  # each handoff path runs both steps (the registry outlives the test)
    ) as s:
        a = await s.submit(
            Step(name="a", shell="python", script=WRITE, outputs={"blob": "blob.bin"})
        )
        b = await s.submit(
            Step(name="b", shell="python", script=READ, inputs={"blob": a.output("blob")})
        )
        result_a, result_b = await s.gather(a, b, timeout=120)
        assert result_a.state is StepState.SUCCEEDED, result_a
        assert result_b.state is StepState.SUCCEEDED, result_b
        wrote = re.search(r"wrote (\w+)", await a.logs())
        read = re.search(r"read (\w+)", await b.logs())
    assert wrote and read and wrote[1] == read[1]
    # B was given A's output pinned by digest, not a tag that could move meanwhile.
    pinned = result_a.outputs["blob"]
    assert "@sha256:" in pinned
    config = fake_cluster_execute.get("configmaps", b.object_name)
    assert config is not None and pinned in config["data"]["handoff.json"]
    # The path under test is the one that ran: in-process handoffs have no process id.
    pods = fake_cluster_execute.objects("pods")
    (pod,) = [p for p in pods if p["metadata"]["name"].startswith(b.object_name)]
    (pull,) = pod["status"]["initContainerStatuses"]
    assert (pull["containerID"] == "local://in-process") == (handoff_path == "in-process")
