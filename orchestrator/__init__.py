"""orchestrator: run a team of AI agents through Markdown memos, each memo exactly once."""

__version__ = "0.1.0"
