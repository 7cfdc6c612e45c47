"""Device list strategies and the CDI spec: what Allocate answers, and a spec runtimes can load."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import requests
import yaml
from kubernetes import client

from hami.core import annotations as ann
from hami.deviceplugin.api import deviceplugin_pb2 as pb
from hami.deviceplugin.cdi import SPEC_FILE, SpecGpu, build_spec, device_list_edits, parse_strategies
from hami.deviceplugin.container_setup import RuntimeOptions
from hami.deviceplugin.specdir import IO_ERROR, NOT_WRITABLE, SpecWriteError, find_driver_files, write_spec
from hami.testing.builders import allocating_pod
from hami.testing.kubeapi import KubeAPIServer
from hami.testing.kubelet import FakeKubelet
from hami.testing.pluginrig import NODE, NVML_SPEC, U0, U1, start_rig
from hami.testing.processes import Daemon, python_env
from hami.testing.wait import wait_until
from tests.deviceplugin.cdischema import SCHEMA

VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)


def test_strategies_parse_as_nvidias_flag() -> None:
    assert parse_strategies("envvar") == ("envvar",)
    assert parse_strategies(" cdi-cri, envvar ,cdi-cri") == ("cdi-cri", "envvar")
    with pytest.raises(ValueError, match="tegra is not one of envvar, volume-mounts, cdi-annotations"):
        parse_strategies("envvar,tegra")
    with pytest.raises(ValueError, match="empty"):
        parse_strategies(" , ")


def test_each_strategy_names_the_devices_its_own_way() -> None:
    ids = [U0, U1]
    env = device_list_edits(("envvar",), ids, (), "r1")
    assert (env.envs, env.mounts, env.annotations, env.cdi_devices) == (
        {"NVIDIA_VISIBLE_DEVICES": f"{U0},{U1}"}, (), {}, ()
    )
    vol = device_list_edits(("volume-mounts",), ids, (), "r1")
    assert vol.envs == {"NVIDIA_VISIBLE_DEVICES": "/var/run/nvidia-container-devices"}
    assert vol.mounts == tuple((f"/var/run/nvidia-container-devices/{u}", "/dev/null") for u in ids)
    names = [f"k8s.device-plugin.nvidia.com/gpu={u}" for u in ids]
    names.append("k8s.device-plugin.nvidia.com/imex-channel=3")
    cdi = device_list_edits(("cdi-annotations", "cdi-cri"), ids, (3,), "7c1e")
    assert cdi.envs == {} and cdi.mounts == ()
    assert cdi.annotations == {"cdi.k8s.io/nvidia-device-plugin_7c1e": ",".join(names)}
    assert cdi.cdi_devices == tuple(names)
    prefixed = device_list_edits(("cdi-annotations",), ["0"], (), "x", "example.com/")
    assert prefixed.annotations == {
        "example.com/nvidia-device-plugin_x": "k8s.device-plugin.nvidia.com/gpu=0"
    }


def _driver_root(tmp_path: Path) -> Path:
    root = tmp_path / "driver"
    lib = root / "usr" / "lib" / "x86_64-linux-gnu"
    lib.mkdir(parents=True)
    for name in ("libcuda.so.550.54.15", "libnvidia-ml.so.550.54.15", "libfoo.so.1"):
        (lib / name).write_bytes(b"\x7fELF")
    (root / "usr" / "bin").mkdir()
    (root / "usr" / "bin" / "nvidia-smi").write_bytes(b"\x7fELF")
    return root


def test_the_spec_is_valid_cdi_and_names_every_gpu(tmp_path: Path) -> None:
    root = _driver_root(tmp_path)
    files = find_driver_files(str(root))
    assert [Path(f).name for f in files] == [
        "libcuda.so.550.54.15", "libnvidia-ml.so.550.54.15", "nvidia-smi"
    ]
    spec = build_spec([SpecGpu(U1, 1, 3), SpecGpu(U0, 0, 0)], "/host", str(root), files)
    VALIDATOR.validate(spec)
    assert [d["name"] for d in spec["devices"]] == [U0, "0", U1, "1", "all"]
    assert spec["devices"][2]["containerEdits"]["deviceNodes"] == [
        {"path": "/dev/nvidia3", "hostPath": "/host/dev/nvidia3"}
    ]
    assert spec["containerEdits"]["mounts"][1] == {
        "hostPath": f"{root}/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15",
        "containerPath": "/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15",
        "options": ["ro", "nosuid", "nodev", "bind"],
    }
    # the schema is not vacuous: what a runtime refuses, it refuses
    for broken in (
        {**spec, "kind": "gpu"},
        {**spec, "devices": [{"name": "bad name", "containerEdits": {}}]},
        {**spec, "containerEdits": {"deviceNodes": [{"hostPath": "/dev/nvidia0"}]}},
        {**spec, "extra": 1},
    ):
        with pytest.raises(jsonschema.ValidationError):
            VALIDATOR.validate(broken)


def test_a_spec_is_written_whole_or_not_at_all(tmp_path: Path) -> None:
    spec = build_spec([SpecGpu(U0, 0, 0)], "/", "/", [])
    path = write_spec(tmp_path / "cdi", spec)
    assert path == tmp_path / "cdi" / SPEC_FILE and json.loads(path.read_text(encoding="utf-8")) == spec
    blocked = tmp_path / "blocked"
    (blocked / SPEC_FILE).mkdir(parents=True)  # the rename cannot replace a directory
    with pytest.raises(SpecWriteError) as info:
        write_spec(blocked, spec)
    assert info.value.reason == IO_ERROR
    assert str(info.value).startswith(f"cannot write the CDI spec {blocked}")
    assert sorted(p.name for p in blocked.iterdir()) == [SPEC_FILE]  # no temporary file left
    with pytest.raises(SpecWriteError) as info:
        write_spec(Path("/sys/hami-cdi-test"), spec)  # sysfs: not writable, even for root
    assert info.value.reason == NOT_WRITABLE


@pytest.mark.parametrize(
    ("strategies", "check"),
    [
        (("cdi-cri",), "cdi_devices"),
        (("cdi-annotations",), "annotations"),
        (("volume-mounts",), "mounts"),
    ],
)
def test_allocate_answers_by_strategy(
    strategies: tuple[str, ...], check: str, kube_api: KubeAPIServer, kube_client: Any, short_dir: Path
) -> None:
    cdi_dir = short_dir / "cdi"
    runtime = RuntimeOptions(list_strategies=strategies)
    rig = start_rig(kube_api, kube_client, short_dir, settings={"runtime": runtime, "cdi_spec_dir": cdi_dir})
    try:
        body = allocating_pod("p1", NODE, f"{U1},NVIDIA,3000,30:;", {"name": "main", "image": "cuda"})
        client.CoreV1Api(kube_client).create_namespaced_pod("default", body)
        lock = {ann.NODE_LOCK: "2026-08-21T06:20:39Z,default,p1"}
        client.CoreV1Api(kube_client).patch_node(NODE, {"metadata": {"annotations": lock}})
        channel, stub = rig.kubelet.plugin("nvidia-gpu.sock")
        with channel:
            ctr = pb.ContainerAllocateRequest(devices_ids=[f"{U1}-1"])
            request = pb.AllocateRequest(container_requests=[ctr])
            (resp,) = stub.Allocate(request).container_responses
        name = f"k8s.device-plugin.nvidia.com/gpu={U1}"
        if check == "cdi_devices":
            assert [d.name for d in resp.cdi_devices] == [name] and not resp.annotations
            assert "NVIDIA_VISIBLE_DEVICES" not in resp.envs
        elif check == "annotations":
            ((key, value),) = resp.annotations.items()
            assert re.fullmatch(r"cdi\.k8s\.io/nvidia-device-plugin_[0-9a-f-]{36}", key) and value == name
            assert not resp.cdi_devices
        else:
            assert resp.envs["NVIDIA_VISIBLE_DEVICES"] == "/var/run/nvidia-container-devices"
            assert (resp.mounts[0].container_path, resp.mounts[0].host_path, resp.mounts[0].read_only) == (
                f"/var/run/nvidia-container-devices/{U1}", "/dev/null", True
            )
        assert resp.envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "3000m"  # HAMi's limits come with any strategy
        spec_path = cdi_dir / SPEC_FILE
        assert spec_path.exists() == (check != "mounts")  # only the cdi-* strategies need a spec
        if spec_path.exists():
            spec = json.loads(spec_path.read_text(encoding="utf-8"))
            VALIDATOR.validate(spec)
            assert {d["name"] for d in spec["devices"]} == {U0, "0", U1, "1", "all"}
    finally:
        rig.stop()


def test_an_unwritable_spec_directory_keeps_the_plugin_from_starting(
    kube_api: KubeAPIServer, kube_client: Any, kube_config_file: Path, short_dir: Path
) -> None:
    client.CoreV1Api(kube_client).create_node({"metadata": {"name": NODE}})
    spec = short_dir / "nvml.yaml"
    spec.write_text(yaml.safe_dump(NVML_SPEC), encoding="utf-8")
    kubelet = FakeKubelet(short_dir)
    kubelet.start()
    daemon = Daemon(
        [
            sys.executable, "-m", "hami.deviceplugin", f"--kubeconfig={kube_config_file}", "--nvml=fake",
            f"--fake-nvml-spec={spec}", f"--device-plugin-path={short_dir}", "--node-config-file=",
            f"--hook-path={short_dir / 'hook'}", f"--mig-apply-lock={short_dir / 'mig.lock'}",
            "--metrics-bind-address=127.0.0.1:0", "--device-list-strategy=cdi-cri",
            "--cdi-spec-dir=/sys/hami-cdi-test", "--start-retry=0.2",
        ],
        python_env(NODE_NAME=NODE),
    )  # fmt: skip
    try:
        line = daemon.wait_for_line("cannot write the CDI spec").string
        assert line.startswith("E") and line.endswith(
            f"cannot write the CDI spec /sys/hami-cdi-test/{SPEC_FILE}: Operation not permitted; the "
            "container runtime could not resolve the CDI devices Allocate names"
        )
        url = daemon.wait_for_line(r"Serving metrics on (\S+)").group(1)
        errors = f'hami_deviceplugin_cdi_spec_errors_total{{node="{NODE}",reason="not_writable"}} '

        def retried() -> bool:
            text = requests.get(url, timeout=10).text
            return any(line.startswith(errors) and float(line.split()[-1]) >= 2 for line in text.splitlines())

        wait_until(retried, 60, "a second failed attempt")
        assert kubelet.registrations.empty()  # no devices offered that pods could not use
        assert not (short_dir / "nvidia-gpu.sock").exists()
    finally:
        daemon.stop()
        kubelet.stop()
