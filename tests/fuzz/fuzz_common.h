/* SPDX-License-Identifier: MIT */
/* What the fuzz targets and their seed generator agree on. */
#ifndef STOKER_FUZZ_COMMON_H
#define STOKER_FUZZ_COMMON_H

#include <stdbool.h>

/* The data set fuzz_dispatch creates at start-up (small real JPEGs, one
 * corrupt), which its seeds attach to. */
#define FUZZ_DATASET "/tmp/stoker-fuzz-dataset"
#define FUZZ_DATASET_SAMPLES 5

/* The sealed memfd fuzz_client hands the library as its ring. */
#define FUZZ_RING_BYTES (1u << 20)

#endif
