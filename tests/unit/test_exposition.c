/* SPDX-License-Identifier: MIT */
/* The metrics' text exposition (loop/exposition.h): a fixed snapshot
 * renders to exactly this text. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "exposition.h"

/* The families every daemon has, with their values in the snapshot below. */
#define HEAD                                                                                                    \
	"# HELP stoker_build_info The stokerd version, as a label.\n"                                           \
	"# TYPE stoker_build_info gauge\n"                                                                      \
	"stoker_build_info{version=\"1.2.3\"} 1\n"                                                              \
	"# HELP process_start_time_seconds Start time of the process since the Unix epoch in seconds.\n"        \
	"# TYPE process_start_time_seconds gauge\n"                                                             \
	"process_start_time_seconds 1700000000.25\n"                                                            \
	"# HELP process_resident_memory_bytes Resident memory size in bytes.\n"                                 \
	"# TYPE process_resident_memory_bytes gauge\n"                                                          \
	"process_resident_memory_bytes 104857600\n"                                                             \
	"# HELP stoker_draining 1 while draining or stopping: no new clients.\n"                                \
	"# TYPE stoker_draining gauge\n"                                                                        \
	"stoker_draining 0\n"                                                                                   \
	"# HELP stoker_images_served_total Images delivered to clients.\n"                                      \
	"# TYPE stoker_images_served_total counter\n"                                                           \
	"stoker_images_served_total 12800\n"                                                                    \
	"# HELP stoker_batches_served_total Batches delivered to clients.\n"                                    \
	"# TYPE stoker_batches_served_total counter\n"                                                          \
	"stoker_batches_served_total 100\n"                                                                     \
	"# HELP stoker_decode_errors_total Samples that could not be read or decoded (each replaced).\n"        \
	"# TYPE stoker_decode_errors_total counter\n"                                                           \
	"stoker_decode_errors_total 3\n"                                                                        \
	"# HELP stoker_decode_error_files_total Distinct files found unreadable (each once per opening of its " \
	"data set).\n"                                                                                          \
	"# TYPE stoker_decode_error_files_total counter\n"                                                      \
	"stoker_decode_error_files_total 2\n"                                                                   \
	"# HELP stoker_protocol_errors_total Clients cut off for breaking the protocol.\n"                      \
	"# TYPE stoker_protocol_errors_total counter\n"                                                         \
	"stoker_protocol_errors_total 1\n"                                                                      \
	"# HELP stoker_samples_decoded_total Samples decoded by the workers.\n"                                 \
	"# TYPE stoker_samples_decoded_total counter\n"                                                         \
	"stoker_samples_decoded_total 12000\n"                                                                  \
	"# HELP stoker_samples_copied_total Samples copied from a coordinated job's ring instead of decoded.\n" \
	"# TYPE stoker_samples_copied_total counter\n"                                                          \
	"stoker_samples_copied_total 800\n"                                                                     \
	"# HELP stoker_label_errors_total Objects dropped from detection label files (malformed or out of "     \
	"range).\n"                                                                                             \
	"# TYPE stoker_label_errors_total counter\n"                                                            \
	"stoker_label_errors_total 4\n"                                                                         \
	"# HELP stoker_boxes_dropped_total Boxes left out of a batch: an image had more than its max_boxes.\n"  \
	"# TYPE stoker_boxes_dropped_total counter\n"                                                           \
	"stoker_boxes_dropped_total 5\n"

/* The per-client families, with no client. */
#define CLIENTS_NONE                                                                                    \
	"# HELP stoker_client_images_total Images delivered to the client.\n"                           \
	"# TYPE stoker_client_images_total counter\n"                                                   \
	"# HELP stoker_client_batches_total Batches delivered to the client.\n"                         \
	"# TYPE stoker_client_batches_total counter\n"                                                  \
	"# HELP stoker_client_wait_seconds_total Time the client spent waiting for batches (its "       \
	"data stall).\n"                                                                                \
	"# TYPE stoker_client_wait_seconds_total counter\n"                                             \
	"# HELP stoker_client_ring_bytes Shared memory in the client's batch ring.\n"                   \
	"# TYPE stoker_client_ring_bytes gauge\n"                                                       \
	"# HELP stoker_client_device_bytes GPU memory in the client's device ring (0: host batches).\n" \
	"# TYPE stoker_client_device_bytes gauge\n"                                                     \
	"# HELP stoker_client_unreadable_samples_total Planned samples the client's own uid and "       \
	"groups may not read, replaced by readable ones.\n"                                             \
	"# TYPE stoker_client_unreadable_samples_total counter\n"

