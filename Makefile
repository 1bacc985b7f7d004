.DEFAULT_GOAL := help
VENV := .venv/bin

help: ## Show this help
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

setup: ## Install Java/Maven if missing, uv, and the locked .venv
	@bash scripts/setup.sh

kerberos-client: setup ## Build the GSSAPI-capable Kafka client into .kerberos-client/ and install the MIT KDC (Kerberos tests)
	@bash scripts/build-kerberos-client.sh

demo: setup ## Set up and run the main job on local defaults (local Kafka, local Spark Connect, Delta, Dagster)
	$(VENV)/python examples/demo/demo.py

test: setup kerberos-client ## Set up and run the whole test suite (lint, types, docs build, unit, integration, e2e)
	$(VENV)/ruff check .
	$(VENV)/ruff format --check .
	$(VENV)/mypy
	$(VENV)/mypy examples
	NO_MKDOCS_2_WARNING=1 $(VENV)/mkdocs build --strict --site-dir .cache/site
	$(VENV)/pytest

lint: setup ## ruff check + format check + mypy
	$(VENV)/ruff check .
	$(VENV)/ruff format --check .
	$(VENV)/mypy
	$(VENV)/mypy examples

fmt: setup ## Format and auto-fix
	$(VENV)/ruff format .
	$(VENV)/ruff check --fix .

docs: setup ## Build the documentation site into site/ with strict link checking (SERVE=1: serve it on 127.0.0.1:8000)
	NO_MKDOCS_2_WARNING=1 $(VENV)/$(if $(SERVE),mkdocs serve,mkdocs build --strict)

schemas: setup ## Regenerate the JSON Schemas shipped in dynamic_kafka/schemas/ and docs/reference/configuration.md from the config models
	$(VENV)/python scripts/generate_schemas.py

unit: setup ## Fast tests only (no JVM, no brokers)
	$(VENV)/pytest tests/unit

bench: setup ## Run the benchmarks and print the table (QUICK=1 for the short mode)
	$(VENV)/python -m bench $(if $(QUICK),--quick,)

soak: setup ## Long randomized exactly-once checks: the protocol model (EXAMPLES, default 3000) and a nemesis soak on real components (OPERATIONS=N, DURATION=SECONDS)
	DYNAMIC_KAFKA_MODEL_EXAMPLES=$${EXAMPLES:-3000} $(VENV)/pytest tests/model -q -s -p no:cacheprovider
	$(VENV)/python -m bench.soak $(if $(OPERATIONS),--operations $(OPERATIONS),) $(if $(DURATION),--duration $(DURATION),)

ui: export DYNAMIC_KAFKA_CONFIG ?= $(if $(wildcard .demo/dynamic_kafka.yaml),.demo/dynamic_kafka.yaml,examples/demo/dynamic_kafka.yaml)
ui: export DAGSTER_HOME ?= $(CURDIR)/.dagster-home
ui: setup ## Start dagster dev on the demo workspace (and the local Spark Connect server its runs use)
	@mkdir -p "$$DAGSTER_HOME" && cp -n examples/demo/dagster.yaml "$$DAGSTER_HOME/dagster.yaml"
	$(VENV)/python -m devtools spark-connect up --master 'local[2]'
	SPARK_CONNECT_AUTHENTICATE_TOKEN="$$(cat .local-spark-connect/token)" $(VENV)/dagster dev -w workspace.yaml

screenshot: setup ## Screenshot the demo's UI (lineage, metadata plots, backfill partitions) into docs/; runs the demo if it never ran
	bash examples/demo/screenshot.sh docs

clean: ## Stop local clusters and remove local data (keeps the jar caches)
	-$(VENV)/python -m devtools local-kafka down
	-$(VENV)/python -m devtools spark-connect down
	rm -rf .local-kafka .local-spark-connect data .dagster-home .demo

.PHONY: help setup demo test lint fmt docs schemas unit bench soak ui clean
.PHONY: screenshot
