"""The module store on disk (module_store.py): each module's request, status and artifacts,
their integrity, and the lock one service holds on it. The API writes jobs into it, workers
write their results; it imports nothing of service/api/ or service/jobs/."""
