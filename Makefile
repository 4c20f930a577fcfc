# stoker: `make` builds everything into build/; `make check` runs every test.
# Dependencies come from pkg-config (scripts/install-deps.sh installs them).

# One version for the daemon, the library, the Debian packages, the Python
# wheel (client/python/setup.py) and the container image's tag.
VERSION      := $(strip $(file < VERSION))
SOVERSION    := 0
PREFIX       ?= /usr/local
DESTDIR      ?=
comma        := ,
# Install locations (`make install PREFIX=/usr DESTDIR=pkg/` for a package).
BINDIR       ?= $(PREFIX)/bin
SBINDIR      ?= $(PREFIX)/sbin
LIBDIR       ?= $(PREFIX)/lib
INCLUDEDIR   ?= $(PREFIX)/include
MANDIR       ?= $(PREFIX)/share/man
DOCDIR       ?= $(PREFIX)/share/doc/stoker
SYSCONFDIR   ?= /etc
UNITDIR      ?= $(PREFIX)/lib/systemd/system
SYSUSERSDIR  ?= $(PREFIX)/lib/sysusers.d
# The package's defaults layer; the daemon reads it (stoker.conf(5)).
VENDORCONFDIR ?= $(LIBDIR)/stoker
CC           ?= cc
PYTHON       ?= python3
# A sanitized build gets a tree of its own: `make check SANITIZE=address,undefined`
# builds in build-sanitize, never over the plain objects.
B            ?= $(if $(SANITIZE),$(if $(filter address$(comma)undefined,$(SANITIZE)),build-sanitize,build-$(subst $(comma),-,$(SANITIZE))),build)
# Where `import stoker` finds the package: Debian's path for /usr, else the
# interpreter's version directory under PREFIX.
PYVER        := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
PYTHONDIR    ?= $(if $(filter /usr,$(PREFIX)),/usr/lib/python3/dist-packages,$(PREFIX)/lib/python$(PYVER)/dist-packages)
MANPAGES     := man/stokerd.8 man/stokerctl.1 man/stoker.conf.5 man/libstoker.3

PKGS_DAEMON  := libuv libturbojpeg libjpeg libprotobuf-c libsystemd inih
# HTTP/S3 data sets (daemon/net/fetch.h).
PKGS_DAEMON  += libcurl
# The image formats beside JPEG (daemon/formats/image.h): PNG, WebP, TIFF.
PKGS_DAEMON  += spng libwebp libwebpdemux libtiff-4
PKGS_CLIENT  := libprotobuf-c
PKG_CFLAGS   := $(shell pkg-config --cflags $(PKGS_DAEMON) cmocka)
# -ldl: before glibc 2.34, dlopen (libcuda, cudadrv.c) and pthread_once were
# not in libc itself (the wheel's build on an older distribution, docs/slurm.md).
LIBS_DAEMON  := $(shell pkg-config --libs $(PKGS_DAEMON)) -lm -ldl -pthread
LIBS_CLIENT  := $(shell pkg-config --libs $(PKGS_CLIENT)) -ldl -pthread
LIBS_CMOCKA  := $(shell pkg-config --libs cmocka)

# CUDA (docs/gpu.md): used when the toolkit is found (nvcc and cuda.h), for
# the conversion kernel's fatbin and the driver API's declarations. Nothing
# links libcuda or libcudart: both sides dlopen libcuda.so.1 at run time.
# `make CUDA=0` builds without it (device attaches are then refused).
CUDA_HOME    ?= /usr/local/cuda
NVCC         ?= $(firstword $(wildcard $(CUDA_HOME)/bin/nvcc) $(shell command -v nvcc 2>/dev/null))
CUDA_INCLUDE ?= $(patsubst %/cuda.h,%,$(firstword $(wildcard $(CUDA_HOME)/include/cuda.h /usr/include/cuda.h)))
CUDA         ?= $(if $(and $(NVCC),$(CUDA_INCLUDE)),1,0)
# The kernel's targets (docs/gpu.md): PTX for Turing (compute_75, the oldest CUDA 13 compiles
# for: T4, RTX 20xx; JIT-compiled by the driver), Ampere and Hopper code, PTX for what comes after.
NVCC_ARCH    ?= -gencode arch=compute_75,code=compute_75 -gencode arch=compute_80,code=sm_80 \
                -gencode arch=compute_90,code=[sm_90,compute_90]
NVCC_FLAGS   ?= -Werror all-warnings -Xcompiler -Wall,-Wextra,-Werror
ifeq ($(CUDA),1)
CUDA_CFLAGS  := -DSTOKER_HAVE_CUDA -isystem $(CUDA_INCLUDE)
endif

OPT          ?= -O2
WARN         := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wno-unused-parameter
# No -I here: each part of the tree gets the include paths of what it may
# use (LAYER_INC below), so an include across a forbidden edge fails to build.
CFLAGS_BASE  := -std=c11 -D_GNU_SOURCE -g $(OPT) $(WARN) -fPIC -fvisibility=hidden -pthread \
                -DSTOKER_VERSION='"$(VERSION)"' $(PKG_CFLAGS) $(CUDA_CFLAGS) $(CPPFLAGS) $(CFLAGS)
CFLAGS_ALL   := $(CFLAGS_BASE)
LDFLAGS_ALL  := $(LDFLAGS)
ifneq ($(SANITIZE),)
CFLAGS_ALL   += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS_ALL  += -fsanitize=$(SANITIZE)
endif

PROTO_C      := $(B)/proto/stoker.pb-c.c
PROTO_OBJS   := $(B)/proto/stoker.pb-c.o $(B)/proto/frame.o $(B)/proto/cudadrv.o $(B)/proto/transform_text.o
# The daemon's parts (docs/ARCHITECTURE.md), lowest first. Each folder is
# compiled with the include paths of the parts it may use and no others
# (as nginx compiles src/core without the http headers): LAYER_USES_x.
DAEMON_LAYERS := base formats pixels net data workers gpu loop
LAYER_USES_base    := base
LAYER_USES_formats := formats base
LAYER_USES_pixels  := pixels formats base
LAYER_USES_net     := net base
LAYER_USES_data    := data net pixels formats base
LAYER_USES_workers := workers data net pixels formats base
LAYER_USES_gpu     := gpu pixels base proto
LAYER_USES_loop    := loop gpu workers data net pixels formats base proto
# main.c, the tests, fuzzers and benchmarks see the whole daemon.
LAYER_USES_all     := $(DAEMON_LAYERS) proto
# -I flags for a list of parts: proto/ brings its generated header; base/
# brings the generated paths.h.
layer_inc = $(foreach l,$(1),$(if $(filter proto,$(l)),-Iproto -I$(B)/proto,-Idaemon/$(l))) \
            $(if $(filter base,$(1)),-I$(B)/gen)
