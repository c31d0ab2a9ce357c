"""Integrations of redlease with frameworks, each in a module of its own that imports its
framework (``redlease.contrib.celery``); ``import redlease`` imports none of them."""
