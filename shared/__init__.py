"""Meridian's common code: pure policies, the simulator, profiles, and the thin I/O adapters services share."""
