"""Experiments on the one engine: each module builds workloads, fleets and controllers for one study
and reads its metrics from `shared.sim.SimResult`. Policies never import these; benches and tests do."""
