# implicit: one GNU Makefile.  Knobs:
#   BLAS=openblas|none   (default: openblas when <cblas.h> and -lopenblas are found)
#   OMP=1|0              (default 1: OpenMP, part of gcc)
#   SAN=1                ASan + UBSan        DEBUG=1   -O0, no native tuning
#   NATIVE=0             do not tune for this CPU (-march=native is the default)
#   MPI=1                data-parallel `implicit train` under mpirun: compile with mpicc (MPICC=...),
#                        -DIM_MPI. Never switched on by detection: a plain build stays MPI-free.
#   BUILD=dir            output folder (default build)
#   PREFIX=/usr/local    for make install
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
CFLAGS_BASE := -std=c11 -D_POSIX_C_SOURCE=200809L -g -Wall -Wextra -Wshadow -Wstrict-prototypes \
               -Wno-unknown-pragmas -DIM_VERSION='"$(VERSION)"' -Iinclude
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
BENCHES := $(BENCH_SRC:bench/%.c=$(BUILD)/%)
LIB := $(BUILD)/libimplicit.a
BIN := $(BUILD)/implicit

.PHONY: all test bench clean install config
all: config $(BIN)

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

$(BIN): $(CLI_OBJ) $(LIB)
	$(CC) $(LDFLAGS) $(CLI_OBJ) $(LIB) $(LDLIBS) -o $@

$(BUILD)/test_%: tests/test_%.c $(LIB) tests/th.h
	@mkdir -p $(BUILD)
	$(CC) $(ALL_CFLAGS) -MMD -MP $< $(LIB) $(LDFLAGS) $(LDLIBS) -o $@

# The option parser lives with the CLI, outside the library; its test also runs the binary.
$(BUILD)/test_cli: tests/test_cli.c $(BUILD)/obj/cli/opts.o $(LIB) $(BIN) tests/th.h
	$(CC) $(ALL_CFLAGS) -MMD -MP $< $(BUILD)/obj/cli/opts.o $(LIB) $(LDFLAGS) $(LDLIBS) -o $@

$(BUILD)/bench_%: bench/bench_%.c $(LIB) bench/bench_util.h
	@mkdir -p $(BUILD)
	$(CC) $(ALL_CFLAGS) $< $(LIB) $(LDFLAGS) $(LDLIBS) -o $@

test: config $(BIN) $(TESTS)
	@sh tests/run.sh $(BUILD)

bench: config $(BIN) $(BENCHES)
	@sh bench/run.sh $(BUILD)

# Headers go to $(PREFIX)/include/implicit/ (the module headers under src/, as in the tree), so a
# program includes <implicit/implicit.h> and links -limplicit -lm (plus -fopenmp / -lopenblas as built).
install: $(BIN) $(LIB)
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include/implicit
	install -m 755 $(BIN) $(DESTDIR)$(PREFIX)/bin/implicit
	install -m 644 $(LIB) $(DESTDIR)$(PREFIX)/lib/libimplicit.a
	for h in $$(find src -name '*.h'); do install -D -m 644 $$h $(DESTDIR)$(PREFIX)/include/implicit/$$h; done
	sed 's|"\.\./src/|"src/|' include/implicit.h > $(DESTDIR)$(PREFIX)/include/implicit/implicit.h

clean:
	rm -rf $(BUILD)

-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
