/* internal.h — the private definitions shared by the modules of the C core
 * runtime (runtime, buffer, compile, execute, memory, events, disk cache).
 * Nothing outside csrc/core/ includes it. */
#ifndef TPUC_INTERNAL_H
#define TPUC_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "../base/base.h"
#include "../pjrt/pjrt_abi.h"
#include "../pjrt/plugin.h"

/* ---- client_options.c ---- */
typedef enum { TPUC_PLUGIN_CPU, TPUC_PLUGIN_TPU, TPUC_PLUGIN_GPU, TPUC_PLUGIN_OTHER } tpuc_plugin_kind;

/* The kind of a plugin, from its file name (xla_cpu, libtpu, xla_cuda/rocm). */
tpuc_plugin_kind tpuc_plugin_kind_of(const char *path);

/* ---- op_options.c ---- */
/* The XLA options of strict mode's per-op programs: encoded
 * env_option_overrides entries (xla.CompileOptionsProto field 7) appended to
 * their compile options, and the same as text ("" when none). */
typedef struct {
  unsigned char bytes[1024];
  size_t len;
  char text[512];
  bool from_env; /* TPUC_OP_XLA_OPTIONS set (else the plugin kind's default) */
} tpuc_op_options;
/* From `setting` ($TPUC_OP_XLA_OPTIONS; NULL or "" for the kind's default). */
tpuc_status *tpuc_op_options_decide(tpuc_plugin_kind kind, const char *setting,
                                    tpuc_op_options *out);

/* The create options for one client. `v` points into the struct itself (the
 * allocator's name): fill it in place, do not copy it. */
typedef struct {
  pj_named_value v[6];
  size_t n;
  char names[96]; /* the option names, comma-separated */
  char allocator[16];
} tpuc_client_options;

/* Chooses the options for a plugin of `kind` (docs: client_options.c's top
 * comment); an invalid TPUC_GPU_* variable is an error naming it. */
tpuc_status *tpuc_client_options_make(tpuc_plugin_kind kind, int cpu_devices, int process_id,
                                      int num_processes, tpuc_client_options *out);

/* ---- runtime.c ---- */
#define TPUC_INFLIGHT 256

typedef struct tpuc_device_rec {
  pj_device *device;
  /* completion events of launched replicated programs (execute.c), under
   * mem_lock; a program on one device leaves none, only `unsynced` */
  pj_event *inflight[TPUC_INFLIGHT];
  int inflight_head, inflight_n;
  atomic_bool unsynced; /* a program was launched since the last barrier */
  int id;
  char *kind;
  char *description;
  /* accounting, under mem_lock */
  int64_t bytes_in_use, peak_bytes, num_buffers, num_allocs;
  int64_t limit_bytes, num_ooms; /* memory.c */
} tpuc_device_rec;

typedef struct tpuc_cache_entry tpuc_cache_entry;

/* progress.c: what a burst of compiles has done, for the lines on stderr */
typedef struct {
  pthread_mutex_t lock;
  pthread_cond_t cv; /* (CLOCK_MONOTONIC) a compile began or ended; stop */
  pthread_t thread;
  bool inited, running, failed, stop, tty, in_burst, printed;
  int pid; /* the process that started the thread (a forked child joins none) */
  double after_s; /* TPUC_COMPILE_PROGRESS; < 0: off (or not process 0) */
  double start, last_end, last_print; /* of the burst, CLOCK_MONOTONIC seconds */
  int64_t done;
  int in_flight;
} tpuc_progress;

