"""Run the pipeline on Celery workers: the app and its routing, thin tasks around the service.

:mod:`.celery_app` builds the app (settings, queues, routing); :mod:`.tasks` holds the tasks,
each a thin call into :mod:`agentic_iqa.runtime.service`.
"""
