"""The orchestrator's real test host (sshd + dockerd) and image, for the remote secrets scan."""

from tests.provisioning.conftest import bench_image, ssh_host

__all__ = ["bench_image", "ssh_host"]