INC_DAEMON   := $(call layer_inc,$(LAYER_USES_all))
INC_CLIENT   := -Iclient -Iclient/include -Iproto -I$(B)/proto
DAEMON_SRCS  := $(foreach l,$(DAEMON_LAYERS),$(wildcard daemon/$(l)/*.c))
DAEMON_OBJS  := $(DAEMON_SRCS:%.c=$(B)/%.o) $(if $(filter 1,$(CUDA)),$(B)/daemon/gpu/gpu_fatbin.o)
CLIENT_OBJS  := $(B)/client/libstoker.o $(B)/client/gpu.o
UNIT_SRCS    := $(wildcard tests/unit/test_*.c)
UNIT_BINS    := $(UNIT_SRCS:tests/unit/%.c=$(B)/tests/%)
# Helpers of the fault tests: a small C client, the failure-injection shim.
FAULT_BINS   := $(B)/tests/fault_client $(B)/tests/libinject.so $(B)/tests/mkjpeg
# The image decoders' output, whole, for the pixel tests (tests/integration/test_formats.py).
FAULT_BINS   += $(B)/tests/imgdecode
# One pixel op on one image, and its draws (tests/transforms/test_pixel_ops.py).
FAULT_BINS   += $(B)/tests/pixelop
# The transform pipeline outside the daemon, for tests/transforms/.
FAULT_BINS   += $(B)/tests/tpipe
# The batch ops' draws (tests/batchops/).
FAULT_BINS   += $(B)/tests/batchmix
# A label file read as Ultralytics reads it, every task (tests/ultralytics/test_labels.py).
FAULT_BINS   += $(B)/tests/labeldump
# Segment masks and resampling as Ultralytics makes them (tests/ultralytics/test_instmask.py).
FAULT_BINS   += $(B)/tests/instmask
# Instance geometry of the training transforms against Ultralytics (tests/ultralytics/test_instgeom.py).
FAULT_BINS   += $(B)/tests/instgeom
# Ultralytics' default Albumentations on one image (tests/ultralytics/test_albumentations.py).
FAULT_BINS   += $(B)/tests/albuop
# CutMix's area and box rule with given draws (tests/ultralytics/test_cutmix.py).
FAULT_BINS   += $(B)/tests/cutmixgeom
# CopyPaste's pixels with a given choice (tests/ultralytics/test_copypaste.py).
FAULT_BINS   += $(B)/tests/copypaste
# A training sample's instances with its draws (tests/ultralytics/test_train_instances.py).
FAULT_BINS   += $(B)/tests/detectinst
# DETECT_TRAIN samples' affine and flip draws (tests/ultralytics/test_rect_train.py).
FAULT_BINS   += $(B)/tests/detectdraws

LIB_SO       := $(B)/libstoker.so.$(SOVERSION)
# The GPU tests' programs (tests/gpu/run.sh runs them on a GPU; `make`
# compiles them wherever CUDA's headers are).
GPU_BINS     := $(if $(filter 1,$(CUDA)),$(B)/tests/gpu_check $(B)/tests/gpu_copybench $(B)/tests/fake-cuda/libcuda.so.1)

# Quiet by default; `make V=1` shows the commands.
ifeq ($(V),1)
Q :=
say = @true
else
Q := @
say = @printf '  %-8s %s\n' $(1) $(2)
endif

.PHONY: all clean check check-unit check-integration check-network check-sanitize check-torch check-detect-parity demo bench bench-detect bench-network install uninstall FORCE \
        print-libstoker print-pkg-config-modules deb check-packaging check-image image \
        fuzz fuzz-build fuzz-smoke check-tsan check-valgrind check-faults
all: $(B)/stokerd $(B)/stokerctl $(LIB_SO) $(B)/libstoker.so $(B)/libstoker.a $(B)/stoker.pc $(UNIT_BINS) $(FAULT_BINS) \
     $(GPU_BINS)

# The configuration layers' paths follow PREFIX and SYSCONFDIR; the header
# is rewritten only when they change, so `make install PREFIX=/usr` rebuilds
# what depends on it and nothing else.
$(B)/gen/paths.h: FORCE
	@mkdir -p $(B)/gen
	@printf '#define STOKER_VENDOR_CONFIG "%s"\n#define STOKER_ADMIN_CONFIG_DIR "%s"\n' \
	    '$(VENDORCONFDIR)/stoker.conf' '$(SYSCONFDIR)/stoker' > $@.tmp
	@cmp -s $@.tmp $@ && rm -f $@.tmp || mv -f $@.tmp $@
FORCE:

$(B)/daemon/base/config.o $(B)/daemon/main.o $(B)/tests/test_config: $(B)/gen/paths.h

$(B)/proto/stoker.pb-c.c $(B)/proto/stoker.pb-c.h &: proto/stoker.proto
	@mkdir -p $(B)/proto
	protoc-c --proto_path=proto --c_out=$(B)/proto $<

# Every object depends on the generated header; -MMD tracks the rest.
# A daemon part's objects get its LAYER_INC, main.o everything, the
# client's its own paths and proto/ (never daemon/).
$(foreach l,$(DAEMON_LAYERS),$(eval $(B)/daemon/$(l)/%.o: LAYER_INC := $(call layer_inc,$(LAYER_USES_$(l)))))
$(B)/daemon/main.o: LAYER_INC := $(INC_DAEMON)
$(B)/client/%.o $(B)/proto/%.o: LAYER_INC := $(INC_CLIENT)
$(B)/%.o: %.c $(B)/proto/stoker.pb-c.h
	@mkdir -p $(dir $@)
	$(call say,CC,$<)
	$(Q)$(CC) $(CFLAGS_ALL) $(LAYER_INC) -MMD -MP -c $< -o $@

# Shows the include paths a part is compiled with (tests/layering).
print-layer-flags:
	@echo '$(CC) $(CFLAGS_ALL) $(if $(filter client,$(LAYER)),$(INC_CLIENT),$(call layer_inc,$(LAYER_USES_$(LAYER))))'

$(B)/proto/stoker.pb-c.o: $(B)/proto/stoker.pb-c.c
	$(CC) $(CFLAGS_ALL) $(INC_CLIENT) -Wno-missing-prototypes -c $< -o $@

# The conversion kernel: nvcc's fatbin, embedded as a byte array.
$(B)/daemon/gpu/gpu_convert.fatbin: daemon/gpu/gpu_convert.cu
	@mkdir -p $(dir $@)
	$(call say,NVCC,$<)
	$(Q)$(NVCC) -fatbin $(NVCC_ARCH) $(NVCC_FLAGS) -o $@ $<

$(B)/daemon/gpu/gpu_fatbin.c: $(B)/daemon/gpu/gpu_convert.fatbin
	$(Q){ printf '/* generated from daemon/gpu/gpu_convert.cu */\n#include "gpu_fatbin.h"\n'; \
	  printf 'const unsigned char gpu_convert_fatbin[] __attribute__((aligned(8))) = {\n'; \
	  od -An -v -tx1 $< | sed -e 's/ *\([0-9a-f][0-9a-f]\)/0x\1,/g'; \
	  printf '};\nconst size_t gpu_convert_fatbin_size = sizeof(gpu_convert_fatbin);\n'; } > $@.tmp && mv $@.tmp $@

$(B)/daemon/gpu/gpu_fatbin.o: $(B)/daemon/gpu/gpu_fatbin.c
	$(call say,CC,$<)
	$(Q)$(CC) $(CFLAGS_ALL) -Idaemon/gpu -c $< -o $@

$(B)/libstokerd.a: $(DAEMON_OBJS) $(PROTO_OBJS)
	$(call say,AR,$@)
	$(Q)rm -f $@ && ar rcs $@ $^

$(B)/stokerd: $(B)/daemon/main.o $(B)/libstokerd.a
	$(call say,LD,$@)
	$(Q)$(CC) $(LDFLAGS_ALL) -pthread -o $@ $^ $(LIBS_DAEMON)

$(LIB_SO): $(CLIENT_OBJS) $(PROTO_OBJS) client/libstoker.map
	$(CC) $(LDFLAGS_ALL) -shared -Wl,-soname,libstoker.so.$(SOVERSION) \
	    -Wl,--version-script=client/libstoker.map -Wl,--no-undefined -o $@ $(CLIENT_OBJS) $(PROTO_OBJS) $(LIBS_CLIENT)

$(B)/libstoker.so: $(LIB_SO)
	ln -sf libstoker.so.$(SOVERSION) $@

# One relocatable object with every hidden symbol made local, so static
# users see only the stoker_ API, as shared ones do.
$(B)/libstoker.a: $(CLIENT_OBJS) $(PROTO_OBJS)
	$(LD) -r -o $(B)/libstoker-all.o $^
	objcopy --localize-hidden $(B)/libstoker-all.o
	rm -f $@ && ar rcs $@ $(B)/libstoker-all.o

# The Python wheel builds its own libstoker from this list
# (client/python/setup.py): one place says what the library is made of.
print-libstoker:
	@echo 'sources: $(patsubst $(B)/%.o,%.c,$(CLIENT_OBJS) $(PROTO_OBJS))'
	@echo 'libs: $(LIBS_CLIENT)'
	@echo 'cflags: $(CUDA_CFLAGS)'

# The pkg-config modules the build uses (tests/packaging checks that
# deploy/debian/control's Build-Depends names each one's package).
print-pkg-config-modules:
	@echo $(PKGS_DAEMON) $(PKGS_CLIENT) cmocka

$(B)/stokerctl: $(B)/client/stokerctl.o $(LIB_SO)
	$(CC) $(LDFLAGS_ALL) -o $@ $< -L$(B) -l:libstoker.so.$(SOVERSION) -Wl,-rpath,'$$ORIGIN:$$ORIGIN/../lib'

# The .pc file follows PREFIX, LIBDIR and INCLUDEDIR (rewritten only when
# they change, as paths.h).
$(B)/stoker.pc: client/stoker.pc.in FORCE
	@mkdir -p $(B)
	@sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|g' \
	    -e 's|@VERSION@|$(VERSION)|g' $< > $@.tmp
	@cmp -s $@.tmp $@ && rm -f $@.tmp || mv -f $@.tmp $@

$(B)/tests/%: tests/unit/%.c $(B)/libstokerd.a
	@mkdir -p $(dir $@)
	$(call say,CCLD,$@)
	$(Q)$(CC) $(CFLAGS_ALL) $(INC_DAEMON) -Itests/unit -Wno-missing-prototypes -o $@ $< $(B)/libstokerd.a $(LIBS_DAEMON) $(LIBS_CMOCKA) $(LDFLAGS_ALL)

$(B)/tests/fault_client: tests/fault/client.c client/include/stoker.h $(LIB_SO)
	@mkdir -p $(dir $@)
	$(call say,CCLD,$@)
	$(Q)$(CC) $(CFLAGS_ALL) -Iclient/include -o $@ $< -L$(B) -l:libstoker.so.$(SOVERSION) -Wl,-rpath,'$$ORIGIN/..' $(LDFLAGS_ALL)

$(B)/tests/gpu_check: tests/gpu/gpu_check.c client/include/stoker.h $(B)/proto/cudadrv.o $(LIB_SO)
	@mkdir -p $(dir $@)
	$(call say,CCLD,$@)
	$(Q)$(CC) $(CFLAGS_ALL) $(INC_CLIENT) -o $@ $< $(B)/proto/cudadrv.o -L$(B) -l:libstoker.so.$(SOVERSION) -Wl,-rpath,'$$ORIGIN/..' \
	    $(LDFLAGS_ALL)

# make check's fake CUDA driver (tests/gpu/fake_libcuda.c; STOKER_LIBCUDA loads it): its stubs are
# the names CUDADRV_SYMBOLS resolves, as cuda.h versions them.
$(B)/tests/fake-cuda/fake_stubs.inc: proto/cudadrv.h
	$(Q)mkdir -p $(@D)
	$(Q)printf '#include "cudadrv.h"\n#define FAKE_NAME(n) FAKE_STUB(n)\nCUDADRV_SYMBOLS(FAKE_NAME)\n' | \
		$(CC) $(CUDA_CFLAGS) -Iproto -E -P -x c - | grep -o 'FAKE_STUB([A-Za-z0-9_]*)' > $@

$(B)/tests/fake-cuda/libcuda.so.1: tests/gpu/fake_libcuda.c tests/gpu/fake_stubs.c $(B)/tests/fake-cuda/fake_stubs.inc
	$(call say,CC,$@)
	$(Q)$(CC) $(CFLAGS_ALL) -Wno-missing-prototypes -I$(B)/tests/fake-cuda -shared -Wl,-soname,libcuda.so.1 -o $@ \
		tests/gpu/fake_libcuda.c tests/gpu/fake_stubs.c

$(B)/tests/gpu_copybench: tests/gpu/copybench.c $(B)/libstokerd.a
	@mkdir -p $(dir $@)
	$(call say,CCLD,$@)
	$(Q)$(CC) $(CFLAGS_ALL) $(INC_DAEMON) -o $@ $< $(B)/libstokerd.a $(LIBS_DAEMON) $(LDFLAGS_ALL)

$(B)/tests/mkjpeg: tests/fault/mkjpeg.c
	@mkdir -p $(dir $@)
	$(call say,CCLD,$@)
	$(Q)$(CC) $(CFLAGS_ALL) -o $@ $< $(LIBS_DAEMON) $(LDFLAGS_ALL)

$(B)/tests/imgdecode: tests/tools/imgdecode.c $(B)/libstokerd.a
	@mkdir -p $(dir $@)
	$(call say,CCLD,$@)
	$(Q)$(CC) $(CFLAGS_ALL) $(INC_DAEMON) -o $@ $< $(B)/libstokerd.a $(LIBS_DAEMON) $(LDFLAGS_ALL)

$(B)/tests/batchmix: tests/tools/batchmix.c $(B)/libstokerd.a
	@mkdir -p $(dir $@)
	$(call say,CCLD,$@)
	$(Q)$(CC) $(CFLAGS_ALL) $(INC_DAEMON) -o $@ $< $(B)/libstokerd.a $(LIBS_DAEMON) $(LDFLAGS_ALL)

$(B)/tests/pixelop: tests/tools/pixelop.c $(B)/libstokerd.a
	@mkdir -p $(dir $@)
	$(call say,CCLD,$@)
	$(Q)$(CC) $(CFLAGS_ALL) $(INC_DAEMON) -o $@ $< $(B)/libstokerd.a $(LIBS_DAEMON) $(LDFLAGS_ALL)

$(B)/tests/instmask: tests/tools/instmask.c $(B)/libstokerd.a
	@mkdir -p $(dir $@)
	$(call say,CCLD,$@)
	$(Q)$(CC) $(CFLAGS_ALL) $(INC_DAEMON) -o $@ $< $(B)/libstokerd.a $(LIBS_DAEMON) $(LDFLAGS_ALL)

$(B)/tests/cutmixgeom: tests/tools/cutmixgeom.c $(B)/libstokerd.a
	@mkdir -p $(dir $@)
	$(call say,CCLD,$@)
	$(Q)$(CC) $(CFLAGS_ALL) $(INC_DAEMON) -o $@ $< $(B)/libstokerd.a $(LIBS_DAEMON) $(LDFLAGS_ALL)

$(B)/tests/detectdraws: tests/tools/detectdraws.c $(B)/libstokerd.a
	@mkdir -p $(dir $@)
	$(call say,CCLD,$@)
	$(Q)$(CC) $(CFLAGS_ALL) $(INC_DAEMON) -o $@ $< $(B)/libstokerd.a $(LIBS_DAEMON) $(LDFLAGS_ALL)

$(B)/tests/copypaste: tests/tools/copypaste.c $(B)/libstokerd.a
	@mkdir -p $(dir $@)
	$(call say,CCLD,$@)
	$(Q)$(CC) $(CFLAGS_ALL) $(INC_DAEMON) -o $@ $< $(B)/libstokerd.a $(LIBS_DAEMON) $(LDFLAGS_ALL)

$(B)/tests/detectinst: tests/tools/detectinst.c $(B)/libstokerd.a
	@mkdir -p $(dir $@)
	$(call say,CCLD,$@)
	$(Q)$(CC) $(CFLAGS_ALL) $(INC_DAEMON) -o $@ $< $(B)/libstokerd.a $(LIBS_DAEMON) $(LDFLAGS_ALL)

$(B)/tests/albuop: tests/tools/albuop.c $(B)/libstokerd.a
	@mkdir -p $(dir $@)
	$(call say,CCLD,$@)
	$(Q)$(CC) $(CFLAGS_ALL) $(INC_DAEMON) -o $@ $< $(B)/libstokerd.a $(LIBS_DAEMON) $(LDFLAGS_ALL)

$(B)/tests/labeldump: tests/tools/labeldump.c $(B)/libstokerd.a
	@mkdir -p $(dir $@)
	$(call say,CCLD,$@)
	$(Q)$(CC) $(CFLAGS_ALL) $(INC_DAEMON) -o $@ $< $(B)/libstokerd.a $(LIBS_DAEMON) $(LDFLAGS_ALL)

$(B)/tests/instgeom: tests/tools/instgeom.c $(B)/libstokerd.a
	@mkdir -p $(dir $@)
	$(call say,CCLD,$@)
	$(Q)$(CC) $(CFLAGS_ALL) $(INC_DAEMON) -o $@ $< $(B)/libstokerd.a $(LIBS_DAEMON) $(LDFLAGS_ALL)

$(B)/tests/tpipe: tests/tools/tpipe.c $(B)/libstokerd.a
	@mkdir -p $(dir $@)
	$(call say,CCLD,$@)
	$(Q)$(CC) $(CFLAGS_ALL) $(INC_DAEMON) -o $@ $< $(B)/libstokerd.a $(LIBS_DAEMON) $(LDFLAGS_ALL)

# Never instrumented: it is preloaded after the sanitizer runtimes.
$(B)/tests/libinject.so: tests/fault/inject.c
	@mkdir -p $(dir $@)
	$(call say,CCLD,$@)
	$(Q)$(CC) $(CFLAGS_BASE) -fvisibility=default -shared -o $@ $< -ldl

# Sequential even under -j: unit tests first, then the daemon tests, then
# all of it again under AddressSanitizer + UBSan (a separate build tree;
# Python loads the instrumented libstoker with the runtimes preloaded).
check: all
	$(MAKE) --no-print-directory format-check
	$(MAKE) --no-print-directory check-layering
	$(MAKE) --no-print-directory check-unit
	$(MAKE) --no-print-directory check-integration
ifeq ($(SANITIZE),)
	$(MAKE) --no-print-directory check-network
	$(MAKE) --no-print-directory check-torch
	$(MAKE) --no-print-directory check-transforms
	$(MAKE) --no-print-directory check-batchops
	$(MAKE) --no-print-directory check-detect-parity
	$(MAKE) --no-print-directory check-ultralytics
	$(MAKE) --no-print-directory check-sanitize
	$(MAKE) --no-print-directory check-tsan
	$(MAKE) --no-print-directory fuzz-smoke
	$(MAKE) --no-print-directory check-usermode
	$(MAKE) --no-print-directory check-packaging check-image
endif

# Python loads the instrumented libstoker with the runtimes preloaded; leak
# checks are for stokerd (LeakSanitizer at its exit), not the interpreter.
SANITIZE_RT  := $(shell $(CC) -print-file-name=libasan.so) $(shell $(CC) -print-file-name=libubsan.so)
SANITIZE_ENV := $(if $(findstring address,$(SANITIZE)),ASAN_OPTIONS=detect_leaks=0 \
                STOKER_DAEMON_ASAN_OPTIONS=detect_leaks=1 LD_PRELOAD="$(SANITIZE_RT)")
check-sanitize:
	$(MAKE) --no-print-directory B=build-sanitize SANITIZE=address,undefined all
	$(MAKE) --no-print-directory B=build-sanitize SANITIZE=address,undefined check-unit
	$(MAKE) --no-print-directory B=build-sanitize SANITIZE=address,undefined check-integration

# ThreadSanitizer: the unit tests (the worker pool's stress test among
# them) and a TSan stokerd under the integration tests that stress sessions,
# rings and coordinated copies with real clients and kills, and the CUDA
# thread starting, refusing and stopping (test_gpu, without a GPU).
TSAN_TESTS := tests/integration/test_sharing.py tests/integration/test_faults.py tests/integration/test_gpu.py
# Only what runs under TSan is built there: stokerd and the unit tests (the
# clients, tools and shims of these tests come from the plain build).
TSAN_BINS := build-tsan/stokerd $(UNIT_SRCS:tests/unit/%.c=build-tsan/tests/%)
check-tsan:
	$(MAKE) --no-print-directory B=build-tsan SANITIZE=thread $(TSAN_BINS)
	TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
	    $(MAKE) --no-print-directory B=build-tsan SANITIZE=thread check-unit
	TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" STOKER_STOKERD=$(abspath build-tsan/stokerd) \
	STOKER_FAULT_ITERATIONS=200 STOKER_BUILD=$(abspath $(B)) PYTHONPATH=$(abspath client/python) \
	    $(PYTHON) -m pytest -q $(TSAN_TESTS) -k "not inject and not memfd and not reopen and not malloc and not accept and not sendmsg and not real_fd"
	TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" STOKER_STOKERD=$(abspath build-tsan/stokerd) \
	STOKER_BUILD=$(abspath $(B)) PYTHONPATH=$(abspath client/python) \
	    $(PYTHON) -m pytest -q tests/integration/test_detect.py -k "mosaic or deterministic or mixup or resume"

# valgrind memcheck under every integration test's stokerd (not in CI: an
# hour's worth of slowdown). libjpeg-turbo's SIMD code confuses memcheck.
VALGRIND ?= valgrind --quiet --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite,indirect \
            --show-leak-kinds=definite,indirect --num-callers=30
check-valgrind: all
	JSIMD_FORCENONE=1 STOKER_DAEMON_WRAPPER="$(VALGRIND)" STOKER_FAULT_ITERATIONS=$${STOKER_FAULT_ITERATIONS:-100} \
	STOKER_BUILD=$(abspath $(B)) PYTHONPATH=$(abspath client/python) $(PYTHON) -m pytest -q tests/integration $(PYTEST_ARGS)

# The fault tests alone, at full strength (1,000 kills; STOKER_FAULT_ITERATIONS
# and STOKER_FAULT_SEED change them), printing their figures.
check-faults: all
	STOKER_BUILD=$(abspath $(B)) PYTHONPATH=$(abspath client/python) $(PYTHON) -m pytest -q -s \
	    tests/integration/test_faults.py tests/integration/test_hostile.py $(PYTEST_ARGS)

# $(call pip_need,MODULES,PACKAGES): PACKAGES from PyPI unless the
# interpreter imports MODULES already.
pip_need = @$(PYTHON) -c 'import $(1)' 2>/dev/null || $(PYTHON) -m pip install -q $(2) 2>/dev/null || \
    $(PYTHON) -m pip install -q --break-system-packages $(2)

# Data sets over HTTP and S3 against real servers on loopback (nginx, moto,
# tests/network/faultserver.py): once, not in the sanitizer pass of
# check-integration; `make check-network B=build-sanitize SANITIZE=...` runs
# them under a sanitizer build.
NETWORK_PY := moto[server] boto3
check-network: all
	$(call pip_need,moto$(comma) boto3,$(NETWORK_PY))
	$(SANITIZE_ENV) STOKER_BUILD=$(abspath $(B)) PYTHONPATH=$(abspath client/python) $(PYTHON) -m pytest -q tests/network

# The C style (.clang-format, clang-format 14 as Debian 12 ships it): every
# C source and header the project writes (not protoc-c's output). `make
# format` rewrites them; format-check (part of make check) fails on a diff.
FORMAT_SRCS = $(shell git ls-files '*.c' '*.h' '*.cu' 2>/dev/null)
.PHONY: format format-check
format:
	clang-format -i $(FORMAT_SRCS)
format-check:
	@clang-format --dry-run --Werror $(FORMAT_SRCS) && echo "format-check: $(words $(FORMAT_SRCS)) files as .clang-format says"

# The layering as a build fact: a forbidden include fails to compile.
.PHONY: check-layering
check-layering: $(B)/proto/stoker.pb-c.h $(B)/gen/paths.h
	STOKER_BUILD=$(abspath $(B)) $(PYTHON) -m pytest -q tests/layering

check-unit: $(UNIT_BINS)
	@set -e; for t in $(UNIT_BINS); do echo "== $$t"; $$t; done

check-integration: all
	$(SANITIZE_ENV) STOKER_BUILD=$(abspath $(B)) PYTHONPATH=$(abspath client/python) $(PYTHON) -m pytest -q tests/integration

# stoker's evaluation batches against Ultralytics' own YOLODataset (rect
# shapes and order, ranks, metadata, boxes, cv2-exact pixels); once, not
# under the sanitizers (torch with the ASan runtime preloaded is not viable).
check-detect-parity: all
	$(call pip_need,ultralytics,ultralytics)
	STOKER_BUILD=$(abspath $(B)) PYTHONPATH=$(abspath client/python) $(PYTHON) -m pytest -q tests/detect_parity

# PyTorch (tests/torch/, once per `make check`): stoker.torch's tensors and
# defaults, and examples/torch/train.py under torchrun with two ranks (DDP,
# gloo on the CPU, ResNet-18), stopped mid-epoch and resumed. torch and
# torchvision come from PyPI when the interpreter lacks them.
check-torch: all
	$(call pip_need,torch$(comma) torchvision,torch torchvision)
	STOKER_BUILD=$(abspath $(B)) PYTHONPATH=$(abspath client/python) $(PYTHON) -m pytest -q tests/torch

# The per-sample transform ops against their references (tests/transforms/):
# pixel parity on real photos with torchvision's PIL path, PIL and timm, and
# each random op's draws (>= 100,000) against the reference's own. torch,
# torchvision and timm come from PyPI when the interpreter lacks them.
.PHONY: check-transforms
check-transforms: all
	$(call pip_need,torch$(comma) torchvision$(comma) timm,torch torchvision timm)
	STOKER_BUILD=$(abspath $(B)) PYTHONPATH=$(abspath client/python) $(PYTHON) -m pytest -q tests/transforms

# The batch ops (MixUp / CutMix, torchvision's and timm's) and repeated
# augmentation (tests/batchops/): mixed batches against the unmixed ones
# mixed by the references' code, 100,000-draw distributions against
# theirs, RASampler / RepeatAugSampler counts, resume.
.PHONY: check-batchops
check-batchops: all
	$(call pip_need,torch$(comma) torchvision$(comma) timm,torch torchvision timm)
	STOKER_BUILD=$(abspath $(B)) PYTHONPATH=$(abspath client/python) $(PYTHON) -m pytest -q tests/batchops

# Ultralytics' trainer fed by stokerd (stoker.ultralytics): its batch dicts
# against Ultralytics' own loader, and a short yolo11n training on the CPU.
# Heavy (torch): run once by `make check`, not with the integration tests,
# nor under the sanitizers (run it with STOKER_STOKERD=build-sanitize/stokerd
# for an instrumented daemon). Ultralytics (and torch) come from PyPI when
# the interpreter lacks them.
.PHONY: check-ultralytics
check-ultralytics: all
	$(call pip_need,ultralytics,ultralytics)
	STOKER_BUILD=$(abspath $(B)) PYTHONPATH=$(abspath client/python) $(PYTHON) -m pytest -q tests/ultralytics

demo: all
	$(PYTHON) scripts/demo.py

# ---- fuzzing (docs/reliability.md) ----
# libFuzzer targets built with clang into $(FB), with AddressSanitizer and
# UBSan, from the same sources as stokerd and libstoker:
#   fuzz_dispatch  client bytes into a whole in-process daemon (server_adopt)
#   fuzz_decode    a file through the workers' decode + augment path
#   fuzz_client    a hostile daemon's replies into libstoker
#   fuzz_detect    label files, data.yaml, and the detection transforms
#   fuzz_tar       tar shard headers (the member index), brace patterns, keys
#   fuzz_s3        an S3 server's answers: ListObjectsV2 pages, error bodies
#   fuzz_png, fuzz_webp, fuzz_tiff, fuzz_bmp, fuzz_pnm
#                  one whole-image decoder each (daemon/formats/image.h), whatever the magic bytes
# `make fuzz` runs each for FUZZ_SECONDS (default 60) and keeps what it
# finds in $(FB)/corpus/; `make fuzz-smoke` runs each for a few seconds (CI).
FUZZ_CC      ?= clang
FB           ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_ARGS    ?=
FUZZ_IMAGE   := png webp tiff bmp pnm
FUZZ_TARGETS := dispatch decode client detect tar s3 $(FUZZ_IMAGE)
FUZZ_BINS    := $(FUZZ_TARGETS:%=$(FB)/fuzz_%)
FUZZ_CFLAGS  := -std=c11 -D_GNU_SOURCE -g -O1 $(WARN) -pthread -fno-omit-frame-pointer \
                -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all \
                -DSTOKER_VERSION='"$(VERSION)"' $(PKG_CFLAGS)
# The fuzzers' own programs see the daemon, libstoker and proto/.
FUZZ_INC     := $(INC_DAEMON) $(INC_CLIENT) -Itests/fuzz
FUZZ_OBJS    := $(DAEMON_SRCS:%.c=$(FB)/%.o) $(FB)/proto/stoker.pb-c.o $(FB)/proto/frame.o $(FB)/proto/cudadrv.o $(FB)/proto/transform_text.o

$(foreach l,$(DAEMON_LAYERS),$(eval $(FB)/daemon/$(l)/%.o: LAYER_INC := $(call layer_inc,$(LAYER_USES_$(l)))))
$(FB)/client/%.o $(FB)/proto/%.o: LAYER_INC := $(INC_CLIENT)
$(FB)/%.o: %.c $(B)/proto/stoker.pb-c.h $(B)/gen/paths.h
	@mkdir -p $(dir $@)
	$(call say,CC,$@)
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) $(LAYER_INC) -MMD -MP -c $< -o $@

