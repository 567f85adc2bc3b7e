"""Security on the real stack: Kafka clients over SASL/SCRAM (every service, faust included), topic ACLs
that keep one application's results from another's clients, and Redis AUTH."""
from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import redis
from kafka.admin import ACL, ACLOperation, ACLPermissionType, ACLResourcePatternType, ResourcePattern, ResourceType
from kafka.errors import KafkaError, TopicAuthorizationFailedError

from schemas import ResultStatus
from services.launcher import LocalLauncher
from services.stack import LocalStack
from shared.adapters.client import MeridianClient, UnreadableTopic
from shared.adapters import topics
from shared.adapters.kafka_io import make_admin
from shared.settings import KafkaSecurity, Settings
from tests.integration.helpers import digits_rows, make_query

pytestmark = pytest.mark.integration

KAFKA_PORT, SASL_PORT, REDIS_PORT = 19692, 19694, 16579
USER, PASSWORD, REDIS_PASSWORD = "meridian", "scram-secret-19694", "redis-secret-16579"
#: one client user per application; the services' user is a super user
CLIENTS = {"app-a": ("client-a", "secret-a-19694"), "app-b": ("client-b", "secret-b-19694")}
SASL_ENV = {
    "MERIDIAN_KAFKA_SASL_PORT": str(SASL_PORT), "MERIDIAN_KAFKA_SASL_USERNAME": USER,
    "MERIDIAN_KAFKA_SASL_PASSWORD": PASSWORD, "MERIDIAN_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
    "MERIDIAN_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256", "MERIDIAN_REDIS_PASSWORD": REDIS_PASSWORD,
    "MERIDIAN_KAFKA_AUTHORIZER": "1",
    "MERIDIAN_KAFKA_SCRAM_USERS": " ".join(f"{user}:{secret}" for user, secret in CLIENTS.values()),
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


def sasl_settings(password: str, user: str = USER) -> Settings:
    return Settings(kafka_bootstrap=f"127.0.0.1:{SASL_PORT}", kafka_security=KafkaSecurity(
        security_protocol="SASL_PLAINTEXT", sasl_mechanism="SCRAM-SHA-256", sasl_username=user,
        sasl_password=password))


def grant(admin, user: str, operations: tuple[ACLOperation, ...], *topic_names: str) -> list[ACL]:
    return [ACL(f"User:{user}", "*", operation, ACLPermissionType.ALLOW,
                ResourcePattern(ResourceType.TOPIC, name, ACLResourcePatternType.LITERAL))
            for name in topic_names for operation in (*operations, ACLOperation.DESCRIBE)]


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


def test_a_client_reads_its_own_applications_results_and_is_refused_anothers(secured, tmp_path,
                                                                             digits_variants) -> None:
    admin = make_admin(sasl_settings(PASSWORD))
    acls = []
    for application, (user, _) in CLIENTS.items():
        acls += grant(admin, user, (ACLOperation.READ,), topics.results_topic(application), topics.RESULTS)
        acls += grant(admin, user, (ACLOperation.WRITE,), topics.QUERIES)
    admin.create_acls(acls)
    admin.close()
    env = {"MERIDIAN_APPLICATIONS": json.dumps({application: ["digits"] for application in CLIENTS})}
    with LocalLauncher(secured.env, tmp_path) as launcher:
        scheduler = launcher.start_scheduler(metrics_port=19703, extra_env=env)
        launcher.start_worker("acl-w", variants=digits_variants[:1], metrics_port=19704, extra_env=env)
        launcher.wait_for_workers(scheduler, 1, timeout_s=120)
        x, _ = digits_rows()
        client_a = sasl_settings(CLIENTS["app-a"][1], user=CLIENTS["app-a"][0])
        query = make_query(x[:1], application="app-a")
        with MeridianClient(client_a, applications=["app-a"]) as client:
            client.send(query)
            client.flush()
            assert client.wait_for([query.query_id], timeout_s=60)
            assert client.results[query.query_id][0].status is ResultStatus.OK
        with pytest.raises(UnreadableTopic, match="meridian.results.app-b"):
            MeridianClient(client_a, applications=["app-b"], topic_timeout_s=3.0)
        # and not only the client library: the broker itself refuses client A B's topic
        admin_a = make_admin(client_a)
        described = {t["name"]: t["error_code"] for t in admin_a.describe_topics(
            [topics.results_topic("app-a"), topics.results_topic("app-b")])}
        admin_a.close()
        assert described == {topics.results_topic("app-a"): 0,
                             topics.results_topic("app-b"): TopicAuthorizationFailedError.errno}
