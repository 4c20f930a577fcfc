/* SPDX-License-Identifier: MIT */
/* The Prometheus text exposition of a snapshot (exposition.h). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "exposition.h"

struct expo {
	char *buf;
	size_t len, cap;
	bool failed;
};

static void put(struct expo *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(struct expo *e, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (e->failed)
		return;
	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(e->buf ? e->buf + e->len : NULL, e->buf ? e->cap - e->len : 0, fmt, ap);
		va_end(ap);
		if (n < 0) {
			e->failed = true;
			return;
		}
		if (e->buf && e->len + (size_t)n < e->cap) {
			e->len += (size_t)n;
			return;
		}
		size_t cap = e->cap ? e->cap : 8192;
		while (cap <= e->len + (size_t)n)
			cap *= 2;
		char *nb = realloc(e->buf, cap);
		if (!nb) {
			e->failed = true;
			return;
		}
		e->buf = nb;
		e->cap = cap;
	}
}

/* A label value: backslash, double quote and newline escaped. */
static void put_label_value(struct expo *e, const char *s)
{
	for (; s && *s; s++) {
		if (*s == '\\')
			put(e, "\\\\");
		else if (*s == '"')
			put(e, "\\\"");
		else if (*s == '\n')
			put(e, "\\n");
		else
			put(e, "%c", *s);
	}
}

