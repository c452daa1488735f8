"""The dashboard: a JSON API, server-rendered pages and ``/metrics``, served inside ``up`` on the loop's own asyncio
loop. Its only contact with the supervisor is ``attach`` (the snapshot, the typed control requests, the run
changes); everything else here reads what that adapter hands it. Off unless ``web:`` or ``up --web`` asks for it."""
