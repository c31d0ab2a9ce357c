"""The asyncio engines: what differs by runtime, on asyncio (twin of ``_threads``)."""
