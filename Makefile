# dcpattn — build, AOT kernels, demo, tests, benchmark, install.
#   make            build the tools, render the default variant set with the CLI and
#                   precompile it into the AOT cache build/aot (ARCH=sm_90a)
#   make demo       the main job: a JIT-compiled merge checked and timed on the GPU, or,
#                   with no GPU, the default set compiled and tabulated
#   make test       CPU tests, then GPU tests when a GPU is visible
#   make test-gpu   the GPU test programs alone (each says so when it finds no GPU)
#   make bench      the benchmark (needs a GPU)
#   make limits     rewrite the family limits in include/dcpattn.h from the generator's spec
#   make install    PREFIX=/usr/local DESTDIR=; make uninstall (same variables) removes it
# Each of demo/test checks for Lua 5.4 (lua5.4, liblua5.4-dev) and installs it with apt-get
# when it is missing, before anything that needs it is built (deps is an order-only
# prerequisite of those rules, so make -j runs it first). Switch: V=1 shows the commands.
# Nothing is linked from CUDA or NCCL: the library opens the driver, NVRTC and NCCL at run
# time, so deps only reports whether they are there.

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

.PHONY: all deps demo test test-gpu bench limits install uninstall clean aot fuzz
all: aot $(BUILD)/demo $(BUILD)/dcp_nccl $(BUILD)/sched_model

# ---- dependencies: Lua 5.4 from Debian, pytest from PyPI ----
deps:
	@if command -v $(LUA) >/dev/null 2>&1 && echo '#include <lua.h>' | $(CC) $(LUA_CFLAGS) -E -x c - >/dev/null 2>&1; then \
	  echo "lua: $$(command -v $(LUA)) (found)"; \
	else \
	  echo "lua: missing, installing lua5.4 liblua5.4-dev"; \
	  SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq lua5.4 liblua5.4-dev >/dev/null; \
	fi
	@if [ -x $(NVCC) ]; then echo "cuda: $(CUDA) (found)"; else echo "cuda: $(CUDA) missing (needed for NVRTC and cudart)"; fi
	@if python3 -c 'import pytest' >/dev/null 2>&1; then echo "pytest: found (the Python package's tests)"; \
	else \
	  echo "pytest: missing, installing it (the Python package's tests)"; \
	  PIP_ROOT_USER_ACTION=ignore python3 -m pip install -q pytest >/dev/null 2>&1 || \
	    echo "pytest: could not be installed (python3 -m pip install pytest); the Python tests will say so"; \
	fi
	@if ldconfig -p 2>/dev/null | grep -q 'libnccl\.so\.2 '; then echo "nccl: libnccl.so.2 (found)"; \
	else echo "nccl: libnccl.so.2 missing (only the DCP combine over NCCL and examples/dcp_nccl need it, at run time)"; fi

$(BUILD):
	$(Q)mkdir -p $(BUILD)

# ---- host programs (each a single C file that includes the header's implementation) ----
$(BUILD)/%: examples/%.c $(HEADER) tests/ref.h tests/gpu_util.h | $(BUILD) deps
	@echo "  CC      $@"
	$(Q)$(CC) $(HOSTFLAGS) -Itests $< -o $@ $(HOSTLIBS) $(CUDART)

$(BUILD)/%: tests/%.c $(HEADER) tests/ref.h tests/check.h tests/gpu_util.h | $(BUILD) deps
	@echo "  CC      $@"
	$(Q)$(CC) $(HOSTFLAGS) -Itests $< -o $@ $(HOSTLIBS) $(CUDART)

$(BUILD)/test_cpu: tests/test_cpu.c tests/ref.h tests/check.h | $(BUILD)
	@echo "  CC      $@ (ASan, UBSan)"
	$(Q)$(CC) -std=c99 $(WARN) -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -Itests $< -o $@ -lm

$(BUILD)/test_sched: tests/test_sched.c templates/sched.cuh tests/check.h | $(BUILD)
	@echo "  CC      $@ (ASan, UBSan)"
	$(Q)$(CC) -std=c99 $(WARN) -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -Itests $< -o $@

$(BUILD)/test_validate: tests/test_validate.c $(HEADER) tests/check.h | $(BUILD) deps
	@echo "  CC      $@ (ASan, UBSan)"
	$(Q)$(CC) -std=c99 $(WARN) -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -Iinclude -Itests \
	  $(LUA_CFLAGS) $(DEFS) $< -o $@ $(HOSTLIBS)

