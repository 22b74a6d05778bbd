"""Run the agent's three roles (planner, executor, summarizer) as plain functions over the state.

No Celery, no SQL: each function takes the VLM client(s) and the tool registry it needs and
returns a model, so the in-process runner and the distributed pipeline call the same code.

- :mod:`.team`: the clients and tool registry a run uses;
- :mod:`.planner`: the plan, read tolerantly and reconciled with the query;
- :mod:`.executor`: detection, analysis, selection and execution of the tools;
- :mod:`.summarizer` and :mod:`.fusion`: the answer, and the score fused from the evidence;
- :mod:`.jsonreply`: reading a model's JSON reply, asking again when nothing is usable.
"""
