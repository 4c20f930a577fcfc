/* SPDX-License-Identifier: MIT */
/*
 * libstoker: the client side of the stoker protocol (proto/stoker.proto).
 * One connection per handle; the socket is non-blocking and waited on with
 * poll(2). Batches announced by the daemon queue here in order until
 * stoker_next() takes them. The library never logs.
 */
#include <errno.h>
#include <math.h>
#include <inttypes.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "cudadrv.h"
#include "frame.h"
#include "gpu.h"
#include "stoker.h"
#include "transform_text.h"

#define STOKER_API __attribute__((visibility("default")))

/* The daemon's frames can be large only for stats of many clients. */
#define CLIENT_MAX_FRAME (16u << 20)
#define CLIENT_MAX_QUEUED (1u << 20)
#define HANDSHAKE_TIMEOUT_MS 30000
/* Slots a daemon may give us; more is a broken or hostile daemon. */
#define CLIENT_MAX_SLOTS 4096
/* Sample names are fetched in chunks of this many, and this many chunks
 * are kept (least recently used goes): lookups for a batch cost one round
 * trip per chunk, memory stays bounded for any data set. */
#define NAMES_CHUNK 1024u
#define NAMES_CHUNKS 64u

struct stoker_batch {
	struct stoker *s;
	uint32_t slot;
	uint32_t count;
	uint32_t replaced;
	uint32_t boxes;         /* detection: rows at boxes_offset */
	uint32_t height, width; /* this batch's images (rect batches vary) */
	uint64_t epoch;
	uint64_t index;
	bool queued;  /* announced, not yet taken */
	bool held;    /* taken by the caller */
	void *stream; /* device batches: the CUstream of stoker_batch_wait() */
};

/* kpt_shape's points and flip_idx's entries at most (the daemon's INSTANCES_MAX_KPT). */
#define OPT_MAX_KPT 1024u

struct stoker_opts {
	Stoker__Attach attach;
	float mean[3], std[3];        /* attach.mean/std point here once set */
	Stoker__DetectOptions detect; /* attach.detect points here once set */
	char split[64];
	char device[16];                                      /* attach.device points here once set */
	char batch_transform[STOKER_BATCH_TRANSFORM_MAX + 1]; /* attach.batch_transform points here once set */
	int ordinal;                                          /* cuda:N; -1: cpu */
	enum { PIN_NO, PIN_YES, PIN_TRY } pin;
	/* aws_access_key_id, aws_secret_access_key, aws_session_token:
	 * s3:// data sets are read with the client's own keys. */
	Stoker__S3Credentials s3;
	char s3_id[256], s3_secret[256], s3_token[4096];
	Stoker__TransformOp **ops; /* attach.transforms points here once set */
	size_t n_ops;
	uint32_t flip_idx[OPT_MAX_KPT]; /* detect.flip_idx points here once set */
};

struct stoker {
	int fd;
	struct frame_in in;
	struct frame_out out;
	int dead; /* 0, or the -errno every call now returns */
	char error[512];

	bool attached;
	uint8_t *ring;
	size_t ring_bytes;
	uint32_t slot_count;
	uint64_t slot_bytes, labels_offset, indices_offset;
	uint32_t batch_size, height, width, channels, num_classes;
	/* Detection. */
	bool detect;
	uint64_t boxes_offset, label_errors;
	uint64_t shapes_offset, ratio_pad_offset; /* 0: the daemon sends no metadata */
	/* yolo_task segment: overlap masks; pose: keypoints (0: none). */
	uint64_t masks_offset, keypoints_offset, obb_offset;
	uint32_t mask_ratio, mask_side, kpt_points;
	/* A batch op: soft targets [batch_size][soft_classes] and mix records; 0: none. */
	uint64_t soft_offset, mix_offset;
	uint32_t soft_classes;
	/* Sample names: chunks of NAMES_CHUNK paths, joined to the data set's directory. */
	struct names_chunk {
		uint64_t first; /* UINT64_MAX: empty */
		uint64_t used;  /* when last looked at, for eviction */
		uint32_t count;
		char **paths;
	} names[NAMES_CHUNKS];
	uint64_t names_clock;
	uint32_t max_boxes;
	char **class_names; /* [n_class_names] */
	uint32_t n_class_names;
	enum stoker_dtype dtype;
	uint64_t dataset_samples, samples_per_epoch, batches_per_epoch;
	uint64_t decode_error_files; /* as of the latest BatchReady */

	/* The plan, for checkpoints. */
	uint64_t seed;
	uint32_t rank, world_size;
	bool shuffle, drop_last;
	uint32_t shard_buffer;                            /* shard order's shuffle buffer + 1; 0: sample order */
	uint32_t rect_stride;                             /* rectangular batches' stride; 0: not rect */
	uint32_t repeats, selected_round, selected_ratio; /* aug_repeats (0: none) and its selection */
	double rect_pad;

	uint64_t epoch;
	uint32_t generation;
	uint64_t first_batch;       /* where this generation started */
	uint64_t taken;             /* batches stoker_next() returned in it */
	bool epoch_done;            /* EndOfEpoch seen for this generation */
	struct stoker_batch *slots; /* [slot_count] */
	uint32_t *queue;            /* announced slots, FIFO */
	uint32_t queue_head, queue_len;
	uint64_t wait_ns;

	Stoker__Message *reply; /* the reply a request waits for */
	Stoker__Message__BodyCase want;

	bool shutdown;     /* the daemon said it is stopping */
	bool write_failed; /* the daemon stopped reading: read what is left */
	char shutdown_reason[256];

