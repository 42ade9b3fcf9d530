"""SCM network edges: gRPC servicers, the daemon, the aiohttp web server (kept import-light)."""