static void family(struct expo *e, const char *name, const char *type, const char *help)
{
	put(e, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* `labels` is the inside of {...}, already escaped, or NULL. */
static void sample(struct expo *e, const char *name, const char *labels, double v)
{
	if (labels)
		put(e, "%s{%s} %.17g\n", name, labels, v);
	else
		put(e, "%s %.17g\n", name, v);
}

static void metric1(struct expo *e, const char *name, const char *type, const char *help, double v)
{
	family(e, name, type, help);
	sample(e, name, NULL, v);
}

#define COUNTER(e, name, help, v) metric1(e, name, "counter", help, (double)(v))
#define GAUGE(e, name, help, v) metric1(e, name, "gauge", help, (double)(v))

/* The labels of a client: {client, pid, rank, world_size, dataset}. */
static void client_labels(struct expo *e, const struct expo_client *c)
{
	put(e, "client=\"%llu\",pid=\"%d\",rank=\"%u\",world_size=\"%u\",dataset=\"", (unsigned long long)c->id, c->pid,
	    c->rank, c->world_size);
	put_label_value(e, c->dataset);
	put(e, "\"");
}

/* One labelled family over the attached clients. */
static void client_family(struct expo *e, const struct expo_snapshot *s, const char *name, const char *type,
			  const char *help, double (*value)(const struct expo_client *c))
{
	family(e, name, type, help);
	for (size_t i = 0; i < s->nclients; i++) {
		put(e, "%s{", name);
		client_labels(e, &s->clients_v[i]);
		put(e, "} %.17g\n", value(&s->clients_v[i]));
	}
}

static double client_images(const struct expo_client *c)
{
	return (double)c->images;
}

static double client_batches(const struct expo_client *c)
{
	return (double)c->batches;
}

static double client_wait(const struct expo_client *c)
{
	return (double)c->wait_ns / 1e9;
}

static double client_ring(const struct expo_client *c)
{
	return (double)c->ring_bytes;
}

static double client_device(const struct expo_client *c)
{
	return (double)c->device_bytes;
}

static double client_unreadable(const struct expo_client *c)
{
	return (double)c->unreadable;
}

static void render_cache(struct expo *e, const struct expo_snapshot *s)
{
	static const char *const tiers[CACHE_TIERS] = {"encoded", "decoded"};
	const struct cache_tier_stats *ts = s->tiers;
	char labels[32];

	GAUGE(e, "stoker_cache_budget_bytes", "Bytes the node cache may hold.", s->cache_budget);
	GAUGE(e, "stoker_cache_bytes", "Bytes the node cache holds, entries and overhead.", s->cache_bytes);
#define TIER_FAMILY(name, type, help, field)                                       \
	do {                                                                       \
		family(e, name, type, help);                                       \
		for (int t = 0; t < CACHE_TIERS; t++) {                            \
			snprintf(labels, sizeof(labels), "tier=\"%s\"", tiers[t]); \
			sample(e, name, labels, (double)ts[t].field);              \
		}                                                                  \
	} while (0)
	TIER_FAMILY("stoker_cache_hits_total", "counter", "Cache look-ups that found the sample.", hits);
	TIER_FAMILY("stoker_cache_misses_total", "counter", "Cache look-ups that did not.", misses);
	TIER_FAMILY("stoker_cache_evictions_total", "counter", "Entries evicted to make room.", evictions);
	TIER_FAMILY("stoker_cache_rejected_total", "counter", "Entries offered but not admitted.", rejected);
	TIER_FAMILY("stoker_cache_entries", "gauge", "Entries in the cache tier.", entries);
	TIER_FAMILY("stoker_cache_tier_bytes", "gauge", "Bytes of the cache tier's entries.", bytes);
#undef TIER_FAMILY
}

int expo_render(const struct expo_snapshot *s, char **out, size_t *len)
{
	struct expo e = {0};

	family(&e, "stoker_build_info", "gauge", "The stokerd version, as a label.");
	put(&e, "stoker_build_info{version=\"%s\"} 1\n", s->version);
	GAUGE(&e, "process_start_time_seconds", "Start time of the process since the Unix epoch in seconds.",
	      s->start_time_seconds);
	GAUGE(&e, "process_resident_memory_bytes", "Resident memory size in bytes.", s->rss_bytes);
	GAUGE(&e, "stoker_draining", "1 while draining or stopping: no new clients.", s->draining);
	COUNTER(&e, "stoker_images_served_total", "Images delivered to clients.", s->images_served);
	COUNTER(&e, "stoker_batches_served_total", "Batches delivered to clients.", s->batches_served);
	COUNTER(&e, "stoker_decode_errors_total", "Samples that could not be read or decoded (each replaced).",
		s->decode_errors);
	COUNTER(&e, "stoker_decode_error_files_total",
		"Distinct files found unreadable (each once per opening of its data set).", s->decode_error_files);
	COUNTER(&e, "stoker_protocol_errors_total", "Clients cut off for breaking the protocol.", s->protocol_errors);
	COUNTER(&e, "stoker_samples_decoded_total", "Samples decoded by the workers.", s->samples_decoded);
	COUNTER(&e, "stoker_samples_copied_total", "Samples copied from a coordinated job's ring instead of decoded.",
		s->samples_copied);
	COUNTER(&e, "stoker_label_errors_total",
		"Objects dropped from detection label files (malformed or out of range).", s->label_errors);
	COUNTER(&e, "stoker_boxes_dropped_total", "Boxes left out of a batch: an image had more than its max_boxes.",
		s->boxes_dropped);
	if (s->net) {
		const struct fetch_stats *fs = &s->fetch;

		COUNTER(&e, "stoker_net_requests_total", "HTTP/S3 transfers started, retries included.", fs->requests);
		COUNTER(&e, "stoker_net_bytes_total", "HTTP/S3 body bytes received.", fs->bytes);
		COUNTER(&e, "stoker_net_retries_total",
			"HTTP/S3 transfers retried after a 5xx, a timeout or a lost "
			"connection.",
			fs->retries);
		COUNTER(&e, "stoker_net_errors_total", "HTTP/S3 requests that failed after their retries.", fs->errors);
		GAUGE(&e, "stoker_net_inflight", "HTTP/S3 transfers running.", fs->inflight);
		COUNTER(&e, "stoker_remote_cache_hits_total", "Remote samples found in the node cache (not fetched).",
			s->remote_cache_hits);
		COUNTER(&e, "stoker_remote_fetched_total", "Remote samples fetched from their store.",
			s->remote_fetched);
		COUNTER(&e, "stoker_remote_coalesced_total",
			"Remote samples that shared a fetch of the same object "
			"already in flight.",
			s->remote_coalesced);
	}
	COUNTER(&e, "stoker_worker_busy_seconds_total", "Time the workers spent producing samples, all summed.",
		(double)s->worker_busy_ns / 1e9);
	GAUGE(&e, "stoker_workers", "Worker threads configured.", s->workers);
	GAUGE(&e, "stoker_worker_threads", "Worker threads running (above stoker_workers while shrinking).",
	      s->worker_threads);
	GAUGE(&e, "stoker_worker_busy_ratio", "Share of worker time spent busy over the last seconds.",
	      s->worker_busy_ratio);
	GAUGE(&e, "stoker_images_per_second", "Images delivered per second over the last seconds.",
	      s->images_per_second);
	GAUGE(&e, "stoker_clients", "Clients attached to a data set.", s->clients);
	GAUGE(&e, "stoker_connections", "Open connections, attached or not.", s->connections);
	GAUGE(&e, "stoker_ring_bytes", "Shared memory in every client's batch ring.", s->ring_bytes);
	GAUGE(&e, "stoker_memory_budget_bytes", "The node's budget for the cache and every ring.", s->memory_budget);
	GAUGE(&e, "stoker_device_bytes", "GPU memory in every CUDA client's device ring, all GPUs.", s->device_bytes);
	GAUGE(&e, "stoker_gpu_memory_budget_bytes", "Each GPU's budget for device rings (0: its free memory).",
	      s->gpu_memory_budget);
	if (s->cache)
		render_cache(&e, s);
	client_family(&e, s, "stoker_client_images_total", "counter", "Images delivered to the client.", client_images);
	client_family(&e, s, "stoker_client_batches_total", "counter", "Batches delivered to the client.",
		      client_batches);
	client_family(&e, s, "stoker_client_wait_seconds_total", "counter",
		      "Time the client spent waiting for batches (its data stall).", client_wait);
	client_family(&e, s, "stoker_client_ring_bytes", "gauge", "Shared memory in the client's batch ring.",
		      client_ring);
	client_family(&e, s, "stoker_client_device_bytes", "gauge",
		      "GPU memory in the client's device ring (0: host batches).", client_device);
	client_family(&e, s, "stoker_client_unreadable_samples_total", "counter",
		      "Planned samples the client's own uid and groups may not read, replaced by readable ones.",
		      client_unreadable);
	if (e.failed || !e.buf) {
		free(e.buf);
		return -ENOMEM;
	}
	*out = e.buf;
	*len = e.len;
	return 0;
}
