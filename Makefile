# Meridian: every target installs what it needs first, so a fresh machine needs only `make demo` / `make test`.
PYTHON ?= python3
VAR := var
STAMP := $(VAR)/.installed
export PYTHONUNBUFFERED := 1

.PHONY: install models models-efficientnet stack-up stack-down demo demo-fcfs dashboards-shot test test-unit test-integration schemas \
        bench-pipeline bench-kairos bench-infaas-select bench-proteus bench-ramsis \
        bench-autoscale bench-cost bench-faults bench-sim-core bench-fidelity bench-serving bench-scale clean

$(STAMP): pyproject.toml infra/install.sh
	bash infra/install.sh
	@mkdir -p $(VAR) && touch $(STAMP)

install: $(STAMP)

# The ONNX files the services load (deterministic; retrained only when the recipe changes).
$(VAR)/models/.built: $(STAMP) $(wildcard shared/modelzoo/*.py)
	$(PYTHON) -m shared.modelzoo.build --out $(VAR)/models --no-profile
	$(PYTHON) -m shared.modelzoo.efficientnet --out $(VAR)/models --no-profile
	@touch $@

# Train, export and re-measure: rewrites the committed profiles/digits.json.
models: $(STAMP)
	$(PYTHON) -m shared.modelzoo.build --out $(VAR)/models --profiles profiles/digits.json
	@touch $(VAR)/models/.built

# Export the pretrained EfficientNet-Lite0/1/2 and re-measure: rewrites profiles/efficientnet-lite.json.
models-efficientnet: $(STAMP)
	$(PYTHON) -m shared.modelzoo.efficientnet --out $(VAR)/models --profiles profiles/efficientnet-lite.json

stack-up: install
	bash infra/kafka/kafka.sh start
	bash infra/redis/redis.sh start
	bash infra/prometheus/prometheus.sh start

stack-down:
	-bash infra/kafka/kafka.sh stop
	-bash infra/redis/redis.sh stop
	-bash infra/prometheus/prometheus.sh stop

demo: $(VAR)/models/.built
	$(PYTHON) -m services.demo

# The quick first smoke test: digits on two CPU workers, first come first served.
demo-fcfs: $(VAR)/models/.built
	$(PYTHON) -m services.demo.fcfs

# The demo, then each overview dashboard panel as Prometheus draws it (headless Chromium), in var/dashboards/.
dashboards-shot: $(VAR)/models/.built
	$(PYTHON) -m services.demo --screenshots

test: $(VAR)/models/.built
	$(PYTHON) -m pytest -q

test-unit: install
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

bench-sim-core: install
	$(PYTHON) -m bench.sim_core

bench-fidelity: $(VAR)/models/.built
	$(PYTHON) -m bench.fidelity

bench-serving: $(VAR)/models/.built
	$(PYTHON) -m bench.serving

bench-scale: $(VAR)/models/.built
	$(PYTHON) -m bench.scale

clean: stack-down
	rm -rf $(VAR) bench/results

# Regenerate the Grafana dashboards (infra/grafana/provisioning/dashboards) from shared/metrics.py.
.PHONY: dashboards
dashboards: install
	$(PYTHON) -m services.observability.dashboards
