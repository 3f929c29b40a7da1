"""Pages a browser opens: the explorer at `/` and the API docs at `/docs`, every asset served by
the service itself (a machine without internet shows them too)."""
