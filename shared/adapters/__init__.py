"""The Kafka and Redis adapters: the I/O that the pure policy packages never import.

* `kafka_io` - kafka-python admin, producer and consumer configured the one Meridian way;
* `topics` - topic names (each paired with a `schemas` model), the layout, and topic creation;
* `dead_letter` - dead-letter copies of inputs that could not be processed;
* `client` - `MeridianClient`: send queries, receive exactly one final result per query;
* `infaas_store` - `RedisMetadataStore`, INFaaS's `shared.infaas.metadata.MetadataStore` on Redis;
* `ramsis_store` - `RedisPolicyStore`, RAMSIS policy sets in Redis;
* `token_store` - `RedisTokenStore`, the gateway's bearer tokens (their digests) in Redis.

The package imports none of them, so importing one adapter pulls in only its own client library.
"""
