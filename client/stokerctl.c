/* SPDX-License-Identifier: MIT */
/* stokerctl: ask a running stokerd how it is doing. */
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "stoker.h"

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: stokerctl [--socket PATH] COMMAND\n\n"
		"Commands:\n"
		"  stats [--json]   throughput, errors, workers and attached clients\n\n"
		"  -s, --socket PATH  the daemon's socket (default $STOKER_SOCKET or %s)\n"
		"  -h, --help         show this help\n"
		"  -V, --version      show the version\n",
		STOKER_DEFAULT_SOCKET);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{"socket", required_argument, NULL, 's'},
		{"json", no_argument, NULL, 'j'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{NULL, 0, NULL, 0},
	};
	const char *socket_path = NULL, *command;
	struct stoker *s = NULL;
	bool json = false;
	char *out = NULL;
	int c, r;

	while ((c = getopt_long(argc, argv, "s:jhV", opts, NULL)) != -1) {
		switch (c) {
		case 's':
			socket_path = optarg;
			break;
		case 'j':
			json = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf("stokerctl %s\n", stoker_version());
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return 2;
	}
	command = argv[optind];
	if (strcmp(command, "stats") != 0) {
		fprintf(stderr, "stokerctl: unknown command '%s'\n", command);
		return 2;
	}
	r = stoker_connect(socket_path, &s);
	if (r < 0) {
		fprintf(stderr, "stokerctl: cannot reach stokerd at %s: %s\n",
			socket_path ? socket_path : (getenv("STOKER_SOCKET") ? getenv("STOKER_SOCKET") : STOKER_DEFAULT_SOCKET),
			strerror(-r));
		return 1;
	}
	r = json ? stoker_stats_json(s, &out) : stoker_stats_text(s, &out);
	if (r < 0) {
		fprintf(stderr, "stokerctl: stats: %s (%s)\n", strerror(-r), stoker_last_error(s));
		stoker_close(s);
		return 1;
	}
	fputs(out, stdout);
	free(out);
	stoker_close(s);
	return 0;
}
