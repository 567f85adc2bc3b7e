"""Security on the real stack: Kafka clients over SASL/SCRAM (every service, faust included) and Redis AUTH."""
from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from kafka.errors import KafkaError

from schemas import ResultStatus
from services.launcher import LocalLauncher
from services.stack import LocalStack
from shared.adapters.client import MeridianClient
from shared.adapters.kafka_io import make_admin
from shared.settings import KafkaSecurity, Settings
from tests.integration.helpers import digits_rows, make_query

pytestmark = pytest.mark.integration

KAFKA_PORT, SASL_PORT, REDIS_PORT = 19692, 19694, 16579
USER, PASSWORD, REDIS_PASSWORD = "meridian", "scram-secret-19694", "redis-secret-16579"
SASL_ENV = {
    "MERIDIAN_KAFKA_SASL_PORT": str(SASL_PORT), "MERIDIAN_KAFKA_SASL_USERNAME": USER,
    "MERIDIAN_KAFKA_SASL_PASSWORD": PASSWORD, "MERIDIAN_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
    "MERIDIAN_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256", "MERIDIAN_REDIS_PASSWORD": REDIS_PASSWORD,
}


@pytest.fixture(scope="module")
def secured(tmp_path_factory) -> Iterator[LocalStack]:
    stack = LocalStack(var_dir=tmp_path_factory.mktemp("secure-var"), kafka_port=KAFKA_PORT, redis_port=REDIS_PORT,
                       components=("kafka", "redis"), extra_env=SASL_ENV)
    with stack:
        # services reach the broker only through the SASL listener, and Redis only with its password
        stack.extra_env.update(MERIDIAN_KAFKA_BOOTSTRAP=f"127.0.0.1:{SASL_PORT}",
                               MERIDIAN_REDIS_URL=f"redis://:{REDIS_PASSWORD}@127.0.0.1:{REDIS_PORT}/0")
        yield stack


def sasl_settings(password: str) -> Settings:
    return Settings(kafka_bootstrap=f"127.0.0.1:{SASL_PORT}", kafka_security=KafkaSecurity(
        security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256", sasl_username=USER,
        sasl_password=password))


def test_queries_are_served_end_to_end_over_sasl_scram(secured, tmp_path, digits_variants) -> None:
    with LocalLauncher(secured.env, tmp_path) as launcher:
        scheduler = launcher.start_scheduler(metrics_port=19701)
        launcher.start_worker("sasl-w", variants=digits_variants[:1], metrics_port=19702)
        launcher.wait_for_workers(scheduler, 1, timeout_s=120)
        x, _ = digits_rows()
        queries = [make_query(x[k:k + 1]) for k in range(5)]
        with MeridianClient(sasl_settings(PASSWORD)) as client:
            for query in queries:
                client.send(query)
            client.flush()
            assert client.wait_for([q.query_id for q in queries], timeout_s=60)
            assert all(client.results[q.query_id][0].status is ResultStatus.OK for q in queries)


def test_a_wrong_scram_password_is_refused(secured) -> None:
    with pytest.raises(KafkaError):
        make_admin(sasl_settings("wrong-password")).list_topics()


def test_redis_requires_its_password(secured) -> None:
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(host="127.0.0.1", port=REDIS_PORT).ping()
    assert redis.Redis.from_url(secured.env["MERIDIAN_REDIS_URL"]).ping()
