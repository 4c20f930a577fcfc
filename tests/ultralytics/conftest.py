"""Ultralytics' trainer fed by stoker (make check-ultralytics; the fixtures
are tests/conftest.py's): Ultralytics is kept off the network and out of
the user's home, before any test imports it."""

from stoker_testutil import ultralytics_offline

ultralytics_offline()