$(FB)/proto/stoker.pb-c.o: $(B)/proto/stoker.pb-c.c
	@mkdir -p $(dir $@)
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) $(INC_CLIENT) -Wno-missing-prototypes -c $< -o $@

$(FB)/fuzz_dispatch $(FB)/fuzz_decode $(FB)/fuzz_detect $(FB)/fuzz_tar $(FB)/fuzz_s3: $(FB)/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz_common.h $(FUZZ_OBJS)
	$(call say,CCLD,$@)
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_INC) -fsanitize=fuzzer -o $@ $< $(FUZZ_OBJS) $(LIBS_DAEMON)

$(FUZZ_IMAGE:%=$(FB)/fuzz_%): $(FB)/fuzz_%: tests/fuzz/fuzz_image.c $(FUZZ_OBJS)
	$(call say,CCLD,$@)
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_INC) -fsanitize=fuzzer -DFUZZ_FORMAT='"$*"' -o $@ $< $(FUZZ_OBJS) $(LIBS_DAEMON)

$(FB)/fuzz_client: tests/fuzz/fuzz_client.c tests/fuzz/fuzz_common.h client/libstoker.c $(FB)/proto/stoker.pb-c.o $(FB)/proto/frame.o $(FB)/proto/cudadrv.o $(FB)/proto/transform_text.o $(FB)/client/gpu.o
	$(call say,CCLD,$@)
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) $(FUZZ_INC) -fsanitize=fuzzer -o $@ $< $(FB)/proto/stoker.pb-c.o $(FB)/proto/frame.o $(FB)/proto/cudadrv.o $(FB)/proto/transform_text.o $(FB)/client/gpu.o $(LIBS_CLIENT)

