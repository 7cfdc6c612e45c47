"""Fake NVML node descriptions of real boards: two layouts for topology, and a MIG-enabled A100.

``nvlink_board()`` is an 8-GPU V100 SXM2 board wired as a hybrid cube mesh (six NVLinks per GPU: each
quad fully connected by one or two links, and one double or single link to the GPU opposite in the
other quad); PCIe pairs GPUs behind four switches, two per CPU socket. ``pcie_board()`` is the same
PCIe tree without any NVLink.
"""

from __future__ import annotations

from typing import Any

# Links of the hybrid cube mesh, {gpu: {peer: links}}; symmetric, six links per GPU.
CUBE_MESH: dict[int, dict[int, int]] = {
    0: {1: 1, 2: 1, 3: 2, 4: 2},
    1: {0: 1, 2: 2, 3: 1, 5: 2},
    2: {0: 1, 1: 2, 3: 2, 6: 1},
    3: {0: 2, 1: 1, 2: 2, 7: 1},
    4: {0: 2, 5: 1, 6: 1, 7: 2},
    5: {1: 2, 4: 1, 6: 2, 7: 1},
    6: {2: 1, 4: 1, 5: 2, 7: 2},
    7: {3: 1, 4: 2, 5: 1, 6: 2},
}


def board_uuid(board: str, index: int) -> str:
    return f"GPU-{board[:8]:0>8}-0000-4000-8000-{index:012d}"


def pcie_board(name: str = "pcie", gpus: int = 8, model: str = "Tesla V100-PCIE-32GB") -> dict[str, Any]:
    """GPUs in pairs behind PCIe switches; the first half on NUMA node 0, the rest on node 1."""
    half = max(gpus // 2, 1)
    return {
        "devices": [
            {
                "uuid": board_uuid(name, i),
                "name": model,
                "memory_mib": 32768,
                "numa": i // half,
                "pci_bus_id": f"00000000:{0x18 + 0x10 * i:02X}:00.0",
                "pcie": {"switch": f"plx{i // 2}"},
            }
            for i in range(gpus)
        ]
    }


def nvlink_board(name: str = "nvlink") -> dict[str, Any]:
    """``pcie_board``'s PCIe tree with SXM2 V100s and the hybrid cube mesh of NVLinks."""
    spec = pcie_board(name, 8, "Tesla V100-SXM2-32GB")
    for i, dev in enumerate(spec["devices"]):
        dev["nvlinks"] = dict(CUBE_MESH[i])
    return spec


# An A100-SXM4-40GB's GPU-instance profiles: NVML profile id, name, slices, memory, placements.
A100_40GB_MIG: tuple[tuple[int, str, int, int, tuple[tuple[int, int], ...]], ...] = (
    (19, "1g.5gb", 1, 4864, tuple((s, 1) for s in range(7))),
    (14, "2g.10gb", 2, 9856, ((0, 2), (2, 2), (4, 2))),
    (9, "3g.20gb", 3, 19968, ((0, 4), (4, 4))),
    (5, "4g.20gb", 4, 19968, ((0, 4),)),
    (0, "7g.40gb", 7, 40192, ((0, 8),)),
)


def mig_board(name: str = "mig", gpus: int = 1) -> dict[str, Any]:
    """A100-SXM4-40GBs in MIG mode with no instance yet, ready for dynamic partitioning."""
    return {
        "devices": [
            {
                "uuid": board_uuid(name, i),
                "name": "NVIDIA A100-SXM4-40GB",
                "memory_mib": 40960,
                "mig": {
                    "enabled": True,
                    "profiles": [
                        {
                            "id": pid,
                            "name": pname,
                            "slices": slices,
                            "memory_mib": mem,
                            "placements": [list(p) for p in places],
                        }
                        for pid, pname, slices, mem, places in A100_40GB_MIG
                    ],
                },
            }
            for i in range(gpus)
        ]
    }
