"""A stand-in for ``systemctl``, ``journalctl`` and ``loginctl``: records its name and argv, as one JSON line, in
``$FAKE_SYSTEMD_RECORD``, and answers like the tool would.

``FAKE_SYSTEMD_FAIL`` names a verb (``show-environment``, ``enable``, ...) that fails with systemctl's own
wording; ``FAKE_SYSTEMD_LINGER`` is what ``loginctl show-user -p Linger`` says (default ``no``).
"""

import json
import os
import sys

tool = os.path.basename(sys.argv[0])
args = sys.argv[1:]
with open(os.environ["FAKE_SYSTEMD_RECORD"], "a", encoding="utf-8") as record:
    record.write(json.dumps([tool, *args]) + "\n")
failing = os.environ.get("FAKE_SYSTEMD_FAIL", "")
if failing and failing in args:
    if failing == "show-environment":
        print("Failed to connect to bus: No medium found", file=sys.stderr)
    else:
        print(f"Failed to {failing} unit: Access denied", file=sys.stderr)
    sys.exit(1)
if tool == "loginctl":
    print(f"Linger={os.environ.get('FAKE_SYSTEMD_LINGER', 'no')}")
elif tool == "systemctl" and "show-environment" in args:
    print("PATH=/usr/bin:/bin")
elif tool == "systemctl" and "status" in args:
    print("● the unit - active (running)")
