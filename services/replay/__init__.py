"""Replay and what-if: what really arrived, served again in the simulator by every policy."""
