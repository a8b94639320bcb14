/* tpuc.h — the public API of tpuc's C core.
 *
 * The core loads a PJRT plugin, owns the plugin's client and its devices,
 * moves data between host and device, compiles StableHLO text into cached
 * executables and runs them. It knows nothing of PyTorch: the C++ glue in
 * csrc/torch/ and the Python package are its clients, and so is any C program.
 *
 * Conventions
 * - Opaque handles, `tpuc_` prefix. Every create has a destroy (or release,
 *   for reference-counted handles).
 * - A call that can fail returns `tpuc_status*`: NULL on success, otherwise a
 *   status the caller owns and frees with tpuc_status_destroy(). The core never
 *   aborts or exits on a reachable path.
 * - Every function may be called from any thread: the runtime serialises what
 *   must be serialised.
 */
#ifndef TPUC_H
#define TPUC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TPUC_VERSION "0.1.0"
#define TPUC_MAX_DIMS 16

/* ---- status ------------------------------------------------------------ */

typedef enum {
  TPUC_OK = 0,
  TPUC_ERR_INVALID_ARGUMENT, /* bad input from the caller */
  TPUC_ERR_PLUGIN,           /* the plugin cannot be found, loaded or used */
  TPUC_ERR_UNIMPLEMENTED,    /* the plugin or the core lacks a feature */
  TPUC_ERR_OUT_OF_MEMORY,    /* host or device memory is exhausted */
  TPUC_ERR_COMPILE,          /* the plugin rejected a program */
  TPUC_ERR_RUNTIME,          /* a device computation or transfer failed */
  TPUC_ERR_INTERNAL,         /* a bug in tpuc */
  TPUC_ERR_INDEX,            /* an index out of range (PyTorch's IndexError) */
  TPUC_ERR_NOT_COMPILED      /* host-first: the op's program is still compiling (tpuc_op_run) */
} tpuc_code;

typedef struct tpuc_status tpuc_status;

tpuc_code tpuc_status_code(const tpuc_status *s);
const char *tpuc_status_message(const tpuc_status *s);
void tpuc_status_destroy(tpuc_status *s);
/* A status for clients that implement core callbacks (tpuc_kv_store): a copy
 * of `message` with `code` (not TPUC_OK). Never fails (see tpuc_status_make). */
tpuc_status *tpuc_status_create(tpuc_code code, const char *message);

/* ---- element types ----------------------------------------------------- */

typedef enum {
  TPUC_PRED = 0, TPUC_S8, TPUC_S16, TPUC_S32, TPUC_S64, TPUC_U8, TPUC_U16,
  TPUC_U32, TPUC_U64, TPUC_F16, TPUC_BF16, TPUC_F32, TPUC_F64, TPUC_C64,
  TPUC_C128, TPUC_DTYPE_COUNT
} tpuc_dtype;

size_t tpuc_dtype_size(tpuc_dtype t);
/* The StableHLO element type name ("f32", "i1", "ui8", "complex<f32>"...). */
const char *tpuc_dtype_mlir_name(tpuc_dtype t);

/* ---- runtime ----------------------------------------------------------- */

typedef struct tpuc_runtime tpuc_runtime;

typedef struct {
  /* Path of the PJRT plugin. NULL: $TPUC_PJRT_PLUGIN. */
  const char *plugin_path;
  /* Devices the XLA CPU plugin creates; 0: $TPUC_CPU_DEVICE_COUNT, else 1.
   * Ignored by other plugins. */
  int cpu_device_count;
  /* Directory of the disk cache of compiled programs. NULL: $TPUC_CACHE_DIR,
   * else ~/.cache/tpuc; "off" disables the disk tier. */
  const char *cache_dir;
  /* Bound of that directory in bytes; 0: $TPUC_CACHE_MAX_BYTES, else 4 GiB. */
  int64_t cache_max_bytes;
  /* The preload of that directory into memory at creation (a background
   * thread): 0: $TPUC_CACHE_PRELOAD (default on); < 0: off; N > 0: at most N
   * programs (and $TPUC_CACHE_PRELOAD_MAX_MB). */
  int cache_preload;
} tpuc_runtime_options;

/* Loads the plugin (once per process; plugins are never unloaded), creates a
 * client and lists its addressable devices. */
tpuc_status *tpuc_runtime_create(const tpuc_runtime_options *opts, tpuc_runtime **out);
/* Destroys the client. Every buffer and executable of the runtime must have
 * been released before. */
void tpuc_runtime_destroy(tpuc_runtime *rt);

typedef struct {
  const char *plugin_path;
  const char *platform_name;    /* "cpu", "tpu", "cuda" ... */
  const char *platform_version; /* as the plugin reports it */
  int pjrt_api_major, pjrt_api_minor;
  int64_t xla_version;          /* -1 when the plugin does not say */
  int64_t stablehlo_current[3]; /* -1 when the plugin does not say */
  int64_t stablehlo_minimum[3];
  int device_count;
  /* the XLA options strict mode's per-op programs are compiled with, as
   * name=value[,name=value] ("": none), and whether $TPUC_OP_XLA_OPTIONS set
   * them (else the plugin kind's default; runtime/op_options.c) */
  const char *op_xla_options;
  bool op_xla_options_from_env;
  /* strict mode's compile-ahead queue ($TPUC_COMPILE_AHEAD; default on but on
   * the XLA CPU plugin) and the threads that compile ahead of need
   * ($TPUC_COMPILE_THREADS; runtime/compile_pool.c), at this nice value
   * ($TPUC_COMPILE_NICE, default 0) */
  bool compile_ahead;
  int compile_threads;
  int compile_nice;
} tpuc_runtime_info;

