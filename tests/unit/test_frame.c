/* SPDX-License-Identifier: MIT */
/* Frame parsing and fd passing over a real socketpair. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "frame.h"

static int sp[2];

static int setup(void **state)
{
	(void)state;
	return socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sp);
}

static int teardown(void **state)
{
	(void)state;
	close(sp[0]);
	close(sp[1]);
	return 0;
}

static void push_release(struct frame_out *out, uint32_t slot, int fd)
{
	Stoker__Message m = STOKER__MESSAGE__INIT;
	Stoker__Release rel = STOKER__RELEASE__INIT;

	rel.slot = slot;
	m.body_case = STOKER__MESSAGE__BODY_RELEASE;
	m.release = &rel;
	assert_int_equal(frame_out_push(out, &m, fd), 0);
}

static void test_roundtrip_many(void **state)
{
	struct frame_out out;
	struct frame_in in;
	Stoker__Message *m;
	uint32_t seen = 0;

	(void)state;
	frame_out_init(&out, 1 << 20);
	frame_in_init(&in, 1024);
	for (uint32_t i = 0; i < 100; i++)
		push_release(&out, i, -1);
	assert_int_equal(frame_out_flush(&out, sp[0]), 0);
	assert_true(frame_out_empty(&out));
	while (seen < 100) {
		ssize_t n = frame_in_fill(&in, sp[1]);
		assert_true(n > 0);
		while (frame_in_next(&in, &m) == 1) {
			assert_int_equal(m->body_case, STOKER__MESSAGE__BODY_RELEASE);
			assert_int_equal(m->release->slot, seen);
			seen++;
			stoker__message__free_unpacked(m, NULL);
		}
	}
	assert_int_equal(frame_in_fill(&in, sp[1]), -EAGAIN);
	frame_in_release(&in);
	frame_out_release(&out);
}

/* A frame that arrives a byte at a time is parsed once, whole. */
static void test_partial_frames(void **state)
{
	struct frame_out out;
	struct frame_in in;
	Stoker__Message *m = NULL;
	uint8_t buf[64];
	ssize_t len;
	int got = 0;

	(void)state;
	frame_out_init(&out, 1 << 20);
	frame_in_init(&in, 1024);
	push_release(&out, 7, -1);
	assert_int_equal(frame_out_flush(&out, sp[0]), 0);
	len = read(sp[1], buf, sizeof(buf));
	assert_true(len > 4);
	for (ssize_t i = 0; i < len; i++) {
		assert_int_equal(write(sp[0], buf + i, 1), 1);
		assert_int_equal(frame_in_fill(&in, sp[1]), 1);
		int r = frame_in_next(&in, &m);
		if (i < len - 1) {
			assert_int_equal(r, 0);
		} else {
			assert_int_equal(r, 1);
			got = 1;
		}
	}
	assert_int_equal(got, 1);
	assert_int_equal(m->release->slot, 7);
	stoker__message__free_unpacked(m, NULL);
	frame_in_release(&in);
	frame_out_release(&out);
}

static void test_oversize_refused(void **state)
{
	uint8_t hdr[4] = {0xf0, 0xff, 0xff, 0xff};
	struct frame_in in;
	Stoker__Message *m;

	(void)state;
	frame_in_init(&in, 1024);
	assert_int_equal(write(sp[0], hdr, 4), 4);
	assert_int_equal(frame_in_fill(&in, sp[1]), 4);
	assert_int_equal(frame_in_next(&in, &m), -EMSGSIZE);
	frame_in_release(&in);
}

