"""The relaycc HTTP service: a FastAPI app in front of the compiler.

A request comes in through api/ (routes, admission, submission), becomes a job of jobs/ (queue,
worker, sandbox) and ends as a module in store/; app.py and state.py put them together, and
settings.py, problems.py and arrays.py are shared by every layer.
"""
