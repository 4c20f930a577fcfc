/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "frame.h"

/* Read in chunks of this much at least, so a burst of small frames costs one
 * recvmsg. */
#define FRAME_READ_CHUNK 4096u

void frame_in_init(struct frame_in *in, uint32_t max_body)
{
	memset(in, 0, sizeof(*in));
	in->max_body = max_body;
}

void frame_in_release(struct frame_in *in)
{
	if (!in)
		return;
	for (unsigned i = 0; i < in->nfds; i++)
		close(in->fds[i]);
	free(in->buf);
	memset(in, 0, sizeof(*in));
}

int frame_in_take_fd(struct frame_in *in)
{
	int fd;

	if (in->nfds == 0)
		return -1;
	fd = in->fds[0];
	memmove(in->fds, in->fds + 1, (in->nfds - 1) * sizeof(int));
	in->nfds--;
	return fd;
}

/* Room for one more chunk, never beyond one maximal frame plus a chunk. */
static int frame_in_reserve(struct frame_in *in)
{
	size_t limit = (size_t)FRAME_HEADER_BYTES + in->max_body + FRAME_READ_CHUNK;
	size_t want = in->len + FRAME_READ_CHUNK;
	uint8_t *buf;

	if (want <= in->cap)
		return 0;
	if (want > limit)
		want = limit;
	if (want <= in->len)
		return -EMSGSIZE;
	if (want < 2 * in->cap && 2 * in->cap <= limit)
		want = 2 * in->cap;
	buf = realloc(in->buf, want);
	if (!buf)
		return -ENOMEM;
	in->buf = buf;
	in->cap = want;
	return 0;
}

static int frame_in_collect_fds(struct frame_in *in, struct msghdr *mh)
{
	int r = 0;

	for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
		size_t n;
		int *fds;

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		fds = (int *)CMSG_DATA(c);
		for (size_t i = 0; i < n; i++) {
			int fd;

			memcpy(&fd, fds + i, sizeof(fd));
			if (in->nfds < FRAME_MAX_FDS) {
				in->fds[in->nfds++] = fd;
			} else {
				close(fd);
				r = -EPROTO;
			}
		}
	}
	return r;
}

ssize_t frame_in_fill(struct frame_in *in, int sock)
{
	union {
		char buf[CMSG_SPACE(sizeof(int) * FRAME_MAX_FDS)];
		struct cmsghdr align;
	} control;
	struct iovec iov;
	struct msghdr mh = {0};
	ssize_t n;
	int r;

	r = frame_in_reserve(in);
	if (r < 0)
		return r;
	iov.iov_base = in->buf + in->len;
	iov.iov_len = in->cap - in->len;
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = control.buf;
	mh.msg_controllen = sizeof(control.buf);

	do
		n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;

	r = frame_in_collect_fds(in, &mh);
	if (r == 0 && (mh.msg_flags & MSG_CTRUNC))
		r = -EPROTO;
	if (r < 0) {
		/* Whatever fds arrived came with a broken message: drop them. */
		while (in->nfds > 0)
			close(in->fds[--in->nfds]);
		return r;
	}
	in->len += (size_t)n;
	return n;
}

int frame_in_next(struct frame_in *in, Stoker__Message **out)
{
	Stoker__Message *m;
	uint32_t body;
	size_t total;

	if (in->len < FRAME_HEADER_BYTES)
		return 0;
	body = (uint32_t)in->buf[0] | (uint32_t)in->buf[1] << 8 | (uint32_t)in->buf[2] << 16 |
	       (uint32_t)in->buf[3] << 24;
	if (body > in->max_body)
		return -EMSGSIZE;
	total = FRAME_HEADER_BYTES + (size_t)body;
	if (in->len < total)
		return 0;

	m = stoker__message__unpack(NULL, body, in->buf + FRAME_HEADER_BYTES);
	memmove(in->buf, in->buf + total, in->len - total);
	in->len -= total;
	if (!m)
		return -EBADMSG;
	*out = m;
	return 1;
}

