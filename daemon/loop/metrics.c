/* SPDX-License-Identifier: MIT */
/*
 * Metrics in the Prometheus text exposition format (version 0.0.4), three
 * ways: the Metrics reply (stokerctl metrics), a file rewritten atomically
 * every metrics_interval_ms for node_exporter's textfile collector
 * (metrics_textfile), and an HTTP GET /metrics listener on a loopback
 * address (metrics_listen).
 *
 * Rendering runs on the loop thread, which owns the counters; the textfile
 * is written on libuv's thread pool (the loop never touches the disk); the
 * HTTP listener is libuv TCP on the loop, with a bounded number of
 * connections, a bounded request and a deadline.
 *
 * Adding a metric is one line: COUNTER/GAUGE for a daemon-wide value, a
 * sample() line in a labelled family for per-client or per-tier ones.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "daemon.h"
#include "log.h"
#include "ring.h"
#include "prefetch.h"
#include "session.h"
#include "workers.h"

#define HTTP_MAX_CONNS 8
#define HTTP_MAX_REQUEST 4096
#define HTTP_TIMEOUT_MS 5000

struct http_conn {
	struct metrics *m;
	struct http_conn *prev, *next;
	uv_tcp_t tcp;
	uv_timer_t timer;
	uv_write_t write;
	char req[HTTP_MAX_REQUEST];
	size_t len;
	char *resp;
	int open_handles;
	bool closing;
};

struct textfile_job {
	uv_work_t work;
	struct metrics *m;
	char *text;
	size_t len;
	char path[PATH_MAX];
	int err;
};

struct metrics {
	struct daemon *d;
	uv_timer_t timer; /* the textfile's */
	bool timer_open;
	uint64_t interval_ms;
	char textfile[PATH_MAX];
	bool writing;      /* a textfile job is on the thread pool */
	int last_err;      /* logged once until it changes */
	uv_tcp_t listener;
	bool listening;
	struct http_conn *http;
	uint32_t nhttp;
	uint32_t refs;     /* open handles and jobs; freed at 0 once stopped */
	bool stopped;
};

/* ---- exposition text ---- */

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
static void client_labels(struct expo *e, const struct conn *c)
{
	const struct session *s = c->session;

	put(e, "client=\"%llu\",pid=\"%d\",rank=\"%u\",world_size=\"%u\",dataset=\"", (unsigned long long)c->id,
	    (int)c->pid, s->plan.rank, s->plan.world_size);
	put_label_value(e, s->dataset_name);
	put(e, "\"");
}

/* One labelled family over the attached clients. */
static void client_family(struct expo *e, const struct daemon *d, const char *name, const char *type,
			  const char *help, double (*value)(const struct session *s))
{
	family(e, name, type, help);
	for (const struct conn *c = d->conns; c; c = c->next) {
		if (!c->session)
			continue;
		put(e, "%s{", name);
		client_labels(e, c);
		put(e, "} %.17g\n", value(c->session));
	}
}

static double client_images(const struct session *s)
{
	return (double)s->images;
}

static double client_batches(const struct session *s)
{
	return (double)s->batches;
}

static double client_wait(const struct session *s)
{
	return (double)s->wait_ns / 1e9;
}

static double client_ring(const struct session *s)
{
	return (double)s->ring->bytes;
}

static double client_device(const struct session *s)
{
	return (double)s->device_bytes;
}

static double client_unreadable(const struct session *s)
{
	return (double)s->unreadable;
}

static void render_cache(struct expo *e, struct cache *cache)
{
	static const char *const tiers[CACHE_TIERS] = {"encoded", "decoded"};
	struct cache_tier_stats ts[CACHE_TIERS];
	char labels[32];

	GAUGE(e, "stoker_cache_budget_bytes", "Bytes the node cache may hold.", cache_budget(cache));
	GAUGE(e, "stoker_cache_bytes", "Bytes the node cache holds, entries and overhead.", cache_bytes(cache));
	for (int t = 0; t < CACHE_TIERS; t++)
		cache_stats(cache, (enum cache_tier)t, &ts[t]);
#define TIER_FAMILY(name, type, help, field)                                  \
	do {                                                                   \
		family(e, name, type, help);                                   \
		for (int t = 0; t < CACHE_TIERS; t++) {                        \
			snprintf(labels, sizeof(labels), "tier=\"%s\"", tiers[t]); \
			sample(e, name, labels, (double)ts[t].field);          \
		}                                                              \
	} while (0)
	TIER_FAMILY("stoker_cache_hits_total", "counter", "Cache look-ups that found the sample.", hits);
	TIER_FAMILY("stoker_cache_misses_total", "counter", "Cache look-ups that did not.", misses);
	TIER_FAMILY("stoker_cache_evictions_total", "counter", "Entries evicted to make room.", evictions);
	TIER_FAMILY("stoker_cache_rejected_total", "counter", "Entries offered but not admitted.", rejected);
	TIER_FAMILY("stoker_cache_entries", "gauge", "Entries in the cache tier.", entries);
	TIER_FAMILY("stoker_cache_tier_bytes", "gauge", "Bytes of the cache tier's entries.", bytes);
#undef TIER_FAMILY
}