# Seeds: protocol conversations packed by protobuf-c; small JPEGs of every
# kind libjpeg writes (baseline, grayscale, CMYK, progressive, arithmetic,
# a 2,090-scan file) and the repository's real photographs; a small file of
# every PNG, WebP, TIFF, BMP and PPM/PGM variant (tests/tools/mkimages.py),
# each in its decoder's corpus and all in fuzz_decode's.
$(B)/tests/fuzz_mkseeds: tests/fuzz/mkseeds.c tests/fuzz/fuzz_common.h $(PROTO_OBJS)
	@mkdir -p $(dir $@)
	$(Q)$(CC) $(CFLAGS_ALL) $(INC_CLIENT) -Itests/fuzz -o $@ $< $(PROTO_OBJS) $(LIBS_CLIENT) $(LDFLAGS_ALL)

$(FB)/seeds/.done: $(B)/tests/fuzz_mkseeds $(B)/tests/mkjpeg tests/tools/mkimages.py
	@mkdir -p $(FB)/seeds/decode
	$(Q)$(B)/tests/fuzz_mkseeds $(FB)/seeds
	$(Q)set -e; for k in baseline gray cmyk progressive arith; do \
	    $(B)/tests/mkjpeg $$k 61 47 $(FB)/seeds/decode/$$k.jpg; done; \
	    $(B)/tests/mkjpeg scans 24 16 $(FB)/seeds/decode/scans.jpg 2>/dev/null; \
	    cp data/photos/rocket.jpg $(FB)/seeds/decode/
	@mkdir -p $(FB)/seeds/detect
	$(Q)cp tests/fuzz/regressions/detect-* $(FB)/seeds/detect/
	$(Q)printf '\0000 0.5 0.5 0.2 0.4\n3 0.1 0.2 0.5 0.2 0.5 0.6 0.1 0.6\n' > $(FB)/seeds/detect/labels
	$(Q)printf '\001path: /d\ntrain: images/train\nnames:\n  0: a\n  1: b\n' > $(FB)/seeds/detect/yaml
	$(Q)printf '\002\000\000\000\100\000\000\000\003\000\000\000\011' > $(FB)/seeds/detect/mosaic
	$(Q)cp tests/fuzz/regressions/dispatch-* $(FB)/seeds/dispatch/
	@mkdir -p $(FB)/seeds/tar
	$(Q)cp tests/fuzz/regressions/tar-* $(FB)/seeds/tar/
	@mkdir -p $(FB)/seeds/s3
	$(Q)printf '\000<ListBucketResult><IsTruncated>true</IsTruncated><Contents><Key>a/b&amp;c.jpg</Key><Size>12</Size></Contents><NextContinuationToken>x&#43;y</NextContinuationToken></ListBucketResult>' > $(FB)/seeds/s3/page
	$(Q)printf '\001<Error><Code>AccessDenied</Code><Message>no &lt;&#233;&gt;</Message></Error>' > $(FB)/seeds/s3/error
	$(Q)rm -rf $(FB)/seeds/images && $(PYTHON) tests/tools/mkimages.py --side 23 17 $(FB)/seeds/images
	$(Q)set -e; for f in $(FUZZ_IMAGE); do mkdir -p $(FB)/seeds/$$f; \
	    cp $(FB)/seeds/images/$${f}_* $(FB)/seeds/$$f/; cp $(FB)/seeds/images/$${f}_* $(FB)/seeds/decode/; done
	$(Q){ printf '\003'; head -c 4096 data/photos/rocket.jpg; } > $(FB)/seeds/detect/jpeg-header
	$(Q)printf '\003\211PNG\r\n\032\n\000\000\000\015IHDR\000\000\001\000\000\000\000\200\010\002\000\000\000' \
	    > $(FB)/seeds/detect/png-header
	$(Q)for f in $(FB)/seeds/images/*; do { printf '\003'; cat "$$f"; } > $(FB)/seeds/detect/header-$${f##*/}; done
	$(Q)$(PYTHON) -c 'import io, sys; from PIL import Image; e = Image.Exif(); e[274] = 6; \
	    [open(f"$(FB)/seeds/detect/exif-{f}", "wb").write(b"\3" + b.getvalue()) for f, kw in \
	     (("JPEG", {}), ("PNG", {}), ("WEBP", {"lossless": True})) \
	     for b in [io.BytesIO()] if Image.new("RGB", (9, 5)).save(b, f, exif=e, **kw) is None]'
	@touch $@

