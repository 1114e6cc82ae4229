# dcpattn — build, AOT kernels, demo, tests, benchmark, install.
#   make            build the tools, render the default variant set with the CLI and
#                   precompile it into the AOT cache build/aot (ARCH=sm_90a)
#   make demo       the main job: a JIT-compiled merge checked and timed on the GPU, or,
#                   with no GPU, the default set compiled and tabulated
#   make test       CPU tests, then GPU tests when a GPU is visible
#   make bench      the benchmark (needs a GPU)
#   make install    PREFIX=/usr/local DESTDIR=
# Each of demo/test checks for Lua 5.4 (lua5.4, liblua5.4-dev) and installs it with apt-get
# when it is missing. Switches: NO_NCCL=1, V=1 (show commands).

PREFIX   ?= /usr/local
ARCH     ?= sm_90a
AOT_JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CUDA     ?= /usr/local/cuda
BUILD    ?= build
LUA      ?= lua5.4
CC       ?= cc
CXX      ?= c++
NVCC     ?= $(CUDA)/bin/nvcc

LUA_CFLAGS ?= $(shell pkg-config --cflags lua5.4 2>/dev/null || echo -I/usr/include/lua5.4)
LUA_LIBS   ?= $(shell pkg-config --libs lua5.4 2>/dev/null || echo -llua5.4)
WARN     := -Wall -Wextra -Werror
CFLAGS   ?= -O2 -g
DEFS     := -DDCPATTN_DATA_DIR='"$(CURDIR)"' -DDCPATTN_AOT_DIR='"$(CURDIR)/$(BUILD)/aot"'
HOSTFLAGS = -std=c99 $(WARN) $(CFLAGS) -Iinclude $(LUA_CFLAGS) $(DEFS)
HOSTLIBS  = $(LUA_LIBS) -ldl -lm -lpthread
CUDART    = -I$(CUDA)/include -L$(CUDA)/lib64 -Wl,-rpath,$(CUDA)/lib64 -lcudart

ifeq ($(V),1)
Q :=
else
Q := @
endif

