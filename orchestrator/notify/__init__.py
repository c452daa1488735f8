"""Notifications: the team tells people when it needs them (a question, a failure, a pause) through the
channels of ``notifications:`` in roles.yaml, off the loop, each on a worker thread of its own."""
