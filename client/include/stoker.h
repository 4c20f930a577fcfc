/* SPDX-License-Identifier: MIT */
/*
 * libstoker: attach a trainer process to the node's stokerd and iterate
 * decoded, augmented batches that live in shared memory.
 *
 * Conventions: every function that can fail returns 0 (or a count) on success
 * and a negative errno on failure; out-parameters are written only on
 * success; destructors accept NULL. A handle is used by one thread at a time.
 * The library never logs: stoker_last_error() gives the daemon's message.
 *
 *     struct stoker *s;
 *     struct stoker_opts *o;
 *     stoker_connect(NULL, &s);                  // $STOKER_SOCKET or default
 *     stoker_opts_new(&o);
 *     stoker_opts_set(o, "batch_size", "256");
 *     stoker_attach(s, "/data/imagenet/train", o);
 *     for (;;) {
 *             struct stoker_batch *b;
 *             int r = stoker_next(s, -1, &b);
 *             if (r == -ENODATA) break;           // end of epoch
 *             if (r < 0) fail(stoker_last_error(s));
 *             use(stoker_batch_images(b), stoker_batch_labels(b));
 *             stoker_release(b);
 *     }
 */
#ifndef STOKER_H
#define STOKER_H

#include <stdint.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define STOKER_DEFAULT_SOCKET "/run/stoker/stoker.sock"

struct stoker;       /* a connection to stokerd */
struct stoker_opts;  /* attach options, set by name */
struct stoker_batch; /* one batch in shared memory, valid until released */

/* Version of the library, "MAJOR.MINOR.PATCH". */
const char *stoker_version(void);

/* Connect and handshake. path NULL: $STOKER_SOCKET, else STOKER_DEFAULT_SOCKET.
 * -ENOENT/-ECONNREFUSED: no daemon; -EPROTO: protocol version mismatch. */
int stoker_connect(const char *path, struct stoker **out);
void stoker_close(struct stoker *s);

/* The daemon's last error message for this handle, or a library message;
 * "" when there is none. Valid until the next call on the handle. With
 * NULL: why this thread's last stoker_connect() failed (the daemon's reason,
 * such as max_clients, when it gave one). */
const char *stoker_last_error(const struct stoker *s);

/* Attach options. Keys (value as text):
 *   transform   random_resized_crop | center_crop   (random_resized_crop)
 *   transforms  classification's per-sample pipeline instead of `transform`
 *               (docs/transforms.md): ops separated by ';', each a name
 *               and keyword parameters, e.g. "RandomResizedCrop(size=176);
 *               RandomHorizontalFlip(p=0.5); ToDtype(dtype=float32,
 *               scale=true); Normalize(mean=(0.485, 0.456, 0.406),
 *               std=(0.229, 0.224, 0.225))". The output size, dtype and
 *               normalisation come from it; the daemon refuses a bad op or
 *               parameter at attach, naming it (stoker_last_error)
 *   batch_size  1..                                  (256)
 *   image_size  output side in pixels                (224)
 *   seed        unsigned 64-bit                      (0)
 *   rank, world_size                                 (0, 1)
 *   shuffle, drop_last   true|false|1|0              (true, false)
 *   epoch       first epoch to produce               (0)
 *   prefetch    batches kept ready ahead; 0 = daemon default (0)
 *   dtype       uint8 | float32 | float16                  (uint8)
 *               uint8 images are HWC RGB; float images are CHW and
 *               normalised: (pixel / 255 - mean[c]) / std[c]
 *   mean, std   three comma-separated floats, float output only
 *               (0.485,0.456,0.406 and 0.229,0.224,0.225: ImageNet's)
 *   dct_scaling true|false: decode crops >= 2x the output at 1/2..1/8 scale
 *               in the DCT domain (faster; sharper than PIL's filter)
 *               (true for random_resized_crop; false for center_crop,
 *               whose pixels then match torchvision's PIL path within 1)
 *   coordinated true|false: jobs attached with the same data set, plan and
 *               transform and this set receive the very same batches, each
 *               decoded once                                     (false)
 *   order       samples | shards: tar shard data sets only; shards is
 *               WebDataset's order (shards shuffled, each rank a contiguous
 *               run of them, a bounded shuffle buffer) for storage slow at
 *               random reads                                   (samples)
 *   shuffle_buffer  samples in shard order's shuffle buffer    (1000)
 *   device      cpu | cuda:N (this process's CUDA numbering)       (cpu)
 *               cuda:N: images are delivered into GPU memory on that
 *               GPU (stoker_batch_device_images()), converted there for
 *               the float dtypes; labels, indices and boxes stay in host
 *               memory. Refused with -ENODEV (and the reason) where CUDA
 *               is not usable by stokerd or by this process.
 *   pin_memory  true | false | try: page-lock the host ring for CUDA
 *               (read-only registration), so host-to-GPU copies from a
 *               batch are asynchronous DMA. true: stoker_attach() fails
 *               (-ENOSYS/-ENOENT/-ENODEV/-ENOTSUP, with the reason) where it
 *               cannot; try: batches stay pageable then, stoker_pinned()
 *               says 0 and stoker_last_error() why                (false)
 *   resume      a token from stoker_checkpoint(): sets epoch, seed, rank,
 *               world_size, batch_size, shuffle, drop_last, order and
 *               rect (with its stride and pad) as they were, and starts
 *               at the batch after the last one taken. Set it last: later
 *               keys override what it set.
 * -EINVAL for an unknown key or a value that does not parse. */