struct tpuc_runtime {
  tpuc_plugin plugin;
  pj_client *client;
  char *platform_name;
  char *platform_version;
  atomic_bool donate; /* donate buffers to programs that alias them (TPUC_DONATE=0: never) */
  /* the engine's rewrites, each on unless its variable is "0" (docs/execution.md, "Switches"):
   * x @ W^T as (W @ x^T)^T on XLA CPU (TPUC_DOT_REWRITE), in-place slice updates at an opaque
   * start (TPUC_SLICE_INPLACE), scalar argument buffers kept per plan (TPUC_SCALAR_CACHE) */
  bool dot_rewrite, slice_inplace, scalar_cache;
  /* float sums add at most this many elements per pass (TPUC_SUM_BLOCK, default 256; 0: one
   * pass): lower/reduce.c */
  int64_t sum_block;
  /* no storage's buffer is above rank 1 (TPUC_FLAT_BUFFERS, on by default; never on TPUs, whose
   * tiled layouts make a reshape a copy): a program's signature then does not depend on which
   * shape a storage was last written at, so fewer programs are compiled. 0-d values stay
   * 0-d (a [1] buffer updated in place made XLA copy a 0-d optimizer step counter) */
  bool flat_buffers;
  /* strict mode's pointwise calls over merged dims (exec/canon.c; TPUC_CANONICAL, default
   * as flat_buffers) */
  bool canonical;
  tpuc_op_options op_options; /* op_options.c: strict mode's per-op programs */
  /* XLA_FLAGS leaves XLA CPU's XNNPACK dots on: guard dot operands (ir_graph_set_guard_dot_rhs) */
  bool xnn_may_capture;
  int64_t xla_version;
  int64_t shlo_current[3], shlo_minimum[3];
  int device_count;
  bool single_device; /* the client has one device in all, addressable here */
  tpuc_device_rec *devices;

  pthread_mutex_t mem_lock; /* device accounting */

  pthread_mutex_t cache_lock; /* the executable cache and compile stats */
  tpuc_cache_entry **cache_buckets;
  size_t cache_nbuckets, cache_count;
  int64_t compiles, cache_hits, cache_misses;
  /* compiles in flight (compile.c): a second thread asking for the same
   * program waits for the first one's instead of compiling it again */
  struct tpuc_inflight *inflight;
  pthread_cond_t compile_done;
  /* compile_pool.c: the worker threads of compiles ahead of need */
  struct tpuc_compile_pool *compile_pool;
  bool compile_pool_failed;
  int64_t compiles_submitted, compile_joins;
  double compile_seconds;
  pj_loaded_executable *barrier; /* tpuc_synchronize's (execute.c), made once, under cache_lock */
  pthread_mutex_t sync_lock; /* one barrier at a time: a second synchronize waits for the first's */
  /* the disk tier (disk_cache.c); counters under cache_lock */
  char *disk_dir; /* NULL: off */
  char *disk_host_isa; /* XLA CPU plugin: the host's CPU flags, in the disk key (NULL: not read) */
  int64_t disk_max_bytes;
  int64_t disk_hits, disk_misses, disk_writes, disk_corrupt, disk_evictions;
  atomic_bool disk_warned; /* a failed write was reported (once per runtime) */
  double load_seconds; /* loads on demand (the caller waited for them) */
  /* entries used (tpuc_disk_touch), under cache_lock: the current burst of uses
   * (less than a second apart) began at disk_epoch and has had disk_uses so far */
  struct timespec disk_epoch, disk_last_use;
  int64_t disk_uses;
  /* preload.c: the disk cache read ahead into the memory cache */
  pthread_mutex_t preload_lock; /* one join of the thread */
  pthread_t preload_thread;
  bool preload_inited, preload_running;
  int preload_pid; /* the process that started the thread (a forked child joins none) */
  atomic_bool preload_stop;
  int64_t preload_window, preload_max_bytes;
  int preload_threads; /* loaders: the thread and its helpers (TPUC_CACHE_PRELOAD_THREADS) */
  /* under cache_lock: */
  pthread_cond_t preload_cv; /* a preloaded program used; a load ended; done; stop */
  bool preload_done;
  int64_t preloaded, preload_used;
  int64_t preload_loading; /* files claimed by a loader and not finished yet */
  tpuc_progress progress; /* progress.c */
  double preload_seconds;

  /* the op engine's signature cache (exec/op_run.c) */
  pthread_mutex_t fast_lock;
  struct tpuc_fast_entry **fast_buckets;
  size_t fast_nbuckets, fast_count;
  int64_t op_calls, fast_hits, fast_misses, emitted_bytes;
  int64_t recorded_ops, flushes, chunk_hits, chunk_misses;
  /* fused execution (exec/fused.c) */
  atomic_int mode;
  atomic_int fused_replay_off; /* exec/fused_replay.c: chunks are always recorded */
  struct tpuc_pending *pending; /* one per device */
  struct tpuc_ahead *ahead;     /* exec/ahead.c: one queue per device */
  bool compile_ahead;           /* TPUC_COMPILE_AHEAD (default: on but on the CPU plugin) */
  int64_t ahead_ops;            /* ops queued ahead of their compile, under fast_lock */
  bool host_first;              /* TPUC_HOST_FIRST=1 (default off): exec/op_run.c */
  int64_t host_first_max_bytes; /* TPUC_HOST_FIRST_MAX_MB (default 64) */
  int64_t host_first_ops;       /* calls answered TPUC_ERR_NOT_COMPILED, under fast_lock */
  int64_t hoisted_fills;        /* exec/fused_hoist.c, under fast_lock */
  int64_t ahead_chunks;         /* exec/fused_ahead.c, under fast_lock */
  int64_t host_fill_max_bytes;  /* TPUC_HOST_FILL_MAX_KB (default 1024; 0: off): exec/fill.c */
  struct tpuc_recompiles *recompiles; /* exec/recompile.c */

