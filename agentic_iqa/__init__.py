"""agentic-iqa: image-quality assessment that plans, measures with real IQA tools, and explains."""

__version__ = "0.1.0"
