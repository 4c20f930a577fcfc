/* SPDX-License-Identifier: MIT */
/*
 * fuzz_mkseeds DIR: the seed corpora of the protocol fuzzers, as real
 * frames packed by protobuf-c (so they stay right when the protocol grows):
 *   DIR/dispatch/  client -> daemon conversations (fuzz_dispatch)
 *   DIR/client/    a scenario byte, then daemon -> client replies (fuzz_client)
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_common.h"
#include "stoker.pb-c.h"

struct buf {
	uint8_t data[1 << 16];
	size_t len;
};

static void put(struct buf *b, const Stoker__Message *m)
{
	size_t n = stoker__message__get_packed_size(m);

	if (b->len + 4 + n > sizeof(b->data)) {
		fprintf(stderr, "mkseeds: seed too large\n");
		exit(1);
	}
	b->data[b->len++] = (uint8_t)n;
	b->data[b->len++] = (uint8_t)(n >> 8);
	b->data[b->len++] = (uint8_t)(n >> 16);
	b->data[b->len++] = (uint8_t)(n >> 24);
	b->len += stoker__message__pack(m, b->data + b->len);
}

static void save(const char *dir, const char *sub, const char *name, const struct buf *b)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, sub);
	if (mkdir(path, 0755) < 0 && errno != EEXIST) {
		perror(path);
		exit(1);
	}
	snprintf(path, sizeof(path), "%s/%s/%s", dir, sub, name);
	f = fopen(path, "wbe");
	if (!f || fwrite(b->data, 1, b->len, f) != b->len || fclose(f) != 0) {
		perror(path);
		exit(1);
	}
}

/* A Message with one body; every body member of the union is a pointer. */
static Stoker__Message message(Stoker__Message__BodyCase c, void *body)
{
	Stoker__Message m = STOKER__MESSAGE__INIT;

	m.body_case = c;
	m.hello = body;
	return m;
}

#define MSG(field_, CASE, value) message(STOKER__MESSAGE__BODY_##CASE, (value))

static void hello(struct buf *b)
{
	Stoker__Hello h = STOKER__HELLO__INIT;
	Stoker__Message m = MSG(hello, HELLO, &h);

	h.protocol_version = 1;
	h.client_name = (char *)"fuzz";
	put(b, &m);
}

static void attach(struct buf *b, uint32_t batch, uint32_t size, Stoker__DType dtype, uint64_t first, bool coord)
{
	static float mean[3] = {0.5f, 0.5f, 0.5f}, std[3] = {0.25f, 0.25f, 0.25f};
	Stoker__Attach a = STOKER__ATTACH__INIT;
	Stoker__Message m = MSG(attach, ATTACH, &a);

	a.dataset = (char *)FUZZ_DATASET;
	a.has_batch_size = a.has_image_size = a.has_prefetch = a.has_dtype = true;
	a.batch_size = batch;
	a.image_size = size;
	a.prefetch = 1;
	a.dtype = dtype;
	if (dtype != STOKER__DTYPE__UINT8) {
		a.n_mean = a.n_std = 3;
		a.mean = mean;
		a.std = std;
	}
	if (first) {
		a.has_first_batch = a.has_expect_samples = true;
		a.first_batch = first;
		a.expect_samples = FUZZ_DATASET_SAMPLES;
	}
	a.has_coordinated = coord;
	a.coordinated = coord;
	put(b, &m);
}

static void release(struct buf *b, uint32_t slot)
{
	Stoker__Release r = STOKER__RELEASE__INIT;
	Stoker__Message m = MSG(release, RELEASE, &r);

	r.slot = slot;
	r.has_wait_ns = true;
	r.wait_ns = 1000;
	put(b, &m);
}

static void start_epoch(struct buf *b, uint64_t epoch, uint32_t gen)
{
	Stoker__StartEpoch se = STOKER__START_EPOCH__INIT;
	Stoker__Message m = MSG(start_epoch, START_EPOCH, &se);

	se.epoch = epoch;
	se.generation = gen;
	put(b, &m);
}

