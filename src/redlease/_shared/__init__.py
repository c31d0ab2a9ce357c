"""What the sync and asyncio shells share, runtime-neutral and with no I/O: the
base classes' plans and local state (``*base.py``), the client's hold table and owner
ids (``state.py``), who waits where (``channels.py``, ``lines.py``), what a forked child
makes anew (``fork.py``)."""
