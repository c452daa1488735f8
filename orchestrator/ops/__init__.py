"""Running a team unattended: the systemd user unit (``unit``, ``service``), the configuration as a JSON Schema
and as its effective values (``schema``, ``effective``), and shell completion (``completion``)."""
