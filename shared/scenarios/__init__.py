"""Experiments on the simulator: what evaluates a policy by simulating it, kept out of the policy packages.

* `model_switching` - ModelSwitching's offline table, measured by simulation (``profile_model_switching``).
"""