int stoker_opts_new(struct stoker_opts **out);
void stoker_opts_free(struct stoker_opts *o);
int stoker_opts_set(struct stoker_opts *o, const char *key, const char *value);
/* The keys stoker_opts_set() takes, from libstoker's one table of them (for
 * bindings and tools): key i = 0, 1, ...: its name, the task it belongs to
 * ("detect", or "" for every task) and its kind: "u32", "u64", "bool",
 * "number" (finite), "float3" (three comma-separated numbers; "float3>0":
 * each positive), "device" (cpu or cuda:N), "token" (a stoker_checkpoint()
 * token), "pipeline" (transforms' text), "text" (1..63 characters),
 * "text1024" (1..1024 characters), or the values it takes separated by '|'.
 * Out-parameters may be NULL; the strings are static. 0, or -ENOENT past
 * the last key. */
int stoker_opts_key(size_t i, const char **name, const char **task, const char **kind);

/* Attach to a data set (ImageFolder directory or `path label` list file, as
 * the daemon sees it) and start producing opts' epoch. opts may be NULL.
 * -EALREADY if already attached; errors from the daemon map to -EINVAL,
 * -ENOENT, -ENOMEM (resource limits), -EACCES, -EPROTO. */
int stoker_attach(struct stoker *s, const char *dataset, const struct stoker_opts *opts);

/* Facts of the attachment; 0 before attach. */
uint64_t stoker_dataset_samples(const struct stoker *s);
uint64_t stoker_samples_per_epoch(const struct stoker *s);
uint64_t stoker_batches_per_epoch(const struct stoker *s);
uint32_t stoker_num_classes(const struct stoker *s);
uint64_t stoker_epoch(const struct stoker *s);

/* Restart production at the beginning of `epoch`. Batches of the earlier
 * epoch not yet taken are dropped; batches already taken stay valid. */
int stoker_set_epoch(struct stoker *s, uint64_t epoch);

/* Exact mid-epoch resume. A checkpoint is a short text token naming the
 * epoch, the number of batches taken in it, and what the plan depends on
 * (seed, rank, world size, batch size, shuffle, drop_last, data set size,
 * shard order, rect with its stride and pad).
 * Resuming yields exactly the batches of that epoch not yet taken, whatever
 * the worker count, also after a daemon restart. */
#define STOKER_CHECKPOINT_MAX 256
/* Write the token (NUL-terminated) to buf; -ENOBUFS if size is too small. */
int stoker_checkpoint(const struct stoker *s, char *buf, size_t size);
/* Continue this attachment from a token taken with the same plan;
 * -EINVAL (see stoker_last_error()) when the plan differs. */
int stoker_restore(struct stoker *s, const char *token);

/* Wait up to timeout_ms (-1: forever) for the next batch in order.
 * -ENODATA: the epoch is complete; -ETIMEDOUT; -ESHUTDOWN: the daemon is
 * stopping or drained (stoker_last_error() says why; batches it announced
 * before are returned first); -ECONNRESET: the daemon went away (batches
 * already taken stay readable until released; reconnect, possibly to a
 * restarted daemon, and resume from a checkpoint); -ECONNABORTED: this
 * process was stopped longer than the daemon's stopped_lease_ms and its
 * session ended; -EPROTO: the daemon sent something malformed. */
int stoker_next(struct stoker *s, int timeout_ms, struct stoker_batch **out);

