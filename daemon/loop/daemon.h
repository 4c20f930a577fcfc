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

#include "clock.h"
#include "config.h"
#include "frame.h"
#include "log.h"

struct pool;
struct session;
struct dataset;
struct attach_request;
struct batch_job;
struct metrics;
struct fetch;
struct prefetch;

/* Samples of the last few seconds, for rates. */
#define STATS_WINDOW 6
struct stats_sample {
	uint64_t t_ns;
	uint64_t images;
	uint64_t busy_ns;
};

/* A client's samples, for its images/s and stall. */
struct client_sample {
	uint64_t t_ns;
	uint64_t images;
	uint64_t wait_ns;
};

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
	struct session *session;          /* after Attach */
	struct attach_request *attaching; /* while the data set is scanned */
	bool shutdown_sent;               /* Shutdown went out */
	uint64_t last_input_ns;           /* when it last sent us anything */
	uint64_t closing_since_ns;        /* when conn_close began waiting to flush */
	/* The peer process, for the stopped-client lease (server.c): its start
	 * time in /proc/PID/stat (0: not visible, never evicted), and since when
	 * it has been seen stopped (0: not stopped). */
	uint64_t peer_start_time;
	uint64_t stopped_since_ns;
	struct client_sample window[STATS_WINDOW];
	unsigned window_next;
};

/* Where the configuration comes from, kept for reloads (service.c). */
struct config_state {
	const char *root;                     /* --config-root / $STOKER_CONFIG_ROOT; NULL: / */
	const char *file;                     /* --config FILE: replaces the file layers */
	const char *cmdline[CONFIG_MAX_KEYS]; /* flags, by key index (argv strings) */
	char *runtime[CONFIG_MAX_KEYS];       /* stokerctl set, by key index */
	char *pending[CONFIG_MAX_KEYS];       /* reloaded values waiting for a restart */
	struct config raw;                    /* as configured: "auto" and 0 unresolved */
	struct config_origins origins;
	struct config_files files;
};

struct daemon {
	uv_loop_t *loop;
	struct config cfg; /* in effect, "auto" values resolved */
	struct config_state conf;
	struct pool *pool;
	struct cache *cache;                           /* NULL when cache_bytes is 0 */
	uint64_t ring_bytes;                           /* all rings alive, against cfg.memory_budget */
	uint64_t fit_bytes;                            /* detection sessions' partner images, against it too */
	struct gpu *gpu;                               /* CUDA delivery (gpu.h); NULL: not in this process */
	uint64_t device_bytes;                         /* every CUDA client's device ring */
	bool pool_full;                                /* a session waits for queue room */
	struct fetch *fetch;                           /* HTTP/S3 transfers (fetch.h) */
	struct prefetch *prefetch;                     /* remote samples fetched before decoding */
	struct batch_job *fetched_head, *fetched_tail; /* fetched, waiting for queue room */
	int listen_fd;
	int reserve_fd;           /* spare descriptor, given up to refuse a client clearly at EMFILE */
	uint64_t fd_limit;        /* RLIMIT_NOFILE (raised to the hard limit); 0: none */
	bool fd_exhausted;        /* refusing for want of descriptors (logged once) */
	uint64_t refused_fds;     /* connections refused for want of descriptors */
	uint64_t refused_clients; /* refused at max_clients since the last accepted one */
	bool accept_paused;       /* listening poll stopped until the next housekeeping tick */
	bool owns_socket_path;    /* we bound it, so we unlink it */
	/* What clients connect to, as said in STATUS= and the log: the
	 * configured path, or the activated socket's own name ("@x" when
	 * abstract). */
	char listen_name[112];
	uv_poll_t listen_poll;
	bool listening;
	struct conn *conns;
	uint32_t nconns;
	uint64_t next_conn_id;
	struct dataset **datasets; /* open data sets, shared by sessions */
	size_t ndatasets;
	/* The socket's access rule (server.c): when it is not world-writable,
	 * peers need its group. */
	bool socket_restricted;
	gid_t socket_gid;
	/* Life as a service (service.c). */
	uv_signal_t sig_term, sig_int, sig_hup;
	uv_timer_t stats_timer;
	uv_timer_t watchdog_timer;
	uv_timer_t stop_timer; /* stop_timeout for in-flight work, then drain's timeout */
	uv_timer_t shutdown_timer;
	uv_timer_t conn_timer; /* stopped-client leases, closing connections (server.c) */
	uv_check_t life_check; /* drain and stop progress, after each loop turn */
	unsigned stats_ticks;
	bool draining; /* no new clients; stop when the last one leaves */
	bool stopping; /* no new work; close once in-flight work is done */
	bool stopped;  /* connections closed, pool gone */
	char stop_reason[128];
	uint64_t start_ns;
	uint64_t idle_since_ns;  /* user mode: no connection since then (0: busy) */
	struct metrics *metrics; /* metrics.c: textfile and HTTP listener */
	/* Counters, loop thread only. */
	uint64_t images_served;
	uint64_t batches_served;
	uint64_t protocol_errors;
	uint64_t label_errors; /* objects dropped from the label files of data sets opened */
	struct stats_sample window[STATS_WINDOW];
	unsigned window_next;
};