/* Strings stay valid for the runtime's lifetime. */
void tpuc_runtime_info_get(const tpuc_runtime *rt, tpuc_runtime_info *out);

/* ---- multi-process clients ---------------------------------------------
 * Where a plugin runs collectives across processes (the CUDA plugin over
 * NCCL; libtpu over ICI), each process creates its client as one part of a
 * multi-process topology, and the clients exchange what they need (device
 * lists, NCCL ids) through a key-value store every process reaches: the
 * PJRT_Client_Create key-value callbacks, backed here by a tpuc_kv_store.
 *
 * A tpuc_kv_store is the caller's store (PyTorch's c10d TCPStore, ...). Its
 * functions may be called from any thread, plugin threads included, and
 * concurrently, for as long as the runtime lives.
 *   get  the value of `key`: the function calls tpuc_kv_value_set(value, ...)
 *        once with the bytes (which it may free afterwards). timeout_ms >= 0:
 *        wait up to that long for the key to appear; timeout_ms < 0: do not
 *        wait. A key still missing: return NULL without setting the value.
 *        A failure of the store itself: return a status (its code and message
 *        reach the plugin).
 *   put  sets `key` to the value (len bytes, any content); a status on failure.
 * Keys and values are byte strings (key_len, len); keys need not be
 * NUL-terminated. The plugin's keys are passed through unchanged: a store
 * shared with other users should put them under a prefix of its own. */
typedef struct tpuc_kv_value tpuc_kv_value;
/* Copies `len` bytes into the value being returned; false when out of memory. */
bool tpuc_kv_value_set(tpuc_kv_value *value, const char *data, size_t len);

typedef struct {
  tpuc_status *(*get)(void *user, const char *key, size_t key_len, int timeout_ms,
                      tpuc_kv_value *value);
  tpuc_status *(*put)(void *user, const char *key, size_t key_len, const char *value,
                      size_t len);
  void *user; /* must stay valid until tpuc_runtime_destroy */
} tpuc_kv_store;

typedef struct {
  int process_id;                /* this process: 0 .. num_processes-1 */
  int num_processes;             /* >= 1 */
  const tpuc_kv_store *kv_store; /* copied; NULL: none (then num_processes must be 1) */
} tpuc_process_options;

/* tpuc_runtime_create, with the client created as process `process_id` of
 * `num_processes` sharing `kv_store`. What the plugin is given:
 *   every plugin   the key-value callbacks (get, try_get, put);
 *   XLA CPU        cpu_device_count only (it reads no other option and, as
 *                  released, ignores the store: its client stays one process);
 *   libtpu ("tpu" in the file name)  no option: libtpu reads its topology
 *                  from the TPU environment, as JAX calls it;
 *   any other (CUDA, ROCm)  node_id = process_id, num_nodes = num_processes
 *                  (the option names of XLA's GPU plugin).
 * A plugin that rejects them fails the creation with its message. */
tpuc_status *tpuc_runtime_create_multiprocess(const tpuc_runtime_options *opts,
                                              const tpuc_process_options *process,
                                              tpuc_runtime **out);

typedef struct {
  int process_index;       /* the plugin's (PJRT_Client_ProcessIndex); -1: it does not say */
  int global_device_count; /* devices of every process (PJRT_Client_Devices); -1: unknown */
  int device_count;        /* this process's (addressable) devices */
  int num_processes;       /* as created (1 for tpuc_runtime_create) */
  bool kv_store;           /* a key-value store was handed to the plugin */
  /* the create options sent, names comma-separated ("cpu_device_count",
   * "node_id,num_nodes", "" for none) */
  const char *create_options;
} tpuc_process_info;

/* Strings stay valid for the runtime's lifetime. */
void tpuc_process_info_get(tpuc_runtime *rt, tpuc_process_info *out);

typedef struct {
  int id;                  /* the plugin's global device id */
  int local_index;         /* tpuc's index: 0 .. device_count-1 */
  const char *kind;        /* e.g. "cpu", "TPU v5 lite" */
  const char *description; /* the plugin's debug string */
} tpuc_device_info;

tpuc_status *tpuc_device_info_get(const tpuc_runtime *rt, int device, tpuc_device_info *out);

/* tpuc's own accounting of live device bytes (buffers it created). */
typedef struct {
  int64_t bytes_in_use;
  int64_t peak_bytes_in_use;
  int64_t num_buffers;
  int64_t num_allocs; /* buffers ever created on the device */
  int64_t limit_bytes; /* tpuc's limit (0: none) */
  int64_t num_ooms;    /* allocations refused: over the limit or by the plugin */
} tpuc_memory_stats;

