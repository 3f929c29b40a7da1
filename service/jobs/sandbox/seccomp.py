"""The seccomp filter of the sandbox: classic BPF that bubblewrap installs before the job starts.

A job runs without capabilities in its own user namespace, so most dangerous calls fail anyway;
the filter closes what an unprivileged process may still do to leave or widen its sandbox or to
look into other processes: creating or joining namespaces (unshare, setns, clone with CLONE_NEW*
flags), ptrace and cross-process memory access, mounting, keyrings, bpf, perf events, kernel
modules and a few host-wide administrative calls. These answer EPERM, so a program that tries
one sees an ordinary error. clone3 answers ENOSYS: its flags live in memory a classic BPF filter
cannot read, and the C library falls back to clone, whose flags it can. A system call of another
architecture (x32 on x86_64, a 32-bit personality) kills the process: numbers there mean other
calls.

The filter is built from tables of numbers rather than libseccomp, which Python reaches only
through a binding that is not on PyPI; the program is small enough to check by reading.
"""

from __future__ import annotations

import errno
import platform
import struct
from dataclasses import dataclass

# BPF opcodes (linux/filter.h, linux/bpf_common.h) and seccomp return values (linux/seccomp.h).
_LD_W_ABS = 0x20
_JEQ_K = 0x15
_JGE_K = 0x35
_JSET_K = 0x45
_RET_K = 0x06
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
RET_KILL_PROCESS = 0x80000000

# Offsets into struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6].
_NR = 0
_ARCH = 4
_ARG0_LOW = 16  # little-endian: the low half of args[0]

CLONE_NEW_FLAGS = (
    0x00020000  # CLONE_NEWNS
    | 0x02000000  # CLONE_NEWCGROUP
    | 0x04000000  # CLONE_NEWUTS
    | 0x08000000  # CLONE_NEWIPC
    | 0x10000000  # CLONE_NEWUSER
    | 0x20000000  # CLONE_NEWPID
    | 0x40000000  # CLONE_NEWNET
)

DENIED = (
    "unshare", "setns", "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd",
    "mount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount", "fsopen", "fsconfig",
    "fsmount", "mount_setattr", "keyctl", "add_key", "request_key", "bpf", "perf_event_open",
    "userfaultfd", "kexec_load", "kexec_file_load", "init_module", "finit_module",
    "delete_module", "open_by_handle_at", "name_to_handle_at", "swapon", "swapoff", "reboot",
    "acct", "quotactl", "settimeofday", "syslog", "vhangup",
)


@dataclass(frozen=True)
class Arch:
    name: str
    audit_arch: int
    numbers: dict[str, int]
    # Numbers at or above this belong to another ABI sharing the architecture (x86_64's x32).
    foreign_from: int | None = None


X86_64 = Arch("x86_64", 0xC000003E, {
    "unshare": 272, "setns": 308, "ptrace": 101, "process_vm_readv": 310,
    "process_vm_writev": 311, "pidfd_getfd": 438, "mount": 165, "umount2": 166,
    "pivot_root": 155, "chroot": 161, "open_tree": 428, "move_mount": 429, "fsopen": 430,
    "fsconfig": 431, "fsmount": 432, "mount_setattr": 442, "keyctl": 250, "add_key": 248,
    "request_key": 249, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323,
    "kexec_load": 246, "kexec_file_load": 320, "init_module": 175, "finit_module": 313,
    "delete_module": 176, "open_by_handle_at": 304, "name_to_handle_at": 303, "swapon": 167,
    "swapoff": 168, "reboot": 169, "acct": 163, "quotactl": 179, "settimeofday": 164,
    "syslog": 103, "vhangup": 153, "clone": 56, "clone3": 435,
}, foreign_from=0x40000000)

AARCH64 = Arch("aarch64", 0xC00000B7, {
    "unshare": 97, "setns": 268, "ptrace": 117, "process_vm_readv": 270,
    "process_vm_writev": 271, "pidfd_getfd": 438, "mount": 40, "umount2": 39,
    "pivot_root": 41, "chroot": 51, "open_tree": 428, "move_mount": 429, "fsopen": 430,
    "fsconfig": 431, "fsmount": 432, "mount_setattr": 442, "keyctl": 219, "add_key": 217,
    "request_key": 218, "bpf": 280, "perf_event_open": 241, "userfaultfd": 282,
    "kexec_load": 104, "kexec_file_load": 294, "init_module": 105, "finit_module": 273,
    "delete_module": 106, "open_by_handle_at": 265, "name_to_handle_at": 264, "swapon": 224,
    "swapoff": 225, "reboot": 142, "acct": 89, "quotactl": 60, "settimeofday": 170,
    "syslog": 116, "vhangup": 58, "clone": 220, "clone3": 435,
})

_ARCHES = {"x86_64": X86_64, "amd64": X86_64, "aarch64": AARCH64, "arm64": AARCH64}


def host_arch() -> Arch | None:
    """The table for this machine, or None where there is none (the sandbox is then refused)."""
    return _ARCHES.get(platform.machine().lower())


def filter_program(arch: Arch) -> bytes:
    """The filter as an array of `struct sock_filter`, the form `bwrap --seccomp FD` reads."""
    program = _Program()
    program.load(_ARCH)
    program.jump(_JEQ_K, arch.audit_arch, if_true="arch_ok", if_false=None)
    program.ret(RET_KILL_PROCESS)
    program.label("arch_ok")
    program.load(_NR)
    if arch.foreign_from is not None:
        program.jump(_JGE_K, arch.foreign_from, if_true="kill", if_false=None)
    for name in DENIED:
        program.jump(_JEQ_K, arch.numbers[name], if_true="deny", if_false=None)
    program.jump(_JEQ_K, arch.numbers["clone3"], if_true="enosys", if_false=None)
    program.jump(_JEQ_K, arch.numbers["clone"], if_true=None, if_false="allow")
    program.load(_ARG0_LOW)
    program.jump(_JSET_K, CLONE_NEW_FLAGS, if_true="deny", if_false=None)
    program.label("allow")
    program.ret(RET_ALLOW)
    program.label("deny")
    program.ret(RET_ERRNO | errno.EPERM)
    program.label("enosys")
    program.ret(RET_ERRNO | errno.ENOSYS)
    program.label("kill")
    program.ret(RET_KILL_PROCESS)
    return program.assemble()


class _Program:
    """Instructions with symbolic jump targets, resolved to BPF's relative offsets."""

    def __init__(self) -> None:
        self._code: list[tuple[int, str | None, str | None, int]] = []
        self._labels: dict[str, int] = {}

    def load(self, offset: int) -> None:
        self._code.append((_LD_W_ABS, None, None, offset))

    def jump(self, op: int, value: int, *, if_true: str | None, if_false: str | None) -> None:
        self._code.append((op, if_true, if_false, value))

    def ret(self, value: int) -> None:
        self._code.append((_RET_K, None, None, value))

    def label(self, name: str) -> None:
        self._labels[name] = len(self._code)

    def assemble(self) -> bytes:
        out = bytearray()
        for index, (op, if_true, if_false, value) in enumerate(self._code):
            out += struct.pack("=HBBI", op, self._offset(index, if_true), self._offset(index, if_false), value)
        return bytes(out)

    def _offset(self, index: int, label: str | None) -> int:
        if label is None:
            return 0  # fall through to the next instruction
        distance = self._labels[label] - index - 1
        if not 0 <= distance <= 255:
            raise ValueError(f"jump to {label} out of range ({distance})")
        return distance