  atomic_llong executions;
  atomic_llong donations;
  atomic_llong live_objects; /* buffers + executables not yet destroyed */
  /* run-time checks (exec/checks.c) */
  atomic_bool check_bounds;            /* TPUC_CHECK_BOUNDS=1 / tpuc_set_check_bounds */
  struct tpuc_check_state *checks;     /* results kept until the next synchronisation */

  /* the observer (events.c): the pair is swapped under hook_lock, and read
   * without it, consistently, through hook_seq (a sequence lock) */
  pthread_mutex_t hook_lock;
  _Atomic(tpuc_event_fn) hook;
  _Atomic(void *) hook_user;
  _Atomic(tpuc_event_gate_fn) hook_gate; /* swapped with the pair, same lock */
  atomic_uint hook_seq; /* odd while the pair is being swapped */
  atomic_ullong event_ids;
  atomic_bool want_done; /* report DEVICE_DONE (tpuc_set_event_device_done) */

  /* a multi-process client (tpuc_runtime_create_multiprocess): the caller's
   * store, copied (the plugin's key-value callbacks point here) */
  tpuc_kv_store kv;
  bool has_kv;
  int process_id, num_processes;
  char create_options[96]; /* the option names sent, comma-separated */
};

/* NULL when `device` names one of rt's devices, else the error every entry point
 * gives for it (inline: tpuc_op_run and launches check it on every call). */
static inline tpuc_status *tpuc_device_check(const tpuc_runtime *rt, int device) {
  if (device >= 0 && device < rt->device_count) return NULL;
  return tpuc_status_make(TPUC_ERR_INVALID_ARGUMENT,
                          "device index %d is out of range: %d device(s) available", device,
                          rt->device_count);
}

/* ---- events.c ---- */
/* True when an observer is set (cheap: one atomic load). */
static inline bool tpuc_events_on(tpuc_runtime *rt) { return atomic_load_explicit(&rt->hook, memory_order_relaxed) != NULL; }
/* Whether a launch is reported: a hook is set and its gate (if any) says yes. */
bool tpuc_launch_observed(tpuc_runtime *rt);
void tpuc_event_emit(tpuc_runtime *rt, tpuc_event_kind kind, tpuc_event_phase phase,
                     const char *name, const char *detail, int device, int64_t bytes, uint64_t id);
/* A fresh id for an EXECUTE event. */
uint64_t tpuc_event_next_id(tpuc_runtime *rt);
/* After a launch: emits DEVICE_DONE when `b` (an output) is ready. */
void tpuc_event_on_done(tpuc_runtime *rt, tpuc_buffer *b, const char *name, int device, uint64_t id);

void tpuc_runtime_account(tpuc_runtime *rt, int device, int64_t delta_bytes);

/* execute.c */
void tpuc_inflight_push(tpuc_runtime *rt, int device, pj_event *ev);
/* compile.c: tpuc_synchronize's barrier program (no arguments, one scalar result) */
tpuc_status *tpuc_compile_barrier(tpuc_runtime *rt, pj_loaded_executable **out);
/* execute.c: destroys the barrier program (tpuc_runtime_destroy) */
void tpuc_barrier_destroy(tpuc_runtime *rt);
/* execute.c: launches the barrier on `device` without waiting (marker.c, synchronize) */
tpuc_status *tpuc_barrier_launch(tpuc_runtime *rt, int device, pj_buffer **out,
                                 pj_event **complete);
