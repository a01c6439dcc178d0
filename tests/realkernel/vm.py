# SPDX-License-Identifier: Apache-2.0
"""Run one command as root inside Debian's own kernel, in a throwaway QEMU VM.

Standard library only; usable as a module (``run``) and as a command:

    python tests/realkernel/vm.py [--share DIR]... [--timeout S] -- CMD...

The VM has no disk image. This machine's ``/`` is shared read-only over 9p and
becomes the VM's root after a small busybox initramfs has loaded the virtio and
9p modules and ``switch_root``-ed into it, so the host's tools, Python venv and
checkout run unchanged inside, and module autoload works (``/lib/modules`` is
there). ``/tmp``, ``/run``, ``/var/tmp`` and ``/dev/shm`` are fresh tmpfs;
directories given as shares are mounted read-write at their own paths. The
command's output and exit status come back through a read-write control
share; the VM always powers itself off after the command, and QEMU is killed
when it outlives the time bound.

Acceleration: KVM only when it can really boot the kernel. A ``/dev/kvm`` that
answers is not enough (a host may offer a paravirtual KVM that runs only guest
kernels built for it, and Debian's kernel hangs there before printing
anything), so a CPU without vmx/svm means TCG, and otherwise one short probe
boot decides, remembered per host boot. ``RAILYARD_VM_ACCEL=tcg|kvm`` forces.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

#: Where ./dev caches what it builds for the tier (modules, initramfs).
CACHE = Path(
    os.environ.get("RAILYARD_REALKERNEL_CACHE", "/var/cache/railyard/realkernel")
)
QEMU = "qemu-system-x86_64"
BUSYBOX = Path("/bin/busybox")
#: The modules the initramfs loads (with their dependencies) to mount the root.
BOOT_MODULES = ("virtio_pci", "9pnet_virtio", "9p")
#: Seconds a KVM probe boot may take before KVM counts as unusable.
KVM_PROBE_SECONDS = 20
CONTROL = "/run/railyard-vm"  # the control share's mount point inside the VM


class VmUnavailable(RuntimeError):
    """This machine cannot start the VM (a package or the kernel missing)."""


@dataclass(frozen=True)
class VmResult:
    returncode: int | None  # None: the command did not end in time
    output: str  # the command's stdout and stderr, interleaved
    console: str  # the kernel's console (boot messages, panics)
    seconds: float
    accel: str

    @property
    def timed_out(self) -> bool:
        return self.returncode is None


def kernel_release() -> str:
    """The newest Debian 6.1 kernel installed (``linux-image-amd64``)."""
    found = sorted(
        (p.name.removeprefix("vmlinuz-") for p in Path("/boot").glob("vmlinuz-6.1.*")),
        key=lambda r: [
            int(x) if x.isdigit() else x for x in r.replace("-", ".").split(".")
        ],
    )
    if not found:
        raise VmUnavailable("no Debian 6.1 kernel in /boot (apt: linux-image-amd64)")
    return found[-1]


def unavailable_reason() -> str | None:
    """Why the VM cannot start here, or None when it can."""
    if os.geteuid() != 0:
        return "needs root (the VM shares / and loads modules)"
    for tool in (QEMU,):
        if shutil.which(tool) is None:
            return f"{tool} not installed (apt: qemu-system-x86)"
    if not BUSYBOX.exists():
        return f"{BUSYBOX} missing (apt: busybox-static)"
    try:
        kernel_release()
    except VmUnavailable as exc:
        return str(exc)
    return None


# ------------------------------------------------------------------ initramfs


def _cpio_newc(entries: Iterable[tuple[str, int, bytes]]) -> bytes:
    """A newc cpio archive of (path, mode, data); symlinks carry their target."""
    out = io.BytesIO()

    def pad() -> None:
        out.write(b"\0" * (-out.tell() % 4))

    for ino, (name, mode, data) in enumerate([*entries, ("TRAILER!!!", 0, b"")], 1):
        raw = name.encode() + b"\0"
        fields = (ino, mode, 0, 0, 1, 0, len(data), 0, 0, 0, 0, len(raw), 0)
        out.write(b"070701" + b"".join(b"%08X" % f for f in fields) + raw)
        pad()
        out.write(data)
        pad()
    return out.getvalue()


def _boot_module_paths(release: str) -> list[Path]:
    """The .ko files to insmod, dependencies first (modprobe's own order)."""
    proc = subprocess.run(
        ["modprobe", "-S", release, "-a", "--show-depends", *BOOT_MODULES],
        capture_output=True,
        text=True,
        check=True,
    )
    paths: list[Path] = []
    for line in proc.stdout.splitlines():
        words = line.split()
        if words[:1] == ["insmod"] and Path(words[1]) not in paths:
            paths.append(Path(words[1]))
    return paths


INIT = """#!/bin/busybox sh
# The VM's first stage: mount this host's / read-only over 9p and switch to it.
/bin/busybox --install -s /bin
mkdir -p /proc /sys /dev /newroot
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for ko in $(cat /modules.order); do insmod "/modules/$ko" || exit 1; done
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=512000 root /newroot
for dir in tmp run var/tmp; do mount -t tmpfs -o mode=1777 tmpfs "/newroot/$dir"; done
mkdir -p /newroot{control}
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 control /newroot{control}
i=0
while read -r path; do
  mkdir -p "/newroot$path" 2>/dev/null
  mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 "share$i" "/newroot$path"
  i=$((i + 1))
done < /newroot{control}/shares
for dir in proc sys dev; do mount --move "/$dir" "/newroot/$dir"; done
exec switch_root /newroot /bin/sh {control}/stage2
"""

STAGE2 = """# The VM's second stage, on the host's root: run the command, power off.
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t cgroup2 cgroup2 /sys/fs/cgroup 2>/dev/null
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
ip link set lo up
hostname railyard-vm
/bin/sh {control}/command > {control}/output 2>&1
echo $? > {control}/rc
sync
echo o > /proc/sysrq-trigger
"""


def initramfs(release: str) -> Path:
    """The busybox initramfs for ``release``, built once and cached."""
    modules = _boot_module_paths(release)
    init = INIT.replace("{control}", CONTROL).encode()
    key = hashlib.sha256(
        init + BUSYBOX.read_bytes() + str(modules).encode()
    ).hexdigest()[:12]
    base = (
        CACHE / release
        if os.access(CACHE.parent, os.W_OK)
        else Path(tempfile.gettempdir())
    )
    path = base / f"initramfs-{release}-{key}.cpio.gz"
    if path.exists():
        return path
    entries: list[tuple[str, int, bytes]] = [
        ("bin", 0o40755, b""),
        ("bin/busybox", 0o100755, BUSYBOX.read_bytes()),
        ("init", 0o100755, init),
        ("modules", 0o40755, b""),
        ("modules.order", 0o100644, "".join(f"{p.name}\n" for p in modules).encode()),
    ]
    entries += [(f"modules/{p.name}", 0o100644, p.read_bytes()) for p in modules]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_bytes(gzip.compress(_cpio_newc(entries), compresslevel=1))
    os.replace(tmp, path)
    return path


# ------------------------------------------------------------------------ boot


def _qemu_argv(
    release: str,
    accel: str,
    control: Path,
    shares: Sequence[Path],
    memory_mb: int,
    cpus: int,
) -> list[str]:
    argv = [
        QEMU, "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
        "-m", str(memory_mb), "-smp", str(cpus),
        "-kernel", f"/boot/vmlinuz-{release}", "-initrd", str(initramfs(release)),
        "-append", "console=ttyS0 quiet loglevel=4 panic=-1 mitigations=off",
        "-serial", f"file:{control / 'console'}",
        # A spare PCI function bound to a driver (virtio-pci), for the VF
        # adapter's driver rebind; nothing in the VM uses it.
        "-device", "virtio-rng-pci",
    ]  # fmt: skip
    if accel == "kvm":
        argv += ["-accel", "kvm", "-cpu", "host"]
    else:
        argv += ["-accel", "tcg,thread=multi", "-cpu", "max"]
    virtfs = [("root", Path("/"), True), ("control", control, False)]
    virtfs += [(f"share{i}", p, False) for i, p in enumerate(shares)]
    for tag, path, readonly in virtfs:
        opts = f"local,path={path},mount_tag={tag},security_model=none,multidevs=remap"
        argv += ["-virtfs", opts + (",readonly=on" if readonly else "")]
    return argv


def _boot(
    command: str,
    accel: str,
    release: str,
    shares: Sequence[Path],
    timeout: float,
    memory_mb: int,
    cpus: int,
) -> VmResult:
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="railyard-vm-") as tmp:
        control = Path(tmp)
        (control / "command").write_text(command + "\n")
        (control / "stage2").write_text(STAGE2.replace("{control}", CONTROL))
        (control / "shares").write_text("".join(f"{p}\n" for p in shares))
        argv = _qemu_argv(release, accel, control, shares, memory_mb, cpus)
        with subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        ) as qemu:
            try:
                qemu_out, _ = qemu.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                qemu.kill()
                qemu_out, _ = qemu.communicate()
        rc_file = control / "rc"
        returncode = int(rc_file.read_text()) if rc_file.exists() else None

        def text(name: str) -> str:
            path = control / name
            return path.read_text(errors="replace") if path.exists() else ""

        console = text("console") + qemu_out.decode(errors="replace")
        return VmResult(
            returncode, text("output"), console, time.monotonic() - start, accel
        )