tpuc_status *tpuc_memory_stats_get(tpuc_runtime *rt, int device, tpuc_memory_stats *out);
tpuc_status *tpuc_memory_reset_peak(tpuc_runtime *rt, int device);
/* A limit on tpuc's device bytes (0: none; $TPUC_MEMORY_LIMIT sets it for
 * every device at creation, e.g. "8G"). An upload or a program launch that
 * would take the bytes in use (plus the program's scratch) past it fails
 * with TPUC_ERR_OUT_OF_MEMORY before the plugin allocates anything, as a
 * device's own memory would; the process stays usable. Out-of-memory errors
 * of the plugin itself are TPUC_ERR_OUT_OF_MEMORY too, and every such
 * message says what was requested, what is in use, the peak and what to try. */
tpuc_status *tpuc_memory_set_limit(tpuc_runtime *rt, int device, int64_t bytes);

typedef struct {
  int64_t executions;      /* programs launched */
  int64_t compiles;        /* programs compiled by the plugin */
  int64_t cache_hits;      /* compile requests served from the cache */
  int64_t cache_misses;    /* compile requests that compiled */
  double compile_seconds;  /* wall time spent in the plugin's compiler */
  int64_t cached_executables;
  /* the disk tier */
  int64_t disk_hits;       /* memory misses served from the disk cache */
  int64_t disk_misses;     /* memory misses not found on disk (then compiled) */
  int64_t disk_writes;     /* executables written to the disk cache */
  int64_t disk_corrupt;    /* bad files found, removed and recompiled */
  int64_t disk_evictions;  /* files removed to respect the size bound */
  double load_seconds;     /* wall time spent loading cached executables on demand */
  int64_t donations;       /* argument buffers a program reused for its outputs */
  int64_t compiles_ahead;  /* programs handed to the compile pool ahead of need */
  int64_t compile_joins;   /* compile requests that waited for the same compile in flight */
  int64_t preloaded;       /* executables the preload put in the memory cache ahead of use */
  double preload_seconds;  /* wall time the preload's thread spent loading them */
} tpuc_runtime_stats;

void tpuc_runtime_stats_get(tpuc_runtime *rt, tpuc_runtime_stats *out);

/* ---- buffers ----------------------------------------------------------- */

/* A buffer is immutable device data of one dtype and shape. Reference
 * counted: created with one reference; tpuc_buffer_release drops one and
 * destroys the buffer at zero. */
typedef struct tpuc_buffer tpuc_buffer;

/* Copies `data` (dense, row-major) to `device`. The data may be freed as soon
 * as the call returns. */
tpuc_status *tpuc_buffer_from_host(tpuc_runtime *rt, int device, tpuc_dtype dtype,
                                   const int64_t *dims, int ndim, const void *data,
                                   tpuc_buffer **out);
/* Copies the buffer to `dst` (dense, row-major, `nbytes` =
 * tpuc_buffer_nbytes). Waits for the data; returns the device error that
 * produced the buffer if there was one. */
tpuc_status *tpuc_buffer_to_host(tpuc_buffer *b, void *dst, size_t nbytes);
/* Waits until the buffer's data is ready; returns its error if it failed. */
tpuc_status *tpuc_buffer_await(tpuc_buffer *b);
/* True when the data is ready (or failed). */
bool tpuc_buffer_is_ready(tpuc_buffer *b);

typedef void (*tpuc_ready_fn)(tpuc_status *status, void *user);
/* Calls fn once the buffer is ready, possibly on a plugin thread, possibly
 * before this returns. fn owns `status` (NULL on success). */
tpuc_status *tpuc_buffer_on_ready(tpuc_buffer *b, tpuc_ready_fn fn, void *user);

tpuc_buffer *tpuc_buffer_retain(tpuc_buffer *b);
void tpuc_buffer_release(tpuc_buffer *b);

tpuc_dtype tpuc_buffer_dtype(const tpuc_buffer *b);
int tpuc_buffer_ndim(const tpuc_buffer *b);
const int64_t *tpuc_buffer_dims(const tpuc_buffer *b);
int64_t tpuc_buffer_numel(const tpuc_buffer *b);
size_t tpuc_buffer_nbytes(const tpuc_buffer *b);
int tpuc_buffer_device(const tpuc_buffer *b);

/* ---- programs ---------------------------------------------------------- */

/* A compiled program, loaded on the client. Reference counted; the runtime's
 * cache holds one reference of its own. */
typedef struct tpuc_executable tpuc_executable;

/* Compiles StableHLO text (a `module` with a public `func.func @main`), or
 * returns the cached executable for the same text, compile options, platform
 * and plugin version. On a parse or compile failure the status carries the
 * plugin's message. */
tpuc_status *tpuc_compile(tpuc_runtime *rt, const char *mlir, size_t len, tpuc_executable **out);

tpuc_executable *tpuc_executable_retain(tpuc_executable *e);
void tpuc_executable_release(tpuc_executable *e);

int tpuc_executable_num_outputs(const tpuc_executable *e);
tpuc_dtype tpuc_executable_output_dtype(const tpuc_executable *e, int i);
int tpuc_executable_output_ndim(const tpuc_executable *e, int i);
const int64_t *tpuc_executable_output_dims(const tpuc_executable *e, int i);

