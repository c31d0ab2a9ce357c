"""The thread-based shell."""
