"""The team's own tools: ``send`` for agents, ``trace`` and ``release`` for people; each works with or without ``up``."""