/* Runs `e` on `device` with `nargs` argument buffers (all on that device).
 * On success outs[0..num_outputs-1] receive new buffers (one reference each).
 * Asynchronous: the outputs may still be computing; reading them waits. With
 * `wait` set, the call waits for completion and returns the device error. */
tpuc_status *tpuc_execute(tpuc_executable *e, int device, tpuc_buffer *const *args,
                          int nargs, tpuc_buffer **outs, bool wait);

/* ---- storages ----------------------------------------------------------
 * A storage is what a PyTorch storage points at: `nbytes` of device memory
 * expressed as (at most) one immutable buffer. Writing a storage binds a new
 * buffer to it; a storage never written has no buffer and reads as zeros.
 * The buffer may have any dtype and shape whose byte size is `nbytes`
 * (buffers keep the shape they were produced in). */
typedef struct tpuc_storage tpuc_storage;

tpuc_status *tpuc_storage_create(tpuc_runtime *rt, int device, size_t nbytes, tpuc_storage **out);
void tpuc_storage_destroy(tpuc_storage *s);
size_t tpuc_storage_nbytes(const tpuc_storage *s);
int tpuc_storage_device(const tpuc_storage *s);
/* The bound buffer with one reference for the caller, or NULL if none. */
tpuc_buffer *tpuc_storage_get_buffer(tpuc_storage *s);
/* Binds `b` (adds a reference; NULL unbinds). Its size must be nbytes. */
tpuc_status *tpuc_storage_set_buffer(tpuc_storage *s, tpuc_buffer *b);
/* Copies dense row-major host data of `dtype` and shape `dims` (whose byte
 * size must equal nbytes) into a new buffer bound to the storage. */
tpuc_status *tpuc_storage_upload(tpuc_storage *s, tpuc_dtype dtype, const int64_t *dims, int ndim,
                                 const void *data);
/* Copies the storage's raw bytes to the host (zeros if never written). */
tpuc_status *tpuc_storage_download(tpuc_storage *s, void *dst, size_t nbytes);
/* Changes nbytes, keeping the first min(old, new) bytes. */
tpuc_status *tpuc_storage_resize(tpuc_storage *s, size_t nbytes);

/* ---- tensors and ops ----------------------------------------------------
 * A tensor is a strided view of a storage, exactly as in PyTorch. */
typedef struct {
  tpuc_storage *storage;
  tpuc_dtype dtype;
  int ndim;
  int64_t sizes[TPUC_MAX_DIMS];
  int64_t strides[TPUC_MAX_DIMS]; /* in elements */
  int64_t offset;                 /* in elements */
} tpuc_tensor;

/* One argument of an ATen op, in schema order. */
typedef enum {
  TPUC_ARG_NONE = 0,  /* an absent optional */
  TPUC_ARG_TENSOR,    /* tensors.first indexes tpuc_op_call.tensors */
  TPUC_ARG_TENSORS,   /* a Tensor[]: tensors.first .. first+count-1 */
  TPUC_ARG_INT,       /* int, SymInt, ScalarType, MemoryFormat, Layout: static */
  TPUC_ARG_INTS,      /* int[], SymInt[]: static */
  TPUC_ARG_BOOL,      /* static */
  TPUC_ARG_BOOLS,     /* bool[]: static (ints.v holds 0/1) */
  TPUC_ARG_STRING,    /* static */
  TPUC_ARG_SCALAR,    /* Scalar or float: a runtime value, never recompiles */
  TPUC_ARG_RNG,       /* Generator?: the device generator's (seed, offset), a runtime value */
} tpuc_arg_kind;

typedef enum { TPUC_SCALAR_BOOL, TPUC_SCALAR_INT, TPUC_SCALAR_FLOAT, TPUC_SCALAR_COMPLEX } tpuc_scalar_kind;

typedef struct {
  tpuc_arg_kind kind;
  union {
    int64_t i; /* INT, BOOL */
    struct {
      const int64_t *v;
      int n;
    } ints; /* INTS, BOOLS */
    struct {
      int first, count;
    } tensors; /* TENSOR, TENSORS */
    const char *s; /* STRING */
    struct {
      tpuc_scalar_kind kind;
      double re, im; /* FLOAT, COMPLEX (and BOOL/INT exactly representable) */
      int64_t i;     /* BOOL, INT */
    } scalar;
    struct {
      uint64_t seed, offset; /* the caller advances its offset by what the op draws */
    } rng;
  };
} tpuc_arg;

typedef struct tpuc_op tpuc_op; /* a lowering, found by name */

typedef struct {
  const tpuc_op *op;
  int device;
  const tpuc_arg *args;
  int nargs;
  const tpuc_tensor *tensors; /* the tensor inputs that args refer to */
  int ntensors;
  /* Where the results go, with their final sizes, strides and dtypes (the
   * caller computes them, e.g. with PyTorch's meta kernels). An output may
   * share a storage with an input (in-place ops, out=) or be a view. None
   * for an op whose only effect is a check (aten::_assert_async). */
  const tpuc_tensor *outputs;
  int noutputs;
} tpuc_op_call;

