"""Continuity between runs: context files, the journal, the handoff file and the note when a run dies.

``hooks.Continuity`` registers all of it in the supervisor's extension points
(prompt sections and notes, ``before_finish``, role holds); the other modules
are plain functions over files, used by it and by the ``journal`` and
``handoff`` commands.
"""
