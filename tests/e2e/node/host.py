"""What a real node changes on the host, recorded before it starts and undone after it stops.

The kubelet, kube-proxy, containerd and the CNI plugins are not test doubles: they set kernel
settings, add iptables chains, mount the kubelet's directories and network namespaces, create
cgroups and directories, and a bridge. `HostChanges.capture()` records the state that matters;
`restore()` puts every sysctl back, deletes every iptables rule and chain that was not there before,
unmounts every new mount, removes the kubepods cgroups, the bridge and the directories the node made,
and returns what it could not undo (a teardown that silently leaves the machine changed would
poison the next run, or another job on the machine).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["BRIDGE", "HOST_DIRS", "SYSCTLS", "HostChanges"]

#: Set by the kubelet's kernel tunables (vm.overcommit_memory=1, vm.panic_on_oom=0, kernel.panic=10,
#: kernel.panic_on_oops=1, the root key quotas), by kube-proxy (route_localnet, the bridge netfilter
#: hooks, conntrack timeouts) and by the bridge CNI plugin (ip_forward).
SYSCTLS = (
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
    "net.netfilter.nf_conntrack_max",
    "net.netfilter.nf_conntrack_tcp_timeout_established",
    "net.netfilter.nf_conntrack_tcp_timeout_close_wait",
    "net.ipv4.ip_forward",
    "net.ipv4.conf.all.route_localnet",
    "net.bridge.bridge-nf-call-iptables",
    "net.bridge.bridge-nf-call-ip6tables",
)
#: Directories the kubelet and the CNI plugins create outside the node's own workdir.
HOST_DIRS = (
    Path("/var/lib/kubelet"),
    Path("/var/log/pods"),
    Path("/var/log/containers"),
    Path("/var/lib/cni"),
    Path("/run/netns"),
)
BRIDGE = "cni-e2e0"
IPTABLES = ("iptables", "ip6tables")
TABLES = ("filter", "nat", "mangle", "raw")
CGROUP_ROOT = Path("/sys/fs/cgroup")


def _sysctl_path(name: str) -> Path:
    return Path("/proc/sys") / name.replace(".", "/")


def _rules(tool: str, table: str) -> list[str]:
    """`iptables -t TABLE -S`: the chain declarations (-N/-P) and rules (-A) of one table."""
    if shutil.which(tool) is None:
        return []
    result = subprocess.run([tool, "-w", "-t", table, "-S"], capture_output=True, text=True, check=False)
    return result.stdout.splitlines() if result.returncode == 0 else []


def _mounts() -> list[str]:
    """Mount points in /proc/self/mountinfo order (a child after its parent)."""
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        points.append(line.split()[4].replace("\\040", " "))
    return points


def _kubepods_cgroups() -> set[Path]:
    found: set[Path] = set()
    if not CGROUP_ROOT.is_dir():
        return found
    for controller in CGROUP_ROOT.iterdir():
        for top in controller.glob("kubepods*"):
            if top.is_dir():
                found.add(top)
                found.update(path for path in top.rglob("*") if path.is_dir())
    return found


@dataclass
class HostChanges:
    """The host state before the node started, and what restoring it could not undo."""

    sysctls: dict[str, str] = field(default_factory=dict)
    rules: dict[tuple[str, str], list[str]] = field(default_factory=dict)
    mounts: list[str] = field(default_factory=list)
    cgroups: set[Path] = field(default_factory=set)
    existing_dirs: set[Path] = field(default_factory=set)
    bridge_existed: bool = False

    @classmethod
    def capture(cls) -> HostChanges:
        return cls(
            sysctls={
                name: _sysctl_path(name).read_text().strip()
                for name in SYSCTLS
                if _sysctl_path(name).exists()
            },
            rules={(tool, table): _rules(tool, table) for tool in IPTABLES for table in TABLES},
            mounts=_mounts(),
            cgroups=_kubepods_cgroups(),
            existing_dirs={path for path in HOST_DIRS if path.exists()},
            bridge_existed=Path(f"/sys/class/net/{BRIDGE}").exists(),
        )

    def restore(self, own_paths: tuple[Path, ...]) -> list[str]:
        """Undo the node's changes; `own_paths` are roots whose new mounts are the node's too.

        Returns one line per change that could not be undone (empty: the host is as it was).
        """
        problems: list[str] = []
        problems += self._restore_mounts(own_paths)
        problems += self._restore_cgroups()
        problems += self._restore_iptables()
        problems += self._restore_sysctls()
        if not self.bridge_existed and Path(f"/sys/class/net/{BRIDGE}").exists():
            result = subprocess.run(
                ["ip", "link", "delete", BRIDGE], capture_output=True, text=True, check=False
            )
            if result.returncode != 0:
                problems.append(f"ip link delete {BRIDGE}: {result.stderr.strip()}")
        for path in HOST_DIRS:
            if path not in self.existing_dirs and path.exists():
                shutil.rmtree(path, ignore_errors=True)
                if path.exists():
                    problems.append(f"could not remove {path}")
        return problems

    def _restore_mounts(self, own_paths: tuple[Path, ...]) -> list[str]:
        before = set(self.mounts)
        roots = [str(path) for path in (*own_paths, *HOST_DIRS)]
        new = [
            point
            for point in _mounts()
            if point not in before and any(point == root or point.startswith(root + "/") for root in roots)
        ]
        problems = []
        for point in sorted(set(new), key=len, reverse=True):
            result = subprocess.run(["umount", point], capture_output=True, text=True, check=False)
            if result.returncode != 0:
                lazy = subprocess.run(["umount", "-l", point], capture_output=True, text=True, check=False)
                if lazy.returncode != 0:
                    problems.append(f"umount {point}: {lazy.stderr.strip() or result.stderr.strip()}")
        return problems

    def _restore_cgroups(self) -> list[str]:
        problems = []
        for path in sorted(_kubepods_cgroups() - self.cgroups, key=lambda p: len(p.parts), reverse=True):
            try:
                path.rmdir()
            except FileNotFoundError:
                continue
            except OSError as exc:
                problems.append(f"rmdir {path}: {exc.strerror}")
        return problems

    def _restore_iptables(self) -> list[str]:
        problems = []
        for (tool, table), before in self.rules.items():
            after = _rules(tool, table)
            old = set(before)
            new_rules = [line for line in after if line.startswith("-A ") and line not in old]
            new_chains = [line.split()[1] for line in after if line.startswith("-N ") and line not in old]
            for rule in reversed(new_rules):
                words = shlex.split(rule)  # `-S` quotes comments as a shell would
                argv = [tool, "-w", "-t", table, "-D", *words[1:]]
                deleted = subprocess.run(argv, capture_output=True, check=False).returncode == 0
                # A rule inside a new chain goes with the chain's flush below.
                if not deleted and words[1] not in new_chains:
                    problems.append(f"{tool} -t {table}: could not delete {rule}")
            for chain in new_chains:
                subprocess.run([tool, "-w", "-t", table, "-F", chain], capture_output=True, check=False)
            for chain in new_chains:
                result = subprocess.run(
                    [tool, "-w", "-t", table, "-X", chain], capture_output=True, text=True, check=False
                )
                if result.returncode != 0:
                    problems.append(f"{tool} -t {table} -X {chain}: {result.stderr.strip()}")
        return problems

    def _restore_sysctls(self) -> list[str]:
        problems = []
        for name, value in self.sysctls.items():
            path = _sysctl_path(name)
            try:
                if path.read_text().strip() != value:
                    path.write_text(value + "\n")
            except OSError as exc:
                problems.append(f"sysctl {name}={value}: {exc.strerror}")
        return problems


def is_root() -> bool:
    return os.geteuid() == 0