int metrics_render(struct daemon *d, char **out, size_t *len)
{
	struct expo e = {0};
	struct timespec real;
	double ips, busy, start;
	uint32_t clients = control_attached(d);

	clock_gettime(CLOCK_REALTIME, &real);
	start = (double)real.tv_sec + (double)real.tv_nsec / 1e9 - (double)(monotonic_ns() - d->start_ns) / 1e9;
	control_rates(d, &ips, &busy);

	family(&e, "stoker_build_info", "gauge", "The stokerd version, as a label.");
	put(&e, "stoker_build_info{version=\"%s\"} 1\n", STOKER_VERSION);
	GAUGE(&e, "process_start_time_seconds", "Start time of the process since the Unix epoch in seconds.", start);
	GAUGE(&e, "process_resident_memory_bytes", "Resident memory size in bytes.", control_rss_bytes());
	GAUGE(&e, "stoker_draining", "1 while draining or stopping: no new clients.", d->draining || d->stopping);
	COUNTER(&e, "stoker_images_served_total", "Images delivered to clients.", d->images_served);
	COUNTER(&e, "stoker_batches_served_total", "Batches delivered to clients.", d->batches_served);
	COUNTER(&e, "stoker_decode_errors_total", "Samples that could not be read or decoded (each replaced).",
		d->pool ? pool_decode_errors(d->pool) : 0);
	COUNTER(&e, "stoker_decode_error_files_total",
		"Distinct files found unreadable (each once per opening of its data set).",
		d->pool ? pool_decode_error_files(d->pool) : 0);
	COUNTER(&e, "stoker_protocol_errors_total", "Clients cut off for breaking the protocol.", d->protocol_errors);
	COUNTER(&e, "stoker_samples_decoded_total", "Samples decoded by the workers.",
		d->pool ? pool_samples_decoded(d->pool) : 0);
	COUNTER(&e, "stoker_samples_copied_total", "Samples copied from a coordinated job's ring instead of decoded.",
		d->pool ? pool_samples_copied(d->pool) : 0);
	COUNTER(&e, "stoker_label_errors_total", "Objects dropped from detection label files (malformed or out of range).",
		d->label_errors);
	COUNTER(&e, "stoker_boxes_dropped_total", "Boxes left out of a batch: an image had more than its max_boxes.",
		d->pool ? pool_boxes_dropped(d->pool) : 0);
	if (d->fetch && d->prefetch) {
		struct fetch_stats fs;
		uint64_t hits, fetched, coalesced;

		fetch_get_stats(d->fetch, &fs);
		prefetch_counts(d->prefetch, &hits, &fetched, &coalesced);
		COUNTER(&e, "stoker_net_requests_total", "HTTP/S3 transfers started, retries included.", fs.requests);
		COUNTER(&e, "stoker_net_bytes_total", "HTTP/S3 body bytes received.", fs.bytes);
		COUNTER(&e, "stoker_net_retries_total", "HTTP/S3 transfers retried after a 5xx, a timeout or a lost "
			"connection.", fs.retries);
		COUNTER(&e, "stoker_net_errors_total", "HTTP/S3 requests that failed after their retries.", fs.errors);
		GAUGE(&e, "stoker_net_inflight", "HTTP/S3 transfers running.", fs.inflight);
		COUNTER(&e, "stoker_remote_cache_hits_total", "Remote samples found in the node cache (not fetched).",
			hits);
		COUNTER(&e, "stoker_remote_fetched_total", "Remote samples fetched from their store.", fetched);
		COUNTER(&e, "stoker_remote_coalesced_total", "Remote samples that shared a fetch of the same object "
			"already in flight.", coalesced);
	}
	COUNTER(&e, "stoker_worker_busy_seconds_total", "Time the workers spent producing samples, all summed.",
		d->pool ? (double)pool_busy_ns(d->pool) / 1e9 : 0);
	GAUGE(&e, "stoker_workers", "Worker threads configured.", d->pool ? pool_workers(d->pool) : 0);
	GAUGE(&e, "stoker_worker_threads", "Worker threads running (above stoker_workers while shrinking).",
	      d->pool ? pool_threads(d->pool) : 0);
	GAUGE(&e, "stoker_worker_busy_ratio", "Share of worker time spent busy over the last seconds.", busy);
	GAUGE(&e, "stoker_images_per_second", "Images delivered per second over the last seconds.", ips);
	GAUGE(&e, "stoker_clients", "Clients attached to a data set.", clients);
	GAUGE(&e, "stoker_connections", "Open connections, attached or not.", d->nconns);
	GAUGE(&e, "stoker_ring_bytes", "Shared memory in every client's batch ring.", d->ring_bytes);
	GAUGE(&e, "stoker_memory_budget_bytes", "The node's budget for the cache and every ring.",
	      d->cfg.memory_budget);
	GAUGE(&e, "stoker_device_bytes", "GPU memory in every CUDA client's device ring, all GPUs.", d->device_bytes);
	GAUGE(&e, "stoker_gpu_memory_budget_bytes", "Each GPU's budget for device rings (0: its free memory).",
	      d->cfg.gpu_memory_budget);
	if (d->cache)
		render_cache(&e, d->cache);
	client_family(&e, d, "stoker_client_images_total", "counter", "Images delivered to the client.",
		      client_images);
	client_family(&e, d, "stoker_client_batches_total", "counter", "Batches delivered to the client.",
		      client_batches);
	client_family(&e, d, "stoker_client_wait_seconds_total", "counter",
		      "Time the client spent waiting for batches (its data stall).", client_wait);
	client_family(&e, d, "stoker_client_ring_bytes", "gauge", "Shared memory in the client's batch ring.",
		      client_ring);
	client_family(&e, d, "stoker_client_device_bytes", "gauge",
		      "GPU memory in the client's device ring (0: host batches).", client_device);
	client_family(&e, d, "stoker_client_unreadable_samples_total", "counter",
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

/* ---- lifetime ---- */

static void metrics_put(struct metrics *m)
{
	if (--m->refs == 0 && m->stopped) {
		m->d->metrics = NULL;
		free(m);
	}
}

static void on_handle_closed(uv_handle_t *h)
{
	metrics_put(h->data);
}

/* ---- the textfile ---- */

/* Thread pool: write a temporary file beside the target, then rename it
 * over the target, so the collector never reads half a file. */
static void textfile_write(uv_work_t *w)
{
	struct textfile_job *j = w->data;
	char tmp[PATH_MAX + 32], *slash;
	size_t off = 0;
	int fd;

	slash = strrchr(j->path, '/');
	if (!slash || snprintf(tmp, sizeof(tmp), "%.*s/.%s.%d.tmp", (int)(slash - j->path), j->path, slash + 1,
			       (int)getpid()) >= (int)sizeof(tmp)) {
		j->err = -ENAMETOOLONG;
		return;
	}
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0) {
		j->err = -errno;
		return;
	}
	/* Readable by the collector whatever the umask (the unit's is 0077). */
	if (fchmod(fd, 0644) < 0)
		j->err = -errno;
	while (off < j->len) {
		ssize_t n = write(fd, j->text + off, j->len - off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			j->err = -errno;
			break;
		}
		off += (size_t)n;
	}
	if (close(fd) < 0 && j->err == 0)
		j->err = -errno;
	if (j->err == 0 && rename(tmp, j->path) < 0)
		j->err = -errno;
	if (j->err < 0)
		unlink(tmp);
}

static void textfile_written(uv_work_t *w, int status)
{
	struct textfile_job *j = w->data;
	struct metrics *m = j->m;

	m->writing = false;
	if (j->err != m->last_err) {
		if (j->err < 0)
			log_warning("metrics_textfile %s: %s", j->path, strerror(-j->err));
		else
			log_info("metrics_textfile %s: written again", j->path);
		m->last_err = j->err;
	}
	free(j->text);
	free(j);
	metrics_put(m);
}

static void on_textfile_timer(uv_timer_t *t)
{
	struct metrics *m = t->data;
	struct textfile_job *j;
	int r;

	if (m->writing || !m->textfile[0])
		return; /* a slow disk: skip a round rather than queue them */
	j = calloc(1, sizeof(*j));
	if (!j)
		return;
	if (metrics_render(m->d, &j->text, &j->len) < 0) {
		free(j);
		return;
	}
	j->m = m;
	j->work.data = j;
	snprintf(j->path, sizeof(j->path), "%s", m->textfile);
	r = uv_queue_work(m->d->loop, &j->work, textfile_write, textfile_written);
	if (r < 0) {
		free(j->text);
		free(j);
		return;
	}
	m->writing = true;
	m->refs++;
}

/* ---- HTTP /metrics on loopback ---- */

/* The connection's two handles each close; the last frees it. */
static void http_on_closed(uv_handle_t *handle)
{
	struct http_conn *h = handle->data;
	struct metrics *m = h->m;

	if (--h->open_handles > 0)
		return;
	free(h->resp);
	free(h);
	metrics_put(m);
}

static void http_close(struct http_conn *h)
{
	struct metrics *m = h->m;

	if (h->closing)
		return;
	h->closing = true;
	if (h->prev)
		h->prev->next = h->next;
	else
		m->http = h->next;
	if (h->next)
		h->next->prev = h->prev;
	m->nhttp--;
	uv_close((uv_handle_t *)&h->tcp, http_on_closed);
	uv_close((uv_handle_t *)&h->timer, http_on_closed);
}

static void http_on_written(uv_write_t *w, int status)
{
	http_close(w->data);
}

static void http_respond(struct http_conn *h, const char *status, const char *type, const char *body, size_t len,
			 bool head)
{
	char hdr[256];
	int n = snprintf(hdr, sizeof(hdr),
			 "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n", status,
			 type, len);
	uv_buf_t buf;

	uv_read_stop((uv_stream_t *)&h->tcp);
	h->resp = malloc((size_t)n + (head ? 0 : len));
	if (!h->resp) {
		http_close(h);
		return;
	}
	memcpy(h->resp, hdr, (size_t)n);
	if (!head)
		memcpy(h->resp + n, body, len);
	buf = uv_buf_init(h->resp, (unsigned)((size_t)n + (head ? 0 : len)));
	h->write.data = h;
	if (uv_write(&h->write, (uv_stream_t *)&h->tcp, &buf, 1, http_on_written) < 0)
		http_close(h);
}

static void http_handle(struct http_conn *h)
{
	static const char text_type[] = "text/plain; version=0.0.4; charset=utf-8";
	char method[8] = "", path[256] = "";
	char *body = NULL;
	size_t len = 0;
	bool head;

	h->req[h->len < sizeof(h->req) ? h->len : sizeof(h->req) - 1] = '\0';
	if (sscanf(h->req, "%7s %255s", method, path) != 2) {
		http_respond(h, "400 Bad Request", "text/plain", "bad request\n", 12, false);
		return;
	}
	head = strcmp(method, "HEAD") == 0;
	if (!head && strcmp(method, "GET") != 0) {
		http_respond(h, "405 Method Not Allowed", "text/plain", "GET only\n", 9, false);
		return;
	}
	path[strcspn(path, "?")] = '\0';
	if (strcmp(path, "/metrics") != 0) {
		http_respond(h, "404 Not Found", "text/plain", "try /metrics\n", 13, head);
		return;
	}
	if (metrics_render(h->m->d, &body, &len) < 0) {
		http_respond(h, "500 Internal Server Error", "text/plain", "out of memory\n", 14, head);
		return;
	}
	http_respond(h, "200 OK", text_type, body, len, head);
	free(body);
}

static void http_alloc(uv_handle_t *handle, size_t suggested, uv_buf_t *buf)
{
	struct http_conn *h = handle->data;

	*buf = uv_buf_init(h->req + h->len, (unsigned)(sizeof(h->req) - 1 - h->len));
}

static void http_on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
	struct http_conn *h = s->data;

	if (n < 0) {
		http_close(h);
		return;
	}
	h->len += (size_t)n;
	h->req[h->len] = '\0';
	if (strstr(h->req, "\r\n\r\n") || strstr(h->req, "\n\n")) {
		http_handle(h);
		return;
	}
	if (h->len >= sizeof(h->req) - 1)
		http_respond(h, "431 Request Header Fields Too Large", "text/plain", "request too large\n", 18, false);
}