/* The lowering of an ATen op ("aten::add.Tensor"), or NULL if the core has
 * none. The pointer is stable for the runtime's lifetime: look it up once. */
const tpuc_op *tpuc_op_find(tpuc_runtime *rt, const char *name);
/* Number of ops with a lowering, and the i-th op's name (for coverage). */
int tpuc_op_count(tpuc_runtime *rt);
const char *tpuc_op_name(tpuc_runtime *rt, int i);

/* Runs the op: builds (or finds in the signature cache) one program that
 * reads the input views, computes the op and writes the outputs, launches it
 * asynchronously and binds the new buffers to the output storages. With
 * `wait`, waits for the device and returns its error (debug mode).
 * TPUC_ERR_UNIMPLEMENTED means this call (dtype, argument combination) is
 * outside what the lowering handles: the caller may fall back to the CPU.
 * TPUC_ERR_NOT_COMPILED (only with TPUC_HOST_FIRST=1, strict mode, never
 * with `wait`): the call's program is not compiled yet and has been handed
 * to the compile pool; nothing ran, and the caller runs the op another way
 * (the glue: on the host, as PyTorch's CPU kernel) and asks again next
 * time. Ops with a generator and ops over TPUC_HOST_FIRST_MAX_MB of
 * tensors never get it: they compile in front of the op as before. */
tpuc_status *tpuc_op_run(tpuc_runtime *rt, const tpuc_op_call *call, bool wait);
/* aten::_assert_async(.msg) is a device-side assert in every mode: its
 * condition is checked inside the program (the op's, a fused chunk's, a
 * graph's) and a false one is reported, with the assert's message, like a
 * deferred bounds check below (at once in DEBUG mode or with `wait`). */

/* Execution modes (PyTorch's semantics in all of them):
 * - STRICT: one program per op, launched asynchronously (the default);
 * - DEBUG: the same, waiting after every op so that a device error is
 *   reported by the op that caused it;
 * - FUSED: ops are recorded per device and run as one program when their
 *   results are needed (a host read, a synchronize, a storage written from
 *   the host), at a size cap, or at a loop boundary (the op sequence that
 *   began the last chunk recurs after as many ops as that chunk had), so a
 *   steady training loop maps onto the same few cached programs. Results
 *   of storages freed meanwhile are never materialised. */
/* - GRAPH: recorded like FUSED but never cut by loop detection; entering
 *   or leaving it flushes nothing, so consecutive compiled graphs (forward,
 *   backward, optimizer step) and the eager ops between them that do not
 *   touch their results join one program. What is pending runs at
 *   tpuc_flush, a host read, or an op in STRICT/DEBUG mode that uses it. */
typedef enum {
  TPUC_MODE_STRICT = 0,
  TPUC_MODE_DEBUG = 1,
  TPUC_MODE_FUSED = 2,
  TPUC_MODE_GRAPH = 3
} tpuc_mode;

/* Switching from FUSED to STRICT or DEBUG flushes what is pending. */
tpuc_status *tpuc_set_mode(tpuc_runtime *rt, tpuc_mode mode);
tpuc_mode tpuc_get_mode(tpuc_runtime *rt);
/* Whether programs may take over the buffers they replace (on by default;
 * $TPUC_DONATE=0 turns it off): a storage's old buffer is donated to the
 * program that computes its new value when nothing else holds it. */
void tpuc_set_donation(tpuc_runtime *rt, bool on);
/* Bounds checks of index values (index, gather, scatter, take, put,
 * embedding, index_select/add/copy/fill, index_put). They are computed
 * inside each op's program and always on in DEBUG mode (and when tpuc_op_run
 * waits), where the op itself fails with TPUC_ERR_INDEX (or TPUC_ERR_RUNTIME
 * for gather/scatter, as PyTorch's RuntimeError) and binds no result. Turned
 * on here (or by $TPUC_CHECK_BOUNDS=1) they also run in STRICT, FUSED and
 * GRAPH modes without any wait: a failure is reported by the next
 * synchronisation point (tpuc_synchronize, a host read of a storage). */
void tpuc_set_check_bounds(tpuc_runtime *rt, bool on);
bool tpuc_get_check_bounds(tpuc_runtime *rt);
/* Ops recorded and not yet run on `device` (-1: all devices). */
int64_t tpuc_pending_ops(tpuc_runtime *rt, int device);
/* Stops the compiles and loads that run beside the caller (compile-ahead's and
 * host-first's pool, the disk cache's preload): those not started are dropped, running ones are
 * waited for, and from then on every compile runs on its caller. For
 * process exit: a compile still running while the plugin's static
 * destructors run crashes in LLVM (the glue calls this from atexit). */
void tpuc_stop_background_compiles(tpuc_runtime *rt);
/* Runs the ops recorded for `device` (-1: every device) now. */
tpuc_status *tpuc_flush(tpuc_runtime *rt, int device);
/* Ends the recorded ops of `device` (-1: every device) as a chunk, as a loop
 * boundary does, without waiting for it: with compile-ahead on
 * (TPUC_COMPILE_AHEAD) a chunk whose program is not compiled yet is queued
 * while the compile pool compiles it, and recording goes on; a read of its
 * results, tpuc_flush or tpuc_synchronize runs it. Otherwise as tpuc_flush. */
