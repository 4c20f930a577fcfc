/* SPDX-License-Identifier: MIT */
#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "fetch.h"
#include "grow.h"

/* An HTTP error's body is kept up to this, for its message (S3's XML). */
#define FETCH_ERROR_BODY_MAX (16u << 10)
/* SHA-256 of nothing. */
#define EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

struct fetch {
	struct fetch_settings s;
	CURLM *multi;
	pthread_t thread;
	bool thread_started;
	/* Submitted requests, FIFO; guarded by lock. */
	pthread_mutex_t lock;
	struct fetch_req *queue_head, *queue_tail;
	bool stopping;
	bool stopped; /* the thread is gone: submissions are cancelled at once */
	/* I/O thread only: requests waiting for a slot (FIFO) or their retry. */
	struct fetch_req *ready_head, *ready_tail;
	struct fetch_req *delayed; /* unsorted; few */
	struct fetch_req *active;  /* transfers running, linked by next */
	CURL **idle;               /* easy handles to reuse; max_inflight slots:
				    * a handle is either running or idle */
	uint32_t nidle, running;
	uint64_t rng;
	_Atomic uint64_t requests, bytes, retries, errors, inflight;
};

/* fetch_sync's waiter. */
struct sync_wait {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done;
};

/* xorshift64*: jitter only, not security. */
static uint64_t next_random(struct fetch *f)
{
	f->rng ^= f->rng >> 12;
	f->rng ^= f->rng << 25;
	f->rng ^= f->rng >> 27;
	return f->rng * 0x2545F4914F6CDD1Dull;
}

bool fetch_error_transient(int err)
{
	switch (err) {
	case -ETIMEDOUT:
	case -ECONNREFUSED:
	case -ECONNRESET:
	case -EHOSTUNREACH:
	case -ENETUNREACH:
	case -EREMOTEIO:
	case -EPROTO:
	case -ECANCELED: return true;
	default: return false;
	}
}

const char *fetch_strerror(int err)
{
	switch (err) {
	case -ENOENT: return "not found (HTTP 404)";
	case -EACCES: return "access denied (HTTP 401/403)";
	case -ETIMEDOUT: return "timed out (no connection or no byte) after every retry";
	case -ECONNREFUSED: return "connection refused after every retry";
	case -ECONNRESET: return "connection lost after every retry";
	case -EHOSTUNREACH: return "host not found or unreachable after every retry";
	case -EREMOTEIO: return "an error answer (5xx, 408, 429 or another) after every retry";
	case -EPROTO: return "a truncated or malformed answer after every retry";
	case -EFBIG: return "larger than max_file_bytes";
	case -ECANCELED: return "cancelled: the daemon is stopping";
	default: return strerror(-err);
	}
}

static size_t on_body(char *ptr, size_t size, size_t nmemb, void *arg)
{
	struct fetch_req *r = arg;
	size_t n = size * nmemb;
	long status = 0;
	uint64_t limit;

	curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
	/* An error answer's body is only read for its message. */
	limit = status >= 300 ? FETCH_ERROR_BODY_MAX : r->owner->s.max_bytes;
	/* A range answered whole would be the object's every byte. */
	if (r->length && status < 300 && r->length < limit)
		limit = r->length;
	if (r->len + n > limit) {
		if (status >= 300) /* keep what fits: the message is at the start */
			n = limit > r->len ? (size_t)(limit - r->len) : 0;
		else
			return 0; /* CURLE_WRITE_ERROR: -EFBIG */
	}
	if (n && grow((void **)&r->data, &r->cap, r->len + n + 1, 1) < 0)
		return 0;
	memcpy(r->data + r->len, ptr, n);
	r->len += n;
	return size * nmemb;
}

/* curl (7.88) opens its sockets without SOCK_CLOEXEC. */
static curl_socket_t open_socket(void *arg, curlsocktype purpose, struct curl_sockaddr *a)
{
	(void)arg;
	(void)purpose;
	return socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
}