static struct expo_snapshot fixed(void)
{
	return (struct expo_snapshot){
		.version = "1.2.3",
		.start_time_seconds = 1700000000.25,
		.rss_bytes = 100u << 20,
		.images_served = 12800,
		.batches_served = 100,
		.decode_errors = 3,
		.decode_error_files = 2,
		.protocol_errors = 1,
		.samples_decoded = 12000,
		.samples_copied = 800,
		.label_errors = 4,
		.boxes_dropped = 5,
		.worker_busy_ns = 61500000000ull,
		.workers = 8,
		.worker_threads = 9,
		.worker_busy_ratio = 0.75,
		.images_per_second = 0.1,
		.clients = 1,
		.connections = 2,
		.ring_bytes = 16u << 20,
		.memory_budget = 8ull << 30,
	};
}

static void expect(const struct expo_snapshot *s, const char *want)
{
	char *text;
	size_t len;

	assert_int_equal(expo_render(s, &text, &len), 0);
	assert_int_equal(len, strlen(text));
	assert_string_equal(text, want);
	free(text);
}

static void test_no_clients(void **state)
{
	struct expo_snapshot s = fixed();

	(void)state;
	s.clients = 0;
	expect(&s,
	       HEAD "# HELP stoker_worker_busy_seconds_total Time the workers spent producing samples, all summed.\n"
		    "# TYPE stoker_worker_busy_seconds_total counter\n"
		    "stoker_worker_busy_seconds_total 61.5\n"
		    "# HELP stoker_workers Worker threads configured.\n"
		    "# TYPE stoker_workers gauge\n"
		    "stoker_workers 8\n"
		    "# HELP stoker_worker_threads Worker threads running (above stoker_workers while shrinking).\n"
		    "# TYPE stoker_worker_threads gauge\n"
		    "stoker_worker_threads 9\n"
		    "# HELP stoker_worker_busy_ratio Share of worker time spent busy over the last seconds.\n"
		    "# TYPE stoker_worker_busy_ratio gauge\n"
		    "stoker_worker_busy_ratio 0.75\n"
		    "# HELP stoker_images_per_second Images delivered per second over the last seconds.\n"
		    "# TYPE stoker_images_per_second gauge\n"
		    "stoker_images_per_second 0.10000000000000001\n"
		    "# HELP stoker_clients Clients attached to a data set.\n"
		    "# TYPE stoker_clients gauge\n"
		    "stoker_clients 0\n"
		    "# HELP stoker_connections Open connections, attached or not.\n"
		    "# TYPE stoker_connections gauge\n"
		    "stoker_connections 2\n"
		    "# HELP stoker_ring_bytes Shared memory in every client's batch ring.\n"
		    "# TYPE stoker_ring_bytes gauge\n"
		    "stoker_ring_bytes 16777216\n"
		    "# HELP stoker_memory_budget_bytes The node's budget for the cache and every ring.\n"
		    "# TYPE stoker_memory_budget_bytes gauge\n"
		    "stoker_memory_budget_bytes 8589934592\n"
		    "# HELP stoker_device_bytes GPU memory in every CUDA client's device ring, all GPUs.\n"
		    "# TYPE stoker_device_bytes gauge\n"
		    "stoker_device_bytes 0\n"
		    "# HELP stoker_gpu_memory_budget_bytes Each GPU's budget for device rings (0: its free memory).\n"
		    "# TYPE stoker_gpu_memory_budget_bytes gauge\n"
		    "stoker_gpu_memory_budget_bytes 0\n" CLIENTS_NONE);
}

