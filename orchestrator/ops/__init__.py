"""Running a team unattended: the systemd user unit of a root (``unit``, ``service``), and the configuration
as a JSON Schema and as its values in force (``configuration``)."""
