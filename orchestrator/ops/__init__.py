"""Running a team unattended: the systemd user unit of a root (``unit``, ``service``)."""