$(BUILD)/test_sparse_cpu: tests/test_sparse_cpu.c $(HEADER) tests/ref.h tests/check.h | $(BUILD) deps
	@echo "  CC      $@ (ASan, UBSan)"
	$(Q)$(CC) -std=c99 $(WARN) -O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer -Iinclude -Itests \
	  $(LUA_CFLAGS) $(DEFS) $< -o $@ $(HOSTLIBS)

# the time model of MLA's balanced schedule (docs/performance.md, "Where S3's time goes")
$(BUILD)/sched_model: tests/sched_model.c templates/sched.cuh $(HEADER) | $(BUILD) deps
	@echo "  CC      $@"
	$(Q)$(CC) $(HOSTFLAGS) $< -o $@ $(HOSTLIBS)

# Timeline builds: the same sources with the kernels' stage timeline compiled in
# (DCPATTN_TIMELINE, templates/timeline.cuh): its test, the benchmark (docs/performance.md,
# "Timeline") and the AOT step's compiler, for tests/sass_loops.sh --timeline (what the marks
# cost a tile loop)
TIMELINE_BUILDS := $(BUILD)/test_timeline $(BUILD)/bench_timeline $(BUILD)/aot_build_timeline
$(TIMELINE_BUILDS): DEFS += -DDCPATTN_TIMELINE
$(BUILD)/test_timeline: templates/timeline.cuh
$(BUILD)/aot_build_timeline: examples/aot_build.c $(HEADER) | $(BUILD) deps
	@echo "  CC      $@"
	$(Q)$(CC) $(HOSTFLAGS) -Itests $< -o $@ $(HOSTLIBS) $(CUDART)

# ---- AOT: the CLI renders the default set; the library precompiles it (one lookup path) ----
$(BUILD)/gen.stamp: $(GEN_SRC) $(TEMPLATES) $(HEADER) | $(BUILD) deps
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

CPU_TESTS := $(BUILD)/test_cpu $(BUILD)/test_sched $(BUILD)/test_validate $(BUILD)/test_cache $(BUILD)/test_header_c $(BUILD)/test_header_cpp \
             $(BUILD)/test_combine $(BUILD)/test_cache_tsan $(BUILD)/test_launch $(BUILD)/test_limits $(BUILD)/test_sparse_cpu \
             $(BUILD)/test_timeline
GPU_TESTS := $(BUILD)/test_gpu $(BUILD)/test_gpu_attn $(BUILD)/test_gpu_mla $(BUILD)/test_gpu_threads $(BUILD)/test_gpu_big \
             $(BUILD)/test_gpu_sm80 $(BUILD)/test_gpu_sparse $(BUILD)/test_gpu_wgmma