static void http_on_timeout(uv_timer_t *t)
{
	http_close(t->data);
}

static void http_on_connection(uv_stream_t *server, int status)
{
	struct metrics *m = server->data;
	struct http_conn *h;

	if (status < 0)
		return;
	h = calloc(1, sizeof(*h));
	if (!h)
		return;
	h->m = m;
	uv_tcp_init(m->d->loop, &h->tcp);
	uv_timer_init(m->d->loop, &h->timer);
	h->tcp.data = h->timer.data = h;
	h->open_handles = 2;
	m->refs++;
	if (uv_accept(server, (uv_stream_t *)&h->tcp) < 0 || m->nhttp >= HTTP_MAX_CONNS) {
		/* Over the limit: hang up at once. */
		h->closing = true;
		uv_close((uv_handle_t *)&h->tcp, http_on_closed);
		uv_close((uv_handle_t *)&h->timer, http_on_closed);
		return;
	}
	h->next = m->http;
	if (m->http)
		m->http->prev = h;
	m->http = h;
	m->nhttp++;
	uv_timer_start(&h->timer, http_on_timeout, HTTP_TIMEOUT_MS, 0);
	uv_read_start((uv_stream_t *)&h->tcp, http_alloc, http_on_read);
}

static int http_listen(struct metrics *m, const char *spec)
{
	struct sockaddr_storage ss;
	char host[64];
	const char *colon = strrchr(spec, ':');
	int port, r;

	/* config_validate checked the form: HOST:PORT or [HOST6]:PORT. */
	snprintf(host, sizeof(host), "%.*s", (int)(colon - spec), spec);
	port = atoi(colon + 1);
	if (host[0] == '[') {
		host[strlen(host) - 1] = '\0';
		r = uv_ip6_addr(host + 1, port, (struct sockaddr_in6 *)&ss);
	} else {
		r = uv_ip4_addr(host, port, (struct sockaddr_in *)&ss);
	}
	if (r < 0)
		return r;
	uv_tcp_init(m->d->loop, &m->listener);
	m->listener.data = m;
	m->refs++;
	m->listening = true;
	r = uv_tcp_bind(&m->listener, (const struct sockaddr *)&ss, 0);
	if (r == 0)
		r = uv_listen((uv_stream_t *)&m->listener, 16, http_on_connection);
	return r;
}

