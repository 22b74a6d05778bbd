"""Run a step or a job: where a dataset job's life and a run's steps happen.

- :mod:`.submission`: a job submitted, its rows streamed into the database.
- :mod:`.lifecycle`: a job fed a window of runs at a time, ended, resumed, cancelled.
- :mod:`.local`: a job run in this process, and the notes left when that run is stopped
  (Ctrl-C, SIGTERM, a full disk).
- :mod:`.progress`: where a job stands (counts, rate, ETA, the state a user is shown).
- :mod:`.service`: the persisted steps of one run; :mod:`.heartbeat`: their leases;
  :mod:`.embedded`: runs walked to their end in this process, alone or in batches.
- :mod:`.batches`: a batch job's rounds of provider batches.
- :mod:`.supervisor`: the workers' supervisor, which heals a fleet.
- :mod:`.consumers`: which queues have a live worker (announced in the broker), which do not.
- :mod:`.headline`: a finished job's figures for ``eval list``.
- :mod:`.recalibration`: a tool's mapping refitted to a job's opinion scores.

Above the domain (state, agents, pipeline, VLMs, tools) and the database; below the command
line and the Celery tasks, which are thin layers over it.
"""