fuzz-build: $(FUZZ_BINS) $(FB)/seeds/.done

FUZZ_RUN = set -e; for t in $(FUZZ_TARGETS); do \
	mkdir -p $(FB)/corpus/$$t; \
	printf '== fuzz_%s: %s s\n' $$t $(1); \
	$(FB)/fuzz_$$t -max_total_time=$(1) -timeout=30 -rss_limit_mb=4096 -print_final_stats=1 $(FUZZ_ARGS) \
	    $(FB)/corpus/$$t $(FB)/seeds/$$t > $(FB)/fuzz_$$t.log 2>&1 || { tail -60 $(FB)/fuzz_$$t.log; exit 1; }; \
	grep -aE '^stat::(number_of_executed_units|average_exec_per_sec|new_units_added|peak_rss_mb)' $(FB)/fuzz_$$t.log; \
	done

fuzz: fuzz-build
	$(call FUZZ_RUN,$(FUZZ_SECONDS))

fuzz-smoke: fuzz-build
	$(call FUZZ_RUN,5)

# Benchmark (bench/README.md): stoker vs. the decode limit and the peers,
# one table, also in bench/out/results.json. Options: BENCH_ARGS="--help".
BENCH_BINS   := $(B)/bench/jpeg_limit $(B)/bench/stoker_rtt $(B)/bench/profile_pipeline $(B)/bench/profile_detect $(B)/bench/hsv_kernels

