# implicit: one GNU Makefile.  Knobs:
#   BLAS=openblas|none   (default: openblas when <cblas.h> and -lopenblas are found)
#   OMP=1|0              (default 1: OpenMP, part of gcc)
#   SAN=1                ASan + UBSan        DEBUG=1   -O0, no native tuning
#   NATIVE=0             do not tune for this CPU (-march=native is the default)
#   MPI=1                data-parallel `implicit train` under mpirun: compile with mpicc (MPICC=...),
#                        -DIM_MPI. Never switched on by detection: a plain build stays MPI-free.
#   BUILD=dir            output folder (default build)
#   PREFIX=/usr/local    for make install (DESTDIR= for staging)
CC ?= cc
BUILD ?= build
PREFIX ?= /usr/local
OMP ?= 1
NATIVE ?= 1
MPI ?= 0
MPICC ?= mpicc
ifeq ($(MPI),1)
  CC := $(MPICC)
endif
HAVE_OPENBLAS := $(shell echo 'int main(void){return 0;}' | $(CC) -x c -include cblas.h - -lopenblas -o /dev/null 2>/dev/null && echo 1)
BLAS ?= $(if $(HAVE_OPENBLAS),openblas,none)

VERSION := 0.1.0
VERSION_MAJOR := $(firstword $(subst ., ,$(VERSION)))
PKG_CONFIG ?= pkg-config
# Position-independent code so the same objects make libimplicit.a and libimplicit.so; hidden
# visibility so the .so exports only what include/implicit.h marks IM_API.
CFLAGS_BASE := -std=c11 -D_POSIX_C_SOURCE=200809L -g -Wall -Wextra -Wshadow -Wstrict-prototypes \
               -Wno-unknown-pragmas -DIM_VERSION='"$(VERSION)"' -Iinclude -fPIC -fvisibility=hidden
LDLIBS := -lm
ifeq ($(DEBUG),1)
  OPT := -O0
else
  OPT := -O3 $(if $(filter 1,$(NATIVE)),-march=native)
endif
ifeq ($(SAN),1)
  CFLAGS_BASE += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
  LDFLAGS += -fsanitize=address,undefined
endif
ifeq ($(OMP),1)
  CFLAGS_BASE += -fopenmp
  LDFLAGS += -fopenmp
endif
ifeq ($(BLAS),openblas)
  CFLAGS_BASE += -DIM_OPENBLAS
  LDLIBS += -lopenblas
endif
ifeq ($(MPI),1)
  CFLAGS_BASE += -DIM_MPI
endif
ifeq ($(WERROR),1)
  CFLAGS_BASE += -Werror
endif
CFLAGS ?=
ALL_CFLAGS = $(CFLAGS_BASE) $(OPT) $(CFLAGS)
# Fast kernels may fuse multiply-adds, never read errno (so sqrtf can vectorise) and never read
# FP exception flags (so the selects of cpu/vmath.h vectorise without AVX-512 masks); the
# references and everything else keep ISO semantics.
KERNEL_CFLAGS = -ffp-contract=fast -fno-math-errno -fno-trapping-math