void frame_out_init(struct frame_out *out, size_t max_queued_bytes)
{
	memset(out, 0, sizeof(*out));
	out->max_queued_bytes = max_queued_bytes;
}

void frame_out_release(struct frame_out *out)
{
	struct frame_pending *p, *next;

	if (!out)
		return;
	for (p = out->head; p; p = next) {
		next = p->next;
		for (int i = 0; i < 2; i++)
			if (p->fd[i] >= 0)
				close(p->fd[i]);
		free(p);
	}
	out->head = out->tail = NULL;
	out->queued_bytes = 0;
}

int frame_out_push(struct frame_out *out, const Stoker__Message *msg, int fd)
{
	return frame_out_push2(out, msg, fd, -1);
}

int frame_out_push2(struct frame_out *out, const Stoker__Message *msg, int fd, int fd2)
{
	size_t body = stoker__message__get_packed_size(msg);
	struct frame_pending *p = NULL;
	int r;

	if (body > UINT32_MAX) {
		r = -EMSGSIZE;
		goto fail;
	}
	if (out->queued_bytes + FRAME_HEADER_BYTES + body > out->max_queued_bytes) {
		r = -ENOBUFS;
		goto fail;
	}
	p = malloc(sizeof(*p) + FRAME_HEADER_BYTES + body);
	if (!p) {
		r = -ENOMEM;
		goto fail;
	}
	p->next = NULL;
	p->len = FRAME_HEADER_BYTES + body;
	p->sent = 0;
	p->fd[0] = fd >= 0 ? fd : fd2;
	p->fd[1] = fd >= 0 ? fd2 : -1;
	p->data[0] = (uint8_t)body;
	p->data[1] = (uint8_t)(body >> 8);
	p->data[2] = (uint8_t)(body >> 16);
	p->data[3] = (uint8_t)(body >> 24);
	stoker__message__pack(msg, p->data + FRAME_HEADER_BYTES);

	if (out->tail)
		out->tail->next = p;
	else
		out->head = p;
	out->tail = p;
	out->queued_bytes += p->len;
	return 0;
fail:
	if (fd >= 0)
		close(fd);
	if (fd2 >= 0)
		close(fd2);
	return r;
}

static ssize_t frame_send_one(int sock, const struct frame_pending *p)
{
	union {
		char buf[CMSG_SPACE(2 * sizeof(int))];
		struct cmsghdr align;
	} control;
	struct iovec iov = {.iov_base = (void *)(p->data + p->sent), .iov_len = p->len - p->sent};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	ssize_t n;

	if (p->sent == 0 && p->fd[0] >= 0) {
		unsigned n_fds = p->fd[1] >= 0 ? 2 : 1;
		struct cmsghdr *c;

		memset(&control, 0, sizeof(control));
		mh.msg_control = control.buf;
		mh.msg_controllen = CMSG_SPACE(n_fds * sizeof(int));
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(n_fds * sizeof(int));
		memcpy(CMSG_DATA(c), p->fd, n_fds * sizeof(int));
	}
	do
		n = sendmsg(sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EWOULDBLOCK ? -EAGAIN : -errno;
	return n;
}

int frame_out_flush(struct frame_out *out, int sock)
{
	while (out->head) {
		struct frame_pending *p = out->head;
		ssize_t n = frame_send_one(sock, p);

		if (n < 0)
			return (int)n;
		if (p->sent == 0 && p->fd[0] >= 0) {
			/* The fds went with the first byte. */
			for (int i = 0; i < 2; i++)
				if (p->fd[i] >= 0)
					close(p->fd[i]);
			p->fd[0] = p->fd[1] = -1;
		}
		p->sent += (size_t)n;
		if (p->sent < p->len)
			continue;
		out->head = p->next;
		if (!out->head)
			out->tail = NULL;
		out->queued_bytes -= p->len;
		free(p);
	}
	return 0;
}