def _kvm_boots(release: str) -> bool:
    """One short probe boot under KVM: does Debian's kernel get to userspace?"""
    result = _boot("true", "kvm", release, (), KVM_PROBE_SECONDS, 512, 1)
    return result.returncode == 0


def choose_accel(release: str) -> str:
    forced = os.environ.get("RAILYARD_VM_ACCEL")
    if forced in ("kvm", "tcg"):
        return forced
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return "tcg"
    flags = Path("/proc/cpuinfo").read_text()
    if " vmx" not in flags and " svm" not in flags:
        return "tcg"  # a paravirtual KVM: it cannot run Debian's kernel
    boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    memo = CACHE / f"accel-{release}-{boot_id}"
    if memo.exists():
        return memo.read_text().strip()
    accel = "kvm" if _kvm_boots(release) else "tcg"
    if os.access(CACHE, os.W_OK):
        memo.write_text(accel + "\n")
    return accel


def run(
    command: str | Sequence[str],
    *,
    shares: Sequence[str | os.PathLike[str]] = (),
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    timeout: float = 600,
    memory_mb: int = 2048,
    cpus: int = 2,
) -> VmResult:
    """Boot, run ``command`` (a shell line or an argv) as root, power off.

    ``env`` is the command's whole environment (PATH included, default: a
    plain root PATH); ``cwd`` defaults to this process's. Raises
    ``VmUnavailable`` when the VM cannot start here.
    """
    reason = unavailable_reason()
    if reason is not None:
        raise VmUnavailable(reason)
    release = kernel_release()
    line = command if isinstance(command, str) else shlex.join(command)
    environment = {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    }
    environment.update(env or {})
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in environment.items())
    script = f"{exports}cd {shlex.quote(str(cwd or os.getcwd()))} || exit 1\n{line}"
    paths = [Path(p).resolve() for p in shares]
    return _boot(
        script, choose_accel(release), release, paths, timeout, memory_mb, cpus
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--share", action="append", default=[], help="a read-write directory"
    )
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument(
        "--console", action="store_true", help="print the kernel console too"
    )
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command")
    passed = {
        k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "TERM", "LANG")
    }
    try:
        result = run(command, shares=args.share, env=passed, timeout=args.timeout)
    except VmUnavailable as exc:
        print(f"vm: cannot start: {exc}", file=sys.stderr)
        return 125
    sys.stdout.write(result.output)
    if args.console or result.returncode is None:
        sys.stderr.write(result.console)
    print(
        f"vm: {result.accel}, {result.seconds:.1f} s, exit {result.returncode}",
        file=sys.stderr,
    )
    if result.timed_out:
        print(f"vm: the command did not end within {args.timeout:g} s", file=sys.stderr)
        return 124
    return result.returncode or 0


if __name__ == "__main__":
    sys.exit(main())