LIB_SRC := $(shell find src -name '*.c' | sort)
CLI_SRC := $(wildcard cli/*.c)
TEST_SRC := $(wildcard tests/test_*.c)
BENCH_SRC := $(wildcard bench/bench_*.c)
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
TESTS := $(TEST_SRC:tests/%.c=$(BUILD)/%)
# Test scripts (tests/test_*.sh) run like the test binaries, from the build folder beside the binary.
TEST_SCRIPTS := $(patsubst tests/%.sh,$(BUILD)/%,$(wildcard tests/test_*.sh))
BENCHES := $(BENCH_SRC:bench/%.c=$(BUILD)/%)
LIB := $(BUILD)/libimplicit.a
SONAME := libimplicit.so.$(VERSION_MAJOR)
SO := $(BUILD)/libimplicit.so.$(VERSION)
BIN := $(BUILD)/implicit
# `make test` installs into this prefix and builds examples/ against it with pkg-config
STAGE := $(abspath $(BUILD))/stage
EXAMPLES := $(BUILD)/examples/generate $(BUILD)/examples/generate_cpp

.PHONY: all test bench clean install config
all: config $(BIN) $(SO)

config:
	@echo "implicit $(VERSION): CC=$(CC) BLAS=$(BLAS) OMP=$(OMP) SAN=$(SAN) DEBUG=$(DEBUG) NATIVE=$(NATIVE) MPI=$(MPI) -> $(BUILD)/"

$(BUILD)/obj/src/kernels/cpu/%.o: src/kernels/cpu/%.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(KERNEL_CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

$(LIB): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

# libimplicit.so.0.1.0, its soname libimplicit.so.0 and the link-time name libimplicit.so
$(SO): $(LIB_OBJ)
	$(CC) -shared -Wl,-soname,$(SONAME) -Wl,--no-undefined $(LDFLAGS) $^ $(LDLIBS) -o $@
	ln -sf libimplicit.so.$(VERSION) $(BUILD)/$(SONAME)
	ln -sf $(SONAME) $(BUILD)/libimplicit.so

$(BIN): $(CLI_OBJ) $(LIB)
	$(CC) $(LDFLAGS) $(CLI_OBJ) $(LIB) $(LDLIBS) -o $@

$(BUILD)/test_%: tests/test_%.c $(LIB) tests/th.h
	@mkdir -p $(BUILD)
	$(CC) $(ALL_CFLAGS) -MMD -MP $< $(LIB) $(LDFLAGS) $(LDLIBS) -o $@

$(BUILD)/test_%: tests/test_%.sh
	@mkdir -p $(BUILD)
	cp $< $@ && chmod +x $@

# The option parser lives with the CLI, outside the library; its test also runs the binary.
$(BUILD)/test_cli: tests/test_cli.c $(BUILD)/obj/cli/opts.o $(LIB) $(BIN) tests/th.h
	$(CC) $(ALL_CFLAGS) -MMD -MP $< $(BUILD)/obj/cli/opts.o $(LIB) $(LDFLAGS) $(LDLIBS) -o $@

$(BUILD)/bench_%: bench/bench_%.c $(LIB) bench/bench_util.h
	@mkdir -p $(BUILD)
	$(CC) $(ALL_CFLAGS) $< $(LIB) $(LDFLAGS) $(LDLIBS) -o $@

# The benchmarks are built (not run) by test too, so a change that breaks them fails the suite.
test: config $(BIN) $(SO) $(EXAMPLES) $(TESTS) $(TEST_SCRIPTS) $(BENCHES)
	@sh tests/run.sh $(BUILD)

bench: config $(BIN) $(BENCHES)
	@sh bench/run.sh $(BUILD)

# pkg-config file (install_to writes the prefix line): programs link -limplicit; a static link
# (pkg-config --static) also needs the libraries this build used.
define implicit_pc
prefix=
libdir=$${prefix}/lib
includedir=$${prefix}/include

Name: implicit
Description: implicit sequence models (fixed-point Mamba2/Llama LMs, FP-RNNs) and explicit baselines on the CPU
Version: $(VERSION)
Libs: -L$${libdir} -limplicit
Libs.private: $(filter -fopenmp,$(LDFLAGS)) $(LDLIBS)
Cflags: -I$${includedir}
endef
export implicit_pc

# install_to(destination root, prefix written into implicit.pc): the CLI, both libraries and the
# public header only (the module headers under src/ are internal).
define install_to
	install -d $(1)/bin $(1)/lib/pkgconfig $(1)/include
	install -m 755 $(BIN) $(1)/bin/implicit
	install -m 644 $(LIB) $(1)/lib/libimplicit.a
	install -m 755 $(SO) $(1)/lib/libimplicit.so.$(VERSION)
	ln -sf libimplicit.so.$(VERSION) $(1)/lib/$(SONAME)
	ln -sf $(SONAME) $(1)/lib/libimplicit.so
	install -m 644 include/implicit.h $(1)/include/implicit.h
	printf '%s\n' "$$implicit_pc" | sed 's|^prefix=.*|prefix=$(2)|' > $(1)/lib/pkgconfig/implicit.pc
endef

install: $(BIN) $(LIB) $(SO)
	$(call install_to,$(DESTDIR)$(PREFIX),$(PREFIX))

$(STAGE)/.installed: $(BIN) $(LIB) $(SO) include/implicit.h Makefile
	rm -rf $(STAGE)
	$(call install_to,$(STAGE),$(STAGE))
	@touch $@

# The examples are built as a user would: against the installed library via pkg-config, with the
# header held to -std=c11 -pedantic and C++11 (LDFLAGS carries the sanitizers of a SAN=1 build).
STAGE_PC = PKG_CONFIG_PATH=$(STAGE)/lib/pkgconfig $(PKG_CONFIG)
$(BUILD)/examples/generate: examples/generate.c $(STAGE)/.installed
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -pedantic -Wall -Wextra -Werror $$($(STAGE_PC) --cflags implicit) $< -o $@ \
	    $(LDFLAGS) -Wl,-rpath,$(STAGE)/lib $$($(STAGE_PC) --libs implicit)
$(BUILD)/examples/generate_cpp: examples/generate.cpp $(STAGE)/.installed
	@mkdir -p $(dir $@)
	$(CXX) -std=c++11 -pedantic -Wall -Wextra -Werror $$($(STAGE_PC) --cflags implicit) $< -o $@ \
	    $(LDFLAGS) -Wl,-rpath,$(STAGE)/lib $$($(STAGE_PC) --libs implicit)

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
