"""The seccomp filter, read by a small classic-BPF evaluator written here: what each system call
gets, without trusting the kernel to tell us (tests/service/jobs/sandbox/test_bwrap.py checks that)."""

from __future__ import annotations

import errno
import struct

import pytest

from service.jobs.sandbox.seccomp import (
    AARCH64, CLONE_NEW_FLAGS, DENIED, RET_ALLOW, RET_ERRNO, RET_KILL_PROCESS, X86_64, Arch, filter_program,
)

CLONE_THREAD_FLAGS = 0x003D0F00  # what pthread_create passes: VM, FS, FILES, SIGHAND, THREAD, ...


def evaluate(program: bytes, nr: int, arch: int, arg0: int = 0) -> int:
    data = struct.pack("=iIQ6Q", nr, arch, 0, arg0, 0, 0, 0, 0, 0)
    code = [struct.unpack("=HBBI", program[i:i + 8]) for i in range(0, len(program), 8)]
    acc, pc = 0, 0
    while True:
        op, jt, jf, k = code[pc]
        if op == 0x20:
            acc = struct.unpack_from("=I", data, k)[0]
        elif op == 0x06:
            return k
        else:
            taken = {0x15: acc == k, 0x35: acc >= k, 0x45: acc & k != 0}[op]
            pc += jt if taken else jf
        pc += 1


@pytest.mark.parametrize("arch", [X86_64, AARCH64], ids=lambda a: a.name)
def test_every_denied_call_answers_eperm(arch: Arch) -> None:
    program = filter_program(arch)
    for name in DENIED:
        assert evaluate(program, arch.numbers[name], arch.audit_arch) == RET_ERRNO | errno.EPERM, name


@pytest.mark.parametrize("arch", [X86_64, AARCH64], ids=lambda a: a.name)
def test_clone_is_allowed_for_threads_and_processes_but_not_for_namespaces(arch: Arch) -> None:
    program = filter_program(arch)
    clone = arch.numbers["clone"]
    assert evaluate(program, clone, arch.audit_arch, CLONE_THREAD_FLAGS) == RET_ALLOW
    assert evaluate(program, clone, arch.audit_arch, 17) == RET_ALLOW  # fork: SIGCHLD only
    for bit in range(32):
        flag = 1 << bit
        if flag & CLONE_NEW_FLAGS:
            assert evaluate(program, clone, arch.audit_arch, flag | 17) == RET_ERRNO | errno.EPERM


@pytest.mark.parametrize("arch", [X86_64, AARCH64], ids=lambda a: a.name)
def test_clone3_answers_enosys_so_the_c_library_falls_back_to_clone(arch: Arch) -> None:
    assert evaluate(filter_program(arch), arch.numbers["clone3"], arch.audit_arch) == RET_ERRNO | errno.ENOSYS


def test_ordinary_calls_are_allowed() -> None:
    program = filter_program(X86_64)
    for nr in (0, 1, 2, 9, 57, 59, 60, 231):  # read, write, open, mmap, fork, execve, exit, exit_group
        assert evaluate(program, nr, X86_64.audit_arch) == RET_ALLOW


def test_another_architecture_or_the_x32_abi_kills_the_process() -> None:
    program = filter_program(X86_64)
    assert evaluate(program, 0, AARCH64.audit_arch) == RET_KILL_PROCESS
    assert evaluate(program, 0x40000000 + 272, X86_64.audit_arch) == RET_KILL_PROCESS


def test_both_tables_name_every_call_the_filter_needs() -> None:
    for arch in (X86_64, AARCH64):
        assert set(DENIED) | {"clone", "clone3"} <= set(arch.numbers)