/* Give the batch's slot back to the daemon. Accepts NULL. The batch's
 * memory must not be read afterwards. */
void stoker_release(struct stoker_batch *b);

enum stoker_dtype {
	STOKER_DTYPE_UINT8 = 0,   /* [count, height, width, channels] */
	STOKER_DTYPE_FLOAT32 = 1, /* [count, channels, height, width] */
	STOKER_DTYPE_FLOAT16 = 2, /* [count, channels, height, width], IEEE half */
};

/* Batch contents: images (element type and layout as stoker_batch_dtype()
 * says), labels and indices int64 [count]. Pointers into read-only shared
 * memory. */
const void *stoker_batch_images(const struct stoker_batch *b);
enum stoker_dtype stoker_batch_dtype(const struct stoker_batch *b);
const int64_t *stoker_batch_labels(const struct stoker_batch *b);
const int64_t *stoker_batch_indices(const struct stoker_batch *b);
uint32_t stoker_batch_count(const struct stoker_batch *b);
/* The batch's image height and width (the same for every batch, but for
 * rectangular detection batches). */
uint32_t stoker_batch_height(const struct stoker_batch *b);
uint32_t stoker_batch_width(const struct stoker_batch *b);
uint32_t stoker_batch_channels(const struct stoker_batch *b);
uint64_t stoker_batch_epoch(const struct stoker_batch *b);
uint64_t stoker_batch_index(const struct stoker_batch *b);
/* Samples of this batch that were unreadable and replaced (see docs). */
uint32_t stoker_batch_replaced(const struct stoker_batch *b);

/*
 * CUDA delivery (option device=cuda:N). The daemon copies each batch's
 * images into a ring in GPU memory that this process maps (CUDA's VMM API,
 * a file descriptor like the host ring's); for the float dtypes the GPU
 * converts them, with values equal to the CPU path's. A batch is complete
 * on the GPU when stoker_next() hands it out; its release is ordered on a
 * stream, never a host wait:
 *
 *     stoker_next(s, -1, &b);
 *     stoker_batch_wait(b, stream);      // the stream the batch is used on
 *     launch(stream, stoker_batch_device_images(b), ...);
 *     stoker_release(b);                 // after the work queued on stream
 *
 * stoker_release() advances the slot's release word on the stream given to
 * stoker_batch_wait() (cuStreamWriteValue64; the legacy default stream if
 * none, which non-blocking streams are not ordered with): the daemon
 * writes the slot again only after the work queued there before the
 * release has run. stoker_close() waits for the releases to land before it
 * unmaps the ring. A CUstream is passed as void *; NULL is the legacy
 * default stream. stoker_batch_images() is NULL for device batches.
 */
/* This handle's CUDA device (N of cuda:N), or -1 for host batches. */
int stoker_device(const struct stoker *s);
/* The batch's images in GPU memory (a CUdeviceptr, valid in every context
 * of that GPU, until the batch is released); 0 for host batches. */
uint64_t stoker_batch_device_images(const struct stoker_batch *b);
/* Name the stream (a CUstream; NULL: the legacy default stream) the batch
 * is used on: stoker_release() orders the release after its work. The
 * images are already written: no wait is queued. -EINVAL for a host batch. */
int stoker_batch_wait(struct stoker_batch *b, void *stream);
/* 1 if the host ring is page-locked (pin_memory), else 0. */
int stoker_pinned(const struct stoker *s);

/*
 * Detection (option task=detect, on a YOLO data set: a directory of images
 * with a parallel labels/ tree, a .txt list of images, or a data.yaml with
 * option split=train|val|test). Options: transform=mosaic (the training
 * pipeline, the default) or letterbox (evaluation); Ultralytics'
 * hyper-parameters by name (hsv_h hsv_s hsv_v degrees translate scale
 * shear perspective flipud fliplr mosaic mixup cutmix copy_paste
 * copy_paste_mode=flip|mixup), close_mosaic and epochs (mosaic, mixup,
 * cutmix and copy_paste stop for epochs >= epochs - close_mosaic), max_boxes
 * per image (default 1000), rect, stride, pad, resample (below);
 * fraction (> 0) or images: Ultralytics' fraction, only the data set's
 * first max(1, round(N * fraction)) images (round half to even), or its
 * first `images` (Ultralytics' integer fraction); the session's data set is
 * that prefix (its order, rect batches, stand-ins, dataset_samples); bgr
 * (0..1, mosaic): P(a sample's channels stay BGR), Ultralytics' bgr;
 * albumentations (0..1, mosaic): the p of each of the Albumentations ops
 * Ultralytics applies by default when the package is importable (Blur,
 * MedianBlur, ToGray, CLAHE; Ultralytics: 0.01), in OpenCV's arithmetic;
 * yolo_task=detect|segment|pose|obb: Ultralytics' task the label files are
 * read for (segment, pose, obb: each file as its verify_image_label reads
 * it, a corrupt one dropping its image, counted in stoker_label_errors;
 * transform letterbox only for now), kpt_shape=N,D and flip_idx=i,j,...
 * (pose: data.yaml's, checked by the daemon), mask_ratio (segment: a power
 * of two up to 32 dividing image_size and stride; default 4) and
 * overlap_mask (only true is built). Images
 * are uint8 [count, size, size, 3] (rect: each batch's own height and
 * width); the labels array holds each image's box count.
 */
