"""The ``orchestrator`` sub-commands: the parser (``parser``) and, one module per area, the functions that each
parse nothing more, call one core function and print through ``console``; ``cli.main`` dispatches to them."""