	/* CUDA (client/gpu.h): the device ring, or the pinned host ring. */
	int ordinal; /* -1: host batches */
	struct client_gpu *gpu;
	struct client_pin *pin;
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int set_error(struct stoker *s, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int set_error(struct stoker *s, int err, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(s->error, sizeof(s->error), fmt, ap);
	va_end(ap);
	return err;
}

static int fail_connection(struct stoker *s, int err, const char *what)
{
	if (!s->dead) {
		/* After Shutdown, the end of the connection is that shutdown. */
		if (s->shutdown && (err == -ECONNRESET || err == -EPIPE)) {
			err = -ESHUTDOWN;
			what = s->shutdown_reason;
		}
		s->dead = err;
		if (what)
			set_error(s, err, "%s", what);
	}
	return s->dead;
}

static int error_from_code(Stoker__ErrorCode code)
{
	switch (code) {
	case STOKER__ERROR_CODE__INVALID_ARGUMENT: return -EINVAL;
	case STOKER__ERROR_CODE__NOT_FOUND: return -ENOENT;
	case STOKER__ERROR_CODE__RESOURCE_EXHAUSTED: return -ENOMEM;
	case STOKER__ERROR_CODE__PERMISSION_DENIED: return -EACCES;
	case STOKER__ERROR_CODE__VERSION_MISMATCH: return -EPROTO;
	case STOKER__ERROR_CODE__PROTOCOL_ERROR: return -EPROTO;
	case STOKER__ERROR_CODE__SHUTTING_DOWN: return -ESHUTDOWN;
	case STOKER__ERROR_CODE__FAILED_PRECONDITION: return -EALREADY;
	case STOKER__ERROR_CODE__RESTART_REQUIRED: return -EOPNOTSUPP;
	case STOKER__ERROR_CODE__LEASE_EXPIRED: return -ECONNABORTED;
	case STOKER__ERROR_CODE__DEVICE_UNAVAILABLE: return -ENODEV;
	default: return -EIO;
	}
}

STOKER_API const char *stoker_version(void)
{
	return STOKER_VERSION;
}

/* Why this thread's last stoker_connect() failed: there is no handle then. */
static _Thread_local char connect_error[512];

STOKER_API const char *stoker_last_error(const struct stoker *s)
{
	return s ? s->error : connect_error;
}

/* ---- sending ---- */

static int send_message(struct stoker *s, const Stoker__Message *m)
{
	int r;

	if (s->dead)
		return s->dead;
	r = frame_out_push(&s->out, m, -1);
	if (r < 0)
		return set_error(s, r, "cannot queue a message: %s", strerror(-r));
	for (;;) {
		struct pollfd p = {.fd = s->fd, .events = POLLOUT};

		r = frame_out_flush(&s->out, s->fd);
		if (r != -EAGAIN)
			break;
		if (poll(&p, 1, -1) < 0 && errno != EINTR)
			return fail_connection(s, -errno, "poll failed");
	}
	if (r < 0) {
		/* The daemon hung up, but what it sent before may still be
		 * waiting (batches, a Shutdown saying why): the next read
		 * takes it, and ends the connection at its end. */
		s->write_failed = true;
		return s->shutdown ? set_error(s, -ESHUTDOWN, "%s", s->shutdown_reason)
				   : set_error(s, -ECONNRESET, "the daemon closed the connection");
	}
	return 0;
}

static void send_release(struct stoker *s, uint32_t slot)
{
	Stoker__Message m = STOKER__MESSAGE__INIT;
	Stoker__Release rel = STOKER__RELEASE__INIT;

	rel.slot = slot;
	rel.has_wait_ns = true;
	rel.wait_ns = s->wait_ns;
	m.body_case = STOKER__MESSAGE__BODY_RELEASE;
	m.release = &rel;
	send_message(s, &m);
}

/* ---- receiving ---- */

static int handle_batch_ready(struct stoker *s, const Stoker__BatchReady *br)
{
	struct stoker_batch *b;

	if (!s->attached || br->slot >= s->slot_count)
		return fail_connection(s, -EPROTO, "the daemon announced a batch in a slot that does not exist");
	b = &s->slots[br->slot];
	if (b->queued || b->held)
		return fail_connection(s, -EPROTO, "the daemon announced a slot that is still in use");
	if (br->generation != s->generation) {
		/* Produced for an epoch we left: hand it straight back. */
		client_gpu_release_untaken(s->gpu, br->slot);
		send_release(s, br->slot);
		return 0;
	}
	if (br->count == 0 || br->count > s->batch_size)
		return fail_connection(s, -EPROTO, "the daemon announced a batch of impossible size");
	b->count = br->count;
	b->epoch = br->epoch;
	b->index = br->batch_index;
	if (br->boxes > (uint64_t)s->max_boxes * br->count)
		return fail_connection(s, -EPROTO, "the daemon announced more boxes than the slot holds");
	b->replaced = br->replaced;
	b->boxes = br->boxes;
	if (br->has_decode_error_files && br->decode_error_files > s->decode_error_files)
		s->decode_error_files = br->decode_error_files;
	b->height = br->has_height ? br->height : s->height;
	b->width = br->has_width ? br->width : s->width;
	if (b->height == 0 || b->width == 0 || b->height > s->height || b->width > s->width)
		return fail_connection(s, -EPROTO, "the daemon announced images larger than the slot holds");
	b->queued = true;
	s->queue[(s->queue_head + s->queue_len) % s->slot_count] = br->slot;
	s->queue_len++;
	return 0;
}

/* Forget announced batches not yet taken (their slots are no longer ours). */
static void drop_queued(struct stoker *s)
{
	while (s->queue_len > 0) {
		s->slots[s->queue[s->queue_head]].queued = false;
		s->queue_head = (s->queue_head + 1) % s->slot_count;
		s->queue_len--;
	}
}

static int handle_message(struct stoker *s, Stoker__Message *m)
{
	int r = 0;

	if (m->body_case == s->want && s->want != STOKER__MESSAGE__BODY__NOT_SET && !s->reply) {
		s->reply = m; /* the caller frees it */
		return 0;
	}
	switch (m->body_case) {
	case STOKER__MESSAGE__BODY_BATCH_READY: r = handle_batch_ready(s, m->batch_ready); break;
	case STOKER__MESSAGE__BODY_END_OF_EPOCH:
		if (m->end_of_epoch->generation == s->generation)
			s->epoch_done = true;
		break;
	case STOKER__MESSAGE__BODY_SHUTDOWN:
		/* Batches already announced stay readable; the error comes
		 * when the daemon hangs up. */
		s->shutdown = true;
		snprintf(s->shutdown_reason, sizeof(s->shutdown_reason), "%s", m->shutdown->reason);
		break;
	case STOKER__MESSAGE__BODY_ERROR:
		r = error_from_code(m->error->code);
		set_error(s, r, "stokerd: %s", m->error->message);
		if (m->error->code == STOKER__ERROR_CODE__SHUTTING_DOWN ||
		    m->error->code == STOKER__ERROR_CODE__PROTOCOL_ERROR ||
		    m->error->code == STOKER__ERROR_CODE__VERSION_MISMATCH ||
		    m->error->code == STOKER__ERROR_CODE__LEASE_EXPIRED)
			s->dead = r;
		if (m->error->code == STOKER__ERROR_CODE__LEASE_EXPIRED)
			drop_queued(s); /* the session is gone: say so now, not after them */
		break;
	default: r = fail_connection(s, -EPROTO, "the daemon sent an unexpected message"); break;
	}
	stoker__message__free_unpacked(m, NULL);
	return r;
}

/*
 * Wait up to timeout_ms (-1: forever) for input and handle every complete
 * message. Returns 0 after handling something, -ETIMEDOUT, or an error
 * (from the daemon's Error message, or the connection's end).
 */
static int pump(struct stoker *s, int timeout_ms)
{
	struct pollfd p = {.fd = s->fd, .events = POLLIN};
	Stoker__Message *m;
	ssize_t n;
	int r;

	if (s->dead)
		return s->dead;
	r = poll(&p, 1, timeout_ms);
	if (r < 0)
		return errno == EINTR ? 0 : fail_connection(s, -errno, "poll failed");
	if (r == 0)
		return -ETIMEDOUT;
	n = frame_in_fill(&s->in, s->fd);
	if (n == -EAGAIN)
		return 0;
	if (n == 0)
		return fail_connection(s, -ECONNRESET, "the daemon closed the connection");
	if (n < 0)
		return fail_connection(s, n == -EPROTO || n == -EMSGSIZE ? -EPROTO : (int)n,
				       "the daemon's connection failed");
	r = 0;
	while (!s->dead && (r = frame_in_next(&s->in, &m)) > 0) {
		r = handle_message(s, m);
		if (r < 0)
			break;
	}
	if (r == -EBADMSG || r == -EMSGSIZE)
		return fail_connection(s, -EPROTO, "the daemon sent a malformed frame");
	return r < 0 ? r : 0;
}

/* Send `req` and wait for a reply of kind `want` (or an Error). */
static int await_reply(struct stoker *s, Stoker__Message__BodyCase want, int timeout_ms, Stoker__Message **out);

static int request(struct stoker *s, const Stoker__Message *req, Stoker__Message__BodyCase want, int timeout_ms,
		   Stoker__Message **out)
{
	int r;

	r = send_message(s, req);
	if (r < 0 && s->write_failed) {
		/* Find out why: a Shutdown or an Error may be waiting. */
		int e;

		while ((e = pump(s, 0)) == 0)
			;
		if (s->dead)
			return s->dead;
		return e < 0 && e != -ETIMEDOUT ? e : r;
	}
	if (r < 0)
		return r;
	return await_reply(s, want, timeout_ms, out);
}

/* Handle messages until one of kind `want` arrives (*out, the caller frees
 * it), an error, or the timeout. */
static int await_reply(struct stoker *s, Stoker__Message__BodyCase want, int timeout_ms, Stoker__Message **out)
{
	uint64_t deadline = timeout_ms < 0 ? 0 : now_ns() + (uint64_t)timeout_ms * 1000000ull;
	int r = 0;

	s->want = want;
	s->reply = NULL;
	while (!s->reply) {
		int left = -1;

		if (timeout_ms >= 0) {
			uint64_t now = now_ns();
			if (now >= deadline) {
				r = set_error(s, -ETIMEDOUT, "no reply from the daemon");
				break;
			}
			left = (int)((deadline - now + 999999) / 1000000);
		}
		r = pump(s, left);
		if (r < 0 && r != -ETIMEDOUT)
			break;
		r = 0;
	}
	s->want = STOKER__MESSAGE__BODY__NOT_SET;
	if (s->reply) {
		*out = s->reply;
		s->reply = NULL;
		return 0;
	}
	return r;
}

/* ---- connection ---- */

STOKER_API int stoker_connect(const char *path, struct stoker **out)
{
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	Stoker__Message m = STOKER__MESSAGE__INIT, *reply = NULL;
	Stoker__Hello hello = STOKER__HELLO__INIT;
	struct stoker *s;
	int r;

	if (!out)
		return -EINVAL;
	if (!path)
		path = getenv("STOKER_SOCKET");
	if (!path || !*path)
		path = STOKER_DEFAULT_SOCKET;
	if (strlen(path) >= sizeof(addr.sun_path)) {
		snprintf(connect_error, sizeof(connect_error), "socket path too long: %s", path);
		return -ENAMETOOLONG;
	}
	memcpy(addr.sun_path, path, strlen(path) + 1);

	s = calloc(1, sizeof(*s));
	if (!s) {
		snprintf(connect_error, sizeof(connect_error), "out of memory");
		return -ENOMEM;
	}
	frame_in_init(&s->in, CLIENT_MAX_FRAME);
	frame_out_init(&s->out, CLIENT_MAX_QUEUED);
	s->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (s->fd < 0) {
		r = -errno;
		goto fail;
	}
	if (connect(s->fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
		r = -errno;
		goto fail;
	}
	if (fcntl(s->fd, F_SETFL, O_NONBLOCK) < 0) {
		r = -errno;
		goto fail;
	}
	hello.protocol_version = STOKER__VERSION__PROTOCOL_VERSION;
	hello.client_name = (char *)"libstoker " STOKER_VERSION;
	m.body_case = STOKER__MESSAGE__BODY_HELLO;
	m.hello = &hello;
	r = request(s, &m, STOKER__MESSAGE__BODY_WELCOME, HANDSHAKE_TIMEOUT_MS, &reply);
	if (r < 0)
		goto fail;
	if (reply->welcome->protocol_version != STOKER__VERSION__PROTOCOL_VERSION) {
		r = -EPROTO;
		goto fail;
	}
	stoker__message__free_unpacked(reply, NULL);
	connect_error[0] = '\0';
	*out = s;
	return 0;
fail:
	if (reply)
		stoker__message__free_unpacked(reply, NULL);
	/* The daemon's reason (max_clients, out of descriptors, access) if it
	 * gave one, else the system's. */
	snprintf(connect_error, sizeof(connect_error), "%s", s->error[0] ? s->error : strerror(-r));
	stoker_close(s);
	return r;
}

STOKER_API void stoker_close(struct stoker *s)
{
	if (!s)
		return;
	/* Batches still held: their release on their stream, which closing
	 * the device ring waits for before unmapping it. */
	for (uint32_t i = 0; s->gpu && s->slots && i < s->slot_count; i++) {
		char why[256];

		if (s->slots[i].held)
			client_gpu_release(s->gpu, i, s->slots[i].stream, why, sizeof(why));
	}
	client_gpu_free(s->gpu);
	client_unpin(s->pin); /* before the mapping goes */
	if (s->ring)
		munmap(s->ring, s->ring_bytes);
	if (s->fd >= 0)
		close(s->fd);
	frame_in_release(&s->in);
	frame_out_release(&s->out);
	free(s->slots);
	free(s->queue);
	for (uint32_t i = 0; i < s->n_class_names; i++)
		free(s->class_names[i]);
	free(s->class_names);
	for (uint32_t k = 0; k < NAMES_CHUNKS; k++) {
		for (uint32_t i = 0; i < s->names[k].count; i++)
			free(s->names[k].paths[i]);
		free(s->names[k].paths);
	}
	free(s);
}

/* ---- checkpoints ---- */

struct checkpoint {
	uint64_t epoch, batch, seed, samples;
	uint32_t rank, world_size, batch_size;
	bool shuffle, drop_last;
	uint32_t shard_buffer; /* as in struct stoker */
	uint32_t rect_stride;  /* as in struct stoker */
	double rect_pad;
	uint32_t repeats, selected_round, selected_ratio; /* as in struct stoker */
};

#define CHECKPOINT_FORMAT                                                                        \
	"stoker-checkpoint-1 epoch=%" SCNu64 " batch=%" SCNu64 " seed=%" SCNu64 " rank=%" SCNu32 \
	" world_size=%" SCNu32 " batch_size=%" SCNu32 " shuffle=%d drop_last=%d samples=%" SCNu64 "%n"

static int checkpoint_parse(const char *token, struct checkpoint *out)
{
	struct checkpoint c;
	int shuffle, drop_last, end = -1;

	if (!token || strlen(token) >= STOKER_CHECKPOINT_MAX)
		return -EINVAL;
	if (sscanf(token, CHECKPOINT_FORMAT, &c.epoch, &c.batch, &c.seed, &c.rank, &c.world_size, &c.batch_size,
		   &shuffle, &drop_last, &c.samples, &end) != 9 ||
	    end < 0 || c.world_size == 0 || c.rank >= c.world_size || c.batch_size == 0 ||
	    (shuffle != 0 && shuffle != 1) || (drop_last != 0 && drop_last != 1))
		return -EINVAL;
	c.shuffle = shuffle;
	c.drop_last = drop_last;
	c.shard_buffer = 0;
	c.rect_stride = 0;
	c.rect_pad = 0;
	c.repeats = c.selected_round = c.selected_ratio = 0;
	/* Shard order adds its buffer, rectangular batches their stride and
	 * pad; tokens without them are sample order, square batches. */
	if (token[end] != '\0' && !strncmp(token + end, " order=shards", 13)) {
		int more = -1;

		if (sscanf(token + end, " order=shards shuffle_buffer=%" SCNu32 "%n", &c.shard_buffer, &more) != 1 ||
		    more < 0 || c.shard_buffer == UINT32_MAX)
			return -EINVAL;
		c.shard_buffer++;
		end += more;
	}
	if (token[end] != '\0' && !strncmp(token + end, " rect=1", 7)) {
		int more = -1;

		if (sscanf(token + end, " rect=1 stride=%" SCNu32 " pad=%lf%n", &c.rect_stride, &c.rect_pad, &more) !=
			    2 ||
		    more < 0 || c.rect_stride == 0 || !isfinite(c.rect_pad))
			return -EINVAL;
		end += more;
	}
	/* Repeated augmentation: its repeats and selection. */
	if (token[end] != '\0') {
		int more = -1;

		if (sscanf(token + end, " repeats=%" SCNu32 " selected_round=%" SCNu32 " selected_ratio=%" SCNu32 "%n",
			   &c.repeats, &c.selected_round, &c.selected_ratio, &more) != 3 ||
		    more < 0 || c.repeats < 2)
			return -EINVAL;
		end += more;
	}
	if (token[end] != '\0')
		return -EINVAL;
	*out = c;
	return 0;
}

STOKER_API int stoker_checkpoint(const struct stoker *s, char *buf, size_t size)
{
	int n;

	if (!s || !buf || !s->attached)
		return -EINVAL;
	n = snprintf(buf, size,
		     "stoker-checkpoint-1 epoch=%" PRIu64 " batch=%" PRIu64 " seed=%" PRIu64 " rank=%" PRIu32
		     " world_size=%" PRIu32 " batch_size=%" PRIu32 " shuffle=%d drop_last=%d samples=%" PRIu64,
		     s->epoch, s->first_batch + s->taken, s->seed, s->rank, s->world_size, s->batch_size,
		     (int)s->shuffle, (int)s->drop_last, s->dataset_samples);
	if (n >= 0 && (size_t)n < size && s->shard_buffer)
		n += snprintf(buf + n, size - (size_t)n, " order=shards shuffle_buffer=%" PRIu32, s->shard_buffer - 1);
	/* %.17g: the pad reads back as the same double */
	if (n >= 0 && (size_t)n < size && s->rect_stride)
		n += snprintf(buf + n, size - (size_t)n, " rect=1 stride=%" PRIu32 " pad=%.17g", s->rect_stride,
			      s->rect_pad);
	if (n >= 0 && (size_t)n < size && s->repeats)
		n += snprintf(buf + n, size - (size_t)n,
			      " repeats=%" PRIu32 " selected_round=%" PRIu32 " selected_ratio=%" PRIu32, s->repeats,
			      s->selected_round, s->selected_ratio);
	if (n < 0 || (size_t)n >= size)
		return -ENOBUFS;
	return 0;
}

/* ---- options ---- */

STOKER_API int stoker_opts_new(struct stoker_opts **out)
{
	struct stoker_opts *o;

	if (!out)
		return -EINVAL;
	o = calloc(1, sizeof(*o));
	if (!o)
		return -ENOMEM;
	stoker__attach__init(&o->attach);
	stoker__detect_options__init(&o->detect);
	stoker__s3_credentials__init(&o->s3);
	o->ordinal = -1;
	*out = o;
	return 0;
}

STOKER_API void stoker_opts_free(struct stoker_opts *o)
{
	if (o)
		transform_text_free(o->ops, o->n_ops);
	if (o)
		explicit_bzero(o, sizeof(*o)); /* keys, when it holds any */
	free(o);
}

/* The aws_* keys: the credentials an s3:// data set is read with. */
static int set_s3_key(struct stoker_opts *o, const char *key, const char *value)
{
	char *dst = !strcmp(key, "aws_access_key_id")       ? o->s3_id
		    : !strcmp(key, "aws_secret_access_key") ? o->s3_secret
		    : !strcmp(key, "aws_session_token")     ? o->s3_token
							    : NULL;
	size_t size = dst == o->s3_token ? sizeof(o->s3_token) : sizeof(o->s3_id);

	if (!dst)
		return 1;
	if (strlen(value) >= size)
		return -EINVAL;
	snprintf(dst, size, "%s", value);
	o->s3.access_key_id = o->s3_id;
	o->s3.secret_access_key = o->s3_secret;
	o->s3.session_token = o->s3_token[0] ? o->s3_token : NULL;
	o->attach.s3_credentials = o->s3_id[0] && o->s3_secret[0] ? &o->s3 : NULL;
	return 0;
}

static int parse_u64(const char *v, uint64_t max, uint64_t *out)
{
	unsigned long long x;
	char *end;

	if (!v || !*v || *v == '-' || *v == '+')
		return -EINVAL;
	errno = 0;
	x = strtoull(v, &end, 10);
	if (errno || *end || x > max)
		return -EINVAL;
	*out = x;
	return 0;
}

static int parse_bool(const char *v, protobuf_c_boolean *out)
{
	if (!v)
		return -EINVAL;
	if (!strcmp(v, "1") || !strcmp(v, "true") || !strcmp(v, "True") || !strcmp(v, "yes")) {
		*out = 1;
		return 0;
	}
	if (!strcmp(v, "0") || !strcmp(v, "false") || !strcmp(v, "False") || !strcmp(v, "no")) {
		*out = 0;
		return 0;
	}
	return -EINVAL;
}

/* "a,b,c": three finite floats; `positive` demands each > 0. */
static int parse_float3(const char *v, float out[3], bool positive)
{
	const char *p = v;

	for (int i = 0; i < 3; i++) {
		char *end;
		double x;

		errno = 0;
		x = strtod(p, &end);
		if (errno || end == p || x != x || x > 1e30 || x < -1e30 || (positive && !(x > 0)))
			return -EINVAL;
		out[i] = (float)x;
		while (*end == ' ')
			end++;
		if (i < 2) {
			if (*end != ',')
				return -EINVAL;
			p = end + 1;
		} else if (*end != '\0') {
			return -EINVAL;
		}
	}
	return 0;
}

/* A finite number, all of `v`. */
static int parse_double(const char *v, double *out)
{
	char *end;
	double x;

	errno = 0;
	x = strtod(v, &end);
	if (errno || end == v || *end || !isfinite(x))
		return -EINVAL;
	*out = x;
	return 0;
}

/* ---- attach options: one table of keys ---- */

/* How a key's value is read. */
enum opt_type {
	OPT_U32,    /* decimal, 0..UINT32_MAX */
	OPT_U64,    /* decimal, 0..UINT64_MAX */
	OPT_BOOL,   /* true|false|1|0|yes|no|True|False */
	OPT_FLOAT,  /* a finite number, kept as float */
	OPT_DOUBLE, /* a finite number */
	OPT_CHOICE, /* one of `kind`'s '|'-separated words: the field gets its position */
	OPT_CUSTOM, /* `set` reads it */
};

struct opt_key;
typedef int (*opt_set_fn)(struct stoker_opts *o, const struct opt_key *k, const char *value);

/* One key stoker_opts_set() takes: its name, type and bounds, and the field
 * it sets (in Stoker__Attach, or Stoker__DetectOptions for `detect` keys,
 * which then go with the request), with its has_ flag. */
struct opt_key {
	const char *name;
	enum opt_type type;
	bool detect;
	size_t field, has; /* offsets; has: NO_HAS when the field has none */
	const char *kind;  /* stoker_opts_key's; the words of an OPT_CHOICE */
	opt_set_fn set;    /* OPT_CUSTOM */
};

#define NO_HAS SIZE_MAX
#define A(f) offsetof(Stoker__Attach, f), offsetof(Stoker__Attach, has_##f)
#define D(f) offsetof(Stoker__DetectOptions, f), offsetof(Stoker__DetectOptions, has_##f)
#define KEY(name, type, f, kind)                     \
	{                                            \
#name, type, false, A(f), kind, NULL \
	}
#define DKEY(name, type, kind)                         \
	{                                              \
#name, type, true, D(name), kind, NULL \
	}
#define CUSTOM(name, detect, kind, fn)                         \
	{                                                      \
#name, OPT_CUSTOM, detect, 0, NO_HAS, kind, fn \
	}

/* An OPT_CHOICE's words are the enum's values in order. */
_Static_assert(STOKER__DTYPE__UINT8 == 0 && STOKER__DTYPE__FLOAT32 == 1 && STOKER__DTYPE__FLOAT16 == 2, "dtype");
_Static_assert(STOKER__TRANSFORM__RANDOM_RESIZED_CROP == 0 && STOKER__TRANSFORM__CENTER_CROP == 1 &&
		       STOKER__TRANSFORM__LETTERBOX == 2 && STOKER__TRANSFORM__MOSAIC == 3,
	       "transform");
_Static_assert(STOKER__TASK__CLASSIFY == 0 && STOKER__TASK__DETECT == 1, "task");
_Static_assert(STOKER__YOLO_TASK__YOLO_DETECT == 0 && STOKER__YOLO_TASK__YOLO_SEGMENT == 1 &&
		       STOKER__YOLO_TASK__YOLO_POSE == 2 && STOKER__YOLO_TASK__YOLO_OBB == 3 &&
		       sizeof(Stoker__YoloTask) == sizeof(int),
	       "yolo_task");
_Static_assert(STOKER__RESAMPLE__RESAMPLE_DEFAULT == 0 && STOKER__RESAMPLE__RESAMPLE_ANTIALIAS == 1 &&
		       STOKER__RESAMPLE__RESAMPLE_CV2 == 2,
	       "resample");
_Static_assert(STOKER__COPY_PASTE_MODE__COPY_PASTE_FLIP == 0 && STOKER__COPY_PASTE_MODE__COPY_PASTE_MIXUP == 1 &&
		       sizeof(Stoker__CopyPasteMode) == sizeof(int),
	       "copy_paste_mode");
_Static_assert(sizeof(Stoker__DType) == sizeof(int) && sizeof(Stoker__Transform) == sizeof(int) &&
		       sizeof(Stoker__Task) == sizeof(int) && sizeof(Stoker__Resample) == sizeof(int) &&
		       sizeof(protobuf_c_boolean) == sizeof(int),
	       "choices and booleans are stored as int");

static int opt_set_task(struct stoker_opts *o, const struct opt_key *k, const char *value);
static int opt_set_float3(struct stoker_opts *o, const struct opt_key *k, const char *value);
static int opt_set_device(struct stoker_opts *o, const struct opt_key *k, const char *value);
static int opt_set_pin(struct stoker_opts *o, const struct opt_key *k, const char *value);
static int opt_set_resume(struct stoker_opts *o, const struct opt_key *k, const char *value);
static int opt_set_split(struct stoker_opts *o, const struct opt_key *k, const char *value);
static int opt_set_transforms(struct stoker_opts *o, const struct opt_key *k, const char *value);
static int opt_set_batch_transform(struct stoker_opts *o, const struct opt_key *k, const char *value);
static int opt_set_kpt_shape(struct stoker_opts *o, const struct opt_key *k, const char *value);
static int opt_set_flip_idx(struct stoker_opts *o, const struct opt_key *k, const char *value);

static const struct opt_key opt_keys[] = {
	KEY(batch_size, OPT_U32, batch_size, "u32"),
	KEY(image_size, OPT_U32, image_size, "u32"),
	KEY(rank, OPT_U32, rank, "u32"),
	KEY(world_size, OPT_U32, world_size, "u32"),
	KEY(prefetch, OPT_U32, prefetch, "u32"),
	KEY(shuffle_buffer, OPT_U32, shuffle_buffer, "u32"),
	KEY(order, OPT_CHOICE, shard_order, "samples|shards"),
	KEY(seed, OPT_U64, seed, "u64"),
	KEY(epoch, OPT_U64, epoch, "u64"),
	KEY(shuffle, OPT_BOOL, shuffle, "bool"),
	KEY(coordinated, OPT_BOOL, coordinated, "bool"),
	KEY(dct_scaling, OPT_BOOL, dct_scaling, "bool"),
	KEY(drop_last, OPT_BOOL, drop_last, "bool"),
	CUSTOM(batch_transform, false, "text1024", opt_set_batch_transform),
	KEY(aug_repeats, OPT_U32, aug_repeats, "u32"),
	KEY(aug_selected_round, OPT_U32, aug_selected_round, "u32"),
	KEY(aug_selected_ratio, OPT_U32, aug_selected_ratio, "u32"),
	CUSTOM(device, false, "device", opt_set_device),
	CUSTOM(pin_memory, false, "false|true|try", opt_set_pin),
	KEY(dtype, OPT_CHOICE, dtype, "uint8|float32|float16"),
	CUSTOM(mean, false, "float3", opt_set_float3),
	CUSTOM(std, false, "float3>0", opt_set_float3),
	CUSTOM(resume, false, "token", opt_set_resume),
	KEY(transform, OPT_CHOICE, transform, "random_resized_crop|center_crop|letterbox|mosaic"),
	CUSTOM(transforms, false, "pipeline", opt_set_transforms),
	{"task", OPT_CUSTOM, false, A(task), "classify|detect", opt_set_task},
	/* Detection's (Ultralytics' hyper-parameters under their names). */
	DKEY(hsv_h, OPT_FLOAT, "number"),
	DKEY(hsv_s, OPT_FLOAT, "number"),
	DKEY(hsv_v, OPT_FLOAT, "number"),
	DKEY(degrees, OPT_FLOAT, "number"),
	DKEY(translate, OPT_FLOAT, "number"),
	DKEY(scale, OPT_FLOAT, "number"),
	DKEY(shear, OPT_FLOAT, "number"),
	DKEY(perspective, OPT_FLOAT, "number"),
	DKEY(flipud, OPT_FLOAT, "number"),
	DKEY(fliplr, OPT_FLOAT, "number"),
	DKEY(mosaic, OPT_FLOAT, "number"),
	DKEY(mixup, OPT_FLOAT, "number"),
	DKEY(cutmix, OPT_FLOAT, "number"),
	DKEY(copy_paste, OPT_DOUBLE, "number"),
	DKEY(copy_paste_mode, OPT_CHOICE, "flip|mixup"),
	DKEY(close_mosaic, OPT_U32, "u32"),
	DKEY(max_boxes, OPT_U32, "u32"),
	DKEY(epochs, OPT_U64, "u64"),
	DKEY(rect, OPT_BOOL, "bool"),
	DKEY(stride, OPT_U32, "u32"),
	DKEY(pad, OPT_DOUBLE, "number"),
	DKEY(fraction, OPT_DOUBLE, "number"),
	DKEY(images, OPT_U64, "u64"),
	DKEY(bgr, OPT_FLOAT, "number"),
	DKEY(albumentations, OPT_FLOAT, "number"),
	DKEY(resample, OPT_CHOICE, "default|antialias|cv2"),
	CUSTOM(split, true, "text", opt_set_split),
	DKEY(yolo_task, OPT_CHOICE, "detect|segment|pose|obb"),
	CUSTOM(kpt_shape, true, "u32,u32", opt_set_kpt_shape),
	CUSTOM(flip_idx, true, "u32list", opt_set_flip_idx),
	DKEY(mask_ratio, OPT_U32, "u32"),
	DKEY(overlap_mask, OPT_BOOL, "bool"),
};

#undef A
#undef D
#undef KEY
#undef DKEY
#undef CUSTOM

/* The position of `value` among the '|'-separated words of `words`, or -1. */
static int choice_index(const char *words, const char *value)
{
	size_t len = strlen(value);
	int i = 0;

	for (const char *w = words;; i++) {
		const char *bar = strchr(w, '|');
		size_t wl = bar ? (size_t)(bar - w) : strlen(w);

		if (len && wl == len && !memcmp(w, value, len))
			return i;
		if (!bar)
			return -1;
		w = bar + 1;
	}
}

static int opt_set_task(struct stoker_opts *o, const struct opt_key *k, const char *value)
{
	Stoker__Attach *a = &o->attach;
	int i = choice_index(k->kind, value);

	if (i < 0)
		return -EINVAL;
	a->task = (Stoker__Task)i;
	a->has_task = true;
	/* Detection's usual transform, unless one was chosen. */
	if (a->task == STOKER__TASK__DETECT && !a->has_transform)
		a->transform = STOKER__TRANSFORM__MOSAIC;
	return 0;
}

/* mean and std: three finite floats each, std's positive. */
static int opt_set_float3(struct stoker_opts *o, const struct opt_key *k, const char *value)
{
	Stoker__Attach *a = &o->attach;
	bool is_mean = k->name[0] == 'm';
	float v3[3];
	int r;

	r = parse_float3(value, v3, !is_mean);
	if (r < 0)
		return r;
	memcpy(is_mean ? o->mean : o->std, v3, sizeof(v3));
	if (is_mean) {
		a->n_mean = 3;
		a->mean = o->mean;
	} else {
		a->n_std = 3;
		a->std = o->std;
	}
	return 0;
}

static int opt_set_device(struct stoker_opts *o, const struct opt_key *k, const char *value)
{
	if (cudadrv_parse_device(value, &o->ordinal) < 0)
		return -EINVAL;
	snprintf(o->device, sizeof(o->device), "%s", value);
	o->attach.device = o->device;
	return 0;
}

static int opt_set_pin(struct stoker_opts *o, const struct opt_key *k, const char *value)
{
	protobuf_c_boolean b;
	int r;

	if (!strcmp(value, "try")) {
		o->pin = PIN_TRY;
		return 0;
	}
	r = parse_bool(value, &b);
	if (r == 0)
		o->pin = b ? PIN_YES : PIN_NO;
	return r;
}

static int opt_set_split(struct stoker_opts *o, const struct opt_key *k, const char *value)
{
	if (!value[0] || strlen(value) >= sizeof(o->split))
		return -EINVAL;
	snprintf(o->split, sizeof(o->split), "%s", value);
	o->detect.split = o->split;
	return 0;
}

/* "transforms": the pipeline's text (transform_text.h), replacing any set before. */
static int opt_set_transforms(struct stoker_opts *o, const struct opt_key *k, const char *value)
{
	Stoker__TransformOp **ops;
	size_t n;
	char err[256];
	int r = transform_text_parse(value, &ops, &n, err, sizeof(err));

	if (r < 0)
		return r;
	transform_text_free(o->ops, o->n_ops);
	o->ops = ops;
	o->n_ops = n;
	o->attach.transforms = ops;
	o->attach.n_transforms = n;
	return 0;
}

/* Up to `max` unsigned integers, separated by commas or spaces (Python's
 * list text: brackets and parentheses allowed); -EINVAL for anything else. */
static int parse_u32_list(const char *p, uint32_t *v, size_t max, size_t *count)
{
	size_t n = 0;

	while (*p) {
		char *end;
		unsigned long x;

		while (*p == ' ' || *p == '[' || *p == ']' || *p == ',' || *p == '(' || *p == ')')
			p++;
		if (!*p)
			break;
		if (*p < '0' || *p > '9' || n == max)
			return -EINVAL;
		errno = 0;
		x = strtoul(p, &end, 10);
		if (errno || x > UINT32_MAX)
			return -EINVAL;
		v[n++] = (uint32_t)x;
		p = end;
	}
	*count = n;
	return 0;
}

/* "N,D": Ultralytics' kpt_shape [N, D]; the daemon checks the bounds. */
static int opt_set_kpt_shape(struct stoker_opts *o, const struct opt_key *k, const char *value)
{
	uint32_t v[2];
	size_t n;

	(void)k;
	if (parse_u32_list(value, v, 2, &n) < 0 || n != 2)
		return -EINVAL;
	o->detect.kpt_points = v[0];
	o->detect.kpt_dims = v[1];
	o->detect.has_kpt_points = o->detect.has_kpt_dims = true;
	return 0;
}

/* Up to OPT_MAX_KPT keypoint indices (data.yaml's flip_idx); the daemon
 * checks them against kpt_shape. */
static int opt_set_flip_idx(struct stoker_opts *o, const struct opt_key *k, const char *value)
{
	size_t n;

	(void)k;
	if (parse_u32_list(value, o->flip_idx, OPT_MAX_KPT, &n) < 0 || n == 0)
		return -EINVAL;
	o->detect.flip_idx = o->flip_idx;
	o->detect.n_flip_idx = n;
	return 0;
}

/* The daemon parses and checks it (daemon/pixels/batchmix.h). */
static int opt_set_batch_transform(struct stoker_opts *o, const struct opt_key *k, const char *value)
{
	if (!value[0] || strlen(value) > STOKER_BATCH_TRANSFORM_MAX)
		return -EINVAL;
	snprintf(o->batch_transform, sizeof(o->batch_transform), "%s", value);
	o->attach.batch_transform = o->batch_transform;
	return 0;
}

static int opt_set_resume(struct stoker_opts *o, const struct opt_key *k, const char *value)
{
	Stoker__Attach *a = &o->attach;
	struct checkpoint c;
	int r;

	r = checkpoint_parse(value, &c);
	if (r < 0)
		return r;
	a->epoch = c.epoch;
	a->first_batch = c.batch;
	a->seed = c.seed;
	a->rank = c.rank;
	a->world_size = c.world_size;
	a->batch_size = c.batch_size;
	a->shuffle = c.shuffle;
	a->drop_last = c.drop_last;
	a->expect_samples = c.samples;
	a->shard_order = c.shard_buffer != 0;
	a->shuffle_buffer = c.shard_buffer ? c.shard_buffer - 1 : a->shuffle_buffer;
	a->has_shard_order = a->has_shuffle_buffer = true;
	/* Repeated augmentation as it was (none: none). */
	a->aug_repeats = c.repeats;
	if (c.repeats) {
		a->aug_selected_round = c.selected_round;
		a->aug_selected_ratio = c.selected_ratio;
		a->has_aug_selected_round = a->has_aug_selected_ratio = true;
	}
	a->has_aug_repeats = true;
	/* The rect order and batch shapes as they were. */
	o->detect.rect = c.rect_stride != 0;
	o->detect.has_rect = c.rect_stride || a->detect;
	if (c.rect_stride) {
		o->detect.stride = c.rect_stride;
		o->detect.pad = c.rect_pad;
		o->detect.has_stride = o->detect.has_pad = true;
		a->detect = &o->detect;
	}
	a->has_epoch = a->has_first_batch = a->has_seed = a->has_rank = a->has_world_size = true;
	a->has_batch_size = a->has_shuffle = a->has_drop_last = a->has_expect_samples = true;
	return 0;
}

STOKER_API int stoker_opts_key(size_t i, const char **name, const char **task, const char **kind)
{
	if (i >= sizeof(opt_keys) / sizeof(opt_keys[0]))
		return -ENOENT;
	if (name)
		*name = opt_keys[i].name;
	if (task)
		*task = opt_keys[i].detect ? "detect" : "";
	if (kind)
		*kind = opt_keys[i].kind;
	return 0;
}

STOKER_API int stoker_opts_set(struct stoker_opts *o, const char *key, const char *value)
{
	const struct opt_key *k = NULL;
	uint8_t *base;
	uint64_t v;
	double x;
	int r, i;

	if (!o || !key || !value)
		return -EINVAL;
	r = set_s3_key(o, key, value);
	if (r <= 0)
		return r;
	for (size_t j = 0; j < sizeof(opt_keys) / sizeof(opt_keys[0]) && !k; j++)
		if (!strcmp(key, opt_keys[j].name))
			k = &opt_keys[j];
	if (!k)
		return -EINVAL;
	base = k->detect ? (uint8_t *)&o->detect : (uint8_t *)&o->attach;
	switch (k->type) {
	case OPT_U32:
	case OPT_U64:
		r = parse_u64(value, k->type == OPT_U32 ? UINT32_MAX : UINT64_MAX, &v);
		if (r == 0 && k->type == OPT_U32)
			*(uint32_t *)(base + k->field) = (uint32_t)v;
		else if (r == 0)
			*(uint64_t *)(base + k->field) = v;
		break;
	case OPT_BOOL: r = parse_bool(value, (protobuf_c_boolean *)(base + k->field)); break;
	case OPT_FLOAT:
		r = parse_double(value, &x);
		if (r == 0)
			*(float *)(base + k->field) = (float)x;
		break;
	case OPT_DOUBLE: r = parse_double(value, (double *)(base + k->field)); break;
	case OPT_CHOICE:
		i = choice_index(k->kind, value);
		r = i < 0 ? -EINVAL : 0;
		if (r == 0)
			*(int *)(base + k->field) = i;
		break;
	default: r = k->set(o, k, value); break;
	}
	if (r == 0 && k->has != NO_HAS)
		*(protobuf_c_boolean *)(base + k->has) = true;
	/* A detection key sends the detection options with the request. */
	if (r == 0 && k->detect)
		o->attach.detect = &o->detect;
	return r;
}

/* ---- attach ---- */

/* Bytes one image element of `dtype` takes. */
static unsigned dtype_bytes(Stoker__DType dtype)
{
	return dtype == STOKER__DTYPE__FLOAT32 ? 4 : dtype == STOKER__DTYPE__FLOAT16 ? 2 : 1;
}

static int map_ring(struct stoker *s, const Stoker__Attached *at, int fd)
{
	uint64_t image_bytes, geometry;
	struct stat st;
	int seals;
	void *p;

	/* On a device, the host ring carries uint8 images: the GPU converts. */
	unsigned elem = s->ordinal >= 0 ? 1 : dtype_bytes(at->dtype);

	if (at->dtype != STOKER__DTYPE__UINT8 && at->dtype != STOKER__DTYPE__FLOAT32 &&
	    at->dtype != STOKER__DTYPE__FLOAT16)
		return set_error(s, -EPROTO, "the daemon announced an unknown dtype");
	image_bytes = (uint64_t)at->batch_size * at->image_height * at->image_width * at->channels * elem;
	geometry = (uint64_t)at->slot_count * at->slot_bytes;
	if (at->slot_count == 0 || at->slot_count > CLIENT_MAX_SLOTS || at->batch_size == 0 || at->channels != 3 ||
	    at->slot_bytes == 0 || geometry / at->slot_count != at->slot_bytes || geometry != at->ring_bytes ||
	    image_bytes > at->labels_offset || at->labels_offset + 8ull * at->batch_size > at->indices_offset ||
	    at->indices_offset + 8ull * at->batch_size > at->slot_bytes || at->labels_offset % 8 ||
	    at->indices_offset % 8 || at->ring_bytes > SIZE_MAX)
		return set_error(s, -EPROTO, "the daemon described an impossible ring");
	if (at->task == STOKER__TASK__DETECT &&
	    (at->max_boxes == 0 || at->boxes_offset % 4 ||
	     at->boxes_offset < at->indices_offset + 8ull * at->batch_size || at->boxes_offset > at->slot_bytes ||
	     (at->slot_bytes - at->boxes_offset) / (24ull * at->batch_size) < at->max_boxes))
		return set_error(s, -EPROTO, "the daemon described an impossible box area");
	if (at->task == STOKER__TASK__DETECT && (at->shapes_offset || at->ratio_pad_offset) &&
	    (at->shapes_offset % 4 || at->ratio_pad_offset % 8 ||
	     at->shapes_offset < at->indices_offset + 8ull * at->batch_size || at->shapes_offset > at->slot_bytes ||
	     (at->slot_bytes - at->shapes_offset) / 16 < at->batch_size ||
	     at->ratio_pad_offset < at->shapes_offset + 16ull * at->batch_size ||
	     at->ratio_pad_offset > at->slot_bytes || (at->slot_bytes - at->ratio_pad_offset) / 32 < at->batch_size))
		return set_error(s, -EPROTO, "the daemon described an impossible metadata area");
	if (at->task == STOKER__TASK__DETECT && at->masks_offset &&
	    (at->mask_ratio == 0 || at->mask_side == 0 || at->masks_offset % 2 ||
	     at->masks_offset < at->indices_offset + 8ull * at->batch_size || at->masks_offset > at->slot_bytes ||
	     (at->slot_bytes - at->masks_offset) / (2ull * at->mask_side * at->mask_side) < at->batch_size ||
	     (uint64_t)at->mask_side * at->mask_ratio < at->image_height ||
	     (uint64_t)at->mask_side * at->mask_ratio < at->image_width))
		return set_error(s, -EPROTO, "the daemon described an impossible mask area");
	if (at->task == STOKER__TASK__DETECT && at->keypoints_offset &&
	    (at->kpt_points == 0 || at->kpt_points > OPT_MAX_KPT || at->keypoints_offset % 4 ||
	     at->keypoints_offset < at->indices_offset + 8ull * at->batch_size ||
	     at->keypoints_offset > at->slot_bytes ||
	     (at->slot_bytes - at->keypoints_offset) / (12ull * at->kpt_points * at->batch_size) < at->max_boxes))
		return set_error(s, -EPROTO, "the daemon described an impossible keypoint area");
	if (at->task == STOKER__TASK__DETECT && at->obb_offset &&
	    (at->obb_offset % 4 || at->obb_offset < at->indices_offset + 8ull * at->batch_size ||
	     at->obb_offset > at->slot_bytes ||
	     (at->slot_bytes - at->obb_offset) / (20ull * at->batch_size) < at->max_boxes))
		return set_error(s, -EPROTO, "the daemon described an impossible oriented box area");
	if (at->soft_offset &&
	    (at->soft_classes == 0 || at->soft_offset % 4 || at->mix_offset % 8 ||
	     at->soft_offset < at->indices_offset + 8ull * at->batch_size || at->soft_offset > at->slot_bytes ||
	     (at->slot_bytes - at->soft_offset) / (4ull * at->batch_size) < at->soft_classes ||
	     at->mix_offset < at->soft_offset + 4ull * at->batch_size * at->soft_classes ||
	     at->mix_offset > at->slot_bytes || (at->slot_bytes - at->mix_offset) / 40 < at->batch_size))
		return set_error(s, -EPROTO, "the daemon described an impossible soft-target area");
	/* A ring that could shrink under us would turn reads into SIGBUS. */
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0 || !(seals & F_SEAL_SHRINK) || fstat(fd, &st) < 0 || (uint64_t)st.st_size < at->ring_bytes)
		return set_error(s, -EPROTO, "the daemon's ring is not a sealed memfd of the announced size");
	p = mmap(NULL, at->ring_bytes, PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		return set_error(s, -errno, "cannot map the ring: %s", strerror(errno));
	s->ring = p;
	s->ring_bytes = at->ring_bytes;
	return 0;
}

/* device cuda:N: the DeviceRing that follows Attached, imported. */
static int attach_device(struct stoker *s, const Stoker__Attached *at)
{
	Stoker__Message *reply = NULL;
	const Stoker__DeviceRing *dr;
	char why[384];
	int fd = -1, words_fd = -1, r;

	r = await_reply(s, STOKER__MESSAGE__BODY_DEVICE_RING, HANDSHAKE_TIMEOUT_MS, &reply);
	if (r < 0)
		return fail_connection(s, r, NULL);
	dr = reply->device_ring;
	fd = frame_in_take_fd(&s->in);
	words_fd = frame_in_take_fd(&s->in);
	if (fd < 0 || words_fd < 0) {
		r = fail_connection(s, -EPROTO, "the daemon sent the device ring without its two descriptors");
		goto out;
	}
	if (dr->slot_count != at->slot_count || dr->slot_count == 0 || dr->slot_bytes == 0 ||
	    dr->slot_bytes > dr->ring_bytes / dr->slot_count ||
	    (uint64_t)at->batch_size * at->image_height * at->image_width * at->channels * dtype_bytes(at->dtype) >
		    dr->slot_bytes) {
		r = fail_connection(s, -EPROTO, "the daemon described an impossible device ring");
		goto out;
	}
	r = client_gpu_import(s->ordinal, fd, words_fd, dr, &s->gpu, why, sizeof(why));
	if (r < 0) {
		set_error(s, r, "%s", why);
		fail_connection(s, r, NULL);
	}
out:
	if (fd >= 0)
		close(fd);
	if (words_fd >= 0)
		close(words_fd);
	stoker__message__free_unpacked(reply, NULL);
	return r;
}

/* pin_memory: page-lock the read-only ring; `required` fails without it. */
static int attach_pin(struct stoker *s, bool required)
{
	char why[256];
	int r = client_pin(s->ring, s->ring_bytes, &s->pin, why, sizeof(why));

	if (r < 0 && required) {
		set_error(s, r, "pin_memory: %s", why);
		return fail_connection(s, r, NULL);
	}
	if (r < 0) /* "try": host batches stay pageable; the reason is kept */
		set_error(s, 0, "pin_memory: %s; batches are not pinned", why);
	return 0;
}

STOKER_API int stoker_attach(struct stoker *s, const char *dataset, const struct stoker_opts *opts)
{
	Stoker__Message m = STOKER__MESSAGE__INIT, *reply = NULL;
	Stoker__S3Credentials env_keys = STOKER__S3_CREDENTIALS__INIT;
	Stoker__Attach a;
	const Stoker__Attached *at;
	uint8_t uuid[CLIENT_GPU_UUID_BYTES];
	char cuda_why[256] = "";
	int fd = -1, r;

	if (!s || !dataset)
		return -EINVAL;
	if (s->attached)
		return set_error(s, -EALREADY, "already attached");
	if (opts)
		a = opts->attach;
	else
		stoker__attach__init(&a);
	a.dataset = (char *)dataset;
	if (!a.s3_credentials && !strncmp(dataset, "s3://", 5)) {
		/* The process's own keys, as the AWS CLI takes them first. */
		const char *id = getenv("AWS_ACCESS_KEY_ID"), *secret = getenv("AWS_SECRET_ACCESS_KEY");

		if (id && *id && secret && *secret) {
			env_keys.access_key_id = (char *)id;
			env_keys.secret_access_key = (char *)secret;
			env_keys.session_token = getenv("AWS_SESSION_TOKEN");
			a.s3_credentials = &env_keys;
		}
	}
	s->ordinal = opts ? opts->ordinal : -1;
	if (s->ordinal >= 0) {
		/* The daemon finds the GPU by UUID: our cuda:N may be its cuda:M. */
		r = client_gpu_resolve(s->ordinal, uuid, cuda_why, sizeof(cuda_why));
		if (r == 0) {
			a.has_device_uuid = true;
			a.device_uuid = (ProtobufCBinaryData){sizeof(uuid), uuid};
		} else if (r == -EPERM || r == -ENOTSUP) {
			/* The GPU cannot serve a device ring (compute mode, a
			 * capability): refuse before attaching, with the reason. */
			return set_error(s, r, "%s", cuda_why);
		}
	} else if (opts && opts->pin == PIN_YES) {
		const struct cudadrv *drv;
		const char *why;

		/* Refuse before attaching: nothing to undo. */
		r = cudadrv_get(&drv, &why);
		if (r < 0)
			return set_error(s, r, "pin_memory: %s", why);
	}
	m.body_case = STOKER__MESSAGE__BODY_ATTACH;
	m.attach = &a;
	r = request(s, &m, STOKER__MESSAGE__BODY_ATTACHED, -1, &reply);
	if (r < 0) {
		if (r == -ENODEV && cuda_why[0]) {
			char daemon_says[sizeof(s->error)];

			memcpy(daemon_says, s->error, sizeof(daemon_says));
			set_error(s, r, "%.300s; in this process: %s", daemon_says, cuda_why);
		}
		return r;
	}
	at = reply->attached;
	fd = frame_in_take_fd(&s->in);
	if (fd < 0) {
		r = fail_connection(s, -EPROTO, "the daemon attached without sending the ring");
		goto out;
	}
	r = map_ring(s, at, fd);
	if (r < 0) {
		fail_connection(s, r, NULL);
		goto out;
	}
	if (s->ordinal >= 0)
		r = attach_device(s, at);
	else if (opts && opts->pin != PIN_NO)
		r = attach_pin(s, opts->pin == PIN_YES);
	if (r < 0)
		goto out;
	s->slots = calloc(at->slot_count, sizeof(*s->slots));
	s->queue = calloc(at->slot_count, sizeof(*s->queue));
	if (!s->slots || !s->queue) {
		r = fail_connection(s, -ENOMEM, "out of memory");
		goto out;
	}
	for (uint32_t i = 0; i < at->slot_count; i++) {
		s->slots[i].s = s;
		s->slots[i].slot = i;
	}
	s->slot_count = at->slot_count;
	s->slot_bytes = at->slot_bytes;
	s->labels_offset = at->labels_offset;
	s->indices_offset = at->indices_offset;
	s->batch_size = at->batch_size;
	s->height = at->image_height;
	s->width = at->image_width;
	s->channels = at->channels;
	s->dtype = (enum stoker_dtype)at->dtype;
	s->num_classes = at->num_classes;
	s->detect = at->task == STOKER__TASK__DETECT;
	s->boxes_offset = at->boxes_offset;
	s->max_boxes = at->max_boxes;
	s->shapes_offset = s->detect ? at->shapes_offset : 0;
	s->ratio_pad_offset = s->detect ? at->ratio_pad_offset : 0;
	s->masks_offset = s->detect ? at->masks_offset : 0;
	s->mask_ratio = s->masks_offset ? at->mask_ratio : 0;
	s->mask_side = s->masks_offset ? at->mask_side : 0;
	s->keypoints_offset = s->detect ? at->keypoints_offset : 0;
	s->kpt_points = s->keypoints_offset ? at->kpt_points : 0;
	s->obb_offset = s->detect ? at->obb_offset : 0;
	s->soft_offset = s->detect ? 0 : at->soft_offset;
	s->mix_offset = s->soft_offset ? at->mix_offset : 0;
	s->soft_classes = s->soft_offset ? at->soft_classes : 0;
	s->label_errors = at->label_errors;
	if (at->n_class_names) {
		s->class_names = calloc(at->n_class_names, sizeof(*s->class_names));
		if (!s->class_names) {
			r = fail_connection(s, -ENOMEM, "out of memory");
			goto out;
		}
		s->n_class_names = (uint32_t)at->n_class_names;
		for (size_t i = 0; i < at->n_class_names; i++) {
			s->class_names[i] = strdup(at->class_names[i]);
			if (!s->class_names[i]) {
				r = fail_connection(s, -ENOMEM, "out of memory");
				goto out;
			}
		}
	}
	s->dataset_samples = at->dataset_samples;
	s->samples_per_epoch = at->samples_per_epoch;
	s->batches_per_epoch = at->batches_per_epoch;
	s->epoch = at->epoch;
	s->generation = 0;
	s->first_batch = a.first_batch;
	s->taken = 0;
	s->seed = a.seed;
	s->rank = a.rank;
	s->world_size = a.world_size;
	s->shuffle = a.shuffle;
	s->drop_last = a.drop_last;
	s->shard_buffer = a.shard_order ? a.shuffle_buffer + 1 : 0;
	s->rect_stride = a.detect && a.detect->has_rect && a.detect->rect ? a.detect->stride : 0;
	s->rect_pad = s->rect_stride ? a.detect->pad : 0;
	s->repeats = a.aug_repeats > 1 ? a.aug_repeats : 0;
	s->selected_round = s->repeats ? a.aug_selected_round : 0;
	s->selected_ratio = s->repeats ? a.aug_selected_ratio : 0;
	s->attached = true;
	r = 0;
out:
	if (fd >= 0)
		close(fd);
	stoker__message__free_unpacked(reply, NULL);
	return r;
}

STOKER_API uint64_t stoker_dataset_samples(const struct stoker *s)
{
	return s && s->attached ? s->dataset_samples : 0;
}

STOKER_API uint64_t stoker_samples_per_epoch(const struct stoker *s)
{
	return s && s->attached ? s->samples_per_epoch : 0;
}

STOKER_API uint64_t stoker_batches_per_epoch(const struct stoker *s)
{
	return s && s->attached ? s->batches_per_epoch : 0;
}

STOKER_API uint32_t stoker_num_classes(const struct stoker *s)
{
	return s && s->attached ? s->num_classes : 0;
}

STOKER_API uint64_t stoker_epoch(const struct stoker *s)
{
	return s && s->attached ? s->epoch : 0;
}

/* ---- batches ---- */

/* Begin a new generation at `epoch`, batch `first`. */
static int start_epoch(struct stoker *s, uint64_t epoch, uint64_t first)
{
	Stoker__Message m = STOKER__MESSAGE__INIT;
	Stoker__StartEpoch se = STOKER__START_EPOCH__INIT;

	if (s->dead)
		return s->dead;
	s->generation++;
	s->epoch = epoch;
	s->first_batch = first;
	s->taken = 0;
	s->epoch_done = false;
	/* Announced but untaken batches belong to the old epoch. */
	while (s->queue_len > 0) {
		uint32_t slot = s->queue[s->queue_head];

		s->queue_head = (s->queue_head + 1) % s->slot_count;
		s->queue_len--;
		s->slots[slot].queued = false;
		client_gpu_release_untaken(s->gpu, slot);
		send_release(s, slot);
	}
	se.epoch = epoch;
	se.generation = s->generation;
	se.has_first_batch = true;
	se.first_batch = first;
	m.body_case = STOKER__MESSAGE__BODY_START_EPOCH;
	m.start_epoch = &se;
	return send_message(s, &m);
}

STOKER_API int stoker_set_epoch(struct stoker *s, uint64_t epoch)
{
	if (!s || !s->attached)
		return -EINVAL;
	return start_epoch(s, epoch, 0);
}

STOKER_API int stoker_restore(struct stoker *s, const char *token)
{
	struct checkpoint c;

	if (!s || !s->attached)
		return -EINVAL;
	if (checkpoint_parse(token, &c) < 0)
		return set_error(s, -EINVAL, "not a stoker checkpoint token");
	if (c.seed != s->seed || c.rank != s->rank || c.world_size != s->world_size || c.batch_size != s->batch_size ||
	    c.shuffle != s->shuffle || c.drop_last != s->drop_last || c.samples != s->dataset_samples ||
	    c.shard_buffer != s->shard_buffer)
		return set_error(s, -EINVAL,
				 "the checkpoint's plan (seed %" PRIu64 ", rank %" PRIu32 "/%" PRIu32
				 ", batch_size %" PRIu32 ", %" PRIu64
				 " samples, %s order%s) differs from this attachment's",
				 c.seed, c.rank, c.world_size, c.batch_size, c.samples,
				 c.shard_buffer ? "shard" : "sample", c.shard_buffer ? " and its shuffle buffer" : "");
	/* Rect batches are another order and other shapes: never mixed. */
	if (c.rect_stride != s->rect_stride || c.rect_pad != s->rect_pad)
		return set_error(s, -EINVAL,
				 "the checkpoint was taken with %s, this attachment has %s: resume with the same rect, "
				 "stride and pad",
				 c.rect_stride ? "rect=true (rectangular batches)" : "rect=false (square batches)",
				 s->rect_stride ? "rect=true (rectangular batches)" : "rect=false (square batches)");
	if (c.repeats != s->repeats || c.selected_round != s->selected_round || c.selected_ratio != s->selected_ratio)
		return set_error(s, -EINVAL,
				 "the checkpoint was taken with aug_repeats %" PRIu32 " (selected_round %" PRIu32
				 ", selected_ratio %" PRIu32 "), this attachment has %" PRIu32 " (%" PRIu32 ", %" PRIu32
				 "): resume with the same",
				 c.repeats, c.selected_round, c.selected_ratio, s->repeats, s->selected_round,
				 s->selected_ratio);
	if (c.batch > s->batches_per_epoch)
		return set_error(s, -EINVAL, "the checkpoint's batch %" PRIu64 " is past the epoch's end", c.batch);
	return start_epoch(s, c.epoch, c.batch);
}

STOKER_API int stoker_next(struct stoker *s, int timeout_ms, struct stoker_batch **out)
{
	uint64_t start = now_ns(), deadline = start + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms) * 1000000ull;
	int r = 0;

	if (!s || !out)
		return -EINVAL;
	if (!s->attached)
		return set_error(s, -EINVAL, "not attached");
	/* Handle what has arrived, then wait only if nothing is queued. An error
	 * ends the wait, but batches already announced are still handed out:
	 * they stay readable after the daemon is gone. */
	do
		r = pump(s, 0);
	while (r == 0);
	while (s->queue_len == 0 && !s->epoch_done && (r == 0 || r == -ETIMEDOUT)) {
		int left = -1;

		if (timeout_ms >= 0) {
			uint64_t now = now_ns();
			if (now >= deadline)
				break;
			left = (int)((deadline - now + 999999) / 1000000);
		}
		r = pump(s, left);
	}
	s->wait_ns += now_ns() - start;
	if (s->queue_len > 0) {
		struct stoker_batch *b = &s->slots[s->queue[s->queue_head]];

		s->queue_head = (s->queue_head + 1) % s->slot_count;
		s->queue_len--;
		b->queued = false;
		b->held = true;
		s->taken++;
		*out = b;
		return 0;
	}
	if (s->epoch_done)
		return -ENODATA;
	if (r == 0 || r == -ETIMEDOUT)
		return set_error(s, -ETIMEDOUT, "no batch within %d ms", timeout_ms);
	return r;
}

STOKER_API void stoker_release(struct stoker_batch *b)
{
	struct stoker *s;

	if (!b || !b->held)
		return;
	s = b->s;
	b->held = false;
	if (s->gpu) {
		char why[256];
		/* Also once the daemon has gone: the word is in this process's
		 * own mapping, and closing waits for it before unmapping. */
		int r = client_gpu_release(s->gpu, b->slot, b->stream, why, sizeof(why));

		b->stream = NULL;
		if (r < 0) {
			/* Without the release the daemon could overwrite what the
			 * GPU still reads: keep the slot, end the session. */
			set_error(s, r, "%s", why);
			s->dead = r;
			return;
		}
	}
	send_release(s, b->slot);
}

STOKER_API int stoker_device(const struct stoker *s)
{
	return s && s->attached && s->gpu ? s->ordinal : -1;
}

STOKER_API int stoker_pinned(const struct stoker *s)
{
	return s && s->pin ? 1 : 0;
}

STOKER_API uint64_t stoker_batch_device_images(const struct stoker_batch *b)
{
	return b && b->s->gpu ? client_gpu_slot_ptr(b->s->gpu, b->slot) : 0;
}

STOKER_API int stoker_batch_wait(struct stoker_batch *b, void *stream)
{
	if (!b || !b->held || !b->s->gpu)
		return -EINVAL;
	/* The batch is complete on the GPU when it is announced (the daemon
	 * says BatchReady once its copy has finished): nothing to wait for.
	 * The stream is where stoker_release() orders the slot's release. */
	b->stream = stream;
	return 0;
}

static const uint8_t *slot_base(const struct stoker_batch *b)
{
	return b->s->ring + (size_t)b->slot * b->s->slot_bytes;
}

STOKER_API const void *stoker_batch_images(const struct stoker_batch *b)
{
	return b && !b->s->gpu ? slot_base(b) : NULL;
}

STOKER_API enum stoker_dtype stoker_batch_dtype(const struct stoker_batch *b)
{
	return b ? b->s->dtype : STOKER_DTYPE_UINT8;
}

STOKER_API const int64_t *stoker_batch_labels(const struct stoker_batch *b)
{
	return b ? (const int64_t *)(slot_base(b) + b->s->labels_offset) : NULL;
}

STOKER_API const int64_t *stoker_batch_indices(const struct stoker_batch *b)
{
	return b ? (const int64_t *)(slot_base(b) + b->s->indices_offset) : NULL;
}

STOKER_API uint32_t stoker_batch_count(const struct stoker_batch *b)
{
	return b ? b->count : 0;
}

STOKER_API uint32_t stoker_batch_height(const struct stoker_batch *b)
{
	return b ? b->height : 0;
}

STOKER_API uint32_t stoker_batch_width(const struct stoker_batch *b)
{
	return b ? b->width : 0;
}

STOKER_API uint32_t stoker_batch_channels(const struct stoker_batch *b)
{
	return b ? b->s->channels : 0;
}

STOKER_API uint64_t stoker_batch_epoch(const struct stoker_batch *b)
{
	return b ? b->epoch : 0;
}

STOKER_API uint64_t stoker_batch_index(const struct stoker_batch *b)
{
	return b ? b->index : 0;
}

STOKER_API uint32_t stoker_batch_replaced(const struct stoker_batch *b)
{
	return b ? b->replaced : 0;
}

STOKER_API const float *stoker_batch_boxes(const struct stoker_batch *b, uint32_t *count)
{
	if (!b || !b->s->detect)
		return NULL;
	if (count)
		*count = b->boxes;
	return (const float *)(slot_base(b) + b->s->boxes_offset);
}

STOKER_API const float *stoker_batch_soft_labels(const struct stoker_batch *b, uint32_t *classes)
{
	if (!b || !b->s->soft_offset)
		return NULL;
	if (classes)
		*classes = b->s->soft_classes;
	return (const float *)(slot_base(b) + b->s->soft_offset);
}

STOKER_API const void *stoker_batch_mix(const struct stoker_batch *b)
{
	if (!b || !b->s->mix_offset)
		return NULL;
	return slot_base(b) + b->s->mix_offset;
}

STOKER_API const int32_t *stoker_batch_shapes(const struct stoker_batch *b)
{
	if (!b || !b->s->detect || !b->s->shapes_offset)
		return NULL;
	return (const int32_t *)(slot_base(b) + b->s->shapes_offset);
}

STOKER_API const double *stoker_batch_ratio_pad(const struct stoker_batch *b)
{
	if (!b || !b->s->detect || !b->s->ratio_pad_offset)
		return NULL;
	return (const double *)(slot_base(b) + b->s->ratio_pad_offset);
}

STOKER_API const uint16_t *stoker_batch_masks(const struct stoker_batch *b, uint32_t *ratio, uint32_t *stride)
{
	if (!b || !b->s->masks_offset)
		return NULL;
	if (ratio)
		*ratio = b->s->mask_ratio;
	if (stride)
		*stride = b->s->mask_side * b->s->mask_side;
	return (const uint16_t *)(slot_base(b) + b->s->masks_offset);
}

STOKER_API const float *stoker_batch_keypoints(const struct stoker_batch *b, uint32_t *points, uint32_t *max_boxes)
{
	if (!b || !b->s->keypoints_offset)
		return NULL;
	if (points)
		*points = b->s->kpt_points;
	if (max_boxes)
		*max_boxes = b->s->max_boxes;
	return (const float *)(slot_base(b) + b->s->keypoints_offset);
}

STOKER_API const float *stoker_batch_obb(const struct stoker_batch *b, uint32_t *max_boxes)
{
	if (!b || !b->s->obb_offset)
		return NULL;
	if (max_boxes)
		*max_boxes = b->s->max_boxes;
	return (const float *)(slot_base(b) + b->s->obb_offset);
}

/* ---- sample names ---- */

static void names_chunk_clear(struct names_chunk *k)
{
	for (uint32_t i = 0; i < k->count; i++)
		free(k->paths[i]);
	free(k->paths);
	*k = (struct names_chunk){.first = UINT64_MAX};
}

/* Fetch the chunk starting at `first` into k (cleared first). The daemon
 * may answer with fewer names than asked: ask again from where it stopped. */
static int names_fetch(struct stoker *s, struct names_chunk *k, uint64_t first)
{
	uint64_t want = s->dataset_samples - first < NAMES_CHUNK ? s->dataset_samples - first : NAMES_CHUNK;
	char **paths = calloc(want, sizeof(*paths));
	uint32_t have = 0;
	int r = 0;

	if (!paths)
		return set_error(s, -ENOMEM, "out of memory");
	while (have < want) {
		Stoker__Message m = STOKER__MESSAGE__INIT, *reply = NULL;
		Stoker__NamesRequest req = STOKER__NAMES_REQUEST__INIT;
		const Stoker__Names *n;

		req.first = first + have;
		req.count = (uint32_t)(want - have);
		m.body_case = STOKER__MESSAGE__BODY_NAMES_REQUEST;
		m.names_request = &req;
		r = request(s, &m, STOKER__MESSAGE__BODY_NAMES, -1, &reply);
		if (r < 0)
			break;
		n = reply->names;
		if (n->first != req.first || n->n_names == 0 || n->n_names > req.count) {
			stoker__message__free_unpacked(reply, NULL);
			r = fail_connection(s, -EPROTO, "the daemon answered a names request with other names");
			break;
		}
		for (size_t i = 0; i < n->n_names && r == 0; i++) {
			const char *name = n->names[i];
			bool absolute = name[0] == '/';

			if (asprintf(&paths[have], "%s%s%s", absolute ? "" : n->dir, absolute ? "" : "/", name) < 0) {
				paths[have] = NULL;
				r = set_error(s, -ENOMEM, "out of memory");
				break;
			}
			have++;
		}
		stoker__message__free_unpacked(reply, NULL);
		if (r < 0)
			break;
	}
	if (r < 0) {
		for (uint32_t i = 0; i < have; i++)
			free(paths[i]);
		free(paths);
		return r;
	}
	k->first = first;
	k->count = have;
	k->paths = paths;
	return 0;
}

STOKER_API int stoker_sample_path(struct stoker *s, uint64_t index, char *buf, size_t size)
{
	uint64_t first = index / NAMES_CHUNK * NAMES_CHUNK;
	struct names_chunk *k = NULL, *oldest = NULL;
	size_t len;
	int r;

	if (!s || !buf)
		return -EINVAL;
	if (!s->attached)
		return set_error(s, -EINVAL, "not attached");
	if (index >= s->dataset_samples)
		return set_error(s, -ERANGE, "sample %" PRIu64 " is past the data set's %" PRIu64, index,
				 s->dataset_samples);
	for (uint32_t i = 0; i < NAMES_CHUNKS && !k; i++) {
		struct names_chunk *c = &s->names[i];

		if (c->paths && c->first == first)
			k = c;
		else if (!oldest || !c->paths || (oldest->paths && c->used < oldest->used))
			oldest = c;
	}
	if (!k) {
		struct names_chunk fresh = {.first = UINT64_MAX};

		r = names_fetch(s, &fresh, first);
		if (r < 0)
			return r;
		names_chunk_clear(oldest);
		*oldest = fresh;
		k = oldest;
	}
	k->used = ++s->names_clock;
	len = strlen(k->paths[index - first]);
	if (len >= size)
		return set_error(s, -ENOBUFS, "the path of sample %" PRIu64 " takes %zu bytes", index, len + 1);
	memcpy(buf, k->paths[index - first], len + 1);
	return len > INT_MAX ? INT_MAX : (int)len;
}

STOKER_API enum stoker_task stoker_task(const struct stoker *s)
{
	return s && s->attached && s->detect ? STOKER_TASK_DETECT : STOKER_TASK_CLASSIFY;
}

STOKER_API uint64_t stoker_label_errors(const struct stoker *s)
{
	return s && s->attached ? s->label_errors : 0;
}

STOKER_API uint64_t stoker_decode_error_files(const struct stoker *s)
{
	return s && s->attached ? s->decode_error_files : 0;
}

STOKER_API const char *stoker_class_name(const struct stoker *s, uint32_t cls)
{
	return s && s->attached && cls < s->n_class_names ? s->class_names[cls] : NULL;
}

/* ---- statistics ---- */

/* A growing text buffer; on allocation failure it stays failed. */
struct text {
	char *buf;
	size_t len, cap;
	bool failed;
};

static void text_printf(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void text_printf(struct text *t, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (t->failed)
		return;
	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(t->buf ? t->buf + t->len : NULL, t->buf ? t->cap - t->len : 0, fmt, ap);
		va_end(ap);
		if (n < 0) {
			t->failed = true;
			return;
		}
		if (t->buf && t->len + (size_t)n < t->cap) {
			t->len += (size_t)n;
			return;
		}
		size_t cap = t->cap ? t->cap : 1024;
		while (cap <= t->len + (size_t)n)
			cap *= 2;
		char *nb = realloc(t->buf, cap);
		if (!nb) {
			t->failed = true;
			return;
		}
		t->buf = nb;
		t->cap = cap;
	}
}

/* A JSON string literal, escaped. */
static void text_json_string(struct text *t, const char *s)
{
	text_printf(t, "\"");
	for (; s && *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			text_printf(t, "\\%c", ch);
		else if (ch < 0x20)
			text_printf(t, "\\u%04x", ch);
		else
			text_printf(t, "%c", ch);
	}
	text_printf(t, "\"");
}

static void stats_json(struct text *t, const Stoker__Stats *st)
{
	text_printf(t, "{\"daemon_version\": ");
	text_json_string(t, st->daemon_version);
	text_printf(t,
		    ", \"uptime_seconds\": %.3f, \"images_per_second\": %.3f, \"images_served\": %llu, "
		    "\"batches_served\": %llu, \"decode_errors\": %llu, \"decode_error_files\": %llu, "
		    "\"protocol_errors\": %llu, \"workers\": %u, \"worker_busy\": %.4f, \"clients\": [",
		    st->uptime_seconds, st->images_per_second, (unsigned long long)st->images_served,
		    (unsigned long long)st->batches_served, (unsigned long long)st->decode_errors,
		    (unsigned long long)st->decode_error_files, (unsigned long long)st->protocol_errors, st->workers,
		    st->worker_busy);
	for (size_t i = 0; i < st->n_clients; i++) {
		const Stoker__ClientStats *c = st->clients[i];

		text_printf(t,
			    "%s{\"pid\": %u, \"rank\": %u, \"world_size\": %u, \"epoch\": %llu, \"batches\": %llu, "
			    "\"images\": %llu, \"wait_seconds\": %.6f, \"id\": %llu, \"uid\": %u, "
			    "\"images_per_second\": %.3f, \"stall\": %.4f, \"ring_bytes\": %llu, "
			    "\"decode_error_files\": %llu, \"unreadable_samples\": %llu, \"device_bytes\": %llu, "
			    "\"device\": ",
			    i ? ", " : "", c->pid, c->rank, c->world_size, (unsigned long long)c->epoch,
			    (unsigned long long)c->batches, (unsigned long long)c->images, c->wait_seconds,
			    (unsigned long long)c->id, c->uid, c->images_per_second, c->stall,
			    (unsigned long long)c->ring_bytes, (unsigned long long)c->decode_error_files,
			    (unsigned long long)c->unreadable_samples, (unsigned long long)c->device_bytes);
		text_json_string(t, c->device ? c->device : "cpu");
		text_printf(t, ", \"dataset\": ");
		text_json_string(t, c->dataset);
		if (c->transforms) {
			text_printf(t, ", \"transforms\": ");
			text_json_string(t, c->transforms);
		}
		text_printf(t, "}");
	}
	text_printf(t, "], \"state\": ");
	text_json_string(t, st->state ? st->state : "serving");
	text_printf(t,
		    ", \"rss_bytes\": %llu, \"connections\": %u, \"worker_threads\": %u, "
		    "\"worker_busy_seconds\": %.3f, \"worker_batch_op_seconds\": %.6f",
		    (unsigned long long)st->rss_bytes, st->connections, st->worker_threads, st->worker_busy_seconds,
		    st->worker_batch_op_seconds);
	text_printf(t,
		    ", \"samples_decoded\": %llu, \"samples_copied\": %llu, \"label_errors\": %llu, "
		    "\"boxes_dropped\": %llu, \"ring_bytes\": %llu, \"memory_budget_bytes\": %llu, ",
		    (unsigned long long)st->samples_decoded, (unsigned long long)st->samples_copied,
		    (unsigned long long)st->label_errors, (unsigned long long)st->boxes_dropped,
		    (unsigned long long)st->ring_bytes, (unsigned long long)st->memory_budget_bytes);
	if (st->has_net_requests)
		text_printf(t,
			    "\"net_requests\": %llu, \"net_bytes\": %llu, \"net_retries\": %llu, \"net_errors\": %llu, "
			    "\"net_inflight\": %u, \"remote_cache_hits\": %llu, \"remote_fetched\": %llu, "
			    "\"remote_coalesced\": %llu, ",
			    (unsigned long long)st->net_requests, (unsigned long long)st->net_bytes,
			    (unsigned long long)st->net_retries, (unsigned long long)st->net_errors, st->net_inflight,
			    (unsigned long long)st->remote_cache_hits, (unsigned long long)st->remote_fetched,
			    (unsigned long long)st->remote_coalesced);
	text_printf(t, "\"device_bytes\": %llu, \"gpu_memory_budget_bytes\": %llu, \"cuda\": ",
		    (unsigned long long)st->device_bytes, (unsigned long long)st->gpu_memory_budget_bytes);
	text_json_string(t, st->cuda ? st->cuda : "unused");
	text_printf(t, ", \"cache\": ");
	if (!st->cache_policy) {
		text_printf(t, "null}\n");
		return;
	}
	text_printf(t, "{\"policy\": ");
	text_json_string(t, st->cache_policy);
	text_printf(t, ", \"budget_bytes\": %llu, \"bytes\": %llu", (unsigned long long)st->cache_budget_bytes,
		    (unsigned long long)st->cache_bytes);
	for (size_t i = 0; i < st->n_cache; i++) {
		const Stoker__CacheTierStats *c = st->cache[i];

		text_printf(t, ", ");
		text_json_string(t, c->tier);
		text_printf(t,
			    ": {\"hits\": %llu, \"misses\": %llu, \"entries\": %llu, \"bytes\": %llu, "
			    "\"evictions\": %llu, \"rejected\": %llu}",
			    (unsigned long long)c->hits, (unsigned long long)c->misses, (unsigned long long)c->entries,
			    (unsigned long long)c->bytes, (unsigned long long)c->evictions,
			    (unsigned long long)c->rejected);
	}
	text_printf(t, "}}\n");
}

static void stats_text(struct text *t, const Stoker__Stats *st)
{
	text_printf(t,
		    "stokerd %s, up %.0f s, %s\n"
		    "  images/s        %.1f\n"
		    "  images served   %llu\n"
		    "  batches served  %llu\n"
		    "  decode errors   %llu (%llu distinct files)\n"
		    "  protocol errors %llu\n"
		    "  workers         %u (%.0f%% busy)\n"
		    "  clients         %zu\n",
		    st->daemon_version ? st->daemon_version : "?", st->uptime_seconds,
		    st->state ? st->state : "serving", st->images_per_second, (unsigned long long)st->images_served,
		    (unsigned long long)st->batches_served, (unsigned long long)st->decode_errors,
		    (unsigned long long)st->decode_error_files, (unsigned long long)st->protocol_errors, st->workers,
		    st->worker_busy * 100.0, st->n_clients);
	if (st->label_errors || st->boxes_dropped)
		text_printf(t,
			    "  label errors    %llu (objects dropped from label files)\n  boxes dropped   %llu (over "
			    "max_boxes)\n",
			    (unsigned long long)st->label_errors, (unsigned long long)st->boxes_dropped);
	if (st->net_requests || st->remote_cache_hits)
		text_printf(
			t,
			"  network         %llu requests, %.1f MiB, %llu retries, %llu errors; remote samples: %llu "
			"fetched, %llu from the cache\n",
			(unsigned long long)st->net_requests, st->net_bytes / 1048576.0,
			(unsigned long long)st->net_retries, (unsigned long long)st->net_errors,
			(unsigned long long)st->remote_fetched, (unsigned long long)st->remote_cache_hits);
	text_printf(t, "  memory          %.1f MiB of %.1f MiB budget in rings\n", st->ring_bytes / 1048576.0,
		    st->memory_budget_bytes / 1048576.0);
	text_printf(t, "  gpu             %.1f MiB in device rings, budget %s; CUDA %s\n", st->device_bytes / 1048576.0,
		    st->gpu_memory_budget_bytes ? "per GPU as configured" : "each GPU's free memory",
		    st->cuda ? st->cuda : "unused");
	if (st->cache_policy) {
		text_printf(t, "  cache (%s)    %.1f of %.1f MiB\n", st->cache_policy, st->cache_bytes / 1048576.0,
			    st->cache_budget_bytes / 1048576.0);
		for (size_t i = 0; i < st->n_cache; i++) {
			const Stoker__CacheTierStats *c = st->cache[i];
			uint64_t lookups = c->hits + c->misses;

			text_printf(t, "    %-8s      %5.1f%% hits (%llu/%llu), %llu entries, %.1f MiB, %llu evicted\n",
				    c->tier, lookups ? 100.0 * (double)c->hits / (double)lookups : 0.0,
				    (unsigned long long)c->hits, (unsigned long long)lookups,
				    (unsigned long long)c->entries, c->bytes / 1048576.0,
				    (unsigned long long)c->evictions);
		}
	}
	if (st->n_clients)
		text_printf(t, "\n  %8s %9s %6s %10s %12s %9s %6s %10s  %s\n", "PID", "RANK", "EPOCH", "BATCHES",
			    "IMAGES", "IMAGES/S", "STALL", "WAIT(s)", "DATASET");
	for (size_t i = 0; i < st->n_clients; i++) {
		const Stoker__ClientStats *c = st->clients[i];

		text_printf(t, "  %8u %4u/%-4u %6llu %10llu %12llu %9.1f %5.1f%% %10.3f  %s\n", c->pid, c->rank,
			    c->world_size, (unsigned long long)c->epoch, (unsigned long long)c->batches,
			    (unsigned long long)c->images, c->images_per_second, c->stall * 100.0, c->wait_seconds,
			    c->dataset ? c->dataset : "");
	}
}

static int stats_fetch(struct stoker *s, bool json, char **out)
{
	Stoker__Message m = STOKER__MESSAGE__INIT, *reply = NULL;
	Stoker__StatsRequest req = STOKER__STATS_REQUEST__INIT;
	struct text t = {0};
	int r;

	if (!s || !out)
		return -EINVAL;
	m.body_case = STOKER__MESSAGE__BODY_STATS_REQUEST;
	m.stats_request = &req;
	r = request(s, &m, STOKER__MESSAGE__BODY_STATS, HANDSHAKE_TIMEOUT_MS, &reply);
	if (r < 0)
		return r;
	if (json)
		stats_json(&t, reply->stats);
	else
		stats_text(&t, reply->stats);
	stoker__message__free_unpacked(reply, NULL);
	if (t.failed || !t.buf) {
		free(t.buf);
		return -ENOMEM;
	}
	*out = t.buf;
	return 0;
}

STOKER_API int stoker_stats_json(struct stoker *s, char **json_out)
{
	return stats_fetch(s, true, json_out);
}

STOKER_API int stoker_stats_text(struct stoker *s, char **text_out)
{
	return stats_fetch(s, false, text_out);
}

/* ---- statistics for programs ---- */

struct stoker_stats {
	Stoker__Message *msg;
};

STOKER_API int stoker_stats_get(struct stoker *s, struct stoker_stats **out)
{
	Stoker__Message m = STOKER__MESSAGE__INIT, *reply = NULL;
	Stoker__StatsRequest req = STOKER__STATS_REQUEST__INIT;
	struct stoker_stats *st;
	int r;

	if (!s || !out)
		return -EINVAL;
	st = calloc(1, sizeof(*st));
	if (!st)
		return -ENOMEM;
	m.body_case = STOKER__MESSAGE__BODY_STATS_REQUEST;
	m.stats_request = &req;
	r = request(s, &m, STOKER__MESSAGE__BODY_STATS, HANDSHAKE_TIMEOUT_MS, &reply);
	if (r < 0) {
		free(st);
		return r;
	}
	st->msg = reply;
	*out = st;
	return 0;
}

STOKER_API void stoker_stats_free(struct stoker_stats *st)
{
	if (!st)
		return;
	stoker__message__free_unpacked(st->msg, NULL);
	free(st);
}

/* Fields are found by name in the protocol's descriptors, so every number
 * the daemon reports is reachable, new ones included. */
static const ProtobufCFieldDescriptor *field_of(const ProtobufCMessage *m, const char *name)
{
	const ProtobufCFieldDescriptor *f;

	if (!m || !name)
		return NULL;
	f = protobuf_c_message_descriptor_get_field_by_name(m->descriptor, name);
	if (!f || f->label == PROTOBUF_C_LABEL_REPEATED)
		return f;
	/* An optional scalar the daemon did not set. */
	if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->quantifier_offset &&
	    !*(const protobuf_c_boolean *)((const char *)m + f->quantifier_offset))
		return NULL;
	return f;
}

static int message_number(const ProtobufCMessage *m, const char *name, double *out)
{
	const ProtobufCFieldDescriptor *f = field_of(m, name);
	const char *p;

	if (!f || f->label == PROTOBUF_C_LABEL_REPEATED)
		return -ENOENT;
	p = (const char *)m + f->offset;
	switch (f->type) {
	case PROTOBUF_C_TYPE_UINT32:
	case PROTOBUF_C_TYPE_FIXED32: *out = *(const uint32_t *)p; return 0;
	case PROTOBUF_C_TYPE_INT32:
	case PROTOBUF_C_TYPE_SINT32:
	case PROTOBUF_C_TYPE_SFIXED32:
	case PROTOBUF_C_TYPE_ENUM: *out = *(const int32_t *)p; return 0;
	case PROTOBUF_C_TYPE_UINT64:
	case PROTOBUF_C_TYPE_FIXED64: *out = (double)*(const uint64_t *)p; return 0;
	case PROTOBUF_C_TYPE_INT64:
	case PROTOBUF_C_TYPE_SINT64:
	case PROTOBUF_C_TYPE_SFIXED64: *out = (double)*(const int64_t *)p; return 0;
	case PROTOBUF_C_TYPE_DOUBLE: *out = *(const double *)p; return 0;
	case PROTOBUF_C_TYPE_FLOAT: *out = *(const float *)p; return 0;
	case PROTOBUF_C_TYPE_BOOL: *out = *(const protobuf_c_boolean *)p ? 1.0 : 0.0; return 0;
	default: return -ENOENT;
	}
}

static const char *message_string(const ProtobufCMessage *m, const char *name)
{
	const ProtobufCFieldDescriptor *f = field_of(m, name);

	if (!f || f->label == PROTOBUF_C_LABEL_REPEATED || f->type != PROTOBUF_C_TYPE_STRING)
		return NULL;
	return *(char *const *)((const char *)m + f->offset);
}

/* Record i of a repeated message field, or NULL. */
static const ProtobufCMessage *message_item(const ProtobufCMessage *m, const char *list, size_t i)
{
	const ProtobufCFieldDescriptor *f = field_of(m, list);

	if (!f || f->label != PROTOBUF_C_LABEL_REPEATED || f->type != PROTOBUF_C_TYPE_MESSAGE ||
	    i >= *(const size_t *)((const char *)m + f->quantifier_offset))
		return NULL;
	return (*(ProtobufCMessage *const *const *)((const char *)m + f->offset))[i];
}

static const ProtobufCMessage *stats_message(const struct stoker_stats *st)
{
	return st && st->msg && st->msg->stats ? &st->msg->stats->base : NULL;
}

STOKER_API int stoker_stats_number(const struct stoker_stats *st, const char *name, double *out)
{
	double v;
	int r;

	if (!out)
		return -EINVAL;
	r = message_number(stats_message(st), name, &v);
	if (r == 0)
		*out = v;
	return r;
}

STOKER_API const char *stoker_stats_string(const struct stoker_stats *st, const char *name)
{
	return message_string(stats_message(st), name);
}

STOKER_API size_t stoker_stats_count(const struct stoker_stats *st, const char *list)
{
	const ProtobufCMessage *m = stats_message(st);
	const ProtobufCFieldDescriptor *f = field_of(m, list);

	if (!f || f->label != PROTOBUF_C_LABEL_REPEATED || f->type != PROTOBUF_C_TYPE_MESSAGE)
		return 0;
	return *(const size_t *)((const char *)m + f->quantifier_offset);
}

STOKER_API int stoker_stats_item_number(const struct stoker_stats *st, const char *list, size_t i, const char *name,
					double *out)
{
	double v;
	int r;

	if (!out)
		return -EINVAL;
	r = message_number(message_item(stats_message(st), list, i), name, &v);
	if (r == 0)
		*out = v;
	return r;
}

STOKER_API const char *stoker_stats_item_string(const struct stoker_stats *st, const char *list, size_t i,
						const char *name)
{
	return message_string(message_item(stats_message(st), list, i), name);
}

/* ---- control ---- */

static int text_done(struct text *t, char **out)
{
	if (t->failed || !t->buf) {
		free(t->buf);
		return -ENOMEM;
	}
	*out = t->buf;
	return 0;
}

static void config_json(struct text *t, const Stoker__ConfigReply *c)
{
	text_printf(t, "{\"files\": [");
	for (size_t i = 0; i < c->n_files; i++) {
		text_printf(t, "%s", i ? ", " : "");
		text_json_string(t, c->files[i]);
	}
	text_printf(t, "], \"settings\": {");
	for (size_t i = 0; i < c->n_entries; i++) {
		const Stoker__ConfigEntry *e = c->entries[i];

		text_printf(t, "%s", i ? ", " : "");
		text_json_string(t, e->key);
		text_printf(t, ": {\"value\": ");
		text_json_string(t, e->value);
		text_printf(t, ", \"origin\": ");
		text_json_string(t, e->origin);
		text_printf(t, ", \"live\": %s, \"effective\": ", e->live ? "true" : "false");
		if (e->effective)
			text_json_string(t, e->effective);
		else
			text_printf(t, "null");
		text_printf(t, ", \"pending\": ");
		if (e->pending)
			text_json_string(t, e->pending);
		else
			text_printf(t, "null");
		text_printf(t, "}");
	}
	text_printf(t, "}}\n");
}

/* Valid INI: the merged configuration, each key's origin in a comment. */
static void config_text(struct text *t, const Stoker__ConfigReply *c)
{
	text_printf(t, "# stokerd's configuration as it stands; files read, in order:\n");
	for (size_t i = 0; i < c->n_files; i++)
		text_printf(t, "#   %s\n", c->files[i]);
	if (!c->n_files)
		text_printf(t, "#   (none: built-in defaults and flags only)\n");
	text_printf(t, "[stokerd]\n");
	for (size_t i = 0; i < c->n_entries; i++) {
		const Stoker__ConfigEntry *e = c->entries[i];
		int n = 0;

		text_printf(t, "%s = %s%n", e->key, e->value, &n);
		text_printf(t, "%*s # %s", n < 40 ? 40 - n : 1, "", e->origin);
		if (e->effective)
			text_printf(t, "; in effect: %s", e->effective);
		if (!e->live)
			text_printf(t, "; restart to change");
		if (e->pending)
			text_printf(t, "; reloaded value %s waits for a restart", e->pending);
		text_printf(t, "\n");
	}
}

static int config_fetch(struct stoker *s, bool json, char **out)
{
	Stoker__Message m = STOKER__MESSAGE__INIT, *reply = NULL;
	Stoker__ConfigGet req = STOKER__CONFIG_GET__INIT;
	struct text t = {0};
	int r;

	if (!s || !out)
		return -EINVAL;
	m.body_case = STOKER__MESSAGE__BODY_CONFIG_GET;
	m.config_get = &req;
	r = request(s, &m, STOKER__MESSAGE__BODY_CONFIG_REPLY, HANDSHAKE_TIMEOUT_MS, &reply);
	if (r < 0)
		return r;
	if (json)
		config_json(&t, reply->config_reply);
	else
		config_text(&t, reply->config_reply);
	stoker__message__free_unpacked(reply, NULL);
	return text_done(&t, out);
}

STOKER_API int stoker_config_json(struct stoker *s, char **json_out)
{
	return config_fetch(s, true, json_out);
}

STOKER_API int stoker_config_text(struct stoker *s, char **text_out)
{
	return config_fetch(s, false, text_out);
}

static bool control_text_ok(const char *v)
{
	return v && strlen(v) <= STOKER__CONTROL_LIMITS__CONTROL_MAX_TEXT;
}

STOKER_API int stoker_config_set(struct stoker *s, const char *key, const char *value)
{
	Stoker__Message m = STOKER__MESSAGE__INIT, *reply = NULL;
	Stoker__ConfigSet req = STOKER__CONFIG_SET__INIT;
	int r;

	if (!s || !control_text_ok(key) || !control_text_ok(value))
		return -EINVAL;
	req.key = (char *)key;
	req.value = (char *)value;
	m.body_case = STOKER__MESSAGE__BODY_CONFIG_SET;
	m.config_set = &req;
	r = request(s, &m, STOKER__MESSAGE__BODY_CONFIG_SET_REPLY, HANDSHAKE_TIMEOUT_MS, &reply);
	if (r < 0)
		return r;
	stoker__message__free_unpacked(reply, NULL);
	return 0;
}

static void word_list(struct text *t, const char *title, char **words, size_t n)
{
	if (!n)
		return;
	text_printf(t, "%s:", title);
	for (size_t i = 0; i < n; i++)
		text_printf(t, " %s", words[i]);
	text_printf(t, "\n");
}

STOKER_API int stoker_reload(struct stoker *s, char **report_out)
{
	Stoker__Message m = STOKER__MESSAGE__INIT, *reply = NULL;
	Stoker__Reload req = STOKER__RELOAD__INIT;
	const Stoker__ReloadReply *rr;
	struct text t = {0};
	int r;

	if (!s || !report_out)
		return -EINVAL;
	m.body_case = STOKER__MESSAGE__BODY_RELOAD;
	m.reload = &req;
	r = request(s, &m, STOKER__MESSAGE__BODY_RELOAD_REPLY, HANDSHAKE_TIMEOUT_MS, &reply);
	if (r < 0)
		return r;
	rr = reply->reload_reply;
	word_list(&t, "files", rr->files, rr->n_files);
	word_list(&t, "applied", rr->applied, rr->n_applied);
	word_list(&t, "restart required", rr->restart_required, rr->n_restart_required);
	if (!rr->n_applied && !rr->n_restart_required)
		text_printf(&t, "nothing changed\n");
	stoker__message__free_unpacked(reply, NULL);
	return text_done(&t, report_out);
}

STOKER_API int stoker_drain(struct stoker *s, uint32_t timeout_seconds, uint32_t *clients_out)
{
	Stoker__Message m = STOKER__MESSAGE__INIT, *reply = NULL;
	Stoker__Drain req = STOKER__DRAIN__INIT;
	int r;

	if (!s)
		return -EINVAL;
	req.has_timeout_seconds = true;
	req.timeout_seconds = timeout_seconds;
	m.body_case = STOKER__MESSAGE__BODY_DRAIN;
	m.drain = &req;
	r = request(s, &m, STOKER__MESSAGE__BODY_DRAIN_REPLY, HANDSHAKE_TIMEOUT_MS, &reply);
	if (r < 0)
		return r;
	if (clients_out)
		*clients_out = reply->drain_reply->clients;
	stoker__message__free_unpacked(reply, NULL);
	return 0;
}

STOKER_API int stoker_metrics(struct stoker *s, char **text_out)
{
	Stoker__Message m = STOKER__MESSAGE__INIT, *reply = NULL;
	Stoker__MetricsRequest req = STOKER__METRICS_REQUEST__INIT;
	char *text;
	int r;

	if (!s || !text_out)
		return -EINVAL;
	m.body_case = STOKER__MESSAGE__BODY_METRICS_REQUEST;
	m.metrics_request = &req;
	r = request(s, &m, STOKER__MESSAGE__BODY_METRICS, HANDSHAKE_TIMEOUT_MS, &reply);
	if (r < 0)
		return r;
	text = strdup(reply->metrics->text);
	stoker__message__free_unpacked(reply, NULL);
	if (!text)
		return -ENOMEM;
	*text_out = text;
	return 0;
}
