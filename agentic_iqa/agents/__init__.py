"""The three roles of the agent, as plain functions over the state models.

No Celery, no SQL: each function takes the VLM client(s) and the tool registry it needs and
returns a model, so the in-process runner and the distributed pipeline call the same code.
"""
