"""The Open Inference Protocol front door: HTTP requests in, queries on Kafka, answers back (`app`)."""
