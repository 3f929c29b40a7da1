"""The relaycc HTTP service: a FastAPI app in front of the compiler."""
