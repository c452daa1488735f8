"""Workspaces: a git worktree per conversation for the roles that ask for one (``workspace: {mode: worktree}``),
one run at a time in each, and every attempt a transaction on the work (committed on success, set aside under a
ref of its own otherwise). ``extension.Workspaces`` plugs it into the supervisor; ``checks`` refuses a start that
cannot keep the promise; ``git`` is the git CLI; ``records`` the feature's table; ``show`` the ``diff`` command.
"""
