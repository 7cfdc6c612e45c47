import hami
from hami.core import annotations, devices


def test_version_is_pep440() -> None:
    major, minor, patch = hami.__version__.split(".")
    assert all(part.isdigit() for part in (major, minor, patch))


def test_device_defaults_match_go_zero_values() -> None:
    dev = devices.DeviceInfo(id="GPU-0")
    assert (dev.index, dev.count, dev.devmem, dev.numa, dev.health) == (0, 0, 0, 0, False)
    assert annotations.NODE_REGISTER == "hami.io/node-nvidia-register"
