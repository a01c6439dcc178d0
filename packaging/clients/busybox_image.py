# SPDX-License-Identifier: Apache-2.0
"""Build the test image of the real-client suite from Debian's busybox-static.

No registry is reachable from CI, so the image is made here: a one-layer root
filesystem holding ``/bin/busybox`` and its applet links (``sh``, ``ip``, ...).

    busybox_image.py rootfs OUT.tar     root filesystem tarball, for ``podman import``
    busybox_image.py docker OUT.tar     docker-archive (manifest.json + layer), for
                                        ``ctr image import``; tagged IMAGE_REF

Stdlib only (it runs before any venv exists). Output is byte-for-byte
reproducible (fixed mtimes and owners), so re-running it is a no-op in effect.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import sys
import tarfile
from pathlib import Path

BUSYBOX = Path(os.environ.get("BUSYBOX", "/bin/busybox"))
IMAGE_REF = "localhost/railyard-busybox:latest"
# The applets the tests run inside containers; `ip` and `cat` read the NICs.
APPLETS = ("sh", "ip", "ls", "cat", "sleep", "true", "ifconfig", "mkdir", "echo")
# Mount points that runtimes expect to exist in the image.
DIRS = ("bin", "dev", "etc", "proc", "sys", "tmp", "run")
MTIME = 0


def _info(name: str, kind: bytes, mode: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.mode = mode
    info.mtime = MTIME
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def rootfs_bytes() -> bytes:
    """The root filesystem as an uncompressed tar (also the image's only layer)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in DIRS:
            tar.addfile(_info(d, tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755))
        data = BUSYBOX.read_bytes()
        info = _info("bin/busybox", tarfile.REGTYPE, 0o755)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        for applet in APPLETS:
            link = _info(f"bin/{applet}", tarfile.SYMTYPE, 0o777)
            link.linkname = "busybox"
            tar.addfile(link)
    return buf.getvalue()


def docker_archive_bytes(layer: bytes, ref: str = IMAGE_REF) -> bytes:
    """A docker-archive (the `docker save` layout) that containerd 1.6 imports."""
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Cmd": ["/bin/sh"], "Env": ["PATH=/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": "railyard busybox_image.py"}],
    }
    config_raw = json.dumps(config, sort_keys=True).encode()
    config_name = hashlib.sha256(config_raw).hexdigest() + ".json"
    layer_name = diff_id.split(":", 1)[1] + "/layer.tar"
    manifest = [{"Config": config_name, "RepoTags": [ref], "Layers": [layer_name]}]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in (
            (config_name, config_raw),
            (layer_name, layer),
            ("manifest.json", json.dumps(manifest).encode()),
        ):
            info = _info(name, tarfile.REGTYPE, 0o644)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[1] not in ("rootfs", "docker"):
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[2])
    layer = rootfs_bytes()
    data = layer if argv[1] == "rootfs" else docker_archive_bytes(layer)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(out)  # atomic: a concurrent reader never sees half a tarball
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
