/* SPDX-License-Identifier: MIT */
/*
 * A scratch directory for one unit-test program: `root`, made by the cmocka
 * group setup and removed with everything in it by the group teardown.
 * Define SCRATCH_NAME (a string naming the program) before including.
 */
#ifndef STOKER_TEST_SCRATCH_DIR_H
#define STOKER_TEST_SCRATCH_DIR_H

#include <stdio.h>
#include <stdlib.h>

static char root[256]; /* "/tmp/stoker-test-NAME-XXXXXX" */

static int setup(void **state)
{
	(void)state;
	snprintf(root, sizeof(root), "/tmp/stoker-test-" SCRATCH_NAME "-XXXXXX");
	return mkdtemp(root) ? 0 : -1;
}

static int teardown(void **state)
{
	char cmd[sizeof(root) + 16];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	return system(cmd) == 0 ? 0 : -1;
}

#endif
