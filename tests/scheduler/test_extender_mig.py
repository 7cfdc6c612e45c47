"""End to end over HTTP: a MIG node gets a pod, the MIG reservation is written, read back and exported."""

from __future__ import annotations

from dataclasses import replace

from hami.core.codec.mig import decode_mig_allocations, encode_mig_allocations
from hami.core.codec.pod_devices import decode_pod_devices
from hami.core.devices import MigPlacement
from hami.testing.builders import gpu_pod, mig_node
from hami.testing.extender import bind_pod, create_pod, filter_pod, metrics_text, running
from hami.testing.kubeapi import KubeAPIServer
from hami.testing.wait import wait_until


def test_mig_node_gets_a_pod_with_decodable_mig_allocations(kube_api: KubeAPIServer) -> None:
    kube_api.store.put(mig_node("mig1"))
    with running(kube_api) as ext:
        pod = create_pod(kube_api, ext, gpu_pod("p1", gpus=2, mem=8000))
        reply = filter_pod(ext, pod, ["mig1"])
        assert reply["Error"] == "" and reply["NodeNames"] == ["mig1"]
        assert bind_pod(ext, pod, "mig1") == ""
        stored = kube_api.store.get("pods", "p1", "default")
        assert stored is not None
        annos = stored["metadata"]["annotations"]
        allocs = decode_mig_allocations(annos["hami.io/vgpu-mig-allocations"])
        assert [(a.container_index, a.device_index, a.gpu_uuid, a.profile, a.placement) for a in allocs] == [
            (0, 0, "GPU-mig1-0", "2g.10gb", MigPlacement(0, 2)),
            (0, 1, "GPU-mig1-0", "2g.10gb", MigPlacement(2, 2)),
        ]
        (devices, _empty) = decode_pod_devices(annos["hami.io/vgpu-devices-allocated"])
        assert [(d.uuid, d.usedmem) for d in devices] == [("GPU-mig1-0", 9984), ("GPU-mig1-0", 9984)]

        # The pod cache reads the reservation back: the next pod gets the next free placement.
        wait_until(lambda: ext.state.usage.get(pod["metadata"]["uid"]) is not None, what="reservation cached")
        other = create_pod(kube_api, ext, gpu_pod("p2", gpus=1, mem=8000))
        assert filter_pod(ext, other, ["mig1"])["NodeNames"] == ["mig1"]
        # p2's annotations wait for its bind (the node lock is p1's until the device plugin is done).
        assignment = ext.state.assignments[other["metadata"]["uid"]]
        (only,) = decode_mig_allocations(assignment.annotations["hami.io/vgpu-mig-allocations"])
        assert only.placement == MigPlacement(4, 2)

        # The device plugin realises the instances; the scheduler exports their identity.
        realised = [
            replace(a, mig_uuid=f"MIG-{i}", gpu_instance_id=3 + i, compute_instance_id=0)
            for i, a in enumerate(allocs)
        ]
        stored["metadata"]["annotations"]["hami.io/vgpu-mig-allocations"] = encode_mig_allocations(realised)
        kube_api.store.put(stored)
        series = (
            'hami_node_gpu_mig_instance_info{compute_instance_id="0",device_index="0",device_uuid="GPU-mig1-0",'
            'gpu_instance_id="4",mig_uuid="MIG-1",node="mig1",placement_size="2",placement_start="2",'
            'profile="2g.10gb",zone="vGPU"} 1.0'
        )
        wait_until(lambda: series in metrics_text(ext), what="MIG instance series")
        # Only realised reservations are exported: p2's has no runtime identity yet.
        text = metrics_text(ext)
        lines = [x for x in text.splitlines() if x.startswith("hami_node_gpu_mig_instance_info{")]
        assert len(lines) == 2 and any('mig_uuid="MIG-0"' in x and 'placement_start="0"' in x for x in lines)