tpuc_status *tpuc_flush_cut(tpuc_runtime *rt, int device);
/* tpuc_flush of one device, host-first (TPUC_HOST_FIRST=1; otherwise just
 * tpuc_flush): when the recorded ops' program is not compiled yet, it is
 * handed to the compile pool and the recording is dropped -- nothing ran,
 * no storage changed -- and the answer is TPUC_ERR_NOT_COMPILED: the caller
 * runs those ops another way (the glue: a foreach op on the host). */
tpuc_status *tpuc_flush_host_first(tpuc_runtime *rt, int device);
/* ---- replay: a recorded program launched again ------------------------
 * tpuc_flush_capture runs `device`'s pending ops as one program, as
 * tpuc_flush does, and returns (in *out; NULL when nothing was pending) what
 * launching that program again needs. The program reads and writes a list
 * of storages, its slots (in order of first use); tpuc_replay_launch takes
 * one storage per slot and runs the same executable on their buffers,
 * recording nothing: the caller maps its new arguments onto the slots. */
typedef struct tpuc_replay tpuc_replay;
typedef struct {
  tpuc_storage *storage; /* the storage at capture: for mapping, valid while it lives */
  size_t nbytes;
  bool read;   /* the program reads the slot's initial value */
  bool param;  /* ... from its buffer (false: it held none and read as zeros) */
  bool result; /* the program binds a new buffer to the slot */
  bool constant; /* read from a storage freed by the end of the recording (a CPU scalar
                  * operand the glue uploaded): replay reads the captured buffer itself */
} tpuc_replay_slot;

tpuc_status *tpuc_flush_capture(tpuc_runtime *rt, int device, tpuc_replay **out);
void tpuc_replay_destroy(tpuc_replay *r);
int tpuc_replay_slot_count(const tpuc_replay *r);
void tpuc_replay_slot_info(const tpuc_replay *r, int i, tpuc_replay_slot *out);
/* Slot `slot` (read, not written) is a constant the caller cannot map: a
 * storage still alive that none of its arguments names. Replay reads the
 * buffer it holds now, and reports a mismatch once the storage holds another. */
tpuc_status *tpuc_replay_hold_constant(tpuc_replay *r, int slot);
/* The generator states the recorded ops drew from, in parameter order. */
int tpuc_replay_rng_count(const tpuc_replay *r);
void tpuc_replay_rng(const tpuc_replay *r, int i, uint64_t *seed, uint64_t *offset);
/* Runs the program again: slots[i] takes slot i's place (NULL allowed for a
 * slot neither read nor written), rng holds (seed, offset) per generator
 * state. When a storage no longer fits what the program was compiled for
 * (its size, or its buffer's dtype and shape) *mismatch is set and nothing
 * runs: the caller records the ops again. Asynchronous, donating as
 * tpuc_op_run does. */
tpuc_status *tpuc_replay_launch(tpuc_replay *r, tpuc_storage *const *slots, const uint64_t *rng,
                                bool *mismatch);

/* Flushes, then waits for every program launched on `device` (-1: all) so
 * far, whether or not its results are still alive; returns the first device
 * error among them. */
tpuc_status *tpuc_synchronize(tpuc_runtime *rt, int device);

/* ---- timing markers (runtime/marker.c): torch.tpu.Event(enable_timing=True) ----
 * tpuc_marker_record flushes `device`'s recorded ops and places a marker
 * behind everything launched there, without waiting. When the device has run
 * that work the host's monotonic clock is read (a plugin callback):
 * tpuc_marker_wait waits for that and gives the stamp in nanoseconds (and the
 * device error, if the work failed); tpuc_marker_done asks without waiting.
 * The difference of two stamps is the device time between the markers.
 * Thread-safe; release every marker before tpuc_runtime_destroy. */
typedef struct tpuc_marker tpuc_marker;
tpuc_status *tpuc_marker_record(tpuc_runtime *rt, int device, tpuc_marker **out);
bool tpuc_marker_done(tpuc_marker *m);
tpuc_status *tpuc_marker_wait(tpuc_marker *m, int64_t *ns);
void tpuc_marker_release(tpuc_marker *m);

typedef struct {
  int64_t op_calls;       /* tpuc_op_run calls */
  int64_t fast_hits;      /* served by the signature cache: no text, no compile */
  int64_t fast_misses;    /* lowered and emitted */
  int64_t emitted_bytes;  /* StableHLO text produced */
  int64_t recorded_ops;   /* ops recorded in fused mode */
  int64_t flushes;        /* fused chunks run */
  int64_t chunk_hits;     /* chunks whose program came from the signature cache */
  int64_t chunk_misses;   /* chunks built, emitted and compiled (or loaded) */
  int64_t recompiles;     /* an op compiled for a new signature after an earlier one */
  int64_t ahead_ops;      /* strict ops queued while their programs compiled (exec/ahead.c) */
  int64_t host_first_ops; /* strict ops answered TPUC_ERR_NOT_COMPILED (TPUC_HOST_FIRST=1) */
  int64_t hoisted_fills;  /* fills of new storages run before their fused chunk (fused_hoist.c) */
  int64_t ahead_chunks;   /* fused chunks queued while their programs compiled (fused_ahead.c) */
} tpuc_op_stats;

