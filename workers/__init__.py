"""Celery: the app, its routing, and thin tasks around :mod:`agentic_iqa.runtime.service`."""