static int request_start(struct fetch *f, struct fetch_req *r)
{
	struct curl_slist *headers = NULL;
	char range[64];
	CURL *e;

	e = f->nidle ? f->idle[--f->nidle] : curl_easy_init();
	if (!e)
		return -ENOMEM;
	curl_easy_reset(e);
	r->len = 0;
	r->status = 0;
	r->easy = e;
	curl_easy_setopt(e, CURLOPT_URL, r->url);
	curl_easy_setopt(e, CURLOPT_PRIVATE, r);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, open_socket);
	curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
	r->owner = f;
	r->message[0] = '\0';
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, r->message);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)f->s.connect_timeout_ms);
	/* Below 1 byte/s for the stall time: CURLE_OPERATION_TIMEDOUT. */
	curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, (long)((f->s.stall_timeout_ms + 999) / 1000));
	curl_easy_setopt(e, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)f->s.max_bytes);
	curl_easy_setopt(e, CURLOPT_ACCEPT_ENCODING, NULL); /* bytes as stored */
	if (r->head) {
		curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
		curl_easy_setopt(e, CURLOPT_FILETIME, 1L);
	}
	if (r->length) {
		snprintf(range, sizeof(range), "%llu-%llu", (unsigned long long)r->offset,
			 (unsigned long long)(r->offset + r->length - 1));
		curl_easy_setopt(e, CURLOPT_RANGE, range);
	}
	if (r->auth) {
		curl_easy_setopt(e, CURLOPT_AWS_SIGV4, r->auth->sigv4);
		curl_easy_setopt(e, CURLOPT_USERPWD, r->auth->userpwd);
		/* S3 wants the payload's hash, which curl 7.88 does not send for
		 * us: a GET's empty body. curl signs the headers it is given. */
		headers = curl_slist_append(NULL, "x-amz-content-sha256: " EMPTY_SHA256);
		if (!headers)
			goto nomem;
		if (r->auth->token[0]) {
			char h[sizeof(r->auth->token) + 32];
			struct curl_slist *more;

			snprintf(h, sizeof(h), "X-Amz-Security-Token: %s", r->auth->token);
			more = curl_slist_append(headers, h);
			if (!more)
				goto nomem;
			headers = more;
		}
		curl_easy_setopt(e, CURLOPT_HTTPHEADER, headers);
	}
	r->headers = headers; /* must outlive the transfer */
	if (curl_multi_add_handle(f->multi, e) != CURLM_OK)
		goto nomem;
	r->next = f->active;
	f->active = r;
	f->running++;
	atomic_fetch_add_explicit(&f->requests, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&f->inflight, 1, memory_order_relaxed);
	return 0;
nomem:
	curl_slist_free_all(headers);
	curl_easy_cleanup(e);
	r->easy = NULL;
	return -ENOMEM;
}

/* Map a finished transfer to an errno, with a message. */
static int transfer_error(struct fetch_req *r, CURLcode code)
{
	if (code == CURLE_OK) {
		if (r->length && r->len != r->length) {
			snprintf(r->message, sizeof(r->message), "HTTP %ld: %zu bytes for a range of %llu", r->status,
				 r->len, (unsigned long long)r->length);
			return -EPROTO;
		}
		if (r->status == 206 && r->length)
			return 0;
		if (r->status == 200 && (!r->length || r->offset == 0))
			return 0;
		snprintf(r->message, sizeof(r->message), "HTTP %ld", r->status);
		return fetch_status_error(r->status);
	}
	if (!r->message[0]) /* else curl's own, more precise line */
		snprintf(r->message, sizeof(r->message), "%s", curl_easy_strerror(code));
	switch (code) {
	case CURLE_OPERATION_TIMEDOUT: return -ETIMEDOUT;
	case CURLE_COULDNT_CONNECT: return -ECONNREFUSED;
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY: return -EHOSTUNREACH;
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_GOT_NOTHING: return -ECONNRESET;
	case CURLE_PARTIAL_FILE:
	case CURLE_WEIRD_SERVER_REPLY:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM: return -EPROTO;
	case CURLE_WRITE_ERROR:
	case CURLE_FILESIZE_EXCEEDED: return -EFBIG;
	case CURLE_OUT_OF_MEMORY: return -ENOMEM;
	case CURLE_URL_MALFORMAT:
	case CURLE_UNSUPPORTED_PROTOCOL: return -EINVAL;
	default: return -EREMOTEIO;
	}
}

bool fetch_retryable(int err, long status)
{
	if (err == -EREMOTEIO)
		return status == 0 || status >= 500 || status == 408 || status == 429;
	return err == -ETIMEDOUT || err == -ECONNREFUSED || err == -ECONNRESET || err == -EPROTO ||
	       err == -EHOSTUNREACH;
}

int fetch_status_error(long status)
{
	switch (status) {
	case 404: return -ENOENT;
	case 401:
	case 403: return -EACCES;
	case 416: return -ERANGE;
	default: return -EREMOTEIO;
	}
}

uint64_t fetch_backoff_ms(const struct fetch_settings *s, uint32_t attempt, uint64_t rnd)
{
	uint64_t bound = (uint64_t)s->backoff_ms << (attempt < 20 ? attempt : 20);

	if (bound > s->backoff_max_ms)
		bound = s->backoff_max_ms;
	return bound / 2 + rnd % (bound / 2 + 1);
}