static void dispatch_seeds(const char *dir)
{
	Stoker__StatsRequest sr = STOKER__STATS_REQUEST__INIT;
	Stoker__ConfigGet cg = STOKER__CONFIG_GET__INIT;
	Stoker__MetricsRequest mr = STOKER__METRICS_REQUEST__INIT;
	Stoker__ConfigSet cs = STOKER__CONFIG_SET__INIT;
	Stoker__Reload rl = STOKER__RELOAD__INIT;
	Stoker__Drain dr = STOKER__DRAIN__INIT;
	Stoker__Message m;
	struct buf b;

	b.len = 0;
	hello(&b);
	save(dir, "dispatch", "hello", &b);
	m = MSG(stats_request, STATS_REQUEST, &sr);
	put(&b, &m);
	save(dir, "dispatch", "stats", &b);

	b.len = 0;
	hello(&b);
	attach(&b, 2, 16, STOKER__DTYPE__UINT8, 0, false);
	save(dir, "dispatch", "attach", &b);
	release(&b, 0);
	release(&b, 1);
	release(&b, 0);
	start_epoch(&b, 1, 1);
	release(&b, 1);
	release(&b, 0);
	start_epoch(&b, 7, 2);
	m = MSG(stats_request, STATS_REQUEST, &sr);
	put(&b, &m);
	save(dir, "dispatch", "attach-release-epochs", &b);

	b.len = 0;
	hello(&b);
	attach(&b, 3, 24, STOKER__DTYPE__FLOAT32, 1, true);
	release(&b, 0);
	release(&b, 1);
	save(dir, "dispatch", "attach-float-resume", &b);

	b.len = 0;
	hello(&b);
	attach(&b, 4, 8, STOKER__DTYPE__FLOAT16, 0, false);
	attach(&b, 4, 8, STOKER__DTYPE__UINT8, 0, false);
	save(dir, "dispatch", "attach-twice", &b);

	/* Sample names: a range, one past the end, a count over the bound. */
	b.len = 0;
	hello(&b);
	attach(&b, 2, 16, STOKER__DTYPE__UINT8, 0, false);
	for (int k = 0; k < 3; k++) {
		Stoker__NamesRequest nr = STOKER__NAMES_REQUEST__INIT;

		nr.first = k == 1 ? FUZZ_DATASET_SAMPLES : 1;
		nr.count = k == 2 ? 100000 : 2;
		m = MSG(names_request, NAMES_REQUEST, &nr);
		put(&b, &m);
	}
	save(dir, "dispatch", "names", &b);

	b.len = 0;
	hello(&b);
	m = MSG(config_get, CONFIG_GET, &cg);
	put(&b, &m);
	m = MSG(metrics_request, METRICS_REQUEST, &mr);
	put(&b, &m);
	cs.key = (char *)"workers";
	cs.value = (char *)"2";
	m = MSG(config_set, CONFIG_SET, &cs);
	put(&b, &m);
	m = MSG(reload, RELOAD, &rl);
	put(&b, &m);
	dr.has_timeout_seconds = true;
	dr.timeout_seconds = 1;
	m = MSG(drain, DRAIN, &dr);
	put(&b, &m);
	save(dir, "dispatch", "control", &b);
}

/* The ring the client fuzzer passes is FUZZ_RING_BYTES; this geometry fits. */
static void attached(struct buf *b)
{
	Stoker__Attached at = STOKER__ATTACHED__INIT;
	Stoker__Message m = MSG(attached, ATTACHED, &at);

	at.slot_count = 2;
	at.batch_size = 2;
	at.image_height = at.image_width = 16;
	at.channels = 3;
	at.labels_offset = 1536;
	at.indices_offset = 1552;
	at.slot_bytes = 4096;
	at.ring_bytes = 8192;
	at.dataset_samples = 4;
	at.num_classes = 2;
	at.samples_per_epoch = 4;
	at.batches_per_epoch = 2;
	at.epoch = 0;
	put(b, &m);
}

static void batch_ready(struct buf *b, uint32_t slot, uint32_t gen, uint64_t index)
{
	Stoker__BatchReady br = STOKER__BATCH_READY__INIT;
	Stoker__Message m = MSG(batch_ready, BATCH_READY, &br);

	br.slot = slot;
	br.generation = gen;
	br.batch_index = index;
	br.count = 2;
	br.has_replaced = true;
	br.replaced = 1;
	put(b, &m);
}

static void welcome(struct buf *b)
{
	Stoker__Welcome w = STOKER__WELCOME__INIT;
	Stoker__Message m = MSG(welcome, WELCOME, &w);

	w.protocol_version = 1;
	w.daemon_version = (char *)"0.1.0";
	w.max_frame_bytes = 65536;
	put(b, &m);
}

