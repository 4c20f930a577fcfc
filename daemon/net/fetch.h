/* SPDX-License-Identifier: MIT */
/*
 * Objects over HTTP(S), S3 included: libcurl on one I/O thread.
 *
 * The thread owns one curl multi handle (one connection cache, so
 * connections to a host are reused) and runs every transfer; nothing else
 * calls curl on these handles. Any thread submits requests; the I/O thread
 * calls each request's `done` when it has finished for good, after
 * retries. At most `max_inflight` transfers run at once; the rest wait in
 * FIFO order. A transfer that fails on a connection error, a timeout (no
 * byte for `stall_timeout_ms`, or no connection in `connect_timeout_ms`),
 * a truncated body or a 5xx/408/429 answer is retried up to `retries` times
 * after an exponential backoff with jitter (half the bound, plus a random
 * part of the other half, so retries spread yet still span a restart); other answers (404, 403)
 * are final. See docs/threads.md for the thread contract.
 */
#ifndef STOKER_FETCH_H
#define STOKER_FETCH_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct fetch_settings {
	uint32_t max_inflight; /* transfers at once */
	uint32_t connect_timeout_ms;
	uint32_t stall_timeout_ms; /* no byte received for this long: a timeout */
	uint32_t retries;          /* attempts after the first */
	uint32_t backoff_ms;       /* the first retry's delay bound; doubles each time */
	uint32_t backoff_max_ms;   /* cap of that bound */
	uint64_t max_bytes;        /* a body larger fails with -EFBIG */
};

/* SigV4 signing for S3 (CURLOPT_AWS_SIGV4), shared read-only by requests. */
struct fetch_auth {
	char sigv4[128];   /* "aws:amz:REGION:s3" */
	char userpwd[512]; /* "ACCESS_KEY:SECRET" */
	char token[2048];  /* session token ("" none): sent as X-Amz-Security-Token, signed */
};

struct fetch_stats {
	uint64_t requests; /* transfers started, retries included */
	uint64_t bytes;    /* body bytes received */
	uint64_t retries;
	uint64_t errors;   /* requests that failed for good */
	uint64_t inflight; /* transfers running now */
};

struct fetch_req;
typedef void (*fetch_done_fn)(struct fetch_req *r);

/*
 * One request. The caller fills the inputs, keeps the struct (and url,
 * auth) alive until `done` runs, and owns `data` afterwards (free()).
 */
struct fetch_req {
	/* in */
	const char *url;
	const struct fetch_auth *auth; /* NULL: unsigned */
	uint64_t offset, length;       /* length > 0: a range request */
	bool head;                     /* HEAD: the object's size and time, no body */
	fetch_done_fn done;            /* on the I/O thread */
	void *ctx;
	/* out, valid in done(): err 0 and the body, or a negative errno
	 * (-ENOENT 404, -EACCES 401/403, -EFBIG over max_bytes, -ETIMEDOUT,
	 * -ECONNREFUSED/-ECONNRESET/-EHOSTUNREACH, -EPROTO truncated or
	 * malformed, -EREMOTEIO another status), with `status` the last HTTP
	 * status (0 if none), `message` a line for people, and for an HTTP
	 * error the (bounded) body in data, e.g. S3's XML error. */
	int err;
	long status;
	int64_t object_size; /* HEAD: Content-Length (-1 unknown) */
	int64_t object_time; /* HEAD: Last-Modified, seconds since 1970 (-1 unknown) */
	uint8_t *data;
	size_t len, cap;
	char message[256];
	/* private to fetch.c */
	uint32_t attempt;
	uint64_t due_ns;
	struct fetch_req *next;
	struct fetch *owner;
	void *easy;
	void *headers;
};

struct fetch;

int fetch_new(const struct fetch_settings *s, struct fetch **out);
/* Stop the thread: requests not finished, and any submitted later, get
 * done() with -ECANCELED (later ones on the submitting thread). Other
 * threads may still submit until fetch_free. Idempotent. */
void fetch_stop(struct fetch *f);
/* fetch_stop, then free: no thread may use f any more. Accepts NULL. */
void fetch_free(struct fetch *f);

/* Queue r; done() follows on the I/O thread. Any thread but the I/O one. */
void fetch_submit(struct fetch *f, struct fetch_req *r);
/* Run r and wait for it (r->done is replaced). Returns r->err. Any thread
 * but the I/O one; for scans and the rare sample a worker must fetch. */
int fetch_sync(struct fetch *f, struct fetch_req *r);

void fetch_get_stats(struct fetch *f, struct fetch_stats *out);

/* The retry policy, pure (tests/unit/test_fetch.c). A transfer that failed
 * with err (and HTTP status, 0 for none) is tried again, up to `retries`
 * more times, for a timeout, a refused, lost or unresolved connection, a
 * truncated or malformed answer, or an error answer of 5xx, 408 or 429 (or
 * none at all); never for 404, 401/403, 416 or another 4xx. */
bool fetch_retryable(int err, long status);
/* The errno an HTTP error answer means: 404 -ENOENT, 401/403 -EACCES, 416
 * -ERANGE, the rest -EREMOTEIO. */
int fetch_status_error(long status);
/* The wait (ms) before retry `attempt` (0: the first retry): its bound is
 * backoff_ms doubled each attempt (shifts stop at 20), capped at
 * backoff_max_ms; the wait is bound/2 plus `rnd` (a random number) modulo
 * bound/2 + 1: full jitter over the upper half of the bound. */
uint64_t fetch_backoff_ms(const struct fetch_settings *s, uint32_t attempt, uint64_t rnd);

/* True for an error worth retrying later (the store, not the object). */
bool fetch_error_transient(int err);
/* What a final fetch error means, for a log line ("a 5xx answer after
 * every retry", ...); strerror() for the rest. */
const char *fetch_strerror(int err);

#endif
