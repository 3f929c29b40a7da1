"""The module store: each module's request, status and artifacts, their integrity, and the lock
one service holds on it. The interface and the status rules (base.py) have two implementations:
a directory (directory.py, the default) and an S3 bucket (s3.py, with its lease in s3_lease.py);
module_store.py opens either. The API writes jobs into it, workers write their results; it
imports nothing of service/api/ or service/jobs/."""