static void complete(struct fetch *f, struct fetch_req *r, int err)
{
	r->err = err;
	r->next = NULL;
	if (err < 0)
		atomic_fetch_add_explicit(&f->errors, 1, memory_order_relaxed);
	if (err == 0)
		r->message[0] = '\0';
	r->done(r);
}

static void ready_push(struct fetch *f, struct fetch_req *r)
{
	r->next = NULL;
	if (f->ready_tail)
		f->ready_tail->next = r;
	else
		f->ready_head = r;
	f->ready_tail = r;
}

static void request_finish(struct fetch *f, CURL *e, CURLcode code)
{
	char *priv = NULL;
	struct fetch_req *r;
	int err;

	curl_easy_getinfo(e, CURLINFO_PRIVATE, &priv);
	r = (struct fetch_req *)(void *)priv;
	for (struct fetch_req **pp = &f->active; *pp; pp = &(*pp)->next) {
		if (*pp == r) {
			*pp = r->next;
			break;
		}
	}
	curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &r->status);
	if (r->head) {
		curl_off_t size = -1, time = -1;

		curl_easy_getinfo(e, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &size);
		curl_easy_getinfo(e, CURLINFO_FILETIME_T, &time);
		r->object_size = size;
		r->object_time = time;
	}
	curl_multi_remove_handle(f->multi, e);
	f->running--;
	atomic_fetch_sub_explicit(&f->inflight, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&f->bytes, r->len, memory_order_relaxed);
	curl_slist_free_all(r->headers);
	r->headers = NULL;
	err = transfer_error(r, code);
	r->easy = NULL;
	/* Keep the handle for the next transfer. */
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, NULL);
	f->idle[f->nidle++] = e;
	if (err < 0 && fetch_retryable(err, r->status) && r->attempt < f->s.retries) {
		uint64_t delay_ms = fetch_backoff_ms(&f->s, r->attempt, next_random(f));

		r->attempt++;
		r->due_ns = monotonic_ns() + delay_ms * 1000000ull;
		r->next = f->delayed;
		f->delayed = r;
		atomic_fetch_add_explicit(&f->retries, 1, memory_order_relaxed);
		return;
	}
	complete(f, r, err);
}

/* Move due retries to the ready queue; the wait until the next one (ms). */
static long promote_due(struct fetch *f)
{
	uint64_t now = monotonic_ns(), next = UINT64_MAX;
	struct fetch_req **pp = &f->delayed;

	while (*pp) {
		struct fetch_req *r = *pp;

		if (r->due_ns <= now) {
			*pp = r->next;
			ready_push(f, r);
			continue;
		}
		if (r->due_ns < next)
			next = r->due_ns;
		pp = &r->next;
	}
	if (next == UINT64_MAX)
		return 1000;
	return (long)((next - now) / 1000000ull) + 1;
}

static void start_ready(struct fetch *f)
{
	while (f->ready_head && f->running < f->s.max_inflight) {
		struct fetch_req *r = f->ready_head;

		f->ready_head = r->next;
		if (!f->ready_head)
			f->ready_tail = NULL;
		if (request_start(f, r) < 0)
			complete(f, r, -ENOMEM);
	}
}

static void cancel_list(struct fetch *f, struct fetch_req *r)
{
	while (r) {
		struct fetch_req *next = r->next;

		snprintf(r->message, sizeof(r->message), "the daemon is stopping");
		complete(f, r, -ECANCELED);
		r = next;
	}
}

static void *io_main(void *arg)
{
	struct fetch *f = arg;
	bool stopping = false;

	while (!stopping) {
		struct fetch_req *in;
		CURLMsg *m;
		int left, running;
		long wait_ms;

		pthread_mutex_lock(&f->lock);
		in = f->queue_head;
		f->queue_head = f->queue_tail = NULL;
		stopping = f->stopping;
		pthread_mutex_unlock(&f->lock);
		while (in) {
			struct fetch_req *next = in->next;

			ready_push(f, in);
			in = next;
		}
		if (stopping)
			break;
		wait_ms = promote_due(f);
		start_ready(f);
		curl_multi_perform(f->multi, &running);
		while ((m = curl_multi_info_read(f->multi, &left)))
			if (m->msg == CURLMSG_DONE)
				request_finish(f, m->easy_handle, m->data.result);
		/* Finished ones free slots: start more before sleeping. */
		if (f->ready_head && f->running < f->s.max_inflight)
			continue;
		curl_multi_poll(f->multi, NULL, 0, (int)(wait_ms < 1000 ? wait_ms : 1000), NULL);
	}
	/* Stopping: everything not finished is cancelled. */
	for (CURL **e = f->idle; e < f->idle + f->nidle; e++)
		curl_easy_cleanup(*e);
	f->nidle = 0;
	for (struct fetch_req *r = f->active; r; r = r->next) {
		curl_multi_remove_handle(f->multi, r->easy);
		curl_easy_cleanup(r->easy);
		curl_slist_free_all(r->headers);
		r->headers = NULL;
		r->easy = NULL;
	}
	cancel_list(f, f->active);
	f->active = NULL;
	cancel_list(f, f->ready_head);
	cancel_list(f, f->delayed);
	f->ready_head = f->ready_tail = f->delayed = NULL;
	return NULL;
}