void tpuc_barrier_output_destroy(tpuc_runtime *rt, pj_buffer *out);
/* buffer.c: whether a plugin buffer's producer has finished (true on an error: a wait returns) */
bool tpuc_pj_buffer_is_ready(tpuc_runtime *rt, pj_buffer *buf);

/* ---- buffer.c ---- */
struct tpuc_buffer {
  atomic_int refs;
  tpuc_runtime *rt;
  pj_buffer *buf;
  int device;
  tpuc_dtype dtype;
  int ndim;
  int64_t dims[TPUC_MAX_DIMS];
  int64_t numel;
  size_t nbytes;
  atomic_bool donated; /* consumed by a program: its memory is the output's now */
  atomic_bool unaccounted; /* the runtime's own (a kept scalar): not in the memory stats */
};

/* Takes b out of the device's memory statistics (a buffer the runtime keeps
 * for itself, like a kept scalar parameter); its release then leaves them
 * alone. */
void tpuc_buffer_unaccount(tpuc_buffer *b);

/* A buffer with a type and no memory (its plugin buffer is NULL): what a
 * storage will hold once an op recorded ahead of its run has run, for
 * forming the programs of the ops after it (exec/ahead.c). Never launched:
 * tpuc_execute refuses it. */
tpuc_status *tpuc_buffer_shape_only(tpuc_runtime *rt, int device, tpuc_dtype dtype, int ndim,
                                    const int64_t *dims, tpuc_buffer **out);

/* Wraps a plugin buffer (takes ownership) into a tpuc_buffer. */
tpuc_status *tpuc_buffer_wrap(tpuc_runtime *rt, int device, pj_buffer *pb, tpuc_dtype dtype,
                              int ndim, const int64_t *dims, tpuc_buffer **out);
pj_buffer_type tpuc_dtype_to_pjrt(tpuc_dtype t);
bool tpuc_dtype_from_pjrt(pj_buffer_type t, tpuc_dtype *out);
/* Waits for a PJRT event and destroys it; returns its error. */
tpuc_status *tpuc_event_wait(tpuc_runtime *rt, pj_event *ev, const char *what);

/* ---- compile.c ---- */
struct tpuc_executable {
  atomic_int refs;
  tpuc_runtime *rt;
  pj_loaded_executable *exe;
  int num_outputs;
  tpuc_dtype *out_dtypes;
  int *out_ndims;
  int64_t (*out_dims)[TPUC_MAX_DIMS];
  int64_t temp_bytes; /* scratch memory while it runs (0: the plugin does not say) */
  bool bound; /* compiled for the client's only device, not portable: launched
               * without execute_device (compile.c) */
};

/* tpuc_execute, donating each args[i] with donate[i] set (NULL: none) to the
 * output the program aliases with it. A donated buffer is consumed: only
 * releasing it remains valid. The caller guarantees nobody else uses it. */
tpuc_status *tpuc_execute_donating(tpuc_executable *e, int device, tpuc_buffer *const *args,
                                   const bool *donate, int nargs, tpuc_buffer **outs, bool wait);
/* tpuc_execute_donating for a program that may alias only the arguments with
 * aliasable[i] set (NULL: any) with an output, as the program's own
 * input_output_alias says: the others are not listed as non-donatable. */
tpuc_status *tpuc_execute_aliasing(tpuc_executable *e, int device, tpuc_buffer *const *args,
                                   const bool *donate, const bool *aliasable, int nargs,
                                   tpuc_buffer **outs, bool wait);
/* Notes that `transient` more bytes are in use on `device` for a moment
 * (a program's scratch memory): only the peak can change. */
void tpuc_runtime_note_transient(tpuc_runtime *rt, int device, int64_t transient);

/* tpuc_compile with hand-encoded xla.CompileOptionsProto bytes (at most
 * TPUC_COMPILE_OPTIONS_MAX), through the same memory and disk caches; the
 * options are part of the cache key. */
#define TPUC_COMPILE_OPTIONS_MAX 4096
tpuc_status *tpuc_compile_with_options(tpuc_runtime *rt, const char *text, size_t len,
                                       const unsigned char *opt_bytes, size_t opt_len,
                                       tpuc_executable **out);
