from agentic_iqa.cli import app

app(prog_name="agentic-iqa")