void tpuc_op_stats_get(tpuc_runtime *rt, tpuc_op_stats *out);

/* The last (up to 64) recompile reasons, one per line, oldest first, each
 * naming what changed ("aten::add.Tensor: input 0 shape [4] -> [8]"). Writes
 * at most n bytes (NUL-terminated) and returns the size needed.
 * TPUC_LOG_RECOMPILES=1 also prints each reason to stderr when it happens. */
size_t tpuc_recompile_reasons(tpuc_runtime *rt, char *buf, size_t n);
int64_t tpuc_recompile_count(tpuc_runtime *rt);

/* Fused chunk replay (exec/fused_replay.c): a chunk whose ops repeat a
 * recently recorded chunk's is launched from that chunk's executable without
 * signing and checking each op. On by default; off: every chunk is recorded.
 * Stats: out[0] chunks replayed, out[1] ops matched, out[2] fallbacks to
 * recording, out[3] reasons noted. Reasons: the last 16 per device, one per
 * line (NUL-terminated, at most n bytes); returns the size needed. */
void tpuc_set_fused_replay(tpuc_runtime *rt, bool on);
void tpuc_fused_replay_stats(tpuc_runtime *rt, int64_t out[4]);
size_t tpuc_fused_replay_reasons(tpuc_runtime *rt, char *buf, size_t n);

/* ---- replicated programs ------------------------------------------------
 * One program run on several devices of the client in one launch: replica r
 * runs on devices[r]. This is what StableHLO collectives (all_reduce, ...)
 * need: on TPU they travel over ICI, on GPU through NCCL, and on the XLA CPU
 * plugin between the devices of one process (TPUC_CPU_DEVICE_COUNT=N). */

/* Compiles `mlir` for ndevices replicas with replica r on devices[r] (local
 * indices, each at most once), through the same caches as tpuc_compile. */
tpuc_status *tpuc_compile_replicated(tpuc_runtime *rt, const char *mlir, size_t len,
                                     const int *devices, int ndevices, tpuc_executable **out);
/* Runs a replicated executable on the devices it was compiled for, given in
 * the same order. args holds ndevices rows of nargs buffers (row r on
 * devices[r]); outs receives ndevices rows of num_outputs new buffers (one
 * reference each), row r on devices[r]. Asynchronous unless `wait`. */
tpuc_status *tpuc_execute_replicated(tpuc_executable *e, const int *devices, int ndevices,
                                     tpuc_buffer *const *args, int nargs, tpuc_buffer **outs,
                                     bool wait);

/* ---- collectives -----------------------------------------------------------
 * A collective over participants devices[0..ndevices-1] (their rank order),
 * compiled once per (kind, reduction, dtype, shape, devices, groups) as one
 * replicated program; then run any number of times, from any thread.
 *
 * Groups: with group_size 0 every participant is in one group; otherwise
 * participants form consecutive groups of group_size (ranks 0..k-1, k..2k-1,
 * ...), and the collective runs inside each group ("rank" below is the rank
 * within the group). Every participant passes an input of the same dtype and
 * shape (desc.dtype, desc.dims).
 *
 *   ALL_REDUCE      out = reduce(inputs of the group), the input's shape
 *   ALL_GATHER      out = the group's inputs concatenated along `dim`
 *   REDUCE_SCATTER  the all_reduce split along `dim` into group_size blocks;
 *                   rank k gets block k (dims[dim] must divide)
 *   ALL_TO_ALL      input split along `dim` into group_size blocks, block j
 *                   sent to rank j; received blocks concatenated along
 *                   `concat_dim` in rank order
 *   PERMUTE         (source, target) rank pairs, each rank at most once as a
 *                   source and once as a target: target gets source's input,
 *                   a rank no pair targets gets zeros (send/recv)
 *   BROADCAST       every rank gets rank `root`'s input, bit for bit
 *
 * Reductions run in the input dtype (as NCCL and XLA do: bf16 sums round in
 * bf16). AVG is SUM then a division by the group size (integers: truncated);
 * bool takes SUM/MAX as or, PRODUCT/MIN as and; complex has no MIN/MAX. */
typedef enum {
  TPUC_COLL_ALL_REDUCE = 0,
  TPUC_COLL_ALL_GATHER,
  TPUC_COLL_REDUCE_SCATTER,
  TPUC_COLL_ALL_TO_ALL,
  TPUC_COLL_PERMUTE,
  TPUC_COLL_BROADCAST
} tpuc_collective_kind;

typedef enum {
  TPUC_REDUCE_SUM = 0,
  TPUC_REDUCE_AVG,
  TPUC_REDUCE_PRODUCT,
  TPUC_REDUCE_MIN,
  TPUC_REDUCE_MAX
} tpuc_reduce_op;

