/* SPDX-License-Identifier: MIT */
/*
 * Sockets: the listening socket, accepted connections, frames in and out,
 * and dispatch of each message to its handler. libuv cannot pass fds over a
 * stream, so connections are plain non-blocking sockets driven by uv_poll,
 * read and written with recvmsg/sendmsg (proto/frame.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"
#include "log.h"
#include "workers.h"

/* Replies waiting for a client that stopped reading; beyond this it is cut
 * off. BatchReady messages are bounded by slots, so only abuse gets here. */
#define CONN_MAX_QUEUED_BYTES (1u << 20)
/* A connection closing with replies unsent gets this long for its peer to
 * take them; a peer that stopped reading does not hold its fd for ever. */
#define CONN_CLOSE_GRACE_MS 5000

static void conn_on_closed(uv_handle_t *h)
{
	struct conn *c = h->data;

	frame_in_release(&c->in);
	frame_out_release(&c->out);
	free(c);
}

static void conn_finish_close(struct conn *c)
{
	struct daemon *d = c->d;

	if (c->closed)
		return;
	c->closed = true;
	session_detach(c);
	if (c->prev)
		c->prev->next = c->next;
	else
		d->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	d->nconns--;
	/* libuv takes the fd out of epoll in uv_close(): before close(), or it
	 * would touch a number a worker may already have reopened. */
	uv_poll_stop(&c->poll);
	uv_close((uv_handle_t *)&c->poll, conn_on_closed);
	close(c->fd);
	c->fd = -1;
}

static void conn_update_poll(struct conn *c);

void conn_close(struct conn *c, const char *why)
{
	if (c->closed)
		return;
	if (why)
		conn_log(LOG_LVL_INFO, c, "disconnected: %s", why);
	else
		conn_log(LOG_LVL_DEBUG, c, "disconnected");
	if (!c->closing) {
		c->closing = true;
		/* Input stops now; the session's slots return at once. */
		session_detach(c);
	}
	if (frame_out_empty(&c->out) || frame_out_flush(&c->out, c->fd) != -EAGAIN) {
		conn_finish_close(c);
		return;
	}
	if (!c->closing_since_ns)
		c->closing_since_ns = monotonic_ns();
	conn_update_poll(c);
}

