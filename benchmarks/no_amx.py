"""Run a command as if the CPU had no AMX: ``python benchmarks/no_amx.py CMD [ARGS...]``.

llama.cpp asks Linux for the AMX tile state (``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``)
before it offers its AMX buffer type; when that call fails it offers none and takes the same paths
as on a CPU without AMX. This installs a seccomp filter (kept across ``exec`` and by every child)
that fails exactly that call with EPERM, then ``exec``s the command. Used by
``benchmarks/local_model.py --no-amx`` to measure, on an AMX machine, what llama.cpp's extra buffer
types do where AMX is absent. Linux x86-64 only.
"""

from __future__ import annotations

import ctypes
import os
import platform
import struct
import sys

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
AUDIT_ARCH_X86_64 = 0xC000003E
NR_ARCH_PRCTL = 158  # x86-64
ARCH_REQ_XCOMP_PERM = 0x1023
EPERM = 1
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
LD_ABS_W, JEQ_K, RET_K = 0x20, 0x15, 0x06
# struct seccomp_data: int nr (0), u32 arch (4), u64 ip (8), u64 args[6] (16...)
OFF_NR, OFF_ARCH, OFF_ARG0 = 0, 4, 16


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def install_filter() -> None:
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        raise SystemExit("no_amx.py: Linux x86-64 only")
    program = b"".join(
        [
            _insn(LD_ABS_W, 0, 0, OFF_ARCH),
            _insn(JEQ_K, 0, 5, AUDIT_ARCH_X86_64),  # another ABI: allow
            _insn(LD_ABS_W, 0, 0, OFF_NR),
            _insn(JEQ_K, 0, 3, NR_ARCH_PRCTL),
            _insn(LD_ABS_W, 0, 0, OFF_ARG0),
            _insn(JEQ_K, 0, 1, ARCH_REQ_XCOMP_PERM),
            _insn(RET_K, 0, 0, RET_ERRNO | EPERM),
            _insn(RET_K, 0, 0, RET_ALLOW),
        ]
    )
    buf = ctypes.create_string_buffer(program, len(program))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = SockFprog(len(program) // 8, ctypes.addressof(buf))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise SystemExit(f"no_amx.py: PR_SET_NO_NEW_PRIVS failed: {os.strerror(ctypes.get_errno())}")
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(prog), 0, 0) != 0:
        raise SystemExit(f"no_amx.py: seccomp filter refused: {os.strerror(ctypes.get_errno())}")


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    install_filter()
    os.execvp(sys.argv[1], sys.argv[1:])


if __name__ == "__main__":
    main()
