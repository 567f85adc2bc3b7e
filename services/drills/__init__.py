"""Fault drills: a steady load through the real stack while something breaks, and what the client saw.

The integration tests run each drill briefly and assert nothing was lost; ``make bench-faults`` runs
them longer and prints the outcomes.
"""