bench: all $(BENCH_BINS)
	STOKER_BUILD=$(abspath $(B)) PYTHONPATH=$(abspath client/python) $(PYTHON) bench/run.py $(BENCH_ARGS)

# Epochs over HTTP and S3 at several round-trip times (tc netem in network
# namespaces the bench makes; root): stoker cold/warm against DataLoader with
# fsspec and boto3, bench/out/network.json. Options: BENCH_NETWORK_ARGS="--help".
bench-network: all
	$(call pip_need,moto$(comma) boto3$(comma) fsspec$(comma) aiohttp,$(NETWORK_PY) fsspec aiohttp)
	STOKER_BUILD=$(abspath $(B)) PYTHONPATH=$(abspath client/python) $(PYTHON) bench/network.py $(BENCH_NETWORK_ARGS)

# YOLO detection: stoker mosaic/letterbox 640 against Ultralytics' own
# loaders, bench/out/detect.json. Options: BENCH_DETECT_ARGS="--help".
bench-detect: all $(B)/bench/jpeg_limit $(B)/bench/profile_detect
	STOKER_BUILD=$(abspath $(B)) PYTHONPATH=$(abspath client/python) $(PYTHON) bench/detect.py $(BENCH_DETECT_ARGS)

# YOLO training through Ultralytics' trainer, its loader against stoker's
# (losses, mAP, epoch times, two seeds): bench/out/yolo_train/. About 20
# minutes on 2 cores; options: BENCH_YOLO_ARGS="--help" (--task classify,
# segment, pose: bench/out/yolo_train_{cls,seg,pose}/).
.PHONY: bench-yolo-train
bench-yolo-train: all
	STOKER_BUILD=$(abspath $(B)) PYTHONPATH=$(abspath client/python) $(PYTHON) bench/yolo_train.py $(BENCH_YOLO_ARGS)