HEADER    := include/dcpattn.h
GEN_SRC   := $(wildcard gen/dcpattn/*.lua) gen/dcpattn-gen
TEMPLATES := $(wildcard templates/*.cu templates/*.cuh)

.PHONY: all deps demo test test-cpu test-gpu bench install clean aot fuzz
all: aot $(BUILD)/demo $(BUILD)/dcp_nccl

# ---- dependencies: Lua 5.4 from Debian ----
deps:
	@if command -v $(LUA) >/dev/null 2>&1 && echo '#include <lua.h>' | $(CC) $(LUA_CFLAGS) -E -x c - >/dev/null 2>&1; then \
	  echo "lua: $$(command -v $(LUA)) (found)"; \
	else \
	  echo "lua: missing, installing lua5.4 liblua5.4-dev"; \
	  SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq lua5.4 liblua5.4-dev >/dev/null; \
	fi
	@if [ -x $(NVCC) ]; then echo "cuda: $(CUDA) (found)"; else echo "cuda: $(CUDA) missing (needed for NVRTC and cudart)"; fi

$(BUILD):
	$(Q)mkdir -p $(BUILD)

# ---- host programs (each a single C file that includes the header's implementation) ----
$(BUILD)/%: examples/%.c $(HEADER) tests/ref.h tests/gpu_util.h | $(BUILD)
	@echo "  CC      $@"
	$(Q)$(CC) $(HOSTFLAGS) -Itests $< -o $@ $(HOSTLIBS) $(CUDART)

$(BUILD)/%: tests/%.c $(HEADER) tests/ref.h tests/check.h tests/gpu_util.h | $(BUILD)
	@echo "  CC      $@"
	$(Q)$(CC) $(HOSTFLAGS) -Itests $< -o $@ $(HOSTLIBS) $(CUDART)

$(BUILD)/test_cpu: tests/test_cpu.c tests/ref.h tests/check.h | $(BUILD)
	@echo "  CC      $@ (ASan, UBSan)"
	$(Q)$(CC) -std=c99 $(WARN) -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -Itests $< -o $@ -lm

$(BUILD)/test_validate: tests/test_validate.c $(HEADER) tests/check.h | $(BUILD)
	@echo "  CC      $@ (ASan, UBSan)"
	$(Q)$(CC) -std=c99 $(WARN) -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -Iinclude -Itests \
	  $(LUA_CFLAGS) $(DEFS) $< -o $@ $(HOSTLIBS)

# ---- AOT: the CLI renders the default set; the library precompiles it (one lookup path) ----
$(BUILD)/gen.stamp: $(GEN_SRC) $(TEMPLATES) $(HEADER) | $(BUILD)
	@echo "  GEN     $(BUILD)/gen (default variant set)"
	$(Q)mkdir -p $(BUILD)/gen && $(LUA) gen/dcpattn-gen --all -o $(BUILD)/gen
	$(Q)touch $@

$(BUILD)/aot.stamp: $(BUILD)/gen.stamp $(BUILD)/aot_build
	@echo "  NVRTC   $(BUILD)/aot ($(ARCH))"
	$(Q)$(BUILD)/aot_build --arch $(ARCH) --out $(BUILD)/aot --check-rendered $(BUILD)/gen -j $(AOT_JOBS)
	$(Q)touch $@

aot: deps $(BUILD)/aot.stamp

# ---- the two commands of the README ----
demo: aot $(BUILD)/demo
	$(Q)$(BUILD)/demo

CPU_TESTS := $(BUILD)/test_cpu $(BUILD)/test_validate $(BUILD)/test_cache $(BUILD)/test_header_c $(BUILD)/test_header_cpp \
             $(BUILD)/test_combine $(BUILD)/test_cache_tsan $(BUILD)/test_launch
GPU_TESTS := $(BUILD)/test_gpu $(BUILD)/test_gpu_attn $(BUILD)/test_gpu_mla $(BUILD)/test_gpu_threads $(BUILD)/test_gpu_big
# the fuzz target joins make test where clang can link libFuzzer (libclang-rt)
HAVE_LIBFUZZER := $(shell printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { (void)d; (void)n; return 0; }' \
                    | clang -x c -fsanitize=fuzzer - -o /dev/null >/dev/null 2>&1 && echo yes)
FUZZ_BIN  := $(if $(HAVE_LIBFUZZER),$(BUILD)/fuzz_host)

$(BUILD)/test_cache_tsan: tests/test_cache.c $(HEADER) tests/check.h | $(BUILD)
	@echo "  CC      $@ (ThreadSanitizer)"
	$(Q)$(CC) -std=c99 $(WARN) -O1 -g -fsanitize=thread -Iinclude -Itests $(LUA_CFLAGS) $(DEFS) $< -o $@ $(HOSTLIBS)

$(BUILD)/test_header_c: tests/test_header.c $(HEADER) | $(BUILD)
	@echo "  CC      $@ (C99 -Wall -Wextra -Werror)"
	$(Q)$(CC) -std=c99 $(WARN) -pedantic -Iinclude -c tests/test_header.c -o $@.api.o
	$(Q)$(CC) -std=c99 $(WARN) -Iinclude $(LUA_CFLAGS) -DTEST_IMPLEMENTATION tests/test_header.c -o $@ $(HOSTLIBS)

$(BUILD)/test_header_cpp: tests/test_header.c $(HEADER) | $(BUILD)
	@echo "  CXX     $@ (C++ -Wall -Wextra -Werror)"
	$(Q)$(CXX) -x c++ -std=c++11 $(WARN) -Iinclude $(LUA_CFLAGS) -DTEST_IMPLEMENTATION tests/test_header.c -o $@ $(HOSTLIBS)

test: deps aot $(CPU_TESTS) $(GPU_TESTS) $(FUZZ_BIN)
	@tests/run_tests.sh $(BUILD)

test-gpu: aot $(GPU_TESTS)
	$(Q)$(BUILD)/test_gpu

# the benchmark is CUDA C++ (its ceiling kernel and cuBLAS GEMM), built with nvcc
$(BUILD)/bench: examples/bench.cu $(HEADER) tests/ref.h tests/gpu_util.h | $(BUILD)
	@echo "  NVCC    $@"
	$(Q)$(NVCC) -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Iinclude -Itests $(LUA_CFLAGS) $(DEFS) \
	  $< -o $@ $(HOSTLIBS) -lcublas

bench: aot $(BUILD)/bench
	$(Q)$(BUILD)/bench --json $(BUILD)/bench.json
	$(Q)python3 examples/bench_plot.py $(BUILD)/bench.json $(BUILD)

# ---- install ----
install: aot
	$(Q)install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/share/dcpattn/gen/dcpattn \
	  $(DESTDIR)$(PREFIX)/share/dcpattn/templates $(DESTDIR)$(PREFIX)/share/dcpattn/include \
	  $(DESTDIR)$(PREFIX)/share/dcpattn/aot $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/pkgconfig
	$(Q)install -m 644 $(HEADER) $(DESTDIR)$(PREFIX)/include/
	$(Q)install -m 644 $(HEADER) $(DESTDIR)$(PREFIX)/share/dcpattn/include/
	$(Q)install -m 644 gen/dcpattn/*.lua $(DESTDIR)$(PREFIX)/share/dcpattn/gen/dcpattn/
	$(Q)install -m 755 gen/dcpattn-gen $(DESTDIR)$(PREFIX)/share/dcpattn/gen/
	$(Q)ln -sf ../share/dcpattn/gen/dcpattn-gen $(DESTDIR)$(PREFIX)/bin/dcpattn-gen
	$(Q)install -m 644 $(TEMPLATES) $(DESTDIR)$(PREFIX)/share/dcpattn/templates/
	$(Q)cp -p $(BUILD)/aot/*.cubin $(BUILD)/aot/nvrtc.version $(DESTDIR)$(PREFIX)/share/dcpattn/aot/ 2>/dev/null || true
	$(Q)printf 'prefix=%s\nincludedir=$${prefix}/include\ndatadir=$${prefix}/share/dcpattn\n\nName: dcpattn\nDescription: attention kernels and merges for decode context parallelism\nVersion: %s\nCflags: -I$${includedir} -DDCPATTN_DATA_DIR=\\"$${datadir}\\" -DDCPATTN_AOT_DIR=\\"$${datadir}/aot\\" %s\nLibs: %s -ldl -lm -lpthread\n' \
	  '$(PREFIX)' "$$(sed -n 's/^#define DCPATTN_VERSION_STRING "\(.*\)"/\1/p' $(HEADER))" '$(LUA_CFLAGS)' '$(LUA_LIBS)' \
	  > $(DESTDIR)$(PREFIX)/lib/pkgconfig/dcpattn.pc
	@echo "installed into $(DESTDIR)$(PREFIX)"

clean:
	rm -rf $(BUILD)

# ---- fuzzing (clang libFuzzer): host validation and the generator's spec parsing ----
FUZZ_SECONDS ?= 60
$(BUILD)/fuzz_host: tests/fuzz_host.c $(HEADER) | $(BUILD)
	@echo "  CLANG   $@ (libFuzzer, ASan, UBSan)"
	$(Q)clang -std=c99 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -Iinclude $(LUA_CFLAGS) $(DEFS) $< -o $@ $(HOSTLIBS)

fuzz: deps $(BUILD)/fuzz_host
	$(Q)mkdir -p $(BUILD)/fuzz-corpus
	$(Q)printf 'gqa_bf16_d128_g8_m16' > $(BUILD)/fuzz-corpus/name; printf '\002merge_fp32_bf16' > $(BUILD)/fuzz-corpus/merge
	$(Q)$(BUILD)/fuzz_host -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 $(BUILD)/fuzz-corpus 2>&1 | tail -n 12
