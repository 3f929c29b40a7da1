"""A job's life after the API queued it: the queue (embedded or Celery), the worker's job
functions (worker.py), the work itself (work.py) in the sandbox or a forked child, and the normal
form a job is built from. A job's artifacts and status end in service/store/."""