/* A peer that broke the protocol: count it, say why, hang up. */
static void conn_protocol_error(struct conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void conn_protocol_error(struct conn *c, const char *fmt, ...)
{
	char why[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	c->d->protocol_errors++;
	conn_send_error(c, STOKER__ERROR_CODE__PROTOCOL_ERROR, "%s", why);
	conn_close(c, why);
}

int conn_send(struct conn *c, const Stoker__Message *msg, int fd)
{
	return conn_send2(c, msg, fd, -1);
}

int conn_send2(struct conn *c, const Stoker__Message *msg, int fd, int fd2)
{
	int r;

	if (c->closed) {
		if (fd >= 0)
			close(fd);
		if (fd2 >= 0)
			close(fd2);
		return -ENOTCONN;
	}
	r = frame_out_push2(&c->out, msg, fd, fd2);
	if (r < 0) {
		/* Waiting to flush a peer that does not read would hold its fd
		 * and memory for ever: drop it now, unsent replies and all. */
		conn_log(LOG_LVL_INFO, c, "disconnected: %s",
			 r == -ENOBUFS ? "not reading its replies" : "out of memory queueing a reply");
		if (!c->closing) {
			c->closing = true;
			session_detach(c);
		}
		conn_finish_close(c);
		return r;
	}
	r = frame_out_flush(&c->out, c->fd);
	if (r == -EAGAIN) {
		conn_update_poll(c);
		return 0;
	}
	if (r < 0) {
		char why[64];

		snprintf(why, sizeof(why), "send: %s", strerror(-r));
		conn_finish_close(c);
		conn_log(LOG_LVL_DEBUG, c, "%s", why);
		return r;
	}
	if (c->closing)
		conn_finish_close(c);
	return 0;
}

/* An Error message in msg, its text formatted into text (which, with err,
 * must outlive msg): the one shape of every Error the daemon sends. */
static void error_message(Stoker__Message *msg, Stoker__Error *err, Stoker__ErrorCode code, char *text,
			  size_t text_size, const char *fmt, va_list ap)
{
	vsnprintf(text, text_size, fmt, ap);
	err->code = code;
	err->message = text;
	msg->body_case = STOKER__MESSAGE__BODY_ERROR;
	msg->error = err;
}

int conn_send_error(struct conn *c, Stoker__ErrorCode code, const char *fmt, ...)
{
	Stoker__Message msg = STOKER__MESSAGE__INIT;
	Stoker__Error err = STOKER__ERROR__INIT;
	char text[512];
	va_list ap;

	va_start(ap, fmt);
	error_message(&msg, &err, code, text, sizeof(text), fmt, ap);
	va_end(ap);
	return conn_send(c, &msg, -1);
}

void conn_log(enum log_level level, const struct conn *c, const char *fmt, ...)
{
	char prefix[64];
	va_list ap;

	if (!log_enabled(level))
		return;
	snprintf(prefix, sizeof(prefix), "client %llu (pid %d): ", (unsigned long long)c->id, (int)c->pid);
	va_start(ap, fmt);
	log_vmsg(level, prefix, fmt, ap);
	va_end(ap);
}

void conn_log_cred(enum log_level level, const struct conn *c, const char *fmt, ...)
{
	char prefix[80];
	va_list ap;

	if (!log_enabled(level))
		return;
	snprintf(prefix, sizeof(prefix), "client %llu (pid %d, uid %d): ", (unsigned long long)c->id, (int)c->pid,
		 (int)c->uid);
	va_start(ap, fmt);
	log_vmsg(level, prefix, fmt, ap);
	va_end(ap);
}

/* Is `want` the peer's group, or one of its supplementary groups (as they
 * were when it connected: SO_PEERGROUPS)? */
static bool peer_has_group(const struct conn *c, gid_t want)
{
	gid_t small[64], *groups = small;
	socklen_t len = sizeof(small);
	bool found = false;

	if (c->gid == want)
		return true;
	if (getsockopt(c->fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0) {
		/* The kernel says how much room the list needs (at most
		 * NGROUPS_MAX entries). */
		if (errno != ERANGE || len == 0 || len > 65536 * sizeof(gid_t))
			return false;
		groups = malloc(len);
		if (!groups)
			return false;
		if (getsockopt(c->fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0)
			len = 0;
	}
	for (size_t i = 0; i < len / sizeof(gid_t); i++)
		found = found || groups[i] == want;
	if (groups != small)
		free(groups);
	return found;
}

/* Root and the daemon's own user may do anything. */
static bool peer_is_privileged(const struct conn *c)
{
	return c->uid == 0 || c->uid == geteuid();
}

bool conn_is_admin(const struct conn *c)
{
	uint32_t gid;

	if (peer_is_privileged(c))
		return true;
	return c->d->cfg.admin_group[0] && config_group_id(c->d->cfg.admin_group, &gid) == 0 &&
	       peer_has_group(c, (gid_t)gid);
}

/* A group-restricted socket admits its group's members (and root). */
static bool conn_may_use(const struct conn *c)
{
	return !c->d->socket_restricted || peer_is_privileged(c) || peer_has_group(c, c->d->socket_gid);
}

static void handle_hello(struct conn *c, const Stoker__Hello *h)
{
	Stoker__Message msg = STOKER__MESSAGE__INIT;
	Stoker__Welcome w = STOKER__WELCOME__INIT;

	if (!usermode_admits(c->d, c->uid)) {
		conn_log_cred(LOG_LVL_WARNING, c, "permission denied: this user-mode daemon serves uid %d only",
			      (int)geteuid());
		conn_send_error(c, STOKER__ERROR_CODE__PERMISSION_DENIED,
				"this stokerd (pid %d) is uid %d's own user-mode daemon and serves that user only; "
				"uid %d may not use it",
				(int)getpid(), (int)geteuid(), (int)c->uid);
		conn_close(c, NULL);
		return;
	}
	if (!conn_may_use(c)) {
		struct group gr, *res = NULL;
		char buf[4096], name[32];

		if (getgrgid_r(c->d->socket_gid, &gr, buf, sizeof(buf), &res) != 0 || !res)
			snprintf(name, sizeof(name), "%d", (int)c->d->socket_gid);
		else
			snprintf(name, sizeof(name), "%s", res->gr_name);
		conn_log_cred(LOG_LVL_WARNING, c, "permission denied: not in group %s, which the socket requires",
			      name);
		conn_send_error(c, STOKER__ERROR_CODE__PERMISSION_DENIED,
				"uid %d may not use stokerd: join group %s (the socket's group)", (int)c->uid, name);
		conn_close(c, NULL);
		return;
	}
	if (h->protocol_version != STOKER__VERSION__PROTOCOL_VERSION) {
		c->d->protocol_errors++;
		conn_send_error(c, STOKER__ERROR_CODE__VERSION_MISMATCH,
				"protocol version %u is not supported; stokerd %s speaks version %d",
				h->protocol_version, STOKER_VERSION, STOKER__VERSION__PROTOCOL_VERSION);
		conn_close(c, "protocol version mismatch");
		return;
	}
	c->greeted = true;
	w.protocol_version = STOKER__VERSION__PROTOCOL_VERSION;
	w.daemon_version = (char *)STOKER_VERSION;
	w.max_frame_bytes = c->d->cfg.max_frame_bytes;
	msg.body_case = STOKER__MESSAGE__BODY_WELCOME;
	msg.welcome = &w;
	conn_log(LOG_LVL_DEBUG, c, "hello from '%s'", h->client_name ? h->client_name : "");
	conn_send(c, &msg, -1);
}

static void conn_dispatch(struct conn *c, const Stoker__Message *m)
{
	if (!c->greeted) {
		if (m->body_case != STOKER__MESSAGE__BODY_HELLO) {
			conn_protocol_error(c, "the first message must be Hello");
			return;
		}
		handle_hello(c, m->hello);
		return;
	}
	switch (m->body_case) {
	case STOKER__MESSAGE__BODY_ATTACH:
		if (c->d->draining || c->d->stopping) {
			conn_send_error(c, STOKER__ERROR_CODE__SHUTTING_DOWN, "stokerd is %s: not taking new clients",
					c->d->stopping ? "stopping" : "draining");
			break;
		}
		session_handle_attach(c, m->attach);
		break;
	case STOKER__MESSAGE__BODY_START_EPOCH: session_handle_start_epoch(c, m->start_epoch); break;
	case STOKER__MESSAGE__BODY_RELEASE: session_handle_release(c, m->release); break;
	case STOKER__MESSAGE__BODY_NAMES_REQUEST: session_handle_names(c, m->names_request); break;
	case STOKER__MESSAGE__BODY_STATS_REQUEST: control_handle_stats(c); break;
	case STOKER__MESSAGE__BODY_CONFIG_GET: control_handle_config_get(c); break;
	case STOKER__MESSAGE__BODY_CONFIG_SET: control_handle_config_set(c, m->config_set); break;
	case STOKER__MESSAGE__BODY_RELOAD: control_handle_reload(c); break;
	case STOKER__MESSAGE__BODY_DRAIN: control_handle_drain(c, m->drain); break;
	case STOKER__MESSAGE__BODY_METRICS_REQUEST: control_handle_metrics(c); break;
	default: conn_protocol_error(c, "unexpected message %d from a client", (int)m->body_case); break;
	}
}

static void conn_on_readable(struct conn *c)
{
	/* Bounded work per wakeup keeps one chatty client from starving the
	 * loop; the poll fires again if more is waiting. */
	for (int rounds = 0; rounds < 16 && !c->closing; rounds++) {
		ssize_t n = frame_in_fill(&c->in, c->fd);
		Stoker__Message *m;
		int r;

		if (n == -EAGAIN)
			return;
		if (n == 0) {
			conn_close(c, c->in.len ? "closed mid-frame" : NULL);
			return;
		}
		if (n == -EPROTO || c->in.nfds > 0) {
			conn_protocol_error(c, "sent file descriptors, which the protocol never allows");
			return;
		}
		if (n == -EMSGSIZE) {
			conn_protocol_error(c, "frame larger than %u bytes", c->in.max_body);
			return;
		}
		if (n < 0) {
			char why[64];
			snprintf(why, sizeof(why), "recv: %s", strerror((int)-n));
			conn_close(c, why);
			return;
		}
		c->last_input_ns = monotonic_ns();
		while (!c->closing && (r = frame_in_next(&c->in, &m)) != 0) {
			if (r == -EMSGSIZE) {
				conn_protocol_error(c, "frame larger than %u bytes", c->in.max_body);
				return;
			}
			if (r < 0) {
				conn_protocol_error(c, "malformed frame");
				return;
			}
			conn_dispatch(c, m);
			stoker__message__free_unpacked(m, NULL);
		}
	}
}

static void conn_on_poll(uv_poll_t *h, int status, int events)
{
	struct conn *c = h->data;

	if (c->closed)
		return;
	if (status < 0) {
		/* libuv reports EPOLLERR as UV_EBADF: on a Unix socket that is the
		 * peer closing with our replies unread, an ordinary way to leave. */
		conn_close(c, NULL);
		return;
	}
	if (events & UV_WRITABLE) {
		int r = frame_out_flush(&c->out, c->fd);
		if (r < 0 && r != -EAGAIN) {
			conn_finish_close(c);
			return;
		}
		if (r == 0 && c->closing) {
			conn_finish_close(c);
			return;
		}
	}
	if ((events & (UV_READABLE | UV_DISCONNECT)) && !c->closing)
		conn_on_readable(c);
	if (!c->closed)
		conn_update_poll(c);
}

static void conn_update_poll(struct conn *c)
{
	int want = 0;

	if (c->closed)
		return;
	if (!c->closing)
		want |= UV_READABLE | UV_DISCONNECT;
	if (!frame_out_empty(&c->out))
		want |= UV_WRITABLE;
	if (want == c->poll_events)
		return;
	c->poll_events = want;
	if (want)
		uv_poll_start(&c->poll, want, conn_on_poll);
	else
		uv_poll_stop(&c->poll);
}

/* The peer's start time (field 22 of /proc/PID/stat, in clock ticks since
 * boot) and its state letter; -errno when the process is not visible. */
static int peer_proc_stat(pid_t pid, uint64_t *start_time, char *state)
{
	char path[64], buf[1024];
	unsigned long long start = 0;
	const char *p;
	ssize_t n;
	int fd, field;

	if (pid <= 0)
		return -ESRCH;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return n < 0 ? -errno : -EIO;
	buf[n] = '\0';
	/* "PID (COMM) S ...": COMM may hold spaces and parentheses. */
	p = strrchr(buf, ')');
	if (!p || p[1] != ' ' || !p[2])
		return -EIO;
	*state = p[2];
	/* Fields after COMM: 3 is the state, 22 the start time. */
	for (field = 3, p += 2; *p && field < 22; p++)
		if (*p == ' ')
			field++;
	if (field != 22 || sscanf(p, "%llu", &start) != 1)
		return -EIO;
	*start_time = start;
	return 0;
}

int server_adopt(struct daemon *d, int fd, pid_t pid, uid_t uid, gid_t gid)
{
	struct conn *c;
	char state;
	int r;

	c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return -ENOMEM;
	}
	c->pid = pid;
	c->uid = uid;
	c->gid = gid;
	c->d = d;
	c->fd = fd;
	c->id = ++d->next_conn_id;
	c->last_input_ns = monotonic_ns();
	/* Remembered now, so a recycled pid is never taken for the client. */
	if (peer_proc_stat(pid, &c->peer_start_time, &state) < 0)
		c->peer_start_time = 0;
	frame_in_init(&c->in, d->cfg.max_frame_bytes);
	frame_out_init(&c->out, CONN_MAX_QUEUED_BYTES);
	r = uv_poll_init(d->loop, &c->poll, fd);
	if (r < 0) {
		log_warning("client pid %d: uv_poll_init: %s", (int)c->pid, uv_strerror(r));
		close(fd);
		free(c);
		return r;
	}
	c->poll.data = c;
	c->next = d->conns;
	if (d->conns)
		d->conns->prev = c;
	d->conns = c;
	d->nconns++;
	conn_log_cred(LOG_LVL_DEBUG, c, "connected");
	conn_update_poll(c);
	return 0;
}

/*
 * Tell a connection we will not serve why, in one Error frame written
 * straight to its fresh socket (whose buffer has room for it), then close
 * it. Nothing is queued: refusing costs no memory, however many come.
 */
static void refuse(int fd, Stoker__ErrorCode code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void refuse(int fd, Stoker__ErrorCode code, const char *fmt, ...)
{
	Stoker__Message msg = STOKER__MESSAGE__INIT;
	Stoker__Error err = STOKER__ERROR__INIT;
	uint8_t frame[FRAME_HEADER_BYTES + 320];
	char text[256];
	size_t body;
	va_list ap;

	va_start(ap, fmt);
	error_message(&msg, &err, code, text, sizeof(text), fmt, ap);
	va_end(ap);
	body = stoker__message__get_packed_size(&msg);
	if (body <= sizeof(frame) - FRAME_HEADER_BYTES) {
		frame[0] = (uint8_t)body;
		frame[1] = (uint8_t)(body >> 8);
		frame[2] = frame[3] = 0;
		stoker__message__pack(&msg, frame + FRAME_HEADER_BYTES);
		if (send(fd, frame, FRAME_HEADER_BYTES + body, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
			/* The peer is gone already: nobody to tell. */
		}
	}
	close(fd);
}

/* Out of descriptors: the connection waits in the backlog and the listening
 * socket stays readable, so without this the loop would spin. Give up the
 * spare descriptor, accept, refuse clearly, take the spare back. */
static int accept_without_fds(struct daemon *d, int err)
{
	int fd;

	if (!d->fd_exhausted)
		log_warning("cannot accept clients: %s (%u clients); refusing them until descriptors are free",
			    strerror(err), d->nconns);
	d->fd_exhausted = true;
	if (d->reserve_fd >= 0) {
		close(d->reserve_fd);
		d->reserve_fd = -1;
	}
	fd = accept4(d->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd >= 0) {
		d->refused_fds++;
		refuse(fd, STOKER__ERROR_CODE__RESOURCE_EXHAUSTED, "out of file descriptors (%s): try again later",
		       strerror(err));
	}
	d->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	return fd >= 0 ? 0 : -1;
}

/* Nothing can be accepted now (no spare descriptor, no memory): stop
 * polling the listening socket until the next housekeeping tick rather
 * than spin on it. */
static void accept_pause(struct daemon *d)
{
	if (d->accept_paused || !d->listening)
		return;
	d->accept_paused = true;
	uv_poll_stop(&d->listen_poll);
}

/* Descriptors never given to connections: one per worker for the file it
 * reads, and room for scans, attaches and the metrics file. */
static uint64_t fd_headroom(const struct daemon *d)
{
	return (d->pool ? pool_threads(d->pool) : 0) + 64;
}

static void server_on_accept(uv_poll_t *h, int status, int events)
{
	struct daemon *d = h->data;

	/* Accept a bounded batch per wakeup; a burst of connects cannot hog
	 * the loop. */
	for (int i = 0; i < 64 && d->listening; i++) {
		struct ucred cred = {.pid = 0, .uid = (uid_t)-1, .gid = (gid_t)-1};
		socklen_t len = sizeof(cred);
		int fd;

		fd = accept4(d->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			int e = errno;

			if ((e == EMFILE || e == ENFILE) && accept_without_fds(d, e) == 0)
				continue;
			if (e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM) {
				if (!d->fd_exhausted)
					log_warning("cannot accept clients: %s; retrying every second", strerror(e));
				d->fd_exhausted = true;
				accept_pause(d);
				return;
			}
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED)
				log_warning("accept: %s", strerror(errno));
			return;
		}
		/* Descriptors are kept for the workers' sample files and for a
		 * ring per connection: a flood of connections must never make
		 * another client's samples unreadable. The kernel hands out the
		 * lowest free number, so the new fd's is about how many are open. */
		if (d->fd_limit && (uint64_t)fd + d->nconns + fd_headroom(d) >= d->fd_limit) {
			if (!d->fd_exhausted)
				log_warning("refusing clients: about %d file descriptors open, %u clients, limit %llu "
					    "(RLIMIT_NOFILE); the rest are kept for the workers and rings",
					    fd, d->nconns, (unsigned long long)d->fd_limit);
			d->fd_exhausted = true;
			d->refused_fds++;
			refuse(fd, STOKER__ERROR_CODE__RESOURCE_EXHAUSTED,
			       "out of file descriptors (%u clients, limit %llu): try again later", d->nconns,
			       (unsigned long long)d->fd_limit);
			continue;
		}
		if (d->fd_exhausted) {
			log_notice("accepting clients again (%llu refused for want of file descriptors)",
				   (unsigned long long)d->refused_fds);
			d->fd_exhausted = false;
			d->refused_fds = 0;
		}
		if (d->nconns >= d->cfg.max_clients) {
			/* Logged once per burst: an attacker cannot flood the log. */
			if (d->refused_clients++ == 0)
				log_warning("refusing connections: %u clients is the limit (max_clients)",
					    d->cfg.max_clients);
			refuse(fd, STOKER__ERROR_CODE__RESOURCE_EXHAUSTED,
			       "%u clients is the limit (max_clients): try again later", d->cfg.max_clients);
			continue;
		}
		if (d->refused_clients) {
			log_notice("accepting clients again (%llu refused at max_clients)",
				   (unsigned long long)d->refused_clients);
			d->refused_clients = 0;
		}
		/* Unknown credentials are nobody's: never root's by default. */
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
			cred = (struct ucred){.pid = 0, .uid = (uid_t)-1, .gid = (gid_t)-1};
		server_adopt(d, fd, cred.pid, cred.uid, cred.gid);
	}
}

/* Is a live daemon answering on `addr`? */
static bool socket_in_use(const struct sockaddr_un *addr)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	bool in_use;

	if (fd < 0)
		return false;
	in_use = connect(fd, (const struct sockaddr *)addr, sizeof(*addr)) == 0;
	close(fd);
	return in_use;
}

/*
 * The socket's access rule, from its file: group-restricted unless others
 * may write to it. Under socket activation the path is the socket unit's
 * (getsockname); a socket without a path (abstract) is not restricted.
 */
static void socket_access(struct daemon *d, int fd)
{
	struct sockaddr_un addr = {0};
	socklen_t len = sizeof(addr);
	struct stat st;

	d->socket_restricted = false;
	if (getsockname(fd, (struct sockaddr *)&addr, &len) < 0 || len <= offsetof(struct sockaddr_un, sun_path) ||
	    addr.sun_path[0] == '\0' || stat(addr.sun_path, &st) < 0 || !S_ISSOCK(st.st_mode))
		return;
	d->socket_restricted = !(st.st_mode & S_IWOTH);
	d->socket_gid = st.st_gid;
	log_info("socket %s: mode %04o, group %d%s", addr.sun_path, (unsigned)(st.st_mode & 07777), (int)st.st_gid,
		 d->socket_restricted ? ": clients need that group" : "");
}

/* socket_mode and socket_group, before listen() lets anyone connect. */
static int socket_set_access(struct daemon *d, const char *path)
{
	uint32_t gid;

	if (d->cfg.socket_group[0]) {
		if (config_group_id(d->cfg.socket_group, &gid) < 0) {
			log_error("socket_group %s: no such group", d->cfg.socket_group);
			return -EINVAL;
		}
		if (chown(path, (uid_t)-1, (gid_t)gid) < 0) {
			log_error("cannot give %s to group %s: %s", path, d->cfg.socket_group, strerror(errno));
			return -errno;
		}
	}
	if (chmod(path, d->cfg.socket_mode) < 0) {
		log_error("cannot set mode %04o on %s: %s", d->cfg.socket_mode, path, strerror(errno));
		return -errno;
	}
	return 0;
}

/* The soft descriptor limit is 1024 for select()'s sake; stokerd uses
 * epoll, so it takes the hard limit, and remembers what it got. */
static void fd_limit_raise(struct daemon *d)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return;
	if (rl.rlim_cur < rl.rlim_max) {
		struct rlimit want = {.rlim_cur = rl.rlim_max, .rlim_max = rl.rlim_max};

		if (setrlimit(RLIMIT_NOFILE, &want) == 0)
			rl = want;
	}
	d->fd_limit = rl.rlim_cur == RLIM_INFINITY ? 0 : (uint64_t)rl.rlim_cur;
	log_debug("file descriptors: limit %llu", (unsigned long long)d->fd_limit);
}

/* The name a listening socket is bound to (getsockname): its path, "@name"
 * for an abstract one; "an unnamed socket" when it has none. */
static void socket_name(int fd, char *out, size_t size)
{
	struct sockaddr_un a = {0};
	socklen_t len = sizeof(a);
	size_t n;

	if (getsockname(fd, (struct sockaddr *)&a, &len) < 0 || a.sun_family != AF_UNIX ||
	    len <= offsetof(struct sockaddr_un, sun_path)) {
		snprintf(out, size, "an unnamed socket");
		return;
	}
	n = len - offsetof(struct sockaddr_un, sun_path);
	if (a.sun_path[0] == '\0') /* abstract: the name is the bytes after the NUL, not terminated */
		snprintf(out, size, "@%.*s", (int)(n - 1), a.sun_path + 1);
	else
		snprintf(out, size, "%.*s", (int)strnlen(a.sun_path, n), a.sun_path);
}

int server_listen(struct daemon *d)
{
	struct sockaddr_un addr = {.sun_family = AF_UNIX};
	int n, fd = -1, r;

	fd_limit_raise(d);
	r = usermode_prepare(d);
	if (r < 0)
		return r;

	n = sd_listen_fds(1);
	if (n > 1) {
		log_error("socket activation passed %d sockets; stokerd takes one", n);
		return -EINVAL;
	}
	if (n == 1) {
		/* systemd owns the path; we only take the socket. */
		fd = SD_LISTEN_FDS_START;
		r = sd_is_socket_unix(fd, SOCK_STREAM, 1, NULL, 0);
		if (r <= 0) {
			log_error("socket activation: fd %d is not a listening Unix stream socket", fd);
			return r < 0 ? r : -EINVAL;
		}
		int flags = fcntl(fd, F_GETFL);
		if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0 || fcntl(fd, F_SETFD, FD_CLOEXEC) < 0)
			return -errno;
		socket_name(fd, d->listen_name, sizeof(d->listen_name));
		log_info("listening on the socket systemd passed: %s", d->listen_name);
	} else {
		snprintf(addr.sun_path, sizeof(addr.sun_path), "%s", d->cfg.socket_path);
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -errno;
		if (bind(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
			r = -errno;
			/* A path left by a killed daemon is replaced; one a live
			 * daemon answers on is not. */
			if (r != -EADDRINUSE || socket_in_use(&addr)) {
				log_error("cannot listen on %s: %s", d->cfg.socket_path,
					  r == -EADDRINUSE ? "another stokerd is serving it" : strerror(-r));
				goto fail;
			}
			log_notice("replacing stale socket %s", d->cfg.socket_path);
			if (unlink(addr.sun_path) < 0 || bind(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
				r = -errno;
				log_error("cannot listen on %s: %s", d->cfg.socket_path, strerror(-r));
				goto fail;
			}
		}
		d->owns_socket_path = true;
		r = socket_set_access(d, addr.sun_path);
		if (r < 0)
			goto fail;
		if (listen(fd, SOMAXCONN) < 0) {
			r = -errno;
			log_error("listen on %s: %s", d->cfg.socket_path, strerror(-r));
			goto fail;
		}
		snprintf(d->listen_name, sizeof(d->listen_name), "%s", d->cfg.socket_path);
		log_info("listening on %s", d->cfg.socket_path);
	}
	socket_access(d, fd);
	r = uv_poll_init(d->loop, &d->listen_poll, fd);
	if (r < 0)
		goto fail;
	/* Held in reserve: at EMFILE it is given up to refuse a client with a
	 * reason rather than leave it hanging in the backlog. */
	d->reserve_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	d->listen_poll.data = d;
	d->listen_fd = fd;
	d->listening = true;
	uv_poll_start(&d->listen_poll, UV_READABLE, server_on_accept);
	return 0;
fail:
	if (d->owns_socket_path)
		unlink(addr.sun_path);
	d->owns_socket_path = false;
	close(fd);
	return r;
}

/* A client stopped past its lease: its slots go back, and it learns why as
 * soon as it wakes (the Error is the last thing it reads). */
static void conn_evict_stopped(struct conn *c, uint64_t stopped_ms)
{
	conn_log(LOG_LVL_WARNING, c,
		 "process stopped for %llu ms, longer than stopped_lease_ms (%u ms): "
		 "session ended, its slots reclaimed",
		 (unsigned long long)stopped_ms, c->d->cfg.stopped_lease_ms);
	conn_send_error(c, STOKER__ERROR_CODE__LEASE_EXPIRED,
			"session ended: this process was stopped for %llu ms, longer than stopped_lease_ms (%u ms), "
			"and its slots were reclaimed; reconnect and resume from a checkpoint",
			(unsigned long long)stopped_ms, c->d->cfg.stopped_lease_ms);
	conn_close(c, NULL);
}

uint64_t server_housekeeping(struct daemon *d)
{
	uint64_t now = monotonic_ns(), lease_ms = d->cfg.stopped_lease_ms;
	/* A quarter of the lease, within 0.1..1 s: a stopped client is evicted
	 * between lease and lease + two periods after it stopped. */
	uint64_t period = lease_ms / 4 < 100 ? 100 : lease_ms / 4 > 1000 ? 1000 : lease_ms / 4;
	struct conn *c, *next;

	if (!lease_ms)
		period = 1000;
	if (d->accept_paused && d->listening) {
		d->accept_paused = false;
		uv_poll_start(&d->listen_poll, UV_READABLE, server_on_accept);
	}
	/* Evicting and closing unlink connections. */
	for (c = d->conns; c; c = next) {
		uint64_t start = 0;
		char state = '?';

		next = c->next;
		if (c->closed)
			continue;
		if (c->closing) {
			if (c->closing_since_ns && now - c->closing_since_ns >= CONN_CLOSE_GRACE_MS * 1000000ull) {
				conn_log(LOG_LVL_INFO, c, "did not take its last replies in %d ms; closed",
					 CONN_CLOSE_GRACE_MS);
				conn_finish_close(c);
			}
			continue;
		}
		/* Only attached clients quiet for a period are looked at: a
		 * stopped process sends nothing. Bounded: one small /proc read
		 * per quiet client per period. */
		if (!lease_ms || !c->session || !c->peer_start_time || now - c->last_input_ns < period * 1000000ull) {
			c->stopped_since_ns = 0;
			continue;
		}
		/* Not visible, gone (its socket will say so) or a recycled pid:
		 * never evicted. Running, sleeping or in I/O, however long: not
		 * stopped. */
		if (peer_proc_stat(c->pid, &start, &state) < 0 || start != c->peer_start_time ||
		    (state != 'T' && state != 't')) {
			c->stopped_since_ns = 0;
			continue;
		}
		if (!c->stopped_since_ns)
			c->stopped_since_ns = now;
		else if (now - c->stopped_since_ns >= lease_ms * 1000000ull)
			conn_evict_stopped(c, (now - c->stopped_since_ns) / 1000000);
	}
	return period;
}

void server_stop_listening(struct daemon *d)
{
	if (!d->listening)
		return;
	d->listening = false;
	uv_poll_stop(&d->listen_poll);
	uv_close((uv_handle_t *)&d->listen_poll, NULL);
	close(d->listen_fd);
	if (d->reserve_fd >= 0)
		close(d->reserve_fd);
	d->reserve_fd = -1;
	if (d->owns_socket_path)
		unlink(d->cfg.socket_path);
}

static void conn_send_shutdown(struct conn *c, const char *reason)
{
	Stoker__Message msg = STOKER__MESSAGE__INIT;
	Stoker__Shutdown sd = STOKER__SHUTDOWN__INIT;
	char text[256];

	if (c->shutdown_sent || c->closing || !c->greeted)
		return;
	c->shutdown_sent = true;
	snprintf(text, sizeof(text), "stokerd is shutting down (%s)", reason);
	sd.reason = text;
	msg.body_case = STOKER__MESSAGE__BODY_SHUTDOWN;
	msg.shutdown = &sd;
	conn_send(c, &msg, -1);
}

void server_announce_shutdown(struct daemon *d, const char *reason)
{
	struct conn *c, *next;

	/* Sending may close (and unlink) the connection. */
	for (c = d->conns; c; c = next) {
		next = c->next;
		conn_send_shutdown(c, reason);
	}
}

void server_close_all(struct daemon *d, bool force)
{
	struct conn *c, *next;

	for (c = d->conns; c; c = next) {
		next = c->next;
		if (force) {
			conn_finish_close(c);
			continue;
		}
		conn_send_shutdown(c, d->stop_reason[0] ? d->stop_reason : "stopping");
		if (!c->closed)
			conn_close(c, NULL);
	}
}