/* tpuc_compile for one of strict mode's per-op programs: with rt->op_options. */
tpuc_status *tpuc_compile_op(tpuc_runtime *rt, const char *text, size_t len, tpuc_executable **out);
/* Host-first (exec/op_run.c): a program's executable (a per-op one's with
 * `per_op`, as tpuc_compile_op, else as tpuc_compile) when it is at
 * hand without compiling -- in the memory cache, or on disk (loaded now) --
 * else *out = NULL and, with `submit`, the program is handed to the compile
 * pool unless it is in flight. *pending: a compile that will bring it is
 * queued or running (false: nothing will; the caller compiles it). */
tpuc_status *tpuc_compile_op_at_hand(tpuc_runtime *rt, const char *text, size_t len,
                                     bool per_op, bool submit, tpuc_executable **out,
                                     bool *pending);

/* 64-bit FNV-1a, chained through `seed`. */
uint64_t tpuc_hash64(const void *data, size_t len, uint64_t seed);
void tpuc_cache_clear(tpuc_runtime *rt);

/* ---- compile_pool.c ---- */
/* Compiles `text` (copied) on a worker thread into the executable caches, so
 * that tpuc_compile (tpuc_compile_op when `per_op`) of the same text later
 * finds it (or joins the compile in flight). False: not submitted (no worker could be started; out of memory). */
bool tpuc_compile_submit(tpuc_runtime *rt, const char *text, size_t len, bool per_op);
/* Compiles submitted and not finished. */
int tpuc_compile_pool_busy(tpuc_runtime *rt);
/* The worker threads the pool runs (or would run once started). */
int tpuc_compile_pool_threads(const tpuc_runtime *rt);
/* the nice value its threads run at ($TPUC_COMPILE_NICE, default 0) */
int tpuc_compile_pool_nice(void);
/* Drops what has not started, waits for the rest, joins the workers. */
void tpuc_compile_pool_destroy(tpuc_runtime *rt);
/* Drops what has not started, waits for the rest; no pool is started again. */
void tpuc_compile_pool_stop(tpuc_runtime *rt);
/* Whether strict mode queues ops behind their compiles (exec/ahead.c), from
 * `setting` ($TPUC_COMPILE_AHEAD: "1" on, "0" off, NULL, "" or "auto" the
 * kind's default: on for every plugin but the XLA CPU plugin's); anything
 * else is an error naming the variable. */
tpuc_status *tpuc_compile_ahead_decide(tpuc_plugin_kind kind, const char *setting, bool *on);

/* ---- memory.c ---- */
/* Applies $TPUC_MEMORY_LIMIT to every device (runtime creation). */
void tpuc_memory_limit_init(tpuc_runtime *rt);
/* NULL when `bytes` more fit under the device's limit, else an
 * out-of-memory status naming `what` (counted in num_ooms). */
tpuc_status *tpuc_memory_admit(tpuc_runtime *rt, int device, int64_t bytes, const char *what);
/* An out-of-memory status `s` (others pass through) with the device's
 * usage and advice appended; `requested` < 0: read "allocating N bytes"
 * from the plugin's message. Counts it in num_ooms. */
tpuc_status *tpuc_oom_explain(tpuc_runtime *rt, int device, tpuc_status *s, int64_t requested);

/* ---- disk_cache.c ---- */
/* The program an entry is for: its text and compile options (format 2 keeps them). */
typedef struct {
  const char *text;
  size_t len;
  const void *opts;
  size_t opts_len;
} tpuc_disk_program;
/* A parsed entry, pointing into the file's bytes. */
typedef struct {
  int version; /* 1: the executable alone (text NULL); 2: with its program */
  unsigned char key[32];
  const char *text;
  size_t text_len;
  const unsigned char *opts;
  size_t opts_len;
  const unsigned char *payload;
  size_t payload_len;
} tpuc_disk_entry;
void tpuc_disk_cache_init(tpuc_runtime *rt, const char *dir, int64_t max_bytes);
void tpuc_disk_key(const tpuc_runtime *rt, const char *text, size_t len, const void *opts,
                   size_t opts_len, unsigned char key[32]);
/* *out = the cached executable, or NULL (a miss; a bad file is removed). A
 * format-1 file is rewritten as format 2 with `prog` (NULL: left as it is). */
tpuc_status *tpuc_disk_load(tpuc_runtime *rt, const unsigned char key[32],
                            const tpuc_disk_program *prog, pj_loaded_executable **out);
void tpuc_disk_store(tpuc_runtime *rt, const unsigned char key[32], const tpuc_disk_program *prog,
                     pj_loaded_executable *exe);
