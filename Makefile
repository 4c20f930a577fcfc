# stoker: `make` builds everything into build/; `make check` runs every test.
# Dependencies come from pkg-config (scripts/install-deps.sh installs them).

VERSION      := 0.1.0
SOVERSION    := 0
PREFIX       ?= /usr/local
DESTDIR      ?=
CC           ?= cc
PYTHON       ?= python3
B            ?= build

PKGS_DAEMON  := libuv libturbojpeg libjpeg libprotobuf-c libsystemd inih
PKGS_CLIENT  := libprotobuf-c
PKG_CFLAGS   := $(shell pkg-config --cflags $(PKGS_DAEMON) cmocka)
LIBS_DAEMON  := $(shell pkg-config --libs $(PKGS_DAEMON)) -lm -pthread
LIBS_CLIENT  := $(shell pkg-config --libs $(PKGS_CLIENT))
LIBS_CMOCKA  := $(shell pkg-config --libs cmocka)

OPT          ?= -O2
WARN         := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wno-unused-parameter
CFLAGS_ALL   := -std=c11 -D_GNU_SOURCE -g $(OPT) $(WARN) -fPIC -fvisibility=hidden -pthread \
                -DSTOKER_VERSION='"$(VERSION)"' -I$(B)/proto -Iproto -Iclient/include $(PKG_CFLAGS) $(CFLAGS)
LDFLAGS_ALL  := $(LDFLAGS)
ifneq ($(SANITIZE),)
CFLAGS_ALL   += -fsanitize=$(SANITIZE) -fno-omit-frame-pointer -fno-sanitize-recover=all
LDFLAGS_ALL  += -fsanitize=$(SANITIZE)
endif