# The recipe training proof: a torchvision model with the ResNet-50 v2 data
# recipe through torchvision's DataLoader and through stoker, two seeds
# each, per-epoch loss and top-1 (docs/transforms.md). About 15 minutes on
# 2 busy cores, niced; options: BENCH_PROOF_ARGS="--help".
.PHONY: bench-recipe-proof
bench-recipe-proof: all
	STOKER_BUILD=$(abspath $(B)) PYTHONPATH=$(abspath client/python) nice -n 10 $(PYTHON) bench/recipe_proof.py \
		--json $(abspath bench/out)/recipe_proof.json $(BENCH_PROOF_ARGS)

$(B)/bench/jpeg_limit: bench/jpeg_limit.c bench/bench_files.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ $< $(LIBS_DAEMON) $(LDFLAGS_ALL)

$(B)/bench/stoker_rtt: bench/stoker_rtt.c client/include/stoker.h $(LIB_SO)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Iclient/include -o $@ $< -L$(B) -l:libstoker.so.$(SOVERSION) -Wl,-rpath,'$$ORIGIN/..' $(LDFLAGS_ALL)

$(B)/bench/profile_pipeline $(B)/bench/profile_detect $(B)/bench/hsv_kernels: $(B)/bench/%: bench/%.c bench/bench_files.h $(B)/libstokerd.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) $(INC_DAEMON) -o $@ $< $(B)/libstokerd.a $(LIBS_DAEMON) $(LDFLAGS_ALL)

# The instance geometry and masks (instmask.c, instgeom.c) now against
# INSTMASK_BASE's, in one process on the same polygons, outputs compared
# (bench/profile_instmask.c): the base's objects with every symbol base_.
INSTMASK_BASE ?= main
INSTMASK_ARGS ?= bench/out/yolo/instances-256/segment/labels/train
.PHONY: bench-instmask
bench-instmask: $(B)/libstokerd.a
	@mkdir -p $(B)/bench/base
	set -e; for f in instmask instgeom; do \
		git show $(INSTMASK_BASE):daemon/pixels/$$f.c > $(B)/bench/base/$$f.c; \
		$(CC) $(CFLAGS_ALL) $(INC_DAEMON) -c -o $(B)/bench/base/$$f.o $(B)/bench/base/$$f.c; \
		nm -g --defined-only $(B)/bench/base/$$f.o | awk '{print $$3 " base_" $$3}' > $(B)/bench/base/$$f.syms; \
		objcopy --redefine-syms=$(B)/bench/base/$$f.syms $(B)/bench/base/$$f.o; \
	done
	$(CC) $(CFLAGS_ALL) $(INC_DAEMON) -o $(B)/bench/profile_instmask bench/profile_instmask.c \
		$(B)/bench/base/instmask.o $(B)/bench/base/instgeom.o $(B)/libstokerd.a $(LIBS_DAEMON) $(LDFLAGS_ALL)
	$(B)/bench/profile_instmask $(INSTMASK_ARGS)