int fetch_new(const struct fetch_settings *s, struct fetch **out)
{
	struct fetch *f;
	int r;

	if (s->max_inflight == 0)
		return -EINVAL;
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->s = *s;
	pthread_mutex_init(&f->lock, NULL);
	f->idle = calloc(s->max_inflight, sizeof(*f->idle));
	if (!f->idle) {
		r = -ENOMEM;
		goto fail;
	}
	f->rng = monotonic_ns() ^ ((uint64_t)getpid() << 32) ^ 0x9E3779B97F4A7C15ull;
	/* Process-wide, and not thread-safe: the daemon makes one fetch at
	 * start-up, before any other thread calls curl. */
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		r = -ENOMEM;
		goto fail;
	}
	f->multi = curl_multi_init();
	if (!f->multi) {
		r = -ENOMEM;
		goto fail;
	}
	curl_multi_setopt(f->multi, CURLMOPT_MAX_TOTAL_CONNECTIONS, (long)s->max_inflight);
	curl_multi_setopt(f->multi, CURLMOPT_MAXCONNECTS, (long)s->max_inflight);
	r = -pthread_create(&f->thread, NULL, io_main, f);
	if (r < 0)
		goto fail;
	f->thread_started = true;
	*out = f;
	return 0;
fail:
	fetch_free(f);
	return r;
}

void fetch_stop(struct fetch *f)
{
	struct fetch_req *late;

	if (!f)
		return;
	pthread_mutex_lock(&f->lock);
	if (f->stopped || !f->thread_started) {
		pthread_mutex_unlock(&f->lock);
		return;
	}
	f->stopping = true;
	pthread_mutex_unlock(&f->lock);
	curl_multi_wakeup(f->multi);
	pthread_join(f->thread, NULL);
	pthread_mutex_lock(&f->lock);
	f->stopped = true;
	late = f->queue_head; /* submitted after the thread's last look */
	f->queue_head = f->queue_tail = NULL;
	pthread_mutex_unlock(&f->lock);
	cancel_list(f, late);
}

void fetch_free(struct fetch *f)
{
	if (!f)
		return;
	fetch_stop(f);
	if (f->multi)
		curl_multi_cleanup(f->multi);
	free(f->idle);
	pthread_mutex_destroy(&f->lock);
	free(f);
	curl_global_cleanup();
}

void fetch_submit(struct fetch *f, struct fetch_req *r)
{
	r->next = NULL;
	r->attempt = 0;
	r->err = 0;
	r->status = 0;
	r->len = 0;
	r->message[0] = '\0';
	pthread_mutex_lock(&f->lock);
	if (f->stopped) {
		pthread_mutex_unlock(&f->lock);
		snprintf(r->message, sizeof(r->message), "the daemon is stopping");
		complete(f, r, -ECANCELED);
		return;
	}
	if (f->queue_tail)
		f->queue_tail->next = r;
	else
		f->queue_head = r;
	f->queue_tail = r;
	pthread_mutex_unlock(&f->lock);
	curl_multi_wakeup(f->multi);
}

static void sync_done(struct fetch_req *r)
{
	struct sync_wait *w = r->ctx;

	pthread_mutex_lock(&w->lock);
	w->done = true;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
}

int fetch_sync(struct fetch *f, struct fetch_req *r)
{
	struct sync_wait w = {.done = false};

	pthread_mutex_init(&w.lock, NULL);
	pthread_cond_init(&w.cond, NULL);
	r->done = sync_done;
	r->ctx = &w;
	fetch_submit(f, r);
	pthread_mutex_lock(&w.lock);
	while (!w.done)
		pthread_cond_wait(&w.cond, &w.lock);
	pthread_mutex_unlock(&w.lock);
	pthread_cond_destroy(&w.cond);
	pthread_mutex_destroy(&w.lock);
	return r->err;
}

void fetch_get_stats(struct fetch *f, struct fetch_stats *out)
{
	out->requests = atomic_load_explicit(&f->requests, memory_order_relaxed);
	out->bytes = atomic_load_explicit(&f->bytes, memory_order_relaxed);
	out->retries = atomic_load_explicit(&f->retries, memory_order_relaxed);
	out->errors = atomic_load_explicit(&f->errors, memory_order_relaxed);
	out->inflight = atomic_load_explicit(&f->inflight, memory_order_relaxed);
}
