"""What runs a step or a job: the persisted steps (:mod:`.service`), their leases' heartbeat
(:mod:`.heartbeat`), the supervisor that heals a fleet (:mod:`.supervisor`), a dataset job from
submit to its last item (:mod:`.lifecycle`), and a tool's mapping refitted to a job's opinion
scores (:mod:`.recalibration`).

Above the domain (state, agents, pipeline, VLMs, tools) and the database; below the command
line and the Celery tasks, which are thin layers over it.
"""