install: all
	install -Dm755 $(B)/stokerd $(DESTDIR)$(SBINDIR)/stokerd
	install -Dm755 $(B)/stokerctl $(DESTDIR)$(BINDIR)/stokerctl
	install -Dm755 $(LIB_SO) $(DESTDIR)$(LIBDIR)/libstoker.so.$(SOVERSION)
	ln -sf libstoker.so.$(SOVERSION) $(DESTDIR)$(LIBDIR)/libstoker.so
	install -Dm644 $(B)/libstoker.a $(DESTDIR)$(LIBDIR)/libstoker.a
	install -Dm644 client/include/stoker.h $(DESTDIR)$(INCLUDEDIR)/stoker.h
	install -Dm644 $(B)/stoker.pc $(DESTDIR)$(LIBDIR)/pkgconfig/stoker.pc
	install -Dm644 config/stoker.conf $(DESTDIR)$(VENDORCONFDIR)/stoker.conf
	install -dm755 $(DESTDIR)$(SYSCONFDIR)/stoker/stoker.conf.d
	set -e; for f in client/python/stoker/*.py; do install -Dm644 $$f $(DESTDIR)$(PYTHONDIR)/stoker/$${f##*/}; done
	sed 's|/usr/local/sbin/|$(SBINDIR)/|g' deploy/stoker.service > $(B)/stoker.service
	install -Dm644 $(B)/stoker.service $(DESTDIR)$(UNITDIR)/stoker.service
	install -Dm644 deploy/stoker.socket $(DESTDIR)$(UNITDIR)/stoker.socket
	install -Dm644 deploy/stoker.sysusers $(DESTDIR)$(SYSUSERSDIR)/stoker.conf
	install -Dm644 deploy/stoker-gpu.conf $(DESTDIR)$(VENDORCONFDIR)/systemd/gpu.conf
	install -Dm644 deploy/stoker-network.conf $(DESTDIR)$(VENDORCONFDIR)/systemd/network.conf
	set -e; for m in $(MANPAGES); do install -Dm644 $$m $(DESTDIR)$(MANDIR)/man$${m##*.}/$${m#man/}; done
	install -Dm644 README.md $(DESTDIR)$(DOCDIR)/README.md
	install -Dm644 docs/deploy.md $(DESTDIR)$(DOCDIR)/deploy.md
	install -Dm644 deploy/kubernetes/stoker-daemonset.yaml $(DESTDIR)$(DOCDIR)/kubernetes/stoker-daemonset.yaml
	install -Dm644 deploy/kubernetes/trainer-pod.yaml $(DESTDIR)$(DOCDIR)/kubernetes/trainer-pod.yaml
	@if [ -z "$(DESTDIR)" ] && [ "$$(id -u)" = 0 ]; then ldconfig; \
	  echo "stoker: installed; as root: systemd-sysusers && systemctl daemon-reload && systemctl enable --now stoker.socket"; fi

# Removes what install put there; the admin's /etc/stoker stays.
uninstall:
	rm -f $(DESTDIR)$(SBINDIR)/stokerd $(DESTDIR)$(BINDIR)/stokerctl \
	      $(DESTDIR)$(LIBDIR)/libstoker.so.$(SOVERSION) $(DESTDIR)$(LIBDIR)/libstoker.so \
	      $(DESTDIR)$(LIBDIR)/libstoker.a $(DESTDIR)$(INCLUDEDIR)/stoker.h \
	      $(DESTDIR)$(LIBDIR)/pkgconfig/stoker.pc $(DESTDIR)$(VENDORCONFDIR)/stoker.conf \
	      $(DESTDIR)$(VENDORCONFDIR)/systemd/gpu.conf $(DESTDIR)$(VENDORCONFDIR)/systemd/network.conf \
	      $(DESTDIR)$(UNITDIR)/stoker.service $(DESTDIR)$(UNITDIR)/stoker.socket \
	      $(DESTDIR)$(SYSUSERSDIR)/stoker.conf $(addprefix $(DESTDIR)$(MANDIR)/,$(foreach m,$(MANPAGES),man$(subst .,,$(suffix $(m)))/$(notdir $(m))))
	rm -rf $(DESTDIR)$(PYTHONDIR)/stoker $(DESTDIR)$(DOCDIR)
	rmdir $(DESTDIR)$(VENDORCONFDIR)/systemd $(DESTDIR)$(VENDORCONFDIR) $(DESTDIR)$(SYSCONFDIR)/stoker/stoker.conf.d \
	      $(DESTDIR)$(SYSCONFDIR)/stoker 2>/dev/null || true

# ---- packaging (docs/deploy.md) ----
# `make deb`: Debian packages with debhelper from deploy/debian, into
# $(DEB_OUT). `make check-packaging` (part of make check): lintian, the
# packages installed into this machine with dpkg -i, used, removed and
# purged; the wheel and sdist built and installed into a fresh venv; the
# container files linted. It installs and purges stoker's packages: not
# for a machine where they are installed for real.
DEB_OUT      ?= $(B)/deb
deb:
	scripts/build-deb.sh $(DEB_OUT)

# The packages for the checks and the image, without their unit tests, the
# log in $(DEB_OUT).log: built once for both when one make runs both.
.PHONY: deb-for-checks
deb-for-checks:
	DEB_BUILD_OPTIONS="nocheck parallel=$$(nproc)" scripts/build-deb.sh $(DEB_OUT) > $(DEB_OUT).log 2>&1 || \
	    { tail -40 $(DEB_OUT).log; exit 1; }

check-packaging: all deb-for-checks
	STOKER_DEB_DIR=$(abspath $(DEB_OUT)) STOKER_BUILD=$(abspath $(B)) PYTHONPATH=$(abspath client/python) \
	    $(PYTHON) -m pytest -q tests/packaging --deselect tests/packaging/test_image.py $(PYTEST_ARGS)

# `make wheel`: the wheel that carries stokerd and stokerctl besides the
# Python package and libstoker (README "Without root", docs/slurm.md): the
# binaries built here, their shared libraries bundled into stoker.libs/ and
# the wheel tagged manylinux_x_y for the glibc they need
# (scripts/repair-wheel.py, with patchelf). Into $(WHEEL_OUT).
WHEEL_OUT    ?= $(B)/wheel
.PHONY: wheel
wheel: $(B)/stokerd $(B)/stokerctl
	rm -rf $(B)/wheel-raw $(WHEEL_OUT)
	cd $(B) && STOKER_WHEEL_BIN=$(abspath $(B)) $(PYTHON) -m build --wheel --outdir $(abspath $(B))/wheel-raw \
	    $(abspath client/python) > $(abspath $(B))/wheel.log 2>&1 || { tail -40 $(abspath $(B))/wheel.log; exit 1; }
	rm -rf client/python/build
	$(PYTHON) scripts/repair-wheel.py $(B)/wheel-raw/stoker-$(VERSION)-*.whl $(WHEEL_OUT)

# `make wheel-compat`: the same wheel built inside a Debian 11 root
# (mmdebstrap; glibc 2.31, so manylinux_2_30), with the three libraries
# Debian 11 lacks built there from Debian 12's sources
# (scripts/build-wheel-compat.sh; about 11 minutes). Into $(WHEEL_OUT)-compat.
.PHONY: wheel-compat
wheel-compat:
	scripts/build-wheel-compat.sh $(abspath $(WHEEL_OUT))-compat

# User mode as a user meets it (tests/usermode, as root: it creates two
# users): the wheel in a fresh venv, daemons started by the first rank, one
# per user per node, idle exit, refusals.
.PHONY: check-usermode
check-usermode: all wheel
	STOKER_BUILD=$(abspath $(B)) STOKER_WHEEL_DIR=$(abspath $(WHEEL_OUT)) $(PYTHON) -m pytest -q tests/usermode $(PYTEST_ARGS)

# `make image`: the DaemonSet's image as an OCI archive, built here without a
# registry (mmdebstrap from Debian's mirrors + the .debs; about 3 minutes,
# 45 MB). `make check-image` (part of make check) checks the archive and runs
# the image's stokerd. deploy/Containerfile is the route with a registry.
IMAGE_OUT    ?= $(B)/image
image: deb-for-checks
	scripts/build-image.sh $(DEB_OUT) $(IMAGE_OUT) > $(IMAGE_OUT).log 2>&1 || { tail -40 $(IMAGE_OUT).log; exit 1; }
	@tail -1 $(IMAGE_OUT).log

check-image: all image
	STOKER_IMAGE_DIR=$(abspath $(IMAGE_OUT)) STOKER_BUILD=$(abspath $(B)) PYTHONPATH=$(abspath client/python) \
	    $(PYTHON) -m pytest -q tests/packaging/test_image.py $(PYTEST_ARGS)

clean:
	rm -rf $(B) build-sanitize build-tsan $(FB)

-include $(shell find $(B) $(FB) -name '*.d' -type f 2>/dev/null)
