"""The pure core: lock logic with no I/O. It never imports asyncio, threading, socket or redis.

Operations are generators that yield requests (run a script, subscribe, wait for a wake-up) and
receive the replies; the sync and asyncio shells each drive them with their own I/O.
"""
