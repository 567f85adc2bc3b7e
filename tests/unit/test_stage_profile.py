"""bench.stage_profile charges each py-spy sample to one stage of the scheduler's work."""
from bench.stage_profile import OTHER, stage_of, stage_samples


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
    under_mode = ["execute_from_commandline (mode/worker.py:280)", "run_forever (asyncio/base_events.py:608)"]
    assert stage_of([*under_mode, "_run_once (asyncio/base_events.py:1900)"]) == OTHER, "mode runs every loop"
    assert stage_of([*under_mode, "_wrapped (faust/app/base.py:1035)"]) == "faust"


def test_the_reading_threads_are_fetching_or_handing_over() -> None:
    thread = ["_bootstrap (threading.py:1002)", "_read (services/scheduler/query_reader.py:98)"]
    assert stage_of([*thread, "consume_ready (services/scheduler/query_reader.py:170)"]) == "fetch (librdkafka)"
    follower = ["_bootstrap (threading.py:1002)", "run (concurrent/futures/thread.py:58)"]
    assert stage_of([*follower, "poll_messages (shared/adapters/rdkafka.py:140)"]) == "fetch (librdkafka)", \
        "a follower's poll is not the core's step, though it lives in shared/"
    assert stage_of([*thread, "run_coroutine_threadsafe (asyncio/tasks.py:937)"]) == "hand-off to the event loop"
    assert stage_of([*thread, "_commit (services/scheduler/query_reader.py:140)"]) == "commit"


def test_collapsed_stacks_are_counted_per_stage() -> None:
    collapsed = ("a (x.py:1);model_validate_json (pydantic/main.py:1) 7\n"
                 "a (x.py:1);inc (prometheus_client/metrics.py:2) 3\n"
                 "a (x.py:1);inc (prometheus_client/metrics.py:9) 2\n")
    assert stage_samples(collapsed) == {"decode and validate": 7, "metrics": 5}


def test_an_idle_executor_thread_is_not_counted() -> None:
    waiting = "_bootstrap (threading.py:1002);run (threading.py:982);_worker (concurrent/futures/thread.py:81)"
    working = waiting.replace(":81)", ":83)") + ";poll_messages (shared/adapters/rdkafka.py:131)"
    assert stage_samples(f"{waiting} 30\n{working} 4\n") == {"fetch (librdkafka)": 4}
