"""`hami-doctor nodes` / `node NAME`: the guides' batch check and register checks, plus --fix and access."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from hami.testing.kubeapi import KubeAPIServer
from tests.doctor.doctorcluster import (
    OLD_HANDSHAKE,
    REGISTER,
    UUID0,
    codes,
    hami_node,
    hami_pod,
    run_doctor,
    run_json,
)


def _dev(**fields: object) -> str:
    base: dict[str, object] = {
        "id": UUID0,
        "count": 10,
        "devmem": 32768,
        "devcore": 100,
        "type": "NVIDIA-A100-SXM4-80GB",
        "mode": "hami-core",
        "health": True,
    }
    base.update(fields)
    return json.dumps([base], separators=(",", ":"))


NODE_CASES = {
    "register-missing-cpu-node": (
        hami_node("n", register=None, handshake=None, gpus=0),
        1,
        "node.register.missing",
    ),
    "register-missing-with-gpus": (hami_node("n", register=None), 2, "node.register.missing"),
    "register-legacy-format": (
        hami_node("n", register=f"{UUID0},10,32768,100,NVIDIA-A100,0,true:"),
        2,
        "node.register.undecodable",
    ),
    "register-empty-list": (hami_node("n", register="[]"), 2, "node.register.undecodable"),
    "uuid-form": (hami_node("n", register=_dev(id="GPU-0")), 1, "node.device.uuid"),
    "count-zero": (hami_node("n", register=_dev(count=0)), 2, "node.device.count"),
    "devmem-zero": (hami_node("n", register=_dev(devmem=0)), 2, "node.device.devmem"),
    "type-no-prefix": (hami_node("n", register=_dev(type="A100")), 2, "node.device.type"),
    "type-lowercase": (hami_node("n", register=_dev(type="nvidia-a100")), 1, "node.device.type"),
    "unhealthy": (hami_node("n", register=_dev(health=False)), 1, "node.device.unhealthy"),
    "handshake-missing": (hami_node("n", handshake=None), 1, "node.handshake.missing"),
    "handshake-legacy": (
        hami_node("n", handshake="Reported_2025-06-13 09:09:00"), 1, "node.handshake.legacy"
    ),
    "handshake-undecodable": (
        hami_node("n", handshake="Requesting_yesterday"), 1, "node.handshake.undecodable"
    ),
    "handshake-future": (
        hami_node("n", handshake="Requesting_2025-06-13 10:10:00"), 1, "node.handshake.future"
    ),
    "handshake-old-but-allocatable": (hami_node("n", handshake=OLD_HANDSHAKE), 0, "node.handshake.ok"),
    "handshake-expired": (hami_node("n", handshake=OLD_HANDSHAKE, gpus=0), 2, "node.handshake.expired"),
    "lock-held": (hami_node("n", lock="2025-06-13T09:09:00Z,default,owner"), 0, "node.lock.held"),
    # held 4m: longer than HAMiNodeLockHeldTooLong's for: (3m), younger than the 5m expiry
    "lock-stuck": (hami_node("n", lock="2025-06-13T09:06:00Z,default,owner"), 1, "node.lock.stuck"),
    "lock-expired": (hami_node("n", lock="2025-06-13T09:04:59Z,default,owner"), 0, "node.lock.expired"),
    "lock-dangling": (hami_node("n", lock="2025-06-13T09:09:00Z,default,gone"), 0, "node.lock.dangling"),
    "lock-legacy": (hami_node("n", lock="2025-06-13T09:09:00Z"), 0, "node.lock.held"),
    "lock-malformed": (hami_node("n", lock="2025-06-13T09:09:00Z,default"), 2, "node.lock.malformed"),
}


@pytest.mark.parametrize("case", sorted(NODE_CASES))
def test_node_check(case: str, api: KubeAPIServer, kube_config_file: Path) -> None:
    obj, want_exit, want_code = NODE_CASES[case]
    api.store.put(obj)
    api.store.put(hami_pod("owner"))
    code, doc = run_json(kube_config_file, "node", "n")
    assert want_code in codes(doc), codes(doc)
    assert code == want_exit, codes(doc)


def test_device_table_has_the_guide_columns(api: KubeAPIServer, kube_config_file: Path) -> None:
    api.store.put(hami_node("n"))
    _, doc = run_json(kube_config_file, "node", "n")
    table = doc["sections"][0]["tables"][0]
    guide = ["ID", "Index", "Count", "Devmem", "Devcore", "Type", "Numa", "Mode", "Health"]
    assert table["headers"] == [*guide, "Enforcement"]  # the guide's, in its order, then ours
    assert table["rows"][1] == [
        "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448",
        "1",
        "10",
        "32768",
        "100",
        "NVIDIA-Tesla V100-PCIE-32GB",
        "1",
        "hami-core",
        "true",
        "hami-core",
    ]


def test_device_table_says_which_cards_the_driver_limits(api: KubeAPIServer, kube_config_file: Path) -> None:
    # The device plugin's --memory-enforcement driver registers each card with memoryEnforcement.
    driver = REGISTER.replace('"health":true}', '"health":true,"memoryEnforcement":"driver"}')
    api.store.put(hami_node("n", register=driver))
    _, doc = run_json(kube_config_file, "node", "n")
    rows = doc["sections"][0]["tables"][0]["rows"]
    assert [row[-1] for row in rows] == ["driver", "driver"]


def test_nodes_selector_and_worst_status(api: KubeAPIServer, kube_config_file: Path) -> None:
    good, bad = hami_node("good"), hami_node("bad", register=None)
    good["metadata"]["labels"] = {"gpu": "yes"}
    api.store.put(good)
    api.store.put(bad)
    code, doc = run_json(kube_config_file, "nodes")
    assert [s["title"] for s in doc["sections"]] == ["node bad", "node good"] and code == 2
    code, doc = run_json(kube_config_file, "nodes", "--selector", "gpu=yes")
    assert [s["title"] for s in doc["sections"]] == ["node good"] and code == 0


def test_handshake_threshold_flag(api: KubeAPIServer, kube_config_file: Path) -> None:
    """HAMi's guide's 300 s figure (docs/guides/scheduler-debugging.md §3.5), if an operator insists on it,
    is one flag away."""
    api.store.put(hami_node("n", handshake=OLD_HANDSHAKE, gpus=0))
    code, _ = run_json(kube_config_file, "node", "n", "--handshake-timeout", "301s")
    assert code == 0


def test_fix_clears_an_expired_lock_after_confirmation(
    kube_api: KubeAPIServer, kube_config_file: Path
) -> None:
    kube_api.store.put(hami_node("n", lock="2025-06-13T09:00:00Z,default,gone"))
    code, out = run_doctor(kube_config_file, "node", "n", "--fix", stdin="n\n")
    assert "nothing changed (not confirmed)" in out and code == 0  # an expired lock is info
    assert kube_api.requests.count(method="PATCH") == 0
    code, out = run_doctor(kube_config_file, "node", "n", "--fix", stdin="y\n")
    assert "removed hami.io/mutex.lock from n" in out
    assert "hami.io/mutex.lock" not in kube_api.store.get("nodes", "n")["metadata"]["annotations"]
    assert kube_api.requests.count(method="PATCH", path="/nodes/n$") == 1


def test_fix_yes_clears_a_stuck_handshake_and_keeps_a_fresh_lock(
    kube_api: KubeAPIServer, kube_config_file: Path
) -> None:
    lock = "2025-06-13T09:09:00Z,default,owner"
    kube_api.store.put(hami_node("n", handshake=OLD_HANDSHAKE, gpus=0, lock=lock))
    kube_api.store.put(hami_pod("owner"))
    code, doc = run_json(kube_config_file, "node", "n", "--fix", "--yes")
    assert doc["fixed"] == ["removed hami.io/node-handshake from n"] and code == 2
    annos = kube_api.store.get("nodes", "n")["metadata"]["annotations"]
    assert "hami.io/node-handshake" not in annos and "hami.io/mutex.lock" in annos


def test_fix_skips_a_lock_that_changed(kube_api: KubeAPIServer, kube_client: object) -> None:
    from hami.doctor import fix
    from hami.doctor.findings import Remedy

    kube_api.store.put(hami_node("n", lock="2025-06-13T09:09:59Z,default,new-owner"))
    result = fix.apply(
        kube_client, [Remedy("n", "hami.io/mutex.lock", "2025-06-13T09:00:00Z,default,old", "x")]
    )
    assert result[0].startswith("skipped n hami.io/mutex.lock: changed since the diagnosis")
    assert kube_api.requests.count(method="PATCH") == 0


def test_context_flag_selects_the_cluster(api: KubeAPIServer, tmp_path: Path) -> None:
    cfg = api.kubeconfig("emulator")
    cfg["clusters"].append({"name": "dead", "cluster": {"server": "http://127.0.0.1:9"}})
    cfg["users"].append({"name": "dead", "user": {"token": "x"}})
    cfg["contexts"].append({"name": "dead", "context": {"cluster": "dead", "user": "dead"}})
    cfg["current-context"] = "dead"
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    api.store.put(hami_node("n"))
    code, _ = run_doctor(path, "node", "n", "--kube-timeout", "2")
    assert code == 4  # the current context's server does not answer
    code, _ = run_doctor(path, "node", "n", "--context", "emulator")
    assert code == 0


def test_usage_errors(api: KubeAPIServer, kube_config_file: Path) -> None:
    assert run_doctor(kube_config_file, "node", "missing")[0] == 3
    assert run_doctor(kube_config_file, "pod", "no-slash")[0] == 3
    assert run_doctor(kube_config_file, "pod", "default/missing")[0] == 3
    with pytest.raises(SystemExit) as exc:
        run_doctor(kube_config_file, "node", "n", "--node-lock-timeout", "soon")
    assert exc.value.code == 3
