"""One router per resource of the HTTP API; each calls into service/api/ (submission, running,
views) and reads the store (service/store/)."""
