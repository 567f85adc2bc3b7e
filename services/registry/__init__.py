"""The registry service: INFaaS's Model Registrar (variants generated, profiled, stored) and monitoring daemon."""
