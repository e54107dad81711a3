"""Process-tree monitor from /proc: CPU seconds and memory of a process and its descendants.

Why /proc and not psutil: psutil is not a dependency. Ray's processes (GCS, raylet, workers)
are descendants of the driver, so sampling the tree of one pid sees a whole sweep.
Memory figures (kB in /proc, reported in MiB):
  VmHWM   peak resident set of one process (high-water mark, kept by the kernel)
  RssAnon resident anonymous memory (heap: tensors, Python objects): what a copy would grow
  RssFile resident file-backed pages (libraries, the memmapped token cache): shared
  Pss     proportional set size: shared pages divided among the processes that map them, so
          the sum over processes is the real footprint of the tree
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
        kids.setdefault(ppid, []).append(int(name))
    return kids


def tree(root: int) -> list[int]:
    kids, out, todo = _children_map(), [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += kids.get(pid, [])
    return out


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of one process (its own threads; not its children)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def status_kb(pid: int, keys: tuple[str, ...] = ("VmHWM", "VmRSS", "RssAnon", "RssFile")
              ) -> dict[str, int]:
    out = {}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                k, _, v = line.partition(":")
                if k in keys:
                    out[k] = int(v.split()[0])
    except OSError:
        pass
    return out


def pss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


@dataclass
class ProcInfo:
    cmd: str  # the latest command line (Ray workers retitle themselves: ray::IDLE, ray::f)
    titles: set[str] = field(default_factory=set)
    cpu_s: float = 0.0
    hwm_kb: int = 0
    anon_kb: int = 0  # largest RssAnon seen
    file_kb: int = 0  # largest RssFile seen


@dataclass
class TreeMonitor:
    """Samples the tree of `root` every `interval` seconds in a background thread."""

    root: int
    interval: float = 0.25
    procs: dict[int, ProcInfo] = field(default_factory=dict)
    peak_pss_kb: int = 0  # largest sum of Pss over the tree at one sample
    peak_rss_kb: int = 0  # largest sum of VmRSS (double-counts shared pages)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TreeMonitor:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def sample(self) -> None:
        total_pss = total_rss = 0
        for pid in tree(self.root):
            if pid == os.getpid() and self.root != pid:
                continue
            info = self.procs.get(pid)
            if info is None:
                info = self.procs[pid] = ProcInfo("")
            info.cmd = cmdline(pid) or info.cmd
            info.titles.add(info.cmd)
            cpu = cpu_seconds(pid)
            if cpu is not None:
                info.cpu_s = cpu
            st = status_kb(pid)
            info.hwm_kb = max(info.hwm_kb, st.get("VmHWM", 0))
            info.anon_kb = max(info.anon_kb, st.get("RssAnon", 0))
            info.file_kb = max(info.file_kb, st.get("RssFile", 0))
            total_rss += st.get("VmRSS", 0)
            total_pss += pss_kb(pid)
        self.peak_pss_kb = max(self.peak_pss_kb, total_pss)
        self.peak_rss_kb = max(self.peak_rss_kb, total_rss)

    @property
    def cpu_s(self) -> float:
        return sum(p.cpu_s for p in self.procs.values())

    def matching(self, text: str) -> dict[int, ProcInfo]:
        """Processes that carried `text` in their command line at some sample."""
        return {pid: p for pid, p in self.procs.items() if any(text in t for t in p.titles)}


def self_kb() -> dict[str, int]:
    return status_kb(os.getpid())