typedef struct {
  tpuc_collective_kind kind;
  tpuc_reduce_op op;  /* ALL_REDUCE, REDUCE_SCATTER */
  int dim;            /* ALL_GATHER, REDUCE_SCATTER; ALL_TO_ALL: the split dim */
  int concat_dim;     /* ALL_TO_ALL */
  int root;           /* BROADCAST: a rank within the group */
  const int *pairs;   /* PERMUTE: npairs (source, target) rank pairs */
  int npairs;
  int group_size;     /* 0: one group of all participants */
  const int *devices; /* the participants (local device indices), in rank order */
  int ndevices;
  tpuc_dtype dtype;   /* every participant's input */
  int ndim;
  const int64_t *dims;
} tpuc_collective_desc;

typedef struct tpuc_collective tpuc_collective;

/* Validates the description (a clear INVALID_ARGUMENT otherwise; a dtype or
 * reduction the plugin cannot run is UNIMPLEMENTED or COMPILE) and compiles
 * the program (cached: a second create of the same collective compiles
 * nothing). */
tpuc_status *tpuc_collective_create(tpuc_runtime *rt, const tpuc_collective_desc *desc,
                                    tpuc_collective **out);
void tpuc_collective_destroy(tpuc_collective *c);
/* Every participant's output: dtype (the input's), rank and dims. */
int tpuc_collective_output_ndim(const tpuc_collective *c);
const int64_t *tpuc_collective_output_dims(const tpuc_collective *c);
/* Runs on dense buffers: inputs[r] on devices[r] with the input's dtype and
 * shape; outputs[r] receives a new buffer (one reference) on devices[r].
 * Asynchronous unless `wait`. */
tpuc_status *tpuc_collective_run(tpuc_collective *c, tpuc_buffer *const *inputs,
                                 tpuc_buffer **outputs, bool wait);
/* The same on tensors (strided views of storages, as PyTorch's): reads
 * inputs[r] (any strides and offset; storage on devices[r]) and writes
 * outputs[r] (sizes = the output's dims, dtype = the input's; may be the
 * input itself for in-place collectives, or any view). Pending fused ops on
 * these storages run first. */
tpuc_status *tpuc_collective_run_tensors(tpuc_collective *c, const tpuc_tensor *inputs,
                                         const tpuc_tensor *outputs, bool wait);
/* The runtime a storage belongs to (for clients that hold only storages,
 * such as Python code reaching a PyTorch tensor's storage). */
tpuc_runtime *tpuc_storage_runtime(const tpuc_storage *s);

/* ---- events (profilers, diagnostics) ------------------------------------
 * An observer set with tpuc_set_event_hook sees what the runtime does:
 * a program built and compiled (COMPILE, begin/end, named by the op or
 * "fused chunk"), launched (EXECUTE, begin/end around the launch; then
 * DEVICE_DONE, from a plugin thread, when its results are ready), data
 * moved (TO_DEVICE, TO_HOST: begin/end, `bytes`; TO_HOST includes waiting
 * for the data) and a recompile (RECOMPILE, instant: `detail` says what
 * changed). Begin and end of one event come on the caller's thread, in
 * nested order. The hook must not call back into the runtime. Events cost
 * nothing while no hook is set. */
typedef enum {
  TPUC_EVENT_COMPILE = 0,
  TPUC_EVENT_EXECUTE,
  TPUC_EVENT_DEVICE_DONE,
  TPUC_EVENT_TO_DEVICE,
  TPUC_EVENT_TO_HOST,
  TPUC_EVENT_RECOMPILE
} tpuc_event_kind;

typedef enum { TPUC_EVENT_BEGIN = 0, TPUC_EVENT_END, TPUC_EVENT_INSTANT } tpuc_event_phase;

typedef struct {
  tpuc_event_kind kind;
  tpuc_event_phase phase;
  const char *name;   /* the op ("aten::add.Tensor"), "fused chunk", or "" */
  const char *detail; /* RECOMPILE: the reason; else "" */
  int device;
  int64_t bytes;      /* TO_DEVICE / TO_HOST */
  uint64_t id;        /* EXECUTE and its DEVICE_DONE share one id */
} tpuc_event;

typedef void (*tpuc_event_fn)(const tpuc_event *ev, void *user);
/* Sets (fn NULL: removes) the runtime's one observer. */
void tpuc_set_event_hook(tpuc_runtime *rt, tpuc_event_fn fn, void *user);
/* DEVICE_DONE events cost a callback per launch: off until asked for. */
void tpuc_set_event_device_done(tpuc_runtime *rt, bool on);
/* An observer that ignores most launches (a profiler's ranges, while no
 * profiler runs) may set a gate: asked once per launch, with the hook's
 * user, before its EXECUTE begin; false reports nothing of that launch (no
 * begin, end or DEVICE_DONE). NULL (the default): every launch is reported.
 * The gate must not call back into the runtime. */
typedef bool (*tpuc_event_gate_fn)(void *user);
void tpuc_set_event_gate(tpuc_runtime *rt, tpuc_event_gate_fn gate);

#ifdef __cplusplus
}
#endif
#endif /* TPUC_H */
