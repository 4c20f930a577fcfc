/* SPDX-License-Identifier: MIT */
/* Configuration: keys, values as text, layers and their order, origins. */
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "config.h"
#include "paths.h"

#define SCRATCH_NAME "config"
#include "scratch_dir.h"

static void write_file(const char *rel, const char *text)
{
	char path[PATH_MAX * 2], dir[PATH_MAX * 2];
	FILE *f;

	snprintf(path, sizeof(path), "%s%s", root, rel);
	/* mkdir -p of the parent */
	snprintf(dir, sizeof(dir), "%s", path);
	for (char *p = dir + strlen(root) + 1; *p; p++) {
		if (*p == '/') {
			*p = '\0';
			mkdir(dir, 0755);
			*p = '/';
		}
	}
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

/* Every key's text form is accepted back unchanged. */
static void test_format_round_trip(void **state)
{
	struct config c, d;

	(void)state;
	config_defaults(&c);
	assert_int_equal(config_set(&c, "cache_bytes", "3G"), 0);
	assert_int_equal(config_set(&c, "socket_mode", "0640"), 0);
	assert_int_equal(config_set(&c, "max_frame_bytes", "128K"), 0);
	assert_int_equal(config_set(&c, "metrics_listen", "[::1]:9477"), 0);
	for (size_t i = 0; i < config_key_count(); i++) {
		char a[CONFIG_VALUE_MAX], b[CONFIG_VALUE_MAX];

		config_defaults(&d);
		config_format(&c, i, a, sizeof(a));
		assert_int_equal(config_set(&d, config_key_name(i), a), 0);
		config_format(&d, i, b, sizeof(b));
		assert_string_equal(a, b);
	}
	assert_int_equal(config_key_index("no_such_key"), -ENOENT);
	assert_int_equal(config_set(&c, "no_such_key", "1"), -ENOENT);
	assert_int_equal(config_set(&c, "workers", "4097"), -EINVAL);
	assert_int_equal(config_set(&c, "socket_mode", "0999"), -EINVAL);
	assert_int_equal(config_set(&c, "socket", ""), -EINVAL);
	assert_int_equal(config_set(&c, "admin_group", ""), 0);
	assert_true(config_key_live((size_t)config_key_index("workers")));
	assert_false(config_key_live((size_t)config_key_index("socket")));
}

static void test_validate(void **state)
{
	struct config c;
	char err[256];

	(void)state;
	config_defaults(&c);
	assert_int_equal(config_validate(&c, err, sizeof(err)), 0);
	c.prefetch = c.max_prefetch + 1;
	assert_int_equal(config_validate(&c, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "max_prefetch"));
	config_defaults(&c);
	config_set(&c, "metrics_listen", "192.168.1.1:9477");
	assert_int_equal(config_validate(&c, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "loopback"));
	config_set(&c, "metrics_listen", "127.0.0.2:9477");
	assert_int_equal(config_validate(&c, err, sizeof(err)), 0);
	config_set(&c, "metrics_listen", "localhost");
	assert_int_equal(config_validate(&c, err, sizeof(err)), -EINVAL);
	config_defaults(&c);
	config_set(&c, "admin_group", "no-such-group-for-stoker");
	assert_int_equal(config_validate(&c, err, sizeof(err)), -EINVAL);
	config_defaults(&c);
	config_set(&c, "metrics_textfile", "relative.prom");
	assert_int_equal(config_validate(&c, err, sizeof(err)), -EINVAL);
}

/* Vendor < admin < drop-ins in strcmp order; origins follow. */
static void test_layers(void **state)
{
	struct config c;
	struct config_origins o;
	struct config_files files;
	char err[512], dropin_b[PATH_MAX * 2];
	int i;

	(void)state;
	write_file(STOKER_VENDOR_CONFIG, "[stokerd]\nworkers = 1\nmax_clients = 10\n");
	write_file(STOKER_ADMIN_CONFIG_DIR "/stoker.conf", "[stokerd]\nworkers = 2\n");
	write_file(STOKER_ADMIN_CONFIG_DIR "/stoker.conf.d/b.conf", "[stokerd]\nworkers = 4\n");
	write_file(STOKER_ADMIN_CONFIG_DIR "/stoker.conf.d/a.conf", "[stokerd]\nworkers = 3\nprefetch = 2\n");
	write_file(STOKER_ADMIN_CONFIG_DIR "/stoker.conf.d/.hidden.conf", "[stokerd]\nworkers = 9\n");
	write_file(STOKER_ADMIN_CONFIG_DIR "/stoker.conf.d/c.conf.disabled", "[stokerd]\nworkers = 9\n");
	config_defaults(&c);
	config_origins_init(&o);
	assert_int_equal(config_load_layers(&c, &o, &files, root, NULL, err, sizeof(err)), 0);
	assert_int_equal(c.workers, 4);
	assert_int_equal(c.prefetch, 2);
	assert_int_equal(c.max_clients, 10);
	assert_int_equal(files.n, 4);
	snprintf(dropin_b, sizeof(dropin_b), "%s%s/stoker.conf.d/b.conf", root, STOKER_ADMIN_CONFIG_DIR);
	assert_string_equal(files.path[3], dropin_b);
	i = config_key_index("workers");
	assert_string_equal(o.key[i], dropin_b);
	assert_string_equal(o.key[config_key_index("max_batch_size")], "default");
	assert_int_equal(config_set_from(&c, &o, "workers", "5", "command line"), 0);
	assert_string_equal(o.key[i], "command line");

	/* A bad line names the file, the line and the key. */
	write_file(STOKER_ADMIN_CONFIG_DIR "/stoker.conf.d/d.conf", "[stokerd]\n\nworkers = lots\n");
	config_defaults(&c);
	assert_int_equal(config_load_layers(&c, NULL, NULL, root, NULL, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "d.conf:3"));
	assert_non_null(strstr(err, "workers"));
	write_file(STOKER_ADMIN_CONFIG_DIR "/stoker.conf.d/d.conf", "[other]\nworkers = 1\n");
	assert_int_equal(config_load_layers(&c, NULL, NULL, root, NULL, err, sizeof(err)), -ENOENT);

	/* An explicit file replaces the layers, and must exist. */
	write_file("/only.conf", "[stokerd]\nworkers = 7\n");
	snprintf(dropin_b, sizeof(dropin_b), "%s/only.conf", root);
	config_defaults(&c);
	assert_int_equal(config_load_layers(&c, NULL, &files, root, dropin_b, err, sizeof(err)), 0);
	assert_int_equal(c.workers, 7);
	assert_int_equal(files.n, 1);
	snprintf(dropin_b, sizeof(dropin_b), "%s/missing.conf", root);
	assert_int_equal(config_load_layers(&c, NULL, NULL, root, dropin_b, err, sizeof(err)), -ENOENT);

	/* No files at all is fine: defaults. */
	snprintf(dropin_b, sizeof(dropin_b), "%s/empty-root", root);
	config_defaults(&c);
	assert_int_equal(config_load_layers(&c, NULL, &files, dropin_b, NULL, err, sizeof(err)), 0);
	assert_int_equal(files.n, 0);
}

static const char *origin(const struct config_origins *o, const char *key)
{
	return o->key[config_key_index(key)];
}

/* The whole layering: defaults < package file < /etc < drop-ins < flags <
 * runtime sets, each key's value from its highest layer and its origin
 * reported. */
static void test_layers_all(void **state)
{
	const char *cmdline[CONFIG_MAX_KEYS] = {0}, *runtime[CONFIG_MAX_KEYS] = {0};
	struct config_overrides ov = {.cmdline = cmdline, .runtime = runtime};
	char err[512], vendor[PATH_MAX * 2], admin[PATH_MAX * 2], dropin_a[PATH_MAX * 2], dropin_b[PATH_MAX * 2];
	struct config c;
	struct config_origins o;
	struct config_files files;

	(void)state;
	write_file(STOKER_VENDOR_CONFIG, "[stokerd]\nworkers = 1\nmax_clients = 10\nmax_batch_size = 100\n"
					 "max_scans = 5\n");
	write_file(STOKER_ADMIN_CONFIG_DIR "/stoker.conf", "[stokerd]\nworkers = 2\nmax_batch_size = 200\n");
	write_file(STOKER_ADMIN_CONFIG_DIR "/stoker.conf.d/a.conf", "[stokerd]\nworkers = 3\nprefetch = 2\n"
								    "max_frame_bytes = 4096\n");
	write_file(STOKER_ADMIN_CONFIG_DIR "/stoker.conf.d/b.conf", "[stokerd]\nprefetch = 3\n");
	snprintf(vendor, sizeof(vendor), "%s%s", root, STOKER_VENDOR_CONFIG);
	snprintf(admin, sizeof(admin), "%s%s/stoker.conf", root, STOKER_ADMIN_CONFIG_DIR);
	snprintf(dropin_a, sizeof(dropin_a), "%s%s/stoker.conf.d/a.conf", root, STOKER_ADMIN_CONFIG_DIR);
	snprintf(dropin_b, sizeof(dropin_b), "%s%s/stoker.conf.d/b.conf", root, STOKER_ADMIN_CONFIG_DIR);
	cmdline[config_key_index("workers")] = "6";
	cmdline[config_key_index("max_clients")] = "20";
	cmdline[config_key_index("max_frame_bytes")] = "8192";
	runtime[config_key_index("workers")] = "7";
	runtime[config_key_index("max_prefetch")] = "16";

	memset(&c, 0x5a, sizeof(c)); /* everything comes from the layers */
	assert_int_equal(config_load_all(&c, &o, &files, root, NULL, &ov, err, sizeof(err)), 0);
	assert_int_equal(files.n, 4);
	assert_string_equal(files.path[0], vendor);
	assert_string_equal(files.path[1], admin);
	assert_string_equal(files.path[2], dropin_a);
	assert_string_equal(files.path[3], dropin_b);
	assert_int_equal(c.max_image_size, 2048);
	assert_string_equal(origin(&o, "max_image_size"), "default");
	assert_int_equal(c.max_scans, 5);
	assert_string_equal(origin(&o, "max_scans"), vendor);
	assert_int_equal(c.max_batch_size, 200);
	assert_string_equal(origin(&o, "max_batch_size"), admin);
	assert_int_equal(c.prefetch, 3);
	assert_string_equal(origin(&o, "prefetch"), dropin_b);
	assert_int_equal(c.max_clients, 20);
	assert_string_equal(origin(&o, "max_clients"), CONFIG_ORIGIN_CMDLINE);
	assert_int_equal(c.max_frame_bytes, 8192);
	assert_string_equal(origin(&o, "max_frame_bytes"), CONFIG_ORIGIN_CMDLINE);
	assert_int_equal(c.workers, 7);
	assert_string_equal(origin(&o, "workers"), CONFIG_ORIGIN_RUNTIME);
	assert_int_equal(c.max_prefetch, 16);
	assert_string_equal(origin(&o, "max_prefetch"), CONFIG_ORIGIN_RUNTIME);

	/* Without the runtime layer, the flag; without the flags, the drop-in. */
	ov.runtime = NULL;
	assert_int_equal(config_load_all(&c, &o, NULL, root, NULL, &ov, err, sizeof(err)), 0);
	assert_int_equal(c.workers, 6);
	assert_string_equal(origin(&o, "workers"), CONFIG_ORIGIN_CMDLINE);
	assert_string_equal(origin(&o, "max_prefetch"), "default");
	assert_int_equal(config_load_all(&c, &o, NULL, root, NULL, NULL, err, sizeof(err)), 0);
	assert_int_equal(c.workers, 3);
	assert_string_equal(origin(&o, "workers"), dropin_a);
	assert_int_equal(c.max_frame_bytes, 4096);

	/* --config FILE replaces the file layers, not the flags. */
	write_file("/only.conf", "[stokerd]\nworkers = 9\nprefetch = 4\n");
	snprintf(admin, sizeof(admin), "%s/only.conf", root);
	ov.runtime = runtime;
	assert_int_equal(config_load_all(&c, &o, &files, root, admin, &ov, err, sizeof(err)), 0);
	assert_int_equal(files.n, 1);
	assert_int_equal(c.prefetch, 4);
	assert_string_equal(origin(&o, "prefetch"), admin);
	assert_int_equal(c.max_batch_size, 4096); /* the default: /etc is not read */
	assert_int_equal(c.workers, 7);

	/* A bad flag names itself; a bad runtime value fails too. */
	cmdline[config_key_index("max_clients")] = "lots";
	assert_int_equal(config_load_all(&c, &o, NULL, root, NULL, &ov, err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "bad value 'lots' for max_clients on the command line");
	cmdline[config_key_index("max_clients")] = NULL;
	runtime[config_key_index("max_prefetch")] = "0";
	assert_int_equal(config_load_all(&c, &o, NULL, root, NULL, &ov, err, sizeof(err)), -EINVAL);
	/* A bad file line still comes first, with its place. */
	write_file(STOKER_ADMIN_CONFIG_DIR "/stoker.conf.d/c.conf", "[stokerd]\nworkers = many\n");
	assert_int_equal(config_load_all(&c, &o, NULL, root, NULL, NULL, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "c.conf:2"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_format_round_trip),
		cmocka_unit_test(test_validate),
		cmocka_unit_test_setup_teardown(test_layers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_layers_all, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