static void test_clients_cache_and_network(void **state)
{
	const struct expo_client cl[2] = {
		{.id = 7,
		 .pid = 4242,
		 .rank = 1,
		 .world_size = 4,
		 .dataset = "/data/a \"b\"\\c\nd",
		 .images = 640,
		 .batches = 10,
		 .wait_ns = 2500000000ull,
		 .ring_bytes = 1u << 20,
		 .device_bytes = 0,
		 .unreadable = 3},
		{.id = 9,
		 .pid = 77,
		 .rank = 0,
		 .world_size = 1,
		 .dataset = "s3://bucket/train/",
		 .images = 0,
		 .batches = 0,
		 .wait_ns = 1,
		 .ring_bytes = 4096,
		 .device_bytes = 1ull << 33},
	};
	struct expo_snapshot s = fixed();

	(void)state;
	s.draining = true;
	s.net = true;
	s.fetch = (struct fetch_stats){.requests = 50, .bytes = 123456789, .retries = 2, .errors = 1, .inflight = 3};
	s.remote_cache_hits = 11;
	s.remote_fetched = 39;
	s.remote_coalesced = 6;
	s.cache = true;
	s.cache_budget = 1ull << 30;
	s.cache_bytes = 1000;
	s.tiers[0] = (struct cache_tier_stats){.hits = 1,
					       .misses = 2,
					       .entries = 3,
					       .bytes = 4,
					       .evictions = 5,
					       .rejected = 6};
	s.tiers[1] = (struct cache_tier_stats){.hits = 10,
					       .misses = 20,
					       .entries = 30,
					       .bytes = 40,
					       .evictions = 50,
					       .rejected = 60};
	s.clients_v = cl;
	s.nclients = 2;
	s.clients = 2;
	expect(&s,
	       "# HELP stoker_build_info The stokerd version, as a label.\n"
	       "# TYPE stoker_build_info gauge\n"
	       "stoker_build_info{version=\"1.2.3\"} 1\n"
	       "# HELP process_start_time_seconds Start time of the process since the Unix epoch in seconds.\n"
	       "# TYPE process_start_time_seconds gauge\n"
	       "process_start_time_seconds 1700000000.25\n"
	       "# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
	       "# TYPE process_resident_memory_bytes gauge\n"
	       "process_resident_memory_bytes 104857600\n"
	       "# HELP stoker_draining 1 while draining or stopping: no new clients.\n"
	       "# TYPE stoker_draining gauge\n"
	       "stoker_draining 1\n"
	       "# HELP stoker_images_served_total Images delivered to clients.\n"
	       "# TYPE stoker_images_served_total counter\n"
	       "stoker_images_served_total 12800\n"
	       "# HELP stoker_batches_served_total Batches delivered to clients.\n"
	       "# TYPE stoker_batches_served_total counter\n"
	       "stoker_batches_served_total 100\n"
	       "# HELP stoker_decode_errors_total Samples that could not be read or decoded (each replaced).\n"
	       "# TYPE stoker_decode_errors_total counter\n"
	       "stoker_decode_errors_total 3\n"
	       "# HELP stoker_decode_error_files_total Distinct files found unreadable (each once per opening of its "
	       "data set).\n"
	       "# TYPE stoker_decode_error_files_total counter\n"
	       "stoker_decode_error_files_total 2\n"
	       "# HELP stoker_protocol_errors_total Clients cut off for breaking the protocol.\n"
	       "# TYPE stoker_protocol_errors_total counter\n"
	       "stoker_protocol_errors_total 1\n"
	       "# HELP stoker_samples_decoded_total Samples decoded by the workers.\n"
	       "# TYPE stoker_samples_decoded_total counter\n"
	       "stoker_samples_decoded_total 12000\n"
	       "# HELP stoker_samples_copied_total Samples copied from a coordinated job's ring instead of decoded.\n"
	       "# TYPE stoker_samples_copied_total counter\n"
	       "stoker_samples_copied_total 800\n"
	       "# HELP stoker_label_errors_total Objects dropped from detection label files (malformed or out of "
	       "range).\n"
	       "# TYPE stoker_label_errors_total counter\n"
	       "stoker_label_errors_total 4\n"
	       "# HELP stoker_boxes_dropped_total Boxes left out of a batch: an image had more than its max_boxes.\n"
	       "# TYPE stoker_boxes_dropped_total counter\n"
	       "stoker_boxes_dropped_total 5\n"
	       "# HELP stoker_net_requests_total HTTP/S3 transfers started, retries included.\n"
	       "# TYPE stoker_net_requests_total counter\n"
	       "stoker_net_requests_total 50\n"
	       "# HELP stoker_net_bytes_total HTTP/S3 body bytes received.\n"
	       "# TYPE stoker_net_bytes_total counter\n"
	       "stoker_net_bytes_total 123456789\n"
	       "# HELP stoker_net_retries_total HTTP/S3 transfers retried after a 5xx, a timeout or a lost "
	       "connection.\n"
	       "# TYPE stoker_net_retries_total counter\n"
	       "stoker_net_retries_total 2\n"
	       "# HELP stoker_net_errors_total HTTP/S3 requests that failed after their retries.\n"
	       "# TYPE stoker_net_errors_total counter\n"
	       "stoker_net_errors_total 1\n"
	       "# HELP stoker_net_inflight HTTP/S3 transfers running.\n"
	       "# TYPE stoker_net_inflight gauge\n"
	       "stoker_net_inflight 3\n"
	       "# HELP stoker_remote_cache_hits_total Remote samples found in the node cache (not fetched).\n"
	       "# TYPE stoker_remote_cache_hits_total counter\n"
	       "stoker_remote_cache_hits_total 11\n"
	       "# HELP stoker_remote_fetched_total Remote samples fetched from their store.\n"
	       "# TYPE stoker_remote_fetched_total counter\n"
	       "stoker_remote_fetched_total 39\n"
	       "# HELP stoker_remote_coalesced_total Remote samples that shared a fetch of the same object already "
	       "in flight.\n"
	       "# TYPE stoker_remote_coalesced_total counter\n"
	       "stoker_remote_coalesced_total 6\n"
	       "# HELP stoker_worker_busy_seconds_total Time the workers spent producing samples, all summed.\n"
	       "# TYPE stoker_worker_busy_seconds_total counter\n"
	       "stoker_worker_busy_seconds_total 61.5\n"
	       "# HELP stoker_workers Worker threads configured.\n"
	       "# TYPE stoker_workers gauge\n"
	       "stoker_workers 8\n"
	       "# HELP stoker_worker_threads Worker threads running (above stoker_workers while shrinking).\n"
	       "# TYPE stoker_worker_threads gauge\n"
	       "stoker_worker_threads 9\n"
	       "# HELP stoker_worker_busy_ratio Share of worker time spent busy over the last seconds.\n"
	       "# TYPE stoker_worker_busy_ratio gauge\n"
	       "stoker_worker_busy_ratio 0.75\n"
	       "# HELP stoker_images_per_second Images delivered per second over the last seconds.\n"
	       "# TYPE stoker_images_per_second gauge\n"
	       "stoker_images_per_second 0.10000000000000001\n"
	       "# HELP stoker_clients Clients attached to a data set.\n"
	       "# TYPE stoker_clients gauge\n"
	       "stoker_clients 2\n"
	       "# HELP stoker_connections Open connections, attached or not.\n"
	       "# TYPE stoker_connections gauge\n"
	       "stoker_connections 2\n"
	       "# HELP stoker_ring_bytes Shared memory in every client's batch ring.\n"
	       "# TYPE stoker_ring_bytes gauge\n"
	       "stoker_ring_bytes 16777216\n"
	       "# HELP stoker_memory_budget_bytes The node's budget for the cache and every ring.\n"
	       "# TYPE stoker_memory_budget_bytes gauge\n"
	       "stoker_memory_budget_bytes 8589934592\n"
	       "# HELP stoker_device_bytes GPU memory in every CUDA client's device ring, all GPUs.\n"
	       "# TYPE stoker_device_bytes gauge\n"
	       "stoker_device_bytes 0\n"
	       "# HELP stoker_gpu_memory_budget_bytes Each GPU's budget for device rings (0: its free memory).\n"
	       "# TYPE stoker_gpu_memory_budget_bytes gauge\n"
	       "stoker_gpu_memory_budget_bytes 0\n"
	       "# HELP stoker_cache_budget_bytes Bytes the node cache may hold.\n"
	       "# TYPE stoker_cache_budget_bytes gauge\n"
	       "stoker_cache_budget_bytes 1073741824\n"
	       "# HELP stoker_cache_bytes Bytes the node cache holds, entries and overhead.\n"
	       "# TYPE stoker_cache_bytes gauge\n"
	       "stoker_cache_bytes 1000\n"
	       "# HELP stoker_cache_hits_total Cache look-ups that found the sample.\n"
	       "# TYPE stoker_cache_hits_total counter\n"
	       "stoker_cache_hits_total{tier=\"encoded\"} 1\n"
	       "stoker_cache_hits_total{tier=\"decoded\"} 10\n"
	       "# HELP stoker_cache_misses_total Cache look-ups that did not.\n"
	       "# TYPE stoker_cache_misses_total counter\n"
	       "stoker_cache_misses_total{tier=\"encoded\"} 2\n"
	       "stoker_cache_misses_total{tier=\"decoded\"} 20\n"
	       "# HELP stoker_cache_evictions_total Entries evicted to make room.\n"
	       "# TYPE stoker_cache_evictions_total counter\n"
	       "stoker_cache_evictions_total{tier=\"encoded\"} 5\n"
	       "stoker_cache_evictions_total{tier=\"decoded\"} 50\n"
	       "# HELP stoker_cache_rejected_total Entries offered but not admitted.\n"
	       "# TYPE stoker_cache_rejected_total counter\n"
	       "stoker_cache_rejected_total{tier=\"encoded\"} 6\n"
	       "stoker_cache_rejected_total{tier=\"decoded\"} 60\n"
	       "# HELP stoker_cache_entries Entries in the cache tier.\n"
	       "# TYPE stoker_cache_entries gauge\n"
	       "stoker_cache_entries{tier=\"encoded\"} 3\n"
	       "stoker_cache_entries{tier=\"decoded\"} 30\n"
	       "# HELP stoker_cache_tier_bytes Bytes of the cache tier's entries.\n"
	       "# TYPE stoker_cache_tier_bytes gauge\n"
	       "stoker_cache_tier_bytes{tier=\"encoded\"} 4\n"
	       "stoker_cache_tier_bytes{tier=\"decoded\"} 40\n"
	       "# HELP stoker_client_images_total Images delivered to the client.\n"
	       "# TYPE stoker_client_images_total counter\n"
	       "stoker_client_images_total{client=\"7\",pid=\"4242\",rank=\"1\",world_size=\"4\","
	       "dataset=\"/data/a \\\"b\\\"\\\\c\\nd\"} 640\n"
	       "stoker_client_images_total{client=\"9\",pid=\"77\",rank=\"0\",world_size=\"1\","
	       "dataset=\"s3://bucket/train/\"} 0\n"
	       "# HELP stoker_client_batches_total Batches delivered to the client.\n"
	       "# TYPE stoker_client_batches_total counter\n"
	       "stoker_client_batches_total{client=\"7\",pid=\"4242\",rank=\"1\",world_size=\"4\","
	       "dataset=\"/data/a \\\"b\\\"\\\\c\\nd\"} 10\n"
	       "stoker_client_batches_total{client=\"9\",pid=\"77\",rank=\"0\",world_size=\"1\","
	       "dataset=\"s3://bucket/train/\"} 0\n"
	       "# HELP stoker_client_wait_seconds_total Time the client spent waiting for batches (its data stall).\n"
	       "# TYPE stoker_client_wait_seconds_total counter\n"
	       "stoker_client_wait_seconds_total{client=\"7\",pid=\"4242\",rank=\"1\",world_size=\"4\","
	       "dataset=\"/data/a \\\"b\\\"\\\\c\\nd\"} 2.5\n"
	       "stoker_client_wait_seconds_total{client=\"9\",pid=\"77\",rank=\"0\",world_size=\"1\","
	       "dataset=\"s3://bucket/train/\"} 1.0000000000000001e-09\n"
	       "# HELP stoker_client_ring_bytes Shared memory in the client's batch ring.\n"
	       "# TYPE stoker_client_ring_bytes gauge\n"
	       "stoker_client_ring_bytes{client=\"7\",pid=\"4242\",rank=\"1\",world_size=\"4\","
	       "dataset=\"/data/a \\\"b\\\"\\\\c\\nd\"} 1048576\n"
	       "stoker_client_ring_bytes{client=\"9\",pid=\"77\",rank=\"0\",world_size=\"1\","
	       "dataset=\"s3://bucket/train/\"} 4096\n"
	       "# HELP stoker_client_device_bytes GPU memory in the client's device ring (0: host batches).\n"
	       "# TYPE stoker_client_device_bytes gauge\n"
	       "stoker_client_device_bytes{client=\"7\",pid=\"4242\",rank=\"1\",world_size=\"4\","
	       "dataset=\"/data/a \\\"b\\\"\\\\c\\nd\"} 0\n"
	       "stoker_client_device_bytes{client=\"9\",pid=\"77\",rank=\"0\",world_size=\"1\","
	       "dataset=\"s3://bucket/train/\"} 8589934592\n"
	       "# HELP stoker_client_unreadable_samples_total Planned samples the client's own uid and groups may "
	       "not read, replaced by readable ones.\n"
	       "# TYPE stoker_client_unreadable_samples_total counter\n"
	       "stoker_client_unreadable_samples_total{client=\"7\",pid=\"4242\",rank=\"1\",world_size=\"4\","
	       "dataset=\"/data/a \\\"b\\\"\\\\c\\nd\"} 3\n"
	       "stoker_client_unreadable_samples_total{client=\"9\",pid=\"77\",rank=\"0\",world_size=\"1\","
	       "dataset=\"s3://bucket/train/\"} 0\n");
}

/* Counters past 2^53 print as the double they become, 17 digits. */
static void test_large_values(void **state)
{
	struct expo_snapshot s = fixed();
	char *text;
	size_t len;

	(void)state;
	s.images_served = UINT64_MAX;
	assert_int_equal(expo_render(&s, &text, &len), 0);
	assert_non_null(strstr(text, "\nstoker_images_served_total 1.8446744073709552e+19\n"));
	free(text);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_no_clients),
		cmocka_unit_test(test_clients_cache_and_network),
		cmocka_unit_test(test_large_values),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