PROTO_C      := $(B)/proto/stoker.pb-c.c
PROTO_OBJS   := $(B)/proto/stoker.pb-c.o $(B)/proto/frame.o
DAEMON_SRCS  := $(filter-out daemon/main.c,$(wildcard daemon/*.c))
DAEMON_OBJS  := $(DAEMON_SRCS:%.c=$(B)/%.o)
CLIENT_OBJS  := $(B)/client/libstoker.o
UNIT_SRCS    := $(wildcard tests/unit/test_*.c)
UNIT_BINS    := $(UNIT_SRCS:tests/unit/%.c=$(B)/tests/%)

LIB_SO       := $(B)/libstoker.so.$(SOVERSION)

# Quiet by default; `make V=1` shows the commands.
ifeq ($(V),1)
Q :=
say = @true
else
Q := @
say = @printf '  %-8s %s\n' $(1) $(2)
endif

.PHONY: all clean check check-unit check-integration demo bench install uninstall
all: $(B)/stokerd $(B)/stokerctl $(LIB_SO) $(B)/libstoker.so $(B)/libstoker.a $(B)/stoker.pc $(UNIT_BINS)

$(B)/proto/stoker.pb-c.c $(B)/proto/stoker.pb-c.h: proto/stoker.proto
	@mkdir -p $(B)/proto
	protoc-c --proto_path=proto --c_out=$(B)/proto $<

# Every object depends on the generated header; -MMD tracks the rest.
$(B)/%.o: %.c $(B)/proto/stoker.pb-c.h
	@mkdir -p $(dir $@)
	$(call say,CC,$<)
	$(Q)$(CC) $(CFLAGS_ALL) -MMD -MP -c $< -o $@

$(B)/proto/stoker.pb-c.o: $(B)/proto/stoker.pb-c.c
	$(CC) $(CFLAGS_ALL) -Wno-missing-prototypes -c $< -o $@

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

$(B)/stokerctl: $(B)/client/stokerctl.o $(LIB_SO)
	$(CC) $(LDFLAGS_ALL) -o $@ $< -L$(B) -l:libstoker.so.$(SOVERSION) -Wl,-rpath,'$$ORIGIN'

$(B)/stoker.pc: client/stoker.pc.in
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' $< > $@

$(B)/tests/%: tests/unit/%.c $(B)/libstokerd.a
	@mkdir -p $(dir $@)
	$(call say,CCLD,$@)
	$(Q)$(CC) $(CFLAGS_ALL) -Idaemon -Wno-missing-prototypes -o $@ $< $(B)/libstokerd.a $(LIBS_DAEMON) $(LIBS_CMOCKA) $(LDFLAGS_ALL)

# Sequential even under -j: unit tests first, then the daemon tests.
check: all
	$(MAKE) --no-print-directory check-unit
	$(MAKE) --no-print-directory check-integration

check-unit: $(UNIT_BINS)
	@set -e; for t in $(UNIT_BINS); do echo "== $$t"; $$t; done

check-integration: all
	STOKER_BUILD=$(abspath $(B)) PYTHONPATH=$(abspath client/python) $(PYTHON) -m pytest -q tests/integration

demo: all
	$(PYTHON) scripts/demo.py

# Benchmark (bench/README.md): stoker vs. the decode limit and the peers,
# one table, also in bench/out/results.json. Options: BENCH_ARGS="--help".
BENCH_BINS   := $(B)/bench/jpeg_limit $(B)/bench/stoker_rtt $(B)/bench/profile_pipeline

bench: all $(BENCH_BINS)
	STOKER_BUILD=$(abspath $(B)) PYTHONPATH=$(abspath client/python) $(PYTHON) bench/run.py $(BENCH_ARGS)

$(B)/bench/jpeg_limit: bench/jpeg_limit.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ $< $(LIBS_DAEMON) $(LDFLAGS_ALL)

$(B)/bench/stoker_rtt: bench/stoker_rtt.c client/include/stoker.h $(LIB_SO)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -o $@ $< -L$(B) -l:libstoker.so.$(SOVERSION) -Wl,-rpath,'$$ORIGIN/..' $(LDFLAGS_ALL)

$(B)/bench/profile_pipeline: bench/profile_pipeline.c $(B)/libstokerd.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_ALL) -Idaemon -o $@ $< $(B)/libstokerd.a $(LIBS_DAEMON) $(LDFLAGS_ALL)

install: all
	install -Dm755 $(B)/stokerd $(DESTDIR)$(PREFIX)/sbin/stokerd
	install -Dm755 $(B)/stokerctl $(DESTDIR)$(PREFIX)/bin/stokerctl
	install -Dm755 $(LIB_SO) $(DESTDIR)$(PREFIX)/lib/libstoker.so.$(SOVERSION)
	ln -sf libstoker.so.$(SOVERSION) $(DESTDIR)$(PREFIX)/lib/libstoker.so
	install -Dm644 $(B)/libstoker.a $(DESTDIR)$(PREFIX)/lib/libstoker.a
	install -Dm644 client/include/stoker.h $(DESTDIR)$(PREFIX)/include/stoker.h
	install -Dm644 $(B)/stoker.pc $(DESTDIR)$(PREFIX)/lib/pkgconfig/stoker.pc
	install -Dm644 config/stoker.conf $(DESTDIR)$(PREFIX)/lib/stoker/stoker.conf

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/sbin/stokerd $(DESTDIR)$(PREFIX)/bin/stokerctl \
	      $(DESTDIR)$(PREFIX)/lib/libstoker.so.$(SOVERSION) $(DESTDIR)$(PREFIX)/lib/libstoker.so \
	      $(DESTDIR)$(PREFIX)/lib/libstoker.a $(DESTDIR)$(PREFIX)/include/stoker.h \
	      $(DESTDIR)$(PREFIX)/lib/pkgconfig/stoker.pc $(DESTDIR)$(PREFIX)/lib/stoker/stoker.conf

clean:
	rm -rf $(B)

-include $(shell find $(B) -name '*.d' 2>/dev/null)