# the fuzz target joins make test where clang can link libFuzzer (libclang-rt)
HAVE_LIBFUZZER := $(shell printf 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { (void)d; (void)n; return 0; }' \
                    | clang -x c -fsanitize=fuzzer - -o /dev/null >/dev/null 2>&1 && echo yes)
FUZZ_BIN  := $(if $(HAVE_LIBFUZZER),$(BUILD)/fuzz_host)

$(BUILD)/test_cache_tsan: tests/test_cache.c $(HEADER) tests/check.h | $(BUILD) deps
	@echo "  CC      $@ (ThreadSanitizer)"
	$(Q)$(CC) -std=c99 $(WARN) -O1 -g -fsanitize=thread -Iinclude -Itests $(LUA_CFLAGS) $(DEFS) $< -o $@ $(HOSTLIBS)

$(BUILD)/test_header_c: tests/test_header.c $(HEADER) | $(BUILD) deps
	@echo "  CC      $@ (C99 -Wall -Wextra -Werror; also with DCPATTN_TIMELINE)"
	$(Q)$(CC) -std=c99 $(WARN) -pedantic -Iinclude -c tests/test_header.c -o $@.api.o
	$(Q)$(CC) -std=c99 $(WARN) -Iinclude $(LUA_CFLAGS) -DTEST_IMPLEMENTATION tests/test_header.c -o $@ $(HOSTLIBS)
	$(Q)$(CC) -std=c99 $(WARN) -Iinclude $(LUA_CFLAGS) -DTEST_IMPLEMENTATION -DDCPATTN_TIMELINE -c tests/test_header.c \
	  -o $@.timeline.o

$(BUILD)/test_header_cpp: tests/test_header.c $(HEADER) | $(BUILD) deps
	@echo "  CXX     $@ (C++ -Wall -Wextra -Werror; also with DCPATTN_TIMELINE)"
	$(Q)$(CXX) -x c++ -std=c++11 $(WARN) -Iinclude $(LUA_CFLAGS) -DTEST_IMPLEMENTATION tests/test_header.c -o $@ $(HOSTLIBS)
	$(Q)$(CXX) -x c++ -std=c++11 $(WARN) -Iinclude $(LUA_CFLAGS) -DTEST_IMPLEMENTATION -DDCPATTN_TIMELINE -c \
	  tests/test_header.c -o $@.timeline.o

test: deps aot $(CPU_TESTS) $(GPU_TESTS) $(FUZZ_BIN)
	@tests/run_tests.sh $(BUILD)

test-gpu: aot $(GPU_TESTS)
	$(Q)for t in $(GPU_TESTS); do echo "$$t"; $$t || exit 1; done

limits: deps
	$(Q)$(LUA) gen/dcpattn-gen -v --limits $(HEADER)

# the benchmark is CUDA C++ (its ceiling kernel and cuBLAS GEMM), built with nvcc
$(BUILD)/bench $(BUILD)/bench_timeline: examples/bench.cu $(HEADER) tests/ref.h tests/gpu_util.h | $(BUILD) deps
	@echo "  NVCC    $@"
	$(Q)$(NVCC) -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Iinclude -Itests $(LUA_CFLAGS) $(DEFS) \
	  $< -o $@ $(HOSTLIBS) -lcublas

# the wgmma layouts the narrow MLA tiles assume (CUDA C++ on the templates' wrappers, sm_90a)
$(BUILD)/test_gpu_wgmma: tests/test_gpu_wgmma.cu templates/ptx.cuh templates/common.cuh tests/check.h tests/ref.h | $(BUILD) deps
	@echo "  NVCC    $@"
	$(Q)$(NVCC) -O2 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Itemplates -Itests $< -o $@

bench: aot $(BUILD)/bench
	$(Q)$(BUILD)/bench --json $(BUILD)/bench.json
	$(Q)python3 examples/bench_plot.py $(BUILD)/bench.json $(BUILD)

# ---- install ----
# The installed header finds its data through dcpattn_config.h, written here: dcpattn.pc
# passes only -DDCPATTN_INSTALLED, which `cc app.c $(pkg-config --cflags --libs dcpattn)`
# takes as it is (a quoted path in pkg-config's output needs a shell to parse it again).
IDIR     = $(DESTDIR)$(PREFIX)
IDATA    = $(IDIR)/share/dcpattn
cstring  = $(subst ",\",$(subst \,\\,$(1)))
install: aot
	$(Q)install -d $(IDIR)/include $(IDATA)/gen/dcpattn $(IDATA)/templates $(IDATA)/include $(IDATA)/aot \
	  $(IDIR)/bin $(IDIR)/lib/pkgconfig
	$(Q)install -m 644 $(HEADER) $(IDIR)/include/
	$(Q)printf '/* dcpattn_config.h: written by make install for PREFIX=%s (see DCPATTN_INSTALLED in dcpattn.h) */\n#ifndef DCPATTN_DATA_DIR\n#define DCPATTN_DATA_DIR "%s"\n#endif\n#ifndef DCPATTN_AOT_DIR\n#define DCPATTN_AOT_DIR "%s"\n#endif\n' \
	  '$(PREFIX)' '$(call cstring,$(PREFIX)/share/dcpattn)' '$(call cstring,$(PREFIX)/share/dcpattn/aot)' \
	  > $(IDIR)/include/dcpattn_config.h
	$(Q)install -m 644 $(HEADER) $(IDATA)/include/
	$(Q)install -m 644 gen/dcpattn/*.lua $(IDATA)/gen/dcpattn/
	$(Q)install -m 755 gen/dcpattn-gen $(IDATA)/gen/
	$(Q)ln -sf ../share/dcpattn/gen/dcpattn-gen $(IDIR)/bin/dcpattn-gen
	$(Q)install -m 644 $(TEMPLATES) $(IDATA)/templates/
	$(Q)cp -p $(BUILD)/aot/*.cubin $(BUILD)/aot/nvrtc.version $(IDATA)/aot/ 2>/dev/null || true
	$(Q)printf 'prefix=%s\nincludedir=$${prefix}/include\ndatadir=$${prefix}/share/dcpattn\n\nName: dcpattn\nDescription: attention kernels and merges for decode context parallelism\nVersion: %s\nCflags: -I$${includedir} -DDCPATTN_INSTALLED %s\nLibs: %s -ldl -lm -lpthread\n' \
	  '$(PREFIX)' "$$(sed -n 's/^#define DCPATTN_VERSION_STRING "\(.*\)"/\1/p' $(HEADER))" '$(LUA_CFLAGS)' '$(LUA_LIBS)' \
	  > $(IDIR)/lib/pkgconfig/dcpattn.pc
	@echo "installed into $(IDIR)"

# what install put, and the directories of share/dcpattn once they are empty
uninstall:
	$(Q)rm -f $(IDIR)/include/dcpattn.h $(IDIR)/include/dcpattn_config.h $(IDIR)/lib/pkgconfig/dcpattn.pc \
	  $(IDIR)/lib/libdcpattn.so \
	  $(IDIR)/bin/dcpattn-gen $(IDATA)/include/dcpattn.h $(IDATA)/gen/dcpattn-gen $(IDATA)/gen/dcpattn/*.lua \
	  $(IDATA)/templates/*.cu $(IDATA)/templates/*.cuh $(IDATA)/aot/*.cubin $(IDATA)/aot/nvrtc.version
	$(Q)for d in aot include templates gen/dcpattn gen ''; do rmdir "$(IDATA)/$$d" 2>/dev/null || true; done
	@echo "removed dcpattn from $(IDIR)"

clean:
	rm -rf $(BUILD)

# ---- fuzzing (clang libFuzzer): host validation and the generator's spec parsing ----
FUZZ_SECONDS ?= 60
$(BUILD)/fuzz_host: tests/fuzz_host.c $(HEADER) | $(BUILD) deps
	@echo "  CLANG   $@ (libFuzzer, ASan, UBSan)"
	$(Q)clang -std=c99 -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all -Iinclude $(LUA_CFLAGS) $(DEFS) $< -o $@ $(HOSTLIBS)

fuzz: deps $(BUILD)/fuzz_host
	$(Q)mkdir -p $(BUILD)/fuzz-corpus
	$(Q)printf '\003gqa_bf16_d128_g8_m16' > $(BUILD)/fuzz-corpus/name; printf '\003merge_fp32_bf16' > $(BUILD)/fuzz-corpus/merge
	$(Q)$(BUILD)/fuzz_host -max_total_time=$(FUZZ_SECONDS) -print_final_stats=1 $(BUILD)/fuzz-corpus >$(BUILD)/fuzz-make.log 2>&1; \
	  rc=$$?; tail -n 12 $(BUILD)/fuzz-make.log; exit $$rc

# ---- shared library: build/libdcpattn.so, what the Python package (python/) loads ----
# One translation unit with the implementation, the build tree's data and AOT directories
# as the programs above. Lua is linked statically where its archive can go into a shared
# object (built with -fPIC), with its symbols hidden, else as a shared library (Debian's
# liblua5.4.a is not position-independent). Only the dcpattn_ functions are exported.
# `make install` installs a copy built for $(PREFIX)/share/dcpattn (install-lib).
LUA_ARCHIVE ?= $(shell pkg-config --variable=libdir lua5.4 2>/dev/null || echo /usr/lib)/liblua5.4.a

# $(call shared_lib,OUTPUT,DEFINES)
define shared_lib
	$(Q)printf '#define DCPATTN_IMPLEMENTATION\n#include "dcpattn.h"\n' | \
	  $(CC) -std=c99 $(WARN) $(CFLAGS) -fPIC -Iinclude $(LUA_CFLAGS) $(2) -x c -c - -o $(1).o
	$(Q)if [ -f "$(LUA_ARCHIVE)" ] && $(CC) -shared -Wl,-z,defs -o $(1) $(1).o -Wl,--exclude-libs,ALL \
	     $(LUA_ARCHIVE) -ldl -lm -lpthread 2>/dev/null; then echo "          Lua: static ($(LUA_ARCHIVE))"; \
	  else $(CC) -shared -Wl,-z,defs -o $(1) $(1).o $(LUA_LIBS) -ldl -lm -lpthread; fi
endef

$(BUILD)/libdcpattn.so: $(HEADER) | $(BUILD)
	@echo "  CC      $@"
	$(call shared_lib,$@,$(DEFS))

.PHONY: install-lib
install-lib: | $(BUILD)
	@echo "  CC      $(BUILD)/prefix/libdcpattn.so (data in $(PREFIX)/share/dcpattn)"
	$(Q)mkdir -p $(BUILD)/prefix
	$(call shared_lib,$(BUILD)/prefix/libdcpattn.so,-DDCPATTN_DATA_DIR='"$(PREFIX)/share/dcpattn"' \
	  -DDCPATTN_AOT_DIR='"$(PREFIX)/share/dcpattn/aot"')
	$(Q)install -d $(DESTDIR)$(PREFIX)/lib
	$(Q)install -m 755 $(BUILD)/prefix/libdcpattn.so $(DESTDIR)$(PREFIX)/lib/

all: $(BUILD)/libdcpattn.so
test: $(BUILD)/libdcpattn.so
install: install-lib
