# trainclinic: make lab | test | test-compat | release | bench | grade | gpu-check | new-lesson | test-lesson
VENV    ?= .venv
PY      := $(VENV)/bin/python
# torch first, pinned: a fresh venv resolving torch>=2.4 would download a multi-GB CUDA build.
# Elsewhere: make lab TORCH="torch==2.5.1"   (or any torch >= 2.4 your machine has)
TORCH   ?= torch==2.13.0
PORT    ?= 8888
PYTEST_ARGS ?=
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: venv lab test test-main test-compat compat-build release bench grade gpu-check chromium clean new-lesson test-lesson

venv: $(VENV)/.ready

$(VENV)/.ready: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install -q $(TORCH)
	$(PY) -m pip install -q -e '.[course,dev]'
	touch $@

lab: venv
	@echo "JupyterLab on http://127.0.0.1:$(PORT)/lab/tree/notebooks (Ctrl-C to stop)"
	$(VENV)/bin/jupyter lab --ServerApp.root_dir=$(CURDIR) --ServerApp.default_url=/lab/tree/notebooks \
		--ip=127.0.0.1 --port=$(PORT) --no-browser --allow-root --IdentityProvider.token=''

chromium:
	@command -v chromium >/dev/null || { [ "$$(id -u)" = 0 ] && apt-get update -qq && apt-get install -y -qq chromium >/dev/null; } \
		|| { echo "the browser tests need Debian's chromium: sudo apt-get install chromium"; exit 1; }

# The whole suite: today's pins, and beside it the compatibility suite on the other declared runtimes
# (tools/compat.py), whose venvs build first (cached outside the clone, keyed by their pins). Side by side, because
# neither keeps both cores busy alone (kernels starting, processes waiting for each other, timeouts); the runtime
# suite on today's pins runs after the main suite, in the same chain, so the two chains take about as long. The
# compatibility logs follow.
COMPAT_SIDE  = $(filter-out pins,$(or $(COMPAT_ENVS),colab floor pins))
COMPAT_AFTER = $(filter pins,$(or $(COMPAT_ENVS),colab floor pins))
test: venv chromium
	@mkdir -p artifacts
	( $(PY) tools/compat.py build $(COMPAT_BUILD) > artifacts/compat-build.log 2>&1; \
	  if [ -n "$(COMPAT_SIDE)" ]; then $(PY) tools/compat.py run $(COMPAT_SIDE) > artifacts/compat.log 2>&1; \
	  else : > artifacts/compat.log; fi ) & compat=$$!; \
	  $(MAKE) test-main; status=$$?; \
	  if [ -n "$(COMPAT_AFTER)" ]; then $(PY) tools/compat.py run $(COMPAT_AFTER) > artifacts/compat-pins.log 2>&1 \
	    || status=1; else : > artifacts/compat-pins.log; fi; \
	  wait $$compat || status=1; cat artifacts/compat-build.log artifacts/compat.log artifacts/compat-pins.log; \
	  exit $$status

test-main: venv chromium
	$(PY) -m pytest -n 2 --dist loadgroup -m "not runtime" --durations=25 $(PYTEST_ARGS)

# COMPAT_ENVS: any of colab floor pins (default: all); each runs tests/test_runtimes.py and the unit tests.
COMPAT_ENVS ?=
COMPAT_BUILD = $(filter-out pins,$(or $(COMPAT_ENVS),colab floor))
test-compat: venv
	$(PY) tools/compat.py run $(COMPAT_ENVS)

compat-build:
	$(PY) tools/compat.py build $(COMPAT_BUILD)

release: venv
	$(PY) tools/release.py

# A new lesson's skeleton (docs/lesson-template.md): make new-lesson N=07 SLUG=mixed_precision TITLE="Mixed precision"
new-lesson: venv
	@test -n "$(N)" -a -n "$(SLUG)" -a -n "$(TITLE)" || { echo 'usage: make new-lesson N=07 SLUG=mixed_precision TITLE="Mixed precision"'; exit 2; }
	$(PY) tools/new_lesson.py $(N) $(SLUG) "$(TITLE)"

# One lesson's inner loop, no browser: template, release, solution in a kernel, every variant, explore, quoted messages,
# the 50-seed sweep and nbgrader grading of its core submissions. make test-lesson L=07 (a number, slug or folder)
test-lesson: venv
	@test -n "$(L)" || { echo "usage: make test-lesson L=07"; exit 2; }
	$(PY) -m pytest -n 2 --dist loadgroup -m "not browser" -p no:cacheprovider \
		-k "$$($(PY) -c 'import sys; sys.path.insert(0, "."); from autograder.lessons import find; print(find(sys.argv[1]))' $(L)) or test_release_has_no_drift" $(PYTEST_ARGS)

# Lesson timings, the live-plot stall check (BENCH_STALL_RUNS one-cell LivePlot notebooks, 0 stalls expected),
# then grading a generated class of BENCH_STUDENTS x every lesson (about an hour at 40 on 2 cores).
BENCH_STUDENTS ?= 40
BENCH_STALL_RUNS ?= 200
bench: venv
	$(PY) tools/bench.py --students $(BENCH_STUDENTS) --stall-runs $(BENCH_STALL_RUNS)

grade: venv
	$(PY) -m autograder.grade $(ARGS)

# Runs with the venv's python if there is one, else python3 (a GPU box: CUDA torch, no Jupyter); refuses without CUDA.
gpu-check:
	$(if $(wildcard $(PY)),$(PY),python3) tools/gpu_check.py

clean:
	rm -rf .grading artifacts .pytest_cache