enum stoker_task {
	STOKER_TASK_CLASSIFY = 0,
	STOKER_TASK_DETECT = 1,
};
enum stoker_task stoker_task(const struct stoker *s);
/* The batch's boxes: *count rows of 6 floats (image index in the batch,
 * class, cx, cy, w, h; normalised to the image), ordered by image. NULL
 * for a classification batch. */
const float *stoker_batch_boxes(const struct stoker_batch *b, uint32_t *count);
/*
 * Per image of a detection batch, what Ultralytics' batch carries for
 * evaluation: shapes int32 [count][4] = (original height, width; height,
 * width after load_image's resize to long side image_size, before the
 * letterbox's padding), and ratio_pad double [count][4] = (ratio h, ratio
 * w, pad left, pad top), Ultralytics' ((ratio_h, ratio_w), (left, top)):
 * ratio = resized / original times the letterbox's own scale (1 unless an
 * image had to shrink to fit its batch). With transform=mosaic the rows
 * describe each sample's own image (ratio resized / original, pad 0).
 * A sample that could not be made at all has zero rows. NULL for
 * classification batches (or a daemon that sends no metadata).
 */
const int32_t *stoker_batch_shapes(const struct stoker_batch *b);
/*
 * yolo_task=segment (letterbox): each image's overlap mask, Ultralytics'
 * polygons2masks_overlap: image i's at masks + i * *stride, uint16
 * [height / *ratio][width / *ratio] (the batch's height and width), 0 for
 * background and k + 1 where image i's k-th box row (its rows come in the
 * mask's area order, largest first) is the last to cover. NULL without
 * masks.
 */
const uint16_t *stoker_batch_masks(const struct stoker_batch *b, uint32_t *ratio, uint32_t *stride);
/*
 * yolo_task=pose (letterbox): float32 [count][*max_boxes][*points][3], image
 * i's row k the keypoints (x, y normalised to the batch image, visibility)
 * of its k-th box row. NULL without keypoints.
 */
const float *stoker_batch_keypoints(const struct stoker_batch *b, uint32_t *points, uint32_t *max_boxes);
/*
 * yolo_task=obb (letterbox): float32 [count][*max_boxes][5], image i's row k
 * the xywhr of its k-th box row (Ultralytics' xyxyxyxy2xywhr of the
 * letterboxed corners; x, w normalised to the width, y, h to the height, r
 * in radians). NULL otherwise.
 */
const float *stoker_batch_obb(const struct stoker_batch *b, uint32_t *max_boxes);
const double *stoker_batch_ratio_pad(const struct stoker_batch *b);
/*
 * With a batch op (option batch_transform: MixUp / CutMix / RandomChoice of
 * them, or timm.Mixup; docs/transforms.md): the batch's float32 soft
 * targets [count][*classes] (the hard labels stay in stoker_batch_labels),
 * and per sample a 40-byte record of what it got (float64 lam, float64
 * lam_drawn, int32 partner, kind (0 none, 1 mixup, 2 cutmix), x1, y1, x2,
 * y2). NULL without a batch op.
 */
#define STOKER_BATCH_TRANSFORM_MAX 1024
const float *stoker_batch_soft_labels(const struct stoker_batch *b, uint32_t *classes);
const void *stoker_batch_mix(const struct stoker_batch *b);
/*
 * Rectangular batches (option rect=true, with transform=letterbox,
 * shuffle=false; stride (32) and pad (0.5) as Ultralytics' validator):
 * the data set in aspect-ratio order, each batch letterboxed to its own
 * shape, given by stoker_batch_height() and stoker_batch_width() (images
 * [count, height, width, 3]). Ranks take contiguous runs of whole batches.
 * Option resample=cv2|antialias: how each image is resized to image_size
 * (cv2: OpenCV's INTER_LINEAR from a full decode, as Ultralytics does, the
 * default for letterbox; antialias: a filter from a DCT-reduced decode,
 * faster, the default for mosaic).
 */

