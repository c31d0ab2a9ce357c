"""The asyncio shell."""