/* ---- control ---- */

void metrics_reconfigure(struct daemon *d)
{
	struct metrics *m = d->metrics;

	if (!m || m->stopped)
		return;
	if (strcmp(m->textfile, d->cfg.metrics_textfile) == 0 && m->interval_ms == d->cfg.metrics_interval_ms)
		return;
	snprintf(m->textfile, sizeof(m->textfile), "%s", d->cfg.metrics_textfile);
	m->interval_ms = d->cfg.metrics_interval_ms;
	m->last_err = 0;
	uv_timer_stop(&m->timer);
	if (m->textfile[0])
		uv_timer_start(&m->timer, on_textfile_timer, 0, m->interval_ms);
}

int metrics_start(struct daemon *d)
{
	struct metrics *m = calloc(1, sizeof(*m));
	int r;

	if (!m)
		return -ENOMEM;
	m->d = d;
	d->metrics = m;
	uv_timer_init(d->loop, &m->timer);
	m->timer.data = m;
	m->timer_open = true;
	m->refs++;
	metrics_reconfigure(d);
	if (d->cfg.metrics_textfile[0])
		log_info("metrics: writing %s every %u ms", d->cfg.metrics_textfile, d->cfg.metrics_interval_ms);
	if (d->cfg.metrics_listen[0]) {
		r = http_listen(m, d->cfg.metrics_listen);
		if (r < 0) {
			log_error("metrics_listen %s: %s", d->cfg.metrics_listen, uv_strerror(r));
			return -EADDRNOTAVAIL;
		}
		log_info("metrics: serving http://%s/metrics", d->cfg.metrics_listen);
	}
	return 0;
}

void metrics_stop(struct daemon *d)
{
	struct metrics *m = d->metrics;

	if (!m || m->stopped)
		return;
	m->stopped = true;
	while (m->http)
		http_close(m->http);
	if (m->listening)
		uv_close((uv_handle_t *)&m->listener, on_handle_closed);
	if (m->timer_open)
		uv_close((uv_handle_t *)&m->timer, on_handle_closed);
}
