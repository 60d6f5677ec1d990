"""SeaweedFS, the S3 server the checkpoint library's S3 store is tested against: built from its
Go module (tests/cluster/versions.toml), one `weed server` on loopback with a directory of its
own. Apache-2.0; the other S3 servers that could run here (MinIO, Garage) are AGPL."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Final

from tests.cluster import binaries
from tests.cluster.process import LOOPBACK, Process, free_ports
from tests.cluster.wait import wait_until

START_TIMEOUT: Final = 120.0


def weed() -> Path:
    """The weed binary: built if the background build left it, waited for if it is under way."""
    (component,) = [c for c in binaries.components(storage=True) if c.name == "seaweedfs"]
    return binaries.build(component, binaries.go_version()) / "weed"


class SeaweedFS:
    """A master, a volume server, a filer and the S3 gateway in one process, on loopback."""

    def __init__(self, run_dir: Path) -> None:
        self.dir = run_dir / "seaweedfs"
        ports = free_ports(8)
        self.s3_port = ports[0]
        self.endpoint = f"http://{LOOPBACK}:{self.s3_port}"
        argv = [
            str(weed()),
            "server",
            f"-dir={self.dir / 'data'}",
            f"-ip={LOOPBACK}",
            f"-ip.bind={LOOPBACK}",
            f"-master.port={ports[1]}",
            f"-master.port.grpc={ports[2]}",
            f"-volume.port={ports[3]}",
            f"-volume.port.grpc={ports[4]}",
            "-filer",
            f"-filer.port={ports[5]}",
            f"-filer.port.grpc={ports[6]}",
            "-s3",
            f"-s3.port={self.s3_port}",
            f"-s3.port.grpc={ports[7]}",
            "-master.volumeSizeLimitMB=64",
            "-volume.max=32",
        ]
        self.process = Process("seaweedfs", argv, self.dir / "weed.log")

    def start(self) -> None:
        """Start it and wait until the S3 gateway answers."""
        (self.dir / "data").mkdir(parents=True, exist_ok=True)
        self.process.start()
        wait_until(
            self._answers, what=f"SeaweedFS's S3 gateway on {self.endpoint}", timeout=START_TIMEOUT
        )

    def _answers(self) -> bool | None:
        if not self.process.running():
            raise RuntimeError(f"weed exited:\n{self.process.tail()}")
        try:
            with urllib.request.urlopen(f"{self.endpoint}/", timeout=5):
                return True
        except urllib.error.HTTPError:  # an S3 error document: the gateway is up
            return True
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return None

    def stop(self) -> None:
        """Stop the process group."""
        self.process.stop()

    def __enter__(self) -> SeaweedFS:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
