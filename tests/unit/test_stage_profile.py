"""bench.stage_profile charges each py-spy sample to one stage of the scheduler's work."""
import os
import threading
import time

from confluent_kafka import Producer

from bench.stage_profile import OTHER, stage_of, stage_samples, threads_cpu_seconds


def test_a_metric_inside_the_core_step_is_metrics_and_the_step_itself_is_the_core() -> None:
    agent = ["_run_once (asyncio/base_events.py:1900)", "on_queries (services/scheduler/handlers.py:66)",
             "serve (services/scheduler/handlers.py:85)"]
    step = [*agent, "step (shared/serving/core.py:300)", "assign (shared/policy/fcfs.py:40)"]
    assert stage_of(step) == "core step"
    assert stage_of([*step, "inc (prometheus_client/metrics.py:330)"]) == "metrics"


def test_decoding_admission_encoding_and_sending_are_told_apart() -> None:
    agent = ["_run_once (asyncio/base_events.py:1900)", "on_queries (services/scheduler/handlers.py:66)",
             "on_query (services/scheduler/handlers.py:70)"]
    assert stage_of([*agent, "model_validate_json (pydantic/main.py:746)"]) == "decode and validate"
    assert stage_of([*agent, "admit (shared/serving/core.py:200)", "_fits (shared/serving/core.py:250)"]) == "admission"
    act = [*agent, "act (services/scheduler/handlers.py:92)"]
    assert stage_of([*act, "dispatch_batch (services/scheduler/messages.py:30)",
                     "model_dump_json (pydantic/main.py:500)"]) == "encode"
    assert stage_of([*act, "send (services/scheduler/publisher.py:28)"]) == "produce"
    assert stage_of(agent) == "scheduler's handlers"
    assert stage_of(["run_forever (asyncio/base_events.py:608)", "_run_once (asyncio/base_events.py:1900)"]) == OTHER
    under_mode = ["main (faust/app/base.py:823)", "run_using_worker (faust/cli/base.py:644)",
                  "execute_from_commandline (mode/worker.py:280)", "run_forever (asyncio/base_events.py:608)"]
    assert stage_of([*under_mode, "_run_once (asyncio/base_events.py:1900)"]) == OTHER, \
        "faust's command line and mode run every loop"
    assert stage_of([*under_mode, "_wrapped (faust/app/base.py:1035)"]) == "faust"


def test_collapsed_stacks_are_counted_per_stage() -> None:
    collapsed = ("a (x.py:1);model_validate_json (pydantic/main.py:1) 7\n"
                 "a (x.py:1);inc (prometheus_client/metrics.py:2) 3\n"
                 "a (x.py:1);inc (prometheus_client/metrics.py:9) 2\n")
    assert stage_samples(collapsed) == {"decode and validate": 7, "metrics": 5}


def test_only_the_event_loops_samples_are_counted() -> None:
    loop = "_run_module_as_main (<frozen runpy>:198);<module> (services/scheduler/__main__.py:21)"
    waiting_in_poll = "_bootstrap (threading.py:1002);_read (services/scheduler/query_reader.py:98);" \
                      "poll_messages (shared/adapters/rdkafka.py:131)"
    assert stage_samples(f"{loop};admit (shared/serving/core.py:250) 4\n{waiting_in_poll} 30\n") == {"admission": 4}


def test_cpu_is_counted_per_group_of_threads() -> None:
    producer = Producer({"bootstrap.servers": "127.0.0.1:9"})  # librdkafka's threads, idle
    burned, counted = threading.Event(), threading.Event()
    reader = threading.Thread(target=lambda: (burn(0.3), burned.set(), counted.wait()))
    try:
        before = threads_cpu_seconds(os.getpid())
        burn(0.3)  # on the main thread: the event loop's, in a scheduler
        reader.start()
        burned.wait()
        spent = threads_cpu_seconds(os.getpid()) - before  # while the thread lives: an ended one is not counted
    finally:
        counted.set()
        producer.flush(0)
    assert spent.event_loop >= 0.25 and spent.reading >= 0.25
    assert spent.librdkafka < 0.1


def burn(seconds: float) -> None:
    until = time.thread_time() + seconds
    while time.thread_time() < until:
        pass
