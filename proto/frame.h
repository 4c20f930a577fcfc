/* SPDX-License-Identifier: MIT */
/*
 * Frames on a Unix stream socket: a 4-byte little-endian body length, then
 * one packed stoker.Message. Shared by stokerd and libstoker, so both sides
 * read and write frames with the same code.
 *
 * The socket is non-blocking on both sides; callers wait with uv_poll
 * (daemon) or poll(2) (library). File descriptors ride with SCM_RIGHTS on the
 * first byte of the frame they belong to, and are always received with
 * MSG_CMSG_CLOEXEC.
 */
#ifndef STOKER_FRAME_H
#define STOKER_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "stoker.pb-c.h"

#define FRAME_HEADER_BYTES 4u
/* At most this many fds are accepted with one recvmsg; more is an attack. */
#define FRAME_MAX_FDS 4u

/* Incoming bytes and the fds that came with them. */
struct frame_in {
	uint8_t *buf;
	size_t len;
	size_t cap;
	uint32_t max_body; /* frames with a longer body are refused */
	int fds[FRAME_MAX_FDS];
	unsigned nfds;
};

/* One queued outgoing frame. */
struct frame_pending {
	struct frame_pending *next;
	size_t len, sent;
	int fd[2]; /* sent with the first byte, then closed; -1 for none */
	uint8_t data[];
};

/* Outgoing frames not yet fully written. */
struct frame_out {
	struct frame_pending *head, *tail;
	size_t queued_bytes;
	size_t max_queued_bytes; /* a peer that stops reading is cut off */
};

void frame_in_init(struct frame_in *in, uint32_t max_body);
void frame_in_release(struct frame_in *in);
/* Take (and forget) the oldest received fd; -1 if none. */
int frame_in_take_fd(struct frame_in *in);

/*
 * Read what the socket has. Returns bytes read (> 0), 0 on orderly EOF,
 * -EAGAIN when nothing is there, -EPROTO when the peer sent a truncated or
 * oversized control message (all its fds are closed), or another -errno.
 */
ssize_t frame_in_fill(struct frame_in *in, int sock);

/*
 * Unpack the next complete frame into *out (free with
 * stoker__message__free_unpacked). Returns 1 with a message, 0 when more
 * bytes are needed, -EMSGSIZE for a frame over max_body, -EBADMSG when the
 * body is not a valid Message.
 */
int frame_in_next(struct frame_in *in, Stoker__Message **out);

void frame_out_init(struct frame_out *out, size_t max_queued_bytes);
void frame_out_release(struct frame_out *out);

/*
 * Queue `msg` (and `fd`, whose ownership passes to the queue: it is closed
 * once sent or when the queue is released). -ENOBUFS if the queue is over its
 * bound, -ENOMEM. On error `fd` is closed too.
 */
int frame_out_push(struct frame_out *out, const Stoker__Message *msg, int fd);
/* The same with a second fd (-1 for none), sent after `fd` in the same
 * control message (a device ring's allocation and its release words). */
int frame_out_push2(struct frame_out *out, const Stoker__Message *msg, int fd, int fd2);

/* Write as much as the socket takes. 0 when the queue is empty, -EAGAIN when
 * frames remain, or another -errno (the connection is unusable). */
int frame_out_flush(struct frame_out *out, int sock);

static inline bool frame_out_empty(const struct frame_out *out)
{
	return out->head == NULL;
}

#endif