static void client_seeds(const char *dir)
{
	Stoker__EndOfEpoch eoe = STOKER__END_OF_EPOCH__INIT;
	Stoker__Shutdown sd = STOKER__SHUTDOWN__INIT;
	Stoker__Error err = STOKER__ERROR__INIT;
	Stoker__Stats st = STOKER__STATS__INIT;
	Stoker__ClientStats cl = STOKER__CLIENT_STATS__INIT, *clients[1] = {&cl};
	Stoker__CacheTierStats tier = STOKER__CACHE_TIER_STATS__INIT, *tiers[1] = {&tier};
	Stoker__ConfigEntry e = STOKER__CONFIG_ENTRY__INIT, *entries[1] = {&e};
	Stoker__ConfigReply cr = STOKER__CONFIG_REPLY__INIT;
	Stoker__Metrics mt = STOKER__METRICS__INIT;
	Stoker__ReloadReply rr = STOKER__RELOAD_REPLY__INIT;
	Stoker__DrainReply drr = STOKER__DRAIN_REPLY__INIT;
	Stoker__ConfigSetReply csr = STOKER__CONFIG_SET_REPLY__INIT;
	char *files[1] = {(char *)"/etc/stoker/stoker.conf"};
	Stoker__Message m;
	struct buf b;

	/* 0: attach and read batches. */
	b.len = 0;
	b.data[b.len++] = 0;
	welcome(&b);
	attached(&b);
	batch_ready(&b, 0, 0, 0);
	batch_ready(&b, 1, 0, 1);
	eoe.generation = 0;
	eoe.epoch = 0;
	m = MSG(end_of_epoch, END_OF_EPOCH, &eoe);
	put(&b, &m);
	batch_ready(&b, 0, 1, 0);
	sd.reason = (char *)"stopping";
	m = MSG(shutdown, SHUTDOWN, &sd);
	put(&b, &m);
	save(dir, "client", "batches", &b);

	/* 0: batches, and the names of samples 0..3 asked among them. */
	{
		Stoker__Names nm = STOKER__NAMES__INIT;
		char *names[4] = {(char *)"a.jpg", (char *)"/abs/b.jpg", (char *)"c/d.jpg", (char *)"e.jpg"};

		b.len = 1;
		welcome(&b);
		attached(&b);
		batch_ready(&b, 0, 0, 0);
		batch_ready(&b, 1, 0, 1);
		nm.first = 0;
		nm.dir = (char *)"/data/set";
		nm.n_names = 4;
		nm.names = names;
		m = MSG(names, NAMES, &nm);
		put(&b, &m);
		save(dir, "client", "names", &b);
	}

	b.len = 1;
	welcome(&b);
	err.code = STOKER__ERROR_CODE__LEASE_EXPIRED;
	err.message = (char *)"lease expired";
	m = MSG(error, ERROR, &err);
	put(&b, &m);
	save(dir, "client", "error", &b);

	/* 1: statistics. */
	b.len = 0;
	b.data[b.len++] = 1;
	welcome(&b);
	cl.pid = 1;
	cl.dataset = (char *)"/data";
	st.n_clients = 1;
	st.clients = clients;
	tier.tier = (char *)"encoded";
	st.n_cache = 1;
	st.cache = tiers;
	st.cache_policy = (char *)"minio";
	st.state = (char *)"serving";
	m = MSG(stats, STATS, &st);
	put(&b, &m);
	put(&b, &m);
	save(dir, "client", "stats", &b);

	/* 2: configuration and control replies. */
	b.len = 0;
	b.data[b.len++] = 2;
	welcome(&b);
	e.key = (char *)"workers";
	e.value = (char *)"4";
	e.origin = (char *)"default";
	e.effective = (char *)"2";
	cr.n_entries = 1;
	cr.entries = entries;
	cr.n_files = 1;
	cr.files = files;
	m = MSG(config_reply, CONFIG_REPLY, &cr);
	put(&b, &m);
	put(&b, &m);
	mt.text = (char *)"# HELP x\nx 1\n";
	m = MSG(metrics, METRICS, &mt);
	put(&b, &m);
	csr.entry = &e;
	m = MSG(config_set_reply, CONFIG_SET_REPLY, &csr);
	put(&b, &m);
	rr.n_applied = 1;
	rr.applied = files;
	m = MSG(reload_reply, RELOAD_REPLY, &rr);
	put(&b, &m);
	drr.clients = 3;
	m = MSG(drain_reply, DRAIN_REPLY, &drr);
	put(&b, &m);
	save(dir, "client", "control", &b);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: fuzz_mkseeds DIR\n");
		return 2;
	}
	if (mkdir(argv[1], 0755) < 0 && errno != EEXIST) {
		perror(argv[1]);
		return 1;
	}
	dispatch_seeds(argv[1]);
	client_seeds(argv[1]);
	return 0;
}
