"""The serving loop, once: admission, queues, deadlines, workers, re-queueing and the policy's decisions.

Pure and I/O-free. The live scheduler (``services/scheduler``) drives `SchedulerCore` from Kafka with the
wall clock; the simulator (``shared.sim``) drives the very same class with a virtual clock. Emulated
workers and simulated ones take their service times from the same `ProfileServiceTime`.
"""
from shared.serving.core import STEP_INTERVAL_S, CoreConfig, Dispatch, Rejection, SchedulerCore, Step
from shared.serving.queue import Queued
from shared.serving.service_time import ProfileServiceTime, ServiceTime

__all__ = ["STEP_INTERVAL_S", "CoreConfig", "Dispatch", "ProfileServiceTime", "Queued", "Rejection", "SchedulerCore",
           "ServiceTime", "Step"]