/* server.c: sockets and frames. */
int server_listen(struct daemon *d);
void server_stop_listening(struct daemon *d);
/* Serve an accepted, connected socket (non-blocking, close-on-exec; its
 * ownership passes) whose peer has these credentials. Used by accept, and
 * by the fuzzer to drive a connection over a socketpair. */
int server_adopt(struct daemon *d, int fd, pid_t pid, uid_t uid, gid_t gid);
/* Periodic connection housekeeping (a timer of service.c): evict clients
 * stopped longer than stopped_lease_ms, close connections stuck flushing
 * to a peer that stopped reading. Returns the period wanted next (ms). */
uint64_t server_housekeeping(struct daemon *d);
/* Shutdown: tell every client why, and close it once its replies are out;
 * with `force`, close at once whatever is unsent. */
void server_close_all(struct daemon *d, bool force);
/* Queue a message (and fd, ownership passes) and flush what the socket
 * takes. On failure the connection is closed. */
int conn_send(struct conn *c, const Stoker__Message *msg, int fd);
/* With two fds (a device ring's allocation and release words). */
int conn_send2(struct conn *c, const Stoker__Message *msg, int fd, int fd2);
int conn_send_error(struct conn *c, Stoker__ErrorCode code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Flush then close; the struct is freed later by libuv. */
void conn_close(struct conn *c, const char *why);
/* Log a line about a connection, with its context in front: conn_log
 * "client ID (pid PID): ", conn_log_cred "client ID (pid PID, uid UID): "
 * (access decisions and control requests, where who asked matters). */
void conn_log(enum log_level level, const struct conn *c, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void conn_log_cred(enum log_level level, const struct conn *c, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* attach.c: an Attach request, up to its session; a client that leaves
 * while its data set is scanned is forgotten by the scan. */
void session_handle_attach(struct conn *c, const Stoker__Attach *a);
void attach_forget(struct conn *c);
/* session.c: epochs, slots. */
void session_handle_start_epoch(struct conn *c, const Stoker__StartEpoch *m);
void session_handle_release(struct conn *c, const Stoker__Release *m);
/* The file names of samples of the attached data set (a Names reply). */
void session_handle_names(struct conn *c, const Stoker__NamesRequest *m);
/* The connection is gone: cancel its work, free once workers are done. */
void session_detach(struct conn *c);
/* At exit: drop the listing cache's data sets and the registry. */
void datasets_free_all(struct daemon *d);
/* Give waiting sessions a chance at queue room. */
void sessions_schedule_all(struct daemon *d);
/* The pool's completion callback. */
void session_job_done(struct batch_job *job, void *userdata);
/* Files of the session's data set found unreadable so far. */
uint64_t session_decode_error_files(const struct session *s);
/* The fetch stage's: a job's remote samples are here; queue it. */
void session_fetched(struct batch_job *job, void *userdata);

/* May this peer reconfigure the daemon? Root, the daemon's own user, or a
 * member of admin_group (server.c). */
bool conn_is_admin(const struct conn *c);
/* Shutdown to every client that has not had it (server.c). */
void server_announce_shutdown(struct daemon *d, const char *reason);

/* control.c: statistics and control requests. */
void control_handle_stats(struct conn *c);
void control_handle_config_get(struct conn *c);
void control_handle_config_set(struct conn *c, const Stoker__ConfigSet *m);
void control_handle_reload(struct conn *c);
void control_handle_drain(struct conn *c, const Stoker__Drain *m);
void control_handle_metrics(struct conn *c);
void control_sample(struct daemon *d);
/* Over the last few seconds: images/s and the workers' busy share. */
void control_rates(const struct daemon *d, double *images_per_second, double *worker_busy);
/* Attached (or attaching) clients, and their jobs in the pool. */
uint32_t control_attached(const struct daemon *d);
uint32_t control_inflight(const struct daemon *d);
/* The daemon's resident memory. */
uint64_t control_rss_bytes(void);

/* service.c: configuration layers and live changes, systemd, drain, stop. */
struct service_report {
	char applied[1024]; /* keys, space-separated */
	char restart[1024]; /* changed keys waiting for a restart */
};
/* Defaults, file layers, flags, runtime changes; validated. */
int service_load_config(struct daemon *d, struct config *raw, struct config_origins *o, struct config_files *files,
			char *errbuf, size_t errlen);
/* Signals, timers, watchdog, metrics; then READY=1. */
int service_start(struct daemon *d);
/* Re-read the files and apply what changed. */
int service_reload(struct daemon *d, struct service_report *rep, char *errbuf, size_t errlen);
/* stokerctl set: -ENOENT unknown key, -EINVAL bad value (err says why),
 * -EOPNOTSUPP for a key that needs a restart. */
int service_set(struct daemon *d, const char *key, const char *value, char *errbuf, size_t errlen);
/* No new clients; stop once the attached ones have left (or after
 * timeout_s, 0: never). Returns the clients it waits for. */
uint32_t service_drain(struct daemon *d, uint32_t timeout_s);
/* Stop accepting, tell clients, finish in-flight work, exit. */
void service_stop(struct daemon *d, const char *why);
/* "serving", "draining" or "stopping". */
const char *service_state(const struct daemon *d);
/* What "auto"/0 resolved to for key i, if it differs from the raw value. */
bool service_effective(const struct daemon *d, size_t i, char *buf, size_t size);

/* usermode.c: a daemon that one user started for itself (user_mode = 1,
 * docs/slurm.md). Before listening: the socket's directory must be the
 * daemon's own and 0700 (-EPERM, logged with the reason); umask 077. */
int usermode_prepare(struct daemon *d);
/* Whether a peer of this uid may use the daemon: in user mode, only the
 * daemon's own uid. */
bool usermode_admits(const struct daemon *d, uid_t uid);
/* Each second: in user mode, stop after idle_exit_s with no connection,
 * unless a client holds the starters' lock beside the socket. */
void usermode_tick(struct daemon *d);

/* metrics.c: Prometheus text exposition. */
/* The exposition (malloc'd, NUL-terminated). -ENOMEM. */
int metrics_render(struct daemon *d, char **out, size_t *len);
/* Start, or follow a change of, metrics_textfile and metrics_listen. */
int metrics_start(struct daemon *d);
void metrics_reconfigure(struct daemon *d);
void metrics_stop(struct daemon *d);

#endif