/* The whole file (malloc'ed); NULL if missing or unreadable. */
unsigned char *tpuc_read_whole_file(const char *path, size_t *len);
/* Whether `buf` is a well-formed entry (magic, lengths, checksum); fills *e. */
bool tpuc_disk_parse(const unsigned char *buf, size_t len, tpuc_disk_entry *e);
/* The plugin's load of a serialized executable; false: refused (or no such
 * call). *seconds: the time it took, for the caller's statistic. */
bool tpuc_disk_deserialize(tpuc_runtime *rt, const void *payload, size_t len,
                           pj_loaded_executable **out, double *seconds);
/* Removes a bad entry and counts it (disk_corrupt). */
void tpuc_disk_remove_bad(tpuc_runtime *rt, const char *path);
/* Marks an entry used (its mtime: eviction and preload order follow it): the
 * start of the burst of uses it is in less one microsecond per use before it,
 * so that among a burst's entries the newest is the one used first. */
void tpuc_disk_touch(tpuc_runtime *rt, const unsigned char key[32]);
/* The cross-process compile lock of one program (an flock on "<key>.lock" in the
 * directory): a file descriptor, or -1 (no disk tier, or no lock: compile anyway). */
int tpuc_disk_lock(tpuc_runtime *rt, const unsigned char key[32]);
void tpuc_disk_unlock(tpuc_runtime *rt, const unsigned char key[32], int fd);
/* Whether the directory holds an entry of this key (no load, nothing counted). */
bool tpuc_disk_has(const tpuc_runtime *rt, const unsigned char key[32]);
/* tpuc_disk_load again under the lock (its miss was counted already). */
tpuc_status *tpuc_disk_reload(tpuc_runtime *rt, const unsigned char key[32],
                              const tpuc_disk_program *prog, pj_loaded_executable **out);

/* compile_pool.c: the cores this process may run on (its affinity), at least 1. */
int tpuc_usable_cores(void);

/* ---- progress.c ---- */
/* Reads TPUC_COMPILE_PROGRESS (after process_id is set); starts nothing. */
void tpuc_progress_init(tpuc_runtime *rt);
/* Around each compile of the plugin (compile.c). */
void tpuc_progress_begin(tpuc_runtime *rt);
void tpuc_progress_end(tpuc_runtime *rt);
/* Ends the watcher thread (closing a printed line); compiles after it print nothing. */
void tpuc_progress_stop(tpuc_runtime *rt);
void tpuc_progress_destroy(tpuc_runtime *rt);

/* ---- preload.c ---- */
/* Starts the preload thread (setting: 0 from $TPUC_CACHE_PRELOAD, < 0 off,
 * N > 0 at most N programs); always initialises its state. */
void tpuc_preload_start(tpuc_runtime *rt, int setting);
/* Waits until the preload has finished or paused (its window is full). */
void tpuc_preload_wait(tpuc_runtime *rt);
/* Ends it after the load under way; none runs after this returns. */
void tpuc_preload_stop(tpuc_runtime *rt);
void tpuc_preload_destroy(tpuc_runtime *rt);
/* compile.c: puts a preloaded program into the memory cache unless it is there
 * or in flight (then 0); loads it (1), or -1: the plugin refused the executable
 * (the caller removes the file). A request for it meanwhile waits for it. */
int tpuc_cache_preload(tpuc_runtime *rt, const char *text, size_t len, const void *opts,
                       size_t opts_len, const unsigned char dkey[32], const void *payload,
                       size_t payload_len);

/* ---- exec/op_run.c ---- */
void tpuc_fast_cache_clear(tpuc_runtime *rt);
void tpuc_recompiles_destroy(tpuc_runtime *rt);
/* exec/fused.c: runs what is pending and frees the recording state. */
void tpuc_fused_destroy(tpuc_runtime *rt);
/* exec/checks.c: the kept results of run-time checks (index bounds). */
tpuc_status *tpuc_checks_init(tpuc_runtime *rt);
void tpuc_checks_destroy(tpuc_runtime *rt);
/* Reads every kept check result (waiting for them) and returns the first
 * failure not yet reported; called at each synchronisation point. */
tpuc_status *tpuc_checks_report(tpuc_runtime *rt);

#endif /* TPUC_INTERNAL_H */
