"""Putting a freshly written artifact in place of an older one, atomically and without a stall.

ext4 (with its default `auto_da_alloc`) writes a file's data to disk before a rename that
replaces an existing file returns, so that a crash cannot leave an empty file behind: replacing a
GPT-2's 2.7 GB constant pool source stalls for seconds per gigabyte (2.4 s/GB measured). A
rename onto a free name does not, so the old file is first renamed aside. Readers see the old
file or the new one, never a partial one; between the two renames (microseconds) the name is
absent.
"""

from __future__ import annotations

import os
from pathlib import Path


def replace_file(tmp: Path, path: Path) -> None:
    """Rename `tmp` to `path`, removing what `path` named before."""
    old = path.with_name(f".{path.name}.old")
    try:
        os.replace(path, old)
    except FileNotFoundError:
        os.replace(tmp, path)
        return
    try:
        os.replace(tmp, path)
    except OSError:
        os.replace(old, path)  # the old file stays when the new one cannot take its place
        raise
    old.unlink(missing_ok=True)
