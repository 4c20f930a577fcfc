/* SPDX-License-Identifier: MIT */
/*
 * access.h: the kernel decides what a client may read. Runs as root (the
 * tests do): files owned by root with modes and groups, checked as uids
 * and gids that need no account (the kernel knows only numbers).
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "access.h"
#include "dataset.h"

#define SCRATCH_NAME "access"
#include "scratch_dir.h"

#define NOBODY 4243u
#define GROUP 4242u
#define DAEMON 4244u /* a non-root stokerd, as the unit runs it */

static void put(const char *rel, mode_t mode, gid_t gid)
{
	char path[512];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, "x", 1), 1);
	close(fd);
	assert_int_equal(chown(path, 0, gid), 0);
	assert_int_equal(chmod(path, mode), 0);
}

static void dir(const char *rel, mode_t mode)
{
	char path[512];

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	assert_int_equal(mkdir(path, mode), 0);
	assert_int_equal(chmod(path, mode), 0);
}

/*
 * ds/a/1.jpg 0644, ds/a/2.jpg 0600, ds/a/3.jpg 0640 group GROUP,
 * ds/b/4.jpg -> secret/4.jpg (secret 0700), ds/b/5.jpg 0644.
 */
static struct dataset *make_tree(void)
{
	char path[512], target[512];
	struct dataset *ds;
	char err[256];

	assert_int_equal(chmod(root, 0755), 0);
	dir("ds", 0755);
	dir("ds/a", 0755);
	dir("ds/b", 0755);
	dir("secret", 0700);
	put("ds/a/1.jpg", 0644, 0);
	put("ds/a/2.jpg", 0600, 0);
	put("ds/a/3.jpg", 0640, GROUP);
	put("secret/4.jpg", 0644, 0);
	put("ds/b/5.jpg", 0644, 0);
	snprintf(path, sizeof(path), "%s/ds/b/4.jpg", root);
	snprintf(target, sizeof(target), "%s/secret/4.jpg", root);
	assert_int_equal(symlink(target, path), 0);
	snprintf(path, sizeof(path), "%s/ds", root);
	assert_int_equal(dataset_open(path, 100, &ds, err, sizeof(err)), 0);
	assert_int_equal(ds->count, 5);
	return ds;
}

static uint64_t index_of(const struct dataset *ds, const char *name)
{
	for (uint64_t i = 0; i < ds->count; i++)
		if (strcmp(dataset_name(ds, i), name) == 0)
			return i;
	fail_msg("%s not in the data set", name);
	return 0;
}

static void test_map_as_client(void **state)
{
	struct dataset *ds = make_tree();
	struct access_id nobody = {.uid = NOBODY, .gid = NOBODY};
	gid_t groups[] = {GROUP};
	struct access_id member = {.uid = NOBODY, .gid = NOBODY, .ngroups = 1, .groups = groups};
	struct access_id rootid = {0};
	struct access_map *m;
	char err[256];

	(void)state;
	if (geteuid() != 0)
		skip();
	assert_int_equal(access_map_build(&nobody, ds, &m, err, sizeof(err)), 0);
	assert_true(access_readable(m, index_of(ds, "a/1.jpg")));
	assert_false(access_readable(m, index_of(ds, "a/2.jpg"))); /* mode bits */
	assert_false(access_readable(m, index_of(ds, "a/3.jpg"))); /* not in the group */
	assert_false(access_readable(m, index_of(ds, "b/4.jpg"))); /* symlink into a 0700 dir */
	assert_true(access_readable(m, index_of(ds, "b/5.jpg")));
	assert_int_equal(m->unreadable, 3);
	assert_int_equal(m->logged[0], index_of(ds, "a/2.jpg"));
	/* The next readable one, wrapping. */
	assert_int_equal(access_next_readable(m, index_of(ds, "a/2.jpg")), index_of(ds, "b/5.jpg"));
	assert_int_equal(access_next_readable(m, index_of(ds, "b/4.jpg")), index_of(ds, "b/5.jpg"));
	free(m);

	/* A supplementary group opens 3.jpg. */
	assert_int_equal(access_map_build(&member, ds, &m, err, sizeof(err)), 0);
	assert_true(access_readable(m, index_of(ds, "a/3.jpg")));
	assert_int_equal(m->unreadable, 2);
	free(m);

	/* Root reads everything. */
	assert_int_equal(access_map_build(&rootid, ds, &m, err, sizeof(err)), 0);
	assert_int_equal(m->unreadable, 0);
	assert_true(access_map_equal(m, NULL));
	free(m);

	/* The identity was the helper thread's only: this one is still root. */
	assert_int_equal((int)syscall(SYS_setfsuid, -1), 0);
	assert_int_equal(getgroups(0, NULL) >= 0, 1);
	dataset_unref(ds);
}

/* The daemon as the systemd unit runs it: not root, CAP_DAC_READ_SEARCH,
 * CAP_SETUID and CAP_SETGID in its effective set. It reads every file
 * itself, but the check lends the client none of that (the kernel clears
 * nothing on a fsuid change between two non-zero uids: access.c must). */