static void test_garbage_body(void **state)
{
	uint8_t frame[4 + 6] = {6, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
	struct frame_in in;
	Stoker__Message *m;

	(void)state;
	frame_in_init(&in, 1024);
	assert_int_equal(write(sp[0], frame, sizeof(frame)), (ssize_t)sizeof(frame));
	assert_true(frame_in_fill(&in, sp[1]) > 0);
	assert_int_equal(frame_in_next(&in, &m), -EBADMSG);
	frame_in_release(&in);
}

/* The fd rides with its frame, arrives close-on-exec, and the sender's
 * copy is closed once sent. */
static void test_fd_passing(void **state)
{
	struct frame_out out;
	struct frame_in in;
	Stoker__Message *m;
	int p[2], fd;

	(void)state;
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	frame_out_init(&out, 1 << 20);
	frame_in_init(&in, 1024);
	push_release(&out, 1, p[0]);
	assert_int_equal(frame_out_flush(&out, sp[0]), 0);
	assert_int_equal(fcntl(p[0], F_GETFD), -1); /* closed by the queue */
	assert_true(frame_in_fill(&in, sp[1]) > 0);
	assert_int_equal(frame_in_next(&in, &m), 1);
	stoker__message__free_unpacked(m, NULL);
	fd = frame_in_take_fd(&in);
	assert_true(fd >= 0);
	assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
	assert_int_equal(write(p[1], "x", 1), 1);
	char ch = 0;
	assert_int_equal(read(fd, &ch, 1), 1);
	assert_int_equal(ch, 'x');
	assert_int_equal(frame_in_take_fd(&in), -1);
	close(fd);
	close(p[1]);
	frame_in_release(&in);
	frame_out_release(&out);
}

/* Two fds with one frame (a device ring's allocation, then its release
 * words): both arrive, in order; the sender's copies are closed. */
static void test_two_fds(void **state)
{
	Stoker__Message m = STOKER__MESSAGE__INIT, *got;
	Stoker__Release rel = STOKER__RELEASE__INIT;
	struct frame_out out;
	struct frame_in in;
	int a[2], b[2], fa, fb;
	char ch = 0;

	(void)state;
	assert_int_equal(pipe2(a, O_CLOEXEC), 0);
	assert_int_equal(pipe2(b, O_CLOEXEC), 0);
	frame_out_init(&out, 1 << 20);
	frame_in_init(&in, 1024);
	m.body_case = STOKER__MESSAGE__BODY_RELEASE;
	m.release = &rel;
	assert_int_equal(frame_out_push2(&out, &m, a[0], b[0]), 0);
	assert_int_equal(frame_out_flush(&out, sp[0]), 0);
	assert_int_equal(fcntl(a[0], F_GETFD), -1);
	assert_int_equal(fcntl(b[0], F_GETFD), -1);
	assert_true(frame_in_fill(&in, sp[1]) > 0);
	assert_int_equal(frame_in_next(&in, &got), 1);
	stoker__message__free_unpacked(got, NULL);
	fa = frame_in_take_fd(&in);
	fb = frame_in_take_fd(&in);
	assert_true(fa >= 0 && fb >= 0);
	assert_int_equal(write(b[1], "b", 1), 1);
	assert_int_equal(read(fb, &ch, 1), 1);
	assert_int_equal(ch, 'b'); /* the second fd is the second one pushed */
	assert_int_equal(write(a[1], "a", 1), 1);
	assert_int_equal(read(fa, &ch, 1), 1);
	assert_int_equal(ch, 'a');
	assert_int_equal(frame_in_take_fd(&in), -1);
	close(fa);
	close(fb);
	close(a[1]);
	close(b[1]);
	/* Refused pushes close both. */
	assert_int_equal(pipe2(a, O_CLOEXEC), 0);
	assert_int_equal(pipe2(b, O_CLOEXEC), 0);
	out.max_queued_bytes = 0;
	assert_int_equal(frame_out_push2(&out, &m, a[0], b[0]), -ENOBUFS);
	assert_int_equal(fcntl(a[0], F_GETFD), -1);
	assert_int_equal(fcntl(b[0], F_GETFD), -1);
	close(a[1]);
	close(b[1]);
	frame_in_release(&in);
	frame_out_release(&out);
}

/* More fds than FRAME_MAX_FDS in one message: refused, none leak. */
static void test_too_many_fds(void **state)
{
	enum { N = FRAME_MAX_FDS + 4 };
	union {
		char buf[CMSG_SPACE(sizeof(int) * N)];
		struct cmsghdr align;
	} control;
	int fds[N], before, after;
	struct iovec iov = {.iov_base = (void *)"abcd", .iov_len = 4};
	struct msghdr mh = {.msg_iov = &iov,
			    .msg_iovlen = 1,
			    .msg_control = control.buf,
			    .msg_controllen = sizeof(control.buf)};
	struct cmsghdr *c;
	struct frame_in in;

	(void)state;
	before = open("/dev/null", O_RDONLY | O_CLOEXEC);
	close(before);
	for (int i = 0; i < N; i++)
		fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
	memset(&control, 0, sizeof(control));
	c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int) * N);
	memcpy(CMSG_DATA(c), fds, sizeof(fds));
	assert_int_equal(sendmsg(sp[0], &mh, 0), 4);
	for (int i = 0; i < N; i++)
		close(fds[i]);
	frame_in_init(&in, 1024);
	/* The kernel truncates to our control buffer (MSG_CTRUNC) or we find
	 * too many: either way -EPROTO and nothing kept. */
	assert_int_equal(frame_in_fill(&in, sp[1]), -EPROTO);
	assert_int_equal(in.nfds, 0);
	after = open("/dev/null", O_RDONLY | O_CLOEXEC);
	assert_int_equal(after, before); /* the lowest free fd is unchanged: no leak */
	close(after);
	frame_in_release(&in);
}

static void test_queue_bound(void **state)
{
	struct frame_out out;
	Stoker__Message m = STOKER__MESSAGE__INIT;
	Stoker__Release rel = STOKER__RELEASE__INIT;
	int r = 0, pushed = 0;

	(void)state;
	frame_out_init(&out, 64);
	m.body_case = STOKER__MESSAGE__BODY_RELEASE;
	m.release = &rel;
	while ((r = frame_out_push(&out, &m, -1)) == 0)
		pushed++;
	assert_int_equal(r, -ENOBUFS);
	assert_true(pushed > 0 && pushed < 64);
	assert_true(out.queued_bytes <= 64);
	frame_out_release(&out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_roundtrip_many, setup, teardown),
		cmocka_unit_test_setup_teardown(test_partial_frames, setup, teardown),
		cmocka_unit_test_setup_teardown(test_oversize_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_garbage_body, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fd_passing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_two_fds, setup, teardown),
		cmocka_unit_test_setup_teardown(test_too_many_fds, setup, teardown),
		cmocka_unit_test(test_queue_bound),
	};
	return cmocka_run_group_tests_name("frame", tests, NULL, NULL);
}
