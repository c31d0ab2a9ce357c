"""The thread engines: what differs by runtime, on threads (twin of ``_asyncio``)."""