/* The path of data-set sample `index` (as stoker_batch_indices() names
 * them), NUL-terminated into buf: its length, -ERANGE past the data set,
 * -ENOBUFS when buf is too small (2 * PATH_MAX always suffices), or the
 * connection's error. Names come from the daemon in chunks and are cached
 * (bounded); works while batches are being delivered. */
int stoker_sample_path(struct stoker *s, uint64_t index, char *buf, size_t size);

/* Objects dropped from the data set's label files (malformed lines, values
 * out of range); the daemon logged each with file and line. */
uint64_t stoker_label_errors(const struct stoker *s);
/* Files of the attached data set found unreadable so far (each once; the
 * samples they stood for were replaced), as of the latest batch announced.
 * The daemon's decode_errors statistic counts every failed attempt instead. */
uint64_t stoker_decode_error_files(const struct stoker *s);
/* A class's name from the data.yaml, or NULL (no yaml, or no such class). */
const char *stoker_class_name(const struct stoker *s, uint32_t cls);

/* Daemon statistics as a JSON object (malloc'd, caller frees with free()).
 * Works without attaching. */
int stoker_stats_json(struct stoker *s, char **json_out);
/* The same as a human-readable report, for terminals. */
int stoker_stats_text(struct stoker *s, char **text_out);

/* A statistics snapshot for programs (stokerctl top): every field of the
 * JSON above by name. Daemon-wide numbers ("images_per_second", "workers",
 * "worker_busy", "rss_bytes", "cache_bytes", ...) and strings ("state",
 * "daemon_version", "cache_policy"); lists "clients" (numbers "pid", "rank",
 * "images_per_second", "stall", ...; string "dataset") and "cache" (one per
 * tier: "hits", "misses", ...; string "tier"). A name the daemon did not
 * report gives -ENOENT or NULL. Strings live as long as the snapshot. */
struct stoker_stats;
int stoker_stats_get(struct stoker *s, struct stoker_stats **out);
void stoker_stats_free(struct stoker_stats *st);
int stoker_stats_number(const struct stoker_stats *st, const char *name, double *out);
const char *stoker_stats_string(const struct stoker_stats *st, const char *name);
size_t stoker_stats_count(const struct stoker_stats *st, const char *list);
int stoker_stats_item_number(const struct stoker_stats *st, const char *list, size_t i, const char *name, double *out);
const char *stoker_stats_item_string(const struct stoker_stats *st, const char *list, size_t i, const char *name);

/* Prometheus text exposition of the daemon's metrics (malloc'd). */
int stoker_metrics(struct stoker *s, char **text_out);

/* The daemon's configuration as it stands: each key's value, origin
 * (default, a file, command line, runtime), what "auto" resolved to, and
 * reloaded values waiting for a restart. Text is valid stoker.conf INI with
 * the origins in comments; JSON is {"files": [...], "settings": {KEY:
 * {"value", "origin", "live", "effective", "pending"}}}. malloc'd. */
int stoker_config_json(struct stoker *s, char **json_out);
int stoker_config_text(struct stoker *s, char **text_out);

/* Administration: root, the daemon's user or admin_group only (else
 * -EACCES); stoker_last_error() has the daemon's message.
 *
 * Change a setting now, without a restart, until the daemon restarts:
 * -ENOENT unknown key, -EINVAL bad value, -EOPNOTSUPP a key that needs a
 * restart (put it in a file and restart). */
int stoker_config_set(struct stoker *s, const char *key, const char *value);
/* Re-read the configuration files (as SIGHUP): a text report of the keys
 * applied and those waiting for a restart (malloc'd). -EINVAL: a file is
 * bad, nothing changed. */
int stoker_reload(struct stoker *s, char **report_out);
/* Take no new clients; stop once the attached ones have left, or after
 * timeout_seconds (0: no limit). *clients_out (may be NULL): the clients it
 * waits for. */
int stoker_drain(struct stoker *s, uint32_t timeout_seconds, uint32_t *clients_out);

#ifdef __cplusplus
}
#endif

#endif /* STOKER_H */
