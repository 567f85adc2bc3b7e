"""Observability: the Kafka consumer-lag exporter and the Grafana dashboard generator."""
