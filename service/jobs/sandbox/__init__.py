"""The bubblewrap sandbox a job's work runs in: the bwrap command and its limits (bwrap.py), the
seccomp filter, the user C policy, and the program run inside it (entry.py, which calls work.py)."""
