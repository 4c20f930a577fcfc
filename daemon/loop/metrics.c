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
 * The text is exposition.c's, of a snapshot metrics_render takes here: a
 * metric is a field of struct expo_snapshot, filled below, and one line
 * there.
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
#include "exposition.h"
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
	bool writing; /* a textfile job is on the thread pool */
	int last_err; /* logged once until it changes */
	uv_tcp_t listener;
	bool listening;
	struct http_conn *http;
	uint32_t nhttp;
	uint32_t refs; /* open handles and jobs; freed at 0 once stopped */
	bool stopped;
};

/* ---- the snapshot ---- */

int metrics_render(struct daemon *d, char **out, size_t *len)
{
	struct expo_snapshot s = {0};
	struct expo_client *cl = NULL;
	struct timespec real;
	int r;

	clock_gettime(CLOCK_REALTIME, &real);
	s.version = STOKER_VERSION;
	s.start_time_seconds =
		(double)real.tv_sec + (double)real.tv_nsec / 1e9 - (double)(monotonic_ns() - d->start_ns) / 1e9;
	control_rates(d, &s.images_per_second, &s.worker_busy_ratio);
	s.rss_bytes = control_rss_bytes();
	s.draining = d->draining || d->stopping;
	s.images_served = d->images_served;
	s.batches_served = d->batches_served;
	s.protocol_errors = d->protocol_errors;
	s.label_errors = d->label_errors;
	if (d->pool) {
		s.decode_errors = pool_decode_errors(d->pool);
		s.decode_error_files = pool_decode_error_files(d->pool);
		s.samples_decoded = pool_samples_decoded(d->pool);
		s.samples_copied = pool_samples_copied(d->pool);
		s.boxes_dropped = pool_boxes_dropped(d->pool);
		s.worker_busy_ns = pool_busy_ns(d->pool);
		s.workers = pool_workers(d->pool);
		s.worker_threads = pool_threads(d->pool);
	}
	if (d->fetch && d->prefetch) {
		s.net = true;
		fetch_get_stats(d->fetch, &s.fetch);
		prefetch_counts(d->prefetch, &s.remote_cache_hits, &s.remote_fetched, &s.remote_coalesced);
	}
	s.clients = control_attached(d);
	s.connections = d->nconns;
	s.ring_bytes = d->ring_bytes;
	s.memory_budget = d->cfg.memory_budget;
	s.device_bytes = d->device_bytes;
	s.gpu_memory_budget = d->cfg.gpu_memory_budget;
	if (d->cache) {
		s.cache = true;
		s.cache_budget = cache_budget(d->cache);
		s.cache_bytes = cache_bytes(d->cache);
		for (int t = 0; t < CACHE_TIERS; t++)
			cache_stats(d->cache, (enum cache_tier)t, &s.tiers[t]);
	}
	if (d->nconns) {
		cl = calloc(d->nconns, sizeof(*cl));
		if (!cl)
			return -ENOMEM;
	}
	for (const struct conn *c = d->conns; c && s.nclients < d->nconns; c = c->next) {
		const struct session *ss = c->session;

		if (!ss)
			continue;
		cl[s.nclients++] = (struct expo_client){
			.id = c->id,
			.pid = (int)c->pid,
			.rank = ss->plan.rank,
			.world_size = ss->plan.world_size,
			.dataset = ss->dataset_name,
			.images = ss->images,
			.batches = ss->batches,
			.wait_ns = ss->wait_ns,
			.ring_bytes = ss->ring->bytes,
			.device_bytes = ss->device_bytes,
			.unreadable = ss->unreadable,
		};
	}
	s.clients_v = cl;
	r = expo_render(&s, out, len);
	free(cl);
	return r;
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