static int as_capable_daemon(const struct dataset *ds)
{
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
	struct __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3];
	struct access_id nobody = {.uid = NOBODY, .gid = NOBODY};
	struct access_map *m;
	char err[256], path[512];
	int fd;

	if (prctl(PR_SET_KEEPCAPS, 1) < 0 || setgroups(0, NULL) < 0 || setresgid(DAEMON, DAEMON, DAEMON) < 0 ||
	    setresuid(DAEMON, DAEMON, DAEMON) < 0)
		return 10;
	if (syscall(SYS_capget, &h, data) < 0)
		return 11;
	data[0].effective = (1u << CAP_DAC_READ_SEARCH) | (1u << CAP_SETUID) | (1u << CAP_SETGID);
	if (syscall(SYS_capset, &h, data) < 0)
		return 12;
	snprintf(path, sizeof(path), "%s/ds/a/2.jpg", root);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 13; /* the daemon itself reads the 0600 file */
	close(fd);
	if (access_map_build(&nobody, ds, &m, err, sizeof(err)) < 0)
		return 14;
	fd = m->unreadable == 3 ? 0 : 15; /* as for the client without capabilities */
	free(m);
	return fd;
}

static void test_capable_daemon_lends_nothing(void **state)
{
	struct dataset *ds;
	pid_t pid;
	int status;

	(void)state;
	if (geteuid() != 0)
		skip();
	ds = make_tree();
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(as_capable_daemon(ds));
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	dataset_unref(ds);
}

/* A daemon without those capabilities (a user's own stokerd): its own uid
 * is checked, any other is refused with the reason, never served. */
static int as_plain_daemon(void)
{
	struct access_id other = {.uid = NOBODY, .gid = NOBODY};
	struct access_id self = {.uid = DAEMON, .gid = NOBODY}; /* a primary group it does not hold */
	char path[512], real[PATH_MAX], err[512];

	if (setgroups(0, NULL) < 0 || setresgid(DAEMON, DAEMON, DAEMON) < 0 || setresuid(DAEMON, DAEMON, DAEMON) < 0)
		return 10;
	snprintf(path, sizeof(path), "%s/ds", root);
	if (access_realpath(&other, path, real, err, sizeof(err)) != -EACCES || !strstr(err, "CAP_SETUID"))
		return 11;
	return access_realpath(&self, path, real, err, sizeof(err)) == 0 ? 0 : 12;
}

static void test_plain_daemon_refuses_others(void **state)
{
	struct dataset *ds;
	pid_t pid;
	int status;

	(void)state;
	if (geteuid() != 0)
		skip();
	ds = make_tree();
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(as_plain_daemon());
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	dataset_unref(ds);
}

static void test_realpath_refused(void **state)
{
	struct access_id nobody = {.uid = NOBODY, .gid = NOBODY};
	char path[512], real[PATH_MAX], err[256];

	(void)state;
	if (geteuid() != 0)
		skip();
	assert_int_equal(chmod(root, 0755), 0);
	dir("private", 0700);
	dir("private/cls", 0755);
	dir("open", 0755);
	snprintf(path, sizeof(path), "%s/private/cls", root);
	assert_int_equal(access_realpath(&nobody, path, real, err, sizeof(err)), -EACCES);
	assert_non_null(strstr(err, "uid 4243"));
	assert_non_null(strstr(err, path));
	/* A name that does not exist inside it is refused the same way: no
	 * probing for names the client cannot list. */
	snprintf(path, sizeof(path), "%s/private/nonexistent", root);
	assert_int_equal(access_realpath(&nobody, path, real, err, sizeof(err)), -EACCES);
	snprintf(path, sizeof(path), "%s/open", root);
	assert_int_equal(access_realpath(&nobody, path, real, err, sizeof(err)), 0);
	assert_string_equal(real, path);
}

static void test_map_helpers(void **state)
{
	struct access_map *a = calloc(1, sizeof(*a) + 3 * sizeof(uint64_t));
	struct access_map *b = calloc(1, sizeof(*b) + 3 * sizeof(uint64_t));
	uint64_t order[] = {0, 69, 70, 129, 129};

	(void)state;
	assert_non_null(a);
	assert_non_null(b);
	/* 130 samples, readable: 2 and 129 only. */
	a->count = b->count = 130;
	a->bits[0] = 1ull << 2;
	a->bits[2] = 1ull << 1;
	a->unreadable = 128;
	assert_int_equal(access_next_readable(a, 3), 129);
	assert_int_equal(access_next_readable(a, 129), 129);
	assert_int_equal(access_next_readable(a, 0), 2);
	assert_int_equal(access_count_unreadable(a, order, 5), 3);
	assert_int_equal(access_count_unreadable(NULL, order, 5), 0);
	assert_false(access_map_equal(a, b));
	assert_false(access_map_equal(a, NULL));
	memcpy(b->bits, a->bits, 3 * sizeof(uint64_t));
	b->unreadable = 128;
	assert_true(access_map_equal(a, b));
	assert_true(access_map_equal(NULL, NULL));
	/* Wrapping across a partial last word finds index 0's word again. */
	memset(a->bits, 0, 3 * sizeof(uint64_t));
	a->count = 70;
	a->bits[0] = 1ull << 5;
	assert_int_equal(access_next_readable(a, 65), 5);
	free(a);
	free(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_map_as_client, setup, teardown),
		cmocka_unit_test_setup_teardown(test_realpath_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_capable_daemon_lends_nothing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_plain_daemon_refuses_others, setup, teardown),
		cmocka_unit_test(test_map_helpers),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
