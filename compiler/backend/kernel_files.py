"""Which host kernels share a C file.

The kernels of a model are compiled in parallel, a file per process, and each file's object is
kept in the compile cache under the hash of its text. Both want files of similar size; the
cache also wants a file's set of kernels to depend on the kernels themselves, not on where they
sit in the model, so that two models sharing most kernels (a model with its weights bound or
passed in, built for `c` or for `cblas, c`) share most files.

So the grouping is content-defined, like the chunking of backup tools: kernels are ordered by
the hash of their C, and a file ends after a kernel whose hash, read as a fraction of 1, is
below the kernel's share of `TARGET_FILE_BYTES` (a kernel as large as the target always ends
its file), or when the file would grow past `MAX_FILE_BYTES`. A kernel added to or removed from
a model changes only the file it falls in. A model whose kernels are few or small stays one
file, in the kernels' own order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

# gcc -O3 compiles our kernels at roughly 30-35 KB of C per second per core, and each file
# costs about 0.05 s of CPU before its first kernel (process start, the headers, the helpers):
# ResNet-50's 28 kernels (344 KB) took 10.5 CPU-s in 19 files of ~16 KB, of which ~1 s was that
# fixed cost. Files of ~32 KB halve it and still give a 2-core machine a dozen files to spread
# (the builder starts the largest first); a file stops at twice the target, so no single file
# runs alone for long at the end.
TARGET_FILE_BYTES = 32 * 1024
MIN_FILE_BYTES = TARGET_FILE_BYTES // 4
MAX_FILE_BYTES = 2 * TARGET_FILE_BYTES
# Below this much C, or this few kernels, one file: nothing to gain from more processes.
SPLIT_FROM_BYTES = 24 * 1024
SPLIT_FROM_KERNELS = 4
_SCALE = 1 << 64


def kernel_groups(definitions: Sequence[str]) -> list[list[int]]:
    """Groups of indices into `definitions` (the kernels' C text), one per file."""
    sizes = [len(d) for d in definitions]
    if not definitions:
        return []
    if sum(sizes) < SPLIT_FROM_BYTES or len(definitions) < SPLIT_FROM_KERNELS:
        return [list(range(len(definitions)))]
    digests = [hashlib.sha256(d.encode()).digest() for d in definitions]
    order = sorted(range(len(definitions)), key=lambda i: (digests[i], i))
    groups: list[list[int]] = []
    current: list[int] = []
    size = 0
    for i in order:
        if current and size + sizes[i] > MAX_FILE_BYTES:
            groups.append(current)
            current, size = [], 0
        current.append(i)
        size += sizes[i]
        fraction = int.from_bytes(digests[i][:8], "big") / _SCALE
        if size >= MIN_FILE_BYTES and fraction * TARGET_FILE_BYTES < sizes[i]:
            groups.append(current)
            current, size = [], 0
    if current:
        groups.append(current)
    return groups
