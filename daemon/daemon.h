/* SPDX-License-Identifier: MIT */
/*
 * The daemon's shared state, owned by the loop thread. Worker threads never
 * see these structures (they get struct batch_job), see docs/threads.md.
 */
#ifndef STOKER_DAEMON_H
#define STOKER_DAEMON_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

#include "config.h"
#include "frame.h"

struct pool;
struct session;
struct dataset;
struct attach_request;
struct batch_job;

/* One accepted client connection. */
struct conn {
	struct daemon *d;
	struct conn *prev, *next;
	int fd;
	uv_poll_t poll;
	int poll_events;
	struct frame_in in;
	struct frame_out out;
	bool greeted;
	bool closing; /* no more input; close once output is flushed */
	bool closed;
	pid_t pid;
	uid_t uid;
	gid_t gid;
	uint64_t id;
	struct session *session;        /* after Attach */
	struct attach_request *attaching; /* while the data set is scanned */
};

/* Samples of the last few seconds, for rates. */
#define STATS_WINDOW 6
struct stats_sample {
	uint64_t t_ns;
	uint64_t images;
	uint64_t busy_ns;
};

struct daemon {
	uv_loop_t *loop;
	struct config cfg;
	struct pool *pool;
	struct cache *cache; /* NULL when cache_bytes is 0 */
	uint64_t ring_bytes; /* all rings alive, against cfg.memory_budget */
	bool pool_full; /* a session waits for queue room */
	int listen_fd;
	bool owns_socket_path; /* we bound it, so we unlink it */
	uv_poll_t listen_poll;
	bool listening;
	struct conn *conns;
	uint32_t nconns;
	uint64_t next_conn_id;
	struct dataset **datasets; /* open data sets, shared by sessions */
	size_t ndatasets;
	uv_signal_t sig_term, sig_int;
	uv_timer_t stats_timer;
	uv_timer_t shutdown_timer;
	bool stopping;
	uint64_t start_ns;
	/* Counters, loop thread only. */
	uint64_t images_served;
	uint64_t batches_served;
	uint64_t protocol_errors;
	struct stats_sample window[STATS_WINDOW];
	unsigned window_next;
};

uint64_t daemon_now_ns(void);

/* server.c: sockets and frames. */
int server_listen(struct daemon *d);
void server_stop_listening(struct daemon *d);
/* Shutdown: tell every client why, and close it once its replies are out;
 * with `force`, close at once whatever is unsent. */
void server_close_all(struct daemon *d, bool force);
/* Queue a message (and fd, ownership passes) and flush what the socket
 * takes. On failure the connection is closed. */
int conn_send(struct conn *c, const Stoker__Message *msg, int fd);
int conn_send_error(struct conn *c, Stoker__ErrorCode code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Flush then close; the struct is freed later by libuv. */
void conn_close(struct conn *c, const char *why);

/* session.c: attach, epochs, slots. */
void session_handle_attach(struct conn *c, const Stoker__Attach *a);
void session_handle_start_epoch(struct conn *c, const Stoker__StartEpoch *m);
void session_handle_release(struct conn *c, const Stoker__Release *m);
/* The connection is gone: cancel its work, free once workers are done. */
void session_detach(struct conn *c);
/* Give waiting sessions a chance at queue room. */
void sessions_schedule_all(struct daemon *d);
/* The pool's completion callback. */
void session_job_done(struct batch_job *job, void *userdata);

/* control.c: statistics. */
void control_handle_stats(struct conn *c);
void control_sample(struct daemon *d);

#endif
