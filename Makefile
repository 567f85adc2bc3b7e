# Meridian: every target installs what it needs first, so a fresh machine needs only `make demo` / `make test`.
PYTHON ?= python3
VAR := var
STAMP := $(VAR)/.installed
DEV_STAMP := $(VAR)/.installed-dev
DIGITS := $(VAR)/models/.digits
export PYTHONUNBUFFERED := 1

.PHONY: install install-dev models models-efficientnet stack-up stack-down demo demo-fcfs dashboards-shot test test-unit test-integration schemas \
        bench-pipeline bench-kairos bench-infaas-select bench-proteus bench-ramsis \
        bench-autoscale bench-cost bench-faults bench-payload bench-machines bench-exactly-once bench-sim-core bench-fidelity bench-serving bench-scale \
        bench-gateway bench-priorities bench-gpu bench-hosts bench-image clean

# The runtime (serve, the client, the CLI); building models and the tests add torch and pytest.
$(STAMP): pyproject.toml infra/install.sh
	bash infra/install.sh
	@mkdir -p $(VAR) && touch $(STAMP)

$(DEV_STAMP): $(STAMP)
	bash infra/install.sh dev
	@touch $(DEV_STAMP)

install: $(STAMP)

install-dev: $(DEV_STAMP)

# The digits family as committed in profiles/digits (ONNX files and the test split): serving needs no torch.
$(DIGITS): $(STAMP) $(wildcard profiles/digits/*)
	@mkdir -p $(VAR)/models && cp profiles/digits/* $(VAR)/models/ && touch $@

# ... and EfficientNet-Lite exported from its pretrained weights (torch), for the tests and benches.
$(VAR)/models/.built: $(DEV_STAMP) $(DIGITS) shared/modelzoo/efficientnet.py
	$(PYTHON) -m shared.modelzoo.efficientnet --out $(VAR)/models --no-profile
	@touch $@

# Retrain, export and re-measure the digits family: rewrites profiles/digits/ and profiles/digits.json.
models: $(DEV_STAMP)
	$(PYTHON) -m shared.modelzoo.build --out profiles/digits --profiles profiles/digits.json
	$(MAKE) $(DIGITS)

# Export the pretrained EfficientNet-Lite0/1/2 and re-measure: rewrites profiles/efficientnet-lite.json.
models-efficientnet: $(DEV_STAMP)
	$(PYTHON) -m shared.modelzoo.efficientnet --out $(VAR)/models --profiles profiles/efficientnet-lite.json

stack-up: install
	bash infra/kafka/kafka.sh start
	bash infra/redis/redis.sh start
	bash infra/prometheus/prometheus.sh start

stack-down:
	-bash infra/kafka/kafka.sh stop
	-bash infra/redis/redis.sh stop
	-bash infra/prometheus/prometheus.sh stop

# The demo's third act classifies photographs with the real EfficientNet-Lite models: it builds them (torch).
demo: $(VAR)/models/.built
	$(PYTHON) -m services.demo

# The quick first smoke test: digits on two CPU workers, first come first served.
demo-fcfs: $(DIGITS)
	$(PYTHON) -m services.demo.fcfs

# The demo, then each overview dashboard panel as Prometheus draws it (headless Chromium), in var/dashboards/.
dashboards-shot: $(VAR)/models/.built
	$(PYTHON) -m services.demo --screenshots

# The Helm chart's tools (tests/unit/test_helm_chart.py): helm built from its Go module, Strimzi's schemas (npm).
HELM := $(VAR)/tools/helm
$(HELM):
	GOBIN=$(abspath $(VAR)/tools) go install helm.sh/helm/v4/cmd/helm@v4.3.2
CHART_SCHEMAS := deploy/helm/validation/node_modules/.package-lock.json
$(CHART_SCHEMAS): deploy/helm/validation/package-lock.json
	cd deploy/helm/validation && npm ci --no-audit --no-fund

test: $(VAR)/models/.built $(HELM) $(CHART_SCHEMAS)
	$(PYTHON) -m pytest -q

test-unit: $(DEV_STAMP) $(HELM) $(CHART_SCHEMAS)
	$(PYTHON) -m pytest -q tests/unit

test-integration: $(VAR)/models/.built
	$(PYTHON) -m pytest -q tests/integration

schemas: install
	$(PYTHON) -m schemas.export

bench-pipeline: $(VAR)/models/.built
	$(PYTHON) -m bench.pipeline

bench-kairos: install
	$(PYTHON) -m bench.kairos

bench-infaas-select: install
	$(PYTHON) -m bench.infaas_select

bench-proteus: install
	$(PYTHON) -m bench.proteus

bench-ramsis: install
	$(PYTHON) -m bench.ramsis

bench-cost: $(VAR)/models/.built
	$(PYTHON) -m bench.cost

bench-autoscale: install
	$(PYTHON) -m bench.autoscale

bench-faults: $(VAR)/models/.built
	$(PYTHON) -m bench.faults

bench-exactly-once: install
	$(PYTHON) -m bench.exactly_once

bench-sim-core: install
	$(PYTHON) -m bench.sim_core

bench-fidelity: $(VAR)/models/.built
	$(PYTHON) -m bench.fidelity

bench-payload: $(VAR)/models/.built
	$(PYTHON) -m bench.payload

# A real worker's measurement of this machine against the committed profiles, what a restart saves, and
# who serves what when two real workers (one thread, two threads) announce their measurements (live, alone).
bench-machines: $(VAR)/models/.built
	$(PYTHON) -m bench.machines

# On a machine with a GPU (<= 5 min): CUDA against the CPU per variant and batch, fp16 against fp32, then a
# minute of real photographs served at 0.6x the GPU worker's capacity. Without one it says so and fails;
# `python -m bench.gpu --rehearse` runs it with the CPU standing in, to check the bench itself.
bench-gpu: $(VAR)/models/.built
	$(PYTHON) -m bench.gpu

# Hosts of their own (network namespaces, as root): brokers, Redis, schedulers and workers each on its own
# address, TLS and SCRAM between them; a worker's, a broker's and the serving scheduler's link cut for 10 s
# and healed under load (~5 min, alone).
bench-hosts: $(VAR)/models/.built
	$(PYTHON) -m bench.hosts

# The image (infra/docker/Dockerfile) built by podman from a Debian root made by mmdebstrap, and two of its
# containers serving on the hosts rig (as root; installs mmdebstrap and podman; ~3 min).
bench-image: install
	$(PYTHON) -m bench.image

bench-serving: $(VAR)/models/.built
	$(PYTHON) -m bench.serving

bench-scale: $(VAR)/models/.built
	$(PYTHON) -m bench.scale

# Ray Serve, the peer bench-gateway measures beside the gateway (pyproject.toml's `peer` extra), in its own
# venv because its pins clash with the runtime's (protobuf); onnxruntime (CPU) and numpy at the runtime's versions.
PEER := $(VAR)/peer/.installed
$(PEER): | $(STAMP)
	$(PYTHON) -m venv $(VAR)/peer
	$(VAR)/peer/bin/pip install --progress-bar off "ray[serve]==2.60.0" \
	  $$($(PYTHON) -c 'import numpy, onnxruntime; print(f"onnxruntime=={onnxruntime.__version__} numpy=={numpy.__version__}")')
	@touch $@

# Meridian's gateway against Ray Serve (default and fastest mode), HTTP in and out, same model and load (~7 min).
bench-gateway: $(VAR)/models/.built $(PEER)
	$(PYTHON) -m bench.gateway

bench-priorities: $(VAR)/models/.built
	$(PYTHON) -m bench.priorities

clean: stack-down
	rm -rf $(VAR) bench/results

# Regenerate the Grafana dashboards (infra/grafana/provisioning/dashboards) from shared/metrics.py, and the
# Helm chart's copies of them and of the Prometheus rules.
.PHONY: dashboards
dashboards: install
	$(PYTHON) -m services.observability.dashboards
	cp infra/grafana/provisioning/dashboards/*.json infra/prometheus/rules/*.yml deploy/helm/meridian/files/
