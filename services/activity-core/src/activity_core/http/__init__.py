"""The HTTP edge: app factory, routers, auth, error mapping."""
